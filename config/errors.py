"""Error pages in the product's layout (400, 403, 404, 500), and JSON errors under ``/api/``.

Django's own handlers render ``templates/4xx.html`` with the request, so the navigation shows;
its 500 handler renders without one (the failure may have come from a context processor or the
database), so ours tries the full layout and falls back to a page that needs nothing. API
clients get the API's one error shape (``config.api.error_body``) instead of HTML.
"""

from __future__ import annotations

import logging

from django.http import HttpResponse, HttpResponseServerError, JsonResponse
from django.template import loader
from django.views import defaults

from config.api import DETAIL, error_body

log = logging.getLogger(__name__)


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def bad_request(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body({DETAIL: ["Bad request."]}), status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body({DETAIL: ["Not allowed."]}), status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body({DETAIL: ["Not found."]}), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _is_api(request):
        body = error_body({DETAIL: ["Server error: the failure was logged; nothing was changed."]})
        return JsonResponse(body, status=500)
    try:
        return HttpResponseServerError(loader.render_to_string("500.html", request=request))
    except Exception:  # the layout itself failed (database down, broken context processor)
        log.exception("the 500 page could not be rendered in the layout")
        return HttpResponse(loader.render_to_string("500_plain.html"), status=500)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: Django's own renders without the request (no navigation)."""
    if _is_api(request):
        return JsonResponse(error_body({DETAIL: [f"CSRF check failed: {reason}"]}), status=403)
    return HttpResponse(loader.render_to_string("403_csrf.html", request=request), status=403)
