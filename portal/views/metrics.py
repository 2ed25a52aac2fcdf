"""The Prometheus scrape endpoint, /metrics: the exposition ``portal.metrics`` composes from the
apps' sections (monitoring's usage, scheduling's shares and syncs), behind its own access check."""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from portal.metrics import build_registry

logger = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "::1"})
_PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def metrics_allowed(request: HttpRequest) -> tuple[bool, int]:
    """Decide whether this request may read /metrics; return ``(allowed, status if refused)``.

    * ``FAIRSHARE_METRICS_TOKEN`` set: only ``Authorization: Bearer <token>`` (compared in
      constant time) is let in, from anywhere; anything else is 401.
    * Not set (the default): only where ``FAIRSHARE_METRICS_LOOPBACK`` allows it (on where
      cookies are not secure: the demo and development; off in production, issue 27), direct
      loopback requests (``REMOTE_ADDR`` 127.0.0.1 or ::1 *and* no proxy header such as
      X-Forwarded-For) are let in; anything else is 403. In production a sidecar or any other
      process of the pod is loopback too, so there the token is the only way in.
    """
    token = getattr(settings, "FAIRSHARE_METRICS_TOKEN", "") or ""
    if token:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), token.encode()
        )
        return ok, 401
    if not getattr(settings, "FAIRSHARE_METRICS_LOOPBACK", False):
        return False, 403
    local = request.META.get("REMOTE_ADDR") in LOOPBACK
    proxied = any(request.META.get(header) for header in _PROXY_HEADERS)
    return local and not proxied, 403


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Serve the Prometheus text exposition of :mod:`portal.metrics`."""
    allowed, status = metrics_allowed(request)
    if not allowed:
        response = HttpResponse(
            "Forbidden: /metrics needs a bearer token (FAIRSHARE_METRICS_TOKEN).\n",
            status=status,
            content_type="text/plain; charset=utf-8",
        )
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="fairshare-metrics"'
        return response
    body = generate_latest(build_registry())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
