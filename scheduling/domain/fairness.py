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
resource saturates once). Float round-off is absorbed with a relative tolerance of ``1e-9``
(a tenant reaching its demand at the same level as a saturation counts as ``demand-met``) and a
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress, repeat
from operator import add, gt, itemgetter, mul, sub, truediv
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
# Placeholder slope vector of members that never grow.
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


@dataclass(frozen=True)
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
    """A validated problem, with vectors indexed like ``resources`` (sorted names)."""

    resources: list[str]
    capacity: list[float]
    integral: list[int]
    names: list[str]  # sorted tenant names
    weight: dict[str, float]
    demand: dict[str, list[float]]  # effective (own + children's)
    own_demand: dict[str, list[float]]
    guarantee: dict[str, list[float]]  # effective (max of own and children's)
    limit: dict[str, list[float] | None]
    children: dict[str | None, list[str]]  # sorted; key None holds the roots


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
    # The solver builds many small lists and no reference cycles; pausing the cyclic garbage
    # collector (restored on return) saves about a third of the time on large problems.
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
    zeros = [0.0] * len(resources)
    allocated: dict[str, tuple[list[float], str]] = {}
    pending: list[tuple[str | None, list[float]]] = [(None, total_cap)]
    while pending:
        parent, group_cap = pending.pop()
        members = problem.children[parent]
        if parent is not None and any(problem.own_demand[parent]):
            # The parent's own demand competes as an implicit member under the parent's name
            # (see module docstring); names stay sorted so that index order breaks ties.
            members = sorted([*members, parent])
        demands, weights, floors, limits = [], [], [], []
        for name in members:
            if name == parent:
                demands.append(problem.own_demand[name])
                weights.append(_OWN_DEMAND_WEIGHT)
                floors.append(zeros)
                limits.append(None)
                continue
            d = problem.demand[name]
            g = problem.guarantee[name]
            demands.append(d)
            weights.append(problem.weight[name])
            floors.append(list(map(min, g, d)) if any(g) else zeros)
            limits.append(problem.limit[name])
        allocs, reasons, targets = _fill(group_cap, resources, demands, weights, floors, limits)
        if problem.integral:
            _round_integral(group_cap, problem.integral, targets, allocs)
        for name, alloc, reason in zip(members, allocs, reasons, strict=True):
            if name != parent:
                allocated[name] = (alloc, reason)
                if name in problem.children:
                    pending.append((name, alloc))

    # Dividing by +inf ignores zero-capacity resources, as dominant_share() does.
    divisor = [c if c > 0.0 else math.inf for c in total_cap]
    result: dict[str, Allocation] = {}
    for name in problem.names:
        alloc, reason = allocated[name]
        shares = list(map(truediv, alloc, divisor))
        share = max(shares, default=0.0)
        result[name] = Allocation(
            resources=dict(zip(resources, alloc, strict=True)),
            dominant_share=share,
            # index() finds the first maximum: resources are sorted, so ties go by name.
            dominant_resource=resources[shares.index(share)] if share > 0.0 else "",
            reason=reason,
        )
    return result


# ---------------------------------------------------------------- filling


def _column_sums(rows: list[list[float]], n_res: int) -> list[float]:
    """Exact (``fsum``) sum of each column of ``rows``."""
    return [math.fsum(map(itemgetter(r), rows)) for r in range(n_res)]


