"""Flat progressive filling: sibling groups, each against its own capacity vector (pure).

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

Invariant: no member gets more than its target (demand cut down to its limit) or less than its
floor, and no group's exact sum of a non-integral resource exceeds its capacity (:func:`_clamp`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import _EPS


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
    1. Count floors as consumption (scaled down to fit if a rounded parent allocation is
       smaller than its children's floors, which only a fractional guarantee on an integral
       resource can cause). Members needing a zero-capacity resource are saturated at once;
       members demanding nothing are demand-met at once (:func:`_prepare`).
    2. For every other member compute its slopes ``w * d[r] / s``, its end level (demand or
       limit met) and the breakpoints of components held up by the floor (:func:`_prepare`).
    3. In rounds, until no member grows: consumption of each resource is piecewise linear in the
       water level (every growing component is a ramp from its breakpoint to its end level), so
       sorting the ramps' ends and starts and summing them cumulatively gives, for every group
       and resource, the exact level at which it runs out (:func:`_round_events`,
       :func:`_saturation`). Members whose end level comes first (or within the relative
       tolerance) freeze at it; at the lowest saturation level of their group, the members
       drawing on a saturated resource freeze, and members still held up on it by their floor
       end at their breakpoint for it (:func:`_freeze_round`). Every round either saturates one
       more resource in each group still growing, or lets all of its members reach their end.
    4. Clamp round-off overshoot above the capacity (except on integral resources, whose
       rounding keeps them within it: :func:`_clamp`).

    Consumption is measured in shares of each group's capacity while filling (every group's sums
    are of the same magnitude, so one cumulative sum serves all groups); amounts are evaluated
    per member at the level where it froze.
    """
    n_res = cap.shape[1]
    m = len(group)
    if m == 0 or n_res == 0:
        return np.zeros((m, n_res)), np.zeros(m, dtype=np.intp), demand
    f = _prepare(cap, group, starts, demand, weight, floor, limit)
    alive = np.flatnonzero(f.growing)
    # By group, then end level: the events of every round come nearly sorted (a member's end
    # only ever moves earlier, for members held up by a floor).
    alive = alive[np.lexsort((f.end[alive], group[alive]))]
    a = f.slope_n[alive]
    b = f.breakpoint[alive] if f.floors_held else None
    while len(alive):
        rd = _round_events(f, alive, a, b)
        sat, low = _saturation(f, rd)
        still = _freeze_round(f, alive, a, b, rd, sat, low)
        alive, a = alive[still], a[still]
        if b is not None:
            b = b[still]
    # Members that never grew keep their floor (their slopes are 0).
    alloc = np.maximum(
        f.floor, np.where(f.at_target[:, None], f.targets, f.slope * f.stop[:, None])
    )
    # Integral resources are rounded next, never above the capacity: only the others are clamped.
    _clamp(cap, starts, f.floor, alloc, [r for r in range(n_res) if r not in integral])
    return alloc, f.code, f.targets


@dataclass
class _Filling:
    """The state of one :func:`_fill`: per member (row, grouped) and per group.

    Members' arrays are ``(m,)`` or ``(m, R)``; groups' are ``(G,)`` or ``(G, R)``.
    """

    group: np.ndarray  # each member's group
    floor: np.ndarray  # the guarantee up to the demand (scaled down to fit the group's capacity)
    slope: np.ndarray  # w * d[r] / s: growth of resource r per unit of water level
    slope_n: np.ndarray  # the slope in shares of the group's capacity
    end: np.ndarray  # the level where the member stops: its target, or a breakpoint
    end_code: np.ndarray  # the reason code at ``end``
    targets: np.ndarray  # the demand cut down to the limit along the demand vector
    breakpoint: np.ndarray  # where a component held up by the floor starts to grow
    growing: np.ndarray  # members that grow at all
    floors_held: bool  # whether any component is held up by a floor (else every ramp starts at 0)
    unit: np.ndarray  # each group's capacity, 1 where it is 0
    code: np.ndarray  # reason codes: 0 demand-met, 1 limit, 2 + r saturated on r
    consumed: np.ndarray  # per group: the floors, then the frozen members' amounts above them
    at_target: np.ndarray  # frozen at the target (demand or limit met)
    stop: np.ndarray  # freezing level of the other frozen members
    now: np.ndarray  # the water level of each group
    saturated: np.ndarray  # per group and resource: run out

    def freeze(self, ids: np.ndarray, levels: np.ndarray | None) -> None:
        """Freeze members ``ids`` (grouped): at their target, or at ``levels``."""
        floor = self.floor
        if levels is None:
            self.at_target[ids] = True
            amounts = np.maximum(floor[ids], self.targets[ids])
        else:
            self.stop[ids] = levels
            amounts = np.maximum(floor[ids], self.slope[ids] * levels[:, None])
        by = self.group[ids]
        seg = _segments(by)
        self.consumed[by[seg]] += np.add.reduceat(amounts - floor[ids], seg, axis=0)


