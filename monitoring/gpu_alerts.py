"""GPU alerts now: the PrometheusRule's GPU alerts (``monitoring.domain.gpu_alerts``) evaluated
on one team's samples, for the team page."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from monitoring.domain import gpu_alerts
from monitoring.models import (
    GpuSample,
)
from monitoring.units import gpu_agent_interval
from quotas.models import Team

# --------------------------------------------------------------------------- GPU alerts


def gpu_reporting_window() -> timedelta:
    """How long a GPU counts as reporting after its newest sample: two minutes, or two agent
    intervals where those are longer (``/metrics`` and the team page use the same window)."""
    return max(gpu_alerts.FRESHNESS, 2 * gpu_agent_interval())


@dataclass(frozen=True)
class GpuAlert:
    """A GPU alert of ``deploy/monitoring/prometheusrule.yaml`` that fires now for one GPU."""

    alert: str
    severity: str
    summary: str
    node: str
    index: int
    uuid: str
    model: str
    namespace: str
    pod: str
    value: float
    unit: str
    since: datetime


def current_gpu_alerts(*, team: Team, now: datetime | None = None) -> list[GpuAlert]:
    """Return the GPU alerts firing now for the GPUs the team's pods use, newest samples first.

    Evaluates :data:`monitoring.domain.gpu_alerts.GPU_ALERT_RULES` (the PrometheusRule's
    thresholds and ``for:`` durations) on each GPU's samples attributed to ``team`` over the
    longest ``for:`` plus the reporting window, the way Prometheus evaluates the ``/metrics``
    series (:func:`monitoring.domain.gpu_alerts.evaluate`). Samples of other teams are never
    read, so a GPU that changed teams only counts from its first sample for this team. Sorted
    by severity (critical first), then node, GPU index and alert name. One query.
    """
    now = now or timezone.now()
    window = gpu_reporting_window()
    rows = (
        GpuSample.objects.filter(
            team=team, taken_at__gte=now - gpu_alerts.LONGEST_FOR - window, taken_at__lte=now
        )
        .order_by("uuid", "taken_at")
        .values_list(
            "uuid",
            "taken_at",
            "node",
            "index",
            "model",
            "namespace",
            "pod",
            "util_gpu",
            "mem_used",
            "mem_total",
            "temp_c",
        )
    )
    found: list[GpuAlert] = []
    for uuid, group in itertools.groupby(rows.iterator(chunk_size=5000), key=lambda r: r[0]):
        samples = list(group)
        readings = [
            gpu_alerts.Reading(
                taken_at=r[1],
                utilization=r[7],
                memory_percent=gpu_alerts.memory_percent(r[8], r[9]),
                temperature=r[10],
                namespace=r[5],
                pod=r[6],
            )
            for r in samples
        ]
        _, _, node, index, model, namespace, pod, *_ = samples[-1]
        for firing in gpu_alerts.evaluate_all(readings, now=now, freshness=window):
            rule = firing.rule
            found.append(
                GpuAlert(
                    alert=rule.alert,
                    severity=rule.severity,
                    summary=rule.summary,
                    node=node,
                    index=index,
                    uuid=uuid,
                    model=model,
                    namespace=namespace,
                    pod=pod,
                    value=firing.value,
                    unit=rule.unit,
                    since=firing.since,
                )
            )
    severity_order = {"critical": 0, "warning": 1}
    found.sort(key=lambda a: (severity_order.get(a.severity, 2), a.node, a.index, a.alert))
    return found
