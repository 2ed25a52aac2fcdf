"""Signal receivers of the scheduling app (connected in ``SchedulingConfig.ready``)."""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import OperationalError

log = logging.getLogger(__name__)


def on_quota_changed(
    sender: Any, team_ids: list[int] | None = None, reason: str = "", **kwargs: Any
) -> None:
    """Recompute shares, then sync the cluster: one Celery chain per quota change.

    ``quota_changed`` is sent after commit, so the tasks see the new rows. A broker outage is
    logged and swallowed here on purpose: the web request that changed the quota has succeeded,
    and nothing is lost — the beat schedule recomputes and re-syncs every few minutes.
    """
    from scheduling.tasks import compute_shares, sync_cluster

    trigger = f"quota-change:{reason}" if reason else "quota-change"
    workflow = compute_shares.si(trigger=trigger) | sync_cluster.si(trigger=trigger)
    try:
        workflow.apply_async()
    except (OperationalError, OSError):
        log.exception(
            "could not enqueue share computation and sync after %s of teams %s; the beat "
            "schedule will catch up",
            reason or "a quota change",
            team_ids,
        )


def on_membership_changed(sender: Any, reason: str = "", **kwargs: Any) -> None:
    """Sync the cluster (RoleBindings) after a membership change, sent after commit.

    A broker outage is logged, not raised: the membership change has been committed, and the
    beat schedule re-syncs every few minutes anyway.
    """
    from scheduling.tasks import sync_cluster

    try:
        sync_cluster.delay(trigger=f"members:{reason}")
    except (OperationalError, OSError):
        log.exception("could not enqueue a sync after a membership %s", reason)
