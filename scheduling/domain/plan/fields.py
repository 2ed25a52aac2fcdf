"""The planner's vocabulary of fields: paths, and what each kind's fields are to the API server.

A path is a tuple of map keys and list indexes (``("spec", "hard", "requests.cpu")``); a
pattern may use ``*`` for any key or index. The tables here say which lists server-side apply
treats as one field (:data:`ATOMIC_LISTS`), which leaves are quantities compared semantically
(:data:`QUANTITY_PATHS`), which fields cannot change in place (:data:`IMMUTABLE_FIELDS`).

Invariant: the tables follow the upstream OpenAPI and validation of each kind (cited at each);
the helpers are pure and never raise on odd live data (a missing part reads as None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ATOMIC_LISTS",
    "IMMUTABLE_FIELDS",
    "OWNED_FIELDS",
    "QUANTITY_PATHS",
    "Path",
    "absent",
    "format_path",
    "matches",
    "path_order",
    "value_at",
]

Path = tuple[str | int, ...]

_ANY = "*"  # wildcard for any map key or list index in a path pattern

# Lists that server-side apply treats as one field (``x-kubernetes-list-type: atomic`` in the
# Kubernetes OpenAPI): owned and compared whole. Every other list is atomic too (our kinds have
# no associative lists); maps are granular, key by key.
ATOMIC_LISTS: dict[str, tuple[Path, ...]] = {
    "LimitRange": (("spec", "limits"),),
    "Role": (("rules",),),
    "RoleBinding": (("subjects",),),
}

# Paths (patterns) whose leaves are Kubernetes quantities, compared semantically.
QUANTITY_PATHS: dict[str, tuple[Path, ...]] = {
    "ResourceQuota": (("spec", "hard", _ANY),),
    "LimitRange": tuple(
        ("spec", "limits", _ANY, key, _ANY)
        for key in ("default", "defaultRequest", "max", "min", "maxLimitRequestRatio")
    ),
    "Queue": (
        ("spec", "capability", _ANY),
        ("spec", "deserved", _ANY),
        ("spec", "guarantee", "resource", _ANY),
    ),
    # Kueue (apis/kueue/v1beta2): ResourceQuota's nominalQuota/borrowingLimit/lendingLimit and
    # FairSharing.weight are resource.Quantity.
    **{
        kind: (
            *(
                ("spec", "resourceGroups", _ANY, "flavors", _ANY, "resources", _ANY, key)
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit")
            ),
            ("spec", "fairSharing", "weight"),
        )
        for kind in ("ClusterQueue", "Cohort")
    },
}

# The API server refuses to change these in place: an update touching them must be applied as
# delete + create (see Change.needs_replace). Kubernetes pkg/apis/scheduling/validation
# (ValidatePriorityClassUpdate: value and preemptionPolicy) and pkg/apis/rbac/validation
# (ValidateRoleBindingUpdate: roleRef).
IMMUTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "PriorityClass": ("value", "preemptionPolicy"),
    "RoleBinding": ("roleRef",),
    # Kueue's LocalQueue CRD: ``spec.clusterQueue`` carries ``x-kubernetes-validations:
    # self == oldSelf`` (apis/kueue/v1beta2/localqueue_types.go): a namespace whose team now
    # has another ClusterQueue gets its LocalQueue deleted and created again.
    "LocalQueue": ("spec.clusterQueue",),
}

# Kept for callers that want to know which top-level fields a kind's manifests set.
OWNED_FIELDS: dict[str, tuple[Path, ...]] = {
    "Namespace": (),
    "ResourceQuota": (("spec", "hard"),),
    "LimitRange": (("spec", "limits"),),
    "Role": (("rules",),),
    "RoleBinding": (("roleRef",), ("subjects",)),
    "PriorityClass": (("value",), ("preemptionPolicy",), ("description",), ("globalDefault",)),
    "Queue": (
        ("spec", "weight"),
        ("spec", "reclaimable"),
        ("spec", "capability"),
        ("spec", "guarantee"),
        ("spec", "deserved"),
        ("spec", "parent"),
    ),
    "ClusterQueue": (
        ("spec", "cohortName"),
        ("spec", "namespaceSelector"),
        ("spec", "resourceGroups"),
        ("spec", "fairSharing"),
        ("spec", "preemption"),
    ),
    "Cohort": (("spec", "parentName"), ("spec", "resourceGroups"), ("spec", "fairSharing")),
    "LocalQueue": (("spec", "clusterQueue"),),
    "ResourceFlavor": (("spec", "nodeLabels"),),
    "WorkloadPriorityClass": (("value",), ("description",)),
}


def absent(value: Any) -> bool:
    """True for a value the API server treats as not set: None, ``""``, ``{}``, ``[]``."""
    return value is None or value == "" or value == {} or value == []


def value_at(obj: Any, path: Path) -> Any:
    """The value at ``path`` in nested maps, None where any part is missing."""
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def matches(path: Path, patterns: Sequence[Path]) -> bool:
    """True when ``path`` matches one of ``patterns`` (``*`` matches any key or index)."""
    return any(
        len(path) == len(pattern)
        and all(p in (_ANY, part) for p, part in zip(pattern, path, strict=True))
        for pattern in patterns
    )


def format_path(path: Path) -> str:
    """``path`` dotted for people: ``spec.hard.requests.cpu``, list indexes as ``[0]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def path_order(path: Path) -> tuple[int, Path]:
    """Sort key of field paths: metadata first, then the rest in path order."""
    return (0 if path[0] == "metadata" else 1, tuple(str(p) for p in path))
