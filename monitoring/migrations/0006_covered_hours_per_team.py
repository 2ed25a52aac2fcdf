"""Backfill ``UsageRollup.covered_hours`` per team, resource and hour (issue 29).

Unused guarantee is guarantee - covered. Before, covered was min(guarantee, allocated) per
rollup row; but the guarantee sits on one row per team (its first namespace, flavor "") while
GPUs are allocated on rows of their product, so nothing was ever covered and the whole guarantee
read as unused. Now ``rollup_usage`` writes, per team, resource and hour, min(guarantee, the
team's allocation over all its namespaces and flavors) on the guarantee row. This migration does
the same for existing rows:

1. hourly guarantee rows: per (hour, team, resource) as the rollup does;
2. daily guarantee rows: the sum of their hours' covered hours where the hours are still kept,
   else min(guarantee, the team's allocation that day) (the hours were pruned);
3. monthly rows with a guarantee: the sum of their days' covered hours, where their days are kept.

Rows without a guarantee keep a null ``covered_hours``, which the report reads as
min(0, allocated) = 0. Sums are exact (Python Decimal, whatever the database).
"""

from collections import defaultdict
from decimal import Decimal

from django.db import migrations


def _team_allocation(rows, bucket_of):
    allocated = defaultdict(Decimal)
    for start, team_id, resource, hours in rows:
        allocated[(bucket_of(start), team_id, resource)] += hours
    return allocated


def _cover(guarantee_rows, allocated, bucket_of, covered_of=None):
    """Covered hours of each guarantee row (a team's several rows share its allocation)."""
    changed = []
    for row in sorted(guarantee_rows, key=lambda r: (r.start, r.namespace, r.flavor)):
        known = covered_of(row) if covered_of else None
        if known is not None:
            row.covered_hours = known
        else:
            key = (bucket_of(row.start), row.team_id, row.resource)
            row.covered_hours = min(row.guarantee_hours, allocated[key])
            allocated[key] -= row.covered_hours
        changed.append(row)
    return changed


def backfill(apps, schema_editor):
    rollup = apps.get_model("monitoring", "UsageRollup")
    rows = rollup.objects.filter(team__isnull=False)

    def day_of(moment):
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)

    def same(moment):
        return moment

    # 1. Hours.
    hours = rows.filter(period="hour")
    allocated = _team_allocation(
        hours.values_list("start", "team_id", "resource", "allocated_hours").iterator(5000), same
    )
    hourly = _cover(list(hours.filter(guarantee_hours__gt=0)), allocated, same)
    rollup.objects.bulk_update(hourly, ["covered_hours"], batch_size=2000)

    # 2. Days: from their hours where kept.
    from_hours = defaultdict(Decimal)
    for row in hourly:
        from_hours[(day_of(row.start), row.namespace, row.resource, row.flavor)] += (
            row.covered_hours
        )
    days_with_hours = {day_of(start) for start in hours.values_list("start", flat=True).distinct()}
    days = rows.filter(period="day")
    allocated = _team_allocation(
        days.values_list("start", "team_id", "resource", "allocated_hours").iterator(5000), same
    )

    def from_kept_hours(row):
        if row.start not in days_with_hours:
            return None
        return from_hours.get((row.start, row.namespace, row.resource, row.flavor), Decimal(0))

    daily = _cover(list(days.filter(guarantee_hours__gt=0)), allocated, same, from_kept_hours)
    rollup.objects.bulk_update(daily, ["covered_hours"], batch_size=2000)

    # 3. Months: the sums of their days.
    by_month = defaultdict(Decimal)
    for row in daily:
        month = day_of(row.start).replace(day=1)
        by_month[(month, row.namespace, row.resource, row.flavor, row.team_id)] += row.covered_hours
    months_with_days = {
        day_of(start).replace(day=1) for start in days.values_list("start", flat=True).distinct()
    }
    monthly = []
    for row in rows.filter(period="month", guarantee_hours__gt=0):
        if row.start in months_with_days:
            key = (row.start, row.namespace, row.resource, row.flavor, row.team_id)
            row.covered_hours = by_month.get(key, Decimal(0))
            monthly.append(row)
    rollup.objects.bulk_update(monthly, ["covered_hours"], batch_size=2000)


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0005_workloads"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
