"""``plan(desired, live)``: pair rendered manifests with observed objects, one Change each.

Modelled on kopf's ``DiffItem`` (``kopf/_cogs/structs/diffs.py``): :func:`plan` pairs rendered
manifests with observed objects by ``(kind, namespace, name)`` and returns one
:class:`~.changes.Change` per object — ``create``, ``update`` (with the field diffs),
``unchanged`` or ``prune``. The apply side server-side-applies creates and updates, skips
unchanged objects (a steady-state sync issues zero writes) and deletes prunes, in the order of
:func:`.waves.apply_steps`.

Invariant (pruning rules): only objects labelled ``app.kubernetes.io/managed-by: fairshare`` are
ever pruned; Namespaces are never pruned unless ``prune_namespaces`` is set, and an adopted one
never: those are released instead. The result depends only on the contents of the inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from scheduling.domain.render.keys import object_key, sort_key
from scheduling.domain.render.labels import (
    ANNOTATION_ADOPTED,
    ANNOTATION_RELEASED,
    LABEL_MANAGED_BY,
    MANAGER,
)

from .changes import Change, Op
from .diff import diff_object
from .fields import value_at
from .hierarchy import depths_from_parents, queue_interims, queue_parent

__all__ = ["plan"]


def _is_managed(obj: Mapping[str, Any]) -> bool:
    return (value_at(obj, ("metadata", "labels")) or {}).get(LABEL_MANAGED_BY) == MANAGER


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
                parents[name] = queue_parent(obj)
    return depths_from_parents(parents)


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
    4. Queue updates get their shrink-stage ``interim`` (see :func:`.waves.apply_steps`);
    5. order: non-prunes by ``render.sort_key`` (dependency order), then prunes in reverse.

    Deterministic: the result depends only on the contents of the inputs, not their order.
    """
    want = _index(desired, "desired")
    have = _index(live, "live")
    depths = _queue_depths(want, have)
    interims, parents_of_survivors = queue_interims(want, have, parse_quantity)
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
