"""Validation the fake API server applies before it stores anything.

It follows the real API server where a Fairshare bug would otherwise slip through: DNS-1123
names, label keys and values, quantity syntax, ResourceQuota resource names, LimitRange ordering,
RBAC shapes, PriorityClass values, immutable fields, finalizer names, the Volcano and Kueue CRD
schemas (defaults, OpenAPI schema, ``x-kubernetes-list-type`` uniqueness and, through ``cel.py``,
the ``x-kubernetes-validations`` CEL rules: ``_crd_causes``), and unknown fields. Each problem
is a *cause* dict (``reason``, ``message``, ``field``) as in a ``Status`` body.

One deliberate strictness beyond the real server (``strict_quota_names``): the real server accepts
a bare ``nvidia.com/gpu`` in ``ResourceQuota.spec.hard`` (a qualified name:
``pkg/apis/core/validation/validation.go`` ``ValidateResourceQuotaResourceName`` checks only
names without a ``/`` against the standard quota resources) but quota never enforces it; the fake
rejects it so a renderer that emits it fails its tests. ``limits.<extended>`` (e.g.
``limits.nvidia.com/gpu``) is accepted, as upstream accepts it: a namespace Fairshare adopts may
already carry such a quota (quota only tracks ``requests.<extended>``:
``pkg/quota/v1/evaluator/core/pods.go`` ``podComputeUsageHelper``).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import cel
from .kinds import Kind

Cause = dict[str, str]

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_METADATA_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)

# IsStandardQuotaResourceName (k8s.io/kubernetes pkg/apis/core/helper).
STANDARD_QUOTA_RESOURCES = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods"})
HIGHEST_USER_PRIORITY = 1_000_000_000

CRD_DIR = Path(__file__).resolve().parent


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def invalid(field: str, value: Any, detail: str) -> Cause:
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_fmt(value)}: {detail}",
        "field": field,
    }


def required(field: str, detail: str = "") -> Cause:
    msg = "Required value" + (f": {detail}" if detail else "")
    return {"reason": "FieldValueRequired", "message": msg, "field": field}


def unsupported(field: str, value: Any, allowed: list[str]) -> Cause:
    quoted = ", ".join(json.dumps(a) for a in allowed)
    return {
        "reason": "FieldValueNotSupported",
        "message": f"Unsupported value: {_fmt(value)}: supported values: {quoted}",
        "field": field,
    }


def forbidden(field: str, detail: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def unknown(field: str) -> Cause:
    return {"reason": "FieldValueInvalid", "message": f'unknown field "{field}"', "field": field}


def message_for(causes: list[Cause]) -> str:
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


# --------------------------------------------------------------------------- names


def name_problems(value: str, rule: str) -> list[str]:
    if rule == "label":
        if len(value) > 63:
            return ["must be no more than 63 characters"]
        if not DNS1123_LABEL.match(value):
            return [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                "or '-', and must start and end with an alphanumeric character"
            ]
        return []
    if rule == "path":
        if value in (".", ".."):
            return [f"may not be '{value}'"]
        bad = [c for c in ("/", "%") if c in value]
        return [f"may not contain '{c}'" for c in bad]
    if len(value) > 253:
        return ["must be no more than 253 characters"]
    if not DNS1123_SUBDOMAIN.match(value):
        return [
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        ]
    return []


def qualified_name_problems(value: str) -> list[str]:
    """IsQualifiedName: an optional DNS subdomain prefix and '/', then a 63-character name."""
    prefix, slash, name = value.rpartition("/")
    problems = []
    if slash:
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix):
            problems.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    elif not QUALIFIED_NAME.match(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return problems


# --------------------------------------------------------------------------- quantities


def parse_quantity(value: Any) -> Decimal | None:
    """Return the quantity's value, or None if it is not valid quantity syntax."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str) or not QUANTITY.match(value):
        return None
    from kubernetes.utils import parse_quantity as k8s_parse

    try:
        return Decimal(k8s_parse(value))
    except (ValueError, ArithmeticError):
        return None


