"""REST API plumbing shared by every app: the one error shape, parsers, renderer, pagination,
strict serializers, ETags. It imports no app (the apps' API modules import it).

Error shape (every 4xx, documented in docs/api.md)::

    {"errors": {"<field>": ["<message>", ...], ...}}

Messages that belong to no field use the key ``detail``. Nested fields are flattened the way the
services name them: ``lines[0].limit``, ``adjustments.nvidia.com/gpu.guarantee``. The apps'
domain errors are mapped onto it once, in ``config.api_policy`` (the exception handler, with the
throttles keyed per API token: the parts that know the apps).
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS
from django.db import models
from rest_framework import exceptions, parsers, renderers, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

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
