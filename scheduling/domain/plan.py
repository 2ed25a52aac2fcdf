"""Planner: what has to change for the cluster to match the desired state (pure).

Modelled on kopf's ``DiffItem`` (``kopf/_cogs/structs/diffs.py``): ``plan(desired, live)`` pairs
rendered manifests with observed objects by ``(kind, namespace, name)`` and returns one
:class:`Change` per object — ``create``, ``update`` (with the field diffs), ``unchanged`` or
``prune``. The apply side server-side-applies creates and updates, skips unchanged objects (a
steady-state sync issues zero writes) and deletes prunes, in the order of :func:`apply_steps`.

Owned fields: what server-side apply would change
=================================================

The planner answers "would applying the desired manifest change the live object?" the way
server-side apply (structured-merge-diff) decides it, field by field:

* the fields compared are the **leaves the desired manifest sets** — every key of a map
  (``spec.hard.requests.cpu``, ``spec.capability.nvidia.com/gpu``, each label and annotation)
  and every atomic list whole (a LimitRange's ``spec.limits``, a Role's ``rules``, a
  RoleBinding's ``subjects``: all ``x-kubernetes-list-type: atomic`` upstream);
* plus the leaves **our field manager applied before and no longer sets** (from the live
  object's ``managedFields`` entry of manager ``fairshare``, operation ``Apply``; failing that,
  from the ``last_applied_annotation``), unless another manager owns them too: apply removes
  those, so their presence is a difference;
* plus label keys under ``fairshare.io/`` and ``app.kubernetes.io/managed-by`` (ownership
  markers, always ours).

Everything else is left alone and never counts: ``status`` and server metadata; a key another
manager added to a map we set (``count/pods`` in ``spec.hard``); fields that defaulting,
webhooks or controllers fill in (a Queue's ``dequeueStrategy`` from the CRD default, the
``spec.parent: root`` that Volcano's queue controller patches onto a parentless queue, the
``kubernetes.io/metadata.name`` label of a Namespace). Before comparing, the desired manifest is
defaulted like the API server would default it (:func:`server_defaults`: LimitRange items,
PriorityClass ``preemptionPolicy``, Queue ``weight``/``reclaimable``), so a value the server
fills in identically is no difference either.

Values are compared after normalisation: a missing key, ``None``, ``""``, ``{}`` and ``[]`` are all
"absent" (the API server drops empty optional fields); quantities are compared semantically with
the injected ``parse_quantity`` (``1Gi`` == ``1073741824``, ``0.5`` == ``500m``).

Ordering
========

:func:`plan` lists creates, updates and unchanged objects in dependency order (Namespaces,
PriorityClasses, Queues parents-first, then namespaced kinds; see ``render.sort_key``), prunes
last in the reverse order. :func:`apply_steps` turns that into the writes, ordered so that
every intermediate state passes Volcano's queue webhook: Queue amounts that shrink are written
first, children before parents; those that grow afterwards, parents first. Namespaces are never
pruned unless ``prune_namespaces`` is set.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal

from scheduling.domain.render import (
    ANNOTATION_ADOPTED,
    ANNOTATION_QUEUE,
    ANNOTATION_RELEASED,
    KIND_ORDER,
    LABEL_MANAGED_BY,
    MANAGER,
    object_key,
    sort_key,
)

__all__ = [
    "ATOMIC_LISTS",
    "IMMUTABLE_FIELDS",
    "OWNED_FIELDS",
    "ROOT_QUEUE",
    "Change",
    "FieldDiff",
    "Op",
    "Step",
    "apply_steps",
    "apply_waves",
    "creation_diff",
    "diff_object",
    "field_leaves",
    "fields_v1_leaves",
    "plan",
    "render_diff",
    "server_defaults",
]

Op = Literal["create", "update", "unchanged", "prune"]
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
# delete + create (see Change.needs_replace). Kubernetes pkg/apis/scheduling/validation
# (ValidatePriorityClassUpdate: value and preemptionPolicy) and pkg/apis/rbac/validation
# (ValidateRoleBindingUpdate: roleRef).
IMMUTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "PriorityClass": ("value", "preemptionPolicy"),
    "RoleBinding": ("roleRef",),
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
}

# Fields of a manifest that are never compared (identity and server-owned parts).
_NOT_OWNED_TOP_LEVEL = frozenset({"apiVersion", "kind", "status"})
_METADATA_MAPS = ("labels", "annotations")
_OWNED_LABEL_PREFIX = "fairshare.io/"


@dataclass(frozen=True)
class FieldDiff:
    """One differing leaf: ``path`` is dotted (``spec.hard.requests.nvidia.com/gpu``, list
    indexes as ``[0]``); ``old`` is the live value, ``new`` the desired one, None when absent."""

    path: str
    old: Any
    new: Any


Stage = Literal["shrink", "main"]


@dataclass(frozen=True)
class Change:
    """What to do with one object.

    ``body`` is the desired manifest for create/update/unchanged, and the live object as observed
    for prune (so the apply side can delete with a uid/resourceVersion precondition). ``diff`` is
    empty except for updates. ``namespace`` is None for cluster-scoped objects.

    ``interim`` (Queues only) is a manifest to apply in the *shrink* stage, before anything
    grows: the amounts that go down, so that no intermediate state breaks Volcano's hierarchy
    rules; ``stage`` says when the change itself is applied (``shrink`` when the interim state
    already is the desired one: a pure decrease).
    """

    op: Op
    kind: str
    namespace: str | None
    name: str
    body: dict[str, Any] | None
    diff: tuple[FieldDiff, ...] = ()
    interim: dict[str, Any] | None = None
    stage: Stage = "main"
    live_depth: int = 0

    @property
    def needs_replace(self) -> bool:
        """True when the update touches a field the API server will not change in place."""
        immutable = IMMUTABLE_FIELDS.get(self.kind, ())
        return self.op == "update" and any(
            d.path == f or d.path.startswith(f"{f}.") for d in self.diff for f in immutable
        )


# ---------------------------------------------------------------- server defaults


def server_defaults(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``manifest`` with the defaults the API server would add to it (a new dict; nested
    parts that are not defaulted are shared, so treat the result as read-only).

    Only defaults of fields a manifest may set are modelled — the ones that would otherwise make
    a live object look different from what we applied:

    * LimitRange ``type: Container`` items: Kubernetes ``pkg/apis/core/v1/defaults.go``
      ``SetDefaults_LimitRangeItem`` (max → missing default; default → missing defaultRequest;
      min → missing defaultRequest);
    * PriorityClass: ``preemptionPolicy: PreemptLowerPriority`` (``pkg/apis/scheduling/v1/
      defaults.go`` ``SetDefaults_PriorityClass``);
    * Queue: ``reclaimable: true`` and ``weight: 1`` (Volcano ``pkg/webhooks/admission/queues/
      mutate/mutate_queue.go`` ``createQueuePatch``).
    """
    kind = manifest.get("kind")
    if kind not in ("LimitRange", "PriorityClass", "Queue"):
        return dict(manifest)  # nothing defaulted: no copy (the planner only reads it)
    if kind == "LimitRange":
        obj = copy.deepcopy(dict(manifest))
    else:
        obj = dict(manifest)
        if isinstance(obj.get("spec"), Mapping):
            obj["spec"] = dict(obj["spec"])
    if kind == "LimitRange":
        for item in _get(obj, ("spec", "limits")) or ():
            if isinstance(item, dict) and item.get("type") == "Container":
                default = dict(item.get("default") or {})
                request = dict(item.get("defaultRequest") or {})
                for key, value in (item.get("max") or {}).items():
                    default.setdefault(key, value)
                for key, value in default.items():
                    request.setdefault(key, value)
                for key, value in (item.get("min") or {}).items():
                    request.setdefault(key, value)
                if default:
                    item["default"] = default
                if request:
                    item["defaultRequest"] = request
    elif kind == "PriorityClass":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif kind == "Queue" and isinstance(obj.get("spec"), dict):
        obj["spec"].setdefault("reclaimable", True)
        if not obj["spec"].get("weight"):
            obj["spec"]["weight"] = 1
    return obj


