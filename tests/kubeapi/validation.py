"""Validation the fake API server applies before it stores anything.

It follows the real API server where a Fairshare bug would otherwise slip through: DNS-1123
names, label keys and values, quantity syntax, ResourceQuota resource names, LimitRange ordering,
RBAC shapes, PriorityClass values, immutable fields, the Volcano Queue CRD schema, and unknown
fields. Each problem is a *cause* dict (``reason``, ``message``, ``field``) as in a ``Status`` body.

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
    prefixed = name.startswith(("requests.", "limits.", "count/"))
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
        causes += check(obj, strict_quota_names=strict_quota_names)
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


def _resource_quota(obj: dict, *, strict_quota_names: bool) -> list[Cause]:
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


# --------------------------------------------------------------------------- Volcano Queue (CRD)


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
        if not k.startswith("x-kubernetes-") and k not in ("description", "nullable")
    }
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
        crd = yaml.safe_load(fh)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{filename} has no version {version}")


@functools.cache
def _crd_validator(filename: str, version: str) -> jsonschema.Validator:
    schema = _structural(crd_schema(filename, version))
    # metadata is validated by _metadata(); the CRD only says "type: object".
    return jsonschema.Draft7Validator(schema)


def _queue_validator() -> jsonschema.Validator:
    return _crd_validator("scheduling.volcano.sh_queues.yaml", "v1beta1")


def apply_defaults(schema: dict, value: Any) -> None:
    """Fill schema ``default`` values into objects present in ``value`` (structural defaulting)."""
    if not isinstance(value, dict):
        return
    for key, sub in (schema.get("properties") or {}).items():
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            if isinstance(value[key], dict):
                apply_defaults(sub, value[key])
            elif isinstance(value[key], list) and isinstance(sub.get("items"), dict):
                for item in value[key]:
                    apply_defaults(sub["items"], item)


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _crd_causes(obj: dict, filename: str, version: str) -> list[Cause]:
    """Structural defaulting, then the CRD's OpenAPI schema (apiextensions-apiserver)."""
    apply_defaults(crd_schema(filename, version), obj)
    causes: list[Cause] = []
    validator = _crd_validator(filename, version)
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.path)):
        field = _path(error.absolute_path)
        if error.validator == "additionalProperties":
            for extra in sorted(set(error.instance) - set(error.schema.get("properties", {}))):
                causes.append(unknown(f"{field}.{extra}" if field else extra))
        elif error.validator == "required":
            causes.append(required(field, error.message))
        elif error.validator == "enum":
            causes.append(unsupported(field, error.instance, list(error.validator_value)))
        else:
            causes.append(invalid(field, error.instance, f"{field} in body {error.message}"))
    return causes


def _podgroup(obj: dict, **_: Any) -> list[Cause]:
    return _crd_causes(obj, "scheduling.volcano.sh_podgroups.yaml", "v1beta1")


def _volcano_job(obj: dict, **_: Any) -> list[Cause]:
    return _crd_causes(obj, "batch.volcano.sh_jobs.yaml", "v1alpha1")


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


def _queue(obj: dict, **_: Any) -> list[Cause]:
    causes = _crd_causes(obj, "scheduling.volcano.sh_queues.yaml", "v1beta1")
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


_KIND_CHECKS = {
    "Namespace": _namespace,
    "ResourceQuota": _resource_quota,
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
    if kind.kind == "RoleBinding" and new.get("roleRef") != old.get("roleRef"):
        causes.append(invalid("roleRef", new.get("roleRef"), "cannot change roleRef"))
    # pkg/apis/scheduling/validation/validation.go ValidatePriorityClassUpdate: value and
    # preemptionPolicy are immutable.
    if kind.kind == "PriorityClass":
        for field in ("value", "preemptionPolicy"):
            if new.get(field) != old.get(field):
                causes.append(invalid(field, new.get(field), "field is immutable"))
    return causes
