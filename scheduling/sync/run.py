"""The service: ``run_sync`` carries out one queued run from claim to record (the steps of
``scheduling.sync``), with its progress heartbeat; plus reading a run's items back and pruning
old runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from kube.errors import K8sError, K8sTransient
from scheduling import namespace_guard
from scheduling.backend import current_backend
from scheduling.choices import SyncAction, SyncStatus
from scheduling.desired import build_cluster_spec, sync_scope
from scheduling.domain.plan import (
    Change,
    plan,
)
from scheduling.exceptions import SyncError
from scheduling.models import SyncItem, SyncRun
from scheduling.sync.flight import (
    RedisLock,
    claim_run,
    dispatch_follow_up,
    lock_url,
    wait_for_holder,
)
from scheduling.sync.planning import (
    LAST_APPLIED_ANNOTATION,
    PLAN_ONLY,
    build_client,
    cluster_mode,
    describe_scope,
    observe_live,
    parse_live_quantity,
    run_scope,
    scheduler_notes,
    share_source,
    snapshot_live,
    with_last_applied,
)
from scheduling.sync.progress import Progress
from scheduling.sync.recording import Phases, finish_run, record_run
from scheduling.sync.runs import reap_stale_runs
from scheduling.sync.writers import Outcome, apply_all

log = logging.getLogger(__name__)


def advance_transitions_first(api_client: Any, notes: list[str]) -> tuple[str, ...]:
    """Complete the waiting transitions the live PodGroups no longer block (one LIST), before
    the desired state is read, so that this run renders what the cluster may take on now;
    return the teams (cluster names) they concern. Without a PodGroup API (Volcano not
    installed) the latest workload collection decides."""
    from quotas.transitions import waiting
    from scheduling.transitions import advance_transitions, live_podgroup_queues

    if not waiting().exists():
        return ()
    try:
        queues = live_podgroup_queues(api_client)
    except K8sError as e:
        log.info("cannot list PodGroups (%s); transitions use the latest collection", e)
        queues = None
    done = advance_transitions(queues)
    if done.completed:
        notes.append(f"Transitions completed for {', '.join(done.completed)}.")
    if done.waiting:
        notes.append(f"{done.waiting} transition(s) wait for workloads to finish.")
    return done.completed


# --------------------------------------------------------------------------- the service


def run_sync(run_id: int, *, api_client: Any = None, requeue_on_transient: bool = False) -> SyncRun:
    """Carry out the queued sync run ``run_id`` (see ``scheduling.sync``'s docstring) and return it.

    ``api_client`` overrides the client built from ``FAIRSHARE_CLUSTER`` (tests, benchmarks).
    Returns the run untouched if it is not queued (claimed elsewhere, merged or finished), or
    still QUEUED ("Waiting") if another sync holds the lock: that sync enqueues the follow-up
    when it finishes, and the follow-up merges every pending request. Raises (after recording
    the failure on the run) when the run could not be carried out: K8sTransient when the API
    server is unreachable — with ``requeue_on_transient`` the run goes back to QUEUED instead of
    FAILED so the task's retry can claim it again — K8sError/SyncError/ValueError otherwise.
    """
    now = timezone.now()
    reap_stale_runs(now=now, exclude=run_id)
    url = lock_url()
    lock: RedisLock | None = None
    if url:
        # Lock first, then claim: whoever holds the lock is the one run that merges pending
        # requests, and a request that finds the lock taken is always seen by the holder's
        # follow-up check (its row was committed before its message was sent).
        if not SyncRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED).exists():
            log.info("sync run #%s is not queued: nothing to do", run_id)
            return SyncRun.objects.select_related("requested_by").get(pk=run_id)
        lock = RedisLock(url)
        try:
            holder = lock.acquire(run_id)
        except SyncError as e:
            lock.close()
            run = SyncRun.objects.get(pk=run_id)
            if run.status == SyncStatus.QUEUED:
                finish_run(run, status=SyncStatus.FAILED, error=str(e))
            raise
        if holder is not None:
            lock.close()
            return wait_for_holder(run_id, holder)
        claimed, holder = claim_run(run_id, database_lock=False, now=now)
    else:
        claimed, holder = claim_run(run_id, database_lock=True, now=now)
        if holder is not None:
            return wait_for_holder(run_id, holder)
    run = SyncRun.objects.select_related("requested_by").get(pk=run_id)
    if not claimed:
        log.info("sync run #%s is %s, not queued: nothing to do", run_id, run.status)
        if lock is not None:
            lock.release()
            dispatch_follow_up()
        return run
    try:
        return _run_claimed(run, api_client, lock)
    except K8sTransient as e:
        if requeue_on_transient:
            log.warning("sync run #%s: %s; requeued for a retry", run_id, e)
            finish_run(run, status=SyncStatus.QUEUED, error=f"Retrying after: {e}")
        else:
            finish_run(run, status=SyncStatus.FAILED, error=str(e))
        raise
    except Exception as e:
        # Recorded, then re-raised for the caller (NetBox JobRunner discipline).
        log.exception("sync run #%s failed", run_id)
        finish_run(run, status=SyncStatus.FAILED, error=str(e) or repr(e))
        raise
    finally:
        if lock is not None:
            lock.release()
        dispatch_follow_up(exclude=run_id)


def _run_claimed(run: SyncRun, api_client: Any, lock: RedisLock | None) -> SyncRun:
    started = time.monotonic()
    phases = Phases()
    progress = Progress(run, lock)
    notes: list[str] = []
    mode, arg = cluster_mode()
    snapshot = api_client is None and mode == "snapshot"
    own_client = api_client is None and not snapshot
    if snapshot:
        run.dry_run = True
        notes.append(
            f"{PLAN_ONLY}: FAIRSHARE_CLUSTER=snapshot:{arg} is a file, not an API server, so "
            "this run was planned against the objects in that snapshot and nothing was "
            "applied. Export the manifests for a GitOps tool with "
            "`manage.py export_manifests --out DIR`."
        )
    if own_client:
        api_client = build_client()
    scope = run_scope(run.scope)
    notes += share_source(run)
    phases.done("start")
    try:
        if not run.dry_run and not snapshot:
            done = advance_transitions_first(api_client, notes)
            if scope is not None and set(done) - scope.teams:
                scope = sync_scope(scope.teams | set(done), queues=scope.queues)
        backend = current_backend()
        if scope is None:
            spec = build_cluster_spec(computation_id=run.share_computation_id)
            manifests = backend.render(spec)
        else:
            spec = build_cluster_spec(
                # Every Queue: every tree (namespaces are read, only the teams' rendered).
                within=None if scope.queues else scope.trees,
                computation_id=run.share_computation_id,
            )
            rendered = backend.render(spec, namespaces_of=scope.teams)
            manifests = [m for m in rendered if scope.covers(m)]
        notes += backend.notes(spec)
        desired = [with_last_applied(m) for m in manifests]
        phases.done("render")
        if snapshot:
            live = [
                o
                for o in snapshot_live(arg)
                if o.get("kind") in backend.kinds and (scope is None or scope.covers(o))
            ]
        else:
            live = observe_live(api_client, progress, scope=scope)
        phases.done("read")
        changes = plan(
            desired,
            live,
            parse_quantity=parse_live_quantity,
            prune_namespaces=bool(getattr(settings, "FAIRSHARE_SYNC_PRUNE_NAMESPACES", False)),
            last_applied_annotation=LAST_APPLIED_ANNOTATION,
        )
        if scope is not None:
            notes.append(describe_scope(scope))
        notes.append(
            f"{len(desired)} desired, {len(live)} live objects"
            + (" (dry run: nothing applied)" if run.dry_run and not snapshot else "")
        )
        if not snapshot and scope is None:
            notes += scheduler_notes(api_client, desired)
        progress.start(len(changes))
        index = {_key(obj): obj for obj in live}
        phases.done("plan")
        refused: list[tuple[Change, str]] = []
        notes += namespace_guard.protected_notes(None if scope is None else scope.teams)
        if not snapshot:  # namespaces Fairshare did not create (scheduling.namespace_guard)
            changes, refused = namespace_guard.guard(api_client, changes)
        outcomes = apply_all(api_client, changes, index, dry_run=run.dry_run, progress=progress)
        outcomes += [_refused(change, why) for change, why in refused]
        phases.done("write")
        return record_run(run, outcomes, notes=notes, started=started, phases=phases)
    finally:
        if own_client:
            api_client.close()


def _refused(change: Change, why: str) -> Outcome:
    outcome = Outcome(change, action=SyncAction.FAILED, error=why)
    outcome.describe()
    return outcome


def _key(obj: Mapping[str, Any]) -> tuple[str, str | None, str]:
    metadata = obj.get("metadata") or {}
    return (str(obj.get("kind")), metadata.get("namespace") or None, str(metadata.get("name")))


def iter_changes(run: SyncRun) -> Iterator[SyncItem]:
    """The run's items that are not ``unchanged``, in the order they were applied."""
    return run.items.exclude(action=SyncAction.UNCHANGED).order_by("id").iterator()


def prune_sync_history(
    *, keep_days: int = 14, keep_last: int = 20, now: datetime | None = None
) -> int:
    """Delete finished sync runs (their items cascade) older than ``keep_days``; return how many.

    Every run stores one item per object, so history grows with cluster size × schedule; the
    newest ``keep_last`` finished runs are always kept, however old, for the Sync page.
    """
    cutoff = (now or timezone.now()) - timedelta(days=keep_days)
    finished = SyncRun.objects.filter(status__in=[SyncStatus.SUCCEEDED, SyncStatus.FAILED])
    newest = finished.order_by("-created", "-id").values("id")[:keep_last]
    old = finished.filter(created__lt=cutoff).exclude(id__in=newest)
    with transaction.atomic():
        _, per_model = old.delete()
    return per_model.get(SyncRun._meta.label, 0)
