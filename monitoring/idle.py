"""Idle-GPU detection: GPUs held by a pod whose utilization stayed under the threshold for the
whole window open (or extend) an ``IdleGpuAlert`` and tell the team; alerts whose GPU is busy
again or gone resolve."""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from monitoring.choices import AlertStatus
from monitoring.models import (
    GpuSample,
    IdleGpuAlert,
)
from monitoring.notify import notify_team
from monitoring.units import gpu_agent_interval

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- idle GPUs


@dataclass(frozen=True)
class IdleGpu:
    uuid: str
    node: str
    namespace: str
    pod: str
    team_id: int
    since: datetime
    avg_utilization: float


@dataclass(frozen=True)
class IdleResult:
    idle_gpus: int
    opened: list[int]
    extended: list[int]
    resolved: list[int]


def find_idle_gpus(*, now: datetime, threshold: float, window: timedelta) -> list[IdleGpu]:
    """Return the GPUs idle for the whole window ending at ``now``.

    A GPU is idle when, over its samples from the last one at or before ``now − window``
    until ``now``:

    1. the window is full: such a sample exists (a GPU observed for less than the window is
       not judged yet);
    2. it still reports: the newest sample is at most 2 × the agent interval old;
    3. there is no gap longer than 2 × the agent interval (missing data is not idleness);
    4. every sample is attributed to the same pod of a known team;
    5. every sample's ``util_gpu`` is known and strictly under ``threshold`` (a GPU exactly at
       the threshold is not idle).
    """
    cap = 2 * gpu_agent_interval()
    window_start = now - window
    rows = (
        GpuSample.objects.filter(taken_at__gte=window_start - cap, taken_at__lte=now)
        .order_by("uuid", "taken_at")
        .values_list("uuid", "taken_at", "util_gpu", "node", "namespace", "pod", "team_id")
    )
    idle: list[IdleGpu] = []
    group: list[tuple] = []
    for row in rows.iterator(chunk_size=5000):
        if group and group[0][0] != row[0]:
            idle.extend(_judge(group, now, window_start, cap, threshold))
            group = []
        group.append(row)
    if group:
        idle.extend(_judge(group, now, window_start, cap, threshold))
    return idle


def _judge(group, now, window_start, cap, threshold) -> list[IdleGpu]:
    first = max((i for i, row in enumerate(group) if row[1] <= window_start), default=None)
    if first is None:
        return []
    samples = group[first:]
    if now - samples[-1][1] > cap:
        return []
    uuid, _, _, node, namespace, pod, team_id = samples[0]
    for previous, row in itertools.pairwise(samples):
        if row[1] - previous[1] > cap:
            return []
    for row in samples:
        if row[2] is None or row[2] >= threshold:
            return []
        if (row[4], row[5], row[6]) != (namespace, pod, team_id) or not pod or team_id is None:
            return []
    average = sum(row[2] for row in samples) / len(samples)
    return [IdleGpu(uuid, node, namespace, pod, team_id, samples[0][1], average)]


def _suggestion(
    *, gpus: int, node: str, namespace: str, pod: str, avg: float, minutes: int, threshold: float
) -> str:
    return (
        f"{gpus} GPU(s) on node {node} allocated to pod {namespace}/{pod} averaged "
        f"{avg:.1f} % utilization over the last {minutes} minutes (idle threshold "
        f"{threshold:g} %). Release them for other teams: stop or scale down the workload "
        f"(kubectl -n {namespace} delete pod {pod}), or request fewer GPUs per pod."
    )


def detect_idle_gpus(*, now: datetime | None = None) -> IdleResult:
    """Open, extend and resolve IdleGpuAlerts; notify a team's leads once per new alert.

    GPUs found by :func:`find_idle_gpus` (``FAIRSHARE_IDLE_GPU_THRESHOLD`` %,
    ``FAIRSHARE_IDLE_GPU_WINDOW_MINUTES``) are grouped per team, namespace, pod and node: one
    alert each. An open alert for the same group is extended (``last_seen_at``, GPU count and
    average updated); otherwise one is opened with a reclaim suggestion. Open alerts whose group
    is no longer idle are resolved. Notifications go out after the commit, claimed with a
    conditional update on ``notified_at`` so two concurrent runs never send the same one twice.
    """
    now = now or timezone.now()
    threshold = float(settings.FAIRSHARE_IDLE_GPU_THRESHOLD)
    minutes = int(settings.FAIRSHARE_IDLE_GPU_WINDOW_MINUTES)
    idle = find_idle_gpus(now=now, threshold=threshold, window=timedelta(minutes=minutes))
    groups: dict[tuple[int, str, str, str], list[IdleGpu]] = defaultdict(list)
    for gpu in idle:
        groups[(gpu.team_id, gpu.namespace, gpu.pod, gpu.node)].append(gpu)

    opened, extended, resolved = [], [], []
    with transaction.atomic():
        open_alerts = {
            (a.team_id, a.namespace, a.pod, a.node): a
            for a in IdleGpuAlert.objects.select_for_update().filter(status=AlertStatus.OPEN)
        }
        for key, gpus in sorted(groups.items()):
            team_id, namespace, pod, node = key
            avg = round(sum(g.avg_utilization for g in gpus) / len(gpus), 2)
            text = _suggestion(
                gpus=len(gpus),
                node=node,
                namespace=namespace,
                pod=pod,
                avg=avg,
                minutes=minutes,
                threshold=threshold,
            )
            alert = open_alerts.pop(key, None)
            if alert is not None:
                alert.last_seen_at = now
                alert.gpus = len(gpus)
                alert.avg_utilization = avg
                alert.suggestion = text
                alert.save(update_fields=["last_seen_at", "gpus", "avg_utilization", "suggestion"])
                extended.append(alert.pk)
            else:
                alert = IdleGpuAlert.objects.create(
                    team_id=team_id,
                    namespace=namespace,
                    pod=pod,
                    node=node,
                    gpus=len(gpus),
                    avg_utilization=avg,
                    started_at=min(g.since for g in gpus),
                    last_seen_at=now,
                    suggestion=text,
                )
                opened.append(alert.pk)
        stale = [a.pk for a in open_alerts.values()]
        if stale:
            IdleGpuAlert.objects.filter(pk__in=stale).update(status=AlertStatus.RESOLVED)
            resolved.extend(stale)

    for alert in IdleGpuAlert.objects.filter(
        status=AlertStatus.OPEN, notified_at__isnull=True
    ).select_related("team"):
        claimed = IdleGpuAlert.objects.filter(pk=alert.pk, notified_at__isnull=True).update(
            notified_at=now
        )
        if claimed:
            notify_team(
                alert.team,
                subject=f"{alert.gpus} idle GPU(s) in {alert.namespace}",
                body=alert.suggestion,
            )
    if opened or resolved:
        logger.info(
            "idle GPUs: %d idle, alerts opened %s, extended %s, resolved %s",
            len(idle),
            opened,
            extended,
            resolved,
        )
    return IdleResult(len(idle), opened, extended, resolved)
