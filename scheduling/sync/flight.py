"""Single flight that coalesces (step 3 of ``scheduling.sync``): one sync at a time per
installation, a Redis lock where there is Redis and the claim itself where there is not; runs
that find the lock taken stay QUEUED and are merged into the next one, which the holder
enqueues when it finishes (``dispatch_follow_up``).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from scheduling.choices import SyncStatus
from scheduling.exceptions import SyncError
from scheduling.models import SyncRun
from scheduling.sync.runs import scope_of, sync_task

log = logging.getLogger(__name__)

_ADVISORY_LOCK_KEY = 0x0FA1_5C00  # "sync claims" (quotas uses 0x0FA125A5 for capacity)


# --------------------------------------------------------------------------- single flight


def lock_url() -> str:
    url = getattr(settings, "REDIS_URL", "") or ""
    if url:
        return url
    broker = getattr(settings, "CELERY_BROKER_URL", "") or ""
    return broker if broker.startswith(("redis://", "rediss://")) else ""


def lock_key() -> str:
    default = f"fairshare:sync-lock:{settings.DATABASES['default'].get('NAME', '')}"
    return str(getattr(settings, "FAIRSHARE_SYNC_LOCK_KEY", default))


# Delete the lock only if it still holds the token read before (compare-and-delete).
_DELETE_IF_UNCHANGED = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


class RedisLock:
    """A non-blocking redis-py Lock whose token names the run holding it."""

    def __init__(self, url: str) -> None:
        import redis

        self._errors = (redis.exceptions.RedisError,)
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._key = lock_key()
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
            raise SyncError(f"Cannot take the sync lock in Redis ({lock_url()}): {e}") from e
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


def claim_run(run_id: int, *, database_lock: bool, now: datetime) -> tuple[bool, str | None]:
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
    return scope_of(teams, queues=queues)


def wait_for_holder(run_id: int, holder: str) -> SyncRun:
    """Leave the run QUEUED behind ``holder``: the holder dispatches the follow-up when done."""
    SyncRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED).update(
        log=f"Waiting: {holder} is running. This request is carried out by the follow-up run "
        "right after it (one run for every request that arrives meanwhile)."
    )
    log.info("sync run #%s waits: %s is running", run_id, holder)
    return SyncRun.objects.get(pk=run_id)


def dispatch_follow_up(*, exclude: int | None = None) -> int | None:
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
        sync_task().delay(run_id=next_id)
    except (OperationalError, OSError):
        log.exception("could not enqueue the follow-up sync run #%s", next_id)
    return next_id
