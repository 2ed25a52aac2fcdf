"""Budgets: how much of each monthly budget a team has allocated so far (one figure for the
team page, Reports, the API and ``/metrics``), and the alerts when use crosses a threshold."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from monitoring.choices import RollupPeriod
from monitoring.models import (
    BudgetAlert,
    UsageRollup,
)
from monitoring.notify import notify_team
from monitoring.units import HOUR, month_start
from quotas.models import Budget, Team

# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class BudgetUse:
    """How much of one monthly budget a team has allocated so far (``budget_use``).

    ``allocated_hours`` are the chargeback report's allocated hours of the budget's resource
    (requests × time, in billing units: GPU-, core-, GiB-hours) for ``[month_start, cutoff)``,
    rounded like the report (4 places); ``percent`` = allocated / budget × 100 (2 places).
    """

    team: Team
    budget: Budget
    resource: str
    unit: str
    month_start: datetime
    cutoff: datetime
    allocated_hours: Decimal
    budget_hours: Decimal
    percent: Decimal

    @property
    def fraction(self) -> Decimal:
        return self.percent / 100

    @property
    def over(self) -> bool:
        return self.allocated_hours >= self.budget_hours


def budget_cutoff(*, now: datetime) -> datetime:
    """The instant budget use counts up to: the end of the newest rolled-up hour of ``now``'s
    month (no later than ``now``), or the month's start when nothing is rolled up yet.

    Every surface (team page, Reports, the API, alerts and their emails, /metrics) counts up to
    this same instant, so at one moment they all show the same figure; it moves once an hour,
    when the hourly rollup job has run.
    """
    first = month_start(now)
    latest = UsageRollup.objects.filter(
        period=RollupPeriod.HOUR, start__gte=first, start__lt=now
    ).aggregate(t=Max("start"))["t"]
    return first if latest is None else min(latest + HOUR, now)


def budget_use(
    *, now: datetime | None = None, teams: Iterable[Team] | None = None
) -> list[BudgetUse]:
    """Budget use this month per (team, resource) budget: THE figure every surface shows.

    ``teams`` limits the result (None: every team with a budget). Allocated hours come from the
    chargeback report (``monitoring.chargeback.build_report``, grouped by team and resource) over
    ``[month start, budget_cutoff(now))``: the same hours, units and rounding as Reports, the CSV
    and the chargeback API. Sorted by team slug and resource.
    """
    from monitoring import chargeback
    from monitoring.domain.chargeback import unit_of

    now = now or timezone.now()
    first = month_start(now)
    cutoff = budget_cutoff(now=now)
    budgets = Budget.objects.select_related("team").order_by("team__slug", "resource")
    if teams is not None:
        budgets = budgets.filter(team__in=[getattr(team, "pk", team) for team in teams])
    budgets = list(budgets)
    if not budgets:
        return []
    used: dict[tuple[str, str], tuple[Decimal, Decimal]] = {}
    if first < cutoff:
        report = chargeback.build_report(
            start=first, end=cutoff, group_by=("team", "resource"), user=None
        ).report
        for line in report.lines:
            for use in line.budgets:
                used[(line.value("team"), use.resource)] = (use.used_hours, use.used_pct)
    none = (Decimal("0.0000"), Decimal("0.00"))
    out = []
    for budget in budgets:
        hours, percent = used.get((budget.team.slug, budget.resource), none)
        out.append(
            BudgetUse(
                team=budget.team,
                budget=budget,
                resource=budget.resource,
                unit=unit_of(budget.resource),
                month_start=first,
                cutoff=cutoff,
                allocated_hours=hours,
                budget_hours=budget.monthly_hours,
                percent=percent,
            )
        )
    return out


def month_to_date_hours(*, now: datetime) -> dict[tuple[int, str], Decimal]:
    """``{(team id, resource): allocated hours}`` of the budgeted resources: ``budget_use``."""
    return {(use.team.pk, use.resource): use.allocated_hours for use in budget_use(now=now)}


def check_budgets(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Raise a BudgetAlert the first time a team's budget use this month crosses each threshold.

    Budget use is ``budget_use``: allocated hours of the budget's resource (requests × time,
    what chargeback bills) up to the end of the newest rolled-up hour, the figure every page
    shows. Thresholds are ``FAIRSHARE_BUDGET_THRESHOLDS`` percent (default 80 and 100) of
    ``monthly_hours``. The unique (budget, month, threshold) constraint makes each alert, and its
    notification, happen once per month even when runs overlap. Returns the alerts created now.
    """
    now = now or timezone.now()
    thresholds = sorted(set(settings.FAIRSHARE_BUDGET_THRESHOLDS))
    created: list[BudgetAlert] = []
    for use in budget_use(now=now):
        budget, hours = use.budget, use.allocated_hours
        month: date = use.month_start.date()
        for threshold in thresholds:
            if hours < budget.monthly_hours * threshold / 100:
                break
            alert, is_new = BudgetAlert.objects.get_or_create(
                budget=budget,
                month=month,
                threshold=threshold,
                defaults={"allocated_hours": hours},
            )
            if not is_new:
                continue
            created.append(alert)
            notify_team(
                budget.team,
                subject=f"{budget.team.slug} reached {threshold} % of its {budget.resource} budget",
                body=budget_alert_text(use, threshold),
            )
            alert.notified_at = timezone.now()
            alert.save(update_fields=["notified_at"])
    return created


def budget_alert_text(use: BudgetUse, threshold: int) -> str:
    """The alert email's body: the figures as the team page shows them, and up to when."""
    return (
        f"Team {use.team.name} has allocated {use.allocated_hours:,.1f} of its "
        f"{use.budget_hours:,.1f} {use.resource} {use.unit}s budgeted for "
        f"{use.month_start:%B %Y} ({use.percent} %, the {threshold} % threshold), counted up to "
        f"{use.cutoff:%Y-%m-%d %H:%M} UTC."
    )
