"""``build_report``: the chargeback report for a period, from the rollups, as the API shows it.

It checks the period and grouping, loads rates and budgets (``reading``), works out where each
resource's sums must be cut (rate changes; calendar months if budgeted), reads whole months,
days and hours summed and the (at most two) hours cut by ``start`` or ``end`` raw, and runs the
pure report (``monitoring.domain.chargeback``) on the records.

Budgets (``quotas.Budget``: hours per calendar month) become one domain Budget per month the
period touches. They only apply when the report is grouped by team. The total comes from a
second, small run over the records summed by resource (the same exact sums).

Invariant: a constant number of queries whatever the number of teams or days, all in one
transaction, and the figures the pure report would give on the unsummed rollups.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from monitoring.choices import RollupPeriod
from monitoring.domain import chargeback as domain
from monitoring.models import UsageRollup
from quotas.querysets import is_site_admin

from .database import more_work_mem
from .periods import DAY, HOUR, MAX_PERIOD, calendar_months, ceil_to, floor_to
from .reading import (
    day_and_month_rows,
    edge_hour_records,
    load_budgets,
    load_rates,
    starting_in,
    sum_rows,
)
from .sums import SUMS_WITH_MONTHS, Sums, dims_of, split_records


@dataclass(frozen=True)
class ChargebackResult:
    """The pure report plus what the API shows around it."""

    report: domain.Report
    currency: str

    def rows(self) -> list[dict[str, str]]:
        return domain.to_rows(self.report)

    def total_row(self) -> dict[str, str]:
        (row,) = domain.to_rows(replace(self.report, lines=(self.report.total,)))
        return row

    def budget_rows(self) -> list[dict[str, str]]:
        return budget_rows(self.report.lines)


def budget_rows(lines: Iterable[domain.Line]) -> list[dict[str, str]]:
    """One row per (line, budget): how much of each monthly budget the line consumed.

    ``allocated_hours``: the line's allocated hours of the budget's resource in the part of the
    month the report covers (budget use is allocated hours); ``used_hours`` is the same figure
    under its former name (kept for integrations and frozen statements; not measured use).
    """
    out = []
    for line in lines:
        for use in line.budgets:
            out.append(
                dict(line.key)
                | {
                    "resource": use.resource,
                    "start": use.start.isoformat(),
                    "end": use.end.isoformat(),
                    "limit_hours": format(use.limit_hours, "f"),
                    "allocated_hours": format(use.used_hours, "f"),
                    "used_hours": format(use.used_hours, "f"),
                    "used_pct": format(use.used_pct, "f"),
                }
            )
    return out


def _check(start: datetime, end: datetime, group_by: Sequence[str]) -> tuple[str, ...]:
    if timezone.is_naive(start) or timezone.is_naive(end):
        raise domain.ChargebackError("start and end must carry a time zone")
    if end <= start:
        raise domain.ChargebackError("end must be after start")
    if end - start > MAX_PERIOD:
        raise domain.ChargebackError(f"a report covers at most {MAX_PERIOD.days} days")
    fields = tuple(group_by)
    unknown = [name for name in fields if name not in domain.GROUP_FIELDS]
    if unknown or len(set(fields)) != len(fields):
        raise domain.ChargebackError(
            f"group_by takes distinct fields among {', '.join(domain.GROUP_FIELDS)}"
        )
    return fields


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building a report.

    A report allocates some 10^5 short-lived, acyclic objects (records, Decimals, sums; freed
    by reference counting). Left on, the collector runs full collections over the whole heap
    while they pile up: ~100 ms of a ~400 ms month at 1,000 teams. Nothing to do if already
    paused (a nested or concurrent report); re-enabled on the way out whatever happens.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def build_report(
    *, start: datetime, end: datetime, group_by: Sequence[str], user=None
) -> ChargebackResult:
    """The chargeback report for [start, end) grouped by ``group_by``.

    ``user`` limits the report to the teams they can see (``visible_to``: leads and members see
    their teams, admins everything, rows without a team are for admins); None means everything
    (freezing). Raises ChargebackError for a bad period, grouping or rate card.
    """
    with _gc_paused():
        return _build_report(start=start, end=end, group_by=group_by, user=user)


def _build_report(
    *, start: datetime, end: datetime, group_by: Sequence[str], user
) -> ChargebackResult:
    fields = _check(start, end, group_by)
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if user is not None and is_site_admin(user):
        user = None
    rollups = UsageRollup.objects.all() if user is None else UsageRollup.objects.visible_to(user)
    dims = dims_of(fields)

    rates, currency = load_rates(start, end)
    budgets = load_budgets(user, start, end) if "team" in fields else []
    # Where a resource's sums must be cut: its rate changes, and calendar months if budgeted.
    cuts_of: dict[str, list[datetime]] = defaultdict(list)
    for rate in rates:
        cuts_of[rate.resource] += [t for t in (rate.valid_from, rate.valid_to) if t is not None]
    month_starts = [a for a, _ in calendar_months(start, end)]
    for resource in {budget.resource for budget in budgets}:
        cuts_of[resource] += month_starts

    # Whole months from monthly rollups (month rule), other whole days from daily ones, whole
    # hours around them from hourly ones, cut hours raw.
    d0, d1 = ceil_to(start, DAY), floor_to(end, DAY)
    h0, h1 = ceil_to(start, HOUR), floor_to(end, HOUR)
    day_ranges = [(d0, d1)] if d0 < d1 else []
    hour_ranges = [(lo, hi) for lo, hi in ([(h0, d0), (d1, h1)] if d0 < d1 else [(h0, h1)])]
    hour_ranges = [(lo, hi) for lo, hi in hour_ranges if lo < hi]
    edge_hours = set()
    if start != h0:
        edge_hours.add(floor_to(start, HOUR))
    if end != h1:
        edge_hours.add(h1)
    summed = []
    with transaction.atomic(using=rollups.db):
        more_work_mem(rollups.db)
        days_and_months = day_and_month_rows(d0, d1, cuts_of)
        if days_and_months is not None:
            summed += sum_rows(
                rollups, days_and_months, day_ranges, cuts_of, DAY, dims, SUMS_WITH_MONTHS
            )
        if hour_ranges:
            hours = Q(period=RollupPeriod.HOUR) & starting_in(hour_ranges)
            summed += sum_rows(rollups, hours, hour_ranges, cuts_of, HOUR, dims)
        raw = edge_hour_records(rollups, sorted(edge_hours), dims)

    records = [record for seg, group, sums in summed for record in split_records(seg, group, sums)]
    records += raw
    report = domain.report(records, rates, start=start, end=end, group_by=fields, budgets=budgets)
    report = replace(report, total=_total(summed, raw, rates, start, end))
    return ChargebackResult(report=report, currency=currency)


def _total(summed, raw, rates, start, end) -> domain.Line:
    """The total line: a run over the sums by (segment, resource, flavor) only."""
    by_resource: dict[tuple, Sums] = defaultdict(Sums)
    for seg, group, sums in summed:
        by_resource[(seg, ("", "", "", group[3], group[4]))].add(sums)
    records = [
        r for (seg, group), sums in by_resource.items() for r in split_records(seg, group, sums)
    ]
    records += [replace(r, team="", cost_center="", namespace="") for r in raw]
    return domain.report(records, rates, start=start, end=end, group_by=()).total
