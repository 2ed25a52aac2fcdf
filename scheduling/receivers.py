"""Signal receivers of the scheduling app (connected in ``SchedulingConfig.ready``)."""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import OperationalError

log = logging.getLogger(__name__)


def on_quota_changed(
    sender: Any,
    team_ids: list[int] | None = None,
    reason: str = "",
    request_ids: list[int] | None = None,
    **kwargs: Any,
) -> None:
    """Sync the changed teams now; recompute shares, then sync every Queue's ``deserved``.

    Two messages per quota change, so that quotas and RBAC never wait for the share
    computation: a targeted ``sync_cluster`` of the teams touched (their ResourceQuotas,
    RoleBindings, ... and the Queues of their department trees, with the last fair allocation
    for ``deserved``), and a chain ``compute_shares | sync_cluster(queues=True)`` that brings
    every Queue's ``deserved`` to the new allocation. Single flight merges whatever overlaps.
    Without ``team_ids`` the first sync is a full one. ``request_ids`` (the approved requests
    this change applies) are recorded on that first sync (``SyncRun.quota_requests``), so each
    request links to the run that applied it.

    ``quota_changed`` is sent after commit, so the tasks see the new rows. A broker outage is
    logged and swallowed here on purpose: the web request that changed the quota has succeeded,
    and nothing is lost — the beat schedule recomputes and re-syncs every few minutes.
    """
    from quotas.models import Team
    from scheduling.tasks import compute_shares, sync_cluster

    trigger = f"quota-change:{reason}" if reason else "quota-change"
    teams = (
        sorted(Team.objects.filter(pk__in=team_ids).values_list("cluster_name", flat=True))
        if team_ids
        else None
    )
    try:
        applies = {"quota_requests": request_ids} if request_ids else {}
        sync_cluster.delay(trigger=trigger, teams=teams, **applies)
        workflow = compute_shares.si(trigger=trigger) | sync_cluster.si(
            trigger=f"{trigger}:shares", queues=True
        )
        workflow.apply_async()
    except (OperationalError, OSError):
        log.exception(
            "could not enqueue the sync and share computation after %s of teams %s; the beat "
            "schedule will catch up",
            reason or "a quota change",
            team_ids,
        )


def on_membership_changed(
    sender: Any, reason: str = "", team_slugs: list[str] | None = None, **kwargs: Any
) -> None:
    """A targeted sync of the teams whose memberships (RoleBindings) changed, sent after commit.

    A broker outage is logged, not raised: the membership change has been committed, and the
    beat schedule re-syncs every few minutes anyway.
    """
    from scheduling.tasks import sync_cluster

    try:
        sync_cluster.delay(trigger=f"members:{reason}", teams=team_slugs or None)
    except (OperationalError, OSError):
        log.exception("could not enqueue a sync after a membership %s", reason)
