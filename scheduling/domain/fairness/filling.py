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
