"""Prometheus metrics, read from the database at scrape time.

:class:`FairshareCollector` is a custom ``prometheus_client`` collector registered on its own
``CollectorRegistry`` (no process/GC metrics of whichever worker served the scrape: the numbers
are the cluster's, not the web process's). A scrape runs a constant number of queries (17),
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
* ``fairshare_pending_workloads{team,queue}``, ``fairshare_pending_workload_gpus{team,queue}``:
  waiting workloads (gangs, Volcano Jobs, owner groups) of the latest collection and the GPUs
  they still need admitted (a waiting gang: all of it); ``queue`` is "" outside Volcano queues
* ``fairshare_dominant_share{team,resource}`` (resource = the dominant one),
  ``fairshare_fair_share{team}``, ``fairshare_fair_allocation{team,resource}``: the latest
  ShareComputation, if any; ``fairshare_shares_computed_timestamp_seconds``
* ``fairshare_shares_stale``: 1 while the fair shares are stale (a computation failed after the
  latest successful one, ``scheduling.health.share_health``), else 0;
  ``fairshare_share_failures``: failed computations since the latest success;
  ``fairshare_shares_stale_since_timestamp_seconds`` (only while stale: the first failure) and
  ``fairshare_shares_last_success_timestamp_seconds`` (once one succeeded)
* Per GPU, the newest sample of each GPU that reported within the collection window
  (:func:`monitoring.services.gpu_reporting_window`, two minutes by default), labelled
  ``node``, ``gpu`` (the index), ``uuid``, ``model``, ``namespace`` and ``team``:
  ``fairshare_gpu_device_utilization_percent``, ``fairshare_gpu_device_memory_used_percent``
  (memory used ÷ total × 100) and ``fairshare_gpu_device_temperature_celsius``. A GPU no pod
  uses has empty ``namespace`` and ``team``; a pod in a namespace no team owns has
  ``team="unassigned"``. A value the GPU does not report (MIG: no utilization) has no series.
  One series per GPU and metric: 1,000 GPUs are 1,000 series each (docs/operations.md). The
  PrometheusRule's recording rules map these, or DCGM exporter's ``DCGM_FI_DEV_GPU_UTIL``,
  ``DCGM_FI_DEV_FB_USED``/``FREE`` and ``DCGM_FI_DEV_GPU_TEMP``, onto the names its alerts read.
* Per team, over the same samples: ``fairshare_gpu_utilization_percent{team}`` (mean),
  ``fairshare_gpus_reporting{team}``, ``fairshare_gpu_memory_used_max_percent{team}`` and
  ``fairshare_gpu_temperature_max_celsius{team}`` (the fullest and the hottest GPU); GPUs no pod
  uses count under ``unassigned``
* ``fairshare_team_info{team,name,leads,url}`` (1 per active team; ``leads``: the active leads'
  emails, or usernames where no email is set, comma-separated; ``url``: the team page) and
  ``fairshare_namespace_info{namespace,team}``: what the alerts' annotations and the DCGM
  recording rules join on (``deploy/monitoring/prometheusrule.yaml``)
* ``fairshare_idle_gpus{team}``: GPUs in open idle alerts
* ``fairshare_budget_hours{team,resource}``, ``fairshare_budget_used_hours{team,resource}``:
  month-to-date from hourly rollups (the current hour is not in yet)
* ``fairshare_sync_success``: 1 if the newest finished (non-dry-run) sync succeeded, else 0;
  ``fairshare_sync_last_finished_timestamp_seconds``, ``fairshare_sync_age_seconds``,
  ``fairshare_sync_last_success_timestamp_seconds``
* ``fairshare_transition_waiting{team,kind}``: 1 per team change waiting for workloads to
  finish (``quotas.transitions``); ``fairshare_transition_blocking_workloads{team,kind}``: the
  PodGroups it waits for; ``fairshare_transition_waiting_seconds{team,kind}``: since when
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Sum
from django.urls import reverse
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from monitoring.choices import AlertStatus, RollupPeriod
from monitoring.domain.gpu_alerts import memory_percent
from monitoring.models import (
    CapacitySnapshot,
    GpuSample,
    IdleGpuAlert,
    UsageRollup,
    UsageSample,
    Workload,
)
from quotas.choices import MembershipRole
from quotas.models import Budget, Membership, Namespace, Team, TeamQuota

UNASSIGNED = "unassigned"
GPU_LABELS = ["node", "gpu", "uuid", "model", "namespace", "team"]


def _num(value: Decimal | str | float | int) -> float:
    return float(Decimal(str(value)))


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class FairshareCollector(Collector):
    """Yield Fairshare's gauges from the database; ``now`` is injectable for tests."""

    def __init__(self, now=None):
        self._now = now

    def collect(self) -> Iterator[Metric]:
        now = self._now() if self._now else timezone.now()
        yield from self._quotas()
        yield from self._usage()
        yield from self._capacity()
        yield from self._workloads()
        yield from self._shares()
        yield from self._share_health()
        yield from self._gpus(now)
        yield from self._teams()
        yield from self._idle()
        yield from self._budgets(now)
        yield from self._sync(now)
        yield from self._transitions(now)

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

    def _workloads(self) -> Iterator[Metric]:
        count = _gauge(
            "fairshare_pending_workloads",
            "Waiting workloads at the latest collection.",
            ["team", "queue"],
        )
        gpus = _gauge(
            "fairshare_pending_workload_gpus",
            "GPUs the waiting workloads still need admitted (whole gangs), latest collection.",
            ["team", "queue"],
        )
        latest = Workload.objects.order_by("-taken_at").values("taken_at")[:1]
        rows = (
            Workload.objects.filter(taken_at=latest, waiting=True)
            .values("team__slug", "queue")
            .annotate(n=Count("id"), g=Sum("waiting_gpus"))
            .order_by("team__slug", "queue")
        )
        for row in rows:
            labels = [row["team__slug"] or UNASSIGNED, row["queue"]]
            count.add_metric(labels, row["n"])
            gpus.add_metric(labels, row["g"] or 0)
        yield count
        yield gpus

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

    def _share_health(self) -> Iterator[Metric]:
        from scheduling.health import share_health

        health = share_health()  # two queries
        stale = _gauge(
            "fairshare_shares_stale",
            "1 while the fair shares are stale: a computation failed after the latest success.",
            [],
        )
        stale.add_metric([], 1 if health.stale else 0)
        failures = _gauge(
            "fairshare_share_failures",
            "Failed share computations since the latest successful one.",
            [],
        )
        failures.add_metric([], health.failures)
        since = _gauge(
            "fairshare_shares_stale_since_timestamp_seconds",
            "Time of the first failed share computation since the latest success.",
            [],
        )
        if health.stale and health.since is not None:
            since.add_metric([], _ts(health.since))
        last_ok = _gauge(
            "fairshare_shares_last_success_timestamp_seconds",
            "Time of the latest successful share computation.",
            [],
        )
        if health.last_good is not None:
            last_ok.add_metric([], _ts(health.last_good.computed_at))
        yield stale
        yield failures
        yield since
        yield last_ok

    # ---------------------------------------------------------------- GPUs and budgets

    def _gpus(self, now: datetime) -> Iterator[Metric]:
        from monitoring.services import gpu_reporting_window

        window = gpu_reporting_window()
        util = _gauge(
            "fairshare_gpu_device_utilization_percent",
            "GPU utilization of the GPU's newest sample (percent).",
            GPU_LABELS,
        )
        memory = _gauge(
            "fairshare_gpu_device_memory_used_percent",
            "GPU memory used / total of the GPU's newest sample (percent).",
            GPU_LABELS,
        )
        temperature = _gauge(
            "fairshare_gpu_device_temperature_celsius",
            "GPU temperature of the GPU's newest sample (degrees Celsius).",
            GPU_LABELS,
        )
        team_util = _gauge(
            "fairshare_gpu_utilization_percent",
            "Mean utilization of the team's GPUs (newest sample of each).",
            ["team"],
        )
        reporting = _gauge(
            "fairshare_gpus_reporting", "GPUs with a sample in the collection window.", ["team"]
        )
        team_memory = _gauge(
            "fairshare_gpu_memory_used_max_percent",
            "Memory used / total of the team's fullest GPU (percent).",
            ["team"],
        )
        team_temperature = _gauge(
            "fairshare_gpu_temperature_max_celsius",
            "Temperature of the team's hottest GPU (degrees Celsius).",
            ["team"],
        )
        # Ordered by time: the last row of each GPU is its newest sample.
        newest: dict[str, tuple] = {}
        rows = (
            GpuSample.objects.filter(taken_at__gte=now - window, taken_at__lte=now)
            .order_by("uuid", "taken_at")
            .values_list(
                "uuid",
                "node",
                "index",
                "model",
                "namespace",
                "team__slug",
                "util_gpu",
                "mem_used",
                "mem_total",
                "temp_c",
            )
        )
        for row in rows.iterator(chunk_size=5000):
            newest[row[0]] = row
        per_team: dict[str, list[tuple]] = defaultdict(list)
        for uuid, node, index, model, namespace, slug, u, used, total, temp in sorted(
            newest.values(), key=lambda r: (r[1], r[2], r[0])
        ):
            team = slug or (UNASSIGNED if namespace else "")
            labels = [node, str(index), uuid, model, namespace, team]
            mem = memory_percent(used, total)
            for family, value in ((util, u), (memory, mem), (temperature, temp)):
                if value is not None:
                    family.add_metric(labels, value)
            per_team[team or UNASSIGNED].append((u, mem, temp))
        for team, values in sorted(per_team.items()):
            reporting.add_metric([team], len(values))
            for family, i, reduce in (
                (team_util, 0, _mean),
                (team_memory, 1, max),
                (team_temperature, 2, max),
            ):
                known = [v[i] for v in values if v[i] is not None]
                if known:
                    family.add_metric([team], reduce(known))
        yield util
        yield memory
        yield temperature
        yield team_util
        yield reporting
        yield team_memory
        yield team_temperature

    def _teams(self) -> Iterator[Metric]:
        info = _gauge(
            "fairshare_team_info",
            "1 per active team: display name, leads to contact, team page.",
            ["team", "name", "leads", "url"],
        )
        namespaces = _gauge(
            "fairshare_namespace_info",
            "1 per namespace: the team that owns it.",
            ["namespace", "team"],
        )
        leads: dict[str, list[str]] = defaultdict(list)
        for slug, email, username in Membership.objects.filter(
            role=MembershipRole.LEAD, user__is_active=True, team__active=True
        ).values_list("team__slug", "user__email", "user__username"):
            leads[slug].append(email or username)
        base = settings.FAIRSHARE_BASE_URL.rstrip("/")
        for slug, name in (
            Team.objects.filter(active=True).order_by("slug").values_list("slug", "name")
        ):
            url = base + reverse("portal:team", args=[slug])
            info.add_metric([slug, name, ", ".join(sorted(set(leads[slug]))), url], 1)
        for name, slug in Namespace.objects.order_by("name").values_list("name", "team__slug"):
            namespaces.add_metric([name, slug], 1)
        yield info
        yield namespaces

    def _transitions(self, now: datetime) -> Iterator[Metric]:
        from quotas.choices import TransitionState
        from quotas.models import Transition

        labels = ["team", "kind"]
        waiting = _gauge(
            "fairshare_transition_waiting",
            "1 per team change that waits for workloads in the cluster to finish.",
            labels,
        )
        blocking = _gauge(
            "fairshare_transition_blocking_workloads",
            "PodGroups a waiting team change waits for.",
            labels,
        )
        age = _gauge(
            "fairshare_transition_waiting_seconds",
            "How long a team change has been waiting.",
            labels,
        )
        for slug, kind, count, since in (
            Transition.objects.filter(state=TransitionState.WAITING)
            .order_by("team__slug")
            .values_list("team__slug", "kind", "blocking", "since")
        ):
            waiting.add_metric([slug, kind], 1)
            blocking.add_metric([slug, kind], count)
            age.add_metric([slug, kind], max(0.0, (now - since).total_seconds()))
        yield waiting
        yield blocking
        yield age

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