# ---------------------------------------------------------------- diffing


def _absent(value: Any) -> bool:
    return value is None or value == "" or value == {} or value == []


def _get(obj: Any, path: Path) -> Any:
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


def field_leaves(obj: Mapping[str, Any], kind: str | None = None) -> set[Path]:
    """The field paths server-side apply tracks for ``obj``: one per map key, atomic lists and
    scalars whole; in ``metadata`` only label and annotation keys. Empty values set nothing."""
    kind = kind or str(obj.get("kind"))
    atomic = ATOMIC_LISTS.get(kind, ())
    leaves: set[Path] = set()

    def walk(value: Any, path: Path) -> None:
        if _absent(value):
            return
        if isinstance(value, Mapping) and path not in atomic:
            for key, sub in value.items():
                walk(sub, (*path, key))
        else:
            leaves.add(path)

    for key, value in obj.items():
        if key in _NOT_OWNED_TOP_LEVEL:
            continue
        if key == "metadata":
            for section in _METADATA_MAPS:
                for name, sub in ((value or {}).get(section) or {}).items():
                    if sub is not None:
                        leaves.add(("metadata", section, name))
            continue
        walk(value, (key,))
    return leaves


def fields_v1_leaves(fields: Any, prefix: Path = ()) -> set[Path]:
    """Leaf paths of a ``managedFields[].fieldsV1`` tree.

    ``f:<name>`` is a field, ``.`` the node itself; ``k:{...}`` (an item of an associative list)
    and ``v:...`` (a set item) make their list one owned leaf, as atomic lists are compared whole.
    """
    leaves: set[Path] = set()
    if not isinstance(fields, Mapping):
        return leaves
    children = [key for key in fields if isinstance(key, str) and key != "."]
    if not children:
        if prefix:
            leaves.add(prefix)
        return leaves
    for key in children:
        if key.startswith("f:"):
            leaves |= fields_v1_leaves(fields[key], (*prefix, key[2:]))
        elif key.startswith(("k:", "v:", "i:")) and prefix:
            leaves.add(prefix)
    return leaves


