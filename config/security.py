"""Content-Security-Policy header (Django 5.2 has none built in).

The UI loads scripts and styles only from our own origin (htmx and Chart.js are vendored under
static/vendor/); inline scripts are forbidden. Inline *style attributes* are allowed because the
bars and progress meters are sized with ``style="width: …"``.
"""

from __future__ import annotations

from django.conf import settings

DEFAULT_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = getattr(settings, "FAIRSHARE_CSP", DEFAULT_POLICY)
        self.header = (
            "Content-Security-Policy-Report-Only"
            if getattr(settings, "FAIRSHARE_CSP_REPORT_ONLY", False)
            else "Content-Security-Policy"
        )

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy and self.header not in response:
            response[self.header] = self.policy
        return response
