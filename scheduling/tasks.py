"""Celery tasks of the scheduling app: thin wrappers around services (STYLE §7)."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from kube.errors import K8sTransient

log = logging.getLogger(__name__)


@shared_task(
    bind=True,
    name="scheduling.tasks.sync_cluster",
    autoretry_for=(K8sTransient,),
    retry_backoff=True,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=3,
)
def sync_cluster(
    self: Any,
    run_id: int | None = None,
    dry_run: bool = False,
    trigger: str = "schedule",
    teams: list[str] | None = None,
    queues: bool = False,
    quota_requests: list[int] | None = None,
) -> dict[str, Any]:
    """Run the sync ``run_id``; without one (beat, quota changes) create a run and enqueue it.

    ``teams`` (slugs) / ``queues`` make the created run a targeted sync (see
    ``scheduling.desired.sync_scope``); the beat's sync is always a full one.
    ``quota_requests`` (ids) are the approved requests the created run applies.

    Dispatching through ``start_sync`` keeps "one task message = one SyncRun": a retry of this
    task (only on K8sTransient: the API server was unreachable) claims the same run again, which
    ``run_sync`` put back in the queue. The last retry leaves the run FAILED.
    With ``FAIRSHARE_CLUSTER=disabled`` dispatches are skipped (there is no cluster to sync; a
    sync started from the UI or API still gets a run that fails with a clear error).
    """
    from scheduling import sync

    if run_id is None:
        if str(getattr(settings, "FAIRSHARE_CLUSTER", "")) == "disabled":
            log.info("Kubernetes access is disabled; %s sync skipped", trigger)
            return {"run_id": None, "status": "skipped"}
        run = sync.start_sync(
            dry_run=dry_run,
            trigger=trigger,
            teams=teams,
            queues=queues,
            quota_requests=quota_requests,
        )
        return {"run_id": run.pk, "status": run.status}
    run = sync.run_sync(run_id, requeue_on_transient=self.request.retries < self.max_retries)
    return {"run_id": run.pk, "status": run.status}


@shared_task(name="scheduling.tasks.compute_shares")
def compute_shares(trigger: str = "schedule") -> dict[str, Any]:
    """Recompute every team's fair share (beat, and after quota changes)."""
    from scheduling import services
    from scheduling.exceptions import NoCapacity, ShareProblemError

    try:
        computation = services.compute_shares(trigger=trigger)
    except NoCapacity:
        # A fresh install before the first usage collection: nothing to share yet, and the
        # sync chained after this task must still run.
        log.info("No cluster capacity collected yet; share computation skipped")
        return {"computation_id": None, "teams": 0, "status": "skipped"}
    except ShareProblemError as e:
        # Recorded as a ShareFailure by the service (shares are stale); not raised, so the
        # sync chained after this task still applies quotas and RBAC, with the last good
        # fair allocation for the Queues' deserved.
        log.error("Share computation failed: %s", e)
        return {"computation_id": None, "teams": 0, "status": "failed", "error": str(e)}
    return {"computation_id": computation.pk, "teams": computation.teams}


@shared_task(name="scheduling.tasks.prune_history")
def prune_history() -> dict[str, int]:
    """Bound share and sync history (beat, daily)."""
    from scheduling import health, services, sync

    return {
        "share_computations": services.prune_share_history(
            keep_days=settings.FAIRSHARE_SHARE_HISTORY_DAYS
        ),
        "share_failures": health.prune_share_failures(
            keep_days=settings.FAIRSHARE_SHARE_HISTORY_DAYS
        ),
        "sync_runs": sync.prune_sync_history(keep_days=settings.FAIRSHARE_SYNC_HISTORY_DAYS),
    }


@shared_task(name="scheduling.tasks.advance_transitions")
def advance_transitions() -> dict[str, Any]:
    """Complete the waiting transitions the latest workload collection no longer blocks, and
    sync the teams they concern (beat, at the collection's pace)."""
    from scheduling import transitions
    from scheduling.sync import start_sync

    done = transitions.advance_transitions()
    if done.completed:  # already sorted and unique
        start_sync(trigger="transition", teams=list(done.completed))
    return {"completed": list(done.completed), "waiting": done.waiting}