def quantity_causes(field: str, value: Any, *, nonnegative: bool = True) -> list[Cause]:
    amount = parse_quantity(value)
    if amount is None:
        return [
            invalid(
                field,
                value,
                "quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )
        ]
    if nonnegative and amount < 0:
        return [invalid(field, value, "must be greater than or equal to 0")]
    return []


def quota_resource_causes(field: str, name: str, *, strict: bool) -> list[Cause]:
    problems = qualified_name_problems(name)
    if problems:
        return [invalid(field, name, p) for p in problems]
    if "/" not in name:
        if name not in STANDARD_QUOTA_RESOURCES and not name.startswith(
            ("hugepages-", "requests.hugepages-")
        ):
            return [invalid(field, name, "must be a standard resource for quota")]
        return []
    # <class>.deviceclass.resource.k8s.io/devices is enforced as it is, by the ResourceClaim
    # evaluator (pkg/quota/v1/evaluator/core/resource_claims.go V1ResourceByDeviceClass).
    prefixed = name.startswith(("requests.", "limits.", "count/")) or name.endswith(
        ".deviceclass.resource.k8s.io/devices"
    )
    if strict and not prefixed and "kubernetes.io/" not in name:
        return [
            invalid(
                field,
                name,
                "quota for an extended resource must use the 'requests.' prefix "
                "(a bare name is never enforced)",
            )
        ]
    return []


# --------------------------------------------------------------------------- objects


def validate(
    kind: Kind,
    obj: dict,
    *,
    old: dict | None = None,
    unknown_fields: str = "reject",
    strict_quota_names: bool = True,
) -> list[Cause]:
    """Return the causes that make ``obj`` invalid (empty list when it is valid).

    ``obj`` may be modified: defaults from the CRD schema are applied and, with
    ``unknown_fields="drop"``, unknown fields are pruned instead of reported.
    """
    causes: list[Cause] = []
    causes += _top_level(kind, obj, unknown_fields)
    causes += _metadata(kind, obj.get("metadata"), unknown_fields)
    check = _KIND_CHECKS.get(kind.kind)
    if check is not None:
        causes += check(
            obj, old=old, unknown_fields=unknown_fields, strict_quota_names=strict_quota_names
        )
    if old is not None:
        causes += _immutable(kind, obj, old)
    return causes


def _top_level(kind: Kind, obj: dict, unknown_fields: str) -> list[Cause]:
    causes = []
    allowed = {"apiVersion", "kind", "metadata", *kind.fields}
    for key in list(obj):
        if key not in allowed:
            if unknown_fields == "drop":
                del obj[key]
            else:
                causes.append(unknown(key))
    return causes


def _metadata(kind: Kind, meta: Any, unknown_fields: str) -> list[Cause]:
    if not isinstance(meta, dict):
        return [required("metadata")]
    causes: list[Cause] = []
    for key in list(meta):
        if key not in _METADATA_FIELDS:
            if unknown_fields == "drop":
                del meta[key]
            else:
                causes.append(unknown(f"metadata.{key}"))
    name = meta.get("name")
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        causes.append(invalid("metadata.name", name, "must be a string"))
    else:
        causes += [invalid("metadata.name", name, p) for p in name_problems(name, kind.name_rule)]
    if not kind.namespaced and meta.get("namespace"):
        causes.append(forbidden("metadata.namespace", "not allowed on this type"))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(invalid("metadata.labels", labels, "must be a map"))
        labels = {}
    for key, value in labels.items():
        field = "metadata.labels"
        causes += [invalid(field, key, p) for p in qualified_name_problems(key)]
        if not isinstance(value, str):
            causes.append(invalid(field, value, "label values must be strings"))
        elif len(value) > 63:
            causes.append(invalid(field, value, "must be no more than 63 characters"))
        elif not LABEL_VALUE.match(value):
            causes.append(
                invalid(
                    field,
                    value,
                    "a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character",
                )
            )
    # objectmeta.go ValidateFinalizers / ValidateFinalizerName: qualified names
    finalizers = meta.get("finalizers") or []
    if not isinstance(finalizers, list):
        causes.append(invalid("metadata.finalizers", finalizers, "must be a list"))
        finalizers = []
    for finalizer in finalizers:
        if not isinstance(finalizer, str):
            causes.append(invalid("metadata.finalizers", finalizer, "must be a string"))
            continue
        causes += [
            invalid("metadata.finalizers", finalizer, p) for p in qualified_name_problems(finalizer)
        ]
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        causes.append(invalid("metadata.annotations", annotations, "must be a map"))
        annotations = {}
    for key, value in annotations.items():
        causes += [invalid("metadata.annotations", key, p) for p in qualified_name_problems(key)]
        if not isinstance(value, str):
            causes.append(invalid("metadata.annotations", value, "must be a string"))
    return causes


def _dict_keys(field: str, value: Any, allowed: set[str]) -> list[Cause]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [invalid(field, value, "must be an object")]
    return [unknown(f"{field}.{k}") for k in value if k not in allowed]


def _resource_quota(obj: dict, *, strict_quota_names: bool, **_: Any) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes = _dict_keys("spec", spec, {"hard", "scopes", "scopeSelector"})
    if causes:
        return causes
    hard = spec.get("hard") or {}
    if not isinstance(hard, dict):
        return [invalid("spec.hard", hard, "must be a map of resource name to quantity")]
    for name, value in hard.items():
        field = f"spec.hard[{name}]"
        causes += quota_resource_causes(field, name, strict=strict_quota_names)
        causes += quantity_causes(field, value)
    return causes


_ALLOCATION_MODES = ["ExactCount", "All"]


def _device_request(field: str, request: Any) -> list[Cause]:
    """The fields of an ``exactly`` request or ``firstAvailable`` subrequest that quota reads
    (pkg/apis/resource/validation/validation.go ``validateDeviceClass``/``validateCount``)."""
    if not isinstance(request, dict):
        return [invalid(field, request, "must be an object")]
    causes = []
    if not request.get("deviceClassName"):
        causes.append(required(f"{field}.deviceClassName"))
    mode = request.get("allocationMode") or "ExactCount"
    count = request.get("count")
    if mode not in _ALLOCATION_MODES:
        causes.append(unsupported(f"{field}.allocationMode", mode, _ALLOCATION_MODES))
    elif mode == "ExactCount" and count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            causes.append(invalid(f"{field}.count", count, "must be greater than zero"))
    elif mode == "All" and count is not None:
        causes.append(invalid(f"{field}.count", count, "must not be specified for All"))
    return causes


def _resource_claim(obj: dict, **_: Any) -> list[Cause]:
    """A ResourceClaim, only as far as ResourceQuota reads it: each of
    ``spec.devices.requests`` has one of ``exactly`` or ``firstAvailable`` (upstream
    ``validateDeviceRequest``), with a device class and a valid count."""
    requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
    if not isinstance(requests, list):
        return [invalid("spec.devices.requests", requests, "must be a list")]
    causes: list[Cause] = []
    for i, request in enumerate(requests):
        base = f"spec.devices.requests[{i}]"
        if not isinstance(request, dict):
            causes.append(invalid(base, request, "must be an object"))
            continue
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if bool(exactly) == bool(first):
            causes.append(
                required(base, "exactly one of `exactly` or `firstAvailable` is required")
            )
        elif exactly:
            causes += _device_request(f"{base}.exactly", exactly)
        elif not isinstance(first, list):
            causes.append(invalid(f"{base}.firstAvailable", first, "must be a list"))
        else:
            for j, sub in enumerate(first):
                causes += _device_request(f"{base}.firstAvailable[{j}]", sub)
    return causes


_LIMIT_TYPES = ["Pod", "Container", "PersistentVolumeClaim"]
_LIMIT_KEYS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


# IsOvercommitAllowed (pkg/apis/core/helper/helpers.go): native resources except hugepages.
_OVERCOMMITTABLE = frozenset({"cpu", "memory", "ephemeral-storage", "storage"})


def _limit_range(obj: dict, **_: Any) -> list[Cause]:
    """``pkg/apis/core/validation/validation.go`` ``ValidateLimitRange``."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes = _dict_keys("spec", spec, {"limits"})
    limits = spec.get("limits")
    if not isinstance(limits, list):
        return [*causes, required("spec.limits")]
    seen_types: set[Any] = set()
    for i, item in enumerate(limits):
        base = f"spec.limits[{i}]"
        if not isinstance(item, dict):
            causes.append(invalid(base, item, "must be an object"))
            continue
        causes += _dict_keys(base, item, {"type", *_LIMIT_KEYS})
        if item.get("type") not in _LIMIT_TYPES:
            causes.append(unsupported(f"{base}.type", item.get("type"), _LIMIT_TYPES))
        if item.get("type") in seen_types:
            causes.append(
                {
                    "reason": "FieldValueDuplicate",
                    "message": f"Duplicate value: {_fmt(item.get('type'))}",
                    "field": f"{base}.type",
                }
            )
        seen_types.add(item.get("type"))
        if item.get("type") == "Pod":
            for key in ("default", "defaultRequest"):
                if item.get(key):
                    causes.append(
                        forbidden(f"{base}.{key}", "may not be specified when `type` is 'Pod'")
                    )
        parsed: dict[str, dict[str, Decimal]] = {}
        for key in _LIMIT_KEYS:
            values = item.get(key) or {}
            if not isinstance(values, dict):
                causes.append(invalid(f"{base}.{key}", values, "must be a map"))
                continue
            for res, q in values.items():
                field = f"{base}.{key}[{res}]"
                problems = qualified_name_problems(res)
                causes += [invalid(field, res, p) for p in problems]
                if (
                    "/" not in res
                    and res not in STANDARD_RESOURCES
                    and not res.startswith("hugepages-")
                ):
                    causes.append(invalid(field, res, "must be a standard resource type"))
                qc = quantity_causes(field, q)
                causes += qc
                if not qc:
                    parsed.setdefault(key, {})[res] = parse_quantity(q)  # type: ignore[assignment]
        for res in {r for d in parsed.values() for r in d}:
            q = {k: parsed.get(k, {}).get(res) for k in _LIMIT_KEYS}
            pairs = [
                ("min", "max", "min value {} is greater than max value {}"),
                ("defaultRequest", "max", "default request value {} is greater than max {}"),
                ("default", "max", "default value {} is greater than max value {}"),
                ("min", "defaultRequest", "min value {} is greater than default request {}"),
                ("min", "default", "min value {} is greater than default value {}"),
                ("defaultRequest", "default", "default request {} is greater than default {}"),
            ]
            for low, high, text in pairs:
                lo, hi = q[low], q[high]
                if lo is not None and hi is not None and lo > hi:
                    causes.append(
                        invalid(
                            f"{base}.{low}[{res}]",
                            item[low][res],
                            text.format(item[low][res], item[high][res]),
                        )
                    )
            # "for GPU, hugepages and other resources that are not allowed to overcommit, the
            # default value and defaultRequest value must match if both are specified"
            d, dr = q["default"], q["defaultRequest"]
            if res not in _OVERCOMMITTABLE and d is not None and dr is not None and d != dr:
                causes.append(
                    invalid(
                        f"{base}.defaultRequest[{res}]",
                        item["defaultRequest"][res],
                        f"default value {item['default'][res]} must equal to defaultRequest "
                        f"value {item['defaultRequest'][res]} in {res}",
                    )
                )
    return causes


_RULE_KEYS = {"apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"}


def _rules(obj: dict, **_: Any) -> list[Cause]:
    rules = obj.get("rules") or []
    if not isinstance(rules, list):
        return [invalid("rules", rules, "must be a list")]
    causes: list[Cause] = []
    for i, rule in enumerate(rules):
        base = f"rules[{i}]"
        causes += _dict_keys(base, rule, _RULE_KEYS)
        if not isinstance(rule, dict):
            continue
        if not rule.get("verbs"):
            causes.append(required(f"{base}.verbs", "verbs must contain at least one value"))
        if obj.get("kind") == "Role" and rule.get("nonResourceURLs"):
            causes.append(
                invalid(
                    f"{base}.nonResourceURLs",
                    rule["nonResourceURLs"],
                    "namespaced rules cannot apply to non-resource URLs",
                )
            )
        if not rule.get("nonResourceURLs") and not rule.get("resources"):
            causes.append(
                required(
                    f"{base}.resources",
                    "resource rules must supply at least one resource",
                )
            )
    return causes


_SUBJECT_KINDS = ["ServiceAccount", "User", "Group"]


def _role_binding(obj: dict, **_: Any) -> list[Cause]:
    causes: list[Cause] = []
    ref = obj.get("roleRef")
    if not isinstance(ref, dict):
        causes.append(required("roleRef"))
    else:
        causes += _dict_keys("roleRef", ref, {"apiGroup", "kind", "name"})
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            causes.append(
                unsupported("roleRef.apiGroup", ref.get("apiGroup"), ["rbac.authorization.k8s.io"])
            )
        if ref.get("kind") not in ("Role", "ClusterRole"):
            causes.append(unsupported("roleRef.kind", ref.get("kind"), ["Role", "ClusterRole"]))
        if not ref.get("name"):
            causes.append(required("roleRef.name"))
    subjects = obj.get("subjects") or []
    if not isinstance(subjects, list):
        return [*causes, invalid("subjects", subjects, "must be a list")]
    for i, subject in enumerate(subjects):
        base = f"subjects[{i}]"
        causes += _dict_keys(base, subject, {"kind", "apiGroup", "name", "namespace"})
        if not isinstance(subject, dict):
            continue
        if not subject.get("name"):
            causes.append(required(f"{base}.name"))
        subject_kind = subject.get("kind")
        if subject_kind not in _SUBJECT_KINDS:
            causes.append(unsupported(f"{base}.kind", subject_kind, _SUBJECT_KINDS))
        elif subject_kind in ("User", "Group"):
            if subject.get("apiGroup") != "rbac.authorization.k8s.io":
                causes.append(
                    unsupported(
                        f"{base}.apiGroup", subject.get("apiGroup"), ["rbac.authorization.k8s.io"]
                    )
                )
        elif subject.get("apiGroup"):
            causes.append(unsupported(f"{base}.apiGroup", subject.get("apiGroup"), [""]))
    return causes


_PREEMPTION = ["Never", "PreemptLowerPriority"]


def _priority_class(obj: dict, **_: Any) -> list[Cause]:
    causes: list[Cause] = []
    value = obj.get("value")
    name = (obj.get("metadata") or {}).get("name") or ""
    if value is None:
        causes.append(required("value"))
    elif isinstance(value, bool) or not isinstance(value, int):
        causes.append(invalid("value", value, "must be an integer"))
    elif value > HIGHEST_USER_PRIORITY and not name.startswith("system-"):
        causes.append(
            forbidden(
                "value",
                f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}",
            )
        )
    if name.startswith("system-"):
        causes.append(
            forbidden("metadata.name", "priority class names with 'system-' prefix are reserved")
        )
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in _PREEMPTION:
        causes.append(unsupported("preemptionPolicy", policy, _PREEMPTION))
    if "globalDefault" in obj and not isinstance(obj["globalDefault"], bool):
        causes.append(invalid("globalDefault", obj["globalDefault"], "must be a boolean"))
    return causes


def _namespace(obj: dict, **_: Any) -> list[Cause]:
    return _dict_keys("spec", obj.get("spec"), {"finalizers"})


# --------------------------------------------------------------------------- CRD schemas


def _structural(schema: Any) -> Any:
    """Translate an OpenAPI v3 CRD schema into a JSON Schema the validator understands.

    ``x-kubernetes-int-or-string`` becomes ``anyOf: [integer, string]``; objects that list
    ``properties`` reject unknown fields unless ``x-kubernetes-preserve-unknown-fields`` is set
    (the API server prunes them; the fake is strict so that typos fail tests); ``nullable`` allows
    null; other ``x-kubernetes-*`` keys are dropped.
    """
    if isinstance(schema, list):
        return [_structural(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: _structural(v)
        for k, v in schema.items()
        if not k.startswith("x-kubernetes-") and k not in ("description", "nullable", "properties")
    }
    if isinstance(schema.get("properties"), dict):
        # property *names* are not schema keywords (a property may be called "description")
        out["properties"] = {k: _structural(v) for k, v in schema["properties"].items()}
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@functools.cache
def crd_schema(filename: str, version: str) -> dict:
    """Load a CRD's openAPIV3Schema for ``version`` from a YAML file next to this module."""
    with (CRD_DIR / filename).open() as fh:
        crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{filename} has no version {version}")


@functools.cache
def _crd_validator(filename: str, version: str) -> jsonschema.Validator:
    schema = _structural(crd_schema(filename, version))
    # metadata is validated by _metadata(); the CRD only says "type: object".
    return jsonschema.Draft7Validator(schema)


@functools.cache
def crd_cel_validator(filename: str, version: str) -> cel.Validator:
    """The CRD's ``x-kubernetes-validations`` rules, compiled once (see ``cel.py``)."""
    return cel.Validator(crd_schema(filename, version))


def apply_defaults(schema: dict, value: Any) -> None:
    """Structural defaulting, as ``k8s.io/apiextensions-apiserver`` ``pkg/apiserver/schema/
    defaulting/algorithm.go`` ``Default`` does it: a property that is missing (or null without
    ``nullable``) takes its ``default``; then the defaulted value and every other present value
    is defaulted in turn (object properties, map values, list items). Nulls of non-nullable
    fields without a default are dropped (``prunenulls.go``
    ``PruneNonNullableNullsWithoutDefaults``).
    """
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                apply_defaults(items, item)
        return
    if not isinstance(value, dict):
        return
    props = schema.get("properties") or {}
    for key, sub in props.items():
        if (key not in value or (value[key] is None and not sub.get("nullable"))) and (
            "default" in sub
        ):
            value[key] = copy.deepcopy(sub["default"])
        elif key in value and value[key] is None and not sub.get("nullable"):
            del value[key]
    for key, sub_value in value.items():
        sub = props.get(key)
        if sub is None and isinstance(schema.get("additionalProperties"), dict):
            sub = schema["additionalProperties"]
        if sub is not None:
            apply_defaults(sub, sub_value)


def prune(schema: dict, value: Any, *, root: bool = True) -> None:
    """Drop the fields ``schema`` does not declare (``k8s.io/apiextensions-apiserver``
    ``pkg/apiserver/schema/pruning/algorithm.go`` ``PruneWithOptions``): what the API server does
    to unknown fields unless ``fieldValidation=Strict``. ``apiVersion``, ``kind`` and
    ``metadata`` of the root stay (the fake checks those itself)."""
    if isinstance(value, list):
        if isinstance(schema.get("items"), dict):
            for item in value:
                prune(schema["items"], item, root=False)
        return
    if not isinstance(value, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    for key in list(value):
        if root and key in ("apiVersion", "kind", "metadata"):
            continue
        if props is not None and key in props:
            prune(props[key], value[key], root=False)
        elif isinstance(extra, dict):
            prune(extra, value[key], root=False)
        elif props is not None and extra is not True:
            del value[key]


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
_REQUIRED = re.compile(r"^'(.*)' is a required property$")


def _schema_cause(error: jsonschema.ValidationError) -> list[Cause]:
    """One jsonschema error as the API server reports the go-openapi one
    (``k8s.io/apiextensions-apiserver`` ``pkg/apiserver/validation/validation.go``
    ``kubeOpenAPIResultToFieldErrors``; the texts are go-openapi's ``errors`` package)."""
    field = _path(error.absolute_path)
    name = field or "body"
    kind, value, limit = error.validator, error.instance, error.validator_value
    if kind == "additionalProperties":
        extras = sorted(set(value) - set(error.schema.get("properties", {})))
        return [unknown(f"{field}.{extra}" if field else extra) for extra in extras]
    if kind == "required":
        match = _REQUIRED.match(error.message)
        child = match.group(1) if match else ""
        return [required(f"{field}.{child}" if field and child else field or child)]
    if kind == "enum":
        return [unsupported(field, value, [str(v) for v in limit])]
    if kind == "maxLength":
        unit = "byte" if limit == 1 else "bytes"
        return [
            {
                "reason": "FieldValueTooLong",
                "message": f"Too long: may not be more than {limit} {unit}",
                "field": field,
            }
        ]
    if kind in ("maxItems", "maxProperties"):
        return [
            {
                "reason": "FieldValueTooMany",
                "message": f"Too many: {len(value)}: must have at most {limit} items",
                "field": field,
            }
        ]
    if kind == "type" or (kind == "anyOf" and limit == [{"type": "integer"}, {"type": "string"}]):
        wanted = limit if kind == "type" else "integer,string"
        if isinstance(wanted, list):
            wanted = ",".join(t for t in wanted if t != "null")
        actual = _JSON_TYPES.get(type(value), "object")
        return [
            {
                "reason": "FieldValueTypeInvalid",
                "message": f"Invalid value: {_fmt(value)}: {name} in body must be of type "
                f'{wanted}: "{actual}"',
                "field": field,
            }
        ]
    texts = {
        "pattern": f"should match '{limit}'",
        "minLength": f"should be at least {limit} chars long",
        "minItems": f"should have at least {limit} items",
        "minProperties": f"should have at least {limit} properties",
        "minimum": f"should be greater than or equal to {limit}",
        "maximum": f"should be less than or equal to {limit}",
    }
    detail = f"{name} in body {texts.get(kind, error.message)}"
    return [invalid(field, value, detail)]


# hasBlockingErr (k8s.io/apiextensions-apiserver pkg/registry/customresource/strategy.go)
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)


def list_type_causes(schema: dict, value: Any, path: str = "") -> list[Cause]:
    """``k8s.io/apiextensions-apiserver`` ``pkg/apiserver/schema/listtype/validation.go``
    ``ValidateListSetsAndMaps``: the items of an ``x-kubernetes-list-type: set`` list are unique,
    and so are the keys of a ``map`` list's items (the second of equal ones is reported)."""
    causes: list[Cause] = []
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                causes += list_type_causes(props[key], sub, f"{path}.{key}" if path else key)
            elif isinstance(extra, dict):
                causes += list_type_causes(extra, sub, f"{path}[{key}]")
        return causes
    if not isinstance(value, list):
        return causes
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        bad = next(
            (i for i, x in enumerate(value) if x is not None and not isinstance(x, dict)), None
        )
        if bad is not None:
            causes.append(
                invalid(
                    f"{path}[{bad}]", value[bad], "must be an object for an array of list-type map"
                )
            )
        else:
            seen: dict[str, int] = {}
            for i, item in enumerate(value):
                key = {k: item[k] for k in keys if isinstance(item, dict) and k in item}
                text = json.dumps(key, sort_keys=True)
                seen[text] = seen.get(text, 0) + 1
                if seen[text] == 2:
                    causes.append(
                        {
                            "reason": "FieldValueDuplicate",
                            "message": f"Duplicate value: {_fmt(key)}",
                            "field": f"{path}[{i}]",
                        }
                    )
    elif list_type == "set":
        counts: dict[str, int] = {}
        for i, item in enumerate(value):
            text = json.dumps(item, sort_keys=True)
            counts[text] = counts.get(text, 0) + 1
            if counts[text] == 2:
                causes.append(
                    {
                        "reason": "FieldValueDuplicate",
                        "message": f"Duplicate value: {_fmt(item)}",
                        "field": f"{path}[{i}]",
                    }
                )
    if isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            causes += list_type_causes(schema["items"], item, f"{path}[{i}]")
    return causes


def _crd_causes(
    obj: dict,
    filename: str,
    version: str,
    *,
    old: dict | None = None,
    unknown_fields: str = "reject",
    **_: Any,
) -> list[Cause]:
    """A custom resource as apiextensions-apiserver validates it
    (``pkg/registry/customresource/strategy.go`` ``Validate``/``ValidateUpdate``): pruning
    (when unknown fields are dropped) and structural defaulting, the OpenAPI schema, the
    ``x-kubernetes-list-type`` invariants (on update only when the old object met them), then,
    unless an error blocks them (``hasBlockingErr``), the ``x-kubernetes-validations`` CEL rules
    (``cel.py``, ratcheted on update as upstream). Not imitated: ratcheting of OpenAPI schema
    errors on update (``CRDValidationRatcheting`` lets an unchanged invalid value through; here
    it is refused), and ``format`` checks."""
    schema = crd_schema(filename, version)
    if unknown_fields == "drop":
        prune(schema, obj)
    apply_defaults(schema, obj)
    causes: list[Cause] = []
    validator = _crd_validator(filename, version)
    for error in sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.path]):
        causes += _schema_cause(error)
    if old is None or not list_type_causes(schema, old):
        causes += list_type_causes(schema, obj)
    rules = crd_cel_validator(filename, version)
    if not rules.has_rules:
        return causes  # no CEL validator for this version (strategy.go: celValidators[v])
    if any(c["reason"] in _BLOCKING for c in causes):
        causes.append(
            invalid(
                cel.ROOT_PATH,
                "null",
                "some validation rules were not checked because the object was invalid; "
                "correct the existing errors to complete validation",
            )
        )
    else:
        causes += rules.validate(obj, old)
    return causes


