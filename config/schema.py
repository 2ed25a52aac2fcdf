"""OpenAPI schema post-processing: declare what every operation can answer besides success.

drf-spectacular documents the success response of each operation. The API also answers, in one
error shape (``{"errors": {field: [messages]}}``, config/api.py), with:

* 400 for invalid input (any operation: a bad query parameter is a 400 too), 401 without valid
  credentials, 403 when the user or token may not, 404 for objects the user cannot see (and
  pages past the end), 406 for an ``Accept`` the operation cannot produce, 429 when throttled;
* writes also 409 (a state the change cannot apply to), 413 (body over the size limit) and 415
  (a content type no parser reads).

An operation that answers CSV (chargeback) answers its errors as CSV lines too. Optional query
parameters are also marked ``allowEmptyValue``: django-filter reads
``?team=`` as "no filter", which is what a client that clears a search field sends.
"""

from __future__ import annotations

from typing import Any

ERROR_COMPONENT = "ErrorResponse"
ERROR_SCHEMA = {
    "type": "object",
    "description": "Every 4xx: messages per field; `detail` for those that belong to none.",
    "properties": {
        "errors": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        }
    },
    "required": ["errors"],
}
ANY_OPERATION = {
    "400": "Invalid input; the messages name the fields.",
    "401": "No valid credentials.",
    "403": "The user or token may not do this.",
    "404": "No such object (or one the user cannot see), or no such page.",
    "406": "The Accept header names no format this operation produces.",
    "429": "Throttled; retry after the Retry-After header's seconds.",
}
WRITES = {
    "409": "The object is in a state the change cannot apply to.",
    "413": "The request body is over the size limit.",
    "415": "The request body's content type is not one this operation reads.",
}
WRITE_METHODS = {"post", "put", "patch", "delete"}


def declare_errors(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"])."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components[ERROR_COMPONENT] = ERROR_SCHEMA
    ref = {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            errors = dict(ANY_OPERATION)
            if method in WRITE_METHODS:
                errors |= WRITES
            responses = operation["responses"]
            content: dict[str, Any] = {"application/json": {"schema": ref}}
            for status, response in responses.items():
                # An operation that answers CSV answers its errors in CSV too ("field,message").
                for media_type in (response.get("content") or {}) if status[0] == "2" else ():
                    if media_type != "application/json":
                        content.setdefault(media_type, {"schema": {"type": "string"}})
            for status, description in errors.items():
                responses.setdefault(status, {"description": description, "content": content})
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and not parameter.get("required"):
                    parameter["allowEmptyValue"] = True
    return result
