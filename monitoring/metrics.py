"""Prometheus metrics of tenancy and usage, read from the database at scrape time.

:class:`UsageMetrics` yields the sections of /metrics this app owns: quotas, usage, capacity,
waiting workloads, GPUs, team and namespace info, idle GPUs, budgets and waiting transitions.
The shares and syncs are scheduling's (``scheduling.metrics``); ``portal.metrics`` composes
the exposition and lists every metric. ``gauge``, ``number`` and ``timestamp`` are the helpers
each section uses, shared with ``scheduling.metrics``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Sum
from django.urls import reverse
from prometheus_client.core import GaugeMetricFamily, Metric

from monitoring.choices import AlertStatus
from monitoring.domain.gpu_alerts import memory_percent
from monitoring.models import (
    CapacitySnapshot,
    GpuSample,
    IdleGpuAlert,
    UsageSample,
    Workload,
)
from quotas.choices import MembershipRole
from quotas.models import Membership, Namespace, Team, TeamQuota

UNASSIGNED = "unassigned"
GPU_LABELS = ["node", "gpu", "uuid", "model", "namespace", "team"]


def number(value: Decimal | str | float | int) -> float:
    return float(Decimal(str(value)))


def timestamp(moment: datetime) -> float:
    return moment.timestamp()


def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class UsageMetrics:
    """The tenancy and usage sections of /metrics, each a method yielding its gauges from the
    database (``portal.metrics`` composes them with scheduling's into the exposition)."""

    # ---------------------------------------------------------------- quotas and usage

    def quotas(self) -> Iterator[Metric]:
        guarantee = gauge(
            "fairshare_quota_guarantee", "Reserved minimum (base units).", ["team", "resource"]
        )
        limit = gauge("fairshare_quota_limit", "Ceiling (base units).", ["team", "resource"])
        rows = TeamQuota.objects.filter(team__active=True).values_list(
            "team__slug", "resource", "guarantee", "limit"
        )
        for slug, resource, g, lim in rows.order_by("team__slug", "resource"):
            guarantee.add_metric([slug, resource], number(g))
            if lim is not None:
                limit.add_metric([slug, resource], number(lim))
        yield guarantee
        yield limit

    def usage(self) -> Iterator[Metric]:
        allocated = gauge(
            "fairshare_allocated",
            "Requests of bound pods at the latest collection (base units).",
            ["team", "resource"],
        )
        pending = gauge(
            "fairshare_pending",
            "Requests of unscheduled pods at the latest collection (base units).",
            ["team", "resource"],
        )
        collected = gauge(
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
            allocated.add_metric([team, row["resource"]], number(row["a"]))
            pending.add_metric([team, row["resource"]], number(row["p"]))
        yield allocated
        yield pending
        if when is not None:
            collected.add_metric([], timestamp(when))
        yield collected

    def workloads(self) -> Iterator[Metric]:
        count = gauge(
            "fairshare_pending_workloads",
            "Waiting workloads at the latest collection.",
            ["team", "queue"],
        )
        gpus = gauge(
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

    def capacity(self) -> Iterator[Metric]:
        capacity = gauge(
            "fairshare_cluster_capacity",
            "Allocatable of Ready, schedulable nodes (base units).",
            ["resource"],
        )
        snapshot = CapacitySnapshot.objects.order_by("-taken_at", "-id").first()
        if snapshot is not None:
            for resource, amount in sorted(snapshot.resources.items()):
                capacity.add_metric([resource], number(amount))
        yield capacity

    # ---------------------------------------------------------------- GPUs and budgets

    def gpus(self, now: datetime) -> Iterator[Metric]:
        from monitoring.gpu_alerts import gpu_reporting_window

        window = gpu_reporting_window()
        util = gauge(
            "fairshare_gpu_device_utilization_percent",
            "GPU utilization of the GPU's newest sample (percent).",
            GPU_LABELS,
        )
        memory = gauge(
            "fairshare_gpu_device_memory_used_percent",
            "GPU memory used / total of the GPU's newest sample (percent).",
            GPU_LABELS,
        )
        temperature = gauge(
            "fairshare_gpu_device_temperature_celsius",
            "GPU temperature of the GPU's newest sample (degrees Celsius).",
            GPU_LABELS,
        )
        team_util = gauge(
            "fairshare_gpu_utilization_percent",
            "Mean utilization of the team's GPUs (newest sample of each).",
            ["team"],
        )
        reporting = gauge(
            "fairshare_gpus_reporting", "GPUs with a sample in the collection window.", ["team"]
        )
        team_memory = gauge(
            "fairshare_gpu_memory_used_max_percent",
            "Memory used / total of the team's fullest GPU (percent).",
            ["team"],
        )
        team_temperature = gauge(
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

    def teams(self) -> Iterator[Metric]:
        info = gauge(
            "fairshare_team_info",
            "1 per active team: display name, leads to contact, team page.",
            ["team", "name", "leads", "url"],
        )
        namespaces = gauge(
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

    def transitions(self, now: datetime) -> Iterator[Metric]:
        from quotas.choices import TransitionState
        from quotas.models import Transition

        labels = ["team", "kind"]
        waiting = gauge(
            "fairshare_transition_waiting",
            "1 per team change that waits for workloads in the cluster to finish.",
            labels,
        )
        blocking = gauge(
            "fairshare_transition_blocking_workloads",
            "PodGroups a waiting team change waits for.",
            labels,
        )
        age = gauge(
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

    def idle(self) -> Iterator[Metric]:
        idle = gauge("fairshare_idle_gpus", "GPUs in open idle-GPU alerts.", ["team"])
        rows = (
            IdleGpuAlert.objects.filter(status=AlertStatus.OPEN)
            .values("team__slug")
            .annotate(n=Sum("gpus"))
            .order_by("team__slug")
        )
        for row in rows:
            idle.add_metric([row["team__slug"]], row["n"] or 0)
        yield idle

    def budgets(self, now: datetime) -> Iterator[Metric]:
        from monitoring.budgets import budget_cutoff, budget_use

        budget = gauge(
            "fairshare_budget_hours", "Monthly budget in resource-hours.", ["team", "resource"]
        )
        allocated = gauge(
            "fairshare_budget_allocated_hours",
            "Budget use: allocated resource-hours this month up to the budget cut-off.",
            ["team", "resource"],
        )
        used = gauge(
            "fairshare_budget_used_hours",
            "Deprecated name of fairshare_budget_allocated_hours (the same value).",
            ["team", "resource"],
        )
        cutoff = gauge(
            "fairshare_budget_cutoff_timestamp_seconds",
            "The instant budget use counts up to: the end of the newest rolled-up hour.",
            [],
        )
        uses = budget_use(now=now)
        for use in uses:
            labels = [use.team.slug, use.resource]
            budget.add_metric(labels, number(use.budget_hours))
            allocated.add_metric(labels, number(use.allocated_hours))
            used.add_metric(labels, number(use.allocated_hours))
        cutoff.add_metric([], (uses[0].cutoff if uses else budget_cutoff(now=now)).timestamp())
        yield budget
        yield allocated
        yield used
        yield cutoff
