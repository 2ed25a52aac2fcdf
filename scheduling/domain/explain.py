""" "Why is my share X": a fair allocation as named parts that add up to it exactly (pure).

For each team and resource, in this order (docs/drf.md "Why is my share X"):

1. ``guarantee`` — its guarantee (a department's: the larger of its own and its teams'), up to
   what it was given;
2. ``weighted-share`` — its weight's part (``w / Σ siblings' w``) of what its level has beyond
   everyone's guarantees: the cluster for a top-level team, its department's allocation for a
   team in a department;
3. ``department-keeps`` — (teams in a department) the same weight's part of what the department
   keeps for its own workloads, taken off;
4. ``capped`` — what its demand (running + waiting) or its limit does not let it take of the
   above, taken off;
5. ``passed-on`` — the rest of its allocation without past use: what other teams did not need,
   passed on by weight (positive), or what DRF held back to even out dominant shares across
   resources (negative);
6. ``past-use`` — the change that fairness over time made (only when it is on).

Parts 1–4 are computed from the inputs, part 5 is the difference that makes the parts add up to
the solver's allocation (so the sum is exact by construction, and a property test checks that
the parts also have the meaning their names say in the cases where one can tell: a team whose
demand is met has no negative ``passed-on``; a capped team gets exactly its ceiling). Amounts are
Decimals, quantised per resource (hundredths of a GPU, thousandths of a core, whole bytes)
before the difference is taken, so what is shown adds up as shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

__all__ = ["PARTS", "Part", "TeamFacts", "explain"]

Amounts = dict[str, Decimal]

PARTS = ("guarantee", "weighted-share", "department-keeps", "capped", "passed-on", "past-use")

_ZERO = Decimal(0)


@dataclass(frozen=True)
class Part:
    name: str  # one of PARTS
    amounts: Amounts  # per resource (only non-zero ones)


@dataclass(frozen=True)
class TeamFacts:
    """What the explanation of one team needs (amounts exact, base units; subtree totals)."""

    allocation: Amounts  # the fair allocation as published
    plain: Amounts  # the allocation without past use (== allocation when it is off)
    guarantee: Amounts  # effective guarantee (scaled as the solver saw it)
    ceiling: Mapping[str, Decimal | None]  # min(demand, limit); None: no ceiling
    weight: float  # configured
    siblings_weight: float  # Σ configured weights of its sibling group (itself included)
    pool: Amounts  # its level's total: the capacity, or its department's plain allocation
    siblings_guarantee: Amounts  # Σ of its siblings' guarantee parts (itself included)
    parent_keeps: Amounts  # its department's own part (nothing for a top-level team)


def _quantum(resource: str) -> Decimal:
    if "/" in resource:  # extended (integral) resources: whole devices, shown to 1/100
        return Decimal("0.01")
    if resource in ("memory", "ephemeral-storage") or resource.endswith("-storage"):
        return Decimal(1)
    return Decimal("0.001")


def _q(value: Decimal, resource: str) -> Decimal:
    amount = value.quantize(_quantum(resource), rounding=ROUND_HALF_EVEN)
    return amount if amount else _ZERO


def explain(facts: TeamFacts) -> list[Part]:
    """The parts (module docstring) in order; those that are zero for every resource left out.

    ``Σ parts[r] == facts.allocation[r]`` exactly for every resource of the allocation."""
    share = (
        Decimal(repr(facts.weight)) / Decimal(repr(facts.siblings_weight))
        if facts.siblings_weight > 0
        else _ZERO
    )
    resources = sorted(facts.allocation)
    parts: dict[str, Amounts] = {name: {} for name in PARTS}
    for r in resources:
        plain = facts.plain.get(r, _ZERO)
        guarantee = _q(min(facts.guarantee.get(r, _ZERO), plain), r)
        beyond = facts.pool.get(r, _ZERO) - facts.siblings_guarantee.get(r, _ZERO)
        weighted = _q(share * max(beyond, _ZERO), r)
        keeps = -_q(share * facts.parent_keeps.get(r, _ZERO), r)
        so_far = guarantee + weighted + keeps
        ceiling = facts.ceiling.get(r)
        capped = _q(min(_ZERO, ceiling - so_far), r) if ceiling is not None else _ZERO
        passed = plain - (so_far + capped)
        values = {
            "guarantee": guarantee,
            "weighted-share": weighted,
            "department-keeps": keeps,
            "capped": capped,
            "passed-on": passed,
            "past-use": facts.allocation.get(r, _ZERO) - plain,
        }
        for name, value in values.items():
            if value:
                parts[name][r] = value
    return [Part(name, parts[name]) for name in PARTS if parts[name]]


def total(parts: list[Part]) -> Amounts:
    """Σ of the parts per resource (what ``explain`` guarantees equals the allocation)."""
    result: Amounts = {}
    for part in parts:
        for r, value in part.amounts.items():
            result[r] = result.get(r, _ZERO) + value
    return result
