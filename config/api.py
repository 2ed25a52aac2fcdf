"""REST API plumbing shared by every app: the one error shape, pagination, throttles, ETags.

Error shape (every 4xx, documented in docs/api.md)::

    {"errors": {"<field>": ["<message>", ...], ...}}

Messages that belong to no field use the key ``detail``. Nested fields are flattened the way the
services name them: ``lines[0].limit``, ``adjustments.nvidia.com/gpu.guarantee``. Domain errors are
mapped here, once:

==========================================  ======  ==========================================
``quotas.exceptions.InvalidTransition``     409     ``detail``
``quotas.exceptions.QuotaExceeded``         400     the resource name (``nvidia.com/gpu``)
``quotas.exceptions.PermissionDenied``      403     ``detail``
``django.core.exceptions.ValidationError``  400     its fields (``__all__`` becomes ``detail``)
``monitoring...chargeback.ChargebackError`` 400     ``detail``
any other app's ``DomainError``             409     ``detail``
==========================================  ======  ==========================================
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from rest_framework import exceptions, parsers, renderers, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle, UserRateThrottle

from config.net import client_ip
from kube.errors import DomainError as KubeDomainError
from monitoring.domain.chargeback import ChargebackError
from monitoring.exceptions import DomainError as MonitoringDomainError
from quotas import exceptions as quota_errors
from scheduling.exceptions import DomainError as SchedulingDomainError

logger = logging.getLogger(__name__)

DETAIL = "detail"


def error_body(errors: dict[str, list[str]]) -> dict[str, Any]:
    return {"errors": errors}


def flatten_errors(data: Any, prefix: str = "") -> dict[str, list[str]]:
    """Flatten DRF/Django error structures into {field path: [messages]}."""
    out: dict[str, list[str]] = {}

    def put(key: str, messages: list[str]) -> None:
        out.setdefault(key or DETAIL, []).extend(messages)

    if isinstance(data, dict):
        for key, value in data.items():
            name = DETAIL if key in (NON_FIELD_ERRORS, DETAIL, "non_field_errors") else str(key)
            if isinstance(key, int):  # ListField/DictField errors are keyed by position
                path = f"{prefix}[{key}]"
            else:
                path = name if not prefix else (prefix if name == DETAIL else f"{prefix}.{name}")
            for k, v in flatten_errors(value, path).items():
                put(k, v)
    elif isinstance(data, list | tuple):
        if all(isinstance(item, str) for item in data):
            put(prefix, [str(item) for item in data])
        else:
            for index, item in enumerate(data):
                if isinstance(item, str):
                    put(prefix, [str(item)])
                elif item:  # DRF leaves {} for list items without errors
                    for k, v in flatten_errors(item, f"{prefix}[{index}]").items():
                        put(k, v)
    elif data is not None:
        put(prefix, [str(data)])
    return out


def _domain_response(exc: Exception) -> Response | None:
    if isinstance(exc, quota_errors.QuotaExceeded):
        return Response(error_body({exc.resource: [str(exc)]}), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, quota_errors.InvalidTransition):
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, quota_errors.PermissionDenied):
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, DjangoValidationError):
        data = exc.message_dict if hasattr(exc, "error_dict") else {DETAIL: exc.messages}
        return Response(error_body(flatten_errors(data)), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ChargebackError):
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(
        exc,
        quota_errors.DomainError | MonitoringDomainError | SchedulingDomainError | KubeDomainError,
    ):
        # A state the request cannot be applied to (e.g. a sync already running).
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_409_CONFLICT)
    return None


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """REST framework exception handler: domain errors mapped once, every 4xx in one shape."""
    response = _domain_response(exc)
    if response is None:
        # Imported here: rest_framework.views reads the throttle classes defined in this module.
        from rest_framework.views import exception_handler as drf_exception_handler

        response = drf_exception_handler(exc, context)
        if response is None:
            return None  # a real bug: let Django answer 500 and log it
        response.data = error_body(flatten_errors(response.data))
    else:
        view = context.get("view")
        logger.info("%s on %s: %s", type(exc).__name__, type(view).__name__, exc)
    return response


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE allows."
    default_code = "too_large"


class _BoundedParserMixin:
    """Refuse bodies over DATA_UPLOAD_MAX_MEMORY_SIZE before reading them, as Django does for
    forms: REST framework's JSON and form parsers read the raw stream and would otherwise take
    a body of any size into memory. (WSGI streams never yield more than Content-Length.)"""

    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if request is not None and limit is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except (TypeError, ValueError):
                length = 0
            if length > limit:
                raise RequestTooLarge()
        return super().parse(stream, media_type, parser_context)


NUL_MESSAGE = "Null characters are not allowed."
SURROGATE_MESSAGE = "Lone surrogate characters (U+D800 to U+DFFF) are not allowed."
# Deeper than any body the API takes (a quota request's lines are 3 levels); Python's own JSON
# decoder fails with RecursionError (a 500) somewhere near 1,000 (issue 27).
MAX_JSON_DEPTH = 32
DEPTH_MESSAGE = f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep."
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return NUL_MESSAGE
    if _SURROGATE.search(text):
        return SURROGATE_MESSAGE
    return None


def _printable(name: str) -> str:
    """A key as an error may name it: NUL and lone surrogates escaped (\\x00, \\ud800)."""
    name = name.replace("\x00", "\\x00")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", name)


def find_bad_text(data: Any) -> tuple[str, str] | None:
    """The path (``lines[0].resource``) and the rule of the first string, key included, that
    holds NUL or a lone surrogate, or of the first value nested deeper than MAX_JSON_DEPTH.
    Walks without recursion, so no body is too deep for it."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem:
                return (path or DETAIL), problem
        elif isinstance(value, dict | list):
            if depth >= MAX_JSON_DEPTH:
                return (path or DETAIL), DEPTH_MESSAGE
            if isinstance(value, dict):
                children = []
                for key, item in value.items():
                    name = str(key)
                    here = f"{path}.{_printable(name)}" if path else _printable(name)
                    problem = _text_problem(name)
                    if problem:
                        return here, problem
                    children.append((item, here, depth + 1))
            else:
                children = [(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
            stack.extend(reversed(children))
    return None


class _NoNulMixin:
    """Refuse bodies holding NUL (PostgreSQL text cannot store it, so it would fail as a
    database error deep inside a write) or a lone surrogate (no UTF-8 encodes it: the answer
    or the database write would fail) in any string, or nested deeper than MAX_JSON_DEPTH:
    400 naming the field."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ValidationError({DETAIL: [DEPTH_MESSAGE]}) from None
        found = find_bad_text(data)
        if found:
            raise exceptions.ValidationError({found[0]: [found[1]]})
        return data


class BoundedJSONParser(_BoundedParserMixin, _NoNulMixin, parsers.JSONParser):
    pass


class SurrogateSafeJSONRenderer(renderers.JSONRenderer):
    """REST framework's JSON renderer, which writes UTF-8 and so fails (a 500) on a lone
    surrogate, e.g. echoed in an error message; the parser refuses them in bodies, and anything
    that still carries one (a row stored before) is written with ``\\u`` escapes instead."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            escaped = SurrogateSafeJSONRenderer()
            escaped.ensure_ascii = True
            return renderers.JSONRenderer.render(
                escaped, data, accepted_media_type, renderer_context
            )


class StrictCharField(serializers.CharField):
    """Text, and only text: REST framework's CharField also takes numbers (``{"note": 5}``),
    which the schema calls invalid."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictModelSerializer(serializers.ModelSerializer):
    """ModelSerializer whose text fields are StrictCharFields (every API serializer uses it)."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
    }


class StandardPagination(PageNumberPagination):
    """``?page=`` and ``?page_size=`` (1 to 500; more is read as 500).

    A ``page_size`` that is not a whole number is a 400, not quietly the default page size.
    """

    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param, "")
        if raw != "":
            size = int(raw) if raw.isascii() and raw.isdigit() else 0
            if size < 1:
                raise exceptions.ValidationError(
                    {self.page_size_query_param: ["Give a whole number from 1 to 500."]}
                )
            return min(size, self.max_page_size)
        return self.page_size

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] in (self.page_size_query_param, self.page_query_param):
                parameter["schema"] = {"type": "integer", "minimum": 1}
        return parameters


