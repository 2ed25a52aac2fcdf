"""Weighted, hierarchical Dominant Resource Fairness by continuous progressive filling (pure).

Vocabulary
----------
*Dominant share* of a resource vector ``x`` against a capacity ``C`` is ``max_r x[r] / C[r]`` over
the resources with ``C[r] > 0``; the resource reaching the maximum is the *dominant resource*
(ties: first by name). A tenant's *demand* ``d`` is what it would use if it could; its *dominant
demand share* is ``s = dominant_share(d, C)``.

The filling (one group of siblings against one capacity vector)
---------------------------------------------------------------
Weighted DRF (Ghodsi et al., NSDI 2011), continuous form. A single *water level* ``L`` rises from 0.
A growing tenant ``i`` with weight ``w`` sits at the point ``p_i(L) = (w * L / s) * d`` of its
demand direction, whose dominant share is exactly ``w * L``: dominant share divided by weight is
equal across growing tenants. Its allocation is the component-wise maximum of that point and its
*floor* ``g = min(guarantee, demand)``::

    x_i[r](L) = max(g[r], w * L * d[r] / s)

so a tenant starts at its guaranteed floor, its dominant share stays ``dominant_share(g)`` until
the water level reaches it (``w * L``), and it then grows with everybody else. Component ``r`` of a
tenant is *active* (draws on ``r`` at the margin) once ``L >= g[r] * s / (w * d[r])`` (its
breakpoint; 0 without a guarantee). A tenant freezes, keeping its allocation at the level where it
stopped, when the first of these happens:

* ``demand-met``: it reaches its demand, at ``L = s / w``;
* ``limit``: it reaches its limit, at ``L = f * s / w`` where ``f = min_r limit[r] / d[r] < 1``
  (it stops at ``max(g, f * d)``: like a task shape, the vector stops as a whole);
* ``saturated:<r>``: a resource ``r`` it draws on at the margin is exhausted. A tenant whose
  component ``r`` is still held up by its floor keeps growing until its breakpoint for ``r`` and
  freezes there. Without guarantees every positive demand component is active from ``L = 0``, so
  this is exactly "a resource with a positive demand component is exhausted". A tenant demanding a
  resource of zero capacity is saturated at once.

Algorithm (event-driven, ``O(n R log(n R))``)
------------------------------------------
Resource consumption is piecewise linear in ``L``: ``used[r](L) = A[r] + S[r] * L`` between
events, where ``A`` holds frozen amounts and floors not yet overtaken and ``S`` the slopes of the
active components. Tenant events (breakpoints and demand/limit levels) are sorted once; the sweep
applies them in order while no resource saturates first. The saturation level of ``r`` is
``(C[r] - A[r]) / S[r]``; breakpoints only make it earlier and caps only later, so a lower bound is
kept and the exact minimum over resources is recomputed only when the next event passes that bound.
When a resource saturates, the tenants actively drawing on it freeze (each tenant freezes once, each
resource saturates once). Per-member quantities are kept in columns (one list per resource) and
combined with ``map``, ``compress`` and ``fsum`` so that loops over members run in C; exact sums
(``fsum``) do not depend on the order of their terms, so batching them changes nothing. Float
round-off is absorbed with a relative tolerance of ``1e-9`` (a tenant reaching its demand at the
same level as a saturation counts as ``demand-met``) and a
final clamp that trims above-floor amounts if a sum ends a few ulps over capacity.

Hierarchy (H-DRF, solved top-down)
----------------------------------
Tenants whose ``parent`` is ``None`` are the roots and share the cluster capacity. A parent's
*effective demand* is its own demand plus what each child can use: the child's effective demand
cut down to its limit along the demand vector, or its floor where that is larger (callers must not
pre-aggregate); the parent's own limit then applies to it as to any tenant. Its
*effective guarantee* is the component-wise maximum of its own guarantee and the sum of its
children's effective guarantees. Each group of
siblings is filled against its parent's allocation (the roots against the capacity), with shares
measured against that allocation; a parent's own demand, if any, competes with its children as an
implicit member of weight 1 with no guarantee or limit (as tasks in a cgroup-v1 parent compete with
its child groups at the default weight). A parent's :class:`Allocation` is its whole subtree's
allocation, children are carved out of it. A child's ``saturated:<r>`` can mean that its parent's
share of ``r`` ran out. Capacity a group leaves unused (siblings of very different shapes) is not
offered to other groups: this two-stage form trades that for simplicity and speed.

Integral resources
------------------
Resources named in ``integral`` (``nvidia.com/gpu``) are rounded per group, after filling and
before the children of that group are filled: every member gets ``floor(x)``, then the
``floor(sum x)`` total (at most the group's capacity) is reached by giving one more unit to the
largest remainders, ties by name, never above a member's demand or limit (rounded down). Other
resources of the vector are left as filled.

Guarantees of :func:`solve`
---------------------------
No resource is allocated over capacity; no tenant gets more than its demand or its limit; each
tenant gets at least ``min(guarantee, demand)`` (up to rounding of a fractional guarantee on an
integral resource); ties break by tenant name and then resource name, so the output is the same for
the same input whatever the order of ``tenants``. Invalid problems raise :class:`ProblemError`.

Command line: ``python -m scheduling.domain.fairness < problem.json > allocations.json``.
"""

from __future__ import annotations

import gc
import json
import math
import sys
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain, compress, repeat
from operator import (
    add,
    and_,
    attrgetter,
    ge,
    gt,
    is_,
    is_not,
    itemgetter,
    le,
    mul,
    neg,
    or_,
    setitem,
    sub,
    truediv,
)
from typing import Any, TextIO

__all__ = [
    "REASON_DEMAND_MET",
    "REASON_LIMIT",
    "SATURATED_PREFIX",
    "Allocation",
    "ProblemError",
    "Tenant",
    "dominant_share",
    "main",
    "solve",
]