def _podgroup(obj: dict, **options: Any) -> list[Cause]:
    return _crd_causes(obj, "scheduling.volcano.sh_podgroups.yaml", "v1beta1", **options)


def _volcano_job(obj: dict, **options: Any) -> list[Cause]:
    return _crd_causes(obj, "batch.volcano.sh_jobs.yaml", "v1alpha1", **options)


def _event(obj: dict, **_: Any) -> list[Cause]:
    """``pkg/apis/core/validation/events.go`` ``legacyValidateEvent`` (core/v1 Events): the
    involved object's namespace must be the event's (cluster-scoped objects: "" or
    ``default``), and ``type``, when set, is ``Normal`` or ``Warning`` (``validEventType``)."""
    causes: list[Cause] = []
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    involved = obj.get("involvedObject")
    if not isinstance(involved, dict):
        involved = {}
    involved_ns = involved.get("namespace") or ""
    if (involved_ns and involved_ns != namespace) or (
        not involved_ns and namespace not in ("", "default")
    ):
        causes.append(
            invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
        )
    kind = obj.get("type")
    if kind not in (None, "", "Normal", "Warning"):
        causes.append(unsupported("type", kind, ["Normal", "Warning"]))
    return causes


def _queue(obj: dict, **options: Any) -> list[Cause]:
    causes = _crd_causes(obj, "scheduling.volcano.sh_queues.yaml", "v1beta1", **options)
    for name in ("capability", "deserved"):
        causes += _queue_quantities(obj, ("spec", name))
    causes += _queue_quantities(obj, ("spec", "guarantee", "resource"))
    return causes


