"""Planner: what has to change for the cluster to match the desired state (pure).

Modelled on kopf's ``DiffItem`` (``kopf/_cogs/structs/diffs.py``): ``plan(desired, live)`` pairs
rendered manifests with observed objects by ``(kind, namespace, name)`` and returns one
:class:`Change` per object — ``create``, ``update`` (with the field diffs), ``unchanged`` or
``prune``. The apply side server-side-applies creates and updates, skips unchanged objects (a
steady-state sync issues zero writes) and deletes prunes.

Owned fields
============

Only fields Fairshare sets are compared; everything else on the live object (``status``,
``resourceVersion``, ``uid``, ``managedFields``, fields other controllers or webhooks add such as
a Queue's ``dequeueStrategy``) is ignored. Per kind the owned fields are fixed
(:data:`OWNED_FIELDS`), so a field that the desired manifest *omits* but the live object has is a
difference too — that is how a removed capability or parent gets cleared by the next apply.
Inside an owned field the desired value is authoritative (an extra key in a live ``spec.hard`` is
a difference).

Labels and annotations are shared with other tools, so only these keys are owned: the keys the
desired manifest sets, any live key under ``fairshare.io/`` plus ``app.kubernetes.io/managed-by``,
and the keys our field manager applied last time according to the live object's
``managedFields`` (so a user label removed from a namespace is removed from the cluster too).

Values are compared after normalisation: a missing key, ``None``, ``""``, ``{}`` and ``[]`` are all
"absent" (the API server drops empty optional fields); quantities are compared semantically with
the injected ``parse_quantity`` (``1Gi`` == ``1073741824``, ``0.5`` == ``500m``).

Ordering
========

Creates, updates and unchanged objects come first in dependency order (Namespaces,
PriorityClasses, Queues parents-first, then namespaced kinds; see ``render.sort_key``), prunes
last in the reverse order (a child Queue before its parent, namespaced objects before their
Namespace). Namespaces are never pruned unless ``prune_namespaces`` is set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from scheduling.domain.render import LABEL_MANAGED_BY, MANAGER, object_key, sort_key

__all__ = [
    "IMMUTABLE_FIELDS",
    "OWNED_FIELDS",
    "Change",
    "FieldDiff",
    "Op",
    "diff_object",
    "plan",
    "render_diff",
]

Op = Literal["create", "update", "unchanged", "prune"]
Path = tuple[str | int, ...]

_ANY = "*"  # wildcard for any map key or list index in a path pattern

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
}

# Paths (patterns) whose leaves are Kubernetes quantities, compared semantically.
_QUANTITY_PATHS: dict[str, tuple[Path, ...]] = {
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
}

# The API server refuses to change these in place: an update touching them must be applied as
# delete + create (see Change.needs_replace).
IMMUTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "PriorityClass": ("value", "preemptionPolicy"),
    "RoleBinding": ("roleRef",),
}

# Fields of a manifest that are never compared generically (identity and server-owned parts).
_NOT_OWNED_TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "status"})
_OWNED_LABEL_PREFIX = "fairshare.io/"


@dataclass(frozen=True)
class FieldDiff:
    """One differing leaf: ``path`` is dotted (``spec.hard.requests.nvidia.com/gpu``, list
    indexes as ``[0]``); ``old`` is the live value, ``new`` the desired one, None when absent."""

    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Change:
    """What to do with one object.

    ``body`` is the desired manifest for create/update/unchanged, and the live object as observed
    for prune (so the apply side can delete with a uid/resourceVersion precondition). ``diff`` is
    empty except for updates. ``namespace`` is None for cluster-scoped objects.
    """

    op: Op
    kind: str
    namespace: str | None
    name: str
    body: dict[str, Any] | None
    diff: tuple[FieldDiff, ...] = ()

    @property
    def needs_replace(self) -> bool:
        """True when the update touches a field the API server will not change in place."""
        immutable = IMMUTABLE_FIELDS.get(self.kind, ())
        return self.op == "update" and any(
            d.path == f or d.path.startswith(f"{f}.") for d in self.diff for f in immutable
        )


# ---------------------------------------------------------------- diffing


def _absent(value: Any) -> bool:
    return value is None or value == "" or value == {} or value == []


def _get(obj: Mapping[str, Any], path: Path) -> Any:
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def _matches(path: Path, patterns: Sequence[Path]) -> bool:
    return any(
        len(path) == len(pattern)
        and all(p in (_ANY, part) for p, part in zip(pattern, path, strict=True))
        for pattern in patterns
    )


def _format_path(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _same_quantity(old: Any, new: Any, parse_quantity: Callable[[str], Decimal]) -> bool:
    try:
        return bool(parse_quantity(str(old)) == parse_quantity(str(new)))
    except (ValueError, ArithmeticError):
        # An unparseable live value is never equal to what we render: report it, apply fixes it.
        return str(old) == str(new)


def _diff(
    old: Any,
    new: Any,
    path: Path,
    quantities: Sequence[Path],
    parse_quantity: Callable[[str], Decimal],
) -> Iterator[FieldDiff]:
    """Yield leaf differences between ``old`` (live) and ``new`` (desired), kopf-style.

    Maps recurse over the sorted union of keys, lists over indexes (an absent side counts as an
    empty map/list, so removals are reported per leaf); leaves compare as quantities on
    quantity paths, by equality otherwise; absent values (see ``_absent``) are equal.
    """
    old = None if _absent(old) else old
    new = None if _absent(new) else new
    shape = _shape(old, new)
    if shape == "map":
        old_map, new_map = old or {}, new or {}
        for key in sorted(old_map.keys() | new_map.keys()):
            yield from _diff(
                old_map.get(key), new_map.get(key), (*path, key), quantities, parse_quantity
            )
    elif shape == "list":
        old_list, new_list = old or [], new or []
        for index in range(max(len(old_list), len(new_list))):
            yield from _diff(
                old_list[index] if index < len(old_list) else None,
                new_list[index] if index < len(new_list) else None,
                (*path, index),
                quantities,
                parse_quantity,
            )
    elif not _same_leaf(old, new, _matches(path, quantities), parse_quantity):
        yield FieldDiff(_format_path(path), old, new)


def _shape(old: Any, new: Any) -> str:
    """``map``/``list`` when both sides are (or are absent as) maps/lists, else ``leaf``."""
    for shape, kind in (("map", Mapping), ("list", list)):
        present = [value for value in (old, new) if value is not None]
        if present and all(isinstance(value, kind) for value in present):
            return shape
    return "leaf"


def _same_leaf(
    old: Any, new: Any, is_quantity: bool, parse_quantity: Callable[[str], Decimal]
) -> bool:
    if old is None or new is None:
        return old is new
    if is_quantity:
        return _same_quantity(old, new, parse_quantity)
    # type check so that True != 1 and "2" != 2: the API server would not treat them as equal
    return bool(old == new and type(old) is type(new))


def _applied_keys(live: Mapping[str, Any], field: str) -> set[str]:
    """Label/annotation keys our field manager applied, from the live ``managedFields``."""
    keys: set[str] = set()
    for entry in _get(live, ("metadata", "managedFields")) or ():
        if not isinstance(entry, Mapping) or entry.get("manager") != MANAGER:
            continue
        owned = _get(entry, ("fieldsV1", "f:metadata", f"f:{field}")) or {}
        keys |= {key[2:] for key in owned if isinstance(key, str) and key.startswith("f:")}
    return keys


def _metadata_diff(desired: Mapping[str, Any], live: Mapping[str, Any]) -> Iterator[FieldDiff]:
    for field in ("labels", "annotations"):
        want = _get(desired, ("metadata", field)) or {}
        have = _get(live, ("metadata", field)) or {}
        owned = set(want) | _applied_keys(live, field)
        owned |= {k for k in have if k.startswith(_OWNED_LABEL_PREFIX) or k == LABEL_MANAGED_BY}
        for key in sorted(owned):
            if have.get(key) != want.get(key):
                yield FieldDiff(f"metadata.{field}.{key}", have.get(key), want.get(key))


def _owned_paths(desired: Mapping[str, Any]) -> tuple[Path, ...]:
    kind = desired["kind"]
    if kind in OWNED_FIELDS:
        return OWNED_FIELDS[kind]
    # A kind we do not know: own whatever top-level fields the manifest sets.
    return tuple((key,) for key in sorted(desired) if key not in _NOT_OWNED_TOP_LEVEL)


def diff_object(
    desired: Mapping[str, Any],
    live: Mapping[str, Any],
    *,
    parse_quantity: Callable[[str], Decimal],
) -> tuple[FieldDiff, ...]:
    """Return the differences in the fields we own between a desired and a live object.

    Empty means the live object already matches (the object is ``unchanged``).
    """
    quantities = _QUANTITY_PATHS.get(desired["kind"], ())
    diffs = list(_metadata_diff(desired, live))
    for path in _owned_paths(desired):
        diffs += _diff(_get(live, path), _get(desired, path), path, quantities, parse_quantity)
    return tuple(diffs)


# ---------------------------------------------------------------- planning


def _is_managed(obj: Mapping[str, Any]) -> bool:
    return (_get(obj, ("metadata", "labels")) or {}).get(LABEL_MANAGED_BY) == MANAGER


def _index(objects: Sequence[Mapping[str, Any]], what: str) -> dict[Any, Mapping[str, Any]]:
    index: dict[Any, Mapping[str, Any]] = {}
    for obj in objects:
        key = object_key(obj)
        if key in index:
            raise ValueError(f"duplicate {what} object {key}")
        index[key] = obj
    return index


def _queue_depths(*objects: Mapping[Any, Mapping[str, Any]]) -> dict[str, int]:
    """Depth of each Queue in its hierarchy; the desired parent wins over the live one."""
    parents: dict[str, str | None] = {}
    for index in reversed(objects):
        for (kind, _, name), obj in index.items():
            if kind == "Queue":
                parents[name] = _get(obj, ("spec", "parent"))
    depths: dict[str, int] = {}
    for name in parents:
        depth, current = 0, parents[name]
        # Bounded walk: a cycle in observed data must not hang the planner.
        while current and depth < len(parents):
            depth, current = depth + 1, parents.get(current)
        depths[name] = depth
    return depths


def plan(
    desired: Sequence[Mapping[str, Any]],
    live: Sequence[Mapping[str, Any]],
    *,
    parse_quantity: Callable[[str], Decimal],
    prune_namespaces: bool = False,
) -> list[Change]:
    """Compare desired manifests with live objects and return the changes, in apply order.

    ``live`` objects must carry ``kind`` (LIST responses omit it per item; the observer fills it
    in). ``parse_quantity`` is ``kubernetes.utils.parse_quantity`` in production.

    Steps:
    1. index both sides by ``(kind, namespace, name)``; duplicates raise ValueError;
    2. desired and not live → ``create``; both → ``update`` with its field diffs, or
       ``unchanged`` when there are none (an unlabelled live object is adopted: the missing
       ownership label is one of the diffs);
    3. live, not desired, labelled ``app.kubernetes.io/managed-by: fairshare`` → ``prune``,
       except Namespaces unless ``prune_namespaces``; unlabelled live objects are never touched;
    4. order: non-prunes by ``render.sort_key`` (dependency order), then prunes in reverse.

    Deterministic: the result depends only on the contents of the inputs, not their order.
    """
    want = _index(desired, "desired")
    have = _index(live, "live")
    depths = _queue_depths(want, have)
    changes: list[tuple[tuple[int, int, str, str], Change]] = []
    for key, body in want.items():
        kind, namespace, name = key
        current = have.get(key)
        if current is None:
            change = Change("create", kind, namespace, name, dict(body))
        else:
            diff = diff_object(body, current, parse_quantity=parse_quantity)
            op: Op = "update" if diff else "unchanged"
            change = Change(op, kind, namespace, name, dict(body), diff)
        changes.append((sort_key(body, depths), change))
    prunes: list[tuple[tuple[int, int, str, str], Change]] = []
    for key, body in have.items():
        kind, namespace, name = key
        if key in want or not _is_managed(body):
            continue
        if kind == "Namespace" and not prune_namespaces:
            continue
        prunes.append((sort_key(body, depths), Change("prune", kind, namespace, name, dict(body))))
    changes.sort(key=lambda item: item[0])
    prunes.sort(key=lambda item: item[0], reverse=True)
    return [change for _, change in changes + prunes]


# ---------------------------------------------------------------- display


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def render_diff(change: Change) -> str:
    """Return a readable text form: a header line, then one indented line per field diff.

    ``update ResourceQuota team-a/fairshare`` followed by
    ``  spec.hard.requests.nvidia.com/gpu: 64 -> 80``; absent values print as ``(none)``.
    """
    where = f"{change.namespace}/{change.name}" if change.namespace else change.name
    lines = [f"{change.op} {change.kind} {where}"]
    lines += [f"  {d.path}: {_show(d.old)} -> {_show(d.new)}" for d in change.diff]
    return "\n".join(lines)
