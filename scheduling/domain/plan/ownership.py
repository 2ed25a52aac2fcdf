"""Owned fields: which leaves of an object server-side apply would change for us.

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
  markers, always ours; see :func:`.diff.diff_object`).

Invariant: a leaf is a path server-side apply tracks as one field (a map key, an atomic list
or a scalar); in ``metadata`` only label and annotation keys count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduling.domain.render.labels import MANAGER

from .fields import ATOMIC_LISTS, Path, absent, value_at

__all__ = ["covered", "field_leaves", "fields_v1_leaves", "ownership"]

# Fields of a manifest that are never compared (identity and server-owned parts).
_NOT_OWNED_TOP_LEVEL = frozenset({"apiVersion", "kind", "status"})

_METADATA_MAPS = ("labels", "annotations")


def field_leaves(obj: Mapping[str, Any], kind: str | None = None) -> set[Path]:
    """The field paths server-side apply tracks for ``obj``: one per map key, atomic lists and
    scalars whole; in ``metadata`` only label and annotation keys. Empty values set nothing."""
    kind = kind or str(obj.get("kind"))
    atomic = ATOMIC_LISTS.get(kind, ())
    leaves: set[Path] = set()

    def walk(value: Any, path: Path) -> None:
        if absent(value):
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


def covered(path: Path, owned: set[Path]) -> bool:
    """True when ``path`` or a field above or below it is in ``owned``."""
    return any(p[: len(path)] == path or path[: len(p)] == p for p in owned)


def ownership(
    live: Mapping[str, Any], last_applied_annotation: str | None
) -> tuple[set[Path], set[Path]]:
    """(leaves our manager applied before, leaves other managers own) from the live object."""
    ours: set[Path] | None = None
    others: set[Path] = set()
    for entry in value_at(live, ("metadata", "managedFields")) or ():
        if not isinstance(entry, Mapping):
            continue
        leaves = fields_v1_leaves(entry.get("fieldsV1") or {})
        if entry.get("manager") == MANAGER and entry.get("operation", "Apply") == "Apply":
            ours = (ours or set()) | leaves
        else:
            others |= leaves
    if ours is None and last_applied_annotation:
        raw = (value_at(live, ("metadata", "annotations")) or {}).get(last_applied_annotation)
        try:
            previous = json.loads(raw) if raw else None
        except ValueError:
            previous = None
        if isinstance(previous, Mapping):
            ours = field_leaves(previous, str(live.get("kind")))
    return ours or set(), others
