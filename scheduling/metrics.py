"""Prometheus metrics of shares and syncs, read from the database at scrape time.

:class:`ShareMetrics` yields the sections of /metrics this app owns: the latest share
computation, the shares' health (``scheduling.health.share_health``) and the newest syncs.
``portal.metrics`` composes them with monitoring's sections (the list of metrics is there).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import Metric

from monitoring.metrics import gauge, number, timestamp
from scheduling.choices import SyncStatus
from scheduling.health import share_health
from scheduling.models import ShareComputation, ShareSnapshot, SyncRun


class ShareMetrics:
    """The share and sync sections of /metrics, each a method yielding its gauges."""

    def shares(self) -> Iterator[Metric]:
        dominant = gauge(
            "fairshare_dominant_share",
            "Dominant share of current usage (0-1); resource is the dominant resource.",
            ["team", "resource"],
        )
        fair = gauge("fairshare_fair_share", "Dominant share of the DRF fair allocation.", ["team"])
        allocation = gauge(
            "fairshare_fair_allocation",
            "DRF fair allocation (base units).",
            ["team", "resource"],
        )
        computed = gauge(
            "fairshare_shares_computed_timestamp_seconds",
            "Time of the latest share computation.",
            [],
        )
        latest = ShareComputation.objects.order_by("-computed_at", "-id").values("id")[:1]
        rows = (
            ShareSnapshot.objects.filter(computation=latest)
            .values_list(
                "team__slug",
                "computed_at",
                "dominant_share",
                "dominant_resource",
                "fair_share",
                "fair_allocation",
            )
            .order_by("team__slug")
        )
        when = None
        for slug, computed_at, share, resource, fair_share, fair_allocation in rows:
            when = computed_at
            dominant.add_metric([slug, resource or ""], share)
            fair.add_metric([slug], fair_share)
            for name, amount in sorted((fair_allocation or {}).items()):
                allocation.add_metric([slug, name], number(amount))
        yield dominant
        yield fair
        yield allocation
        if when is not None:
            computed.add_metric([], timestamp(when))
        yield computed

    def share_health(self) -> Iterator[Metric]:

        health = share_health()  # two queries
        stale = gauge(
            "fairshare_shares_stale",
            "1 while the fair shares are stale: a computation failed after the latest success.",
            [],
        )
        stale.add_metric([], 1 if health.stale else 0)
        failures = gauge(
            "fairshare_share_failures",
            "Failed share computations since the latest successful one.",
            [],
        )
        failures.add_metric([], health.failures)
        since = gauge(
            "fairshare_shares_stale_since_timestamp_seconds",
            "Time of the first failed share computation since the latest success.",
            [],
        )
        if health.stale and health.since is not None:
            since.add_metric([], timestamp(health.since))
        last_ok = gauge(
            "fairshare_shares_last_success_timestamp_seconds",
            "Time of the latest successful share computation.",
            [],
        )
        if health.last_good is not None:
            last_ok.add_metric([], timestamp(health.last_good.computed_at))
        yield stale
        yield failures
        yield since
        yield last_ok

    def sync(self, now: datetime) -> Iterator[Metric]:
        success = gauge(
            "fairshare_sync_success", "1 if the newest finished sync succeeded, else 0.", []
        )
        finished = gauge(
            "fairshare_sync_last_finished_timestamp_seconds", "When the newest sync finished.", []
        )
        age = gauge("fairshare_sync_age_seconds", "Seconds since the newest sync finished.", [])
        last_ok = gauge(
            "fairshare_sync_last_success_timestamp_seconds",
            "When the newest successful sync finished.",
            [],
        )
        runs = SyncRun.objects.filter(dry_run=False, finished_at__isnull=False)
        newest = (
            runs.filter(status__in=[SyncStatus.SUCCEEDED, SyncStatus.FAILED])
            .order_by("-finished_at", "-id")
            .values_list("status", "finished_at")
            .first()
        )
        if newest is not None:
            status, finished_at = newest
            success.add_metric([], 1 if status == SyncStatus.SUCCEEDED else 0)
            finished.add_metric([], timestamp(finished_at))
            age.add_metric([], max(0.0, (now - finished_at).total_seconds()))
        good = (
            runs.filter(status=SyncStatus.SUCCEEDED)
            .order_by("-finished_at")
            .values_list("finished_at", flat=True)
            .first()
        )
        if good is not None:
            last_ok.add_metric([], timestamp(good))
        yield success
        yield finished
        yield age
        yield last_ok
