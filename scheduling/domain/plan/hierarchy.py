"""The queue hierarchy as the planner sees it: parents, depths, and the shrink stage.

Volcano's ``validate_queue.go`` checks each Queue write against the Queues as they are at that
moment, so amounts that go down are written first (:func:`queue_interims`: the per-resource
"meet" of the live and desired state), before anything grows.

Invariant: an interim state satisfies every hierarchy rule that both the live and the desired
state satisfy; walks over observed parents are bounded, so a cycle in live data cannot hang.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from .changes import Stage
from .fields import value_at

__all__ = ["ROOT_QUEUE", "depths_from_parents", "queue_interims", "queue_parent"]

ROOT_QUEUE = "root"

_HIERARCHY = ("capability", "deserved", "guarantee")


def queue_parent(obj: Mapping[str, Any] | None) -> str | None:
    """A Queue's parent; Volcano's ``root`` (patched onto parentless queues) is no parent."""
    parent = value_at(obj, ("spec", "parent")) if obj is not None else None
    return None if parent in (None, "", ROOT_QUEUE) else str(parent)


def depths_from_parents(parents: Mapping[str, str | None]) -> dict[str, int]:
    """Depth of each Queue (0 at the top) from a map of Queue name to parent name."""
    depths: dict[str, int] = {}
    for name in parents:
        depth, current = 0, parents[name]
        # Bounded walk: a cycle in observed data must not hang the planner.
        while current and depth < len(parents):
            depth, current = depth + 1, parents.get(current)
        depths[name] = depth
    return depths


def _amounts(obj: Mapping[str, Any] | None, field: str) -> dict[str, Any]:
    if obj is None:
        return {}
    path = ("spec", "guarantee", "resource") if field == "guarantee" else ("spec", field)
    value = value_at(obj, path)
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


def queue_interims(
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
    old_parent = {name: queue_parent(obj) for name, obj in live_queues.items()}
    new_parent = {name: queue_parent(obj) for name, obj in wanted_queues.items()}

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
