"""Chargeback at the database edge: load rollups, rate cards and budgets for ``[start, end)``, run
the pure report (monitoring.domain.chargeback), freeze months and name late changes.

Reading the rollups (a constant number of queries, whatever the number of teams or days):

1. Rate cards overlapping the period (one query) and budgets of the teams in scope (one query).
2. Whole UTC calendar months inside the period are read from the *monthly* rollups, the
   other whole UTC days from the *daily* ones, the rest from the *hourly* ones: whole hours
   summed like the days, and the (at most two) hours cut by ``start`` or ``end`` read raw, so
   the report clips them exactly as it clips any bucket.
   **Month rule.** A month is read from its monthly rows only for a resource with no rate
   boundary (``valid_from``/``valid_to`` of any of its rates, any flavor) strictly inside the
   month, and only if the month has monthly rows at all (one small query; the rollup service
   writes a month's rows whenever it writes its days, months rolled up before monthly rollups
   existed have none until ``rollups.rollup_months`` backfills them). Otherwise that
   resource's month is read from its days, exactly as before. Budget periods are calendar
   months, so their boundaries never fall inside one. A monthly row is the sum of its days per
   namespace, resource, flavor and team, and carries the per-day floors (step 4), so reading
   it gives the very sums the days give: the report is the same either way.
3. Days and hours are summed in SQL (one query each, grouped by team id, joined to team slugs
   and cost centres only after summing) per *segment* and per group (the grouped fields plus
   resource and flavor). Segments are per resource: cut at that resource's rate changes (a
   rate changing mid-day makes that day a segment of its own, and the pure report splits it at
   the exact instant) and, for resources with budgets, at every calendar month. A resource
   without either is summed over the whole period in one segment. Inside a segment nothing
   changes its price or budget, so summing its buckets gives the report the same cost, hours
   and budget figures as the buckets would. SQL numbers segments with ``width_bucket``; a
   monthly row lies inside one segment (month rule) and is numbered by its first instant, so
   monthly and daily rows are summed together, in one query, into the same segments.
4. The pure report floors idle GPU-hours *per bucket* (per day for the days, also inside
   months), and unused guarantee is the guarantee less what the team's allocation covered of
   it. So that summing keeps those figures, SQL also sums ``covered_hours`` (written by the
   rollups per team, resource and hour: min(guarantee, the team's allocation over all its
   namespaces and flavors); rows without it count ``least(guarantee, allocated)``) and
   ``least(allocated, used)`` per bucket (Σ max(A - U, 0) = ΣA - Σ min(A, U)) — for a monthly
   row its stored per-day sum ``busy_hours`` — and each group-segment becomes up to two
   records whose own floors add up to the per-bucket ones (``_split``).

Consequence worth knowing: ``unpriced_records`` counts these summed records, not rollup rows
(one per team, resource, flavor and segment of that resource, up to two with the floors).

Budgets (``quotas.Budget``: hours per calendar month) become one domain Budget per month the
period touches. They only apply when the report is grouped by team. The total comes from a
second, small run over the records summed by resource (the same exact sums).
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections, transaction
from django.db.models import Case, DecimalField, F, Func, IntegerField, Q, Sum, Value, When
from django.db.models.functions import Coalesce, Least
from django.utils import timezone

from monitoring.choices import RollupPeriod
from monitoring.domain import chargeback as domain
from monitoring.exceptions import DomainError
from monitoring.models import ChargebackStatement, RateCard, UsageRollup
from quotas.choices import AuditVerb
from quotas.models import Budget, Team
from quotas.querysets import is_site_admin

__all__ = [
    "MAX_PERIOD",
    "UNASSIGNED",
    "AlreadyFrozen",
    "ChargebackResult",
    "build_report",
    "freeze_month",
    "month_bounds",
    "statement_view",
]

MAX_PERIOD = timedelta(days=400)
UNASSIGNED = "unassigned"  # namespaces no team owns (DESIGN.md, monitoring)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
_DEC = DecimalField(max_digits=40, decimal_places=6)
WORK_MEM = "64MB"  # per summing query, SET LOCAL (transaction-scoped)
_ZERO = Decimal(0)


class AlreadyFrozen(DomainError):
    """The month is already frozen for this grouping (the API answers 409)."""


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


# ---------------------------------------------------------------- time helpers


def _floor(t: datetime, step: timedelta) -> datetime:
    t = t.astimezone(UTC)
    if step == DAY:
        return t.replace(hour=0, minute=0, second=0, microsecond=0)
    return t.replace(minute=0, second=0, microsecond=0)


def _ceil(t: datetime, step: timedelta) -> datetime:
    floor = _floor(t, step)
    return floor if floor == t else floor + step


def _next_month(t: datetime) -> datetime:
    return t.replace(year=t.year + t.month // 12, month=t.month % 12 + 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) in UTC."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    return start, _next_month(start)


def _months(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """Calendar months (UTC) overlapping [start, end)."""
    first = _floor(start, DAY).replace(day=1)
    out = []
    while first < end:
        out.append((first, _next_month(first)))
        first = _next_month(first)
    return out


def _segments(lo: datetime, hi: datetime, cuts: Iterable[datetime], step: timedelta) -> list:
    """Split [lo, hi) (aligned to ``step``) at ``cuts``; an unaligned cut isolates its step."""
    points = {lo, hi}
    for t in cuts:
        for p in (_floor(t, step), _ceil(t, step)):
            if lo < p < hi:
                points.add(p)
    return list(pairwise(sorted(points)))


# ---------------------------------------------------------------- loading


@dataclass
class _Sums:
    """Exact sums of one group over one segment (allocated, used, guarantee and the floors)."""

    allocated: Decimal = _ZERO
    used: Decimal = _ZERO
    guarantee: Decimal = _ZERO
    covered: Decimal = _ZERO  # Σ covered_hours: what the team's allocation covered of its guarantee
    idle: Decimal = _ZERO  # Σ max(allocated - used, 0)

    def add(self, other: _Sums) -> None:
        self.allocated += other.allocated
        self.used += other.used
        self.guarantee += other.guarantee
        self.covered += other.covered
        self.idle += other.idle


# (team, cost_center, namespace, resource, flavor)
_Group = tuple[str, str, str, str, str]


def _split(seg: tuple[datetime, datetime], group: _Group, s: _Sums) -> list[domain.UsageRecord]:
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
_SUMS = {
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
_SUMS_WITH_MONTHS = _SUMS | {
    "ga": Sum(_COVERED),
    "au": _per_day("busy_hours", Least("allocated_hours", "used_hours", output_field=_DEC)),
}


def _dims(group_by: Sequence[str]) -> list[str]:
    dims = []
    if "team" in group_by or "cost_center" in group_by:
        dims += ["team__slug", "team__cost_center"]
    if "namespace" in group_by:
        dims.append("namespace")
    return [*dims, "resource", "flavor"]


def _group_of(row: dict) -> _Group:
    slug = row.get("team__slug", "")
    return (
        slug if slug is not None else UNASSIGNED,
        row.get("team__cost_center") or "",
        row.get("namespace", ""),
        row["resource"],
        row["flavor"],
    )


def _segment_number(segments: list[tuple[datetime, datetime]]):
    """SQL numbering a row by the segment its ``start`` falls in (1-based, ordered segments)."""
    if len(segments) == 1:
        return Value(1)
    return Func(
        F("start"),
        Value([lo for lo, _ in segments]),
        function="width_bucket",
        output_field=IntegerField(),
    )


def _postgres(using: str) -> bool:
    """Whether the PostgreSQL fast paths apply (``width_bucket``, ``unnest``, exact ``numeric``
    sums); every other database takes the portable path, which gives the same figures."""
    return connections[using].vendor == "postgresql"


def _more_work_mem(using: str) -> None:
    """``SET LOCAL work_mem`` for the summing queries (ends with the caller's transaction).

    Enough to hash-aggregate tens of thousands of groups in memory: with the default 4 MB the
    sums of a month of daily rows (232 k rows, 8 k groups) sort on disk and the planner picks a
    parallel seq scan over every period instead of the (period, start) index (~0.3 s more).
    """
    if WORK_MEM and _postgres(using):
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT set_config('work_mem', %s, true)", [WORK_MEM])


def _inside(ranges: Iterable[tuple[datetime, datetime]]) -> Q:
    """Rows starting in any of ``ranges`` (at least one range)."""
    inside = Q()
    for lo, hi in ranges:
        inside |= Q(start__gte=lo, start__lt=hi)
    return inside


def _summed(
    queryset,
    where: Q,
    ranges: list[tuple[datetime, datetime]],
    cuts_of: dict[str, list[datetime]],
    step: timedelta,
    dims: list[str],
    sums: dict[str, Sum] = _SUMS,
) -> list[tuple]:
    """One query: Σ per (segment, dims) of the rollups matching ``where`` (which keeps them
    inside ``ranges``).

    Segments are per resource: ``ranges`` cut at that resource's own cuts (its rate changes,
    calendar months if it is budgeted); a resource without cuts has one segment per range. SQL
    numbers a row's segment with ``width_bucket(start, <segment starts>)``, a binary search, and
    groups by team id; slugs and cost centres are joined onto the (few) summed rows.
    """
    if not ranges:
        return []
    plain = [seg for lo, hi in ranges for seg in _segments(lo, hi, (), step)]
    segments_of = {}
    for resource, cuts in sorted(cuts_of.items()):
        segments = [seg for lo, hi in ranges for seg in _segments(lo, hi, cuts, step)]
        if segments != plain:
            segments_of[resource] = segments
    by_team = "team__slug" in dims
    if not _postgres(queryset.db):
        return _summed_in_python(
            queryset.filter(where), plain, segments_of, by_team, "namespace" in dims, step
        )
    number = _segment_number(plain)
    if segments_of:
        number = Case(
            *(When(resource=r, then=_segment_number(s)) for r, s in segments_of.items()),
            default=number,
            output_field=IntegerField(),
        )
    group = [("team" if by_team else None), ("namespace" if "namespace" in dims else None)]
    columns = [name for name in group if name] + ["resource", "flavor"]
    rows = (
        queryset.filter(where)
        .order_by()
        .annotate(seg=number)
        .values("seg", *columns)
        .annotate(**sums)
    )
    try:
        sql, params = rows.query.sql_with_params()
    except EmptyResultSet:  # visible_to() found nothing
        return []
    if by_team:
        sql = (
            f'SELECT s.*, t.slug, t.cost_center FROM ({sql}) s LEFT JOIN "{Team._meta.db_table}" t'
            ' ON t.id = s."team"'
        )
    with connections[rows.db].cursor() as cursor:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description]
        data = cursor.fetchall()
    at = {name: i for i, name in enumerate(names)}
    seg, resource, flavor = at["seg"], at["resource"], at["flavor"]
    a, u, g, ga, au = at["a"], at["u"], at["g"], at["ga"], at["au"]
    team, slug, cost_center = at.get("team"), at.get("slug"), at.get("cost_center")
    namespace = at.get("namespace")
    out = []
    for row in data:
        if by_team:
            group_team = row[slug] if row[team] is not None else UNASSIGNED
            group_cost_center = row[cost_center] or ""
        else:
            group_team = group_cost_center = ""
        out.append(
            (
                segments_of.get(row[resource], plain)[row[seg] - 1],
                (
                    group_team,
                    group_cost_center,
                    row[namespace] if namespace is not None else "",
                    row[resource],
                    row[flavor],
                ),
                _Sums(row[a], row[u], row[g], row[ga], row[a] - row[au]),
            )
        )
    return out


def _summed_in_python(
    rows,
    plain: list[tuple[datetime, datetime]],
    segments_of: dict[str, list[tuple[datetime, datetime]]],
    by_team: bool,
    by_namespace: bool,
    step: timedelta,
) -> list[tuple]:
    """The portable equivalent of ``_summed``'s SQL (every database but PostgreSQL).

    The same sums, per (segment, group), added up exactly in Python ``Decimal`` from rows the
    ORM has converted (SQLite keeps decimals as floating point, and its ``sum()`` would round
    where PostgreSQL's ``numeric`` does not). The segment of a row is found by bisecting the
    segment starts, as ``width_bucket`` does; monthly rows bring their stored per-day floors.
    """
    starts_of = {resource: [lo for lo, _ in segments] for resource, segments in segments_of.items()}
    plain_starts = [lo for lo, _ in plain]
    columns = ["period", "start", "resource", "flavor", "allocated_hours", "used_hours"]
    columns += ["guarantee_hours", "covered_hours", "busy_hours"]
    if by_team:
        columns += ["team_id", "team__slug", "team__cost_center"]
    if by_namespace:
        columns.append("namespace")
    sums: dict[tuple, _Sums] = defaultdict(_Sums)
    for row in rows.order_by().values(*columns).iterator(chunk_size=5000):
        resource = row["resource"]
        starts = starts_of.get(resource, plain_starts)
        segment = bisect_right(starts, row["start"]) - 1
        if by_team and row["team_id"] is not None:
            team, cost_center = row["team__slug"], row["team__cost_center"] or ""
        elif by_team:
            team, cost_center = UNASSIGNED, ""
        else:
            team = cost_center = ""
        group = (team, cost_center, row.get("namespace", ""), resource, row["flavor"])
        a, u, g = row["allocated_hours"], row["used_hours"], row["guarantee_hours"]
        covered = row["covered_hours"]
        if covered is None:
            covered = min(g, a)
        busy = row["busy_hours"] if row["period"] == UsageRollup.MONTH else min(a, u)
        sums[(resource, segment, group)].add(_Sums(a, u, g, covered, a - busy))
    return [
        (segments_of.get(resource, plain)[segment], group, s)
        for (resource, segment, group), s in sums.items()
    ]


def _raw(queryset, starts: list[datetime], dims: list[str]) -> list[domain.UsageRecord]:
    """Hourly rollups starting at ``starts`` (the hours cut by the period's edges), unsummed."""
    if not starts:
        return []
    rows = queryset.filter(period=RollupPeriod.HOUR, start__in=starts).values(
        "start", "team__slug", "team__cost_center", "namespace", "resource", "flavor",
        "allocated_hours", "used_hours", "guarantee_hours", "covered_hours",
    )  # fmt: skip
    records = []
    for row in rows:
        team, cost_center, _, resource, flavor = _group_of(row)
        records.append(
            domain.UsageRecord(
                start=row["start"],
                end=row["start"] + HOUR,
                team=team if "team__slug" in dims else "",
                cost_center=cost_center if "team__slug" in dims else "",
                namespace=row["namespace"] if "namespace" in dims else "",
                resource=resource,
                flavor=flavor,
                allocated_hours=row["allocated_hours"],
                used_hours=row["used_hours"],
                guarantee_hours=row["guarantee_hours"],
                covered_hours=row["covered_hours"],
            )
        )
    return records


def _whole_months(lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
    """Calendar months (UTC) lying entirely inside [lo, hi) (``lo`` aligned to a day)."""
    return [(a, b) for a, b in _months(lo, hi) if lo <= a and b <= hi]


def _rolled_up(months: list[tuple[datetime, datetime]]) -> set[datetime]:
    """The starts of ``months`` that have monthly rollups (one query, an index probe each on
    PostgreSQL; elsewhere the portable equivalent, a DISTINCT over the months' rows)."""
    if not months:
        return set()
    if not _postgres(UsageRollup.objects.db):
        rows = UsageRollup.objects.filter(
            period=UsageRollup.MONTH, start__in=[a for a, _ in months]
        )
        return set(rows.order_by().values_list("start", flat=True).distinct())
    sql = (
        f'SELECT m FROM unnest(%s::timestamptz[]) AS m WHERE EXISTS (SELECT 1 FROM "'
        f'{UsageRollup._meta.db_table}" r WHERE r.period = %s AND r.start = m)'
    )
    with connections[UsageRollup.objects.db].cursor() as cursor:
        cursor.execute(sql, [[a for a, _ in months], UsageRollup.MONTH])
        return {row[0] for row in cursor.fetchall()}


def _ranges(points: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Merge adjacent [a, b) intervals (sorted)."""
    out: list[tuple[datetime, datetime]] = []
    for a, b in sorted(points):
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _days_and_months(d0: datetime, d1: datetime, cuts_of: dict[str, list[datetime]]) -> Q | None:
    """Which daily and monthly rows cover the whole days [d0, d1) (module docstring, month rule).

    Per resource, a whole month with monthly rollups and no rate boundary strictly inside is
    read from its monthly rows, every other day from the daily rows. Resources with the same
    usable months share one condition; those without cuts share the default one.
    """
    if d0 >= d1:
        return None
    rolled = _rolled_up(_whole_months(d0, d1))
    months = [(a, b) for a, b in _whole_months(d0, d1) if a in rolled]
    usable_of: dict[tuple, list[str]] = defaultdict(list)
    for resource, cuts in sorted(cuts_of.items()):
        usable = tuple((a, b) for a, b in months if not any(a < t < b for t in cuts))
        if usable != tuple(months):
            usable_of[usable].append(resource)
    special = [resource for resources in usable_of.values() for resource in resources]
    groups = [(~Q(resource__in=special) if special else Q(), tuple(months))]
    groups += [(Q(resource__in=resources), usable) for usable, resources in usable_of.items()]
    where = Q()
    for which, usable in groups:
        days, edge = [], d0
        for a, b in usable:
            if edge < a:
                days.append((edge, a))
            edge = b
        if edge < d1:
            days.append((edge, d1))
        if usable:
            where |= which & Q(period=UsageRollup.MONTH) & _inside(_ranges(usable))
        if days:
            where |= which & Q(period=RollupPeriod.DAY) & _inside(days)
    return where


def _rates(start: datetime, end: datetime) -> tuple[list[domain.Rate], str]:
    rates, currencies = [], set()
    for card in RateCard.objects.filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=start), valid_from__lt=end
    ):
        currencies.add(card.currency)
        rates.append(
            domain.Rate(
                resource=card.resource,
                flavor=card.flavor,
                price_per_unit_hour=card.price_per_unit_hour,
                valid_from=card.valid_from,
                valid_to=card.valid_to,
            )
        )
    if len(currencies) > 1:
        raise domain.ChargebackError(
            f"rate cards mix currencies ({', '.join(sorted(currencies))}); one is assumed"
        )
    return rates, (currencies.pop() if currencies else "")


def _budgets(user, start: datetime, end: datetime) -> list[domain.Budget]:
    queryset = Budget.objects if user is None else Budget.objects.visible_to(user)
    months = _months(start, end)
    return [
        domain.Budget(team=slug, resource=resource, start=a, end=b, limit_hours=hours)
        for slug, resource, hours in queryset.values_list("team__slug", "resource", "monthly_hours")
        for a, b in months
    ]


# ---------------------------------------------------------------- report


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
    dims = _dims(fields)

    rates, currency = _rates(start, end)
    budgets = _budgets(user, start, end) if "team" in fields else []
    # Where a resource's sums must be cut: its rate changes, and calendar months if budgeted.
    cuts_of: dict[str, list[datetime]] = defaultdict(list)
    for rate in rates:
        cuts_of[rate.resource] += [t for t in (rate.valid_from, rate.valid_to) if t is not None]
    month_starts = [a for a, _ in _months(start, end)]
    for resource in {budget.resource for budget in budgets}:
        cuts_of[resource] += month_starts

    # Whole months from monthly rollups (month rule), other whole days from daily ones, whole
    # hours around them from hourly ones, cut hours raw.
    d0, d1 = _ceil(start, DAY), _floor(end, DAY)
    h0, h1 = _ceil(start, HOUR), _floor(end, HOUR)
    day_ranges = [(d0, d1)] if d0 < d1 else []
    hour_ranges = [(lo, hi) for lo, hi in ([(h0, d0), (d1, h1)] if d0 < d1 else [(h0, h1)])]
    hour_ranges = [(lo, hi) for lo, hi in hour_ranges if lo < hi]
    edge_hours = set()
    if start != h0:
        edge_hours.add(_floor(start, HOUR))
    if end != h1:
        edge_hours.add(h1)
    summed = []
    with transaction.atomic(using=rollups.db):
        _more_work_mem(rollups.db)
        days_and_months = _days_and_months(d0, d1, cuts_of)
        if days_and_months is not None:
            summed += _summed(
                rollups, days_and_months, day_ranges, cuts_of, DAY, dims, _SUMS_WITH_MONTHS
            )
        if hour_ranges:
            hours = Q(period=RollupPeriod.HOUR) & _inside(hour_ranges)
            summed += _summed(rollups, hours, hour_ranges, cuts_of, HOUR, dims)
        raw = _raw(rollups, sorted(edge_hours), dims)

    records = [record for seg, group, sums in summed for record in _split(seg, group, sums)]
    records += raw
    report = domain.report(records, rates, start=start, end=end, group_by=fields, budgets=budgets)
    report = replace(report, total=_total(summed, raw, rates, start, end))
    return ChargebackResult(report=report, currency=currency)


def _total(summed, raw, rates, start, end) -> domain.Line:
    """The total line: a run over the sums by (segment, resource, flavor) only."""
    by_resource: dict[tuple, _Sums] = defaultdict(_Sums)
    for seg, group, sums in summed:
        by_resource[(seg, ("", "", "", group[3], group[4]))].add(sums)
    records = [r for (seg, group), sums in by_resource.items() for r in _split(seg, group, sums)]
    records += [replace(r, team="", cost_center="", namespace="") for r in raw]
    return domain.report(records, rates, start=start, end=end, group_by=()).total


# ---------------------------------------------------------------- statements


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
