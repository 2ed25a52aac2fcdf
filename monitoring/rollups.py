"""Rollups: hourly and daily ``UsageRollup`` rows from the samples (by the integration rule of
``monitoring.integration``), monthly rows as sums of the daily ones, the guarantee each hour
covered, and pruning of raw samples past their retention."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, DecimalField, F, FloatField, IntegerField, Max, Q, Sum, When
from django.db.models.functions import Coalesce, Least, TruncMonth
from django.utils import timezone

from monitoring.choices import RollupPeriod
from monitoring.integration import BucketKey, add_guarantees, integrate_usage
from monitoring.models import (
    CapacitySnapshot,
    GpuDevice,
    GpuSample,
    GpuSampleRejection,
    UsageRollup,
    UsageSample,
)
from monitoring.units import DAY, HOUR, floor_day, floor_hour, month_start

logger = logging.getLogger(__name__)

_ROLLUP_LOCK_KEY = 0x0FA1_0B5E  # advisory lock id for "rollup buckets"


# --------------------------------------------------------------------------- rollups


@dataclass(frozen=True)
class RollupResult:
    start: datetime
    end: datetime
    hourly: int
    daily: int
    monthly: int = 0


def _rollup_lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ROLLUP_LOCK_KEY])


def rollup_usage(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
    collect_every: timedelta | None = None,
    gpu_every: timedelta | None = None,
) -> RollupResult:
    """Recompute hourly rollups for [start, end), daily rollups for the days it touches and
    monthly rollups for the months those days are in.

    Windows are aligned to whole UTC hours (``start`` floored, ``end`` floored and never past
    the current hour, which is still filling). Defaults: ``end`` = the start of the current
    hour; ``start`` = two hours earlier, or the hour after the newest hourly rollup if that is
    older (catching up after an outage, back to the raw retention at most).

    Idempotent: the window's hourly buckets, the touched days' daily buckets and the touched
    months' monthly buckets are deleted and recreated in one transaction (serialized by an
    advisory lock on PostgreSQL), so running it twice gives the same rows, and re-running a past
    window picks up late GPU samples. Daily rows are sums of the hourly rows, monthly rows sums
    of the daily rows (``rollup_months``); ``avg_utilization`` is weighted by ``samples`` (GPU
    readings behind each hour's average). ``collect_every``/``gpu_every``: the cadence the
    window's samples were taken at, when it is not the configured one (``integrate_usage``).
    """
    now = now or timezone.now()
    current = floor_hour(now)
    end = min(floor_hour(end), current) if end is not None else current
    if start is None:
        start = end - 2 * HOUR
        latest = UsageRollup.objects.filter(period=RollupPeriod.HOUR).aggregate(t=Max("start"))["t"]
        oldest_raw = now - timedelta(days=settings.FAIRSHARE_RETENTION_RAW_DAYS)
        if latest is not None and latest + HOUR < start:
            start = max(latest + HOUR, floor_hour(oldest_raw))
    start = floor_hour(start)
    if start >= end:
        return RollupResult(start, end, 0, 0)

    acc = integrate_usage(
        start, end, now=now, size=HOUR, collect_every=collect_every, gpu_every=gpu_every
    )
    buckets = []
    moment = start
    while moment < end:
        buckets.append(moment)
        moment += HOUR
    add_guarantees(acc, buckets, HOUR)
    hourly = cover_guarantees(
        [item.to_rollup(RollupPeriod.HOUR, key) for key, item in sorted(acc.items())]
    )

    first_day, last_day = floor_day(start), floor_day(end - timedelta(microseconds=1))
    with transaction.atomic():
        _rollup_lock()
        UsageRollup.objects.filter(
            period=RollupPeriod.HOUR, start__gte=start, start__lt=end
        ).delete()
        UsageRollup.objects.bulk_create(hourly, batch_size=2000)
        daily = _daily_rows(first_day, last_day + DAY)
        UsageRollup.objects.filter(
            period=RollupPeriod.DAY, start__gte=first_day, start__lt=last_day + DAY
        ).delete()
        UsageRollup.objects.bulk_create(daily, batch_size=2000)
        monthly = rollup_months(first_day, last_day + DAY)
    logger.info(
        "rolled up %s..%s: %d hourly, %d daily and %d monthly rows",
        start.isoformat(),
        end.isoformat(),
        len(hourly),
        len(daily),
        monthly,
    )
    return RollupResult(start, end, len(hourly), len(daily), monthly)


def cover_guarantees(rows: list[UsageRollup]) -> list[UsageRollup]:
    """Set ``covered_hours`` on one hour's (or one day's) rows: per team, resource and bucket,
    min(guarantee, the team's allocated hours over all its namespaces and flavors), on the rows
    that carry the guarantee (the team's first namespace, flavor ""); 0 on the others.

    A guarantee is a team-level figure while allocation rows are per namespace and flavor (GPUs
    are allocated under their product, the guarantee row has none), so min(guarantee, allocated)
    per row would miss the allocation and call the whole guarantee unused. Returns ``rows``.
    """
    allocated: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row.team_id is not None:
            allocated[(row.start, row.team_id, row.resource)] += row.allocated_hours
    for row in sorted(rows, key=lambda r: (r.start, r.namespace, r.flavor)):
        row.covered_hours = Decimal(0)
        if row.team_id is None or not row.guarantee_hours:
            continue
        key = (row.start, row.team_id, row.resource)
        row.covered_hours = min(row.guarantee_hours, allocated[key])
        allocated[key] -= row.covered_hours
    return rows


def _next_month(moment: datetime) -> datetime:
    return moment.replace(year=moment.year + moment.month // 12, month=moment.month % 12 + 1)


_DEC = DecimalField(max_digits=40, decimal_places=6)


def rollup_months(start: datetime, end: datetime) -> int:
    """Recompute the monthly rollups of every UTC month overlapping [start, end) from the daily
    rollups; return the number of monthly rows written.

    Whole months are deleted and recreated (one aggregate query, grouped in SQL), inside the
    caller's transaction if there is one, else in its own, under the rollup lock, so running it
    again changes nothing. ``rollup_usage`` calls it for the months it touched; call it directly
    to backfill months whose daily rows were written some other way (e.g. before monthly
    rollups existed): the chargeback report reads a month from monthly rows as soon as that
    month has any, so they must be complete.

    One row per month, namespace, resource, flavor and team: the sums of the daily rows, plus
    ``covered_hours`` = Σ min(guarantee, allocated) and ``busy_hours`` = Σ min(allocated, used)
    over the days (the per-day floors of the chargeback report). ``samples`` and
    ``avg_utilization`` combine like hours into days: the samples-weighted mean of the days
    that have one.
    """
    first = month_start(start)
    stop = _next_month(month_start(end - timedelta(microseconds=1)))
    with transaction.atomic():
        _rollup_lock()
        UsageRollup.objects.filter(
            period=UsageRollup.MONTH, start__gte=first, start__lt=stop
        ).delete()
        rows = _monthly_rows(first, stop)
        UsageRollup.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _postgres() -> bool:
    """Whether SQL sums are exact here (PostgreSQL ``numeric``); elsewhere they are summed in
    Python (``_monthly_rows_in_python``), with the same results."""
    return connection.vendor == "postgresql"


def _monthly_rows(first: datetime, stop: datetime) -> list[UsageRollup]:
    if not _postgres():
        return _monthly_rows_in_python(first, stop)
    with_util = Q(avg_utilization__isnull=False, samples__gt=0)
    sums = (
        UsageRollup.objects.filter(period=RollupPeriod.DAY, start__gte=first, start__lt=stop)
        .order_by()
        .annotate(month=TruncMonth("start", tzinfo=UTC))
        .values("month", "namespace", "resource", "flavor", "team_id")
        .annotate(
            a=Sum("allocated_hours"),
            p=Sum("pending_hours"),
            u=Sum("used_hours"),
            g=Sum("guarantee_hours"),
            covered=Sum(
                Coalesce(
                    "covered_hours",
                    Least("guarantee_hours", "allocated_hours", output_field=_DEC),
                    output_field=_DEC,
                )
            ),
            busy=Sum(Least("allocated_hours", "used_hours", output_field=_DEC)),
            util=Sum(
                Case(
                    When(with_util, then=F("avg_utilization") * F("samples")),
                    default=None,
                    output_field=FloatField(),
                )
            ),
            n=Sum(Case(When(with_util, then=F("samples")), default=0), output_field=IntegerField()),
        )
        .order_by("month", "namespace", "resource", "flavor", "team_id")
    )
    return [
        UsageRollup(
            period=UsageRollup.MONTH,
            start=row["month"],
            namespace=row["namespace"],
            resource=row["resource"],
            flavor=row["flavor"],
            team_id=row["team_id"],
            allocated_hours=row["a"],
            pending_hours=row["p"],
            used_hours=row["u"],
            guarantee_hours=row["g"],
            covered_hours=row["covered"],
            busy_hours=row["busy"],
            avg_utilization=round(row["util"] / row["n"], 4) if row["n"] else None,
            samples=row["n"],
        )
        for row in sums
    ]


def _monthly_rows_in_python(first: datetime, stop: datetime) -> list[UsageRollup]:
    """The portable equivalent of ``_monthly_rows``' SQL (every database but PostgreSQL).

    The same grouping and sums, added up exactly in Python ``Decimal``: SQLite keeps decimals
    as floating point, and its ``sum()`` would round where PostgreSQL's ``numeric`` does not.
    """
    zero = Decimal(0)
    totals: dict[tuple, dict[str, Any]] = {}
    rows = UsageRollup.objects.filter(
        period=RollupPeriod.DAY, start__gte=first, start__lt=stop
    ).order_by()
    for row in rows.values(
        "start", "namespace", "resource", "flavor", "team_id", "allocated_hours",
        "pending_hours", "used_hours", "guarantee_hours", "covered_hours", "avg_utilization",
        "samples",
    ).iterator(chunk_size=5000):  # fmt: skip
        month = month_start(row["start"])
        key = (month, row["namespace"], row["resource"], row["flavor"], row["team_id"])
        t = totals.get(key)
        if t is None:
            t = totals[key] = dict.fromkeys(("a", "p", "u", "g", "covered", "busy"), zero)
            t |= {"util": None, "n": 0}
        a, u, g = row["allocated_hours"], row["used_hours"], row["guarantee_hours"]
        t["a"] += a
        t["p"] += row["pending_hours"]
        t["u"] += u
        t["g"] += g
        t["covered"] += min(g, a) if row["covered_hours"] is None else row["covered_hours"]
        t["busy"] += min(a, u)
        if row["avg_utilization"] is not None and row["samples"] > 0:
            t["util"] = (t["util"] or 0.0) + row["avg_utilization"] * row["samples"]
            t["n"] += row["samples"]
    return [
        UsageRollup(
            period=UsageRollup.MONTH,
            start=month,
            namespace=namespace,
            resource=resource,
            flavor=flavor,
            team_id=team_id,
            allocated_hours=t["a"],
            pending_hours=t["p"],
            used_hours=t["u"],
            guarantee_hours=t["g"],
            covered_hours=t["covered"],
            busy_hours=t["busy"],
            avg_utilization=round(t["util"] / t["n"], 4) if t["n"] else None,
            samples=t["n"],
        )
        for (month, namespace, resource, flavor, team_id), t in sorted(
            totals.items(), key=lambda item: (item[0][:4], item[0][4] or 0)
        )
    ]


def _daily_rows(first_day: datetime, stop: datetime) -> list[UsageRollup]:
    totals: dict[BucketKey, dict[str, Any]] = {}
    rows = UsageRollup.objects.filter(
        period=RollupPeriod.HOUR, start__gte=first_day, start__lt=stop
    ).values_list(
        "start",
        "namespace",
        "resource",
        "flavor",
        "team_id",
        "allocated_hours",
        "pending_hours",
        "used_hours",
        "guarantee_hours",
        "covered_hours",
        "avg_utilization",
        "samples",
    )
    for start, ns, res, flavor, team_id, alloc, pend, used, guar, cov, avg, samples in rows:
        key = (floor_day(start), ns, res, flavor)
        item = totals.setdefault(
            key,
            {"team_id": team_id, "sums": [Decimal(0)] * 5, "util": 0.0, "samples": 0},
        )
        item["team_id"] = item["team_id"] or team_id
        # An hour rolled up before covered hours existed covers min(G, A) of itself.
        covered = min(guar, alloc) if cov is None else cov
        for i, value in enumerate((alloc, pend, used, guar, covered)):
            item["sums"][i] += value
        if avg is not None and samples:
            item["util"] += avg * samples
            item["samples"] += samples
    return [
        UsageRollup(
            period=RollupPeriod.DAY,
            start=key[0],
            namespace=key[1],
            resource=key[2],
            flavor=key[3],
            team_id=item["team_id"],
            allocated_hours=item["sums"][0],
            pending_hours=item["sums"][1],
            used_hours=item["sums"][2],
            guarantee_hours=item["sums"][3],
            covered_hours=item["sums"][4],
            avg_utilization=round(item["util"] / item["samples"], 4) if item["samples"] else None,
            samples=item["samples"],
        )
        for key, item in sorted(totals.items())
    ]


def prune_samples(now: datetime | None = None) -> dict[str, int]:
    """Delete raw samples (and ingest rejection counts) past ``FAIRSHARE_RETENTION_RAW_DAYS``
    and hourly rollups past
    ``FAIRSHARE_RETENTION_HOURLY_DAYS``; daily and monthly rollups are kept. The newest
    CapacitySnapshot is always kept (quota capacity checks read it). Returns deleted counts per
    model."""
    now = now or timezone.now()
    raw_cutoff = now - timedelta(days=settings.FAIRSHARE_RETENTION_RAW_DAYS)
    hourly_cutoff = now - timedelta(days=settings.FAIRSHARE_RETENTION_HOURLY_DAYS)
    newest = CapacitySnapshot.objects.order_by("-taken_at", "-id").values_list("pk", flat=True)
    keep = list(newest[:1])
    deleted = {
        "usage_samples": UsageSample.objects.filter(taken_at__lt=raw_cutoff).delete()[0],
        "gpu_samples": GpuSample.objects.filter(taken_at__lt=raw_cutoff).delete()[0],
        "capacity_snapshots": CapacitySnapshot.objects.filter(taken_at__lt=raw_cutoff)
        .exclude(pk__in=keep)
        .delete()[0],
        "hourly_rollups": UsageRollup.objects.filter(
            period=RollupPeriod.HOUR, start__lt=hourly_cutoff
        ).delete()[0],
        "gpu_sample_rejections": GpuSampleRejection.objects.filter(hour__lt=raw_cutoff).delete()[0],
        "gpu_devices": GpuDevice.objects.filter(last_seen_at__lt=raw_cutoff).delete()[0],
    }
    if any(deleted.values()):
        logger.info("pruned %s", deleted)
    return deleted
