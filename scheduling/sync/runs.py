"""Starting a sync run (a queued ``SyncRun``, its task enqueued after commit) and reaping the
stale ones (a worker lost while running, a message lost while queued).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from quotas.models import QuotaRequest
from scheduling.choices import SyncStatus
from scheduling.models import SyncRun

log = logging.getLogger(__name__)

SYNC_TASK = "scheduling.tasks.sync_cluster"  # the task that runs a queued SyncRun


# --------------------------------------------------------------------------- starting a run


def scope_of(teams: Iterable[str] | None, *, queues: bool = False) -> dict[str, Any]:
    """A run's stored scope: ``{}`` for a full sync, ``{"teams": [...], "queues": bool}`` for a
    targeted one (``queues``: every Queue as well, after a share computation)."""
    slugs = sorted({str(t) for t in teams or () if t})
    if not slugs and not queues:
        return {}
    return {"teams": slugs, "queues": True} if queues else {"teams": slugs}


def create_run(
    *,
    dry_run: bool = False,
    trigger: str = "manual",
    requested_by: Any = None,
    teams: Iterable[str] | None = None,
    queues: bool = False,
    quota_requests: Iterable[int] | None = None,
) -> SyncRun:
    """Create a QUEUED SyncRun without enqueueing it (``manage.py sync`` runs it in-process).

    ``teams`` (slugs) makes it a targeted sync of those teams, ``queues`` adds every Queue
    (both unset: a full sync). ``quota_requests`` (ids) are the approved requests it applies
    (ids of requests deleted meanwhile are skipped).
    """
    run = SyncRun.objects.create(
        dry_run=dry_run,
        trigger=trigger[:64],
        requested_by=requested_by,
        scope=scope_of(teams, queues=queues),
    )
    if quota_requests:
        run.quota_requests.set(QuotaRequest.objects.filter(pk__in=list(quota_requests)))
    return run


def start_sync(
    *,
    dry_run: bool = False,
    trigger: str = "manual",
    requested_by: Any = None,
    teams: Iterable[str] | None = None,
    queues: bool = False,
    quota_requests: Iterable[int] | None = None,
) -> SyncRun:
    """Create a QUEUED SyncRun and enqueue ``sync_cluster`` for it after commit; return the run.

    If the broker cannot take the message, the run is marked FAILED with the reason (the beat
    schedule syncs again later), so it never sits in the queue forever.
    """
    run = create_run(
        dry_run=dry_run,
        trigger=trigger,
        requested_by=requested_by,
        teams=teams,
        queues=queues,
        quota_requests=quota_requests,
    )
    transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def sync_task():
    """The ``sync_cluster`` Celery task, looked up by name in the app's registry (the task
    module imports this one; importing it back would be a circle)."""
    from celery import current_app

    return current_app.tasks[SYNC_TASK]


def _enqueue(run_id: int) -> None:
    from kombu.exceptions import OperationalError

    try:
        sync_task().delay(run_id=run_id)
    except (OperationalError, OSError) as e:
        log.exception("could not enqueue sync run #%s", run_id)
        SyncRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED).update(
            status=SyncStatus.FAILED,
            finished_at=timezone.now(),
            error=f"Could not enqueue the sync (task broker unavailable): {e}",
        )


# --------------------------------------------------------------------------- stale runs


def reap_stale_runs(*, now: datetime | None = None, exclude: int | None = None) -> int:
    """Mark runs abandoned by a lost worker FAILED; return how many.

    RUNNING with a heartbeat (or start) older than ``FAIRSHARE_SYNC_STALE_AFTER`` seconds →
    "worker lost"; a QUEUED *dry run* older than that → "never started". A queued sync is not
    reaped: it is a pending request (the "dirty" state) that the next run to take the lock
    merges and carries out, however its message or worker was lost. ``exclude`` is spared
    (the run about to be claimed).
    """
    now = now or timezone.now()
    stale_after = int(getattr(settings, "FAIRSHARE_SYNC_STALE_AFTER", 600))
    cutoff = now - timedelta(seconds=stale_after)
    running = SyncRun.objects.filter(status=SyncStatus.RUNNING, heartbeat_at__lt=cutoff)
    queued = SyncRun.objects.filter(status=SyncStatus.QUEUED, dry_run=True, created__lt=cutoff)
    if exclude is not None:
        running, queued = running.exclude(pk=exclude), queued.exclude(pk=exclude)
    lost = running.update(
        status=SyncStatus.FAILED,
        finished_at=now,
        error=f"Worker lost: no heartbeat for more than {stale_after} s. The next sync re-plans "
        "from the live state.",
    )
    never = queued.update(
        status=SyncStatus.FAILED,
        finished_at=now,
        error=f"Never started: still queued after {stale_after} s (message or worker lost).",
    )
    if lost or never:
        log.warning("reaped %d lost and %d never-started sync runs", lost, never)
    return lost + never
