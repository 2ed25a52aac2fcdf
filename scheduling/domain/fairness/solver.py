"""The solver: validate, fill depth by depth (or run H-DRF), round, and build the allocations.

Invariant: :func:`solve` returns one :class:`.Allocation` per tenant, keyed and ordered by tenant
name, every ``resources`` dict holding every capacity resource in name order; the same input
gives the same output whatever the order of ``tenants``; nothing here allocates (the modules
below do), this only assembles.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat

import numpy as np

from .filling import _clamp, _fill, _segments
from .hierarchy import _tree
from .model import (
    _OWN_DEMAND_WEIGHT,
    REASON_DEMAND_MET,
    REASON_LIMIT,
    SATURATED_PREFIX,
    Allocation,
    Tenant,
    _Problem,
)
from .rounding import _round_integral
from .validation import _cut, _validate


def solve(
    capacity: Mapping[str, float],
    tenants: Sequence[Tenant],
    *,
    integral: Iterable[str] = frozenset(),
) -> dict[str, Allocation]:
    """Share ``capacity`` among ``tenants`` by weighted hierarchical DRF; see the module docstring.

    Steps:
    1. Validate the problem and build vectors (raise :class:`ProblemError` on the first fault).
    2. Fill the roots against the capacity, round their integral resources.
    3. For each parent, fill its children (and its own demand) against its rounded allocation,
       round, and recurse.
    4. Measure every allocation's dominant share against the total capacity.

    Return one :class:`Allocation` per tenant, keyed and ordered by tenant name; every
    ``resources`` dict holds every capacity resource, ordered by name.
    """
    # The solver creates a few containers per tenant (result dicts and objects, rows) and no
    # reference cycles: the cyclic garbage collector would only traverse them, and the caller's
    # objects, again and again (measured: 100,000 tenants take about 40 % longer with it running,
    # 10,000 about 8 %). It is paused, and restored on the way out whatever happens.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _solve(_validate(capacity, tenants, integral))
    finally:
        if paused:
            gc.enable()


def _solve(problem: _Problem, fast: bool = True) -> dict[str, Allocation]:
    """Fill the groups of ``problem`` top-down, depth by depth, and build the allocations.

    All sibling groups of one depth are filled in one batch (:func:`_fill` keeps them apart):
    the roots first, then the children of every root at once against their parents' rounded
    allocations, and so on. A parent with its own demand takes part in its children's group as
    an implicit member (see the module docstring) whose result is dropped.

    Just over 80 lines: the depth loop keeps the arrays of one depth in hand for the next, and
    its steps (gather the groups, fill, round, hand the rounded amounts down) read in order here.
    """
    resources = problem.resources
    names = problem.names
    n, n_res = len(names), len(resources)
    if n == 0:
        return {}
    demand, weight, floor, limit = problem.demand, problem.weight, problem.floor, problem.limit
    own, parent, depth = problem.own_demand, problem.parent, problem.depth
    has_own = own.any(axis=1)
    total = np.array(problem.capacity, dtype=float)
    allocated = np.zeros((n, n_res))
    code = np.zeros(n, dtype=np.intp)
    levels = int(depth.max()) + 1
    if levels > 1 and n_res:
        allocated, code = _solve_tree(problem, fast)
        levels = 0
    for level in range(levels):
        src = np.flatnonzero(depth == level)
        if level == 0:
            starts = np.zeros(1, dtype=np.intp)
            group = np.zeros(len(src), dtype=np.intp)
            group_cap = total[None, :]
            implicit = None
        else:
            # Groups of siblings, by parent; a parent's own demand is a member of its group.
            up = parent[src]
            is_parent = np.zeros(n, dtype=bool)
            is_parent[up] = True
            extra = np.flatnonzero(is_parent & has_own)
            keys = np.concatenate((up, extra))
            rows = np.concatenate((src, extra))
            order = np.lexsort((rows, keys))  # numbers follow names: row order = name order
            src, keys = rows[order], keys[order]
            implicit = np.concatenate(
                (np.zeros(len(up), dtype=bool), np.ones(len(extra), dtype=bool))
            )[order]
            starts = _segments(keys)
            group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(src))))
            group_cap = allocated[keys[starts]]
        if level == 0 and len(src) == n:  # every tenant is a root: no copies
            b_demand, b_weight, b_floor, b_limit = demand, weight, floor, limit
        else:
            b_demand, b_weight, b_floor = demand[src], weight[src], floor[src]
            b_limit = limit[src]
        if implicit is not None and implicit.any():
            b_demand[implicit] = own[src[implicit]]
            b_weight[implicit] = _OWN_DEMAND_WEIGHT
            b_floor[implicit] = 0.0
            b_limit[implicit] = np.inf
        x, why, targets = _fill(
            group_cap, group, starts, b_demand, b_weight, b_floor, b_limit, problem.integral
        )
        if problem.integral:
            _round_integral(group_cap, group, starts, problem.integral, targets, x)
        if implicit is not None and implicit.any():
            keep = ~implicit
            src, x, why = src[keep], x[keep], why[keep]
        allocated[src] = x
        code[src] = why

    reasons = [REASON_DEMAND_MET, REASON_LIMIT, *(SATURATED_PREFIX + r for r in resources)]
    why = list(map(reasons.__getitem__, code.tolist()))
    if n_res:
        # Dividing by +inf ignores zero-capacity resources, as dominant_share() does; argmax
        # finds the first maximum, and resources are sorted: ties go by name.
        quotients = allocated / np.where(total > 0.0, total, np.inf)
        share = quotients.max(axis=1)
        first = quotients.argmax(axis=1)
        shares = share.tolist()
        named = [*resources, ""]  # nothing used: no dominant resource
        dominant = list(map(named.__getitem__, np.where(share > 0.0, first, n_res).tolist()))
    else:
        shares, dominant = [0.0] * n, [""] * n
    amounts = list(map(dict, map(zip, repeat(resources), allocated.tolist())))
    return dict(zip(names, _allocations(amounts, shares, dominant, why), strict=True))


def _allocations(
    amounts: list[dict[str, float]], shares: list[float], dominant: list[str], why: list[str]
) -> list[Allocation]:
    """``list(map(Allocation, amounts, shares, dominant, why))``, without the per-object call.

    The frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; the
    objects are created bare and their slots filled column-wise through the slot descriptors
    instead (about half the time). ``Allocation`` has no ``__post_init__``: the result is the same.
    """
    objects = list(map(object.__new__, repeat(Allocation, len(amounts))))
    for slot, values in zip(_ALLOCATION_SLOTS, (amounts, shares, dominant, why), strict=True):
        deque(map(slot, objects, values), maxlen=0)
    return objects


_ALLOCATION_SLOTS = tuple(
    getattr(Allocation, name).__set__
    for name in ("resources", "dominant_share", "dominant_resource", "reason")
)


def _solve_tree(problem: _Problem, fast: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Allocations ``(n, R)`` and reason codes ``(n,)`` of a hierarchical problem.

    Steps:
    1. Static H-DRF in continuous form (:func:`_tree`).
    2. Top-down, per sibling group: round the integral resources (the roots to at most the
       capacity, every other group to its parent's rounded amount), and trim round-off so that
       no group's exact sum exceeds its parent's (the roots': the capacity).
    3. Bottom-up: an internal member's integral amounts become its children's sum (where a
       group could not reach its parent's rounded amount without passing a demand).
    4. Reasons of internal tenants: ``limit`` if one of its own limits bound; ``demand-met`` if
       every leaf below reached its demand or limit; otherwise the resource that stopped the last
       of its leaves to stop (ties by resource name).
    """
    final, code, event, triggered, depths, unit, n_rows, own_rows, leaf_like = _tree(problem, fast)
    n, n_res = len(problem.names), len(problem.resources)
    x = np.zeros((n_rows, n_res))
    for level, d in enumerate(depths):
        x[d.rows] = final[level]["x"]
    x *= unit
    demand = np.concatenate((problem.demand, problem.own_demand[own_rows]))
    limit = np.concatenate((problem.limit, np.full((len(own_rows), n_res), np.inf)))
    floor = np.concatenate((problem.floor, np.zeros((len(own_rows), n_res))))
    target = demand * _cut(demand, limit)[:, None]
    key = np.where(code >= 2, (event + 1) * (n_res + 2) + (n_res + 2 - code), -1)
    for level in range(len(depths) - 1, 0, -1):  # targets and reason keys of internal rows
        d, up = depths[level], depths[level - 1]
        parents = up.rows[up.ints]
        target[parents] = np.minimum(
            np.add.reduceat(target[d.rows], d.starts, axis=0), limit[parents]
        )
        key[parents] = np.maximum.reduceat(key[d.rows], d.starts)
    total = np.array(problem.capacity, dtype=float)
    other = [r for r in range(n_res) if r not in problem.integral]
    for level, d in enumerate(depths):
        if level == 0:
            cap = total[None, :]
        else:
            up = depths[level - 1]
            cap = x[up.rows[up.ints]]
        values = x[d.rows]
        if problem.integral:
            _round_integral(
                cap, d.grp, d.starts, problem.integral, target[d.rows], values, to_cap=level > 0
            )
        _clamp(cap, d.starts, floor[d.rows], values, other)
        x[d.rows] = values
    for level in range(len(depths) - 1, 0, -1):
        d, up = depths[level], depths[level - 1]
        parents = up.rows[up.ints]
        for r in problem.integral:
            x[parents, r] = np.add.reduceat(x[d.rows, r], d.starts)
    internal = ~leaf_like[:n]
    short = key[:n] >= 0
    codes = code[:n].copy()
    codes[internal & ~short] = 0
    decoded = n_res + 2 - key[:n] % (n_res + 2)
    codes[internal & short] = decoded[internal & short]
    for owner, _ in triggered:
        codes[owner] = 1
    return x[:n], codes