def _prepare(
    cap: np.ndarray,
    group: np.ndarray,
    starts: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    limit: np.ndarray,
) -> _Filling:
    """Steps 1 and 2 of :func:`_fill`: floors as consumption, members blocked at once, and each
    growing member's slopes, end level (and reason there), target and breakpoints."""
    n_groups, n_res = cap.shape
    m = len(group)
    code = np.zeros(m, dtype=np.intp)
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
    return _Filling(
        group=group,
        floor=floor,
        slope=slope,
        slope_n=slope / unit[group],
        end=end,
        end_code=end_code,
        targets=targets,
        breakpoint=breakpoint,
        growing=growing,
        floors_held=bool(held.any()),
        unit=unit,
        code=code,
        consumed=np.add.reduceat(floor, starts, axis=0),
        at_target=np.zeros(m, dtype=bool),
        stop=np.zeros(m),
        now=np.zeros(n_groups),
        saturated=np.zeros((n_groups, n_res), dtype=bool),
    )


@dataclass
class _Round:
    """One round of :func:`_fill`: the members still growing (``alive``), by group, and the
    piecewise linear consumption of every active group after each of its events."""

    g: np.ndarray  # each alive member's group
    active_groups: np.ndarray  # the groups with a member alive, ascending
    counts: np.ndarray  # alive members per active group
    e: np.ndarray  # each alive member's end level
    p_row: np.ndarray  # pending starts (a component still held up by its floor): member
    p_res: np.ndarray  # ... and resource
    ev_level: np.ndarray  # the events' levels, sorted within each group
    next_level: np.ndarray  # the next event's level in the group (inf after its last)
    first: np.ndarray  # each active group's first event (its start row)
    slope_after: np.ndarray  # (events, R): slope of consumption right after each event
    const_after: np.ndarray  # (events, R): constant of consumption right after each event


def _round_events(f: _Filling, alive: np.ndarray, a: np.ndarray, b: np.ndarray | None) -> _Round:
    """Sort one round's events (each group's level, the members' ends, the pending starts) and
    sum them into each group's consumption, ``const + slope * L``, after every event.

    ``a`` and ``b`` are the alive members' slopes (in shares) and breakpoints (``None``: no
    floors hold anything up).

    Somewhat over 80 lines on purpose: it is one vectorised pass whose sorted event arrays feed
    each other (order, cumulative slopes, per-group offsets); split, the parts would pass the
    same half-dozen arrays back and forth and the order of the sums would be harder to see.
    """
    n_res = a.shape[1]
    now = f.now
    g = f.group[alive]
    seg = _segments(g)
    active_groups = g[seg]
    counts = np.diff(np.append(seg, len(alive)))
    e = f.end[alive]
    # Consumption at level L >= now: const + sum of a * (clip(L, b, e) - b) over ramps.
    const = f.consumed[active_groups] / f.unit[active_groups]
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
    return _Round(
        g,
        active_groups,
        counts,
        e,
        p_row,
        p_res,
        ev_level,
        next_level,
        first,
        slope_after,
        const_after,
    )


def _saturation(f: _Filling, rd: _Round) -> tuple[np.ndarray, np.ndarray]:
    """Per active group and resource, the level at which the resource runs out in this round
    (``inf``: not in this round, or run out before); and per group the lowest of them."""
    slope_after, const_after, ev_level, next_level = (
        rd.slope_after,
        rd.const_after,
        rd.ev_level,
        rd.next_level,
    )
    n_ev, n_res = slope_after.shape
    with np.errstate(invalid="ignore", over="ignore"):
        used_next = const_after + slope_after * next_level[:, None]
    crossed = (slope_after > 0.0) & (used_next >= 1.0)
    where = np.where(crossed, np.arange(n_ev)[:, None], n_ev)
    hit_row = np.minimum.reduceat(where, rd.first, axis=0)  # (n_g, R): first crossing
    found = (hit_row < n_ev) & ~f.saturated[rd.active_groups]
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
    return sat, sat.min(axis=1)


def _freeze_round(
    f: _Filling,
    alive: np.ndarray,
    a: np.ndarray,
    b: np.ndarray | None,
    rd: _Round,
    sat: np.ndarray,
    low: np.ndarray,
) -> np.ndarray:
    """Freeze this round's members: those whose end comes first (or within the relative
    tolerance), then at each group's saturation level those drawing on what ran out (members
    held up on it by their floor end at their breakpoint for it instead). Move each group's
    water level there; return which of ``alive`` still grow."""
    code, end, end_code, now = f.code, f.end, f.end_code, f.now
    g, active_groups, counts, e = rd.g, rd.active_groups, rd.counts, rd.e
    p_row, p_res = rd.p_row, rd.p_res
    tolerance = 1.0 + _EPS
    bound = low * tolerance  # events up to here come first (or at the same level)

    # Members reaching their end level first.
    member_bound = np.repeat(bound, counts)
    done = e <= member_bound
    last = now[active_groups].copy()
    if done.any():
        ids = alive[done]
        met = end_code[ids] < 2
        f.freeze(ids[met], None)
        f.freeze(ids[~met], e[done][~met])
        code[ids] = end_code[ids]
        np.maximum.at(last, np.searchsorted(active_groups, g[done]), e[done])
    if len(p_row):
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
    running_out &= ~f.saturated[active_groups]
    f.saturated[active_groups] |= running_out
    for r in np.flatnonzero(running_out.any(axis=0)).tolist():
        on = still & np.repeat(running_out[:, r], counts) & (a[:, r] > 0.0)
        if not on.any():
            continue
        drawing = on if b is None else on & (b[:, r] <= member_bound)
        if drawing.any():
            ids = alive[drawing]
            f.freeze(ids, member_level[drawing])
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
    return still


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
