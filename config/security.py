"""Security middleware: Content-Security-Policy, NUL characters refused, no-store caching.

Content-Security-Policy (Django 5.2 has none built in): the UI loads scripts and styles only from
our own origin (htmx and Chart.js are vendored under static/vendor/); inline scripts are
forbidden. Inline *style attributes* are allowed because the bars and progress meters are sized
with ``style="width: …"``.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.cache import add_never_cache_headers, patch_vary_headers

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


class RejectNullCharactersMiddleware:
    """Answer 400 to a path or query parameter holding a NUL character.

    PostgreSQL text cannot hold NUL, so such a value reaching a query is a database error (a
    500) wherever a view filters on it. The API answers in its error shape, naming the
    parameter; pages get a plain 400. Bodies are checked by the parsers (config/api.py) and
    the forms (Django's CharField refuses NUL).
    """

    MESSAGE = "Null characters are not allowed."

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        bad = None
        if "\x00" in request.path:
            bad = "path"
        else:
            for key, values in request.GET.lists():
                if "\x00" in key or any("\x00" in value for value in values):
                    bad = key.replace("\x00", "\\x00")
                    break
        if bad is not None:
            return self._refuse(request, bad)
        return self.get_response(request)

    def _refuse(self, request, field: str):
        if request.path.startswith("/api/"):
            return JsonResponse({"errors": {field: [self.MESSAGE]}}, status=400)
        return HttpResponseBadRequest(
            f"Bad request: {field}: {self.MESSAGE}\n", content_type="text/plain; charset=utf-8"
        )


class NoStoreForAuthenticatedMiddleware:
    """``Cache-Control: no-store`` (and ``private``) on every response to a signed-in user or a
    request with an ``Authorization`` header: pages and API answers carry one team's data and
    must not stay in a browser's or a proxy's cache. Place it after AuthenticationMiddleware;
    REST framework sets ``request.user`` on the underlying request when a token authenticates.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if (user is not None and user.is_authenticated) or "HTTP_AUTHORIZATION" in request.META:
            add_never_cache_headers(response)
            patch_vary_headers(response, ("Cookie", "Authorization"))
        return response
