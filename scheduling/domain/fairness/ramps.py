"""The closed form of the deepest sibling groups: their sums, piecewise linear in their level.

Each internal node's first crossing is found by a safeguarded Newton search (tangent from below,
chord or halving when it overshoots), nested depth by depth and batched over all groups of a
depth; the events (a resource running out, a parent's limit binding) are found the same way on
``t``.
The deepest groups (leaf-like members only) are solved in closed form: between events each
member's component is constant, then a ramp, then constant, so a group's sum per resource is
piecewise linear in its level. Every group's breakpoints (shared by its resources) are sorted once
per event, with the sums and slopes there (:func:`_ramps`, rebuilt only for the groups whose
members' ends moved); a first crossing is a binary search per (group, resource)
(:func:`_ramps_crossing`) and a group's sums at a level one per group (:func:`_ramps_at`).

Invariant: ``_Ramps.V[g, k]`` is exactly the sum of group ``g``'s members at breakpoint
``P[g, k]`` (cumulative sums within the group only), and a slope is exactly zero where no ramp is
in progress; the nested search (:mod:`.hierarchy`, ``fast=False``) finds the same crossings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .depths import _Depth


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
