"""The nested searches of H-DRF: each sibling group's level for its box, depth by depth (pure).

Each internal node's first crossing (the highest level of its children's group at which their
sums stay inside its box on every resource one of them still grows on) is found by a
safeguarded Newton search (tangent from below, chord or halving when it overshoots), nested
depth by depth and batched over all groups of a depth (:meth:`_Searches.first_crossing`). A
depth of leaf-like members only has its crossings in closed form instead (:mod:`.ramps`,
:meth:`_Searches.closed`); setting ``_VERIFY`` checks every such crossing against the search's.
A search's probes evaluate only the groups still moving (:meth:`_Searches.sub_sums`).

Invariant: a group's level never falls (searches start from the last level known, ``mu_lo``),
and it is the highest level within its box (to ``_TOL``) unless the group is *stuck* over its
box where the search starts, or *pinned* just below a jump (then recorded for the water level).
"""

from __future__ import annotations

import numpy as np

from .depths import _BRACKET, _CLOSE, _OPEN, _PINNED, _TOL
from .model import _EPS
from .ramps import _ramps, _ramps_at, _ramps_crossing

# Tests set this to compare every closed-form crossing with the nested search's (at that
# relative tolerance).
_VERIFY = False


_VERIFY_REL = 1e-9


class _Searches:
    """The searches of :class:`.hierarchy._Tree` below the roots (a mixin: the state is the
    tree's; see there)."""

    def update_ends(self) -> None:
        """Each row's level beyond which it stops growing, bottom-up (after freezes)."""
        depths, end, n_res, pos, fast = self.depths, self.end, self.n_res, self.pos, self.fast
        max_depth = self.max_depth
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

    def evaluate(self, level: int, mu: np.ndarray, record: bool):
        """Members of ``level`` at group levels ``mu``: amounts and right derivatives."""
        depths, n_res, trace, saturated = self.depths, self.n_res, self.trace, self.saturated
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
            if self.open_full:
                box[:, saturated] = _OPEN
            dbox = np.where((wl >= d.g_int) & (wl < d.lim_int), d.w_int[:, None], 0.0)
            sums, dsums, star, dstar = self.first_crossing(level + 1, box, record)
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

    def sums_of(self, level: int, x: np.ndarray, dx: np.ndarray):
        depths, n_res = self.depths, self.n_res
        d = depths[level]
        if len(d.rows) == 0:
            z = np.zeros((d.n_groups, n_res))
            return z, z
        return np.add.reduceat(x, d.starts, axis=0), np.add.reduceat(dx, d.starts, axis=0)

    def sub_sums(self, level: int, mu: np.ndarray, groups: np.ndarray):
        """The sums and right derivatives of groups ``groups`` (ascending) of ``level`` at
        levels ``mu`` (one per listed group): :meth:`evaluate` and :meth:`sums_of` on those
        groups alone, with the same arithmetic per group (a search's probes move few groups)."""
        depths, n_res, saturated = self.depths, self.n_res, self.saturated
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
            if self.open_full:
                box[:, saturated] = _OPEN
            dbox = np.where((wl >= g) & (wl < lim), w[:, None], 0.0)
            sums, dsums, star, dstar = self.first_crossing(level + 1, box, False, ii)
            rows = np.arange(len(ii))
            with np.errstate(divide="ignore", invalid="ignore"):
                dmu = np.where(star >= 0, dbox[rows, star] / dstar, 0.0)
            x[inner] = sums
            dx[inner] = dsums * dmu[:, None]
        return np.add.reduceat(x, first, axis=0), np.add.reduceat(dx, first, axis=0)

    def all_sums(self, level: int, mu: np.ndarray):
        """``sums_of(evaluate(level, mu))`` unrecorded, kept per event by the levels."""
        depths = self.depths
        d = depths[level]
        if d.ramps is not None:
            return _ramps_at(d.ramps, mu)
        key = mu.tobytes()
        got = d.cache.get(key)
        if got is None:
            x, dx, _ = self.evaluate(level, mu, False)
            got = self.sums_of(level, x, dx)
            if len(d.cache) >= 8:
                d.cache.pop(next(iter(d.cache)))
            d.cache[key] = got
        return got[0].copy(), got[1].copy()

    def next_start(self, level: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per group: the lowest level above ``lo`` at which a leaf-like member's component
        leaves its floor (midway to ``hi`` if there is none, or an internal member may)."""
        depths = self.depths
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

    def first_crossing(
        self, level: int, box: np.ndarray, record: bool, groups: np.ndarray | None = None
    ):
        """First level of every group of ``level`` at which its sum reaches its box (of the
        groups ``groups`` alone, ascending, when given; never recorded then).

        Return the groups' sums and right derivatives there, the resource that bounds each
        (``-1``: none, pinned or capped) and the derivative of that sum. A depth of leaf-like
        members has it in closed form (:meth:`closed`); otherwise a safeguarded Newton search
        per group (:meth:`_narrow`), started at the last level known (levels only ever rise).
        """
        depths, trace = self.depths, self.trace
        d = depths[level]
        if record:
            trace.setdefault(level, {})
        tol = _TOL * box + 1e-300
        if d.ramps is not None:
            got = self.closed(level, box, tol, record, groups)
            if _VERIFY:  # differential check against the search at the same inputs
                keep, d.ramps = d.ramps, None
                want = self.first_crossing(level, box, False, groups)
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
            s_hi = self.all_sums(level, hi)[0]
            mu_lo = d.mu_lo
        else:
            hi = d.mu_max[groups]
            full = d.cache.get(d.mu_max.tobytes())
            s_hi = full[0][groups] if full is not None else self.sub_sums(level, hi, groups)[0]
            mu_lo = d.mu_lo[groups]
        active = (s_hi > box + tol).any(axis=1)
        lo = np.where(active, np.minimum(mu_lo, hi), hi)
        if groups is None:
            s_lo, ds_lo = self.all_sums(level, lo)
        else:
            s_lo, ds_lo = self.sub_sums(level, lo, groups)
        # Over its box already where it starts (on a resource its members no longer grow on):
        # it cannot rise until the box passes those sums, and leaps there.
        stuck = active & (s_lo > box + tol).any(axis=1)
        active &= ~stuck
        lo, hi = self._narrow(level, box, tol, groups, active, lo, hi, s_lo, ds_lo, s_hi)
        return self._settle(level, box, tol, record, top, stuck, lo, hi, s_lo, ds_lo, s_hi)

    def _narrow(
        self,
        level: int,
        box: np.ndarray,
        tol: np.ndarray,
        groups: np.ndarray | None,
        active: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        s_lo: np.ndarray,
        ds_lo: np.ndarray,
        s_hi: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Narrow every active group's bracket ``[lo, hi]`` on its first crossing (tangent
        from below, chord or halving where it overshoots, the next breakpoint where nothing
        rises); the sums at both ends are updated in place. Return the new ``lo, hi``."""
        d = self.depths[level]
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
                    ahead = self.next_start(level, lo, hi)
                else:
                    lo_all, hi_all = np.zeros(d.n_groups), np.zeros(d.n_groups)
                    lo_all[groups], hi_all[groups] = lo, hi
                    ahead = self.next_start(level, lo_all, hi_all)[groups]
                cand = np.where(idle, ahead, cand)
                by_chord = by_chord & ~idle
            cand = np.where(active, np.maximum(cand, lo), lo)
            moving = np.flatnonzero(active)
            s_c, ds_c = s_lo.copy(), ds_lo.copy()  # only the active groups' rows are read
            s_c[moving], ds_c[moving] = self.sub_sums(
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
        return lo, hi

    def _settle(
        self,
        level: int,
        box: np.ndarray,
        tol: np.ndarray,
        record: bool,
        top: np.ndarray,
        stuck: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        s_lo: np.ndarray,
        ds_lo: np.ndarray,
        s_hi: np.ndarray,
    ):
        """The result of :meth:`first_crossing` where its search stopped at ``lo``: the
        bounding resource of each group, or none where it is capped, has nothing rising, or is
        pinned below a jump (recorded, with the sums just past it, for the water level)."""
        trace = self.trace
        # The sums where the search last went over (just past a jump, if pinned), or those it
        # stands at when stuck.
        above = np.where(stuck[:, None], s_lo, s_hi)
        if record:  # (unrecorded, the sums at lo are those of the last probe that stayed)
            x, dx, _ = self.evaluate(level, lo, record)
            s_lo, ds_lo = self.sums_of(level, x, dx)
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
        self, level: int, box: np.ndarray, tol: np.ndarray, record: bool, groups: np.ndarray | None
    ):
        """:meth:`first_crossing` for a depth of leaf-like members: the crossing in closed form."""
        depths, trace = self.depths, self.trace
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
            s_lo, ds_lo = self.all_sums(level, lo)
        else:
            s_lo, ds_lo = self.sub_sums(level, lo, groups)
        gap = box - s_lo
        rising = ds_lo > 0.0
        capped = lo >= hi
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(rising, gap / np.maximum(box, 1e-300), np.inf)
        star = np.where(capped | ~rising.any(axis=1), -1, score.argmin(axis=1))
        dstar = ds_lo[np.arange(len(lo)), np.maximum(star, 0)]
        return s_lo, ds_lo, star, dstar
