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

Algorithm (rounds of sorted ramps, ``O(R n log n)``)
----------------------------------------------------
Consumption of a resource is piecewise linear in ``L`` and never decreases: every growing component
is a *ramp* ``a * (clip(L, b, e) - b)`` on top of the floor, with slope ``a = w * d[r] / s``, start
``b`` (its breakpoint) and end ``e`` (the tenant's demand or limit level). The filling runs in
rounds. In a round, the ramps' ends and pending starts are sorted once (they come nearly sorted:
tenants are kept in order of their end level); cumulative sums over them give the constant and the
slope of every segment, hence the exact level at which each resource runs out. Tenants whose end
comes first (or within the relative tolerance ``1e-9``: reaching the demand as a resource runs out
counts as ``demand-met``) freeze at their end; at the lowest saturation level, the tenants drawing
on a saturated resource freeze, and tenants held up on it by their floor end at their breakpoint
for it. A round either saturates one more resource or lets every tenant reach its end, so there
are at most ``R + 1`` rounds, each ``O(n R)`` after an ``O(n log n)`` sort of nearly sorted keys.

All sibling groups of one depth of the hierarchy are filled in the same rounds: the arrays are
grouped, and every sum, search and saturation is per group. While filling, amounts are measured in
shares of their group's capacity, so that the groups' sums are of one magnitude; slopes that are
exactly zero (no ramp in progress) are recognised by an exact count rather than by a sum that
runs across groups. A final clamp decides in extended precision (exactly with ``fsum`` where that
cannot tell) whether a group's sum ends a few ulps over its capacity, and trims it.

The arithmetic is vectorised with NumPy: pure computation on arrays, no I/O. Validation and
the result (one ``dict`` and :class:`Allocation` per tenant) are plain Python.

