"""Statements: freeze a finished month's report, and show a frozen one with its late changes.

Invariant: a month is frozen at most once per grouping (``AlreadyFrozen``; the check and the
insert share one ``select_for_update`` transaction, audited), only once it is over, and a frozen
statement never changes: late rollups show as ``late`` changes next to it, not in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django.db import transaction
from django.utils import timezone

from monitoring.domain import chargeback as domain
from monitoring.exceptions import DomainError
from monitoring.models import ChargebackStatement
from quotas.choices import AuditVerb
from quotas.querysets import is_site_admin

from .building import build_report
from .periods import month_bounds


class AlreadyFrozen(DomainError):
    """The month is already frozen for this grouping (the API answers 409)."""


def freeze_month(*, month: date, group_by: Sequence[str], actor, now=None) -> ChargebackStatement:
    """Freeze the statement of a finished calendar month (UTC) for ``group_by``.

    Raises ChargebackError (month not over yet, bad grouping) or AlreadyFrozen.
    """
    from quotas.changes import audit

    now = now or timezone.now()
    start, end = month_bounds(month)
    if end > now:
        raise domain.ChargebackError(
            f"{start:%Y-%m} is not over yet; freeze it from {end:%Y-%m-%d}"
        )
    fields = tuple(group_by)
    key = ",".join(fields)
    result = build_report(start=start, end=end, group_by=fields, user=None)
    frozen = domain.freeze(result.report)
    data = frozen.to_dict() | {
        "currency": result.currency,
        "total": result.total_row(),
        "budgets": result.budget_rows(),
    }
    with transaction.atomic():
        if (
            ChargebackStatement.objects.select_for_update()
            .filter(start=start, end=end, group_by=key)
            .exists()
        ):
            raise AlreadyFrozen(f"{start:%Y-%m} is already frozen by {key}.")
        statement = ChargebackStatement.objects.create(
            start=start, end=end, group_by=key, frozen_by=actor, data=data
        )
        audit(
            actor=actor,
            verb=AuditVerb.CREATE,
            obj=statement,
            team=None,
            after={"total_cost": data["total_cost"], "rows": len(data["rows"])},
        )
    return statement


def statement_view(statement: ChargebackStatement, *, user) -> dict[str, Any]:
    """The frozen figures (rows of teams ``user`` can see) plus ``late`` changes since.

    ``late`` diffs the frozen statement against a recomputation of the same period and
    grouping: rows added, removed or changed by rollups that arrived after freezing.
    """
    data = statement.data
    frozen = domain.FrozenStatement.from_dict(data)
    current = build_report(start=frozen.start, end=frozen.end, group_by=frozen.group_by, user=None)
    changes = domain.diff_reports(frozen, current.report)
    allowed = None if is_site_admin(user) else _visible_slugs(user)

    def visible(team: str) -> bool:
        return allowed is None or team in allowed

    late = [
        {
            "key": dict(change.key),
            "kind": change.kind,
            "changes": [
                {"column": column, "frozen": old, "current": new}
                for column, old, new in change.changes
            ],
        }
        for change in changes
        if visible(dict(change.key).get("team", ""))
    ]
    rows = [row for row in data["rows"] if visible(row.get("team", ""))]
    return {
        "rows": rows,
        "total": data.get("total") if allowed is None else None,
        "total_cost": data["total_cost"] if allowed is None else None,
        "budgets": [
            {"allocated_hours": b.get("used_hours", "")} | b
            for b in data.get("budgets", [])
            if visible(b.get("team", ""))
        ],
        "currency": data.get("currency", ""),
        "unpriced_records": data["unpriced_records"],
        "late": late,
    }


def _visible_slugs(user) -> set[str]:
    from quotas.models import Team

    return set(Team.objects.visible_to(user).values_list("slug", flat=True))
