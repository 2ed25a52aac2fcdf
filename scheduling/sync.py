"""Cluster sync: make Kubernetes match the desired state, and record what was done (services).

``start_sync()`` creates a queued :class:`~scheduling.models.SyncRun` and enqueues the
``sync_cluster`` task after commit (the UI and API answer 202 with the run). ``run_sync()`` is
what the task (and ``manage.py sync``) calls: plan, apply, record.

How one run goes (``run_sync``)
===============================

1. Stale runs are reaped: a run RUNNING whose heartbeat is older than
   ``FAIRSHARE_SYNC_STALE_AFTER`` (a killed worker), or QUEUED for longer than that (a lost
   message), is marked FAILED with a "worker lost" / "never started" error.
2. The run is claimed with a conditional update (``queued → running``); a run already claimed by
   another worker (a redelivered message) is left alone.
3. Single flight that coalesces: one sync at a time per installation. With Redis
   (``REDIS_URL``, or a ``redis://`` Celery broker) a redis-py ``Lock`` is taken without
   blocking *before* the claim and extended on every heartbeat; without Redis (the embedded
   demo) the claim itself is the lock: claims are serialised (a PostgreSQL advisory transaction
   lock; SQLite serialises writers already) and a run that finds another RUNNING run with a
   fresh heartbeat does not start. A Redis lock held by a run that is finished (reaped in
   step 1: its worker died holding it) is abandoned and taken over.
   **A request that finds the lock taken is never dropped nor failed.** Its row stays QUEUED
   ("Waiting: sync #N is running") — that row *is* the dirty flag, in the database, so it
   works across workers and outlives any of them. The run that holds the lock, when it
   finishes (whatever the outcome), enqueues the oldest pending run; the run that claims next
   merges every pending sync into itself (they become MERGED, "Included in sync #M", with
   ``merged_into``) and plans the union of their scopes. So a burst of requests during one
   sync gives exactly one follow-up, which reads the database after all of them were queued.
   If the holder's worker dies, the rows stay QUEUED and the next run to take the lock (the
   next trigger, or the beat) merges them.
4. Desired state: ``desired.build_cluster_spec()`` → ``render()``. Each manifest gets the
   annotation ``fairshare.io/last-applied`` (the manifest itself, as compact JSON) so the next
   run can tell drift from a change of the desired state.
5. Live state: one paginated LIST per managed kind (label ``app.kubernetes.io/managed-by=
   fairshare``), each retried as a whole on transient errors.
6. ``plan()`` with quantities compared semantically; then every change is applied in plan order:
   create/update by server-side apply (field manager ``fairshare``; an update touching an
   immutable field — a RoleBinding's roleRef, a PriorityClass value — is delete + apply),
   prune by delete (already gone counts as pruned), unchanged objects are not touched, so a
   steady-state sync issues zero writes. Transient errors are retried per object by
   ``call_with_retry`` (honouring Retry-After). A write an admission webhook denied is tried
   again after the rest of its wave, bounded with backoff (Volcano's webhooks judge against a
   cache that can lag the writes just made). A Namespace is routed to a Queue the run creates
   only once that Queue is Open (one LIST per poll, bounded); see ``_apply_wave``.
   Before the desired state is read, waiting transitions (``quotas.transitions``) that the
   live PodGroups no longer block are completed, so the run renders what the cluster may take
   on now.
7. One SyncItem per object (unchanged ones too), the run's counters and status, and one
   ``sync`` AuditEvent (for a non-dry run that changed something) are written in a single
   transaction at the end; on PostgreSQL the items go in with one ``COPY``.

Outcomes (consistent everywhere):

* every object applied (or unchanged) → SUCCEEDED;
* some objects failed (422, 500 after retries, timeout, conflict) → those items are ``failed``
  with the error, all the others are still applied, and the run is **FAILED with its items**
  (``error`` says how many failed); the next run re-plans from the live state and retries them;
* the run could not be carried out at all — Kubernetes disabled or misconfigured, the API server
  unreachable (at LIST time, or three objects in a row without an answer while applying), a
  render error — → FAILED with the error and **no items** (nothing half-written); the exception
  is re-raised for the caller (the task retries transient ones).

Drift: an update of an object carrying our last-applied annotation whose live owned fields differ
from that annotation — someone edited it behind Fairshare's back. The item is flagged, the
drifted fields are listed in its diff, the run counts it, and the apply corrects it. An update
caused by a change of the desired state (a quota approval) is not drift.

Dry run: the same LIST and the same plan, nothing applied (not even ``dryRun=All``: a
server-side dry run of objects inside a namespace that does not exist yet would fail, and the
plan is the point). Items carry the planned action.

Modes (``FAIRSHARE_CLUSTER``): ``kubeconfig[:PATH]`` and ``in-cluster`` talk to the API server;
``disabled`` fails the run with a clear error; ``snapshot:PATH`` (the demo) has no API server:
the run becomes a dry run ("Plan only — no cluster connected") planned against the managed
objects in the snapshot file (what an earlier sync left there, as ``kubectl get -o json``
dumps them), so drift, updates and prunes show as they would on a cluster; nothing is written.
Like GitOps, the manifests are what ``manage.py export_manifests`` writes for a tool to apply.

Volcano Queues are pruned by a plain delete: the v1beta1 Queue has no ``spec.state`` (``state``
is status, set by Volcano's controller), and Volcano's admission webhook (≥ 1.15) refuses to
delete only the ``default``/``root`` queues (which the renderer never produces) and, for
hierarchical queues, a parent before its children — the plan prunes children first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from kube.apply import call_with_retry, delete, server_side_apply
from kube.client import KINDS, build_api_client
from kube.errors import K8sError, K8sNotFound, K8sTransient, is_webhook_denial
from kube.observe import MANAGED_SELECTOR, list_managed, managed_in_dump
from kube.scheduler_config import read_scheduler_config, scheduler_config_warnings
from quotas.choices import AuditVerb
from quotas.models import QuotaRequest
from quotas.quantities import parse_quantity as parse_db_quantity
from scheduling import namespace_guard
from scheduling.choices import SyncAction, SyncStatus
from scheduling.desired import SyncScope, build_cluster_spec, sync_scope
from scheduling.domain.plan import (
    Change,
    FieldDiff,
    Step,
    apply_waves,
    creation_diff,
    diff_object,
    plan,
    render_diff,
)
from scheduling.domain.render import LABEL_TEAM, render
from scheduling.exceptions import DomainError
from scheduling.models import SyncItem, SyncRun

__all__ = [
    "LAST_APPLIED_ANNOTATION",
    "SyncError",
    "create_run",
    "reap_stale_runs",
    "run_sync",
    "start_sync",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

LAST_APPLIED_ANNOTATION = "fairshare.io/last-applied"
PLAN_ONLY = "Plan only — no cluster connected"
# Three objects in a row without any HTTP answer (after retries) means the API server is gone,
# not that one object is slow: stop instead of waiting out every remaining object.
UNREACHABLE_AFTER = 3
PROGRESS_INTERVAL = 2.0  # seconds between progress/heartbeat writes
RETRY_ATTEMPTS = 5
_ADVISORY_LOCK_KEY = 0x0FA1_5C00  # "sync claims" (quotas uses 0x0FA125A5 for capacity)
SYNC_TASK = "scheduling.tasks.sync_cluster"  # the task that runs a queued SyncRun


class SyncError(DomainError):
    """A sync could not be carried out (the run records why)."""


# --------------------------------------------------------------------------- starting a run


def _scope(teams: Iterable[str] | None, *, queues: bool = False) -> dict[str, Any]:
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
        scope=_scope(teams, queues=queues),
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


def _sync_task():
    """The ``sync_cluster`` Celery task, looked up by name in the app's registry (the task
    module imports this one; importing it back would be a circle)."""
    from celery import current_app

    return current_app.tasks[SYNC_TASK]


def _enqueue(run_id: int) -> None:
    from kombu.exceptions import OperationalError

    try:
        _sync_task().delay(run_id=run_id)
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


# --------------------------------------------------------------------------- single flight


def _lock_url() -> str:
    url = getattr(settings, "REDIS_URL", "") or ""
    if url:
        return url
    broker = getattr(settings, "CELERY_BROKER_URL", "") or ""
    return broker if broker.startswith(("redis://", "rediss://")) else ""


def _lock_key() -> str:
    default = f"fairshare:sync-lock:{settings.DATABASES['default'].get('NAME', '')}"
    return str(getattr(settings, "FAIRSHARE_SYNC_LOCK_KEY", default))


# Delete the lock only if it still holds the token read before (compare-and-delete).
_DELETE_IF_UNCHANGED = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


class _RedisLock:
    """A non-blocking redis-py Lock whose token names the run holding it."""

    def __init__(self, url: str) -> None:
        import redis

        self._errors = (redis.exceptions.RedisError,)
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._key = _lock_key()
        timeout = int(getattr(settings, "FAIRSHARE_SYNC_LOCK_TIMEOUT", 900))
        self._lock = self._client.lock(self._key, timeout=timeout, blocking=False)

    def acquire(self, run_id: int) -> str | None:
        """Take the lock; return None on success, else who holds it (``sync #N``).

        The lock is taken before the run is claimed, so its holder is QUEUED (about to claim)
        or RUNNING. A lock whose holder is finished is abandoned — its worker was killed and the
        run reaped as "worker lost" (the lock outlives the stale window: it is extended to
        ``FAIRSHARE_SYNC_LOCK_TIMEOUT`` on every heartbeat) — and is taken over, if it still
        holds the same token, instead of making every sync wait until it expires.
        """
        token = f"{run_id}:{uuid.uuid4().hex}"
        try:
            if self._lock.acquire(blocking=False, token=token):
                return None
            holder = self._client.get(self._key)
            text = holder.decode() if isinstance(holder, bytes) else str(holder or "")
            number = text.split(":", 1)[0]
            if (
                number.isdigit()
                and not SyncRun.objects.filter(
                    pk=int(number), status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]
                ).exists()
                and self._client.eval(_DELETE_IF_UNCHANGED, 1, self._key, holder)
                and self._lock.acquire(blocking=False, token=token)
            ):
                log.warning("sync run #%s took over the lock abandoned by sync #%s", run_id, number)
                return None
        except self._errors as e:
            raise SyncError(f"Cannot take the sync lock in Redis ({_lock_url()}): {e}") from e
        return f"sync #{number}" if number.isdigit() else "another sync"

    def refresh(self) -> None:
        """Extend the lock to its full timeout; raise SyncError if it was lost meanwhile."""
        try:
            self._lock.reacquire()
        except self._errors as e:
            raise SyncError(
                "Lost the sync lock (expired or taken over); stopping so that two syncs never "
                f"run at once: {e}"
            ) from e

    def release(self) -> None:
        try:
            self._lock.release()
        except self._errors as e:
            log.warning("sync lock was already released or expired: %s", e)
        finally:
            self.close()

    def close(self) -> None:
        """Close the Redis connection (without releasing: for a lock we did not get)."""
        self._client.close()


def _serialize_claims() -> None:
    """Inside ``transaction.atomic``: make database claims one at a time (no-Redis fallback)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_LOCK_KEY])
    # SQLite runs IMMEDIATE transactions (settings): writers are serialised already.


