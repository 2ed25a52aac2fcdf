"""The solver's vocabulary: the problem as given, the answer, and the validated problem (pure).

Vocabulary
----------
*Dominant share* of a resource vector ``x`` against a capacity ``C`` is ``max_r x[r] / C[r]`` over
the resources with ``C[r] > 0``; the resource reaching the maximum is the *dominant resource*
(ties: first by name). A tenant's *demand* ``d`` is what it would use if it could; its *dominant
demand share* is ``s = dominant_share(d, C)``.

Invariants: :class:`Tenant` and :class:`Allocation` are frozen values; a :class:`_Problem` (built
only by :func:`.validation._validate`) has its vectors indexed by the sorted resource names and its
tenants numbered in name order, so that index order breaks ties by name everywhere below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

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