def _covered(path: Path, owned: set[Path]) -> bool:
    """True when ``path`` or a field above or below it is in ``owned``."""
    return any(p[: len(path)] == path or path[: len(p)] == p for p in owned)


def _ownership(
    live: Mapping[str, Any], last_applied_annotation: str | None
) -> tuple[set[Path], set[Path]]:
    """(leaves our manager applied before, leaves other managers own) from the live object."""
    ours: set[Path] | None = None
    others: set[Path] = set()
    for entry in _get(live, ("metadata", "managedFields")) or ():
        if not isinstance(entry, Mapping):
            continue
        leaves = fields_v1_leaves(entry.get("fieldsV1") or {})
        if entry.get("manager") == MANAGER and entry.get("operation", "Apply") == "Apply":
            ours = (ours or set()) | leaves
        else:
            others |= leaves
    if ours is None and last_applied_annotation:
        raw = (_get(live, ("metadata", "annotations")) or {}).get(last_applied_annotation)
        try:
            previous = json.loads(raw) if raw else None
        except ValueError:
            previous = None
        if isinstance(previous, Mapping):
            ours = field_leaves(previous, str(live.get("kind")))
    return ours or set(), others


def diff_object(
    desired: Mapping[str, Any],
    live: Mapping[str, Any],
    *,
    parse_quantity: Callable[[str], Decimal],
    last_applied_annotation: str | None = None,
) -> tuple[FieldDiff, ...]:
    """Return the differences in the fields we own between a desired and a live object.

    Empty means applying ``desired`` would leave the live object as it is (``unchanged``). See
    the module docstring for which fields count.
    """
    kind = str(desired["kind"])
    quantities = _QUANTITY_PATHS.get(kind, ())
    want = server_defaults(desired)
    wanted = field_leaves(want, kind)
    previous, others = _ownership(live, last_applied_annotation)
    compare = set(wanted)
    compare |= {p for p in previous - wanted if not _covered(p, others)}
    have_labels = _get(live, ("metadata", "labels")) or {}
    compare |= {
        ("metadata", "labels", key)
        for key in have_labels
        if key.startswith(_OWNED_LABEL_PREFIX) or key == LABEL_MANAGED_BY
    }
    # A leaf whose parent we set whole (an atomic list) is compared with its parent.
    leaves = sorted(
        (p for p in compare if not any(q != p and p[: len(q)] == q for q in compare)),
        key=_path_order,
    )
    diffs: list[FieldDiff] = []
    for path in leaves:
        if path[0] == "metadata":
            old, new = _get(live, path), _get(want, path)
            if old != new:
                diffs.append(FieldDiff(".".join(str(p) for p in path), old, new))
            continue
        diffs += _diff(_get(live, path), _get(want, path), path, quantities, parse_quantity)
    return tuple(diffs)


