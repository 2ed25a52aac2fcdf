"""Static H-DRF: one water level for the roots, nested first crossings, events (pure).

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .depths import _BRACKET, _CLOSE, _JUMP, _TOL, _Depth, _own_floor, _under
from .leaps import _part_way
from .model import _EPS, _OWN_DEMAND_WEIGHT, _Problem
from .ramps import _hold
from .searches import _Searches
from .validation import _cut


def _tree(
    problem: _Problem, fast: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[_Depth], Any]:
    """Static H-DRF by progressive filling of the leaves; see the module docstring.

    Return the continuous allocations of every row (tenants, then implicit own-demand members) in
    shares of the capacity, their reason codes, the row -> tenant map, the depths and the
    traced final levels.
    """
    tree = _Tree(problem, fast)
    final = tree.run()
    return (
        final,
        tree.code,
        tree.event,
        tree.triggered,
        tree.depths,
        tree.unit,
        tree.n_rows,
        tree.own_rows,
        tree.leaf_like,
    )


@dataclass
class _Bracket:
    """One event's search on the water level: the state at ``t_lo`` (nothing over) and at
    ``t_hi`` (something over, or the top), and how the event was reached."""

    box: np.ndarray  # (1, R): the roots' box, inf on resources full in the cluster
    t_lo: float
    s_lo: np.ndarray  # the roots' sums at t_lo, their slopes, the trace and internal amounts
    ds_lo: np.ndarray
    snap_lo: dict[int, dict[str, np.ndarray]]
    inner_lo: tuple[np.ndarray, np.ndarray]
    t_hi: float
    open_pairs: np.ndarray  # (internal row, resource) limits not yet reached
    jumped: np.ndarray  # resources the last event's freezes leapt past the capacity
    passed: np.ndarray  # limits they leapt past
    leapt: bool  # the event is such a leap (moved part of the way, no search)
    reached: np.ndarray  # limits reached where the level stands (they bind at once)
    at_once: bool
    resolved: bool = False  # the leap was taken at the top (pinned past a limit)
    s_hi: np.ndarray | None = None
    fresh_hi: list[tuple[int, int]] | None = None
    snap_hi: dict[int, dict[str, np.ndarray]] | None = None
    leapt_pairs: list[tuple[int, int]] | None = None


class _Tree(_Searches):
    """The state of one static H-DRF run and its steps (see the module docstring).

    Rows are the tenants, then the implicit own-demand members; every amount is in shares of
    the capacity. :meth:`run` raises the water level event by event; the searches below it
    (:class:`.searches._Searches`, nested depth by depth) find each group's level for a box.
    """

    def __init__(self, problem: _Problem, fast: bool) -> None:
        self.fast = fast
        self._rows(problem)
        self._build_depths()
        self.trace: dict[int, dict[str, np.ndarray]] = {}
        # Resources full in the cluster (or of no capacity), and whether they bound the groups
        # below the roots no more (see the top of the water level, in _top).
        self.saturated = ~self.pos.copy()
        self.open_full = False
        self.triggered: set[tuple[int, int]] = set()
        # Internal rows in the order probe() lists them (depth, then place), with their limits.
        self.int_rows = np.concatenate([d.rows[d.ints] for d in self.depths])
        self.int_lim = self.limit[self.int_rows]
        self.int_index = np.full(self.n_rows, -1, dtype=np.intp)
        self.int_index[self.int_rows] = np.arange(len(self.int_rows))
        self.done_pairs = np.zeros(self.int_lim.shape, dtype=bool)
        self.n_events = 0
        self.before = None  # the state at the last event, before its freezes

    def _rows(self, problem: _Problem) -> None:
        """Every row's parent, depth, weight, root, demand, floor and limit (in shares), and
        the leaf-like rows' slopes (dominant share ``w * L`` at level ``L``), end levels,
        breakpoints and reasons at the end."""
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
        self.n_res, self.pos, self.unit = n_res, pos, unit
        self.own_rows, self.n_rows, self.leaf_like = own_rows, n_rows, leaf_like
        self.row_parent, self.row_depth, self.roots = row_parent, row_depth, (root_of, weight)
        self.weight, self.floor, self.limit = weight, floor, limit
        self.code, self.event, self.slope, self.end, self.bp = code, event, slope, end, bp

    def _build_depths(self) -> None:
        """One :class:`_Depth` per depth: its sibling groups, grouped, rows in name order."""
        row_depth, row_parent, leaf_like = self.row_depth, self.row_parent, self.leaf_like
        slope, floor, bp = self.slope, self.floor, self.bp
        weight, limit = self.weight, self.limit
        depths: list[_Depth] = []
        max_depth = int(row_depth.max())
        position = np.full(self.n_rows, -1, dtype=np.intp)  # a row's place among its internals
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
            d = _Depth(
                rows, grp, starts, n_groups, np.flatnonzero(is_leaf), np.flatnonzero(~is_leaf)
            )
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
        self.depths, self.max_depth = depths, max_depth

    # ------------------------------------------------------------ the water level, event by event

    def run(self) -> dict[int, dict[str, np.ndarray]]:
        """Raise the roots' water level from 0, event by event, until nothing is left to stop;
        return the trace of the final state (per depth: group levels, members' amounts).

        Each round: probe where the last event left the level (:meth:`_bracket`); if nothing
        leapt there, look at the top (:meth:`_top`: the end, or open the boxes of full
        resources and go round again, or a leap past a limit); a leap is moved part of the way
        (:meth:`_leap`); otherwise the level is searched (:meth:`_search`, :meth:`_nudge`);
        then the event's resources and limits (:meth:`_events`) freeze the members drawing on
        them (:meth:`_freeze`).
        """
        self.update_ends()
        t_lo = 0.0
        while True:
            br = self._bracket(t_lo)
            if not br.leapt and not br.at_once:  # is anything left to stop below the top level?
                final = self._top(br)
                if final is _AGAIN:
                    continue
                if final is not None:
                    break
            else:
                br.s_hi, br.fresh_hi = br.s_lo, []
            if br.leapt and not br.resolved:
                self._leap(br)
            if not (br.leapt or br.at_once):
                self._search(br)
                self._nudge(br)
            t_lo = br.t_lo
            events = self._events(br)
            if not events:  # nothing left to stop (round-off): keep what was reached
                final = br.snap_lo
                break
            self.before = (br.snap_lo, br.s_lo)
            self._freeze(events, br.snap_lo)
            self.update_ends()
        for level, values in final.items():  # the leaves' amounts where the sums came from ramps
            if values.get("x") is None and level in final:
                d = self.depths[level]
                at = values["at"]
                values["x"] = np.maximum(d.g, d.a * np.minimum(at, d.end)[:, None])
        return final

    def probe(self, t: float):
        """Everything at level ``t``: the roots' sums and their slopes, the limit pairs
        (internal row, resource) that bind and not yet handled, the trace, and the
        internal rows' amounts, slopes and limits (for the search of their limits)."""
        trace, depths, triggered, n_res = self.trace, self.depths, self.triggered, self.n_res
        trace.clear()
        x, dx, _ = self.evaluate(0, np.array([t]), True)
        s, ds = self.sums_of(0, x, dx)
        fresh = []
        speed = np.ones(1)  # d(group level)/dt, per group of the depth
        amounts, slopes = [], []
        for level in range(self.max_depth + 1):
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

    def _bracket(self, t_lo: float) -> _Bracket:
        """Probe the water level where the last event left it; say whether the event's
        freezes made something leap there, or a limit is already reached there."""
        saturated, int_lim, tol = self.saturated, self.int_lim, _TOL
        top = self.depths[0]
        box = np.where(saturated, np.inf, np.ones((1, self.n_res)))
        t_hi = float(top.mu_max[0]) if len(top.rows) else 0.0
        s_lo, ds_lo, _, snap_lo, inner_lo = self.probe(t_lo)
        open_pairs = np.isfinite(int_lim) & ~self.done_pairs
        # The last event's freezes can make a group's level leap at t_lo itself (the resources
        # that bounded it stopped growing), past the capacity of a resource: the leaves then
        # move part of the way from where they stood before the event, and stop there.
        jumped = (s_lo > box[0] + tol) & ~saturated
        # Or past the limit of an internal member (whose box holds its group's sums only at the
        # group's own level, which cannot fall back where the leap went over).
        passed = open_pairs & (inner_lo[0] > int_lim * (1.0 + tol) + 1e-300)
        leapt = bool(jumped.any() or passed.any()) and self.before is not None
        # An internal member's limit already reached where the level stands (a child's floor
        # equal to its ancestor's limit, a limit of 0) binds at once: nothing rises into it,
        # so neither the search nor the crossing test below would see it.
        reached = (
            open_pairs & (int_lim - inner_lo[0] <= tol * int_lim + 1e-300)
            if not leapt
            else np.zeros_like(open_pairs)
        )
        return _Bracket(
            box,
            t_lo,
            s_lo,
            ds_lo,
            snap_lo,
            inner_lo,
            t_hi,
            open_pairs,
            jumped,
            passed,
            leapt,
            reached,
            bool(reached.any()),
        )

    def _top(self, br: _Bracket):
        """Probe the top of the water level. Return the final trace if nothing is left to
        stop below it, :data:`_AGAIN` if opening the boxes of full resources moved something
        (the round starts again), else ``None`` (``br`` then holds the top, or the leap past
        a limit taken there)."""
        tol, box = _TOL, br.box
        s_hi, _, fresh_hi, snap_top, _ = self.probe(br.t_hi)
        br.s_hi, br.fresh_hi = s_hi, fresh_hi
        if not ((s_hi > box[0] + tol).any() or fresh_hi):
            leap = self.pinned_past_limit(snap_top, s_hi)
            if leap is None and not self.open_full and (self.saturated & self.pos).any():
                # Where the water level can rise no more, a group may still wait for its
                # box to pass what it holds of a resource full in the cluster, which no
                # member grows on any more (a team then short while its department's
                # limit and the resource it wants leave room). H-DRF ignores such
                # resources: their boxes open, and if that moves anything, the filling
                # goes on from the last event (the leap as at an event).
                self.open_full = True
                s_open, _, fresh_open, _, _ = self.probe(br.t_hi)
                if fresh_open or (np.abs(s_open - s_hi) > tol).any():
                    return _AGAIN
            if leap is None:
                return snap_top
            # A group pinned below a jump whose box cannot grow past its parent's limit:
            # the leap is taken part of the way, to the limit (as a leap at an event).
            br.t_lo = br.t_hi
            br.snap_lo, br.s_lo, br.jumped, br.leapt_pairs = leap
            br.leapt = br.resolved = True
        br.snap_hi = snap_top
        return None

    def _leap(self, br: _Bracket) -> None:
        """The last event's freezes made the sums leap past a capacity or a limit at ``t_lo``:
        move the leaves part of the way from where they stood before the event."""
        depths, int_rows, int_lim = self.depths, self.int_rows, self.int_lim
        limits = []
        for i, r in zip(*np.nonzero(br.passed), strict=True):
            owner = int(int_rows[i])
            under = {
                lv: _under(depths[lv].rows[depths[lv].leaf], owner, self.row_parent)
                for lv in range(self.max_depth + 1)
                if len(depths[lv].leaf)
            }
            limits.append((owner, int(r), float(int_lim[i, r]), under))
        before = self.before
        br.snap_lo, br.s_lo, br.jumped, br.leapt_pairs = _part_way(
            depths, before[0], br.snap_lo, br.jumped, before[1], br.s_lo, self.roots, limits
        )

    def _search(self, br: _Bracket) -> None:
        """Narrow ``[t_lo, t_hi]`` to the next event: the level where a resource the roots
        grow on fills, or an internal member's limit is reached (safeguarded Newton: tangents,
        bisection on the levels where pinned roots leap, chords, halving)."""
        box, tol, open_pairs, int_lim = br.box, _TOL, br.open_pairs, self.int_lim
        t_lo, s_lo, ds_lo, snap_lo, inner_lo = br.t_lo, br.s_lo, br.ds_lo, br.snap_lo, br.inner_lo
        t_hi, s_hi, fresh_hi, snap_hi = br.t_hi, br.s_hi, br.fresh_hi, br.snap_hi
        streak = 0
        leaps = np.zeros(0)  # the levels where pinned roots leap
        slow = 0  # accepted steps in a row that closed less than half the gap
        for _ in range(200):
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
            leaps = self.unpin_levels(snap_lo)
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
            s_c, ds_c, fresh_c, snap_c, inner_c = self.probe(cand)
            streak = streak + 1 if ((s_c > box[0] + tol).any() or fresh_c) else 0
            if (s_c > box[0] + tol).any() or fresh_c:
                t_hi, s_hi, fresh_hi, snap_hi = cand, s_c, fresh_c, snap_c
            else:
                before_gap = np.where(rising, gap, np.inf).min()
                t_lo, s_lo, ds_lo, snap_lo, inner_lo = cand, s_c, ds_c, snap_c, inner_c
                after_gap = np.where(rising, box[0] - s_lo, np.inf).min()
                slow = slow + 1 if tangent and after_gap > 0.5 * before_gap else 0
                self.warm(snap_lo)
        br.t_lo, br.s_lo, br.ds_lo, br.snap_lo, br.inner_lo = t_lo, s_lo, ds_lo, snap_lo, inner_lo
        br.t_hi, br.s_hi, br.fresh_hi, br.snap_hi = t_hi, s_hi, fresh_hi, snap_hi

    def _nudge(self, br: _Bracket) -> None:
        """Where a resource stops a few ulps short of full at ``t_lo``, step onto it if that
        stays within the capacity (the event's resources are then the full ones)."""
        box = br.box
        t_lo, t_hi, s_lo, ds_lo = br.t_lo, br.t_hi, br.s_lo, br.ds_lo
        # Events at t_lo: resources running out, or limits of internal members binding.
        gap = box[0] - s_lo
        rising = ds_lo > 0.0
        if (rising & (gap > 0.0) & (gap <= _CLOSE)).any():
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(rising, gap / np.where(rising, ds_lo, 1.0), np.inf).min()
            for cand in (t_lo + step, np.nextafter(t_lo, np.inf)):
                if not t_lo < cand < t_hi:
                    continue
                s_c, ds_c, fresh_c, snap_c, inner_c = self.probe(cand)
                if (s_c <= box[0]).all() and not fresh_c:
                    br.t_lo, br.s_lo, br.ds_lo, br.snap_lo, br.inner_lo = (
                        cand,
                        s_c,
                        ds_c,
                        snap_c,
                        inner_c,
                    )
                    break

    def _events(self, br: _Bracket) -> list[tuple[int, int]]:
        """The event at ``t_lo``: ``(-1, r)`` for each resource that runs out, ``(owner, r)``
        for each internal member's limit that binds (sorted). Where the bracket closed with
        nothing found at ``t_lo``, what crossed at its top: moved part of the way there."""
        box, tol, saturated, int_lim = br.box, _TOL, self.saturated, self.int_lim
        s_lo, ds_lo, s_hi, snap_hi = br.s_lo, br.ds_lo, br.s_hi, br.snap_hi
        gap = box[0] - s_lo
        self.n_events += 1
        out = (ds_lo > 0.0) & (gap <= tol) & ~saturated
        x_in, dx_in = br.inner_lo
        near = br.open_pairs & (dx_in > 0.0) & (int_lim - x_in <= tol * int_lim + 1e-300)
        near |= br.reached
        pairs = [(int(self.int_rows[i]), int(r)) for i, r in zip(*np.nonzero(near), strict=True)]
        if br.leapt:
            out, pairs = br.jumped, br.leapt_pairs
        elif not out.any() and not pairs:  # the bracket closed: what crossed at its top
            out = (s_hi > box[0] + tol) & ~saturated
            pairs = br.fresh_hi
            if out.any() and snap_hi is not None:
                # Leaps within _EPS of the same level are one catch-up (a tie found a few ulps
                # apart): the way's end is taken that much above the bracket's top.
                lift = br.t_hi * (1.0 + _EPS)
                if lift < float(self.depths[0].mu_max[0]):
                    s_up, _, fresh_up, snap_up, _ = self.probe(lift)
                    if not fresh_up:
                        s_hi, snap_hi = s_up, snap_up
                        out = (s_hi > box[0] + tol) & ~saturated
                br.snap_lo, br.s_lo, out, _ = _part_way(
                    self.depths, br.snap_lo, snap_hi, out, s_lo, s_hi, self.roots
                )
            elif pairs and snap_hi is not None:
                # A limit that binds only at the top: the members below it leapt there (a
                # resource bounding their group stopped growing) up to the limit, inside the
                # capacity. They stop where they stand at the top, at the limit, not below it.
                br.snap_lo, br.s_lo = snap_hi, s_hi
        events = [(-1, r) for r in np.flatnonzero(out).tolist()]
        events += sorted(set(pairs))
        return events

    def _freeze(self, events: list[tuple[int, int]], snap_lo: dict[int, dict[str, np.ndarray]]):
        """Apply the event's freezes at the levels of ``snap_lo``: the members drawing on what
        ran out (or below a limit that binds) stop where they stand; those held up on it by
        their floor end at their breakpoint for it."""
        depths, end, code, event = self.depths, self.end, self.code, self.event
        n_events, row_parent = self.n_events, self.row_parent
        for owner, r in events:
            if owner < 0:
                self.saturated[r] = True
            else:
                self.triggered.add((owner, r))
                self.done_pairs[self.int_index[owner], r] = True
            for level in range(self.max_depth + 1):
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

    def unpin_levels(self, snap: dict[int, dict[str, np.ndarray]]) -> np.ndarray:
        """The water levels (sorted) at which the roots pinned at a jump (see
        :meth:`first_crossing`) have the box that their sums just past the jump need: where
        they leap."""
        depths = self.depths
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

    def warm(self, snap: dict[int, dict[str, np.ndarray]]) -> None:
        """Start later searches from the group levels of ``snap`` (levels only ever rise)."""
        depths = self.depths
        for level, values in snap.items():
            if "lo" in values:
                depths[level].mu_lo = values["lo"]

    def pinned_past_limit(self, snap: dict[int, dict[str, np.ndarray]], s_top: np.ndarray):
        """Where the water level can rise no more: the groups pinned below a jump (see
        :meth:`first_crossing`) whose sums just past it pass a limit of their parent not yet
        reached. A parent's box stops at its limit, so the box never passes those sums and the group
        would wait there for ever, its members short. Return :func:`_part_way` from ``snap``
        towards the state where the shallowest such groups stand just past their jumps, with
        those limits; ``None`` if there are none."""
        depths, max_depth, trace, saturated = (
            self.depths,
            self.max_depth,
            self.trace,
            self.saturated,
        )
        limit, row_parent, roots = self.limit, self.row_parent, self.roots
        done_pairs, int_index = self.done_pairs, self.int_index
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
            self.evaluate(level, mu, True)
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


# What _Tree._top returns when opening the boxes of full resources moved something.
_AGAIN: Any = object()