def _claim(run_id: int, *, database_lock: bool, now: datetime) -> tuple[bool, str | None]:
    """Claim the run (queued → running) and merge every other pending sync into it.

    Return (claimed, holder): holder is set when the database lock says another run is in
    progress — the run is then left QUEUED, a pending request for the follow-up. A claimed
    sync (not a dry run) takes over every other QUEUED sync: they become MERGED "included in
    sync #N" and its scope becomes the union of theirs (any full one makes it full). Because
    the desired state is read after this commit, every change whose request was queued by now
    is seen by this run.
    """
    stale_after = int(getattr(settings, "FAIRSHARE_SYNC_STALE_AFTER", 600))
    with transaction.atomic():
        if database_lock:
            _serialize_claims()
            other = (
                SyncRun.objects.filter(
                    status=SyncStatus.RUNNING,
                    heartbeat_at__gte=now - timedelta(seconds=stale_after),
                )
                .exclude(pk=run_id)
                .order_by("pk")
                .values_list("pk", flat=True)
                .first()
            )
            if other is not None:
                return False, f"sync #{other}"
        run = SyncRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != SyncStatus.QUEUED:
            return False, None
        fields: dict[str, Any] = {
            "status": SyncStatus.RUNNING,
            "started_at": now,
            "heartbeat_at": now,
            "finished_at": None,
            "error": "",
            "worker": f"{socket.gethostname()}:{os.getpid()}"[:200],
        }
        if not run.dry_run:
            pending = list(
                SyncRun.objects.select_for_update()
                .filter(status=SyncStatus.QUEUED, dry_run=False)
                .exclude(pk=run_id)
                .order_by("pk")
            )
            if pending:
                fields["scope"] = _merged_scope([run.scope, *(p.scope for p in pending)])
                SyncRun.objects.filter(pk__in=[p.pk for p in pending]).update(
                    status=SyncStatus.MERGED,
                    merged_into=run_id,
                    finished_at=now,
                    heartbeat_at=now,
                    error="",
                    log=f"Included in sync #{run_id}: it was requested while another sync ran "
                    "(or before this one started) and is carried out by that run.",
                )
                _take_over_requests(run_id, [p.pk for p in pending])
                log.info("sync run #%s includes %s", run_id, ", ".join(f"#{p.pk}" for p in pending))
        SyncRun.objects.filter(pk=run_id).update(**fields)
        return True, None


