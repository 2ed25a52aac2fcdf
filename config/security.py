"""Security middleware: Content-Security-Policy, NUL characters refused, no-store caching.

Content-Security-Policy (Django 5.2 has none built in): the UI loads scripts and styles only from
our own origin (htmx and Chart.js are vendored under static/vendor/); inline scripts are
forbidden. Inline *style attributes* are allowed because the bars and progress meters are sized
with ``style="width: …"``.
"""

from __future__ import annotations

import ipaddress

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


class InClusterEndpointsMiddleware:
    """Serve the probes (``/healthz``, ``/readyz``) and ``/metrics`` to in-cluster callers that
    address the pod by its IP, whatever ``ALLOWED_HOSTS`` says.

    The kubelet's HTTP probe sends ``Host: <pod IP>:<port>`` (Kubernetes
    ``pkg/probe/http/request.go``, ``NewRequestForHTTPGetAction``: the URL's host is the pod IP
    unless the probe sets ``host``), and so does a Prometheus scrape of a ServiceMonitor's
    endpoints (the target's ``__address__``). Django would answer both with 400: a pod IP is
    not, and should not be, one of the public site's host names. The exemption is narrow:

    * only ``GET``/``HEAD`` of exactly these three paths (none of their views builds a URL,
      redirects or sets a cookie, so the Host header is never used: there is nothing for a
      forged Host to poison);
    * only when the Host is an IP address literal (with or without a port), which no browser
      sends for the public site's name; every other request, these paths included, goes
      through Django's host validation as before;
    * ``/metrics`` keeps its own access check (``FAIRSHARE_METRICS_TOKEN`` bearer token, or
      loopback only): a scrape still needs the token.

    Place it first: ``CommonMiddleware`` (and ``SecurityMiddleware``'s HTTPS redirect) call
    ``request.get_host()``, which raises DisallowedHost for such a Host.
    """

    PATHS = ("/healthz", "/readyz", "/metrics")

    def __init__(self, get_response):
        self.get_response = get_response
        self._views = None

    def _view(self, path: str):
        if self._views is None:
            from config.health import healthz, readyz
            from portal.views.metrics import metrics

            self._views = {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics}
        return self._views[path]

    def __call__(self, request):
        if (
            request.path_info in self.PATHS
            and request.method in ("GET", "HEAD")
            and is_ip_host(request.META.get("HTTP_HOST", ""))
        ):
            response = self._view(request.path_info)(request)
            add_never_cache_headers(response)
            return response
        return self.get_response(request)


def is_ip_host(host: str) -> bool:
    """True for ``10.1.2.3``, ``10.1.2.3:8000``, ``[fd00::1]`` and ``[fd00::1]:8000``."""
    if host.startswith("["):
        address, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return False
    else:
        address, colon, port = host.partition(":")
        if colon and not port.isdigit():
            return False
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True
