"""Recording a change: the AuditEvent every change of the tenancy model writes, and the
``quota_changed`` signal sent after commit for the teams it touched.

Below every module that changes the model (``decisions``, ``grants``, ``direct``, ``members``,
``transitions``, ...), so none has to import another to write an audit row; ``quota_state`` is
the before/after every quota change records.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from contextlib import contextmanager
from decimal import Decimal

from django.db import transaction

from quotas.models import AuditEvent, QuotaRequest, Team
from quotas.quantities import format_quantity
from quotas.signals import quota_changed

__all__ = [
    "audit",
    "coalesced_quota_changes",
    "notify_quota_changed",
    "quantity_text",
    "quota_state",
]


def audit(
    *,
    actor,
    verb: str,
    obj,
    team: Team | None,
    before=None,
    after=None,
    note: str = "",
) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=getattr(actor, "username", "") or "system",
        verb=verb,
        object_type=obj._meta.label if hasattr(obj, "_meta") else type(obj).__name__,
        object_id=str(getattr(obj, "pk", "") or ""),
        object_repr=str(obj)[:200],
        team=team,
        before=before,
        after=after,
        note=note,
    )


_batch = threading.local()


@contextmanager
def coalesced_quota_changes(reason: str):
    """Within this block (inside a transaction), quota changes notify ``quota_changed`` once,
    after commit, for all teams touched — a rebalance of 50 teams is one recompute-and-sync."""
    outer = getattr(_batch, "team_ids", None)
    if outer is not None:  # nested: the outermost block sends
        yield
        return
    _batch.team_ids, _batch.request_ids = set(), set()
    try:
        yield
        ids, request_ids = sorted(_batch.team_ids), sorted(_batch.request_ids)
    finally:
        _batch.team_ids = _batch.request_ids = None
    if ids:
        _send_quota_changed(ids, reason, request_ids)


def notify_quota_changed(
    team_ids: Iterable[int], reason: str, *, request_ids: Iterable[int] = ()
) -> None:
    """Send ``quota_changed`` after commit for ``team_ids``; ``request_ids`` are the quota
    requests whose amounts this change applies (the sync it starts records them)."""
    pending = getattr(_batch, "team_ids", None)
    if pending is not None:
        pending.update(team_ids)
        _batch.request_ids.update(request_ids)
        return
    _send_quota_changed(sorted(set(team_ids)), reason, sorted(set(request_ids)))


def _send_quota_changed(team_ids: list[int], reason: str, request_ids: list[int]) -> None:
    transaction.on_commit(
        lambda: quota_changed.send(
            sender=QuotaRequest, team_ids=team_ids, reason=reason, request_ids=request_ids
        )
    )


def quantity_text(value: Decimal | None, resource: str) -> str | None:
    """An amount as the audit trail writes it (``format_quantity``), ``None`` for no amount."""
    return None if value is None else format_quantity(value, resource)


def quota_state(team: Team) -> dict[str, dict[str, str | None]]:
    """The team's quotas as JSON-ready {resource: {guarantee, limit}} (audit before/after)."""
    return {
        q.resource: {
            "guarantee": quantity_text(q.guarantee, q.resource),
            "limit": quantity_text(q.limit, q.resource),
        }
        for q in team.quotas.all()
    }