REASON_DEMAND_MET = "demand-met"
REASON_LIMIT = "limit"
SATURATED_PREFIX = "saturated:"

# Relative tolerance for comparing levels and amounts computed in floating point.
_EPS = 1e-9
# Weight of a parent's own demand when it competes with the parent's children.
_OWN_DEMAND_WEIGHT = 1.0
# Tenants per chunk of the final share computation (its temporaries stay in cache).
_CHUNK = 2048
# Placeholder vector (allocations not computed yet).
_NO_SLOPE: list[float] = []


class ProblemError(ValueError):
    """The problem is malformed; the message names the tenant, field and rule."""


@dataclass(frozen=True)
class Tenant:
    """One tenant (team or department) of the fair-share problem."""

    name: str
    demand: Mapping[str, float]  # what it would use if it could (usage + pending)
    weight: float = 1.0
    guarantee: Mapping[str, float] = field(default_factory=dict)  # reserved minimum
    limit: Mapping[str, float] | None = None  # ceiling; None = no ceiling
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a tenant receives; ``dominant_share`` is measured against the total capacity."""

    resources: dict[str, float]
    dominant_share: float
    dominant_resource: str
    reason: str  # 'demand-met' | 'limit' | 'saturated:<resource>'


def dominant_share(usage: Mapping[str, float], capacity: Mapping[str, float]) -> tuple[float, str]:
    """Return ``(max_r usage[r] / capacity[r], r)`` over resources with positive capacity.

    Resources missing from ``capacity`` or with zero capacity are ignored. Ties go to the first
    resource by name. Return ``(0.0, "")`` when nothing is used.
    """
    best, best_resource = 0.0, ""
    for resource in sorted(usage):
        cap = capacity.get(resource, 0.0)
        if cap > 0:
            share = usage[resource] / cap
            if share > best:
                best, best_resource = share, resource
    return float(best), best_resource


# ---------------------------------------------------------------- solve


@dataclass(frozen=True)
class _Problem:
    """A validated problem, with vectors indexed like ``resources`` (sorted names).

    Tenants are numbered in name order: per-tenant lists are indexed by that number, so that
    index order breaks ties by name.
    """

    resources: list[str]
    capacity: list[float]
    integral: list[int]
    names: list[str]  # sorted tenant names
    weight: list[float]
    demand: list[list[float]]  # effective (own + children's)
    own_demand: list[list[float]]
    floor: list[list[float]]  # effective guarantee, up to the effective demand
    limit: list[list[float] | None]
    children: dict[int | None, list[int]]  # sorted; key None holds the roots
    zeros: list[float]  # the floor of tenants without one (shared, never changed)


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


def _solve(problem: _Problem) -> dict[str, Allocation]:
    """Fill the groups of ``problem`` top-down and build the allocations (see :func:`solve`)."""
    resources = problem.resources
    total_cap = problem.capacity
    names = problem.names
    children = problem.children
    demand, weight, floor, limit = problem.demand, problem.weight, problem.floor, problem.limit
    n = len(names)
    zeros = problem.zeros
    allocated: list[Sequence[float]] = [_NO_SLOPE] * n
    why: list[str] = [REASON_DEMAND_MET] * n
    pending: list[tuple[int | None, list[float]]] = [(None, total_cap)]
    while pending:
        parent, group_cap = pending.pop()
        members = children[parent]
        if parent is not None and any(problem.own_demand[parent]):
            # The parent's own demand competes as an implicit member under the parent's name
            # (see module docstring); numbers follow names, so index order breaks ties.
            members = sorted([*members, parent])
            demands = [problem.own_demand[i] if i == parent else demand[i] for i in members]
            weights = [_OWN_DEMAND_WEIGHT if i == parent else weight[i] for i in members]
            floors = [zeros if i == parent else floor[i] for i in members]
            limits = [None if i == parent else limit[i] for i in members]
        elif len(members) == n:  # every tenant is a root: members are 0 .. n - 1
            parent = None
            demands, weights, floors, limits = demand, weight, floor, limit
        else:
            parent = None
            demands = list(map(demand.__getitem__, members))
            weights = list(map(weight.__getitem__, members))
            floors = list(map(floor.__getitem__, members))
            limits = list(map(limit.__getitem__, members))
        allocs, reasons, targets = _fill(
            group_cap, resources, demands, weights, floors, limits, zeros
        )
        if problem.integral:
            _round_integral(group_cap, problem.integral, targets, allocs)
        rows = list(zip(*allocs, strict=True)) if allocs else [()] * len(members)
        if parent is not None:  # drop the parent's own demand: its allocation is already set
            k = members.index(parent)
            del members[k], rows[k], reasons[k]
        deque(map(setitem, repeat(allocated), members, rows), maxlen=0)
        deque(map(setitem, repeat(why), members, reasons), maxlen=0)
        if len(children) > 1:
            pending.extend((i, list(allocated[i])) for i in filter(children.__contains__, members))

    # Dividing by +inf ignores zero-capacity resources, as dominant_share() does.
    divisor = [c if c > 0.0 else math.inf for c in total_cap]
    if resources:
        # In chunks, so that the quotient lists of one chunk are freed and their memory reused
        # by the next while it is still in cache (faster than one list per tenant at once).
        shares, first = [], []
        for start in range(0, n, _CHUNK):
            chunk = allocated[start : start + _CHUNK]
            per_resource = list(map(list, map(map, repeat(truediv), chunk, repeat(divisor))))
            chunk_shares = list(map(max, per_resource))
            shares += chunk_shares
            # index() finds the first maximum: resources are sorted, so ties go by name.
            first += map(resources.__getitem__, map(list.index, per_resource, chunk_shares))
        dominant = [r if share > 0.0 else "" for r, share in zip(first, shares, strict=True)]
    else:
        shares, dominant = [0.0] * n, [""] * n
    amounts = [dict(zip(resources, row, strict=True)) for row in allocated]
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


# ---------------------------------------------------------------- filling


def _column_sums(rows: list[list[float]], n_res: int) -> list[float]:
    """Exact (``fsum``) sum of each column of ``rows``.

    ``zip`` reads every row once per column in C, which is faster on large scattered rows than an
    ``itemgetter`` per element; the exact sum does not depend on the order of its terms.
    """
    if not rows:
        return [0.0] * n_res
    return list(map(math.fsum, zip(*rows, strict=True)))


def _fill(
    cap: list[float],
    resources: list[str],
    demands: list[list[float]],
    weights: list[float],
    floors: list[list[float]],
    limits: list[list[float] | None],
    zeros: list[float],
) -> tuple[list[list[float]], list[str], list[Sequence[float]]]:
    """Fill one group of members against ``cap``; return (allocs, reasons, targets) by column.

    ``allocs[r][i]`` is member ``i``'s amount of resource ``r``; ``targets[r][i]`` what it could
    use: its demand, cut down to its limit along the demand vector. ``floors[i] is zeros`` marks a
    member without a floor (the common case, handled column-wise).

    Members must be ordered by name (index order breaks ties). Steps:
    1. Count floors as consumption (scaled down to fit if a rounded parent allocation is smaller
       than its children's floors, which only a fractional guarantee on an integral resource can
       cause). Members needing a zero-capacity resource are saturated at once; members demanding
       nothing are demand-met at once.
    2. For every other member compute its slopes ``w * d[r] / s``, its cap level (demand or
       limit) and the breakpoints of components held up by the floor; activate the others.
    3. Sweep cap levels and breakpoints in order; when the next one lies beyond the lower bound on
       the first saturation, compute the saturation levels exactly and, if a resource runs out
       first, freeze the members actively drawing on it at that level.
    4. Evaluate each member's allocation at its freezing level and clamp round-off overshoot.

    Invariants: the water level never decreases; consumption of every resource stays within its
    capacity (up to the relative tolerance, removed in step 4); each member freezes exactly once.
    This is the hot loop of the solver: per-member quantities are kept in columns (one list per
    resource, or per quantity) and combined with ``map`` so that the loops over members run in C;
    only members with a floor, and events, are handled one by one.
    """
    n_res = len(cap)
    n = len(demands)
    if n == 0:
        return [[] for _ in cap], [], [[] for _ in cap]
    inf = math.inf
    fsum = math.fsum
    members = range(n)
    floored = [i for i in members if floors[i] is not zeros]
    if floored:
        floor_sums = _column_sums([floors[i] for i in floored if any(floors[i])], n_res)
        for r in range(n_res):
            if floor_sums[r] > cap[r]:
                factor = cap[r] / floor_sums[r]
                floors = list(floors)
                for i in floored:
                    g = floors[i] = list(floors[i])
                    g[r] *= factor
                floor_sums[r] = cap[r]
    else:
        floor_sums = [0.0] * n_res
    # Dividing by +inf ignores zero-capacity resources in shares, as dominant_share() does.
    divisor = [c if c > 0.0 else inf for c in cap]
    zero_cap = [r for r in range(n_res) if cap[r] <= 0.0]

    # Columns of the demands; dominant demand shares (max() keeps the first maximum, as a loop).
    demand_cols: list[Sequence[float]] = list(zip(*demands, strict=True)) if n_res else []
    quotients = [
        map(truediv, col, repeat(dv)) for col, dv in zip(demand_cols, divisor, strict=True)
    ]
    if n_res > 1:
        shares = list(map(max, *quotients))
    elif n_res == 1:
        shares = list(quotients[0])
    else:
        shares = [0.0] * n
    reason: list[str | None] = [None] * n
    for r in zero_cap:  # the first zero-capacity resource demanded names the saturation
        why = SATURATED_PREFIX + resources[r]
        for i in compress(members, map(gt, demand_cols[r], repeat(0.0))):
            if reason[i] is None:
                reason[i] = why
    growing_ids = [i for i in compress(members, map(gt, shares, repeat(0.0))) if reason[i] is None]
    if len(growing_ids) < n:
        for i in members:
            if reason[i] is None and shares[i] <= 0.0:
                reason[i] = REASON_DEMAND_MET
        ks = [w / s if s > 0.0 else 0.0 for w, s in zip(weights, shares, strict=True)]
    else:
        ks = list(map(truediv, weights, shares))
    # slopes[r][i] = w * d[r] / s: growth of member i's resource r per unit of water level.
    slopes = [list(map(mul, ks, col)) for col in demand_cols]
    top = list(map(truediv, shares, weights))  # level at which the demand (or limit) is met
    targets: list[Sequence[float]] = demand_cols
    cap_reason: list[str] = [REASON_DEMAND_MET] * n
    growing_set = set(growing_ids) if len(growing_ids) < n else None
    for i in compress(members, map(is_not, limits, repeat(None))):
        if growing_set is not None and i not in growing_set:
            continue
        d = demands[i]
        f = min((li / x for li, x in zip(limits[i], d, strict=True) if x > li), default=1.0)
        if f < 1.0:
            cap_reason[i] = REASON_LIMIT
            if targets is demand_cols:
                targets = list(map(list, demand_cols))
            for r, x in enumerate(d):
                targets[r][i] = f * x
            top[i] = f * shares[i] / weights[i]

    # Members with a floor keep their own vector of active slopes (``drawing``); the others draw
    # on every component of their slopes from the start.
    drawing: list[list[float] | None] = [None] * n
    breakpoints: list[tuple[float, int, int]] = []  # (level, member, resource)
    for i in floored:
        g = floors[i]
        if reason[i] is not None or not any(g):
            continue
        k = ks[i]
        a = [k * x for x in demands[i]]
        t = top[i]
        act = list(a)
        for r, gr in enumerate(g):
            if gr > 0.0 and a[r] > 0.0:
                act[r] = 0.0
                b = gr / a[r]
                if b < t:
                    breakpoints.append((b, i, r))
        drawing[i] = act
    own = [i for i in growing_ids if drawing[i] is not None]
    plain = [i for i in growing_ids if drawing[i] is None] if own else growing_ids

    # A[r] (frozen amounts and floors not yet overtaken) and S[r] (slopes of active components).
    # Freezes are applied to them in batches, column-wise, only when exact values are needed:
    # stale values include the slopes of members already frozen, so they overstate consumption
    # and the saturation levels computed from them are lower bounds, which is all the sweep needs.
    # Frozen members are queued as ids (at their cap: slopes and targets; saturated: slopes and
    # slopes times level) or, with a drawing vector of their own, as vectors.
    const = floor_sums
    slope = [
        fsum(chain(map(col.__getitem__, plain), map(itemgetter(r), map(drawing.__getitem__, own))))
        for r, col in enumerate(slopes)
    ]
    level = [0.0] * n  # freezing level of saturated members
    at_cap: list[int] = []
    capped: list[int] = []
    stopped: list[int] = []
    frozen_slopes: list[list[float]] = []
    frozen_amounts: list[list[float]] = []
    saturated = [False] * n_res

    def settle() -> list[float]:
        """Apply the pending freezes; return the exact saturation level of every resource."""
        if frozen_slopes:
            levels = list(map(level.__getitem__, stopped))
            for r in range(n_res):
                col = slopes[r]
                slope[r] -= fsum(
                    chain(
                        map(col.__getitem__, capped),
                        map(col.__getitem__, stopped),
                        map(itemgetter(r), frozen_slopes),
                    )
                )
                const[r] += fsum(
                    chain(
                        map(targets[r].__getitem__, capped),
                        map(mul, map(col.__getitem__, stopped), levels),
                        map(itemgetter(r), frozen_amounts),
                    )
                )
        elif stopped:
            # (The common cases, with fewer iterators: the sums are the same.)
            levels = list(map(level.__getitem__, stopped))
            ids = capped + stopped
            for r, col in enumerate(slopes):
                slope[r] -= fsum(map(col.__getitem__, ids))
                const[r] += fsum(
                    chain(
                        map(targets[r].__getitem__, capped),
                        map(mul, map(col.__getitem__, stopped), levels),
                    )
                )
        elif capped:
            for r, col in enumerate(slopes):
                slope[r] -= fsum(map(col.__getitem__, capped))
                const[r] += fsum(map(targets[r].__getitem__, capped))
        if capped or stopped or frozen_slopes:
            capped.clear()
            stopped.clear()
            frozen_slopes.clear()
            frozen_amounts.clear()
        for r in range(n_res):
            # A saturated resource keeps a slope of exactly 0 (its drawers froze and nobody
            # activates it), so subtraction round-off can never make it saturate again; every
            # saturation step therefore saturates at least one more resource.
            if saturated[r]:
                slope[r] = 0.0
        return [(c - a) / s if s > 0.0 else inf for c, a, s in zip(cap, const, slope, strict=True)]

    # Members by cap level (ties: by index, i.e. by name; the sort is stable).
    caps_order = sorted(growing_ids, key=top.__getitem__)
    caps_top = list(map(top.__getitem__, caps_order))  # nondecreasing
    breakpoints.sort()
    breakpoints.append((inf, -1, -1))  # sentinel
    n_caps = len(caps_order)
    bound = min(settle(), default=inf)
    k_cap = k_bp = 0
    growing = len(growing_ids)
    alive = growing_ids
    now = 0.0  # the water level
    zero = repeat(0.0)
    while growing:
        bp_at = breakpoints[k_bp][0]
        # Cap levels up to the next breakpoint and the bound: the common case, kept tight.
        stop = bp_at if bp_at < bound else bound
        end = bisect_right(caps_top, stop, k_cap)
        if end > k_cap:
            batch = caps_order[k_cap:end]
            batch = list(compress(batch, map(is_, map(reason.__getitem__, batch), repeat(None))))
            k_cap = end
            if batch:
                deque(map(setitem, repeat(reason), batch, map(cap_reason.__getitem__, batch)), 0)
                if own:
                    for i in batch:
                        act = drawing[i]
                        if act is None:
                            capped.append(i)
                        else:
                            at = top[i]
                            frozen_slopes.append(act)
                            frozen_amounts.append([x * at for x in act])
                else:
                    capped.extend(batch)
                at_cap.extend(batch)
                now = top[batch[-1]]
                growing -= len(batch)
                if not growing:
                    break
        cap_at = caps_top[k_cap] if k_cap < n_caps else inf
        if bp_at < cap_at:
            at = bp_at
            if at <= bound:
                # Breakpoints before the next cap level and within the bound (which they only
                # lower), one after another: no cap level lies in between, so no batch is due.
                while at < cap_at and at <= bound:
                    _, i, r = breakpoints[k_bp]
                    k_bp += 1
                    if reason[i] is None:
                        now = at
                        act = drawing[i]
                        if saturated[r]:
                            frozen_slopes.append(act)
                            frozen_amounts.append([x * at for x in act])
                            level[i] = at
                            reason[i] = SATURATED_PREFIX + resources[r]
                            growing -= 1
                            if not growing:
                                break
                        else:
                            a = act[r] = slopes[r][i]
                            const[r] -= floors[i][r]
                            slope[r] += a
                            sat = (cap[r] - const[r]) / slope[r]
                            if sat < bound:
                                bound = sat
                    at = breakpoints[k_bp][0]
                continue
        else:
            at = cap_at
        sats = settle()
        low = min(sats)
        if at <= low * (1.0 + _EPS):
            # The next event comes first (or at the same level): a member reaching its demand as a
            # resource runs out is demand-met, not saturated.
            bound = max(low, at)
            continue
        low = now = max(low, now)
        for r in range(n_res):
            if not saturated[r] and sats[r] <= low * (1.0 + _EPS):
                saturated[r] = True
                # Growing members drawing on r: a positive slope, not held up by a floor.
                hit = list(compress(alive, map(gt, map(slopes[r].__getitem__, alive), zero)))
                hit = list(compress(hit, map(is_, map(reason.__getitem__, hit), repeat(None))))
                if own:
                    hit = [i for i in hit if drawing[i] is None or drawing[i][r] > 0.0]
                if not hit:
                    continue
                why = SATURATED_PREFIX + resources[r]
                if own:
                    for i in hit:
                        act = drawing[i]
                        if act is None:
                            stopped.append(i)
                        else:
                            frozen_slopes.append(act)
                            frozen_amounts.append([x * low for x in act])
                else:
                    stopped.extend(hit)
                deque(map(setitem, repeat(level), hit, repeat(low)), maxlen=0)
                deque(map(setitem, repeat(reason), hit, repeat(why)), maxlen=0)
                growing -= len(hit)
                alive = list(
                    compress(alive, map(is_, map(reason.__getitem__, alive), repeat(None)))
                )
        bound = min(settle())

    # Allocations: slopes times level for the saturated, targets for those at their cap, floors
    # for those that never grew; members with a floor one by one.
    allocs = [list(map(mul, col, level)) for col in slopes]
    at_cap_plain = [i for i in at_cap if floors[i] is zeros] if floored else at_cap
    # Members that never grew and have no floor get nothing.
    idle = (
        []
        if growing_set is None
        else [i for i in members if i not in growing_set and floors[i] is zeros]
    )
    if at_cap_plain:
        for col, target in zip(allocs, targets, strict=True):
            deque(map(setitem, repeat(col), at_cap_plain, map(target.__getitem__, at_cap_plain)), 0)
    if idle:
        for col in allocs:
            deque(map(setitem, repeat(col), idle, repeat(0.0)), maxlen=0)
    if floored:
        capped_set = set(at_cap)
        rows = []
        for i in floored:
            g = floors[i]
            if i in capped_set:
                x = [t[i] for t in targets]
                rows.append(list(map(max, g, x)) if any(g) else x)
            elif growing_set is None or i in growing_set:
                at = level[i]
                x = [col[i] * at for col in slopes]
                rows.append(list(map(max, g, x)) if any(g) else x)
            else:
                rows.append(list(g))
        for r, col in enumerate(allocs):
            deque(map(setitem, repeat(col), floored, map(itemgetter(r), rows)), maxlen=0)

    _clamp(cap, floors, allocs)
    return allocs, [why or REASON_DEMAND_MET for why in reason], targets


def _clamp(cap: list[float], floors: list[list[float]], allocs: list[list[float]]) -> None:
    """Trim round-off overshoot: take what a resource sums over capacity from the largest amounts.

    ``allocs`` holds one column per resource. The overshoot is a few ulps, so it comes out of the
    largest amount above its floor; if that is not enough (never seen), above-floor amounts are
    scaled down.
    """
    fsum = math.fsum
    for r, column in enumerate(allocs):
        over = fsum(column) - cap[r]
        if over <= 0.0:
            continue
        biggest = column.index(max(column))
        if column[biggest] - over >= floors[biggest][r]:
            column[biggest] = column[biggest] - over
        else:
            above = fsum(x - g[r] for x, g in zip(column, floors, strict=True))
            keep = max(0.0, above - over) / above if above > 0 else 0.0
            column[:] = [g[r] + (x - g[r]) * keep for x, g in zip(column, floors, strict=True)]
        # Guard against the last ulps left by the subtraction itself.
        while (over := fsum(column) - cap[r]) > 0:
            value = column[biggest]
            column[biggest] = max(0.0, min(math.nextafter(value, 0.0), value - over))


def _round_integral(
    cap: list[float],
    integral: list[int],
    targets: list[Sequence[float]],
    allocs: list[list[float]],
) -> None:
    """Round the integral resources of one group in place by largest remainder.

    ``targets`` and ``allocs`` hold one column per resource. Members must be ordered by name
    (index order breaks ties). Steps, per integral resource:
    1. Snap amounts within ``1e-9`` (relative) of a whole number to it; each member's base is
       ``floor(x)``.
    2. The target total is ``floor(sum x)``, never above ``floor(cap[r])``.
    3. Give one more unit to the members with the largest remainders (ties: by name) whose
       target (demand cut down to the limit along the demand vector) allows it, until the total
       is reached.
    """
    floor = math.floor
    tolerance = 1.0 + _EPS
    for r in integral:
        values = allocs[r]
        # floor(v * (1 + eps) + eps) snaps amounts a hair below a whole number up to it.
        bases = list(map(floor, map(add, map(mul, values, repeat(tolerance)), repeat(_EPS))))
        total = math.fsum(values)
        target = min(floor(total * tolerance + _EPS), floor(cap[r] * tolerance + _EPS))
        extra = target - sum(bases)
        if extra > 0:
            remainders = list(map(sub, values, bases))
            fractional = list(compress(range(len(values)), map(gt, remainders, repeat(_EPS))))
            # Members whose target allows one more unit (each is considered once, so this is the
            # test a sequential pass would make).
            room = map(
                le,
                map(add, map(bases.__getitem__, fractional), repeat(1)),
                map(mul, map(targets[r].__getitem__, fractional), repeat(tolerance)),
            )
            eligible = list(compress(fractional, room))
            if extra < len(eligible):
                # The `extra` members first by remainder rounded to 9 decimals (so that near-equal
                # ones tie), ties by index. Rounding is monotone: a remainder more than 2e-9 above
                # the extra-th largest one, x, comes first whatever its index, one more than 2e-9
                # below never does, and only those near x need their rounded key and a sort.
                xs = list(map(remainders.__getitem__, eligible))
                x = sorted(xs, reverse=True)[extra - 1]
                hi, lo = x + 2e-9, x - 2e-9
                sure = list(compress(eligible, map(gt, xs, repeat(hi))))
                near = compress(
                    eligible, map(and_, map(ge, xs, repeat(lo)), map(le, xs, repeat(hi)))
                )
                near = list(near)
                # Sort positions in ``near`` by key (stable: ties keep index order).
                keys = list(map(neg, map(round, map(remainders.__getitem__, near), repeat(9))))
                order = sorted(range(len(near)), key=keys.__getitem__)
                eligible = sure + list(map(near.__getitem__, order[: extra - len(sure)]))
            # Each member once: one more unit each.
            bumped = map(add, map(bases.__getitem__, eligible), repeat(1))
            deque(map(setitem, repeat(bases), eligible, bumped), maxlen=0)
        elif extra < 0:
            # Snapping up pushed the sum over the target: undo the smallest snaps first.
            for i in sorted(range(len(values)), key=lambda i: values[i] - bases[i])[:-extra]:
                bases[i] -= 1
        allocs[r] = list(map(float, bases))


# ---------------------------------------------------------------- validation


_PLAIN_NUMBERS = frozenset({float, int})


# Amounts are base units (cores, bytes, devices): 10^18 bytes is an exabyte. Beyond that the
# float arithmetic of progressive filling loses every unit that matters (and ratios overflow).
MAX_AMOUNT = 1e18


def _fmt(value: float) -> str:
    return f"{value:g}"


def _number(value: Any, where: str) -> float:
    """Return ``value`` as a finite float >= 0, or raise ProblemError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ProblemError(f"{where} must be a number, got {value!r}")
    amount = float(value)
    if not math.isfinite(amount):
        raise ProblemError(f"{where} must be finite, got {value!r}")
    if amount < 0:
        raise ProblemError(f"{where} must be >= 0, got {_fmt(amount)}")
    if amount > MAX_AMOUNT:
        raise ProblemError(f"{where} must be at most {MAX_AMOUNT:g}, got {_fmt(amount)}")
    return amount