def _ident(throttle, request) -> str:
    from quotas.api.authentication import token_of

    token = token_of(request)
    if token is not None and token.kind != token.Kind.PERSONAL:
        return f"token-{token.pk}"
    # A personal token acts as its user and spends the user's budget: more tokens, no more
    # requests (issue 27).
    if request.user and request.user.is_authenticated:
        return f"user-{request.user.pk}"
    # Not REST framework's get_ident: it believes any X-Forwarded-For the client sends.
    return f"ip-{client_ip(request)}"


class UserOrTokenRateThrottle(UserRateThrottle):
    """UserRateThrottle, keyed per service or node-agent token when one authenticates (each its
    own budget), else per user (personal tokens included) or client address."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": _ident(self, request)}


class ScopedUserOrTokenRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle for views with ``throttle_scope``, keyed like UserOrTokenRateThrottle."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": _ident(self, request)}


def etag_for(*parts: object) -> str:
    return 'W/"' + "-".join(str(p) for p in parts) + '"'


class ConditionalRetrieveMixin:
    """ETag on detail GETs from the object's ``updated`` timestamp; ``If-None-Match`` → 304."""

    def retrieve(self, request, *args, **kwargs):
        instance = self.get_object()
        stamp = getattr(instance, "updated", None)
        etag = etag_for(instance.pk, stamp.timestamp()) if stamp else None
        if etag and etag in request.headers.get("If-None-Match", ""):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        response = Response(self.get_serializer(instance).data)
        if etag:
            response["ETag"] = etag
        return response
