"""Sums of rollup rows: what is summed per group and segment, and how a sum becomes records.

A group is (team, cost centre, namespace, resource, flavor), with "" for what the report does not
group by; ``Sums`` holds one group's exact sums over one segment, the SQL aggregates (``SUMS``,
``SUMS_WITH_MONTHS``) and the portable path compute the same five figures, and ``split_records``
turns them back into domain records for the pure report.

Invariant: the pure report floors idle GPU-hours and unused guarantee *per bucket*; the sums keep
Σ covered and Σ max(A - U, 0) per bucket, and ``split_records`` makes up to two records whose own
floors add up to exactly those, so summing never changes a figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Case, DecimalField, F, Sum, When
from django.db.models.functions import Coalesce, Least

from monitoring.domain import chargeback as domain
from monitoring.models import UsageRollup

UNASSIGNED = "unassigned"  # namespaces no team owns (DESIGN.md, monitoring)
_DEC = DecimalField(max_digits=40, decimal_places=6)
_ZERO = Decimal(0)


@dataclass
class Sums:
    """Exact sums of one group over one segment (allocated, used, guarantee and the floors)."""

    allocated: Decimal = _ZERO
    used: Decimal = _ZERO
    guarantee: Decimal = _ZERO
    covered: Decimal = _ZERO  # Σ covered_hours: what the team's allocation covered of its guarantee
    idle: Decimal = _ZERO  # Σ max(allocated - used, 0)

    def add(self, other: Sums) -> None:
        self.allocated += other.allocated
        self.used += other.used
        self.guarantee += other.guarantee
        self.covered += other.covered
        self.idle += other.idle


# (team, cost_center, namespace, resource, flavor)
Group = tuple[str, str, str, str, str]


def split_records(
    seg: tuple[datetime, datetime], group: Group, s: Sums
) -> list[domain.UsageRecord]:
    """Records over ``seg`` whose figures, floored per record, equal the per-bucket floors.

    1. all the allocation, used = ΣA - Σmax(A - U, 0) = Σmin(A, U) (so its idle is
       Σmax(A - U, 0)), the whole guarantee and what the team's allocation covered of it (its
       unused guarantee is ΣG - Σcovered);
    2. used only = Σmax(U - A, 0) (idle 0, no guarantee).
    """
    busy = s.allocated - s.idle
    team, cost_center, namespace, resource, flavor = group
    parts = [(s.allocated, busy, s.guarantee, s.covered)]
    if s.used - busy:
        parts.append((_ZERO, s.used - busy, _ZERO, _ZERO))
    record = domain.UsageRecord  # positional: (start, end, team, ..., flavor, a, u, g, covered)
    lo, hi = seg
    return [
        record(lo, hi, team, cost_center, namespace, resource, flavor, a, u, g, c)
        for a, u, g, c in parts
    ]


# What a row's team allocation covered of its guarantee (per team, resource and hour, written by
# the rollups); rows rolled up before it existed cover min(guarantee, allocated) of themselves.
_COVERED = Coalesce(
    "covered_hours",
    Least("guarantee_hours", "allocated_hours", output_field=_DEC),
    output_field=_DEC,
)
SUMS = {
    "a": Sum("allocated_hours"),
    "u": Sum("used_hours"),
    "g": Sum("guarantee_hours"),
    "ga": Sum(_COVERED),
    # Σ max(A - U, 0) = ΣA - Σ min(A, U): least() needs no numeric subtraction per row.
    "au": Sum(Least("allocated_hours", "used_hours", output_field=_DEC)),
}


def _per_day(stored: str, least: Least) -> Sum:
    """Σ of a per-bucket floor: stored per day on monthly rows, least() on daily ones."""
    return Sum(
        Case(When(period=UsageRollup.MONTH, then=F(stored)), default=least, output_field=_DEC)
    )


# Daily and monthly rows summed together.
SUMS_WITH_MONTHS = SUMS | {
    "ga": Sum(_COVERED),
    "au": _per_day("busy_hours", Least("allocated_hours", "used_hours", output_field=_DEC)),
}


def dims_of(group_by: Sequence[str]) -> list[str]:
    """The rollup fields to group by for ``group_by`` (team fields, namespace, resource, flavor)."""
    dims = []
    if "team" in group_by or "cost_center" in group_by:
        dims += ["team__slug", "team__cost_center"]
    if "namespace" in group_by:
        dims.append("namespace")
    return [*dims, "resource", "flavor"]


def group_of(row: dict) -> Group:
    """The group of a rollup row read with ``dims_of`` fields; a row without team is unassigned."""
    slug = row.get("team__slug", "")
    return (
        slug if slug is not None else UNASSIGNED,
        row.get("team__cost_center") or "",
        row.get("namespace", ""),
        row["resource"],
        row["flavor"],
    )