def _vector(
    amounts: Any, index: dict[str, int], owner: str, what: str, fill: float = 0.0
) -> list[float]:
    """Return ``amounts`` as a vector indexed like ``index``; absent resources get ``fill``."""
    if not isinstance(amounts, Mapping):
        raise ProblemError(f"{owner}: {what} must be a mapping of resource to amount")
    vec = [fill] * len(index)
    for resource, value in amounts.items():
        r = index.get(resource)
        if r is None:
            raise ProblemError(f"{owner}: {what}: unknown resource {resource!r} (not in capacity)")
        vec[r] = _number(value, f"{owner}: {what}[{resource!r}]")
    return vec


def _within_limit(demand: list[float], limit: list[float] | None) -> list[float]:
    """Return ``demand`` cut down along its own direction so that it fits within ``limit``."""
    if limit is None:
        return demand
    f = min((li / x for li, x in zip(limit, demand, strict=True) if x > li), default=1.0)
    return demand if f >= 1.0 else [f * x for x in demand]


def _plain_amounts(maps: list[Any], known: Any) -> bool | None:
    """Whether ``maps`` are dicts of known resources to plain finite numbers >= 0.

    Return ``None`` if one of them is not, ``True`` if some amounts are ``int`` (to be converted),
    ``False`` if all are floats. Checks are column-wise (C loops), for the fast path of
    :func:`_pack`.
    """
    if not maps:
        return False
    if set(map(type, maps)) != {dict} or not set().union(*maps) <= known:
        return None
    values = list(chain.from_iterable(map(dict.values, maps)))
    if not values:
        return False
    types = set(map(type, values))
    if (
        not types <= _PLAIN_NUMBERS
        or not all(map(math.isfinite, values))
        or min(values) < 0.0
        or max(values) > MAX_AMOUNT
    ):
        return None
    return int in types


