"""Celery tasks of the monitoring app: thin wrappers around its rooms (collection, rollups, idle,
budgets).

Arguments and results are JSON (ISO 8601 strings for times). Monitoring jobs do not write
``SyncRun`` rows: those record cluster syncs, and /metrics reports them as the sync status.
A failed collection is not retried by Celery: the beat runs it again a minute later, and the
collector already restarts a listing on transient API errors.
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.utils.dateparse import parse_datetime

from monitoring import budgets, collection, idle, rollups

logger = logging.getLogger(__name__)


def _when(value: str | None) -> datetime | None:
    if value is None:
        return None
    moment = parse_datetime(value)
    if moment is None:
        raise ValueError(f"not an ISO 8601 time: {value!r}")
    return moment


@shared_task(name="monitoring.tasks.collect_usage")
def collect_usage() -> dict:
    """Store one usage collection (beat, every minute); skipped when collection is disabled."""
    if settings.FAIRSHARE_CLUSTER == "disabled":
        return {"skipped": "FAIRSHARE_CLUSTER=disabled"}
    snapshot, samples = collection.collect_usage()
    return {"snapshot": snapshot.pk, "taken_at": snapshot.taken_at.isoformat(), "samples": samples}


@shared_task(name="monitoring.tasks.rollup_usage")
def rollup_usage(start: str | None = None, end: str | None = None) -> dict:
    """Roll raw samples up (beat, hourly) and prune past retention."""
    result = rollups.rollup_usage(start=_when(start), end=_when(end))
    pruned = rollups.prune_samples()
    return {
        "start": result.start.isoformat(),
        "end": result.end.isoformat(),
        "hourly": result.hourly,
        "daily": result.daily,
        "pruned": pruned,
    }


@shared_task(name="monitoring.tasks.detect_idle_gpus")
def detect_idle_gpus() -> dict:
    """Open, extend and resolve idle-GPU alerts (beat, every 5 minutes)."""
    result = idle.detect_idle_gpus()
    return {
        "idle_gpus": result.idle_gpus,
        "opened": result.opened,
        "extended": result.extended,
        "resolved": result.resolved,
    }


@shared_task(name="monitoring.tasks.check_budgets")
def check_budgets() -> dict:
    """Alert teams whose month-to-date usage crossed a budget threshold."""
    alerts = budgets.check_budgets()
    return {"alerts": [alert.pk for alert in alerts]}