def _fill(
    cap: list[float],
    resources: list[str],
    demands: list[list[float]],
    weights: list[float],
    floors: list[list[float]],
    limits: list[list[float] | None],
) -> tuple[list[list[float]], list[str], list[list[float]]]:
    """Fill one group of members against ``cap``; return (allocs, reasons, targets).

    ``targets[i]`` is what member ``i`` could use: its demand, cut down to its limit along the
    demand vector.

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
    Vectors are combined with ``map`` and column sums: this is the hot loop of the solver.
    """
    n_res = len(cap)
    n = len(demands)
    inf = math.inf
    if n == 0:
        return [], [], []
    floor_sums = _column_sums(floors, n_res)
    for r in range(n_res):
        if floor_sums[r] > cap[r]:
            factor = cap[r] / floor_sums[r]
            floors = [list(g) for g in floors]
            for g in floors:
                g[r] *= factor
            floor_sums[r] = cap[r]
    # Dividing by +inf ignores zero-capacity resources in shares, as dominant_share() does.
    divisor = [c if c > 0.0 else inf for c in cap]
    zero_cap = [r for r in range(n_res) if cap[r] <= 0.0]

    slopes: list[list[float]] = [_NO_SLOPE] * n  # w * d / s: growth per unit of water level
    drawing: list[list[float]] = [_NO_SLOPE] * n  # the active part of slopes
    targets: list[list[float]] = [_NO_SLOPE] * n  # demand, or the part of it within the limit
    top = [inf] * n  # level at which the demand or limit is met
    cap_reason: list[str] = [REASON_DEMAND_MET] * n
    reason: list[str | None] = [None] * n
    level = [0.0] * n  # freezing level
    at_cap = [False] * n
    breakpoints: list[tuple[float, int, int]] = []  # (level, member, resource)
    growing_ids: list[int] = []

    for i in range(n):
        d = demands[i]
        if zero_cap:
            blocked = [r for r in zero_cap if d[r] > 0.0]
            if blocked:
                reason[i] = SATURATED_PREFIX + resources[blocked[0]]
                continue
        s = max(map(truediv, d, divisor), default=0.0)
        if s <= 0.0:
            reason[i] = REASON_DEMAND_MET
            continue
        w = weights[i]
        k = w / s
        a = slopes[i] = [k * x for x in d]
        lim = limits[i]
        f = 1.0
        targets[i] = d
        if lim is not None:
            f = min((li / x for li, x in zip(lim, d, strict=True) if x > li), default=1.0)
            if f < 1.0:
                cap_reason[i] = REASON_LIMIT
                targets[i] = [f * x for x in d]
        t = top[i] = f * s / w
        g = floors[i]
        if any(g):
            act = list(a)
            for r, gr in enumerate(g):
                if gr > 0.0 and a[r] > 0.0:
                    act[r] = 0.0
                    b = gr / a[r]
                    if b < t:
                        breakpoints.append((b, i, r))
            drawing[i] = act
        else:
            drawing[i] = a
        growing_ids.append(i)

    # A[r] (frozen amounts and floors not yet overtaken) and S[r] (slopes of active components).
    # Freezes are applied to them in batches, column-wise, only when exact values are needed:
    # stale values include the slopes of members already frozen, so they overstate consumption
    # and the saturation levels computed from them are lower bounds, which is all the sweep needs.
    const = floor_sums
    slope = _column_sums([drawing[i] for i in growing_ids], n_res)
    frozen_slopes: list[list[float]] = []
    frozen_amounts: list[list[float]] = []
    saturated = [False] * n_res

    def settle() -> list[float]:
        """Apply the pending freezes; return the exact saturation level of every resource."""
        nonlocal const, slope
        if frozen_slopes:
            slope = list(map(sub, slope, _column_sums(frozen_slopes, n_res)))
            const = list(map(add, const, _column_sums(frozen_amounts, n_res)))
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
    breakpoints.sort()
    breakpoints.append((inf, -1, -1))  # sentinel
    n_caps = len(caps_order)
    bound = min(settle(), default=inf)
    k_cap = k_bp = 0
    growing = len(growing_ids)
    alive = growing_ids
    now = 0.0  # the water level
    while growing:
        bp_at = breakpoints[k_bp][0]
        # Cap levels up to the next breakpoint and the bound: the common case, kept tight.
        stop = bp_at if bp_at < bound else bound
        while k_cap < n_caps and top[caps_order[k_cap]] <= stop:
            i = caps_order[k_cap]
            k_cap += 1
            if reason[i] is None:
                now = at = top[i]
                act = drawing[i]
                frozen_slopes.append(act)
                frozen_amounts.append(targets[i] if act is slopes[i] else [x * at for x in act])
                level[i] = at
                reason[i] = cap_reason[i]
                at_cap[i] = True
                growing -= 1
        if not growing:
            break
        cap_at = top[caps_order[k_cap]] if k_cap < n_caps else inf
        if bp_at < cap_at:
            at = bp_at
            if at <= bound:
                _, i, r = breakpoints[k_bp]
                k_bp += 1
                if reason[i] is not None:
                    continue
                now = at
                if saturated[r]:
                    frozen_slopes.append(drawing[i])
                    frozen_amounts.append([x * at for x in drawing[i]])
                    level[i] = at
                    reason[i] = SATURATED_PREFIX + resources[r]
                    growing -= 1
                    continue
                a = slopes[i][r]
                if drawing[i] is slopes[i]:
                    drawing[i] = list(slopes[i])
                drawing[i][r] = a
                const[r] -= floors[i][r]
                slope[r] += a
                sat = (cap[r] - const[r]) / slope[r]
                if sat < bound:
                    bound = sat
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
                why = SATURATED_PREFIX + resources[r]
                for i in alive:
                    if reason[i] is None and drawing[i][r] > 0.0:
                        frozen_slopes.append(drawing[i])
                        frozen_amounts.append([x * low for x in drawing[i]])
                        level[i] = low
                        reason[i] = why
                        growing -= 1
                alive = [i for i in alive if reason[i] is None]
        bound = min(settle())

    allocs: list[list[float]] = []
    for i in range(n):
        g = floors[i]
        if at_cap[i]:
            allocs.append(list(map(max, g, targets[i])) if any(g) else targets[i][:])
        elif slopes[i] is not _NO_SLOPE:
            at = level[i]
            x = [v * at for v in slopes[i]]
            allocs.append(list(map(max, g, x)) if any(g) else x)
        else:
            allocs.append(list(g))

    _clamp(cap, floors, allocs)
    for i in range(n):
        if targets[i] is _NO_SLOPE:
            targets[i] = demands[i]
    return allocs, [why or REASON_DEMAND_MET for why in reason], targets