def _pack(
    ordered: list[Tenant], resources: list[str], index: dict[str, int], zeros: list[float]
) -> tuple[list[float], list[list[float]], list[list[float]], list[list[float] | None]] | None:
    """Vectors (weights, demands, guarantees, limits) of ``ordered`` tenants in one pass.

    The fast path for problems of plain dicts and numbers: every rule of the per-tenant loop in
    :func:`_validate` on these fields is checked in bulk, and ``None`` is returned if any fails
    (or anything unexpected is met), so that the per-tenant loop raises the precise error.
    """
    try:
        weights = list(map(attrgetter("weight"), ordered))
        types = set(map(type, weights))
        if not types <= _PLAIN_NUMBERS or not all(map(math.isfinite, weights)):
            return None
        if weights and min(weights) <= 0.0:
            return None
        if int in types:
            weights = list(map(float, weights))
        known = index.keys()
        infs = [math.inf] * len(resources)

        raw = [t.demand for t in ordered]
        ints = _plain_amounts(raw, known)
        if ints is None:
            return None
        # ``defaults | d`` keeps the keys of ``defaults`` in their (sorted) order, with the values
        # of ``d`` where it has them: the vector, built in C (every key of ``d`` is known).
        defaults = dict.fromkeys(resources, 0.0)
        demands = list(map(list, map(dict.values, map(or_, repeat(defaults), raw))))
        if ints:
            demands = [list(map(float, d)) for d in demands]

        guarantees = [zeros] * len(ordered)
        some = list(compress(range(len(ordered)), map(attrgetter("guarantee"), ordered)))
        if some:
            raw = [ordered[i].guarantee for i in some]
            ints = _plain_amounts(raw, known)
            if ints is None:
                return None
            for i, g in zip(some, raw, strict=True):
                vec = list(map(g.get, resources, zeros))
                guarantees[i] = list(map(float, vec)) if ints else vec

        limits: list[list[float] | None] = [None] * len(ordered)
        limited = map(is_not, map(attrgetter("limit"), ordered), repeat(None))
        some = list(compress(range(len(ordered)), limited))
        if some:
            raw = [ordered[i].limit for i in some]
            ints = _plain_amounts(raw, known)
            if ints is None:
                return None
            tolerance = 1 + _EPS
            for i, lim in zip(some, raw, strict=True):
                vec = list(map(lim.get, resources, infs))
                if ints:
                    vec = list(map(float, vec))
                limits[i] = vec
                g = guarantees[i]
                if g is not zeros and any(map(gt, g, map(mul, vec, repeat(tolerance)))):
                    return None
    except Exception:  # anything odd: let the per-tenant loop decide
        return None
    return weights, demands, guarantees, limits


