"""The report's data: its inputs (usage records, rates, budgets) and its outputs (lines, report).

Inputs are rollup buckets (``UsageRecord``: one team x namespace x resource x flavor over a bucket
``[start, end)``), a rate card (``Rate``: price per unit-hour with a validity period) and optional
``Budget`` rows; the output is a ``Report`` of ``Line`` s, one per group key, plus its total and the
``Unpriced`` stretches.

Invariant: every value here is immutable (frozen dataclasses), so a report, once built, never
changes; a line's hour figures are ``None`` exactly when they would not add up (several resources,
or use of a non-GPU resource).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

Key = tuple[tuple[str, str], ...]


class ChargebackError(ValueError):
    """Invalid chargeback input (grouping, period, rate card, record or frozen statement)."""


def key_values(key: Key) -> tuple[str, ...]:
    """The values of a group key, in grouping order (how lines are sorted)."""
    return tuple(value for _, value in key)


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class UsageRecord:
    """One rollup bucket for one team x namespace x resource x flavor.

    Hours are in base units x hours (GPU-hours, core-hours, byte-hours). ``used_hours`` is the
    utilization-weighted figure for GPUs and 0 for other resources or when unknown.
    ``covered_hours`` is how much of ``guarantee_hours`` the team's allocation covered (module
    docstring, step 2); None means min(guarantee, allocated) of this record alone.
    """

    start: datetime
    end: datetime
    team: str
    cost_center: str
    namespace: str
    resource: str
    flavor: str
    allocated_hours: Decimal
    used_hours: Decimal
    guarantee_hours: Decimal
    covered_hours: Decimal | None = None


@dataclass(frozen=True)
class Rate:
    """Price per billing unit-hour (GPU-, core-, GiB-hour) valid in ``[valid_from, valid_to)``.

    ``flavor=""`` prices every flavor of ``resource`` that has no rate of its own; ``valid_to=None``
    means open-ended.
    """

    resource: str
    flavor: str
    price_per_unit_hour: Decimal
    valid_from: datetime
    valid_to: datetime | None = None


@dataclass(frozen=True)
class Budget:
    """A team's allowance of ``resource`` (billing unit-hours) over ``[start, end)``."""

    team: str
    resource: str
    start: datetime
    end: datetime
    limit_hours: Decimal


# ---------------------------------------------------------------- outputs


@dataclass(frozen=True)
class BudgetUse:
    """How much of one budget a line consumed in the part of the budget period the report covers."""

    resource: str
    start: datetime
    end: datetime
    limit_hours: Decimal
    used_hours: Decimal
    used_pct: Decimal


@dataclass(frozen=True)
class Line:
    """One report line: the group key and its figures.

    Hour figures are ``None`` when the line spans several resources (units would mix);
    ``used_hours`` and ``idle_hours`` are also ``None`` for non-GPU resources (not measured).
    ``cost`` is rounded to 0.01; ``exact_cost`` is the unrounded value, kept for reconciliation
    and never displayed.
    """

    key: Key
    unit: str
    allocated_hours: Decimal | None
    used_hours: Decimal | None
    idle_hours: Decimal | None
    guarantee_hours: Decimal | None
    unused_guarantee_hours: Decimal | None
    cost: Decimal
    budgets: tuple[BudgetUse, ...] = ()
    unpriced_records: int = 0
    exact_cost: Fraction = field(default=Fraction(0), repr=False, compare=False)

    @property
    def budget_used_pct(self) -> Decimal | None:
        """The highest percentage over the budgets that apply; None when none applies."""
        return max((use.used_pct for use in self.budgets), default=None)

    def value(self, name: str) -> str:
        """Return the key value for group field ``name``; "" when the line is not grouped by it."""
        return dict(self.key).get(name, "")


@dataclass(frozen=True)
class Unpriced:
    """A stretch ``[start, end)`` of a record that no rate covers, with its allocated hours."""

    record: UsageRecord
    start: datetime
    end: datetime
    allocated_hours: Decimal
    unit: str


@dataclass(frozen=True)
class Report:
    """A chargeback report for ``[start, end)``; ``total`` is a line with the empty key."""

    start: datetime
    end: datetime
    group_by: tuple[str, ...]
    lines: tuple[Line, ...]
    total: Line
    unpriced: tuple[Unpriced, ...] = ()