def creation_diff(desired: Mapping[str, Any]) -> tuple[FieldDiff, ...]:
    """The field diffs of creating ``desired``: ``(none) -> value`` for every field we own.

    The same as ``diff_object(desired, {"kind": ..., "metadata": {}})``, walked directly: a
    first sync lists thousands of creates, and comparing each with nothing costs more than the
    request that creates it.
    """
    want = server_defaults(desired)
    diffs: list[FieldDiff] = []

    def walk(value: Any, path: Path) -> None:
        if _absent(value):
            return
        if isinstance(value, Mapping):
            for key in sorted(value):
                walk(value[key], (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))
        else:
            diffs.append(FieldDiff(_format_path(path), None, value))

    for path in sorted(field_leaves(want, str(desired["kind"])), key=_path_order):
        value = _get(want, path)
        if path[0] == "metadata":
            if value is not None:
                diffs.append(FieldDiff(".".join(str(p) for p in path), None, value))
            continue
        walk(value, path)
    return tuple(diffs)


def _path_order(path: Path) -> tuple[int, Path]:
    # metadata first, then the rest in path order (stable, readable diffs)
    return (0 if path[0] == "metadata" else 1, tuple(str(p) for p in path))


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


def _parent(obj: Mapping[str, Any] | None) -> str | None:
    """A Queue's parent; Volcano's ``root`` (patched onto parentless queues) is no parent."""
    parent = _get(obj, ("spec", "parent")) if obj is not None else None
    return None if parent in (None, "", ROOT_QUEUE) else str(parent)


def _depths(parents: Mapping[str, str | None]) -> dict[str, int]:
    depths: dict[str, int] = {}
    for name in parents:
        depth, current = 0, parents[name]
        # Bounded walk: a cycle in observed data must not hang the planner.
        while current and depth < len(parents):
            depth, current = depth + 1, parents.get(current)
        depths[name] = depth
    return depths


def _queue_depths(*objects: Mapping[Any, Mapping[str, Any]]) -> dict[str, int]:
    """Depth of each Queue in its hierarchy; the desired parent wins over the live one."""
    parents: dict[str, str | None] = {}
    for index in reversed(objects):
        for (kind, _, name), obj in index.items():
            if kind == "Queue":
                parents[name] = _parent(obj)
    return _depths(parents)


