"""Recording results: one SyncItem per object (a ``COPY`` on PostgreSQL), the run's counters
and status, and one ``sync`` AuditEvent, in a single transaction at the end of the run.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from quotas.choices import AuditVerb
from scheduling.choices import SyncAction, SyncStatus
from scheduling.domain.render import LABEL_TEAM
from scheduling.exceptions import SyncError
from scheduling.models import SyncItem, SyncRun
from scheduling.sync.writers import Outcome

log = logging.getLogger(__name__)

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


def _item_row(run_id: int, outcome: Outcome) -> tuple[Any, ...]:
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


def _insert_items(run_id: int, outcomes: Sequence[Outcome]) -> None:
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


def record_run(
    run: SyncRun,
    outcomes: Sequence[Outcome],
    *,
    notes: Sequence[str],
    started: float,
    phases: Phases | None = None,
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


def finish_run(run: SyncRun, *, status: str, error: str, log_text: str = "") -> SyncRun:
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


class Phases:
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