def _clamp(cap: list[float], floors: list[list[float]], allocs: list[list[float]]) -> None:
    """Trim round-off overshoot: take what a resource sums over capacity from the largest amounts.

    The overshoot is a few ulps, so it comes out of the largest amount above its floor; if that
    is not enough (never seen), above-floor amounts are scaled down.
    """
    for r, total in enumerate(_column_sums(allocs, len(cap))):
        over = total - cap[r]
        if over <= 0.0:
            continue
        column = list(map(itemgetter(r), allocs))
        biggest = column.index(max(column))
        if column[biggest] - over >= floors[biggest][r]:
            allocs[biggest][r] = column[biggest] - over
        else:
            above = math.fsum(x[r] - g[r] for x, g in zip(allocs, floors, strict=True))
            keep = max(0.0, above - over) / above if above > 0 else 0.0
            for x, g in zip(allocs, floors, strict=True):
                x[r] = g[r] + (x[r] - g[r]) * keep
        # Guard against the last ulps left by the subtraction itself.
        while (over := math.fsum(map(itemgetter(r), allocs)) - cap[r]) > 0:
            value = allocs[biggest][r]
            allocs[biggest][r] = max(0.0, min(math.nextafter(value, 0.0), value - over))


def _round_integral(
    cap: list[float],
    integral: list[int],
    targets: list[list[float]],
    allocs: list[list[float]],
) -> None:
    """Round the integral resources of one group in place by largest remainder.

    Members must be ordered by name (index order breaks ties). Steps, per integral resource:
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
        values = list(map(itemgetter(r), allocs))
        # floor(v * (1 + eps) + eps) snaps amounts a hair below a whole number up to it.
        bases = list(map(floor, map(add, map(mul, values, repeat(tolerance)), repeat(_EPS))))
        total = math.fsum(values)
        target = min(floor(total * tolerance + _EPS), floor(cap[r] * tolerance + _EPS))
        extra = target - sum(bases)
        if extra > 0:
            remainders = list(map(sub, values, bases))
            fractional = list(compress(range(len(values)), map(gt, remainders, repeat(_EPS))))
            # Round remainders so that near-equal ones tie; the stable sort breaks ties by index.
            fractional.sort(key=lambda i: -round(remainders[i], 9))
            for i in fractional:
                if bases[i] + 1 <= targets[i][r] * tolerance:
                    bases[i] += 1
                    extra -= 1
                    if not extra:
                        break
        elif extra < 0:
            # Snapping up pushed the sum over the target: undo the smallest snaps first.
            for i in sorted(range(len(values)), key=lambda i: values[i] - bases[i])[:-extra]:
                bases[i] -= 1
        for x, b in zip(allocs, bases, strict=True):
            x[r] = float(b)


# ---------------------------------------------------------------- validation


_PLAIN_NUMBERS = frozenset({float, int})


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
    return amount


def _vector(
    amounts: Any, index: dict[str, int], owner: str, what: str, fill: float = 0.0
) -> list[float]:
    """Return ``amounts`` as a vector indexed like ``index``; absent resources get ``fill``."""
    vec = [fill] * len(index)
    # Fast path for the common case (plain floats and ints in range); anything else goes through
    # the checks below, which convert Decimals or raise the precise error.
    if type(amounts) is dict:
        try:
            for resource, value in amounts.items():
                if type(value) in _PLAIN_NUMBERS and 0.0 <= value < math.inf:
                    vec[index[resource]] = float(value)
                else:
                    break
            else:
                return vec
        except KeyError:
            pass
    elif not isinstance(amounts, Mapping):
        raise ProblemError(f"{owner}: {what} must be a mapping of resource to amount")
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


def _validate(
    capacity: Mapping[str, float], tenants: Sequence[Tenant], integral: Iterable[str]
) -> _Problem:
    """Check every rule of the problem and return it as vectors; raise ProblemError on a fault.

    Rules: amounts are finite and >= 0; resources exist in the capacity; weights are > 0; names
    are unique; parents exist and form no cycle; each (effective) guarantee is within the limit;
    the roots' effective guarantees fit in the capacity.
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

    by_name: dict[str, Tenant] = {}
    for tenant in tenants:
        if not isinstance(tenant, Tenant):
            raise ProblemError(f"tenants must be Tenant objects, got {tenant!r}")
        if not isinstance(tenant.name, str) or not tenant.name:
            raise ProblemError(f"tenant name must be a non-empty string, got {tenant.name!r}")
        if tenant.name in by_name:
            raise ProblemError(f"tenant {tenant.name!r}: duplicate name")
        by_name[tenant.name] = tenant
    names = sorted(by_name)

    weight: dict[str, float] = {}
    own_demand: dict[str, list[float]] = {}
    own_guarantee: dict[str, list[float]] = {}
    limit: dict[str, list[float] | None] = {}
    children: dict[str | None, list[str]] = {None: []}
    zeros = [0.0] * len(resources)  # shared: vectors are never changed in place
    for name in names:
        tenant = by_name[name]
        owner = f"tenant {name!r}"
        w = tenant.weight
        if not (type(w) in _PLAIN_NUMBERS and 0.0 < w < math.inf):
            if isinstance(w, bool) or not isinstance(w, int | float | Decimal):
                raise ProblemError(f"{owner}: weight must be a number, got {w!r}")
            if not math.isfinite(float(w)) or float(w) <= 0:
                raise ProblemError(f"{owner}: weight must be > 0, got {w!r}")
        weight[name] = float(w)
        own_demand[name] = _vector(tenant.demand, index, owner, "demand")
        own_guarantee[name] = (
            _vector(tenant.guarantee, index, owner, "guarantee") if tenant.guarantee else zeros
        )
        limit[name] = (
            None
            if tenant.limit is None
            else _vector(tenant.limit, index, owner, "limit", fill=math.inf)
        )
        lim = limit[name]
        if lim is not None:
            for r, resource in enumerate(resources):
                if own_guarantee[name][r] > lim[r] * (1 + _EPS):
                    raise ProblemError(
                        f"{owner}: guarantee[{resource!r}] ({_fmt(own_guarantee[name][r])}) "
                        f"exceeds limit[{resource!r}] ({_fmt(lim[r])})"
                    )
        parent = tenant.parent
        if parent is not None and parent not in by_name:
            raise ProblemError(f"{owner}: unknown parent {parent!r}")
        children.setdefault(parent, []).append(name)

    # Depth-first order from the roots; whatever is not reached sits on a cycle.
    order: list[str] = []
    stack = list(reversed(children[None]))
    while stack:
        name = stack.pop()
        order.append(name)
        stack.extend(reversed(children.get(name, [])))
    if len(order) != len(names):
        reached = set(order)
        start = next(name for name in names if name not in reached)
        cycle, name = [start], by_name[start].parent
        while name is not None and name != start and name not in cycle:
            cycle.append(name)
            name = by_name[name].parent
        path = " -> ".join(repr(n) for n in [*cycle, name])
        raise ProblemError(f"tenant {start!r}: cycle in parents ({path})")

    # Effective vectors: a parent adds up its children's (children come before their parents).
    demand = dict(own_demand)
    guarantee = dict(own_guarantee)
    for name in reversed(order):
        kids = children.get(name)
        if not kids:
            continue
        usable = [
            demand[k]
            if limit[k] is None
            else list(
                map(max, map(min, guarantee[k], demand[k]), _within_limit(demand[k], limit[k]))
            )
            for k in kids
        ]
        demand[name] = [math.fsum(col) for col in zip(own_demand[name], *usable, strict=True)]
        kids_guarantee = [math.fsum(col) for col in zip(*(guarantee[k] for k in kids), strict=True)]
        guarantee[name] = list(map(max, own_guarantee[name], kids_guarantee))
        lim = limit[name]
        if lim is not None:
            for r, resource in enumerate(resources):
                if kids_guarantee[r] > lim[r] * (1 + _EPS):
                    raise ProblemError(
                        f"tenant {name!r}: its children's guarantees of {resource!r} "
                        f"({_fmt(kids_guarantee[r])}) exceed its limit ({_fmt(lim[r])})"
                    )

    for r, resource in enumerate(resources):
        total = math.fsum(guarantee[name][r] for name in children[None])
        if total > cap[r] * (1 + _EPS):
            raise ProblemError(
                f"guarantee[{resource!r}]: sum of guarantees ({_fmt(total)}) exceeds capacity "
                f"({_fmt(cap[r])})"
            )

    for kids in children.values():
        kids.sort()
    return _Problem(
        resources=resources,
        capacity=cap,
        integral=integral_idx,
        names=names,
        weight=weight,
        demand=demand,
        own_demand=own_demand,
        guarantee=guarantee,
        limit=limit,
        children=children,
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