def _take_over_requests(run_id: int, merged: list[int]) -> None:
    """The quota requests the merged runs were to apply are applied by ``run_id``: link them
    to it too (the merged runs keep theirs, and say which run included them)."""
    through = SyncRun.quota_requests.through
    have = set(through.objects.filter(syncrun_id=run_id).values_list("quotarequest_id", flat=True))
    wanted = set(
        through.objects.filter(syncrun_id__in=merged).values_list("quotarequest_id", flat=True)
    )
    through.objects.bulk_create(
        [through(syncrun_id=run_id, quotarequest_id=pk) for pk in sorted(wanted - have)]
    )


def _merged_scope(scopes: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Union of run scopes: full (``{}``) if any is full, else the union of their teams (and
    every Queue if any asked for them)."""
    teams: set[str] = set()
    queues = False
    for scope in scopes:
        if not scope or not (scope.get("teams") or scope.get("queues")):
            return {}
        teams.update(scope.get("teams") or ())
        queues = queues or bool(scope.get("queues"))
    return _scope(teams, queues=queues)


def _wait(run_id: int, holder: str) -> SyncRun:
    """Leave the run QUEUED behind ``holder``: the holder dispatches the follow-up when done."""
    SyncRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED).update(
        log=f"Waiting: {holder} is running. This request is carried out by the follow-up run "
        "right after it (one run for every request that arrives meanwhile)."
    )
    log.info("sync run #%s waits: %s is running", run_id, holder)
    return SyncRun.objects.get(pk=run_id)


def _dispatch_follow_up(*, exclude: int | None = None) -> int | None:
    """After the lock is released: enqueue the oldest pending run, if any; return its id.

    Every pending sync is merged into whichever run claims next, so one message is enough.
    Runs waiting for a Celery retry (requeued with an error) are left to that retry. A broker
    outage is logged: the rows stay QUEUED and the next trigger or the beat merges them.
    """
    from kombu.exceptions import OperationalError

    pending = SyncRun.objects.filter(status=SyncStatus.QUEUED, error="")
    if exclude is not None:
        pending = pending.exclude(pk=exclude)
    next_id = pending.order_by("created", "id").values_list("pk", flat=True).first()
    if next_id is None:
        return None
    try:
        _sync_task().delay(run_id=next_id)
    except (OperationalError, OSError):
        log.exception("could not enqueue the follow-up sync run #%s", next_id)
    return next_id


# --------------------------------------------------------------------------- progress


class _Progress:
    """Writes ``done``/``total``/``heartbeat_at`` to the run now and then, extending the lock."""

    def __init__(self, run: SyncRun, lock: _RedisLock | None) -> None:
        self.run = run
        self.lock = lock
        self.total = 0
        self.done = 0
        self._last = time.monotonic()

    def start(self, total: int) -> None:
        self.total = total
        self._write()

    def step(self) -> None:
        self.done += 1
        if time.monotonic() - self._last >= PROGRESS_INTERVAL:
            self._write()

    def beat(self) -> None:
        if time.monotonic() - self._last >= PROGRESS_INTERVAL:
            self._write()

    def _write(self) -> None:
        self._last = time.monotonic()
        if self.lock is not None:
            self.lock.refresh()
        SyncRun.objects.filter(pk=self.run.pk, status=SyncStatus.RUNNING).update(
            total=self.total, done=self.done, heartbeat_at=timezone.now()
        )


# --------------------------------------------------------------------------- plan helpers


def _parse_quantity(value: str) -> Decimal:
    """Kubernetes quantity grammar (via quotas.quantities); ValueError when unparseable."""
    try:
        return parse_db_quantity(value)
    except ValidationError as e:
        raise ValueError(f"not a quantity: {value!r}") from e


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _with_last_applied(manifest: dict[str, Any]) -> dict[str, Any]:
    """Return ``manifest`` annotated with itself (compact JSON) for drift detection.

    Only ``metadata`` is copied: the rest of the rendered manifest is shared, not mutated.
    """
    metadata = dict(manifest["metadata"])
    annotations = dict(metadata.get("annotations") or {})
    annotations[LAST_APPLIED_ANNOTATION] = _canonical_json(manifest)
    metadata["annotations"] = dict(sorted(annotations.items()))
    return {**manifest, "metadata": metadata}


def _without_last_applied(obj: Mapping[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(obj))
    annotations = (copy.get("metadata") or {}).get("annotations") or {}
    annotations.pop(LAST_APPLIED_ANNOTATION, None)
    return copy


def _drift(live: Mapping[str, Any] | None) -> tuple[FieldDiff, ...]:
    """Fields of ``live`` changed since Fairshare last applied it (empty: no drift or unknown)."""
    if live is None:
        return ()
    raw = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED_ANNOTATION)
    if not raw:
        return ()
    try:
        last = json.loads(raw)
    except ValueError:
        return ()
    if not isinstance(last, dict) or last.get("kind") != live.get("kind"):
        return ()
    return diff_object(last, _without_last_applied(live), parse_quantity=_parse_quantity)


def drifted_fields(live: Mapping[str, Any]) -> tuple[FieldDiff, ...]:
    """Fields of a live managed object changed since Fairshare last applied it (the watcher's
    drift test; empty when it matches or was never applied by Fairshare)."""
    return _drift(live)


def _visible(diffs: Sequence[FieldDiff]) -> tuple[FieldDiff, ...]:
    skip = f"metadata.annotations.{LAST_APPLIED_ANNOTATION}"
    return tuple(d for d in diffs if d.path != skip)


def _readable_diff(change: Change, drift: Sequence[FieldDiff]) -> str:
    if change.op == "create" and change.body is not None:
        diffs = _visible(creation_diff(change.body))
        shown = Change("create", change.kind, change.namespace, change.name, None, diffs)
        text = render_diff(shown)
    else:
        shown = Change(
            change.op, change.kind, change.namespace, change.name, None, _visible(change.diff)
        )
        text = render_diff(shown)
    if drift:
        lines = [f"  {d.path}: {_show(d.new)} -> {_show(d.old)}" for d in drift]
        text += "\ndrift (changed in the cluster since Fairshare applied it; applied -> live):\n"
        text += "\n".join(lines)
    return text


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# --------------------------------------------------------------------------- applying


@dataclass
class _Outcome:
    change: Change
    action: str
    drift: bool = False
    diff: str = ""
    error: str = ""
    attempts: int = 0
    drifted: tuple[FieldDiff, ...] = ()
    described: bool = False

    def describe(self) -> None:
        """Fill in ``diff``, the change as the run's log shows it (once)."""
        if not self.described:
            self.described = True
            if self.change.op != "unchanged":
                self.diff = _readable_diff(self.change, self.drifted)


@dataclass
class _Tally:
    outcomes: list[_Outcome] = field(default_factory=list)
    no_answer_streak: int = 0
    applied: int = 0


def _attempted(fn: Callable[[], T], outcome: _Outcome) -> Callable[[], T]:
    def call() -> T:
        outcome.attempts += 1
        return fn()

    return call


def _execute(api_client: Any, step: Step, outcome: _Outcome) -> None:
    """Carry out one write of a change; raise K8sError or ValueError on failure."""

    def retry(fn: Callable[[], Any]) -> Any:
        return call_with_retry(_attempted(fn, outcome), attempts=RETRY_ATTEMPTS)

    change = step.change
    if step.action == "delete":
        # A prune of something already gone is done; so is the delete half of a replace.
        with contextlib.suppress(K8sNotFound):
            # A prune deletes the object it observed, not one recreated since (preconditions).
            live = change.body if change.op == "prune" else None
            retry(lambda: delete(api_client, change.kind, change.name, change.namespace, live=live))
        return
    body = step.body or {}
    retry(lambda: server_side_apply(api_client, body, result=False))


class NotRouted(K8sError):
    """A Namespace kept its old queue-name annotation: the Queue it should name is not Open."""


def _wait_until_open(api_client: Any, names: set[str]) -> dict[str, str | None]:
    """Poll the managed Queues (one LIST per round) until each of ``names`` reports
    ``status.state: Open``, bounded by ``FAIRSHARE_SYNC_ROUTE_WAIT`` seconds (default 10; the
    pause doubles from 0.05 s to 0.5 s). Return the Queues that did not open: name → state
    (None: the Queue does not exist). Volcano's queue controller opens a new Queue some time
    after it is created (``pkg/controllers/queue/queue_controller_action.go`` ``openQueue``)."""
    limit = float(getattr(settings, "FAIRSHARE_SYNC_ROUTE_WAIT", 10.0))
    deadline = time.monotonic() + limit
    delay = 0.05
    while True:
        queues = call_with_retry(lambda: list_managed(api_client, "Queue"), attempts=RETRY_ATTEMPTS)
        states = {
            q["metadata"]["name"]: str((q.get("status") or {}).get("state") or "") for q in queues
        }
        closed = {name: states.get(name) for name in names if states.get(name) != "Open"}
        if not closed or time.monotonic() + delay > deadline:
            return closed
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _not_routed(name: str, state: str | None, *, failed: bool = False) -> NotRouted:
    limit = float(getattr(settings, "FAIRSHARE_SYNC_ROUTE_WAIT", 10.0))
    seen = "does not exist" if state is None else f"is {state or 'not opened yet'}"
    if failed:
        seen, limit = "could not be written in this run", 0.0
    return NotRouted(
        f"Kept the old scheduling.volcano.sh/queue-name: Queue {name} {seen}"
        + (f" after {limit:g} s" if limit else "")
        + ", "
        "and Volcano denies a PodGroup in a queue that is not Open (validate_podgroup.go). "
        "The next sync routes the namespace once the Queue is Open."
    )


def _write_unit(api_client: Any, unit: Sequence[Step], outcome: _Outcome) -> list[Exception | None]:
    """Carry out a unit's writes in order (in a writer thread: HTTP only, no database); one
    result per write attempted, None for success, and nothing after the first failure."""
    results: list[Exception | None] = []
    for step in unit:
        try:
            _execute(api_client, step, outcome)
        except (K8sError, ValueError) as e:
            results.append(e)
            break
        results.append(None)
    return results


class _Writers:
    """``size`` writer threads that carry out units (HTTP only, no database) and hand back
    their results; the calling thread keeps every outcome, the streak and the progress."""

    def __init__(self, api_client: Any, size: int) -> None:
        self.api_client = api_client
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.threads = [
            threading.Thread(target=self._work, name=f"sync-write-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self.threads:
            thread.start()

    def _work(self) -> None:
        # Results go back in batches while there is more to do (each hand-over wakes the calling
        # thread, which costs about as much as a write), and always before this thread waits
        # for work or stops, and at once after a failure (the caller counts them).
        finished: list[tuple[Sequence[Step], list[Exception | None]]] = []
        while True:
            try:
                item = self.todo.get_nowait()
            except queue.Empty:
                if finished:
                    self.done.put(finished)
                    finished = []
                item = self.todo.get()
            if item is None:
                break
            unit, outcome = item
            try:
                results = (
                    [] if self.cancelled.is_set() else _write_unit(self.api_client, unit, outcome)
                )
                # The readable diff is written here, while the other writers wait for their
                # answers: on a first sync it is most of the calling thread's work otherwise.
                outcome.describe()
            except Exception as e:
                # A bug fails its object; it must not end the thread the sync is waiting on.
                log.exception("sync writer: %s %s/%s", unit[0].action, unit[0].change.kind, e)
                results = [e]
            finished.append((unit, results))
            if len(finished) >= 32 or (results and results[-1] is not None):
                self.done.put(finished)
                finished = []
        if finished:
            self.done.put(finished)

    def run(self, wave: Sequence[Sequence[Step]], outcomes: Mapping[int, _Outcome]) -> Iterator:
        """Send the wave's units out; yield ``(unit, results)`` as they finish."""
        count = 0
        for unit in wave:
            self.todo.put((unit, outcomes[id(unit[0].change)]))
            count += 1
        while count:
            for finished in self.done.get():
                count -= 1
                yield finished

    def close(self) -> None:
        self.cancelled.set()
        for _ in self.threads:
            self.todo.put(None)
        for thread in self.threads:
            thread.join()


def _apply_wave(
    writers: _Writers,
    wave: Sequence[Sequence[Step]],
    outcomes: Mapping[int, _Outcome],
    remaining: Counter,
    tally: _Tally,
    total: int,
    progress: _Progress,
) -> None:
    """Carry out one wave's units concurrently and take in their results as they finish.

    A write an admission webhook denied (``is_webhook_denial``) is tried again once the rest
    of the wave is done — the unit from that write on — up to ``FAIRSHARE_SYNC_DENIAL_RETRIES``
    more times (default 5) with a doubling pause from ``FAIRSHARE_SYNC_DENIAL_BACKOFF`` seconds
    (default 0.1: 3.1 s in all), before it counts as failed like any other error. Volcano's
    webhooks judge a write against an informer cache that may not have seen the writes just
    made (``pkg/webhooks/admission/queues/validate/validate_queue.go`` reads parent and children
    through the queue lister), so an ordering that is valid at every step can still be denied
    for a moment. The order of the waves is kept: the next wave starts only after this one's
    retries.
    """
    attempts = int(getattr(settings, "FAIRSHARE_SYNC_DENIAL_RETRIES", 5))
    pause = float(getattr(settings, "FAIRSHARE_SYNC_DENIAL_BACKOFF", 0.1))
    not_routed: dict[int, NotRouted] = {}
    pending = []
    for unit in wave:
        if outcomes[id(unit[0].change)].action == SyncAction.FAILED:
            remaining[id(unit[0].change)] -= len(unit)
        else:
            pending.append(unit)
    opening = {step.route_queue for unit in pending for step in unit if step.route_queue}
    if opening:
        # A Queue whose own write failed in this run will not open: no need to wait for it.
        failed = {
            o.change.name
            for o in outcomes.values()
            if o.change.kind == "Queue" and o.action == SyncAction.FAILED
        }
        closed: dict[str, str | None] = {name: None for name in opening & failed}
        if opening - failed:
            closed.update(_wait_until_open(writers.api_client, opening - failed))
        routed = []
        for unit in pending:
            queue = next((step.route_queue for step in unit if step.route_queue), None)
            if queue in closed:
                # Written without the new routing (the quota and RBAC still go out), and failed
                # with the reason: the next sync routes it.
                not_routed[id(unit[0].change)] = _not_routed(
                    queue, closed[queue], failed=queue in failed
                )
                unit = tuple(step.unrouted() if step.route_queue else step for step in unit)
            routed.append(unit)
        pending = routed
    for attempt in range(attempts + 1):
        denied: list[Sequence[Step]] = []
        for unit, results in writers.run(pending, outcomes):
            key = id(unit[0].change)
            outcome = outcomes[key]
            last = results[-1] if results else None
            if last is not None and attempt < attempts and is_webhook_denial(last):
                remaining[key] -= len(results) - 1
                denied.append(unit[len(results) - 1 :])
                log.info(
                    "sync run #%s: %s %s/%s denied by a webhook, retried after the wave: %s",
                    progress.run.pk,
                    unit[0].action,
                    unit[0].change.kind,
                    unit[0].change.name,
                    last,
                )
                continue
            remaining[key] -= len(unit)
            if key in not_routed and all(error is None for error in results):
                results = [*results, not_routed[key]]
            _take_results(outcome, results, tally, total, progress)
            if outcome.action != SyncAction.FAILED and remaining[key] == 0:
                tally.applied += 1
            progress.beat()
        if not denied:
            return
        time.sleep(pause * 2**attempt)
        pending = denied


def _take_results(
    outcome: _Outcome,
    results: Sequence[Exception | None],
    tally: _Tally,
    total: int,
    progress: _Progress,
) -> None:
    for error in results:
        if error is None:
            tally.no_answer_streak = 0
            continue
        outcome.action = SyncAction.FAILED
        outcome.error = str(error)
        no_answer = isinstance(error, K8sTransient) and error.status is None
        tally.no_answer_streak = tally.no_answer_streak + 1 if no_answer else 0
        log.warning("sync run #%s: %s failed: %s", progress.run.pk, outcome.diff, error)
        if tally.no_answer_streak >= UNREACHABLE_AFTER:
            raise K8sTransient(
                f"Kubernetes API unreachable: {UNREACHABLE_AFTER} objects in a row got "
                f"no answer (last: {error}). {tally.applied} of {total} changes "
                "were applied before that; the next sync re-plans from the live state."
            ) from error


def _apply_all(
    api_client: Any,
    changes: Sequence[Change],
    live: Mapping[tuple[str, str | None, str], Mapping[str, Any]],
    *,
    dry_run: bool,
    progress: _Progress,
) -> list[_Outcome]:
    """Apply (or, for a dry run, only describe) every change; per-object failures are kept.

    The writes go in ``apply_waves`` order (Queue decreases first, children before parents;
    then everything else in dependency order; then the remaining prunes), so that every
    intermediate state passes Volcano's webhook. The units of a wave (same kind, same Queue
    depth, same stage) go out concurrently, ``FAIRSHARE_SYNC_WORKERS`` at a time, as a
    controller's workers would: a first sync of thousands of objects is bounded by the round
    trip, not by their number. A change with several writes (an interim shrink, a delete
    before a re-create) is one outcome; once one of its writes failed, the others are skipped.
    Raises K8sTransient when the API server stops answering altogether (UNREACHABLE_AFTER
    writes in a row with no HTTP answer).
    """
    tally = _Tally()
    outcomes: dict[int, _Outcome] = {}
    for change in changes:
        current = live.get((change.kind, change.namespace, change.name))
        drift = _drift(current) if change.op == "update" else ()
        outcomes[id(change)] = _Outcome(change, action=change.op, drift=bool(drift), drifted=drift)
    if not dry_run:
        waves = apply_waves(changes)
        remaining = Counter(id(step.change) for wave in waves for unit in wave for step in unit)
        widest = max((len(wave) for wave in waves), default=0)
        workers = max(1, min(int(getattr(settings, "FAIRSHARE_SYNC_WORKERS", 8)), widest))
        writers = _Writers(api_client, workers)
        try:
            for wave in waves:
                _apply_wave(writers, wave, outcomes, remaining, tally, len(changes), progress)
        finally:
            writers.close()
    for change in changes:
        outcome = outcomes[id(change)]
        outcome.describe()  # a dry run's, and those no writer got to
        tally.outcomes.append(outcome)
        progress.step()
    return tally.outcomes


def _advance_transitions(api_client: Any, notes: list[str]) -> tuple[str, ...]:
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


def _share_source(run: SyncRun) -> list[str]:
    """Record on ``run`` which share computation gives the Queues' deserved, and whether the
    shares are stale (computations failed since); return the log note for a stale one.

    A failed share computation never holds a sync back: quotas and RBAC go out, and the
    Queues keep the last good fair allocation (the renderer falls back to the guarantee when
    there has never been one).
    """
    from scheduling.health import share_health

    health = share_health()
    run.share_computation = health.last_good
    run.shares_stale = health.stale
    if not health.stale:
        return []
    since = f"{health.since:%Y-%m-%d %H:%M} UTC" if health.since else "the start"
    source = (
        f"the last good computation #{health.last_good.pk} of "
        f"{health.last_good.computed_at:%Y-%m-%d %H:%M} UTC"
        if health.last_good is not None
        else "the guarantees (no share computation ever succeeded)"
    )
    return [
        f"Shares stale since {since} ({health.failures} failed computation(s); latest: "
        f"{health.error[:300]}): the Queues' deserved come from {source}."
    ]


def _run_scope(stored: Mapping[str, Any] | None) -> SyncScope | None:
    """The run's scope (None: a full sync)."""
    if not stored or not (stored.get("teams") or stored.get("queues")):
        return None
    return sync_scope(stored.get("teams") or (), queues=bool(stored.get("queues")))


def _describe(scope: SyncScope) -> str:
    teams = ", ".join(sorted(scope.teams)) or "none"
    queues = "every Queue" if scope.queues else f"the Queues of {len(scope.trees)} teams' trees"
    return f"Targeted sync: teams {teams} and {queues}"


def _selector(values: Iterable[str]) -> str:
    # A set-based requirement, ANDed with ours (k8s.io/apimachinery/pkg/labels/selector.go).
    return f"{MANAGED_SELECTOR},{LABEL_TEAM} in ({','.join(sorted(values))})"


def _observe(
    api_client: Any, progress: _Progress | None = None, *, scope: SyncScope | None = None
) -> list[dict[str, Any]]:
    """LIST every managed kind once (paginated); each listing retried as a whole.

    A targeted sync lists by team label instead (``fairshare.io/team in (...)``): the teams'
    namespaced kinds, the Queues of their trees, and no PriorityClasses.
    """
    live: list[dict[str, Any]] = []
    for kind in KINDS:
        selector = MANAGED_SELECTOR
        if scope is not None:
            if kind == "PriorityClass" or (kind != "Queue" and not scope.teams):
                continue
            if kind != "Queue":
                selector = _selector(scope.teams)
            elif not scope.queues:
                selector = _selector(scope.trees)
        live += call_with_retry(
            lambda kind=kind, selector=selector: list_managed(
                api_client, kind, label_selector=selector
            ),
            attempts=RETRY_ATTEMPTS,
        )
        if progress is not None:
            progress.beat()
    return live


def _snapshot_live(path: str) -> list[dict[str, Any]]:
    try:
        return managed_in_dump(path)
    except (OSError, ValueError) as e:
        raise SyncError(f"cannot read the cluster snapshot {path}: {e}") from e


def is_plan_only() -> bool:
    """True when no cluster is connected (snapshot mode): every sync only plans."""
    return _cluster_mode()[0] == "snapshot"


def _scheduler_notes(api_client: Any, desired: Sequence[Mapping[str, Any]]) -> list[str]:
    """Warnings about the live Volcano scheduler configuration (none when it is unreadable).

    Fairshare's DRF ``deserved`` and its departments only take effect with Volcano's
    ``capacity`` plugin (``enableHierarchy: true`` for departments); the default configuration
    uses ``proportion``, which ignores both. ``FAIRSHARE_VOLCANO_SCHEDULER_CONFIG`` names the
    ConfigMap (``namespace/name``, default ``volcano-system/volcano-scheduler-configmap``).
    """
    where = str(
        getattr(
            settings,
            "FAIRSHARE_VOLCANO_SCHEDULER_CONFIG",
            "volcano-system/volcano-scheduler-configmap",
        )
    )
    namespace, _, name = where.partition("/")
    try:
        text = read_scheduler_config(api_client, namespace, name)
    except K8sError as e:
        log.info("cannot read the Volcano scheduler configuration %s: %s", where, e)
        return []
    if text is None:
        return []
    hierarchy = any(
        obj.get("kind") == "Queue" and (obj.get("spec") or {}).get("parent") for obj in desired
    )
    warnings = scheduler_config_warnings(text, hierarchy=hierarchy)
    for warning in warnings:
        log.warning("Volcano scheduler configuration %s: %s", where, warning)
    return [f"Warning: Volcano scheduler configuration {where}: {w}" for w in warnings]


def _cluster_mode() -> tuple[str, str]:
    mode, _, arg = str(getattr(settings, "FAIRSHARE_CLUSTER", "disabled")).partition(":")
    return mode, arg


def _build_client() -> Any:
    mode, arg = _cluster_mode()
    timeout = float(getattr(settings, "FAIRSHARE_KUBE_TIMEOUT", 30))
    return build_api_client(
        mode,
        kubeconfig=arg or None,
        timeout=(min(5.0, timeout), timeout),
        pool_size=int(getattr(settings, "FAIRSHARE_SYNC_WORKERS", 8)),
    )


# --------------------------------------------------------------------------- recording


_COUNTERS = {
    SyncAction.CREATE: "created_count",
    SyncAction.UPDATE: "updated_count",
    SyncAction.UNCHANGED: "unchanged_count",
    SyncAction.PRUNE: "pruned_count",
    SyncAction.FAILED: "failed_count",
}


_ITEM_FIELDS = (
    "run",
    "kind",
    "namespace",
    "name",
    "team_slug",
    "action",
    "planned_action",
    "drift",
    "diff",
    "error",
    "attempts",
)


def _item_row(run_id: int, outcome: _Outcome) -> tuple[Any, ...]:
    change = outcome.change
    labels = ((change.body or {}).get("metadata") or {}).get("labels") or {}
    return (
        run_id,
        change.kind,
        change.namespace or "",
        change.name,
        str(labels.get(LABEL_TEAM, ""))[:63],
        outcome.action,
        change.op,
        outcome.drift,
        outcome.diff,
        outcome.error[:4000],
        min(outcome.attempts, 32767),
    )


def _insert_items(run_id: int, outcomes: Sequence[_Outcome]) -> None:
    """Insert one SyncItem per outcome.

    PostgreSQL: ``COPY ... FROM STDIN`` (psycopg's ``Cursor.copy``), in plan order, so the
    ids follow it (items are read back by id). A first sync of 16,000 objects records its
    items (half a kilobyte of diff each) in 0.12 s, a third of what one ``INSERT ... SELECT
    FROM unnest(arrays)`` took and a fraction of ``bulk_create``, which builds a model
    instance per row. Other databases: ``bulk_create``.
    """
    rows = [_item_row(run_id, o) for o in outcomes]
    if not rows:
        return
    if connection.vendor != "postgresql":
        SyncItem.objects.bulk_create(
            [
                SyncItem(**dict(zip(("run_id", *_ITEM_FIELDS[1:]), row, strict=True)))
                for row in rows
            ],
            batch_size=2000,
        )
        return
    fields = [SyncItem._meta.get_field(name) for name in _ITEM_FIELDS]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(SyncItem._meta.db_table)
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{counts.get(a, 0)} {a}" for a in _COUNTERS)


def _record(
    run: SyncRun,
    outcomes: Sequence[_Outcome],
    *,
    notes: Sequence[str],
    started: float,
    phases: _Phases | None = None,
) -> SyncRun:
    """Write items, counters, status and the audit event in one transaction."""
    from quotas.changes import audit

    counts = Counter(o.action for o in outcomes)
    drift = sum(1 for o in outcomes if o.drift)
    failed = counts.get(SyncAction.FAILED, 0)
    changed = sum(counts.get(a, 0) for a in (SyncAction.CREATE, SyncAction.UPDATE, "prune"))
    seconds = time.monotonic() - started
    summary = f"{len(outcomes)} objects: {_summary(counts)}; {drift} drifted; {seconds:.2f} s"
    if phases is not None:
        summary += f" ({phases})"
    lines = [*notes, summary]
    with transaction.atomic():
        locked = SyncRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != SyncStatus.RUNNING:
            raise SyncError(
                f"sync run #{run.pk} was marked {locked.status} while it ran "
                f"({locked.error or 'no reason given'}); its results were discarded"
            )
        _insert_items(run.pk, outcomes)
        run.status = SyncStatus.FAILED if failed else SyncStatus.SUCCEEDED
        run.error = (
            f"{failed} of {len(outcomes)} objects failed; the other changes were applied. "
            "The next sync retries them."
            if failed
            else ""
        )
        run.finished_at = timezone.now()
        run.heartbeat_at = run.finished_at
        run.total = run.done = len(outcomes)
        run.drift_count = drift
        locked_fields = ["share_computation", "shares_stale"]
        for action, counter in _COUNTERS.items():
            setattr(run, counter, counts.get(action, 0))
        run.log = "\n".join(lines)
        run.save(
            update_fields=[
                "status",
                "dry_run",
                "error",
                "finished_at",
                "heartbeat_at",
                "total",
                "done",
                "drift_count",
                "log",
                *locked_fields,
                *_COUNTERS.values(),
            ]
        )
        if changed and not run.dry_run:
            audit(
                actor=run.requested_by,
                verb=AuditVerb.SYNC,
                obj=run,
                team=None,
                after={
                    "created": run.created_count,
                    "updated": run.updated_count,
                    "pruned": run.pruned_count,
                    "failed": run.failed_count,
                    "drift": run.drift_count,
                },
                note=f"trigger: {run.trigger}",
            )
    log.info("sync run #%s %s: %s", run.pk, run.status, lines[-1])
    return run


def _finish(run: SyncRun, *, status: str, error: str, log_text: str = "") -> SyncRun:
    now = timezone.now()
    fields: dict[str, Any] = {"status": status, "error": error[:10000], "heartbeat_at": now}
    if status == SyncStatus.QUEUED:
        fields["started_at"] = None
    else:
        fields["finished_at"] = now
    if log_text:
        fields["log"] = log_text
    SyncRun.objects.filter(pk=run.pk).update(**fields)
    run.refresh_from_db()
    return run


# --------------------------------------------------------------------------- the service


def run_sync(run_id: int, *, api_client: Any = None, requeue_on_transient: bool = False) -> SyncRun:
    """Carry out the queued sync run ``run_id`` (see the module docstring) and return it.

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
    url = _lock_url()
    lock: _RedisLock | None = None
    if url:
        # Lock first, then claim: whoever holds the lock is the one run that merges pending
        # requests, and a request that finds the lock taken is always seen by the holder's
        # follow-up check (its row was committed before its message was sent).
        if not SyncRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED).exists():
            log.info("sync run #%s is not queued: nothing to do", run_id)
            return SyncRun.objects.select_related("requested_by").get(pk=run_id)
        lock = _RedisLock(url)
        try:
            holder = lock.acquire(run_id)
        except SyncError as e:
            lock.close()
            run = SyncRun.objects.get(pk=run_id)
            if run.status == SyncStatus.QUEUED:
                _finish(run, status=SyncStatus.FAILED, error=str(e))
            raise
        if holder is not None:
            lock.close()
            return _wait(run_id, holder)
        claimed, holder = _claim(run_id, database_lock=False, now=now)
    else:
        claimed, holder = _claim(run_id, database_lock=True, now=now)
        if holder is not None:
            return _wait(run_id, holder)
    run = SyncRun.objects.select_related("requested_by").get(pk=run_id)
    if not claimed:
        log.info("sync run #%s is %s, not queued: nothing to do", run_id, run.status)
        if lock is not None:
            lock.release()
            _dispatch_follow_up()
        return run
    try:
        return _run_claimed(run, api_client, lock)
    except K8sTransient as e:
        if requeue_on_transient:
            log.warning("sync run #%s: %s; requeued for a retry", run_id, e)
            _finish(run, status=SyncStatus.QUEUED, error=f"Retrying after: {e}")
        else:
            _finish(run, status=SyncStatus.FAILED, error=str(e))
        raise
    except Exception as e:
        # Recorded, then re-raised for the caller (NetBox JobRunner discipline).
        log.exception("sync run #%s failed", run_id)
        _finish(run, status=SyncStatus.FAILED, error=str(e) or repr(e))
        raise
    finally:
        if lock is not None:
            lock.release()
        _dispatch_follow_up(exclude=run_id)


class _Phases:
    """Wall time per phase of a run, for its log: where a slow sync spent its time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.monotonic()

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._mark
        self._mark = now

    def __str__(self) -> str:
        return ", ".join(f"{name} {value:.2f}" for name, value in self.seconds.items())


def _run_claimed(run: SyncRun, api_client: Any, lock: _RedisLock | None) -> SyncRun:
    started = time.monotonic()
    phases = _Phases()
    progress = _Progress(run, lock)
    notes: list[str] = []
    mode, arg = _cluster_mode()
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
        api_client = _build_client()
    scope = _run_scope(run.scope)
    notes += _share_source(run)
    phases.done("start")
    try:
        if not run.dry_run and not snapshot:
            done = _advance_transitions(api_client, notes)
            if scope is not None and set(done) - scope.teams:
                scope = sync_scope(scope.teams | set(done), queues=scope.queues)
        if scope is None:
            manifests = render(build_cluster_spec(computation_id=run.share_computation_id))
        else:
            spec = build_cluster_spec(
                # Every Queue: every tree (namespaces are read, only the teams' rendered).
                within=None if scope.queues else scope.trees,
                computation_id=run.share_computation_id,
            )
            manifests = [m for m in render(spec, namespaces_of=scope.teams) if scope.covers(m)]
        desired = [_with_last_applied(m) for m in manifests]
        phases.done("render")
        if snapshot:
            live = [o for o in _snapshot_live(arg) if scope is None or scope.covers(o)]
        else:
            live = _observe(api_client, progress, scope=scope)
        phases.done("read")
        changes = plan(
            desired,
            live,
            parse_quantity=_parse_quantity,
            prune_namespaces=bool(getattr(settings, "FAIRSHARE_SYNC_PRUNE_NAMESPACES", False)),
            last_applied_annotation=LAST_APPLIED_ANNOTATION,
        )
        if scope is not None:
            notes.append(_describe(scope))
        notes.append(
            f"{len(desired)} desired, {len(live)} live objects"
            + (" (dry run: nothing applied)" if run.dry_run and not snapshot else "")
        )
        if not snapshot and scope is None:
            notes += _scheduler_notes(api_client, desired)
        progress.start(len(changes))
        index = {_key(obj): obj for obj in live}
        phases.done("plan")
        refused: list[tuple[Change, str]] = []
        notes += namespace_guard.protected_notes(None if scope is None else scope.teams)
        if not snapshot:  # namespaces Fairshare did not create (scheduling.namespace_guard)
            changes, refused = namespace_guard.guard(api_client, changes)
        outcomes = _apply_all(api_client, changes, index, dry_run=run.dry_run, progress=progress)
        outcomes += [_refused(change, why) for change, why in refused]
        phases.done("write")
        return _record(run, outcomes, notes=notes, started=started, phases=phases)
    finally:
        if own_client:
            api_client.close()


def _refused(change: Change, why: str) -> _Outcome:
    outcome = _Outcome(change, action=SyncAction.FAILED, error=why)
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