def plan(
    desired: Sequence[Mapping[str, Any]],
    live: Sequence[Mapping[str, Any]],
    *,
    parse_quantity: Callable[[str], Decimal],
    prune_namespaces: bool = False,
    last_applied_annotation: str | None = None,
) -> list[Change]:
    """Compare desired manifests with live objects and return the changes, in apply order.

    ``live`` objects must carry ``kind`` (LIST responses omit it per item; the observer fills it
    in). ``parse_quantity`` is ``kubernetes.utils.parse_quantity`` in production.
    ``last_applied_annotation`` names an annotation holding the manifest we applied last, used
    to find fields we no longer set when a live object has no ``managedFields`` of ours.

    Steps:
    1. index both sides by ``(kind, namespace, name)``; duplicates raise ValueError;
    2. desired and not live → ``create``; both → ``update`` with its field diffs, or
       ``unchanged`` when there are none (an unlabelled live object is adopted: the missing
       ownership label is one of the diffs);
    3. live, not desired, labelled ``app.kubernetes.io/managed-by: fairshare`` → ``prune``,
       except Namespaces unless ``prune_namespaces``: those are *released* instead (an
       ``update`` applying an empty manifest, which removes the labels and annotations we
       applied, the queue routing among them); unlabelled live objects are never touched;
    4. Queue updates get their shrink-stage ``interim`` (see :func:`apply_steps`);
    5. order: non-prunes by ``render.sort_key`` (dependency order), then prunes in reverse.

    Deterministic: the result depends only on the contents of the inputs, not their order.
    """
    want = _index(desired, "desired")
    have = _index(live, "live")
    depths = _queue_depths(want, have)
    interims, parents_of_survivors = _queue_interims(want, have, parse_quantity)
    live_depths = _queue_depths(have)
    changes: list[tuple[tuple[int, int, str, str], Change]] = []
    for key, body in want.items():
        kind, namespace, name = key
        current = have.get(key)
        if current is None:
            change = Change("create", kind, namespace, name, dict(body))
        else:
            diff = diff_object(
                body,
                current,
                parse_quantity=parse_quantity,
                last_applied_annotation=last_applied_annotation,
            )
            op: Op = "update" if diff else "unchanged"
            change = Change(op, kind, namespace, name, dict(body), diff)
            if op == "update" and key in interims:
                interim, stage = interims[key]
                change = replace(
                    change, interim=interim, stage=stage, live_depth=live_depths.get(name, 0)
                )
        changes.append((sort_key(body, depths), change))
    prunes: list[tuple[tuple[int, int, str, str], Change]] = []
    for key, body in have.items():
        kind, namespace, name = key
        if key in want or not _is_managed(body):
            continue
        adopted = ((body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ADOPTED)
        if kind == "Namespace" and (not prune_namespaces or adopted == "true"):
            # An adopted namespace (Fairshare did not create it) is never deleted either.
            # Kept, but released: applying a manifest with nothing in it makes server-side
            # apply remove every label and annotation we applied (the queue routing and our
            # ownership labels), so it no longer routes to a Queue that is gone.
            release = {
                "apiVersion": body.get("apiVersion", "v1"),
                "kind": kind,
                # What stays says Fairshare had it (scheduling.namespace_guard).
                "metadata": {"name": name, "annotations": {ANNOTATION_RELEASED: "true"}},
            }
            diff = diff_object(
                release,
                body,
                parse_quantity=parse_quantity,
                last_applied_annotation=last_applied_annotation,
            )
            if diff:
                changes.append(
                    (sort_key(body, depths), Change("update", kind, namespace, name, release, diff))
                )
            continue
        change = Change("prune", kind, namespace, name, dict(body))
        if kind == "Queue":
            # Deleted early (with its subtree) unless children that stay still hang below it.
            change = replace(
                change,
                interim=interims.get(key, (None, "main"))[0],
                stage="main" if name in parents_of_survivors else "shrink",
                live_depth=live_depths.get(name, 0),
            )
        prunes.append((sort_key(body, depths), change))
    changes.sort(key=lambda item: item[0])
    prunes.sort(key=lambda item: item[0], reverse=True)
    return [change for _, change in changes + prunes]


# ---------------------------------------------------------------- queue hierarchy ordering

ROOT_QUEUE = "root"
_HIERARCHY = ("capability", "deserved", "guarantee")


def _amounts(obj: Mapping[str, Any] | None, field: str) -> dict[str, Any]:
    if obj is None:
        return {}
    path = ("spec", "guarantee", "resource") if field == "guarantee" else ("spec", field)
    value = _get(obj, path)
    return dict(value) if isinstance(value, Mapping) else {}


def _meet(
    live: Mapping[str, Any], desired: Mapping[str, Any], *, missing_is_infinite: bool, parse: Any
) -> dict[str, Any]:
    """Per resource, the smaller of two amounts (absent = 0, or = ∞ for capabilities)."""
    result: dict[str, Any] = {}
    for resource in sorted(live.keys() | desired.keys()):
        values = [m[resource] for m in (live, desired) if resource in m]
        if len(values) == 1 and not missing_is_infinite:
            continue  # min(x, 0) = 0: left out
        result[resource] = min(values, key=lambda v: _quantity(v, parse))
    return result


def _quantity(value: Any, parse: Callable[[str], Decimal]) -> Decimal:
    try:
        return Decimal(parse(str(value)))
    except (ValueError, ArithmeticError):
        return Decimal(0)


def _with_amounts(
    body: Mapping[str, Any], parent: str | None, amounts: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    obj = copy.deepcopy(dict(body))
    spec = dict(obj.get("spec") or {})
    for field in _HIERARCHY:
        spec.pop(field, None)
    if amounts.get("capability"):
        spec["capability"] = dict(amounts["capability"])
    if amounts.get("guarantee"):
        spec["guarantee"] = {"resource": dict(amounts["guarantee"])}
    if amounts.get("deserved"):
        spec["deserved"] = dict(amounts["deserved"])
    spec.pop("parent", None)
    if parent:
        spec["parent"] = parent
    obj["spec"] = spec
    return obj


def _same_amounts(
    a: Mapping[str, Mapping[str, Any]],
    b: Mapping[str, Mapping[str, Any]],
    parse: Callable[[str], Decimal],
) -> bool:
    for field in _HIERARCHY:
        left, right = a.get(field) or {}, b.get(field) or {}
        if set(left) != set(right):
            return False
        if any(_quantity(left[r], parse) != _quantity(right[r], parse) for r in left):
            return False
    return True


def _queue_interims(
    want: Mapping[Any, Mapping[str, Any]],
    have: Mapping[Any, Mapping[str, Any]],
    parse: Callable[[str], Decimal],
) -> tuple[dict[Any, tuple[dict[str, Any], Stage]], set[str]]:
    """The shrink-stage manifest of every live Queue that has to shrink before others grow.

    Per resource, the smaller of the live and desired guarantee, deserved and capability (the
    "meet" of the two states: it satisfies every rule both states satisfy). A Queue that leaves
    its parent (its ``spec.parent`` changes away from a department) is also moved to the top
    level in this stage — a top-level Queue has no parent to fit — so its old parent can
    shrink; the main stage puts it under its new parent once that one has grown. Its
    descendants move with it. Returned only where the interim state differs from the live one;
    the stage is ``shrink`` when the interim state is the desired one (a pure decrease). Also
    returns the names of live Queues that have desired Queues below them (pruned ones among them
    are deleted last, after their children moved away).
    """
    live_queues = {key[2]: obj for key, obj in have.items() if key[0] == "Queue"}
    wanted_queues = {key[2]: obj for key, obj in want.items() if key[0] == "Queue"}
    old_parent = {name: _parent(obj) for name, obj in live_queues.items()}
    new_parent = {name: _parent(obj) for name, obj in wanted_queues.items()}

    def chain(parents: Mapping[str, str | None], name: str) -> tuple[str, ...]:
        out: list[str] = []
        current = parents.get(name)
        while current and current not in out and len(out) <= len(parents):
            out.append(current)
            current = parents.get(current)
        return tuple(out)

    survivors_below: set[str] = set()
    for name in wanted_queues:
        survivors_below.update(chain(old_parent, name))
    result: dict[Any, tuple[dict[str, Any], Stage]] = {}
    for name in sorted(live_queues):
        live, desired = live_queues[name], wanted_queues.get(name)
        if desired is None:
            continue  # pruned: deleted (early with its subtree, else after its children left)
        leaves = old_parent[name] is not None and old_parent[name] != new_parent.get(name)
        live_amounts = {f: _amounts(live, f) for f in _HIERARCHY}
        desired_amounts = {f: _amounts(desired, f) for f in _HIERARCHY}
        interim = {
            "capability": _meet(
                live_amounts["capability"],
                desired_amounts["capability"],
                missing_is_infinite=True,
                parse=parse,
            ),
            "guarantee": _meet(
                live_amounts["guarantee"],
                desired_amounts["guarantee"],
                missing_is_infinite=False,
                parse=parse,
            ),
            "deserved": _meet(
                live_amounts["deserved"],
                desired_amounts["deserved"],
                missing_is_infinite=False,
                parse=parse,
            ),
        }
        if not leaves and _same_amounts(interim, live_amounts, parse):
            continue  # nothing goes down: the change (if any) waits for the main stage
        body = _with_amounts(desired, None if leaves else old_parent[name], interim)
        pure = _same_amounts(interim, desired_amounts, parse) and (
            (None if leaves else old_parent[name]) == new_parent.get(name)
        )
        result[("Queue", None, name)] = (body, "shrink" if pure else "main")
    return result, survivors_below


@dataclass(frozen=True)
class Step:
    """One write of a sync: ``apply`` a manifest or ``delete`` an object, for ``change``;
    ``route`` applies a Namespace routed to a Queue the same plan creates, once that Queue
    reports Open (``route_queue`` says which; the sync waits for it, bounded)."""

    change: Change
    action: Literal["apply", "delete", "route"]
    body: dict[str, Any] | None

    @property
    def route_queue(self) -> str | None:
        """The Queue a ``route`` step waits for."""
        if self.action != "route" or self.body is None:
            return None
        return ((self.body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_QUEUE)

    def unrouted(self) -> Step:
        """This ``route`` step as a plain apply that keeps the Namespace's live routing (its
        old annotation, or none for a new Namespace): what goes out when the Queue does not
        open in time, so the Namespace and its quota still exist."""
        body = self.body or {}
        metadata = dict(body.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        old = next((d.old for d in self.change.diff if d.path == _ROUTE_PATH), None)
        if old is None:
            annotations.pop(ANNOTATION_QUEUE, None)
        else:
            annotations[ANNOTATION_QUEUE] = old
        metadata["annotations"] = annotations
        return Step(self.change, "apply", {**body, "metadata": metadata})


_ROUTE_PATH = f"metadata.annotations.{ANNOTATION_QUEUE}"
# Written after every Queue of the plan and before the namespaced kinds.
_ROUTE_RANK = (KIND_ORDER["Queue"], 1 << 30)


def _routes(change: Change, opening: Collection[str]) -> str | None:
    """The queue a Namespace create/update (re)routes to, when that changes; None otherwise.

    Such a write goes after every Queue write of the plan (and before the namespaced kinds),
    whole: nothing before that needs the Namespace. When its Queue is created by the same plan
    (``opening``) it is a ``route`` step, which the sync carries out only once the Queue
    reports Open. Volcano's ``mutate_podgroup.go`` reads the annotation when a PodGroup is
    created and ``validate_podgroup.go`` then requires the queue to exist and be Open: a
    PodGroup created between an early switch and the Queue's opening would be denied.
    """
    if change.kind != "Namespace" or change.op not in ("create", "update") or not change.body:
        return None
    queue = ((change.body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_QUEUE)
    if not queue:
        return None
    if change.op == "update" and not any(d.path == _ROUTE_PATH for d in change.diff):
        return None
    return queue


def apply_steps(changes: Sequence[Change]) -> list[Step]:
    """Order the writes of a plan so that every intermediate state passes Volcano's webhook.

    Volcano's ``validate_queue.go`` checks each Queue write against the Queues as they are at
    that moment (child capability <= nearest ancestor's, Σ children's guarantee and deserved <=
    the parent's, a queue with children cannot be deleted). So:

    1. **shrink** — deepest first (by the live hierarchy): delete Queues pruned with their whole
       subtree; apply each Queue's ``interim`` (what goes down); apply changes whose interim is
       the desired state (pure decreases). Shrinking a child never breaks its parent's sums and
       a parent shrinks only after its children.
    2. **main** — :func:`plan` order (Namespaces, PriorityClasses, Queues parents first, then
       namespaced kinds): every other create and update. A parent grows before its children,
       and siblings only grow after all of them shrank in step 1. A Namespace whose
       ``scheduling.volcano.sh/queue-name`` is set or changes is written after every Queue
       write (a ``route`` step when its Queue is new: the sync waits until it is Open).
    3. **prune** — the remaining prunes in reverse dependency order (a Queue that still had
       children waits until they moved away).

    An update touching an immutable field is a delete then an apply (``needs_replace``).
    Unchanged objects produce no step. Deterministic. The same writes as
    :func:`apply_waves`, one after the other.
    """
    return [step for wave in apply_waves(changes) for unit in wave for step in unit]


def apply_waves(changes: Sequence[Change]) -> list[list[tuple[Step, ...]]]:
    """The writes of :func:`apply_steps` in *waves* that concurrent writers may carry out.

    A wave is a list of units; a unit is the writes of one change that must follow each other
    (a delete before a re-create). Units of one wave are independent of each other — the same
    kind at the same Queue depth in the same stage: siblings, never a parent and its child, never
    a namespaced object and its Namespace — so they may go out in any order or all at once. Every
    wave must be finished before the next starts; that keeps the order of kinds, depths and
    stages of :func:`apply_steps` and with it every rule that order exists for (Volcano's
    hierarchy checks at every intermediate state; a Role before the RoleBindings that refer to
    it, as RBAC's escalation check in the API server resolves the Role being bound).
    """
    early: dict[int, list[tuple[str, tuple[Step, ...]]]] = {}
    main: dict[tuple[int, int], list[tuple[Step, ...]]] = {}
    late: dict[tuple[int, int], list[tuple[Step, ...]]] = {}
    depths = _depths(
        {c.name: _parent(c.body) for c in changes if c.kind == "Queue" and c.body is not None}
    )

    opening = {c.name for c in changes if c.kind == "Queue" and c.op == "create"}

    def rank(change: Change) -> tuple[int, int]:
        level = depths.get(change.name, 0) if change.kind == "Queue" else 0
        return KIND_ORDER.get(change.kind, len(KIND_ORDER)), level

    for change in changes:
        if change.op == "unchanged":
            continue
        stage = early.setdefault(-change.live_depth, [])
        if change.op == "prune":
            delete = Step(change, "delete", None)
            if change.kind == "Queue" and change.stage == "shrink":
                stage.append((change.name, (delete,)))
                continue
            if change.interim is not None:
                stage.append((change.name, (Step(change, "apply", change.interim),)))
            late.setdefault(rank(change), []).append((delete,))
            continue
        writes: tuple[Step, ...] = (Step(change, "apply", change.body),)
        queue = _routes(change, opening)
        if queue is not None:
            writes = (Step(change, "route" if queue in opening else "apply", change.body),)
        if change.needs_replace:
            writes = (Step(change, "delete", None), *writes)
        if queue is not None:
            main.setdefault(_ROUTE_RANK, []).append(writes)
            continue
        if change.interim is not None and change.stage == "shrink":
            stage.append((change.name, writes))
            continue
        if change.interim is not None:
            stage.append((change.name, (Step(change, "apply", change.interim),)))
        main.setdefault(rank(change), []).append(writes)
    waves: list[list[tuple[Step, ...]]] = [
        [unit for _, unit in sorted(early[depth], key=lambda item: item[0])]
        for depth in sorted(early)
        if early[depth]
    ]
    waves += [main[key] for key in sorted(main)]
    waves += [late[key] for key in sorted(late, reverse=True)]
    return waves


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


# ---------------------------------------------------------------- kubectl passes


def kubectl_passes(changes: Sequence[Change]) -> list[str]:
    """Why one ``kubectl apply`` pass of the final manifests cannot take the cluster from the
    previous state to this one (empty: one pass is enough).

    ``kubectl apply -R`` writes each file once, final amounts, in lexical order, and deletes
    nothing. Volcano's webhook checks every write against its (lagging) cache of the Queues
    (``validate_queue.go``), so a pass is not enough when:

    1. a Queue must shrink before another grows (a change with a shrink-stage ``interim``, or
       a pure decrease that :func:`apply_waves` writes in the shrink stage): the file order
       may grow a sibling first, and the sums over a parent are denied;
    2. a Queue is created or re-parented under a parent that this same set of changes creates
       or grows: the webhook may not see the parent's write yet (its informer lags), so the
       child is denied until a second pass;
    3. a Queue is removed: ``kubectl apply`` does not delete (without ``--prune``), and a
       Queue with children cannot be deleted before them.
    """
    reasons: list[str] = []
    queues = [c for c in changes if c.kind == "Queue" and c.op != "unchanged"]
    parents_written = {c.name for c in queues if c.op in ("create", "update")}
    for change in queues:
        if change.op == "prune":
            reasons.append(f"Queue {change.name} is no longer desired: delete it (children first)")
        elif change.interim is not None or change.stage == "shrink":
            reasons.append(f"Queue {change.name} shrinks: it must be written before others grow")
        else:
            parent = _parent(change.body)
            if parent in parents_written:
                reasons.append(
                    f"Queue {change.name} sits under {parent}, which this change also writes: "
                    "the webhook may not see the parent's new state yet"
                )
    return reasons