Hierarchy (static H-DRF, Bhattacharya et al., SoCC 2013)
--------------------------------------------------------
Tenants whose ``parent`` is ``None`` are the roots. Only the *members* hold resources: the
tenants without children and, for a parent with a demand of its own, that own demand (an
implicit member of its children's group with weight 1, no guarantee and no limit). A parent's
allocation is exactly the sum of its members' below it, so Volcano's rule (children's deserved
within the parent's) holds by construction.

Progressive filling runs on one water level ``t`` for the roots. A member grows as in the flat
case at the level of its group; an internal node ``v`` at level ``L`` has a *box*
``min(max(G, w L), limit)`` (in shares of the capacity; ``G`` its effective guarantee, see
below), and the level of its children's group is the highest at which their sum stays inside the
box on every resource that one of them still grows on (its *first crossing*): dominant share
over the resources still growing, equal to ``w L``, as DRF asks of siblings. A member freezes
when it reaches its demand or limit, when a resource it draws on runs out in the cluster
(``saturated:<r>``), or when an ancestor's limit on a resource it draws on binds (also
``saturated:<r>``; the ancestor's reason is ``limit``). Every other member keeps growing: nothing
that a short member could use is left over, which is what the two-stage form (fill the
departments along their summed demand, then split) did not give. Resources that stop growing in a
group no longer bound it, so a group's level can jump (the paper's "ignore saturated resources");
a resource that runs out during such a jump is shared by moving the members part way.

Each internal node's first crossing is found by a safeguarded Newton search (tangent from below,
chord or halving when it overshoots), nested depth by depth and batched over all groups of a
depth; the events (a resource running out, a parent's limit binding) are found the same way on
``t``. The deepest groups (leaf-like members only) are solved in closed form instead: between
events each member's component is constant, then a ramp, then constant, so a group's sum per
resource is piecewise linear in its level. Every group's breakpoints (shared by its resources)
are sorted once per event, with the sums and slopes there (:func:`_ramps`, rebuilt only for the
groups whose members' ends moved); a first crossing is a binary search per (group, resource)
(:func:`_ramps_crossing`) and a group's sums at a level one per group (:func:`_ramps_at`). The
leaves' own amounts are evaluated once, for the final state. A search's probes evaluate only the
groups still moving (a few of tens, after the first steps).

Jumps, where a group's sums leap past its box as a resource that bounded it stops growing, are
the expensive part of the searches, and each is handled where it shows:

* a searched group whose sums stay short of its box (1e-9) on every resource they grow on stands
  just below a jump: it is *pinned* (its level does not follow the box: slope 0 in the chain
  rule) until the box passes the sums just above the jump; the water level probes exactly there
  (bisecting over the roots' such levels when a probe went over), and a bracket from just below
  such a level to it is closed;
* a group already over its box where its search starts (on a resource it no longer grows on) is
  *stuck* there, with no halving towards a level it cannot leave;
* where the sums leap past the capacity (between two probes, or at an event's own level, when
  the event's freezes make a group leap), the leaves move part of the way, by the fraction at
  which the first resource fills: exact from the leaves' sorted ramps along the move
  (:func:`_first_fill`; halving as the fallback); only the members drawing on the resources that
  fill there freeze, the others move on at the next probe;
* the water level's tangents halve after three steps in a row that close less than half of the
  gap (a slope overestimated), and a search's chord halves after two steps that stay within;
* a leap past an internal member's *limit* is moved part of the way in the same manner, to
  where the first limit is reached: after an event's freezes (the group found over its
  parent's limit where it stands), at the top of a bracket (the state at the top, where the box
  holds the limit, is taken), and where the water level can rise no more while a group stays
  pinned below a jump that would pass its parent's limit (the box stops at the limit and never
  passes the sums above the jump), or where a resource fills first;
* an internal node's end (the level beyond which its box no longer matters) lies 1e-9
  (relative) past the level where its box reaches its sums' most, so that a leap of its
  children pending exactly there (on a resource other than the one that decided the end) is
  taken;
* where the water level can rise no more, the boxes of the resources full in the cluster open
  (H-DRF ignores saturated resources): a group that waited for its box to pass what it holds
  of one goes on growing, from the last event (only then, so that departments leaping at one
  level a few ulps apart still catch up together);
* a member frozen at an event keeps its amount as a floor (a group's level found again a few
  ulps lower, or below the leap that put it there, neither takes it back nor counts it as
  rising); a searched group with nothing rising whose search went over just above stands
  below a jump too (its members a few ulps short of where a box passes what they hold), and
  is pinned as above;
* roots that leap at once *catch up by weight*: on the resources each grows on in the move
  (full ones ignored, as H-DRF ignores saturated resources), a catch-up level ``u`` puts each at
  ``max(what it holds, w u)`` along its own way, and ``u`` is found where the first resource
  fills (regula falsi); roots whose move leaves that share unchanged (a tie) move by one common
  fraction.

The nested search without the closed form is kept as :func:`_solve_hierarchy_reference`.
Cost: about ``R`` events plus leaps (here 7 at 10,000 tenants), each a few probes on ``t`` (31
in all); a probe is two ``O(G R log K)`` crossings over the deepest groups plus a few searched
probes of the groups still moving, and an event rebuilds ``O(m R)`` breakpoints of the groups it
touched. Flat problems never reach this code.
An internal node's *effective guarantee* is the maximum of its own guarantee and the sum of its
children's; its own guarantee beyond the children's floors is its own demand's floor (the box
never forces a member past what it can use: a parent's guarantee that no member can use is not
held for nobody).

Integral resources
------------------
Resources named in ``integral`` (``nvidia.com/gpu``) are rounded per group, top-down: every
member gets ``floor(x)``, then the ``floor(sum x)`` total (at most the capacity; for a group
below a parent, the parent's rounded amount) is reached by giving one more unit to the largest
remainders, ties by name, never above a member's demand or limit (rounded down); a parent whose
children cannot reach its rounded amount gets their sum. Other resources are left as filled.

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
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain, compress, islice, repeat
from operator import (
    attrgetter,
    eq,
    is_,
    is_not,
)
from typing import Any, TextIO

import numpy as np

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
    weight: np.ndarray  # (n,)
    demand: np.ndarray  # (n, R), effective (own + children's)
    own_demand: np.ndarray  # (n, R)
    floor: np.ndarray  # (n, R), effective guarantee, up to the effective demand
    limit: np.ndarray  # (n, R), inf where none
    parent: np.ndarray  # (n,), -1 for the roots
    depth: np.ndarray  # (n,), 0 for the roots
    own_guarantee: np.ndarray | None = None  # (n, R), as given


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


def _solve_hierarchy_reference(problem: _Problem) -> dict[str, Allocation]:
    """:func:`_solve` with every sibling group's first crossing found by the nested search.

    The slow form of the same H-DRF (no closed form for the deepest groups), kept as the
    reference that the differential tests compare the default with.
    """
    return _solve(problem, fast=False)


def _matrix(rows: list[list[float]], n_res: int) -> np.ndarray:
    """``rows`` as an ``(len(rows), n_res)`` float array (also when ``n_res`` is 0)."""
    return np.array(rows, dtype=float).reshape(len(rows), n_res)


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


def _segments(keys: np.ndarray) -> np.ndarray:
    """Start positions of the runs of equal values in ``keys`` (which is grouped)."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def _fill(
    cap: np.ndarray,
    group: np.ndarray,
    starts: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    limit: np.ndarray,
    integral: list[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fill groups of members, each against its own capacity; return (allocs, codes, targets).

    ``cap`` is ``(G, R)``: one capacity vector per group. Rows (members) are grouped: ``group``
    (nondecreasing) gives each row's group, ``starts`` each group's first row, and within a
    group rows are in name order (row order breaks ties). ``demand``, ``floor`` (the guarantee
    up to the demand) and ``limit`` (``inf`` where none) are ``(m, R)``, ``weight`` is ``(m,)``;
    ``integral`` lists the resources the caller rounds next. Return the ``(m, R)`` allocations,
    reason codes (0 demand-met, 1 limit, ``2 + r`` saturated on resource ``r``) and targets (the
    demand cut down to the limit along the demand vector).

    Steps:
    1. Count floors as consumption (scaled down to fit if a rounded parent allocation is smaller
       than its children's floors, which only a fractional guarantee on an integral resource can
       cause). Members needing a zero-capacity resource are saturated at once; members demanding
       nothing are demand-met at once.
    2. For every other member compute its slopes ``w * d[r] / s``, its end level (demand or
       limit met) and the breakpoints of components held up by the floor.
    3. In rounds, until no member grows: consumption of each resource is piecewise linear in the
       water level (every growing component is a ramp from its breakpoint to its end level), so
       sorting the ramps' ends and starts and summing them cumulatively gives, for every group
       and resource, the exact level at which it runs out. Members whose end level comes first
       (or within the relative tolerance) freeze at it; at the lowest saturation level of their
       group, the members drawing on a saturated resource freeze, and members still held up on it
       by their floor end at their breakpoint for it. Every round either saturates one more
       resource in each group still growing, or lets all of its members reach their end.
    4. Clamp round-off overshoot above the capacity (except on integral resources, whose
       rounding keeps them within it).

    Consumption is measured in shares of each group's capacity while filling (every group's sums
    are of the same magnitude, so one cumulative sum serves all groups); amounts are evaluated
    per member at the level where it froze.
    """
    n_groups, n_res = cap.shape
    m = len(group)
    code = np.zeros(m, dtype=np.intp)
    if m == 0 or n_res == 0:
        return np.zeros((m, n_res)), code, demand
    floor_sums = np.add.reduceat(floor, starts, axis=0)
    over = floor_sums > cap
    if over.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(over, cap / floor_sums, 1.0)
        floor = floor * factor[group]

    # Shares of the demand: dividing by +inf ignores zero-capacity resources.
    divisor = np.where(cap > 0.0, cap, np.inf)
    share = (demand / divisor[group]).max(axis=1)
    growing = share > 0.0
    zero_cap = cap <= 0.0
    if zero_cap.any():  # the first zero-capacity resource demanded names the saturation
        stuck = (demand > 0.0) & zero_cap[group]
        blocked = stuck.any(axis=1)
        code[blocked] = 2 + stuck[blocked].argmax(axis=1)
        growing &= ~blocked
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(growing, weight / share, 0.0)
        # slope[i, r] = w * d[r] / s: growth of member i's resource r per unit of water level.
        slope = k[:, None] * demand
        end = share / weight  # level at which the demand (or the limit) is met
        cut = np.where(demand > limit, limit / demand, 1.0).min(axis=1)
        capped = growing & (cut < 1.0)
        targets = demand
        end_code = capped.astype(np.intp)
        if capped.any():
            targets = demand.copy()
            targets[capped] = cut[capped, None] * demand[capped]
            end = end.copy()
            end[capped] = cut[capped] * share[capped] / weight[capped]
        # Breakpoints: the level at which a component held up by the floor starts to grow.
        held = (floor > 0.0) & (slope > 0.0) & growing[:, None]
        breakpoint = np.where(held, floor / np.where(held, slope, 1.0), 0.0)

    # In shares of the group's capacity (zero-capacity resources have no growing component).
    unit = np.where(cap > 0.0, cap, 1.0)
    slope_n = slope / unit[group]
    floors_held = bool(held.any())  # without them every ramp starts at level 0
    consumed = np.add.reduceat(floor, starts, axis=0)  # floors, then the frozen members' amounts
    at_target = np.zeros(m, dtype=bool)  # frozen at the target (demand or limit met)
    stop = np.zeros(m)  # freezing level of the other frozen members

    def freeze(ids: np.ndarray, levels: np.ndarray | None) -> None:
        """Freeze members ``ids`` (grouped): at their target, or at ``levels``."""
        if levels is None:
            at_target[ids] = True
            amounts = np.maximum(floor[ids], targets[ids])
        else:
            stop[ids] = levels
            amounts = np.maximum(floor[ids], slope[ids] * levels[:, None])
        by = group[ids]
        seg = _segments(by)
        consumed[by[seg]] += np.add.reduceat(amounts - floor[ids], seg, axis=0)

    now = np.zeros(n_groups)  # the water level of each group
    saturated = np.zeros((n_groups, n_res), dtype=bool)
    alive = np.flatnonzero(growing)
    tolerance = 1.0 + _EPS
    # By group, then end level: the events of every round come nearly sorted (a member's end
    # only ever moves earlier, for members held up by a floor).
    alive = alive[np.lexsort((end[alive], group[alive]))]
    a = slope_n[alive]
    b = breakpoint[alive] if floors_held else None
    while len(alive):
        g = group[alive]
        seg = _segments(g)
        active_groups = g[seg]
        counts = np.diff(np.append(seg, len(alive)))
        e = end[alive]
        # Consumption at level L >= now: const + sum of a * (clip(L, b, e) - b) over ramps.
        const = consumed[active_groups] / unit[active_groups]
        if b is None:
            ramp = a > 0.0
            p_row = p_res = np.zeros(0, dtype=np.intp)
        else:
            ramp = (a > 0.0) & (b < e[:, None])
            started = ramp & (b <= now[g][:, None])
            const -= np.add.reduceat(np.where(started, a * b, 0.0), seg, axis=0)
            p_row, p_res = np.nonzero(ramp & ~started)
        ramp_a = np.where(ramp, a, 0.0)
        n_a, n_p = len(alive), len(p_row)
        n_g = len(active_groups)
        # Events: one start row per group (its level), the members' ends, the pending starts.
        ev_group = np.concatenate((active_groups, g, g[p_row]))
        ev_level = np.concatenate((now[active_groups], e, b[p_row, p_res] if n_p else p_row))
        ev_kind = np.concatenate(
            (np.zeros(n_g, np.int8), np.ones(n_a, np.int8), np.full(n_p, 2, np.int8))
        )
        # Per event and resource, in one matrix (one reordering): the change of slope, of the
        # number of ramps in progress (exact in floats), and of the constant.
        delta = np.zeros((n_g + n_a + n_p, 3 * n_res))
        delta[n_g : n_g + n_a, :n_res] = -ramp_a
        delta[n_g : n_g + n_a, n_res : 2 * n_res] = np.negative(ramp, dtype=float)
        delta[n_g : n_g + n_a, 2 * n_res :] = ramp_a * e[:, None]
        if n_p:
            rows = np.arange(n_g + n_a, n_g + n_a + n_p)
            delta[rows, p_res] = a[p_row, p_res]
            delta[rows, n_res + p_res] = 1.0
            delta[rows, 2 * n_res + p_res] = -a[p_row, p_res] * b[p_row, p_res]
        order = np.lexsort((ev_kind, ev_level, ev_group))  # nearly sorted already
        ev_group, ev_level = ev_group[order], ev_level[order]
        first = _segments(ev_group)  # the start row of each active group comes first
        n_ev = len(ev_level)
        after_group = np.append(first[1:], n_ev)  # one past each group's last event
        sizes = after_group - first
        # Slope after each event: the slopes of the ramps ending later in the group minus those
        # starting later (suffix sums, so that the slope of the last ramps is not a difference
        # of large totals); constant after each event: a prefix sum within the group. The
        # suffix sums run over the events gathered in reverse: backwards[j] sums the last j.
        backwards = np.zeros((n_ev + 1, 2 * n_res))
        np.cumsum(delta[order[::-1], : 2 * n_res], axis=0, out=backwards[1:])
        later = backwards[n_ev - 1 :: -1]  # later[k]: the events from k on
        if n_g == 1:  # nothing after the group
            after = np.negative(later)
        else:
            after = np.repeat(backwards[n_ev - after_group], sizes, axis=0) - later
        slope_after = after[:, :n_res]
        # The sums run across groups, so a slope that is zero (no ramp left) can come out as a
        # few ulps of the later groups' sums: the exact count of ramps in progress says when.
        slope_after[after[:, n_res:] < 0.5] = 0.0
        prefix = np.cumsum(delta[order, 2 * n_res :], axis=0)
        prefix_before = np.zeros((n_ev + 1, n_res))
        prefix_before[1:] = prefix
        const_after = prefix + np.repeat(const - prefix_before[first], sizes, axis=0)
        next_level = np.append(ev_level[1:], np.inf)
        next_level[after_group - 1] = np.inf
        with np.errstate(invalid="ignore", over="ignore"):
            used_next = const_after + slope_after * next_level[:, None]
        crossed = (slope_after > 0.0) & (used_next >= 1.0)
        where = np.where(crossed, np.arange(n_ev)[:, None], n_ev)
        hit_row = np.minimum.reduceat(where, first, axis=0)  # (n_g, R): first crossing
        found = (hit_row < n_ev) & ~saturated[active_groups]
        row = np.minimum(hit_row, n_ev - 1)
        col = np.arange(n_res)
        with np.errstate(divide="ignore", invalid="ignore"):
            sat = (1.0 - const_after[row, col]) / slope_after[row, col]
        sat = np.clip(sat, ev_level[row], next_level[row])
        # Within round-off of the segment's start (less than 1e-12 of the capacity between
        # them: floors that fill a resource exactly), the resource is saturated at the start.
        start = ev_level[row]
        with np.errstate(invalid="ignore"):
            sat = np.where((sat - start) * slope_after[row, col] <= 1e-12, start, sat)
        sat = np.where(found, sat, np.inf)
        low = sat.min(axis=1)
        bound = low * tolerance  # events up to here come first (or at the same level)

        # Members reaching their end level first.
        member_bound = np.repeat(bound, counts)
        done = e <= member_bound
        last = now[active_groups].copy()
        if done.any():
            ids = alive[done]
            met = end_code[ids] < 2
            freeze(ids[met], None)
            freeze(ids[~met], e[done][~met])
            code[ids] = end_code[ids]
            np.maximum.at(last, np.searchsorted(active_groups, g[done]), e[done])
        if n_p:
            applied = b[p_row, p_res] <= member_bound[p_row]
            if applied.any():
                np.maximum.at(
                    last,
                    np.searchsorted(active_groups, g[p_row[applied]]),
                    b[p_row[applied], p_res[applied]],
                )
        level = np.maximum(low, last)  # the saturation level of each active group
        member_level = np.repeat(level, counts)
        still = ~done
        running_out = (sat <= (level * tolerance)[:, None]) & np.isfinite(sat)
        running_out &= ~saturated[active_groups]
        saturated[active_groups] |= running_out
        for r in np.flatnonzero(running_out.any(axis=0)).tolist():
            on = still & np.repeat(running_out[:, r], counts) & (a[:, r] > 0.0)
            if not on.any():
                continue
            drawing = on if b is None else on & (b[:, r] <= member_bound)
            if drawing.any():
                ids = alive[drawing]
                freeze(ids, member_level[drawing])
                code[ids] = 2 + r
                still &= ~drawing
            if b is None:
                continue
            # Held up by the floor on r: they grow until their breakpoint for r, and stop there.
            waiting = on & ~drawing
            if waiting.any():
                ids = alive[waiting]
                bp = b[waiting, r]
                sooner = (bp < end[ids]) | (
                    (bp == end[ids]) & (end_code[ids] >= 2) & (end_code[ids] > 2 + r)
                )
                end[ids[sooner]] = bp[sooner]
                end_code[ids[sooner]] = 2 + r
        now[active_groups] = np.where(np.isfinite(level), level, now[active_groups])
        alive, a = alive[still], a[still]
        if b is not None:
            b = b[still]
    # Members that never grew keep their floor (their slopes are 0).
    alloc = np.maximum(floor, np.where(at_target[:, None], targets, slope * stop[:, None]))
    # Integral resources are rounded next, never above the capacity: only the others are clamped.
    _clamp(cap, starts, floor, alloc, [r for r in range(n_res) if r not in integral])
    return alloc, code, targets


def _clamp(
    cap: np.ndarray, starts: np.ndarray, floor: np.ndarray, alloc: np.ndarray, columns: list[int]
) -> None:
    """Trim round-off overshoot so that no group's exact sum of a resource exceeds its capacity.

    Each group's sum is computed in extended precision (``np.longdouble``: off by at most ``n``
    of its units in the last place; where it is no wider than a float, the bound is simply
    wider). Where the sum is surely above the capacity, the overshoot (plus twice the error
    bound and an ulp: a few ulps of the capacity) comes out of the group's largest amount, first
    by name; where it is too close to tell, or the largest amount is not that far above its
    floor, the group is handled exactly by :func:`_trim` (``fsum``).
    """
    n_groups = cap.shape[0]
    ends = np.append(starts[1:], len(alloc))
    sizes = ends - starts
    tolerance = (sizes + 2) * np.finfo(np.longdouble).eps
    rows = np.arange(len(alloc))
    group = None
    for r in columns:
        column = alloc[:, r]
        limit = cap[:, r]
        gap = np.add.reduceat(column.astype(np.longdouble), starts) - limit
        error = tolerance * limit  # bound on the error of ``gap``
        unsure = (np.abs(gap) <= error) & (limit > 0.0)
        over = (gap > 0) & ~unsure
        if over.any():
            if group is None:
                group = np.repeat(np.arange(n_groups), sizes)
            biggest = np.maximum.reduceat(column, starts)
            first = np.where(column == biggest[group], rows, len(alloc))
            first = np.minimum.reduceat(first, starts)
            # Twice the error bound more, and one ulp for the rounding of the subtraction: the
            # exact sum ends below the capacity.
            excess = (gap + 2.0 * error).astype(float)
            trimmed = np.nextafter(column[first] - excess, 0.0)
            fits = over & (trimmed >= floor[first, r])
            column[first[fits]] = trimmed[fits]
            unsure |= over & ~fits
        for g in np.flatnonzero(unsure).tolist():
            lo, hi = int(starts[g]), int(ends[g])
            _trim(column[lo:hi], floor[lo:hi, r], float(limit[g]))


def _trim(column: np.ndarray, floor: np.ndarray, cap: float) -> None:
    """Make the exact (``fsum``) sum of ``column`` at most ``cap``, in place.

    The overshoot comes out of the largest amount (first by name) if it is that far above its
    floor; otherwise the above-floor amounts are scaled down.
    """
    fsum = math.fsum
    values = column.tolist()
    over = fsum(values) - cap
    if over <= 0.0:
        return
    i = values.index(max(values))
    if values[i] - over >= floor[i]:
        values[i] -= over
    else:
        floors = floor.tolist()
        above = fsum(x - f for x, f in zip(values, floors, strict=True))
        keep = max(0.0, above - over) / above if above > 0 else 0.0
        values = [f + (x - f) * keep for x, f in zip(values, floors, strict=True)]
    # Guard against the last ulps left by the subtraction itself.
    while (over := fsum(values) - cap) > 0:
        values[i] = max(0.0, min(math.nextafter(values[i], 0.0), values[i] - over))
    column[:] = values


def _round_integral(
    cap: np.ndarray,
    group: np.ndarray,
    starts: np.ndarray,
    integral: list[int],
    targets: np.ndarray,
    alloc: np.ndarray,
    *,
    to_cap: bool = False,
) -> None:
    """Round the integral resources of every group in place by largest remainder.

    Rows are grouped and in name order within a group (row order breaks ties). Steps, per group
    and integral resource:
    1. Snap amounts within ``1e-9`` (relative) of a whole number to it; each member's base is
       ``floor(x)``.
    2. The target total is ``floor(sum x)``, never above ``floor(cap[r])``.
    3. Give one more unit to the members with the largest remainders (rounded to 9 decimals so
       that near-equal ones tie; ties by name) whose target (demand cut down to the limit along
       the demand vector) allows it, until the total is reached; if snapping up overshot the
       total, undo the smallest snaps first.
    """
    if len(group) == 0:
        return
    tolerance = 1.0 + _EPS
    for r in integral:
        values = alloc[:, r]
        bases = np.floor(values * tolerance + _EPS)
        total = np.add.reduceat(values, starts)
        target = np.floor(cap[:, r] * tolerance + _EPS)
        if not to_cap:
            target = np.minimum(np.floor(total * tolerance + _EPS), target)
        extra = target - np.add.reduceat(bases, starts)
        if (extra > 0).any():
            remainder = values - bases
            eligible = (
                (extra[group] > 0) & (remainder > _EPS) & (bases + 1.0 <= targets[:, r] * tolerance)
            )
            ids = np.flatnonzero(eligible)
            order = ids[np.lexsort((ids, -np.round(remainder[ids], 9), group[ids]))]
            _bump(order, group, extra, bases, 1.0)
        if (extra < 0).any():
            ids = np.flatnonzero(extra[group] < 0)
            order = ids[np.lexsort((ids, values[ids] - bases[ids], group[ids]))]
            _bump(order, group, -extra, bases, -1.0)
        alloc[:, r] = bases


def _bump(order: np.ndarray, group: np.ndarray, count: np.ndarray, bases: np.ndarray, by: float):
    """Add ``by`` to the first ``count[g]`` rows of each group ``g`` in ``order`` (grouped)."""
    if len(order) == 0:
        return
    g = group[order]
    seg = _segments(g)
    rank = np.arange(len(order)) - np.repeat(seg, np.diff(np.append(seg, len(order))))
    chosen = order[rank < count[g]]
    bases[chosen] += by


# ---------------------------------------------------------------- hierarchy: static H-DRF


# Relative tolerance of the root finding (a level, or an amount against its box).
_TOL = 1e-12
# Tests set this to compare every closed-form crossing with the nested search's (at that
# relative tolerance).
_VERIFY = False
_VERIFY_REL = 1e-9
# A search stops this close (relative) to its target: a few ulps.
_CLOSE = 4e-16
# A bracket this narrow (relative) ends a search that keeps overshooting: a jump (_part_way).
_BRACKET = 1e-10
# A searched group whose sums stay this far (relative) below its box on every resource they grow
# on stands at a jump: its level does not move with the box.
_PINNED = 1e-9
# Where a pinned root's leap goes over, the water level is probed this much (relative) below.
_JUMP = 1e-9
# The box of a group on a resource full in the cluster: finite, so that the searches' relative
# tolerances (_TOL, _CLOSE times the box) stay finite, and far above any sum (shares are <= 1).
_OPEN = 1e300


@dataclass
class _Depth:
    """The members of every sibling group of one depth, grouped (rows in name order)."""

    rows: np.ndarray  # row numbers (tenants, then implicit own-demand members)
    grp: np.ndarray  # group of each member (index into the internal members one depth up)
    starts: np.ndarray  # first member of each group
    n_groups: int
    leaf: np.ndarray  # positions of the leaf-like members (tenants without children, own demand)
    ints: np.ndarray  # positions of the internal members (their groups are one depth down)
    # leaf-like members, in shares of the capacity: slope, floor, end level, breakpoints
    a: np.ndarray = None
    g: np.ndarray = None
    end: np.ndarray = None
    bp: np.ndarray = None
    # internal members: weight, floor (effective guarantee) and limit, in shares
    w_int: np.ndarray = None
    g_int: np.ndarray = None
    lim_int: np.ndarray = None
    end_int: np.ndarray = None  # level beyond which the member's allocation is constant
    mu_max: np.ndarray = None  # per group: level beyond which no member grows
    mu_lo: np.ndarray = None  # per group: a level known not to cross its box (warm start)
    ramps: Any = None  # the groups' sums in closed form (a depth of leaf-like members only)
    built: np.ndarray = None  # the end levels ``ramps`` was built from
    rise: np.ndarray = None  # leaf-like members: the level where each component's ramp starts
    lidx: np.ndarray = None  # per member: its index among the leaf-like members (-1: internal)
    iidx: np.ndarray = None  # per member: its index among the internal members (-1: leaf-like)
    ends: np.ndarray = None  # one past each group's last member
    cache: dict = None  # group levels (bytes) -> the groups' sums and slopes there (per event)


@dataclass
class _Ramps:
    """The sums of one depth's groups of leaf-like members, piecewise linear in the group level.

    Group ``g`` has its breakpoints sorted in ``P[g]``: level 0, then every level at which a
    member stops growing (its end) or a component leaves its floor (its start), ``+inf``
    padded. ``V[g, k, r]`` is the sum of resource ``r`` at ``P[g, k]`` and ``S[g, k, r]`` the slope
    right after it (exactly zero where no ramp of ``r`` is in progress); ``base`` is the sum of
    the floors. The resources of a group share its breakpoints: one sort per group, not per
    resource.
    """

    P: np.ndarray  # (G, K)
    V: np.ndarray  # (G, K, R)
    S: np.ndarray  # (G, K, R)
    base: np.ndarray  # (G, R)


def _ramps(d: _Depth, n_res: int) -> _Ramps:
    """Build :class:`_Ramps` for a depth whose members are all leaf-like (sums exact per group:
    the cumulative sums run within a group only). Only the groups with a member whose end moved
    since the last build are built again."""
    old = d.ramps
    if old is None or d.built is None:
        d.built = d.end.copy()
        with np.errstate(divide="ignore", invalid="ignore"):  # where each ramp starts
            d.rise = np.where(
                d.a > 0.0, np.where(d.g > 0.0, d.g / np.where(d.a > 0.0, d.a, 1.0), 0.0), np.inf
            )
        return _build_ramps(d.grp, d.starts, d.a, d.g, d.end, d.rise, d.n_groups, n_res)
    moved = np.flatnonzero(d.end != d.built)
    d.built = d.end.copy()
    if not len(moved):
        return old
    groups = np.unique(d.grp[moved])
    lo, hi = d.starts[groups], d.ends[groups]
    sizes = hi - lo
    first = np.cumsum(sizes) - sizes
    mem = np.arange(int(sizes.sum()), dtype=np.intp) + np.repeat(lo - first, sizes)
    local = np.repeat(np.arange(len(groups)), sizes)
    new = _build_ramps(
        local, first, d.a[mem], d.g[mem], d.end[mem], d.rise[mem], len(groups), n_res
    )
    k = new.P.shape[1]
    old = _widen(old, k)  # (a group's breakpoints only ever get fewer: seldom needed)
    old.P[groups, :k], old.P[groups, k:] = new.P, np.inf
    old.V[groups, :k], old.V[groups, k:] = new.V, new.V[:, -1:]
    old.S[groups, :k], old.S[groups, k:] = new.S, 0.0
    old.base[groups] = new.base
    return old


def _hold(d: _Depth, which: np.ndarray, levels: np.ndarray) -> None:
    """Leaf-like members ``which`` of ``d`` (a mask), frozen at ``levels``: their amounts there
    become their floors (constant at every level, no ramp left)."""
    a = d.a[which]
    g = np.maximum(d.g[which], a * levels[:, None])
    d.g[which] = g
    with np.errstate(divide="ignore", invalid="ignore"):
        held = (g > 0.0) & (a > 0.0)
        bp = np.where(held, g / np.where(held, a, 1.0), np.inf)
    d.bp[which] = bp
    if d.rise is not None:
        d.rise[which] = np.where(a > 0.0, np.where(g > 0.0, bp, 0.0), np.inf)
    if d.ramps is not None and d.built is not None:
        d.built[which] = np.nan  # their groups' breakpoints are built again


def _widen(rp: _Ramps, width: int) -> _Ramps:
    """``rp`` with ``width`` breakpoints per group (padding repeats the last sums, slope 0)."""
    k = rp.P.shape[1]
    if k >= width:
        return rp
    pad = width - k
    P = np.concatenate((rp.P, np.full((len(rp.P), pad), np.inf)), axis=1)
    V = np.concatenate((rp.V, np.repeat(rp.V[:, -1:], pad, axis=1)), axis=1)
    S = np.concatenate((rp.S, np.zeros((len(rp.S), pad, rp.S.shape[2]))), axis=1)
    return _Ramps(P, V, S, rp.base)


def _build_ramps(
    grp: np.ndarray,
    starts: np.ndarray,
    a: np.ndarray,
    g: np.ndarray,
    e: np.ndarray,
    s: np.ndarray,
    n_groups: int,
    n_res: int,
) -> _Ramps:
    """:class:`_Ramps` of the members ``grp`` (grouped, groups ``starts``), with slopes ``a``,
    floors ``g``, end levels ``e`` and the levels ``s`` where their ramps start (``g / a``)."""
    ramp = (a > 0.0) & (s < e[:, None])
    late = ramp & (s > 0.0)  # ramps that start above level 0 (held up by a floor)
    ends = np.flatnonzero(ramp.any(axis=1))
    li, lr = np.nonzero(late)
    n_end = len(ends)
    ent_grp = np.concatenate((grp[ends], grp[li]))
    ent_pos = np.concatenate((e[ends], s[li, lr]))
    order = np.lexsort((ent_pos, ent_grp))
    counts = np.bincount(ent_grp, minlength=n_groups)
    first = np.cumsum(counts) - counts
    column = np.empty(len(order), dtype=np.intp)
    column[order] = 1 + np.arange(len(order)) - first[ent_grp[order]]
    k = 1 + int(counts.max(initial=0))
    pos = np.zeros((n_groups, k))
    pos[ent_grp, column] = ent_pos
    # Padding repeats a group's last breakpoint while the sums are built (no gap, no inf * 0),
    # and becomes +inf after.
    pad = np.arange(k) > counts[:, None]
    last = pos[np.arange(n_groups), counts]
    pos = np.where(pad, last[:, None], pos)
    early = ramp & ~late
    delta = np.zeros((n_groups, k, n_res))
    step = np.zeros((n_groups, k, n_res), dtype=np.int16)
    if len(grp):
        delta[:, 0, :] = np.add.reduceat(np.where(early, a, 0.0), starts, axis=0)
        step[:, 0, :] = np.add.reduceat(early.astype(np.int16), starts, axis=0)
    ce = column[:n_end]
    delta[grp[ends], ce, :] = -np.where(ramp[ends], a[ends], 0.0)
    step[grp[ends], ce, :] = -ramp[ends].astype(np.int16)
    cs = column[n_end:]
    delta[grp[li], cs, lr] = a[li, lr]
    step[grp[li], cs, lr] = 1
    np.cumsum(step, axis=1, out=step)
    slope = np.cumsum(delta, axis=1, out=delta)
    np.copyto(slope, 0.0, where=step <= 0)  # no ramp in progress: exactly flat
    base = np.add.reduceat(g, starts, axis=0) if len(grp) else np.zeros((n_groups, n_res))
    value = np.empty((n_groups, k, n_res))
    value[:, 0] = base
    np.multiply(slope[:, :-1], np.diff(pos, axis=1)[:, :, None], out=value[:, 1:])
    np.cumsum(value, axis=1, out=value)
    pos[pad] = np.inf
    return _Ramps(pos, value, slope, base)


def _first_above(values: np.ndarray, rows: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Per (group ``rows[i]``, resource ``i % R``) of the ``(G, K, R)`` array ``values``,
    nondecreasing along ``K``: the first ``k`` with a value above ``limit[i]`` (``K`` if none),
    by a vectorised binary search (branch-free: the count of values within, in power-of-two
    steps)."""
    _, width, n_res = values.shape
    flat = values.ravel()
    first = rows * (width * n_res) + np.arange(len(rows)) % n_res
    count = np.zeros(len(rows), dtype=np.intp)  # values[..., :count] are all within
    step = 1 << (width.bit_length() - 1) if width else 0
    while step:
        probe = count + step  # within if values[probe - 1] <= limit (and probe <= width)
        index = first + (np.minimum(probe, width) - 1) * n_res
        count += np.where((probe <= width) & (flat[index] <= limit), step, 0)
        step >>= 1
    return count


def _ramps_crossing(
    rp: _Ramps, box: np.ndarray, tol: np.ndarray, groups: np.ndarray | None = None
) -> np.ndarray:
    """Per group (of ``groups`` alone, when given): the highest level at which its sum stays
    within ``box`` (+ ``tol``) on every resource (``-inf`` if it is over at once, ``+inf`` if
    never)."""
    n_groups, n_res = box.shape
    b, t = box.reshape(-1), tol.reshape(-1)
    gid = np.arange(n_groups) if groups is None else groups
    rows = np.repeat(gid, n_res)
    res = np.tile(np.arange(n_res), n_groups)
    width = rp.P.shape[1]
    k = _first_above(rp.V, rows, b + t)
    j = np.maximum(k - 1, 0)
    p, v, s = rp.P[rows, j], rp.V[rows, j, res], rp.S[rows, j, res]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inside = p + np.maximum(b - v, 0.0) / s
    nxt = rp.P[rows, np.minimum(k, width - 1)]
    mu = np.where(k == 0, -np.inf, np.where(k >= width, np.inf, np.minimum(inside, nxt)))
    return mu.reshape(n_groups, n_res).min(axis=1)


def _ramps_at(rp: _Ramps, mu: np.ndarray, groups: np.ndarray | None = None):
    """The sums and right derivatives of the groups (``groups`` alone, when given) at levels
    ``mu`` (one per group, >= 0)."""
    gid = np.arange(len(mu)) if groups is None else groups
    P = rp.P[gid]
    j = np.maximum((mu[:, None] >= P).sum(axis=1) - 1, 0)
    slope = rp.S[gid, j]
    return rp.V[gid, j] + slope * (mu - P[np.arange(len(gid)), j])[:, None], slope


def _tree(
    problem: _Problem, fast: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[_Depth], Any]:
    """Static H-DRF by progressive filling of the leaves; see the module docstring.

    Return the continuous allocations of every row (tenants, then implicit own-demand members) in
    shares of the capacity, their reason codes, the row -> tenant map, the depths and the
    traced final levels.
    """
    names = problem.names
    n, n_res = len(names), len(problem.resources)
    cap = np.array(problem.capacity, dtype=float)
    pos = cap > 0.0
    unit = np.where(pos, cap, 1.0)
    parent, depth = problem.parent, problem.depth
    has_kids = np.zeros(n, dtype=bool)
    has_kids[parent[parent >= 0]] = True
    own_rows = np.flatnonzero(has_kids & problem.own_demand.any(axis=1))
    n_rows = n + len(own_rows)
    row_parent = np.concatenate((parent, own_rows))
    row_depth = np.concatenate((depth, depth[own_rows] + 1))
    leaf_like = np.concatenate((~has_kids, np.ones(len(own_rows), dtype=bool)))
    weight = np.concatenate((problem.weight, np.full(len(own_rows), _OWN_DEMAND_WEIGHT)))
    root_of = np.arange(n_rows)  # each row's root
    while (row_parent[root_of] >= 0).any():
        root_of = np.where(row_parent[root_of] >= 0, row_parent[root_of], root_of)
    roots = (root_of, weight)
    demand = np.concatenate((problem.demand, problem.own_demand[own_rows])) / unit
    floor = np.concatenate((problem.floor, _own_floor(problem, own_rows))) / unit
    limit = np.concatenate((problem.limit, np.full((len(own_rows), n_res), np.inf))) / unit

    # Leaf-like rows: slope (dominant share w * L at level L), end level, reason at the end.
    code = np.zeros(n_rows, dtype=np.intp)
    event = np.full(n_rows, -1, dtype=np.intp)  # which event froze a row (-1: none)
    share = np.where(pos, demand, 0.0).max(axis=1, initial=0.0)
    blocked = leaf_like & ((demand > 0.0) & ~pos).any(axis=1)
    code[blocked] = 2 + ((demand > 0.0) & ~pos)[blocked].argmax(axis=1)
    growing = leaf_like & (share > 0.0) & ~blocked
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(growing, weight / np.where(growing, share, 1.0), 0.0)
        slope = k[:, None] * np.where(pos, demand, 0.0)
        cut = _cut(demand, limit)
        end = np.where(growing, cut * share / weight, 0.0)
        code[growing & (cut < 1.0)] = 1
        held = (floor > 0.0) & (slope > 0.0)
        bp = np.where(held, floor / np.where(held, slope, 1.0), np.inf)

    depths: list[_Depth] = []
    max_depth = int(row_depth.max())
    position = np.full(n_rows, -1, dtype=np.intp)  # a row's place among its depth's internals
    for level in range(max_depth + 1):
        rows = np.flatnonzero(row_depth == level)
        if level == 0:
            grp = np.zeros(len(rows), dtype=np.intp)
            n_groups = 1
        else:
            grp = position[row_parent[rows]]
            n_groups = len(depths[-1].ints)
        order = np.lexsort((rows, grp))
        rows, grp = rows[order], grp[order]
        starts = np.searchsorted(grp, np.arange(n_groups))
        is_leaf = leaf_like[rows]
        d = _Depth(rows, grp, starts, n_groups, np.flatnonzero(is_leaf), np.flatnonzero(~is_leaf))
        lr, ir = rows[d.leaf], rows[d.ints]
        d.a, d.g, d.bp = slope[lr], floor[lr], bp[lr]
        d.w_int, d.g_int, d.lim_int = weight[ir], floor[ir], limit[ir]
        d.mu_lo = np.zeros(n_groups)
        d.lidx = np.full(len(rows), -1, dtype=np.intp)
        d.lidx[d.leaf] = np.arange(len(d.leaf))
        d.iidx = np.full(len(rows), -1, dtype=np.intp)
        d.iidx[d.ints] = np.arange(len(d.ints))
        d.ends = np.append(starts[1:], len(rows)).astype(np.intp)
        d.cache = {}
        position[ir] = np.arange(len(ir))
        depths.append(d)

    def update_ends() -> None:
        """Each row's level beyond which it stops growing, bottom-up (after freezes)."""
        below = None
        for level in range(max_depth, -1, -1):
            d = depths[level]
            d.cache = {}
            d.end = end[d.rows[d.leaf]]
            top = np.zeros(len(d.rows))
            most = np.zeros((len(d.rows), n_res))
            top[d.leaf] = d.end
            most[d.leaf] = np.maximum(d.g, d.a * d.end[:, None])
            if len(d.ints):
                kids_most = below
                reach = np.minimum(kids_most, d.lim_int)
                # Just past the level where its sums reach their most (1e-9 relative): a
                # jump pending there (children leaping on a resource once the box passes
                # what a resource they no longer grow on holds) is then taken, not cut off.
                most_at = np.where(pos, reach, 0.0).max(axis=1, initial=0.0) / d.w_int
                d.end_int = most_at * (1.0 + _EPS)
                top[d.ints] = d.end_int
                most[d.ints] = reach
            d.mu_max = np.maximum.reduceat(top, d.starts) if len(d.rows) else np.zeros(0)
            below = np.add.reduceat(most, d.starts, axis=0) if d.n_groups else None
            if d.n_groups and len(d.rows) == 0:
                below = np.zeros((d.n_groups, n_res))
            if fast and not len(d.ints) and level > 0:
                d.ramps = _ramps(d, n_res)

    trace: dict[int, dict[str, np.ndarray]] = {}
    # Resources full in the cluster (or of no capacity), and whether they bound the groups
    # below the roots no more (see the top of the water level, below).
    saturated = ~pos.copy()
    open_full = [False]

    def evaluate(level: int, mu: np.ndarray, record: bool):
        """Members of ``level`` at group levels ``mu``: amounts and right derivatives."""
        d = depths[level]
        m = len(d.rows)
        x = np.empty((m, n_res))
        dx = np.zeros((m, n_res))
        at = mu[d.grp]
        if len(d.leaf):
            lv = at[d.leaf]
            ramp = d.a * np.minimum(lv, d.end)[:, None]
            x[d.leaf] = np.maximum(d.g, ramp)
            dx[d.leaf] = np.where((lv < d.end)[:, None] & (ramp >= d.g), d.a, 0.0)
        binding = None
        if len(d.ints):
            wl = (d.w_int * at[d.ints])[:, None]
            box = np.minimum(np.maximum(d.g_int, wl), d.lim_int)
            if open_full[0]:
                box[:, saturated] = _OPEN
            dbox = np.where((wl >= d.g_int) & (wl < d.lim_int), d.w_int[:, None], 0.0)
            sums, dsums, star, dstar = solve(level + 1, box, record)
            rows = np.arange(len(d.ints))
            with np.errstate(divide="ignore", invalid="ignore"):
                dmu = np.where(star >= 0, dbox[rows, star] / dstar, 0.0)
            x[d.ints] = sums
            dx[d.ints] = dsums * dmu[:, None]
            # A limit binds where the group stopped at a limit component of its box.
            s = np.maximum(star, 0)
            binding = (star >= 0) & (d.lim_int[rows, s] <= np.maximum(d.g_int, wl)[rows, s])
            if record:
                trace.setdefault(level, {}).update(binding=np.where(binding, star, -1), dmu=dmu)
        if record:
            trace.setdefault(level, {}).update(mu=mu.copy(), x=x, dx=dx, at=at)
        return x, dx, binding

    def sums_of(level: int, x: np.ndarray, dx: np.ndarray):
        d = depths[level]
        if len(d.rows) == 0:
            z = np.zeros((d.n_groups, n_res))
            return z, z
        return np.add.reduceat(x, d.starts, axis=0), np.add.reduceat(dx, d.starts, axis=0)

    def sub_sums(level: int, mu: np.ndarray, groups: np.ndarray):
        """The sums and right derivatives of groups ``groups`` (ascending) of ``level`` at
        levels ``mu`` (one per listed group): :func:`evaluate` and :func:`sums_of` on those
        groups alone, with the same arithmetic per group (a search's probes move few groups)."""
        d = depths[level]
        if d.ramps is not None:
            return _ramps_at(d.ramps, mu, groups)
        lo, hi = d.starts[groups], d.ends[groups]
        sizes = hi - lo
        first = np.cumsum(sizes) - sizes  # each group's first member in the selection
        mem = np.arange(int(sizes.sum()), dtype=np.intp) + np.repeat(lo - first, sizes)
        at = np.repeat(mu, sizes)
        k = len(mem)
        x = np.empty((k, n_res))
        dx = np.zeros((k, n_res))
        li = d.lidx[mem]
        is_leaf = li >= 0
        if is_leaf.any():
            li = li[is_leaf]
            lv, e, g, a = at[is_leaf], d.end[li], d.g[li], d.a[li]
            ramp = a * np.minimum(lv, e)[:, None]
            x[is_leaf] = np.maximum(g, ramp)
            dx[is_leaf] = np.where((lv < e)[:, None] & (ramp >= g), a, 0.0)
        if not is_leaf.all():
            inner = ~is_leaf
            ii = d.iidx[mem[inner]]
            w, g, lim = d.w_int[ii], d.g_int[ii], d.lim_int[ii]
            wl = (w * at[inner])[:, None]
            box = np.minimum(np.maximum(g, wl), lim)
            if open_full[0]:
                box[:, saturated] = _OPEN
            dbox = np.where((wl >= g) & (wl < lim), w[:, None], 0.0)
            sums, dsums, star, dstar = solve(level + 1, box, False, ii)
            rows = np.arange(len(ii))
            with np.errstate(divide="ignore", invalid="ignore"):
                dmu = np.where(star >= 0, dbox[rows, star] / dstar, 0.0)
            x[inner] = sums
            dx[inner] = dsums * dmu[:, None]
        return np.add.reduceat(x, first, axis=0), np.add.reduceat(dx, first, axis=0)

    def all_sums(level: int, mu: np.ndarray):
        """``sums_of(evaluate(level, mu))`` unrecorded, kept per event by the levels."""
        d = depths[level]
        if d.ramps is not None:
            return _ramps_at(d.ramps, mu)
        key = mu.tobytes()
        got = d.cache.get(key)
        if got is None:
            x, dx, _ = evaluate(level, mu, False)
            got = sums_of(level, x, dx)
            if len(d.cache) >= 8:
                d.cache.pop(next(iter(d.cache)))
            d.cache[key] = got
        return got[0].copy(), got[1].copy()

    def next_start(level: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per group: the lowest level above ``lo`` at which a leaf-like member's component
        leaves its floor (midway to ``hi`` if there is none, or an internal member may)."""
        d = depths[level]
        mid = 0.5 * (lo + hi)
        if not len(d.leaf):
            return mid
        at = lo[d.grp[d.leaf]][:, None]
        ahead = np.where((d.bp > at) & (d.bp < d.end[:, None]), d.bp, np.inf).min(axis=1)
        first = np.full(d.n_groups, np.inf)
        np.minimum.at(first, d.grp[d.leaf], ahead)
        if len(d.ints):
            first[np.unique(d.grp[d.ints])] = np.inf  # their starts are not known here
        return np.where(np.isfinite(first) & (first < hi) & (first > lo), first, mid)

    def solve(level: int, box: np.ndarray, record: bool, groups: np.ndarray | None = None):
        """First level of every group of ``level`` at which its sum reaches its box (of the
        groups ``groups`` alone, ascending, when given; never recorded then)."""
        d = depths[level]
        if record:
            trace.setdefault(level, {})
        tol = _TOL * box + 1e-300
        if d.ramps is not None:
            got = closed(level, box, tol, record, groups)
            if _VERIFY:  # differential check against the search at the same inputs
                keep, d.ramps = d.ramps, None
                want = solve(level, box, False, groups)
                d.ramps = keep
                # The closed form is the highest level within the box (+ tol); the search stops
                # at or below it: usually the same level, but where a ramp touches the box as it
                # ends and the sum stays flat beyond, the search stops at the touch and the
                # closed form goes on over the flat stretch (the jump the search makes later).
                slack = _VERIFY_REL * np.abs(want[0]) + 1e-15
                if not ((got[0] >= want[0] - slack).all() and (got[0] <= box + tol + 1e-15).all()):
                    raise AssertionError(f"closed-form crossing differs at depth {level}")
            return got
        top = d.mu_max if groups is None else d.mu_max[groups]
        if groups is None:
            hi = d.mu_max.copy()
            s_hi = all_sums(level, hi)[0]
            mu_lo = d.mu_lo
        else:
            hi = d.mu_max[groups]
            full = d.cache.get(d.mu_max.tobytes())
            s_hi = full[0][groups] if full is not None else sub_sums(level, hi, groups)[0]
            mu_lo = d.mu_lo[groups]
        active = (s_hi > box + tol).any(axis=1)
        lo = np.where(active, np.minimum(mu_lo, hi), hi)
        if groups is None:
            s_lo, ds_lo = all_sums(level, lo)
        else:
            s_lo, ds_lo = sub_sums(level, lo, groups)
        # Over its box already where it starts (on a resource its members no longer grow on):
        # it cannot rise until the box passes those sums, and leaps there.
        stuck = active & (s_lo > box + tol).any(axis=1)
        active &= ~stuck
        close = _CLOSE * box + 1e-300
        streak = np.zeros(len(lo), dtype=np.intp)
        creep = np.zeros(len(lo), dtype=np.intp)  # chord steps in a row that stayed within
        halved = np.zeros(len(lo), dtype=bool)  # a jump lies in the bracket: halving finds it
        for _ in range(200):
            gap = box - s_lo
            rising = ds_lo > 0.0
            reached = (rising & (gap <= close)).any(axis=1)
            # A jump is found to _BRACKET (relative) as on the water level: below it the sums
            # move by at most that much of their slope.
            narrow = np.where(halved, _BRACKET, 1e-15) * hi
            active &= ~reached & (hi - lo > narrow)
            if not active.any():
                break
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                step = np.where(rising, gap / np.where(rising, ds_lo, 1.0), np.inf).min(axis=1)
                cand = lo + step
                wide = ~(cand < hi)
                if wide.any():  # the tangent overshoots: the chord to the crossing end
                    over = s_hi > box + tol
                    frac = np.where(over, (box - s_lo) / (s_hi - s_lo), np.inf).min(axis=1)
                    chord = lo + (hi - lo) * frac
                    mid = 0.5 * (lo + hi)
                    # Twice over in a row: a jump (a member's level leaps where the
                    # resources it grows on no longer bound it), which only halving finds.
                    # Twice within in a row: the chord creeps towards a jump (regula falsi
                    # stalls on one end), which halving finds too.
                    good = (chord > lo) & (chord < hi) & (streak < 2) & (creep < 2)
                    chord = np.where(good, chord, mid)
                    cand = np.where(wide, chord, cand)
                    by_chord = wide & good
                    halved |= active & wide & ~good
                else:
                    by_chord = wide
            idle = active & ~rising.any(axis=1)
            if idle.any():  # nothing grows at lo (floors hold it): on to the next breakpoint
                if groups is None:
                    ahead = next_start(level, lo, hi)
                else:
                    lo_all, hi_all = np.zeros(d.n_groups), np.zeros(d.n_groups)
                    lo_all[groups], hi_all[groups] = lo, hi
                    ahead = next_start(level, lo_all, hi_all)[groups]
                cand = np.where(idle, ahead, cand)
                by_chord = by_chord & ~idle
            cand = np.where(active, np.maximum(cand, lo), lo)
            moving = np.flatnonzero(active)
            s_c, ds_c = s_lo.copy(), ds_lo.copy()  # only the active groups' rows are read
            s_c[moving], ds_c[moving] = sub_sums(
                level, cand[moving], moving if groups is None else groups[moving]
            )
            crossed = active & (s_c > box + tol).any(axis=1)
            ok = active & ~crossed
            streak = np.where(crossed, streak + 1, 0)
            creep = np.where(ok & by_chord, creep + 1, 0)
            hi = np.where(crossed, cand, hi)
            s_hi[crossed] = s_c[crossed]
            lo = np.where(ok, cand, lo)
            s_lo[ok], ds_lo[ok] = s_c[ok], ds_c[ok]
        # The sums where the search last went over (just past a jump, if pinned), or those it
        # stands at when stuck.
        above = np.where(stuck[:, None], s_lo, s_hi)
        if record:  # (unrecorded, the sums at lo are those of the last probe that stayed)
            x, dx, _ = evaluate(level, lo, record)
            s_lo, ds_lo = sums_of(level, x, dx)
            trace[level]["lo"] = lo
        gap = box - s_lo
        rising = ds_lo > 0.0
        capped = lo >= top
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            score = np.where(rising, gap / np.maximum(box, 1e-300), np.inf)
        # Short of its box on every resource it grows on: the group stands just below a jump
        # (its sums leap past the box there), and stays there while the box grows a little.
        pinned = score.min(axis=1, initial=np.inf) > _PINNED
        star = np.where(capped | pinned | ~rising.any(axis=1), -1, score.argmin(axis=1))
        dstar = ds_lo[np.arange(len(lo)), np.maximum(star, 0)]
        if record:
            # (Nothing rising, but over where the search went: its members pinned or frozen
            # just below a jump, a few ulps short of where a box passes what they hold.)
            jump = ~stuck & (hi > lo) & (above > box + tol).any(axis=1)
            trace[level]["pinned"] = pinned & ~capped & (rising.any(axis=1) | jump)
            trace[level]["above"] = above
            trace[level]["hi"] = hi
        return s_lo, ds_lo, star, dstar

    def closed(
        level: int, box: np.ndarray, tol: np.ndarray, record: bool, groups: np.ndarray | None
    ):
        """:func:`solve` for a depth of leaf-like members: the first crossing in closed form."""
        d = depths[level]
        hi = d.mu_max if groups is None else d.mu_max[groups]
        mu_lo = d.mu_lo if groups is None else d.mu_lo[groups]
        lo = np.minimum(_ramps_crossing(d.ramps, box, tol, groups), hi)
        lo = np.maximum(lo, np.minimum(mu_lo, hi))  # levels only ever rise (as the search)
        # The sums from the breakpoints (their amounts, once, for the final state: leaves()).
        if record:
            s_lo, ds_lo = _ramps_at(d.ramps, lo)
            trace[level].update(mu=lo.copy(), at=lo[d.grp], x=None, dx=None, lo=lo)
        elif groups is None:
            s_lo, ds_lo = all_sums(level, lo)
        else:
            s_lo, ds_lo = sub_sums(level, lo, groups)
        gap = box - s_lo
        rising = ds_lo > 0.0
        capped = lo >= hi
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(rising, gap / np.maximum(box, 1e-300), np.inf)
        star = np.where(capped | ~rising.any(axis=1), -1, score.argmin(axis=1))
        dstar = ds_lo[np.arange(len(lo)), np.maximum(star, 0)]
        return s_lo, ds_lo, star, dstar

    def unpin_levels(snap: dict[int, dict[str, np.ndarray]]) -> np.ndarray:
        """The water levels (sorted) at which the roots pinned at a jump (see :func:`solve`)
        have the box that their sums just past the jump need: where they leap."""
        values = snap.get(1, {})
        pinned = values.get("pinned")
        if pinned is None or not pinned.any():
            return np.zeros(0)
        d = depths[0]
        above = values["above"][pinned]
        w, g, lim = d.w_int[pinned], d.g_int[pinned], d.lim_int[pinned]
        need = np.where(above > g, above / w[:, None], 0.0)
        need = np.where(above > lim * (1.0 + _TOL), np.inf, need).max(axis=1)
        return np.sort(need[np.isfinite(need)])

    def warm(snap: dict[int, dict[str, np.ndarray]]) -> None:
        """Start later searches from the group levels of ``snap`` (levels only ever rise)."""
        for level, values in snap.items():
            if "lo" in values:
                depths[level].mu_lo = values["lo"]

    def pinned_past_limit(snap: dict[int, dict[str, np.ndarray]], s_top: np.ndarray):
        """Where the water level can rise no more: the groups pinned below a jump (see
        :func:`solve`) whose sums just past it pass a limit of their parent not yet reached.
        A parent's box stops at its limit, so the box never passes those sums and the group
        would wait there for ever, its members short. Return :func:`_part_way` from ``snap``
        towards the state where the shallowest such groups stand just past their jumps, with
        those limits; ``None`` if there are none."""
        for level in range(1, max_depth + 1):
            values = snap.get(level, {})
            pinned = values.get("pinned")
            if pinned is None or not pinned.any() or "hi" not in values:
                continue
            up = depths[level - 1]
            owners = up.rows[up.ints]
            found = []
            for g in np.flatnonzero(pinned).tolist():
                owner = int(owners[g])
                lim = limit[owner]
                past = (
                    np.isfinite(lim)
                    & (values["above"][g] > lim * (1.0 + _TOL) + 1e-300)
                    & ~done_pairs[int_index[owner]]
                )
                found += [(g, owner, int(r), float(lim[r])) for r in np.flatnonzero(past)]
            if not found:
                continue
            mu = values["mu"].copy()
            groups = sorted({g for g, _, _, _ in found})
            mu[groups] = values["hi"][groups]
            kept = {lv: v for lv, v in trace.items()}
            trace.clear()
            evaluate(level, mu, True)
            moved = {lv: dict(v) for lv, v in trace.items()}
            trace.clear()
            trace.update(kept)
            snap_leap = {lv: moved.get(lv, v) for lv, v in snap.items()}
            limits = []
            for _, owner, r, bound in found:
                under = {
                    lv: _under(depths[lv].rows[depths[lv].leaf], owner, row_parent)
                    for lv in range(max_depth + 1)
                    if len(depths[lv].leaf)
                }
                limits.append((owner, r, bound, under))
            # The leap may fill a resource before it reaches the limit (what the other roots
            # left of it is less than the limit leaves): then it stops there.
            return _part_way(depths, snap, snap_leap, ~saturated, s_top, s_top, roots, limits)
        return None

    triggered: set[tuple[int, int]] = set()
    # Internal rows in the order probe() lists them (depth, then place), with their limits.
    int_rows = np.concatenate([d.rows[d.ints] for d in depths])
    int_lim = limit[int_rows]
    int_index = np.full(n_rows, -1, dtype=np.intp)
    int_index[int_rows] = np.arange(len(int_rows))
    done_pairs = np.zeros(int_lim.shape, dtype=bool)
    t_lo = 0.0
    n_events = 0
    before = None  # the state at the last event, before its freezes
    update_ends()
    top = depths[0]
    ones = np.ones((1, n_res))
    while True:
        box = np.where(saturated, np.inf, ones)
        tol = _TOL
        t_hi = float(top.mu_max[0]) if len(top.rows) else 0.0

        def probe(t: float):
            """Everything at level ``t``: the roots' sums and their slopes, the limit pairs
            (internal row, resource) that bind and not yet handled, the trace, and the
            internal rows' amounts, slopes and limits (for the search of their limits)."""
            trace.clear()
            x, dx, _ = evaluate(0, np.array([t]), True)
            s, ds = sums_of(0, x, dx)
            fresh = []
            speed = np.ones(1)  # d(group level)/dt, per group of the depth
            amounts, slopes = [], []
            for level in range(max_depth + 1):
                values = trace.get(level, {})
                d = depths[level]
                if not len(d.ints):
                    break
                b = values["binding"]
                for j in np.flatnonzero(b >= 0).tolist():
                    pair = (int(d.rows[d.ints[j]]), int(b[j]))
                    if pair not in triggered:
                        fresh.append(pair)
                row_speed = speed[d.grp[d.ints]]
                amounts.append(values["x"][d.ints])
                slopes.append(values["dx"][d.ints] * row_speed[:, None])
                speed = values["dmu"] * row_speed
            snapshot = {lv: dict(v) for lv, v in trace.items()}
            if amounts:
                inner = (np.concatenate(amounts), np.concatenate(slopes))
            else:
                inner = (np.zeros((0, n_res)), np.zeros((0, n_res)))
            return s[0], ds[0], fresh, snapshot, inner

        s_lo, ds_lo, _, snap_lo, inner_lo = probe(t_lo)
        open_pairs = np.isfinite(int_lim) & ~done_pairs
        streak = 0
        leaps = np.zeros(0)  # the levels where pinned roots leap
        slow = 0  # accepted steps in a row that closed less than half the gap
        # The last event's freezes can make a group's level leap at t_lo itself (the resources
        # that bounded it stopped growing), past the capacity of a resource: the leaves then
        # move part of the way from where they stood before the event, and stop there.
        jumped = (s_lo > box[0] + tol) & ~saturated
        # Or past the limit of an internal member (whose box holds its group's sums only at the
        # group's own level, which cannot fall back where the leap went over).
        passed = open_pairs & (inner_lo[0] > int_lim * (1.0 + tol) + 1e-300)
        leapt = bool(jumped.any() or passed.any()) and before is not None
        resolved = False
        snap_hi = None
        # An internal member's limit already reached where the level stands (a child's floor
        # equal to its ancestor's limit, a limit of 0) binds at once: nothing rises into it,
        # so neither the search nor the crossing test below would see it.
        reached = (
            open_pairs & (int_lim - inner_lo[0] <= tol * int_lim + 1e-300)
            if not leapt
            else np.zeros_like(open_pairs)
        )
        at_once = bool(reached.any())
        if not leapt and not at_once:  # is anything left to stop below the top level?
            s_hi, _, fresh_hi, snap_top, _ = probe(t_hi)
            if not ((s_hi > box[0] + tol).any() or fresh_hi):
                leap = pinned_past_limit(snap_top, s_hi)
                if leap is None and not open_full[0] and (saturated & pos).any():
                    # Where the water level can rise no more, a group may still wait for its
                    # box to pass what it holds of a resource full in the cluster, which no
                    # member grows on any more (a team then short while its department's
                    # limit and the resource it wants leave room). H-DRF ignores such
                    # resources: their boxes open, and if that moves anything, the filling
                    # goes on from the last event (the leap as at an event).
                    open_full[0] = True
                    s_open, _, fresh_open, _, _ = probe(t_hi)
                    if fresh_open or (np.abs(s_open - s_hi) > tol).any():
                        continue
                if leap is None:
                    final = snap_top
                    break
                # A group pinned below a jump whose box cannot grow past its parent's limit:
                # the leap is taken part of the way, to the limit (as a leap at an event).
                t_lo = t_hi
                snap_lo, s_lo, jumped, leapt_pairs = leap
                leapt = resolved = True
            snap_hi = snap_top
        else:
            s_hi, fresh_hi = s_lo, []
        if leapt and not resolved:
            limits = []
            for i, r in zip(*np.nonzero(passed), strict=True):
                owner = int(int_rows[i])
                under = {
                    lv: _under(depths[lv].rows[depths[lv].leaf], owner, row_parent)
                    for lv in range(max_depth + 1)
                    if len(depths[lv].leaf)
                }
                limits.append((owner, int(r), float(int_lim[i, r]), under))
            snap_lo, s_lo, jumped, leapt_pairs = _part_way(
                depths, before[0], snap_lo, jumped, before[1], s_lo, roots, limits
            )
        for _ in range(0 if leapt or at_once else 200):
            gap = box[0] - s_lo
            rising = ds_lo > 0.0
            x_in, dx_in = inner_lo
            room = int_lim - x_in
            climbing = open_pairs & (dx_in > 0.0)
            if (
                (rising & (gap <= _CLOSE)).any()
                or (climbing & (room <= _CLOSE * int_lim)).any()
                or t_hi - t_lo <= (_BRACKET if streak >= 2 else 1e-15) * t_hi
                or (t_hi in leaps and t_hi - t_lo <= 2.0 * _JUMP * t_hi)  # just below a leap
            ):
                break
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(rising, gap / np.where(rising, ds_lo, 1.0), np.inf).min()
                if climbing.any():
                    step = min(step, float((room[climbing] / dx_in[climbing]).min()))
            cand = t_lo + step
            tangent = False
            leaps = unpin_levels(snap_lo)
            inside = leaps[(leaps > t_lo) & (leaps < t_hi)]
            if slow >= 3:  # the tangents keep falling short (a slope overestimated): halve
                cand = 0.5 * (t_lo + t_hi)
            elif streak and len(inside):
                # Over last time: perhaps the leap of a pinned root. Bisect on those levels.
                cand = float(inside[len(inside) // 2])
            elif streak and t_hi in leaps and t_lo < t_hi * (1.0 - _JUMP):
                # A root's leap went over there: just below it, the bracket is narrow.
                cand = t_hi * (1.0 - _JUMP)
            elif cand < t_hi:
                tangent = True
            else:
                over = s_hi > box[0] + tol
                with np.errstate(divide="ignore", invalid="ignore"):
                    frac = np.where(over, gap / (s_hi - s_lo), np.inf).min()
                cand = t_lo + (t_hi - t_lo) * frac
                if not (t_lo < cand < t_hi) or fresh_hi or streak >= 2:
                    cand = 0.5 * (t_lo + t_hi)
            s_c, ds_c, fresh_c, snap_c, inner_c = probe(cand)
            streak = streak + 1 if ((s_c > box[0] + tol).any() or fresh_c) else 0
            if (s_c > box[0] + tol).any() or fresh_c:
                t_hi, s_hi, fresh_hi, snap_hi = cand, s_c, fresh_c, snap_c
            else:
                before_gap = np.where(rising, gap, np.inf).min()
                t_lo, s_lo, ds_lo, snap_lo, inner_lo = cand, s_c, ds_c, snap_c, inner_c
                after_gap = np.where(rising, box[0] - s_lo, np.inf).min()
                slow = slow + 1 if tangent and after_gap > 0.5 * before_gap else 0
                warm(snap_lo)
        # Events at t_lo: resources running out, or limits of internal members binding.
        gap = box[0] - s_lo
        rising = ds_lo > 0.0
        if not leapt and not at_once and (rising & (gap > 0.0) & (gap <= _CLOSE)).any():
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(rising, gap / np.where(rising, ds_lo, 1.0), np.inf).min()
            for cand in (t_lo + step, np.nextafter(t_lo, np.inf)):
                if not t_lo < cand < t_hi:
                    continue
                s_c, ds_c, fresh_c, snap_c, inner_c = probe(cand)
                if (s_c <= box[0]).all() and not fresh_c:
                    t_lo, s_lo, ds_lo, snap_lo, inner_lo = cand, s_c, ds_c, snap_c, inner_c
                    break
        gap = box[0] - s_lo
        n_events += 1
        out = (ds_lo > 0.0) & (gap <= tol) & ~saturated
        x_in, dx_in = inner_lo
        near = open_pairs & (dx_in > 0.0) & (int_lim - x_in <= tol * int_lim + 1e-300)
        near |= reached
        pairs = [(int(int_rows[i]), int(r)) for i, r in zip(*np.nonzero(near), strict=True)]
        if leapt:
            out, pairs = jumped, leapt_pairs
        elif not out.any() and not pairs:  # the bracket closed: what crossed at its top
            out = (s_hi > box[0] + tol) & ~saturated
            pairs = fresh_hi
            if out.any() and snap_hi is not None:
                # Leaps within _EPS of the same level are one catch-up (a tie found a few ulps
                # apart): the way's end is taken that much above the bracket's top.
                lift = t_hi * (1.0 + _EPS)
                if lift < float(top.mu_max[0]):
                    s_up, _, fresh_up, snap_up, _ = probe(lift)
                    if not fresh_up:
                        s_hi, snap_hi = s_up, snap_up
                        out = (s_hi > box[0] + tol) & ~saturated
                snap_lo, s_lo, out, _ = _part_way(depths, snap_lo, snap_hi, out, s_lo, s_hi, roots)
            elif pairs and snap_hi is not None:
                # A limit that binds only at the top: the members below it leapt there (a
                # resource bounding their group stopped growing) up to the limit, inside the
                # capacity. They stop where they stand at the top, at the limit, not below it.
                snap_lo, s_lo = snap_hi, s_hi
        events = [(-1, r) for r in np.flatnonzero(out).tolist()]
        events += sorted(set(pairs))
        if not events:  # nothing left to stop (round-off): keep what was reached
            final = snap_lo
            break
        before = (snap_lo, s_lo)
        for owner, r in events:
            if owner < 0:
                saturated[r] = True
            else:
                triggered.add((owner, r))
                done_pairs[int_index[owner], r] = True
            for level in range(max_depth + 1):
                d = depths[level]
                if not len(d.leaf) or level not in snap_lo:
                    continue
                lr = d.rows[d.leaf]
                lv = snap_lo[level]["at"][d.leaf]
                inside = (
                    np.ones(len(lr), dtype=bool) if owner < 0 else _under(lr, owner, row_parent)
                )
                e = end[lr]
                live = inside & (d.a[:, r] > 0.0) & (lv * (1.0 + _EPS) < e)
                drawing = live & (d.a[:, r] * lv >= d.g[:, r])
                ids = lr[drawing]
                end[ids] = lv[drawing]
                code[ids] = 2 + r
                event[ids] = n_events
                if drawing.any():
                    # Frozen members keep what they hold: their amounts become floors, so a
                    # group level found again below the event (a few ulps below, or below a
                    # leap where a middle department waits for its box) neither takes it
                    # back nor counts them as rising there.
                    _hold(d, drawing, lv[drawing])
                waiting = live & ~drawing & (d.bp[:, r] < e)
                ids = lr[waiting]
                end[ids] = d.bp[waiting, r]
                code[ids] = 2 + r
                event[ids] = n_events
        update_ends()
    for level, values in final.items():  # the leaves' amounts where the sums came from ramps
        if values.get("x") is None and level in final:
            d = depths[level]
            at = values["at"]
            values["x"] = np.maximum(d.g, d.a * np.minimum(at, d.end)[:, None])
    return final, code, event, triggered, depths, unit, n_rows, own_rows, leaf_like


def _part_way(
    depths: list[_Depth],
    snap_lo: dict[int, dict[str, np.ndarray]],
    snap_hi: dict[int, dict[str, np.ndarray]],
    out: np.ndarray,
    s_lo: np.ndarray,
    s_hi: np.ndarray,
    roots: tuple[np.ndarray, np.ndarray],
    limits: Sequence[tuple[int, int, float, dict[int, np.ndarray]]] = (),
) -> tuple[dict[int, dict[str, np.ndarray]], np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Levels between two states at (about) one water level, where a resource of ``out`` runs
    out or a limit of ``limits`` is reached; return them, the consumption there, the resources
    that run out there and the limit pairs ``(owner, resource)`` reached there.

    Where a member's level jumps (the resources that bounded its group stopped growing), the
    consumption of a resource can leap past the capacity, or past an ancestor's limit, between
    two neighbouring levels. The leaves then move from their levels in ``snap_lo`` towards
    those in ``snap_hi``, and stop where the first resource of ``out`` fills or the first limit
    is reached; the members drawing on what fills there freeze, and the others move on (the
    next probe finds where). ``limits`` lists ``(owner, resource, limit, leaves)``, ``leaves``
    per depth: which of its leaf-like members are below ``owner``.

    The roots whose subtrees move *catch up* as H-DRF has them do once the resources that
    bounded them are full: measured on the resources they grow on in the move (the others are
    full or not wanted), the lowest dominant share per weight rises first, and those that meet
    rise together by weight (``roots``: each row's root, each row's weight). A root's leaves
    move together, by the fraction of the way at which the root's sums (linear along the way
    between kinks) reach its weight times the catch-up level. A single root moving is the
    plain fraction: exact from the leaves' sorted ramps, halving as the fallback.
    """
    if not (s_hi[out] > s_lo[out]).any() and not limits:
        return snap_lo, s_lo, out, []
    root_of, weight = roots
    n_res = len(out)
    parts: list[tuple] = []
    steady = np.zeros(n_res)
    held_rows, held_amounts = [], []
    under_parts: list[list[np.ndarray]] = [[] for _ in limits]
    steady_lim = np.zeros(len(limits))
    for lv in snap_lo:
        d = depths[lv]
        if lv not in snap_hi or not len(d.leaf):
            continue
        lo_at, hi_at = snap_lo[lv]["at"][d.leaf], snap_hi[lv]["at"][d.leaf]
        move = lo_at != hi_at
        still = ~move
        rows = d.rows[d.leaf]
        held = np.maximum(d.g[still], d.a[still] * np.minimum(lo_at[still], d.end[still])[:, None])
        steady += held.sum(axis=0)
        held_rows.append(rows[still])
        held_amounts.append(held)
        for j, (_, r, _, under) in enumerate(limits):
            if lv in under:
                steady_lim[j] += held[under[lv][still], r].sum()
                under_parts[j].append(under[lv][move])
            else:
                under_parts[j].append(np.zeros(int(move.sum()), dtype=bool))
        parts.append((d.g[move], d.a[move], d.end[move], lo_at[move], hi_at[move], rows[move]))
    g = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, n_res))
    a = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, n_res))
    e = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0)
    lo = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0)
    hi = np.concatenate([p[4] for p in parts]) if parts else np.zeros(0)
    mrows = np.concatenate([p[5] for p in parts]) if parts else np.zeros(0, dtype=np.intp)
    masks = [np.concatenate(m) if m else np.zeros(0, dtype=bool) for m in under_parts]

    def amounts(f: np.ndarray | float) -> np.ndarray:
        return np.maximum(g, a * np.minimum(lo + f * (hi - lo), e)[:, None])

    def passed(x: np.ndarray, within: float = 0.0) -> np.ndarray:
        """Which limits of ``limits`` the moving leaves' amounts ``x`` pass (or come
        ``within`` that much of, in shares of the capacity, as :func:`excess` measures)."""
        return np.array(
            [
                x[mask, r].sum() + steady_lim[j] > bound - within
                for j, ((_, r, bound, _), mask) in enumerate(zip(limits, masks, strict=True))
            ],
            dtype=bool,
        )

    def excess(f: np.ndarray | float) -> float:
        """How far the most filled resource of ``out`` or limit of ``limits`` is over (> 0) or
        short of (<= 0) its capacity or limit, the leaves at fractions ``f``."""
        x = amounts(f)
        most = float((steady + x.sum(axis=0) - 1.0)[out].max(initial=-np.inf))
        for j, ((_, r, bound, _), mask) in enumerate(zip(limits, masks, strict=True)):
            most = max(most, float(x[mask, r].sum() + steady_lim[j] - bound))
        return most

    def over(f: np.ndarray | float) -> bool:
        x = amounts(f)
        return bool((steady + x.sum(axis=0) > 1.0)[out].any()) or bool(passed(x).any())

    # The moving roots, and each moving leaf's place among them.
    top, place = np.unique(root_of[mrows], return_inverse=True)
    if len(top) > 1:
        # Each moving root's sums at both ends of the way (all its leaves, moving or not).
        x0, x1 = amounts(0.0), amounts(1.0)
        s0 = _sum_rows(place, x0, len(top))
        for rows, held in zip(held_rows, held_amounts, strict=True):
            at = np.searchsorted(top, root_of[rows])
            inside = (at < len(top)) & (top[np.minimum(at, len(top) - 1)] == root_of[rows])
            s0 += _sum_rows(at[inside], held[inside], len(top))
        grow = _sum_rows(place, x1 - x0, len(top))
        w = weight[top][:, None]
        # Resources full at the end of the way (and not over) count no more, as H-DRF ignores
        # saturated resources: the catch-up is measured on the others.
        # (A growth within _EPS of the capacity is a member that meets its demand at this very
        # level, a few ulps later: not something the root grows on.)
        rising = (grow > _EPS) & (out | (s_hi < 1.0 - _EPS))[None, :]
        start = np.where(rising, s0 / w, -np.inf).max(axis=1)  # where each root starts
        start = np.where(rising.any(axis=1), start, np.inf)
        stop = np.where(rising, (s0 + grow) / w, -np.inf).max(axis=1)

        def fractions(u: float) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):
                each = np.where(rising, (w * u - s0) / np.where(rising, grow, 1.0), np.inf)
            f = np.clip(each.min(axis=1), 0.0, 1.0)
            return np.where(rising.any(axis=1), f, 1.0)[place]

        u_lo = float(start[np.isfinite(start)].min(initial=0.0))
        u_hi = float(stop[np.isfinite(stop)].max(initial=u_lo))
        e_lo, e_hi = excess(fractions(u_lo)), excess(fractions(u_hi))
        if e_lo > 0.0 or not e_hi > 0.0:
            u_lo = u_hi = None  # not a catch-up of the usual kind: the plain fraction below
        else:
            # The excess is piecewise linear and rising in the catch-up level (_rise_to_zero).
            u_lo, u_hi, e_lo, e_hi = _rise_to_zero(
                lambda u: excess(fractions(u)), u_lo, u_hi, e_lo, e_hi
            )
        if u_lo is not None:
            f_lo, f_hi = fractions(u_lo), fractions(u_hi)
            if e_lo < -_TOL:
                # Short below, over above: roots whose move does not raise their share on what
                # they grow on (a tie) move all at once there, by one fraction of their way.
                step = f_hi - f_lo
                phi_lo, phi_hi, e_lo, e_hi = _rise_to_zero(
                    lambda phi: excess(f_lo + phi * step), 0.0, 1.0, e_lo, e_hi
                )
                f_lo, f_hi = f_lo + phi_lo * step, f_lo + phi_hi * step
            moved = {lv: dict(values) for lv, values in snap_lo.items()}
            fraction_of = np.zeros(len(root_of))
            fraction_of[mrows] = f_lo
            for lv in snap_lo:
                if lv in snap_hi and len(depths[lv].leaf):
                    d = depths[lv]
                    at_lo, at_hi = snap_lo[lv]["at"], snap_hi[lv]["at"]
                    f_all = np.zeros(len(at_lo))
                    f_all[d.leaf] = fraction_of[d.rows[d.leaf]]
                    moved[lv]["at"] = at_lo + f_all * (at_hi - at_lo)
            x_lo = amounts(f_lo)
            if e_lo < -_TOL:  # what fills: over just above
                x_hi = amounts(f_hi)
                filled = out & (steady + x_hi.sum(axis=0) > 1.0)
                hits = passed(x_hi)
            else:  # or full (to _TOL) where the leaves stop
                filled = out & (steady + x_lo.sum(axis=0) >= 1.0 - _TOL)
                hits = passed(x_lo, _TOL)
            pairs = [(o, r) for (o, r, _, _), hit in zip(limits, hits, strict=True) if hit]
            if not filled.any() and not pairs:
                filled = out
                pairs = [(o, r) for o, r, _, _ in limits]
            return moved, steady + x_lo.sum(axis=0), filled, pairs

    moving = [(g, a, e, lo, hi)] if len(lo) else []
    lo_f, hi_f = 0.0, 1.0
    first = _first_fill(moving, steady + amounts(0.0).sum(axis=0), out)
    for j, ((_, r, bound, _), mask) in enumerate(zip(limits, masks, strict=True)):
        only = np.zeros(n_res, dtype=bool)
        only[r] = True
        start_r = amounts(0.0)[mask].sum(axis=0)
        start_r[r] += steady_lim[j]
        got = _first_fill([(g[mask], a[mask], e[mask], lo[mask], hi[mask])], start_r, only, bound)
        if got is not None:
            first = got if first is None else min(first, got)
    if first is not None:  # the exact fraction; keep it if the sums agree on either side
        below = [f for f in (first, first * (1.0 - 1e-13), first * (1.0 - 1e-11)) if f >= 0.0]
        above = [first * (1.0 + 1e-13) + 1e-16, first * (1.0 + 1e-11) + 1e-14]
        lo_c = next((f for f in below if not over(f)), None)
        hi_c = next((f for f in above if f <= 1.0 and over(f)), None)
        if lo_c is not None and hi_c is not None:
            lo_f, hi_f = lo_c, hi_c
    exact = hi_f < 1.0 or lo_f > 0.0
    while not exact and hi_f - lo_f > 2.0**-60 * hi_f:  # else halve, to 2**-60
        mid = 0.5 * (lo_f + hi_f)
        if not lo_f < mid < hi_f:
            break
        if over(mid):
            hi_f = mid
        else:
            lo_f = mid
    moved = {lv: dict(values) for lv, values in snap_lo.items()}
    for lv in snap_lo:
        if lv in snap_hi:
            at_lo, at_hi = snap_lo[lv]["at"], snap_hi[lv]["at"]
            moved[lv]["at"] = at_lo + lo_f * (at_hi - at_lo)
    x_hi = amounts(hi_f)
    filled = out & (steady + x_hi.sum(axis=0) > 1.0)
    hits = passed(x_hi)
    pairs = [(o, r) for (o, r, _, _), hit in zip(limits, hits, strict=True) if hit]
    if not filled.any() and not pairs:
        filled = out
        pairs = [(o, r) for o, r, _, _ in limits]
    return moved, steady + amounts(lo_f).sum(axis=0), filled, pairs


def _sum_rows(index: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``rows`` summed by ``index`` into ``n`` rows (``np.add.at``, a column at a time)."""
    out = np.zeros((n, rows.shape[1]))
    for r in range(rows.shape[1]):
        out[:, r] = np.bincount(index, weights=rows[:, r], minlength=n)
    return out


def _rise_to_zero(
    excess: Any, lo: float, hi: float, e_lo: float, e_hi: float
) -> tuple[float, float, float, float]:
    """Narrow ``[lo, hi]`` (``excess(lo) = e_lo <= 0 < e_hi = excess(hi)``, ``excess`` rising)
    to where ``excess`` turns positive: to 1e-13 relative, or until ``e_lo`` is within
    ``_TOL`` of zero. Regula falsi, Illinois-style (the end that stays has its value halved),
    halving where a step would not fall inside; return ``lo, hi, excess(lo), excess(hi)``."""
    side = 0
    for _ in range(100):
        if hi - lo <= 1e-13 * hi or e_lo >= -_TOL:
            break
        cand = hi - e_hi * (hi - lo) / (e_hi - e_lo)
        if not lo < cand < hi:
            cand = 0.5 * (lo + hi)
            if not lo < cand < hi:
                break
        got = excess(cand)
        if got > 0.0:
            hi, e_hi = cand, got
            if side == 1:
                e_lo *= 0.5
            side = 1
        else:
            lo, e_lo = cand, got
            if side == -1:
                e_hi *= 0.5
            side = -1
    return lo, hi, e_lo, e_hi


def _first_fill(
    moving: list[tuple], start: np.ndarray, out: np.ndarray, bound: float = 1.0
) -> float | None:
    """The lowest fraction ``f`` at which a resource of ``out`` fills (its sum reaches ``bound``),
    the moving leaves going from their levels ``lo`` to ``hi`` (``lo + f * (hi - lo)``); ``start``
    is the consumption at ``f = 0``. Every leaf's amount is piecewise linear in ``f`` (its floor, a
    ramp, its end), so the sums are too: sorted ramps give the crossing exactly. ``None`` where
    some level would fall."""
    if not moving:
        return None
    g = np.concatenate([m[0] for m in moving])
    a = np.concatenate([m[1] for m in moving])
    e = np.concatenate([m[2] for m in moving])
    lo = np.concatenate([m[3] for m in moving])
    step = np.concatenate([m[4] for m in moving]) - lo
    if (step < 0.0).any():
        return None
    best = np.inf
    for r in np.flatnonzero(out).tolist():
        if start[r] >= bound:
            return 0.0
        ar = a[:, r]
        ramp = (ar > 0.0) & (step > 0.0)
        if not ramp.any():
            continue
        ar, gr, er, lr, sr = ar[ramp], g[ramp, r], e[ramp], lo[ramp], step[ramp]
        begin = np.clip((gr / ar - lr) / sr, 0.0, 1.0)
        end = np.clip((er - lr) / sr, 0.0, 1.0)
        keep = begin < end
        if not keep.any():
            continue
        slope = ar[keep] * sr[keep]
        pos = np.concatenate((begin[keep], end[keep]))
        change = np.concatenate((slope, -slope))
        order = np.argsort(pos, kind="stable")
        pos, change = pos[order], change[order]
        after = np.cumsum(change)
        value = start[r] + np.concatenate(([0.0], np.cumsum(after[:-1] * np.diff(pos))))
        hit = np.flatnonzero(value >= bound)
        if len(hit):
            k = int(hit[0])
            f = pos[0] if k == 0 else pos[k - 1] + (bound - value[k - 1]) / after[k - 1]
        elif after[-1] > 0.0 and pos[-1] < 1.0:
            f = pos[-1] + (bound - value[-1]) / after[-1]
        else:
            continue
        best = min(best, float(f))
    return best if best <= 1.0 else None


def _own_floor(problem: _Problem, own_rows: np.ndarray) -> np.ndarray:
    """Floors of the own-demand members of ``own_rows``: the part of a parent's own guarantee
    that its children's floors leave, up to its own demand."""
    n, n_res = len(problem.names), len(problem.resources)
    if not len(own_rows):
        return np.zeros((0, n_res))
    kids = np.flatnonzero(problem.parent >= 0)
    floors = _sum_by(problem.parent[kids], problem.floor[kids], n)[own_rows]
    left = np.maximum(problem.own_guarantee[own_rows] - floors, 0.0)
    return np.minimum(left, problem.own_demand[own_rows])


def _under(rows: np.ndarray, owner: int, parent: np.ndarray) -> np.ndarray:
    """Which of ``rows`` have ``owner`` as an ancestor."""
    inside = np.zeros(len(rows), dtype=bool)
    up = parent[rows]
    while True:
        live = up >= 0
        if not live.any():
            return inside
        inside |= up == owner
        up = np.where(live, parent[np.maximum(up, 0)], -1)


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


def _cut(demand: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Per row, the factor (<= 1) that brings the demand within the limit along its direction."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(demand > limit, limit / demand, 1.0).min(axis=1, initial=1.0)


def _plain_matrix(maps: list[Any], index: dict[str, int], fill: float) -> np.ndarray | None:
    """``maps`` as an ``(len(maps), R)`` matrix if they are dicts of known resources to plain
    finite numbers in ``[0, MAX_AMOUNT]`` (absent resources get ``fill``), else ``None``.

    The fast path of :func:`_pack`: every check is column-wise (C loops), and no object is
    created per map.
    """
    n = len(maps)
    if n and set(map(type, maps)) != {dict}:
        return None
    values = list(chain.from_iterable(map(dict.values, maps)))
    if values and not set(map(type, values)) <= _PLAIN_NUMBERS:
        return None
    try:
        columns = list(map(index.__getitem__, chain.from_iterable(maps)))
    except (KeyError, TypeError):  # an unknown resource
        return None
    amounts = np.array(values, dtype=float)
    if not (np.isfinite(amounts).all() and (amounts >= 0.0).all()):
        return None
    if len(amounts) and amounts.max() > MAX_AMOUNT:
        return None
    matrix = np.full((n, len(index)), fill)
    matrix[np.repeat(np.arange(n), list(map(len, maps))), columns] = amounts
    return matrix


def _pack(
    ordered: list[Tenant], index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Weights, demands, guarantees and limits (``inf`` where none) of ``ordered`` tenants.

    The fast path for problems of plain dicts and numbers: every per-tenant rule of
    :func:`_validate` on these fields is checked in bulk, and ``None`` is returned if any fails
    (or anything unexpected is met), so that the per-tenant loop raises the precise error.
    """
    n, n_res = len(ordered), len(index)
    try:
        weights = list(map(attrgetter("weight"), ordered))
        if weights and not set(map(type, weights)) <= _PLAIN_NUMBERS:
            return None
        weight = np.array(weights, dtype=float)
        if not (np.isfinite(weight).all() and (weight > 0.0).all()):
            return None
        demand = _plain_matrix(list(map(attrgetter("demand"), ordered)), index, 0.0)
        if demand is None:
            return None
        guarantee = np.zeros((n, n_res))
        some = list(compress(range(n), map(attrgetter("guarantee"), ordered)))
        if some:
            rows = _plain_matrix([ordered[i].guarantee for i in some], index, 0.0)
            if rows is None:
                return None
            guarantee[some] = rows
        limit = np.full((n, n_res), np.inf)
        some = list(
            compress(range(n), map(is_not, map(attrgetter("limit"), ordered), repeat(None)))
        )
        if some:
            rows = _plain_matrix([ordered[i].limit for i in some], index, np.inf)
            if rows is None:
                return None
            limit[some] = rows
            if (guarantee[some] > rows * (1 + _EPS)).any():
                return None
    except Exception:  # anything odd: let the per-tenant loop decide
        return None
    return weight, demand, guarantee, limit


def _precise(
    names: list[str], ordered: list[Tenant], index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The per-tenant checks, in name order: the first fault raises its own message.

    Return (weight, demand, guarantee, limit, parent) as :func:`_pack` and :func:`_parents` do.
    """
    resources = sorted(index, key=index.__getitem__)
    position = dict(zip(names, range(len(names)), strict=True))
    weight, demand, guarantee, limit, parents = [], [], [], [], []
    inf_row = [math.inf] * len(resources)
    for name, tenant in zip(names, ordered, strict=True):
        owner = f"tenant {name!r}"
        w = tenant.weight
        if isinstance(w, bool) or not isinstance(w, int | float | Decimal):
            raise ProblemError(f"{owner}: weight must be a number, got {w!r}")
        if not math.isfinite(float(w)) or float(w) <= 0:
            raise ProblemError(f"{owner}: weight must be > 0, got {w!r}")
        weight.append(float(w))
        demand.append(_vector(tenant.demand, index, owner, "demand"))
        g = (
            _vector(tenant.guarantee, index, owner, "guarantee")
            if tenant.guarantee
            else [0.0] * len(resources)
        )
        guarantee.append(g)
        lim = (
            inf_row
            if tenant.limit is None
            else _vector(tenant.limit, index, owner, "limit", fill=math.inf)
        )
        limit.append(lim)
        for r, resource in enumerate(resources):
            if g[r] > lim[r] * (1 + _EPS):
                raise ProblemError(
                    f"{owner}: guarantee[{resource!r}] ({_fmt(g[r])}) "
                    f"exceeds limit[{resource!r}] ({_fmt(lim[r])})"
                )
        parent = tenant.parent
        if parent is not None and (not isinstance(parent, str) or parent not in position):
            raise ProblemError(f"{owner}: unknown parent {parent!r}")
        parents.append(-1 if parent is None else position[parent])
    n_res = len(resources)
    return (
        np.array(weight, dtype=float),
        _matrix(demand, n_res),
        _matrix(guarantee, n_res),
        _matrix(limit, n_res),
        np.array(parents, dtype=np.intp),
    )


def _sum_by(index: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``(n, R)`` sums of ``rows`` by ``index`` (in row order)."""
    if rows.shape[1] == 0:
        return np.zeros((n, 0))
    return np.stack([np.bincount(index, weights=col, minlength=n) for col in rows.T], axis=1)


def _depths(parent: np.ndarray, names: list[str], ordered: list[Tenant]) -> np.ndarray:
    """Depth of every tenant (roots 0); raise ProblemError if the parents form a cycle."""
    n = len(parent)
    depth = np.zeros(n, dtype=np.intp)
    up = parent.copy()
    # Pointer doubling: after k steps ``jump`` holds the ancestor 2**k levels up (-1 past a root);
    # once 2**k exceeds n, only tenants on or below a cycle still have one.
    jump = parent.copy()
    for _ in range(n.bit_length() + 1):
        live = jump >= 0
        if not live.any():
            break
        jump[live] = jump[jump[live]]
    if not (jump >= 0).any():
        while (climbing := up >= 0).any():
            depth[climbing] += 1
            up[climbing] = parent[up[climbing]]
        return depth
    # On a cycle: name it, starting from the first tenant (by name) that never reaches a root.
    start = names[int(np.flatnonzero(jump >= 0)[0])]
    by_name = dict(zip(names, ordered, strict=True))
    cycle, name = [start], by_name[start].parent
    while name is not None and name != start and name not in cycle:
        cycle.append(name)
        name = by_name[name].parent
    path = " -> ".join(repr(x) for x in [*cycle, name])
    raise ProblemError(f"tenant {start!r}: cycle in parents ({path})")


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
    ordered = None
    if all(map(isinstance, tenants, repeat(Tenant))):
        given = list(map(attrgetter("name"), tenants))
        if set(map(type, given)) <= {str} and all(given):
            ordered = sorted(tenants, key=attrgetter("name"))
            names = list(map(attrgetter("name"), ordered))
            if any(map(eq, names, islice(names, 1, None))):  # a duplicate: named below
                ordered = None
    if ordered is None:
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
        ordered = list(map(by_name.__getitem__, names))
    n, n_res = len(names), len(resources)

    packed = _pack(ordered, index)
    parent = None
    if packed is not None:
        raw_parents = list(map(attrgetter("parent"), ordered))
        if all(map(is_, raw_parents, repeat(None))):
            parent = np.full(n, -1, dtype=np.intp)
        else:
            # Few distinct parents: find each in the sorted names (unknown ones: precise path).
            position: dict[str | None, int] = {None: -1}
            try:
                for p in set(raw_parents) - {None}:
                    i = bisect_left(names, p)
                    if i == n or names[i] != p:
                        raise KeyError(p)
                    position[p] = i
                parent = np.array(list(map(position.__getitem__, raw_parents)), dtype=np.intp)
            except (KeyError, TypeError):
                parent = None
    if packed is None or parent is None:
        *packed, parent = _precise(names, ordered, index)
    weight, own_demand, own_guarantee, limit = packed

    # Effective vectors, deepest tenants first: a parent adds up its children's.
    depth = _depths(parent, names, ordered)
    demand, guarantee = own_demand, own_guarantee
    if n and depth.max() > 0:
        demand, guarantee = own_demand.copy(), own_guarantee.copy()
        for level in range(int(depth.max()), 0, -1):
            kids = np.flatnonzero(depth == level)
            up = parent[kids]
            kid_demand, kid_guarantee = demand[kids], guarantee[kids]
            # What a child can use: its demand cut down to its limit, or its floor if larger.
            cut = _cut(kid_demand, limit[kids])[:, None]
            usable = np.where(
                cut < 1.0,
                np.maximum(np.minimum(kid_guarantee, kid_demand), cut * kid_demand),
                kid_demand,
            )
            demand += _sum_by(up, usable, n)
            ups = np.flatnonzero(np.bincount(up, minlength=n))
            kids_guarantee = _sum_by(up, kid_guarantee, n)[ups]
            over = kids_guarantee > limit[ups] * (1 + _EPS)
            if over.any():
                k, r = (int(x[0]) for x in np.nonzero(over))
                raise ProblemError(
                    f"tenant {names[ups[k]]!r}: its children's guarantees of {resources[r]!r} "
                    f"({_fmt(kids_guarantee[k, r])}) exceed its limit ({_fmt(limit[ups[k], r])})"
                )
            guarantee[ups] = np.maximum(own_guarantee[ups], kids_guarantee)

    totals = guarantee[depth == 0].sum(axis=0) if n else np.zeros(n_res)
    for r, resource in enumerate(resources):
        if totals[r] > cap[r] * (1 + _EPS):
            raise ProblemError(
                f"guarantee[{resource!r}]: sum of guarantees ({_fmt(totals[r])}) exceeds capacity "
                f"({_fmt(cap[r])})"
            )
    return _Problem(
        resources=resources,
        capacity=cap,
        integral=integral_idx,
        names=names,
        weight=weight,
        demand=demand,
        own_demand=own_demand,
        floor=np.minimum(guarantee, demand),  # the guarantee, up to the demand
        limit=limit,
        parent=parent,
        depth=depth,
        own_guarantee=own_guarantee,
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

