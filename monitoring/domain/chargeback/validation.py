"""Input checks: every input of a report is validated before it is used.

Invariant: a bad grouping, period, record or budget raises ``ChargebackError`` naming the
culprit, never a bare ``TypeError`` or a silently wrong figure; periods and instants are
timezone-aware and hours finite and non-negative (a budget's limit positive). The rate card is
checked where it is indexed (``rates.index_rates``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from .columns import GROUP_FIELDS
from .model import Budget, ChargebackError, UsageRecord


def check_group_by(group_by: Sequence[str]) -> tuple[str, ...]:
    """The grouping as a tuple: known fields, none repeated, not a bare string."""
    # A bare string is a Sequence[str] too; "team" would otherwise become ("t", "e", "a", "m").
    if isinstance(group_by, str):
        raise ChargebackError(
            f"group_by must be a sequence of field names, not the string {group_by!r}"
        )
    fields = tuple(group_by)
    for name in fields:
        if name not in GROUP_FIELDS:
            raise ChargebackError(
                f"invalid group_by field {name!r}; allowed: {', '.join(GROUP_FIELDS)}"
            )
    if len(set(fields)) != len(fields):
        raise ChargebackError(f"group_by repeats a field: {fields!r}")
    return fields


def check_aware(t: datetime, what: str) -> None:
    """Raise ChargebackError unless ``t`` is a timezone-aware datetime."""
    if not isinstance(t, datetime) or t.utcoffset() is None:
        raise ChargebackError(f"{what} must be a timezone-aware datetime, got {t!r}")


def check_period(start: datetime, end: datetime, what: str) -> None:
    """Raise ChargebackError unless ``[start, end)`` is aware and not empty."""
    check_aware(start, f"{what} start")
    check_aware(end, f"{what} end")
    if end <= start:
        raise ChargebackError(f"{what} end must be after start: [{start}, {end})")


def check_record(record: UsageRecord) -> None:
    """Raise ChargebackError unless the record's bucket and hours are valid."""
    check_period(record.start, record.end, "usage record")
    for name in ("allocated_hours", "used_hours", "guarantee_hours", "covered_hours"):
        value = getattr(record, name)
        if value is None and name == "covered_hours":
            continue
        if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
            raise ChargebackError(f"{name} must be a finite, non-negative Decimal: {record!r}")


def check_budget(budget: Budget) -> None:
    """Raise ChargebackError unless the budget's period and (positive) limit are valid."""
    check_period(budget.start, budget.end, "budget")
    limit = budget.limit_hours
    if not isinstance(limit, Decimal) or not limit.is_finite() or limit <= 0:
        raise ChargebackError(f"budget limit must be a positive Decimal: {budget!r}")