def _validate(
    capacity: Mapping[str, float], tenants: Sequence[Tenant], integral: Iterable[str]
) -> _Problem:
    """Check every rule of the problem and return it as vectors; raise ProblemError on a fault.

    Rules: amounts are finite and >= 0; resources exist in the capacity; weights are > 0; names
    are unique; parents exist and form no cycle; each (effective) guarantee is within the limit;
    the roots' effective guarantees fit in the capacity. Tenants are numbered in name order.
    """
    if not isinstance(capacity, Mapping):
        raise ProblemError("capacity must be a mapping of resource to amount")
    resources = sorted(capacity)
    for resource in resources:
        if not isinstance(resource, str) or not resource:
            raise ProblemError(f"capacity: resource names must be non-empty strings: {resource!r}")
    index = {resource: r for r, resource in enumerate(resources)}
    cap = [_number(capacity[resource], f"capacity[{resource!r}]") for resource in resources]
    if isinstance(integral, str):
        raise ProblemError("integral must be a list of resource names, got a string")
    integral_idx = []
    for resource in sorted(set(integral)):
        if resource not in index:
            raise ProblemError(f"integral: unknown resource {resource!r} (not in capacity)")
        integral_idx.append(index[resource])

    tenants = tenants if type(tenants) is list else list(tenants)
    given = (
        list(map(attrgetter("name"), tenants))
        if all(map(isinstance, tenants, repeat(Tenant)))
        else None
    )
    if (
        given is not None
        and set(map(type, given)) <= {str}
        and all(given)
        and len(set(given)) == len(given)
    ):
        by_name = dict(zip(given, tenants, strict=True))
    else:
        by_name = {}
        for tenant in tenants:
            if not isinstance(tenant, Tenant):
                raise ProblemError(f"tenants must be Tenant objects, got {tenant!r}")
            if not isinstance(tenant.name, str) or not tenant.name:
                raise ProblemError(f"tenant name must be a non-empty string, got {tenant.name!r}")
            if tenant.name in by_name:
                raise ProblemError(f"tenant {tenant.name!r}: duplicate name")
            by_name[tenant.name] = tenant
    names = sorted(by_name)
    ordered = list(map(by_name.__getitem__, names))
    n = len(names)
    position = dict(zip(names, range(n), strict=True))
    zeros = [0.0] * len(resources)  # shared: vectors are never changed in place

    packed = _pack(ordered, resources, index, zeros)
    parents: list[int | None] | None = None
    if packed is not None:
        weight, own_demand, own_guarantee, limit = packed
        raw_parents = list(map(attrgetter("parent"), ordered))
        try:
            if all(map(is_, raw_parents, repeat(None))):
                parents = raw_parents
            else:
                parents = [None if p is None else position[p] for p in raw_parents]
        except (KeyError, TypeError):
            parents = None
    if parents is None:
        # The precise path: the first fault, in name order, raises its own message.
        weight, own_demand, own_guarantee, limit = [], [], [], []
        parents = []
        for name, tenant in zip(names, ordered, strict=True):
            owner = f"tenant {name!r}"
            w = tenant.weight
            if not (type(w) in _PLAIN_NUMBERS and 0.0 < w < math.inf):
                if isinstance(w, bool) or not isinstance(w, int | float | Decimal):
                    raise ProblemError(f"{owner}: weight must be a number, got {w!r}")
                if not math.isfinite(float(w)) or float(w) <= 0:
                    raise ProblemError(f"{owner}: weight must be > 0, got {w!r}")
            weight.append(float(w))
            own_demand.append(_vector(tenant.demand, index, owner, "demand"))
            g = _vector(tenant.guarantee, index, owner, "guarantee") if tenant.guarantee else zeros
            own_guarantee.append(g)
            lim = (
                None
                if tenant.limit is None
                else _vector(tenant.limit, index, owner, "limit", fill=math.inf)
            )
            limit.append(lim)
            if lim is not None:
                for r, resource in enumerate(resources):
                    if g[r] > lim[r] * (1 + _EPS):
                        raise ProblemError(
                            f"{owner}: guarantee[{resource!r}] ({_fmt(g[r])}) "
                            f"exceeds limit[{resource!r}] ({_fmt(lim[r])})"
                        )
            parent = tenant.parent
            if parent is not None and parent not in by_name:
                raise ProblemError(f"{owner}: unknown parent {parent!r}")
            parents.append(None if parent is None else position[parent])

    children: dict[int | None, list[int]]
    if parents.count(None) == n:
        children = {None: list(range(n))}
        order: list[int] = []
    else:
        children = {None: []}
        for i, parent in enumerate(parents):  # in name order: every list comes out sorted
            children.setdefault(parent, []).append(i)
        # Depth-first order from the roots; whatever is not reached sits on a cycle.
        order = []
        stack = children[None][::-1]
        get = children.get
        while stack:
            i = stack.pop()
            order.append(i)
            kids = get(i)
            if kids:
                stack.extend(reversed(kids))
        if len(order) != n:
            reached = set(order)
            start = next(name for i, name in enumerate(names) if i not in reached)
            cycle, name = [start], by_name[start].parent
            while name is not None and name != start and name not in cycle:
                cycle.append(name)
                name = by_name[name].parent
            path = " -> ".join(repr(x) for x in [*cycle, name])
            raise ProblemError(f"tenant {start!r}: cycle in parents ({path})")

    # Effective vectors: a parent adds up its children's (children come before their parents).
    demand = list(own_demand)
    guarantee = list(own_guarantee)
    for p in [i for i in reversed(order) if i in children]:
        kids = children[p]
        usable = [
            demand[k]
            if limit[k] is None
            else list(
                map(max, map(min, guarantee[k], demand[k]), _within_limit(demand[k], limit[k]))
            )
            for k in kids
        ]
        demand[p] = [math.fsum(col) for col in zip(own_demand[p], *usable, strict=True)]
        # Rows of zeros add nothing to an exact sum (and fsum never returns -0.0): skip them.
        kids_guarantee = _column_sums(
            [guarantee[k] for k in kids if guarantee[k] is not zeros], len(resources)
        )
        guarantee[p] = list(map(max, own_guarantee[p], kids_guarantee))
        lim = limit[p]
        if lim is not None:
            for r, resource in enumerate(resources):
                if kids_guarantee[r] > lim[r] * (1 + _EPS):
                    raise ProblemError(
                        f"tenant {names[p]!r}: its children's guarantees of {resource!r} "
                        f"({_fmt(kids_guarantee[r])}) exceed its limit ({_fmt(lim[r])})"
                    )

    guaranteed = list(compress(range(n), map(is_not, guarantee, repeat(zeros))))
    roots = children[None]
    if len(roots) != n:
        guaranteed = [i for i in guaranteed if parents[i] is None]
    totals = _column_sums([guarantee[i] for i in guaranteed], len(resources))
    for r, resource in enumerate(resources):
        if totals[r] > cap[r] * (1 + _EPS):
            raise ProblemError(
                f"guarantee[{resource!r}]: sum of guarantees ({_fmt(totals[r])}) exceeds capacity "
                f"({_fmt(cap[r])})"
            )

    # The floor of a member is its guarantee, up to its demand.
    floor = [zeros] * n
    for i in guaranteed if len(roots) == n else range(n):
        g = guarantee[i]
        if g is not zeros and any(g):
            floor[i] = list(map(min, g, demand[i]))
    return _Problem(
        resources=resources,
        capacity=cap,
        integral=integral_idx,
        names=names,
        weight=weight,
        demand=demand,
        own_demand=own_demand,
        floor=floor,
        limit=limit,
        children=children,
        zeros=zeros,
    )


