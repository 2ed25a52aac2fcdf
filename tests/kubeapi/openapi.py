"""The fake API server's OpenAPI documents: ``/openapi/v3`` (and a JSON ``/openapi/v2``).

kubectl (>= 1.27) decides how to validate from OpenAPI v3: ``resource.NewQueryParamVerifierV3``
(k8s.io/cli-runtime ``pkg/resource/query_param_verifier_v3.go``) looks, for the object's
group/version/kind, for a PATCH operation carrying ``x-kubernetes-group-version-kind`` and a
``fieldValidation`` query parameter; when it finds one it leaves validation to the server
(``fieldValidation=Strict``, which the fake honours), otherwise it validates on the client
against the schemas. The documents follow the kube-apiserver's layout
(``k8s.io/kube-openapi`` ``pkg/handler3``): a root listing one document per group version under
``paths``, each with ``serverRelativeURL``, and per group version an OpenAPI 3.0 document with
the REST paths of its kinds and ``components.schemas``.

Schemas: the Kubernetes definitions shipped with ``kubernetes-validate`` (the same generated
OpenAPI, as JSON Schema: references and nullable types are translated back) and, for Volcano's
and Kueue's kinds, the CRDs' ``openAPIV3Schema`` (with their ``x-kubernetes-validations``).
kubectl's protobuf v2 (``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``) is not
served; ``/openapi/v2`` answers JSON for other tools.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import validation
from .kinds import Kind

KUBERNETES_VERSION = "v1.33.0"
_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)
_CRDS = {
    "Queue": ("scheduling.volcano.sh_queues.yaml", "v1beta1"),
    "PodGroup": ("scheduling.volcano.sh_podgroups.yaml", "v1beta1"),
    "Job": ("batch.volcano.sh_jobs.yaml", "v1alpha1"),
    # Kueue: the v1beta2 versions of the CRDs copied from kubernetes-sigs/kueue
    # (commit ff69552e79ad21652c36caa97038382e55625cf7), see validation.KUEUE_CRDS.
    **{
        kind: (filename, validation.KUEUE_VERSION)
        for kind, filename in validation.KUEUE_CRDS.items()
    },
}
_CORE_GROUPS = {"": "core", "rbac.authorization.k8s.io": "rbac", "scheduling.k8s.io": "scheduling"}


@functools.cache
def _kubernetes_definitions() -> dict[str, Any]:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    data = json.loads((base / f"{KUBERNETES_VERSION}-local" / "_definitions.json").read_text())
    return data.get("$defs") or data.get("definitions") or {}


def _to_openapi(schema: Any) -> Any:
    """JSON Schema → OpenAPI 3.0 schema: ``#/$defs/`` refs, ``type: [t, "null"]`` → nullable."""
    if isinstance(schema, list):
        return [_to_openapi(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace("#/$defs/", "#/components/schemas/").replace(
                "#/definitions/", "#/components/schemas/"
            )
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if types:
                out["type"] = types[0]
            if "null" in value:
                out["nullable"] = True
        elif key in ("$schema", "$id"):
            continue
        else:
            out[key] = _to_openapi(value)
    return out


def _definition_name(kind: Kind) -> str | None:
    group = _CORE_GROUPS.get(kind.group)
    if group is None:
        return None
    prefix = "io.k8s.api.core" if group == "core" else f"io.k8s.api.{group}"
    return f"{prefix}.{kind.version}.{kind.kind}"


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[-1]
            else:
                yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _schemas(kinds: Sequence[Kind]) -> dict[str, Any]:
    definitions = _kubernetes_definitions()
    out: dict[str, Any] = {}
    todo: list[str] = []
    for kind in kinds:
        if kind.kind in _CRDS:
            filename, version = _CRDS[kind.kind]
            schema = copy.deepcopy(validation.crd_schema(filename, version))
            schema["x-kubernetes-group-version-kind"] = [
                {"group": kind.group, "version": kind.version, "kind": kind.kind}
            ]
            out[f"{kind.group}.{kind.version}.{kind.kind}"] = schema
            continue
        name = _definition_name(kind)
        if name and name in definitions:
            todo.append(name)
    while todo:
        name = todo.pop()
        if name in out or name not in definitions:
            continue
        out[name] = _to_openapi(definitions[name])
        todo.extend(_refs(definitions[name]))
    return out


def _schema_name(kind: Kind) -> str:
    if kind.kind in _CRDS:
        return f"{kind.group}.{kind.version}.{kind.kind}"
    return _definition_name(kind) or kind.kind


def _parameter(name: str, where: str = "query", *, required: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required,
        "schema": {"type": "string"},
        "uniqueItems": True,
    }


def _paths(kinds: Sequence[Kind]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for kind in kinds:
        base = "/api/v1" if not kind.group else f"/apis/{kind.api_version}"
        scope = f"{base}/namespaces/{{namespace}}" if kind.namespaced else base
        gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
        ref = {"$ref": f"#/components/schemas/{_schema_name(kind)}"}
        json_body = {"application/json": {"schema": ref}}
        path_params = [_parameter("name", "path", required=True)]
        if kind.namespaced:
            path_params.append(_parameter("namespace", "path", required=True))
        write_params = [_parameter(p) for p in ("dryRun", "fieldManager", "fieldValidation")]

        def op(
            action: str,
            operation: str,
            kind: Kind = kind,
            gvk: dict[str, str] = gvk,
            json_body: dict[str, Any] = json_body,
            **extra: Any,
        ) -> dict[str, Any]:
            return {
                "operationId": f"{operation}{kind.kind}",
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK", "content": json_body}},
                **extra,
            }

        paths[f"{scope}/{kind.plural}/{{name}}"] = {
            "parameters": path_params,
            "get": op("get", "read"),
            "put": op(
                "put",
                "replace",
                parameters=write_params,
                requestBody={"content": json_body, "required": True},
            ),
            "patch": op(
                "patch",
                "patch",
                parameters=[*write_params, _parameter("force")],
                requestBody={
                    "content": {t: {"schema": {"type": "object"}} for t in _PATCH_TYPES},
                    "required": True,
                },
            ),
            "delete": op("delete", "delete", parameters=[_parameter("dryRun")]),
        }
        collection = {
            "get": op(
                "list",
                "list",
                parameters=[
                    _parameter(p) for p in ("labelSelector", "fieldSelector", "limit", "continue")
                ],
            ),
            "post": op(
                "post",
                "create",
                parameters=write_params,
                requestBody={"content": json_body, "required": True},
            ),
        }
        if kind.namespaced:
            collection["parameters"] = [_parameter("namespace", "path", required=True)]
        paths[f"{scope}/{kind.plural}"] = collection
    return paths


def _group_versions(kinds: Sequence[Kind]) -> dict[str, list[Kind]]:
    groups: dict[str, list[Kind]] = {}
    for kind in kinds:
        key = "api/v1" if not kind.group else f"apis/{kind.api_version}"
        groups.setdefault(key, []).append(kind)
    return groups


@functools.lru_cache(maxsize=64)
def _v3_document(kinds: tuple[Kind, ...]) -> dict[str, Any]:
    """One group version's document (cached: the schemas are fixed, and Workload's alone is
    a megabyte; callers only serialise it)."""
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (fairshare fake)", "version": KUBERNETES_VERSION},
        "paths": _paths(kinds),
        "components": {"schemas": _schemas(kinds)},
    }


@functools.lru_cache(maxsize=64)
def _hash(kinds: tuple[Kind, ...]) -> str:
    text = json.dumps(_v3_document(kinds), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16].upper()


def document(segs: list[str], kinds: Sequence[Kind]) -> dict[str, Any] | None:
    """The document at ``/openapi/<segs>``, or None (404)."""
    groups = _group_versions(kinds)
    if segs == ["v3"]:
        return {
            "paths": {
                key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={_hash(tuple(groups[key]))}"}
                for key in sorted(groups)
            }
        }
    if segs[:1] == ["v3"] and "/".join(segs[1:]) in groups:
        return _v3_document(tuple(groups["/".join(segs[1:])]))
    if segs == ["v2"]:
        v3 = _v3_document(tuple(kinds))
        definitions = json.loads(
            json.dumps(v3["components"]["schemas"]).replace(
                "#/components/schemas/", "#/definitions/"
            )
        )
        return {
            "swagger": "2.0",
            "info": v3["info"],
            "paths": {
                path: {
                    method: {
                        key: value
                        for key, value in operation.items()
                        if key not in ("requestBody", "responses")
                    }
                    | {"responses": {"200": {"description": "OK"}}}
                    if isinstance(operation, dict) and method != "parameters"
                    else operation
                    for method, operation in item.items()
                }
                for path, item in v3["paths"].items()
            },
            "definitions": definitions,
        }
    return None
