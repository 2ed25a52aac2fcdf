"""Error pages in the product's layout (400, 403, 404, 405, 500), and JSON errors under ``/api/``.

Django's own handlers render ``templates/4xx.html`` with the request, so the navigation shows;
its 500 handler renders without one (the failure may have come from a context processor or the
database), so ours tries the full layout and falls back to a page that needs nothing. API
clients get the API's one error shape (``config.api.error_body``) instead of HTML.

Django has no handler for 405: ``require_POST`` and ``http_method_names`` answer with an empty
body. ``MethodNotAllowedPageMiddleware`` gives those responses ``templates/405.html`` (the
layout, the allowed methods named) for pages that accept HTML; the API keeps Django REST
framework's JSON, and the ``Allow`` header is kept.
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


def _not_allowed_words(method: str, allowed: list[str]) -> str:
    """Why the 405, in words: ``This address does not take GET: it takes POST only ...``."""
    if allowed == ["POST"]:
        return (
            f"This address does not take {method}: it takes POST only, sent by a form's "
            "button on the page that shows it (opening or reloading the address sends GET). "
            "Nothing was changed."
        )
    if allowed:
        return (
            f"This address does not take {method}; it takes {', '.join(allowed)}. "
            "Nothing was changed."
        )
    return f"This address does not take {method}. Nothing was changed."


class MethodNotAllowedPageMiddleware:
    """Render an empty 405 (``require_POST``, ``http_method_names``) as the styled 405 page.

    Only outside ``/api/``, only for a request that accepts HTML, and only where the view gave
    no body of its own; status and ``Allow`` header stay as they were.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code != 405
            or _is_api(request)
            or response.content
            or getattr(response, "streaming", False)
            or not request.accepts("text/html")
        ):
            return response
        allowed = [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]
        page = HttpResponse(
            loader.render_to_string(
                "405.html",
                {"explanation": _not_allowed_words(request.method, allowed)},
                request=request,
            ),
            status=405,
        )
        if "Allow" in response:
            page["Allow"] = response["Allow"]
        return page
