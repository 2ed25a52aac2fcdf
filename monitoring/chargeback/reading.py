"""Reading the rollups for a report: rate cards, budgets, and rollup rows summed per segment.

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
   records whose own floors add up to the per-bucket ones (``sums.split_records``).

Consequence worth knowing: ``unpriced_records`` counts these summed records, not rollup rows
(one per team, resource, flavor and segment of that resource, up to two with the floors).
On databases other than PostgreSQL the sums of step 3 are added up in Python (``portable``),
to the same figures.

Invariant: a constant number of queries whatever the number of teams or days, and every rollup
row of the period read exactly once, from one period (month, day or hour).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connections
from django.db.models import Q, Sum

from monitoring.choices import RollupPeriod
from monitoring.domain import chargeback as domain
from monitoring.models import RateCard, UsageRollup
from quotas.models import Budget

from . import database
from .fast_path import sum_rows_in_sql
from .periods import HOUR, calendar_months, cut_segments, merge_ranges, whole_months
from .portable import sum_rows_in_python
from .sums import SUMS, group_of


def starting_in(ranges: Iterable[tuple[datetime, datetime]]) -> Q:
    """Rows starting in any of ``ranges`` (at least one range)."""
    inside = Q()
    for lo, hi in ranges:
        inside |= Q(start__gte=lo, start__lt=hi)
    return inside


def sum_rows(
    queryset,
    where: Q,
    ranges: list[tuple[datetime, datetime]],
    cuts_of: dict[str, list[datetime]],
    step: timedelta,
    dims: list[str],
    sums: dict[str, Sum] = SUMS,
) -> list[tuple]:
    """One query: Σ per (segment, dims) of the rollups matching ``where`` (which keeps them
    inside ``ranges``).

    Segments are per resource: ``ranges`` cut at that resource's own cuts (its rate changes,
    calendar months if it is budgeted); a resource without cuts has one segment per range. On
    PostgreSQL the SQL of ``fast_path`` sums them, elsewhere ``portable`` does, to the same
    figures.
    """
    if not ranges:
        return []
    plain = [seg for lo, hi in ranges for seg in cut_segments(lo, hi, (), step)]
    segments_of = {}
    for resource, cuts in sorted(cuts_of.items()):
        segments = [seg for lo, hi in ranges for seg in cut_segments(lo, hi, cuts, step)]
        if segments != plain:
            segments_of[resource] = segments
    by_team = "team__slug" in dims
    if not database.postgres(queryset.db):
        return sum_rows_in_python(
            queryset.filter(where), plain, segments_of, by_team, "namespace" in dims, step
        )
    return sum_rows_in_sql(
        queryset.filter(where), plain, segments_of, by_team, "namespace" in dims, sums
    )


def edge_hour_records(
    queryset, starts: list[datetime], dims: list[str]
) -> list[domain.UsageRecord]:
    """Hourly rollups starting at ``starts`` (the hours cut by the period's edges), unsummed."""
    if not starts:
        return []
    rows = queryset.filter(period=RollupPeriod.HOUR, start__in=starts).values(
        "start", "team__slug", "team__cost_center", "namespace", "resource", "flavor",
        "allocated_hours", "used_hours", "guarantee_hours", "covered_hours",
    )  # fmt: skip
    records = []
    for row in rows:
        team, cost_center, _, resource, flavor = group_of(row)
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


def _rolled_up(months: list[tuple[datetime, datetime]]) -> set[datetime]:
    """The starts of ``months`` that have monthly rollups (one query, an index probe each on
    PostgreSQL; elsewhere the portable equivalent, a DISTINCT over the months' rows)."""
    if not months:
        return set()
    if not database.postgres(UsageRollup.objects.db):
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


def day_and_month_rows(d0: datetime, d1: datetime, cuts_of: dict[str, list[datetime]]) -> Q | None:
    """Which daily and monthly rows cover the whole days [d0, d1) (module docstring, month rule).

    Per resource, a whole month with monthly rollups and no rate boundary strictly inside is
    read from its monthly rows, every other day from the daily rows. Resources with the same
    usable months share one condition; those without cuts share the default one.
    """
    if d0 >= d1:
        return None
    rolled = _rolled_up(whole_months(d0, d1))
    months = [(a, b) for a, b in whole_months(d0, d1) if a in rolled]
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
            where |= which & Q(period=UsageRollup.MONTH) & starting_in(merge_ranges(usable))
        if days:
            where |= which & Q(period=RollupPeriod.DAY) & starting_in(days)
    return where


def load_rates(start: datetime, end: datetime) -> tuple[list[domain.Rate], str]:
    """The rate cards overlapping [start, end) as domain Rates, and their one currency."""
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


def load_budgets(user, start: datetime, end: datetime) -> list[domain.Budget]:
    """One domain Budget per budget ``user`` can see (None: all) and month [start, end) touches."""
    queryset = Budget.objects if user is None else Budget.objects.visible_to(user)
    months = calendar_months(start, end)
    return [
        domain.Budget(team=slug, resource=resource, start=a, end=b, limit_hours=hours)
        for slug, resource, hours in queryset.values_list("team__slug", "resource", "monthly_hours")
        for a, b in months
    ]
