"""Leaps: moving the leaves part of the way where a group's sums jump past a capacity or limit.

Where a member's level jumps (the resources that bounded its group stopped growing), the
consumption of a resource can leap past the capacity, or past an ancestor's limit, between two
neighbouring levels. The leaves then move part of the way, by the fraction at which the first
resource fills or the first limit is reached: exact from the leaves' sorted ramps along the move
(:func:`_first_fill`; halving as the fallback). Roots that leap at once *catch up by weight*
(:func:`_part_way`, regula falsi in :func:`_rise_to_zero`).

Invariant: the state returned lies on the way between the two states given, at a fraction
where nothing of ``out`` is over its capacity and no listed limit is passed (to the
tolerances), and it names what fills (or is reached) just above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .depths import _TOL, _Depth
from .model import _EPS


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

    Why one function of about 200 lines: both ways of moving (the catch-up by weight of several
    roots, and the plain fraction) work on the same gathered arrays of the moving leaves and on
    four closures over them (``amounts``, ``passed``, ``excess``, ``over``) that the regula
    falsi and the halving probe again and again; apart, that state would be threaded through
    every probe. The gathering, the catch-up and the plain fraction are its three parts.
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
