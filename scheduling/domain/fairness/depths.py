"""The hierarchy's data: the sibling groups of each depth and the tolerances of its searches.

Invariant: a :class:`_Depth` holds every sibling group of one depth, grouped, rows in name order
within a group; its leaf-like members' arrays (slopes, floors, ends, breakpoints) are in shares
of the capacity. A member frozen at an event keeps its amount as its floor (:func:`.ramps._hold`).
An internal node's *effective guarantee* is the maximum of its own guarantee and the sum of its
children's; its own guarantee beyond the children's floors is its own demand's floor (the box
never forces a member past what it can use: a parent's guarantee that no member can use is not
held for nobody).

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .model import _Problem
from .validation import _sum_by

# Relative tolerance of the root finding (a level, or an amount against its box).
_TOL = 1e-12


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