# ---------------------------------------------------------------- command line

_PROBLEM_KEYS = {"capacity", "tenants", "integral"}
_TENANT_KEYS = {"name", "demand", "weight", "guarantee", "limit", "parent"}


def parse_problem(data: Any) -> tuple[dict[str, float], list[Tenant], frozenset[str]]:
    """Turn decoded JSON into ``solve()`` arguments; raise ProblemError on a malformed shape."""
    if not isinstance(data, dict):
        raise ProblemError("problem must be a JSON object")
    unknown = sorted(set(data) - _PROBLEM_KEYS)
    if unknown:
        raise ProblemError(f"problem: unknown field {unknown[0]!r}")
    if "capacity" not in data or not isinstance(data["capacity"], dict):
        raise ProblemError("capacity must be an object of resource to amount")
    raw_tenants = data.get("tenants")
    if not isinstance(raw_tenants, list):
        raise ProblemError("tenants must be a list")
    raw_integral = data.get("integral", [])
    if not isinstance(raw_integral, list) or not all(isinstance(x, str) for x in raw_integral):
        raise ProblemError("integral must be a list of resource names")
    tenants = []
    for position, raw in enumerate(raw_tenants):
        if not isinstance(raw, dict):
            raise ProblemError(f"tenants[{position}] must be an object")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ProblemError(f"tenants[{position}]: name must be a non-empty string")
        owner = f"tenant {name!r}"
        unknown = sorted(set(raw) - _TENANT_KEYS)
        if unknown:
            raise ProblemError(f"{owner}: unknown field {unknown[0]!r}")
        if "demand" not in raw:
            raise ProblemError(f"{owner}: demand is required")
        for key in ("demand", "guarantee", "limit"):
            value = raw.get(key)
            if value is not None and not isinstance(value, dict):
                raise ProblemError(f"{owner}: {key} must be an object of resource to amount")
        if raw["demand"] is None:
            raise ProblemError(f"{owner}: demand must be an object of resource to amount")
        parent = raw.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise ProblemError(f"{owner}: parent must be a tenant name or null")
        tenants.append(
            Tenant(
                name=name,
                demand=raw["demand"],
                weight=raw.get("weight", 1.0),
                guarantee=raw.get("guarantee") or {},
                limit=raw.get("limit"),
                parent=parent,
            )
        )
    return data["capacity"], tenants, frozenset(raw_integral)


def allocations_to_json(
    allocations: Mapping[str, Allocation], integral: Iterable[str] = ()
) -> dict[str, Any]:
    """Render allocations as the CLI's JSON document; integral amounts become JSON integers."""
    whole = set(integral)
    return {
        "allocations": {
            name: {
                "resources": {
                    r: int(v) if r in whole else v for r, v in allocation.resources.items()
                },
                "dominant_share": allocation.dominant_share,
                "dominant_resource": allocation.dominant_resource,
                "reason": allocation.reason,
            }
            for name, allocation in allocations.items()
        }
    }


def main(
    stdin: TextIO | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Read a problem as JSON from stdin, write allocations as JSON to stdout; return exit code.

    Return 2 with a one-line ``error: ...`` on stderr for bad JSON or an invalid problem.
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        data = json.load(stdin)
    except json.JSONDecodeError as e:
        stderr.write(f"error: bad JSON: {e}\n")
        return 2
    try:
        capacity, tenants, integral = parse_problem(data)
        allocations = solve(capacity, tenants, integral=integral)
    except ProblemError as e:
        stderr.write(f"error: {e}\n")
        return 2
    json.dump(allocations_to_json(allocations, integral), stdout, indent=2)
    stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
