"""Rounding of integral resources by largest remainder (pure).

Integral resources
------------------
Resources named in ``integral`` (``nvidia.com/gpu``) are rounded per group, top-down: every
member gets ``floor(x)``, then the ``floor(sum x)`` total (at most the capacity; for a group
below a parent, the parent's rounded amount) is reached by giving one more unit to the largest
remainders, ties by name, never above a member's demand or limit (rounded down); a parent whose
children cannot reach its rounded amount gets their sum. Other resources are left as filled.


Invariant: a group's rounded total never exceeds its (rounded) capacity, no member is rounded
above its target (demand cut down to its limit), and ties break by row order (names).
"""

from __future__ import annotations

import numpy as np

from .filling import _segments
from .model import _EPS


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
