"""Fairness over time: decayed past use, and the weights it gives the fair-share solver (pure).

The formula and why it is this one are in docs/drf.md ("Past use"). In short:

* **Decay.** A resource-hour used ``Δt`` ago counts ``0.5 ** (Δt / H)`` of one used now (``H``
  the half-life): KAI-Scheduler's ``U = 0.5^(Δt/t½)·A`` (docs/time-based-fairshare/README.md),
  Slurm's ``PriorityDecayHalfLife``.
* **Normalised to capacity.** A team's past use of resource ``r`` is its decayed resource-hours
  over the cluster's decayed capacity-hours over the observed history,
  ``U_r = Σ 2^(-age/H)·a_h / Σ 2^(-age/H)·C_h`` (KAI's "normalization to cluster capacity":
  24 GPU-hours in 10 hours of a 10-GPU cluster is 0.24; KAI's window is here all the history
  folded). Once the history is several half-lives long the denominator is steady (``C·H/ln 2``
  at a steady capacity ``C``), so with no further use ``U_r`` halves every half-life.
* **Dominant.** As everything else in DRF, a team (a department: its whole subtree) is judged by
  its dominant resource: ``U = max_r U_r``.
* **Weights.** Within each sibling group ``S`` (the teams under one department, or the roots),
  with normalised weights ``W_i = w_i / Σ_S w`` and the group's past use ``Ū = Σ_S U_j``:
  ``m_i = clamp(1 + s·(Ū − U_i / W_i), 1 − s, 1 + s)`` and the solver's weight is ``w_i · m_i``.
  KAI's proportion plugin computes ``P_i = W_i + k·(W_i − U_i)`` (resource_division.go,
  ``calcShareWeights``) and renormalises; measured against ``W_i·Ū`` instead of ``W_i`` the sum
  ``Σ W_i·m_i`` is exactly 1 (no renormalisation, so shares move linearly with past use), and the
  clamp bounds every weight to within ``s`` of its own.

Properties (tests/scheduling/test_pastuse.py proves each): with ``s = 0`` or no past use every
``m_i = 1`` (today's allocations exactly); a team that used nothing has the largest ``m`` of its
group, so its share of the group's weight never falls below ``W_i``; only weights change, so
guarantees (floors) and limits are untouched; as past use decays to 0, ``m_i → 1``; each weight
stays within ``[1 − s, 1 + s]`` of its own, so a normalised weight stays within
``[W_i·(1−s)/(1+s), W_i·(1+s)/(1−s)]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "HOUR",
    "MAX_STRENGTH",
    "Adjustment",
    "adjust_weights",
    "combine",
    "decay",
    "dominant_past_share",
    "kernel_hours",
    "mean_amounts",
]

HOUR = 3600.0  # seconds

# A strength of 1 could zero a weight (1 − s); anything from 0 up to this is allowed.
MAX_STRENGTH = 0.9


def decay(elapsed_seconds: float, half_life_seconds: float) -> float:
    """The weight of something ``elapsed_seconds`` ago: ``0.5 ** (elapsed / half_life)``."""
    if half_life_seconds <= 0:
        raise ValueError("half_life_seconds must be positive")
    return 0.5 ** (max(0.0, elapsed_seconds) / half_life_seconds)


def kernel_hours(half_life_seconds: float) -> float:
    """``Σ_{k≥0} decay(k hours)`` in hours: what a team holding 1 unit every hour, forever,
    accumulates. Dividing a decayed sum by it gives the decayed *mean* amount."""
    q = decay(HOUR, half_life_seconds)
    return 1.0 / (1.0 - q)


def combine(
    old: Mapping[str, Mapping[str, float]],
    factor: float,
    new: Mapping[str, Mapping[str, float]],
) -> dict[str, dict[str, float]]:
    """Fold: ``old`` decayed by ``factor`` plus ``new`` (already decayed to the same moment)."""
    result: dict[str, dict[str, float]] = {}
    for key in sorted(set(old) | set(new)):
        values: dict[str, float] = {}
        for resource, value in old.get(key, {}).items():
            values[resource] = value * factor
        for resource, value in new.get(key, {}).items():
            values[resource] = values.get(resource, 0.0) + value
        result[key] = {r: v for r, v in sorted(values.items()) if v > 0}
    return {k: v for k, v in result.items() if v}


def mean_amounts(sums: Mapping[str, float], half_life_seconds: float) -> dict[str, float]:
    """Decayed resource-hours → the decayed mean amount held (base units)."""
    total = kernel_hours(half_life_seconds)
    return {r: v / total for r, v in sorted(sums.items())}


def dominant_past_share(
    usage_sums: Mapping[str, float], capacity_sums: Mapping[str, float]
) -> tuple[float, str]:
    """``max_r usage_sums[r] / capacity_sums[r]`` (resources with capacity); ties by name."""
    best, best_resource = 0.0, ""
    for resource in sorted(usage_sums):
        cap = capacity_sums.get(resource, 0.0)
        if cap > 0:
            share = usage_sums[resource] / cap
            if share > best:
                best, best_resource = share, resource
    return best, best_resource


@dataclass(frozen=True)
class Adjustment:
    """One tenant's weight before and after past use, and why."""

    name: str
    weight: float  # as configured
    past_share: float  # U_i: dominant decayed share of the capacity (subtree)
    group_share: float  # W_i: its normalised weight within its sibling group
    group_past: float  # Ū: the group's past use
    multiplier: float  # m_i
    clamped: bool

    @property
    def effective_weight(self) -> float:
        return self.weight * self.multiplier


def adjust_weights(
    tenants: Iterable[tuple[str, str | None, float]],
    past_share: Mapping[str, float],
    strength: float,
) -> dict[str, Adjustment]:
    """Per tenant ``(name, parent, weight)``: its :class:`Adjustment` (module docstring).

    ``past_share`` maps a tenant to its dominant decayed share (subtree; missing = 0).
    """
    if not 0.0 <= strength <= MAX_STRENGTH:
        raise ValueError(f"strength must be from 0 to {MAX_STRENGTH}")
    groups: dict[str | None, list[tuple[str, float]]] = {}
    for name, parent, weight in tenants:
        groups.setdefault(parent, []).append((name, float(weight)))
    result: dict[str, Adjustment] = {}
    for members in groups.values():
        total = sum(w for _, w in members)
        group_past = sum(past_share.get(name, 0.0) for name, _ in members)
        for name, weight in members:
            share = weight / total if total > 0 else 0.0
            used = past_share.get(name, 0.0)
            raw = 1.0 + strength * (group_past - used / share) if share > 0 else 1.0
            multiplier = min(1.0 + strength, max(1.0 - strength, raw))
            result[name] = Adjustment(
                name=name,
                weight=weight,
                past_share=used,
                group_share=share,
                group_past=group_past,
                multiplier=multiplier,
                clamped=multiplier != raw,
            )
    return dict(sorted(result.items()))
