"""Prometheus metrics, read from the database at scrape time.

:class:`FairshareCollector` is a custom ``prometheus_client`` collector registered on its own
``CollectorRegistry`` (no process/GC metrics of whichever worker served the scrape: the numbers
are the cluster's, not the web process's). A scrape runs a constant number of queries (10),
whatever the number of teams, resources or GPUs. Amounts are in base units (cores, bytes,
devices); ``team="unassigned"`` collects namespaces no team owns. /metrics is an operator
endpoint (``FAIRSHARE_METRICS_TOKEN`` or loopback: an admin credential), so it carries every team
whatever ``FAIRSHARE_SHARE_VISIBILITY`` says (scheduling.visibility); dashboards built on it for
teams should filter by team when visibility is ``own``.

Metrics (gauges):

* ``fairshare_quota_guarantee{team,resource}``, ``fairshare_quota_limit{team,resource}``
  (teams without a ceiling have no limit series)
* ``fairshare_allocated{team,resource}``, ``fairshare_pending{team,resource}``: the latest
  collection; ``fairshare_usage_collected_timestamp_seconds``
* ``fairshare_cluster_capacity{resource}``: the latest capacity snapshot
* ``fairshare_dominant_share{team,resource}`` (resource = the dominant one),
  ``fairshare_fair_share{team}``, ``fairshare_fair_allocation{team,resource}``: the latest
  ShareComputation, if any; ``fairshare_shares_computed_timestamp_seconds``
* ``fairshare_gpu_utilization_percent{team}``: mean of each GPU's newest sample of the last
  two minutes; ``fairshare_gpus_reporting{team}``
* ``fairshare_idle_gpus{team}``: GPUs in open idle alerts
* ``fairshare_budget_hours{team,resource}``, ``fairshare_budget_used_hours{team,resource}``:
  month-to-date from hourly rollups (the current hour is not in yet)
* ``fairshare_sync_success``: 1 if the newest finished (non-dry-run) sync succeeded, else 0;
  ``fairshare_sync_last_finished_timestamp_seconds``, ``fairshare_sync_age_seconds``,
  ``fairshare_sync_last_success_timestamp_seconds``
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from monitoring.choices import AlertStatus, RollupPeriod
from monitoring.models import CapacitySnapshot, GpuSample, IdleGpuAlert, UsageRollup, UsageSample
from quotas.models import Budget, TeamQuota

UNASSIGNED = "unassigned"
GPU_FRESHNESS = timedelta(minutes=2)


def _num(value: Decimal | str | float | int) -> float:
    return float(Decimal(str(value)))


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class FairshareCollector(Collector):
    """Yield Fairshare's gauges from the database; ``now`` is injectable for tests."""

    def __init__(self, now=None):
        self._now = now

    def collect(self) -> Iterator[Metric]:
        now = self._now() if self._now else timezone.now()
        yield from self._quotas()
        yield from self._usage()
        yield from self._capacity()
        yield from self._shares()
        yield from self._gpus(now)
        yield from self._idle()
        yield from self._budgets(now)
        yield from self._sync(now)

    # ---------------------------------------------------------------- quotas and usage

    def _quotas(self) -> Iterator[Metric]:
        guarantee = _gauge(
            "fairshare_quota_guarantee", "Reserved minimum (base units).", ["team", "resource"]
        )
        limit = _gauge("fairshare_quota_limit", "Ceiling (base units).", ["team", "resource"])
        rows = TeamQuota.objects.filter(team__active=True).values_list(
            "team__slug", "resource", "guarantee", "limit"
        )
        for slug, resource, g, lim in rows.order_by("team__slug", "resource"):
            guarantee.add_metric([slug, resource], _num(g))
            if lim is not None:
                limit.add_metric([slug, resource], _num(lim))
        yield guarantee
        yield limit

    def _usage(self) -> Iterator[Metric]:
        allocated = _gauge(
            "fairshare_allocated",
            "Requests of bound pods at the latest collection (base units).",
            ["team", "resource"],
        )
        pending = _gauge(
            "fairshare_pending",
            "Requests of unscheduled pods at the latest collection (base units).",
            ["team", "resource"],
        )
        collected = _gauge(
            "fairshare_usage_collected_timestamp_seconds", "Time of the latest collection.", []
        )
        latest = UsageSample.objects.order_by("-taken_at").values("taken_at")[:1]
        rows = (
            UsageSample.objects.filter(taken_at=latest)
            .values("taken_at", "team__slug", "resource")
            .annotate(a=Sum("allocated"), p=Sum("pending"))
            .order_by("team__slug", "resource")
        )
        when = None
        for row in rows:
            when = row["taken_at"]
            team = row["team__slug"] or UNASSIGNED
            allocated.add_metric([team, row["resource"]], _num(row["a"]))
            pending.add_metric([team, row["resource"]], _num(row["p"]))
        yield allocated
        yield pending
        if when is not None:
            collected.add_metric([], _ts(when))
        yield collected

    def _capacity(self) -> Iterator[Metric]:
        capacity = _gauge(
            "fairshare_cluster_capacity",
            "Allocatable of Ready, schedulable nodes (base units).",
            ["resource"],
        )
        snapshot = CapacitySnapshot.objects.order_by("-taken_at", "-id").first()
        if snapshot is not None:
            for resource, amount in sorted(snapshot.resources.items()):
                capacity.add_metric([resource], _num(amount))
        yield capacity

    def _shares(self) -> Iterator[Metric]:
        from scheduling.models import ShareComputation, ShareSnapshot

        dominant = _gauge(
            "fairshare_dominant_share",
            "Dominant share of current usage (0-1); resource is the dominant resource.",
            ["team", "resource"],
        )
        fair = _gauge(
            "fairshare_fair_share", "Dominant share of the DRF fair allocation.", ["team"]
        )
        allocation = _gauge(
            "fairshare_fair_allocation",
            "DRF fair allocation (base units).",
            ["team", "resource"],
        )
        computed = _gauge(
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
                allocation.add_metric([slug, name], _num(amount))
        yield dominant
        yield fair
        yield allocation
        if when is not None:
            computed.add_metric([], _ts(when))
        yield computed

    # ---------------------------------------------------------------- GPUs and budgets

    def _gpus(self, now: datetime) -> Iterator[Metric]:
        utilization = _gauge(
            "fairshare_gpu_utilization_percent",
            "Mean utilization of the team's GPUs (newest sample of each, last 2 minutes).",
            ["team"],
        )
        reporting = _gauge(
            "fairshare_gpus_reporting", "GPUs with a sample in the last 2 minutes.", ["team"]
        )
        newest: dict[str, tuple] = {}
        rows = (
            GpuSample.objects.filter(taken_at__gte=now - GPU_FRESHNESS, taken_at__lte=now)
            .order_by("uuid", "taken_at")
            .values_list("uuid", "team__slug", "util_gpu")
        )
        for uuid, slug, util in rows:
            newest[uuid] = (slug or UNASSIGNED, util)
        per_team: dict[str, list] = defaultdict(list)
        for slug, util in newest.values():
            per_team[slug].append(util)
        for slug, utils in sorted(per_team.items()):
            reporting.add_metric([slug], len(utils))
            known = [u for u in utils if u is not None]
            if known:
                utilization.add_metric([slug], sum(known) / len(known))
        yield utilization
        yield reporting

    def _idle(self) -> Iterator[Metric]:
        idle = _gauge("fairshare_idle_gpus", "GPUs in open idle-GPU alerts.", ["team"])
        rows = (
            IdleGpuAlert.objects.filter(status=AlertStatus.OPEN)
            .values("team__slug")
            .annotate(n=Sum("gpus"))
            .order_by("team__slug")
        )
        for row in rows:
            idle.add_metric([row["team__slug"]], row["n"] or 0)
        yield idle

    def _budgets(self, now: datetime) -> Iterator[Metric]:
        from monitoring.services import month_start

        budget = _gauge(
            "fairshare_budget_hours", "Monthly budget in resource-hours.", ["team", "resource"]
        )
        used = _gauge(
            "fairshare_budget_used_hours",
            "Allocated resource-hours this month (complete hours, from rollups).",
            ["team", "resource"],
        )
        totals = {
            (row["team_id"], row["resource"]): row["h"]
            for row in UsageRollup.objects.filter(
                period=RollupPeriod.HOUR, start__gte=month_start(now), team__isnull=False
            )
            .values("team_id", "resource")
            .annotate(h=Sum("allocated_hours"))
            .order_by()
        }
        rows = Budget.objects.values_list("team_id", "team__slug", "resource", "monthly_hours")
        for team_id, slug, resource, hours in rows.order_by("team__slug", "resource"):
            budget.add_metric([slug, resource], _num(hours))
            used.add_metric([slug, resource], _num(totals.get((team_id, resource)) or 0))
        yield budget
        yield used

    # ---------------------------------------------------------------- sync

    def _sync(self, now: datetime) -> Iterator[Metric]:
        from scheduling.choices import SyncStatus
        from scheduling.models import SyncRun

        success = _gauge(
            "fairshare_sync_success", "1 if the newest finished sync succeeded, else 0.", []
        )
        finished = _gauge(
            "fairshare_sync_last_finished_timestamp_seconds", "When the newest sync finished.", []
        )
        age = _gauge("fairshare_sync_age_seconds", "Seconds since the newest sync finished.", [])
        last_ok = _gauge(
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
            finished.add_metric([], _ts(finished_at))
            age.add_metric([], max(0.0, (now - finished_at).total_seconds()))
        good = (
            runs.filter(status=SyncStatus.SUCCEEDED)
            .order_by("-finished_at")
            .values_list("finished_at", flat=True)
            .first()
        )
        if good is not None:
            last_ok.add_metric([], _ts(good))
        yield success
        yield finished
        yield age
        yield last_ok


def build_registry(now=None) -> CollectorRegistry:
    """A fresh registry holding only :class:`FairshareCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairshareCollector(now=now))
    return registry