def _queue_quantities(obj: dict, path: tuple[str, ...]) -> list[Cause]:
    node: Any = obj
    for p in path:
        node = node.get(p) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return []
    causes = []
    for res in node:
        causes += [invalid(f"{'.'.join(path)}.{res}", res, p) for p in qualified_name_problems(res)]
    return causes


# Kueue's CRDs (kubernetes-sigs/kueue config/components/crd/bases, commit
# ff69552e79ad21652c36caa97038382e55625cf7): the v1beta2 storage version, the only one served.
KUEUE_CRDS = {
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "Workload": "kueue.x-k8s.io_workloads.yaml",
}
KUEUE_VERSION = "v1beta2"


def _kueue_check(filename: str) -> Any:
    def check(obj: dict, **options: Any) -> list[Cause]:
        return _crd_causes(obj, filename, KUEUE_VERSION, **options)

    return check


_KIND_CHECKS = {
    **{kind: _kueue_check(filename) for kind, filename in KUEUE_CRDS.items()},
    "Namespace": _namespace,
    "ResourceQuota": _resource_quota,
    "ResourceClaim": _resource_claim,
    "LimitRange": _limit_range,
    "Role": _rules,
    "ClusterRole": _rules,
    "RoleBinding": _role_binding,
    "PriorityClass": _priority_class,
    "Queue": _queue,
    "PodGroup": _podgroup,
    "Job": _volcano_job,
    "Event": _event,
}


def _immutable(kind: Kind, new: dict, old: dict) -> list[Cause]:
    causes = []
    # k8s.io/apimachinery/pkg/api/validation/objectmeta.go ValidateObjectMetaAccessorUpdate:
    # "Finalizers cannot be added if the object is already being deleted."
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old_meta.get("deletionTimestamp"):
        added = [
            f for f in new_meta.get("finalizers") or () if f not in old_meta.get("finalizers") or ()
        ]
        if added:
            causes.append(
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new "
                    "finalizers []string{" + ", ".join(json.dumps(f) for f in added) + "}",
                )
            )
    if kind.kind == "RoleBinding" and new.get("roleRef") != old.get("roleRef"):
        causes.append(invalid("roleRef", new.get("roleRef"), "cannot change roleRef"))
    # pkg/apis/scheduling/validation/validation.go ValidatePriorityClassUpdate: value and
    # preemptionPolicy are immutable.
    if kind.kind == "PriorityClass":
        for field in ("value", "preemptionPolicy"):
            if new.get(field) != old.get(field):
                causes.append(invalid(field, new.get(field), "field is immutable"))
    return causes
