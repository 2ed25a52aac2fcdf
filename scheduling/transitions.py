"""Advancing transitions (service): decide from what the cluster holds whether a waiting
transition (``quotas.transitions``) may complete.

A transition waits for its Queues (``Transition.queues``) to hold no PodGroup with work left
(not ``Completed``: ``volcano.sh/apis`` ``pkg/apis/scheduling/v1beta1/types.go``), and a
deactivation also for the team's managed namespaces to be released or moved to another team.
The PodGroups come from the live cluster when the caller has an API client (the sync lists
them once per run), else from the latest workload collection (``monitoring.Workload``: each
PodGroup with its queue and phase).

``advance_transitions()`` runs at the start of every sync run that writes (so a run renders
what the cluster may take on now) and as the ``advance_transitions`` task after each usage
collection and on the sync schedule; when one completes outside a run, that task starts a
targeted sync of its teams (this module starts no sync: ``scheduling.sync`` calls it).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from quotas.choices import TransitionKind
from quotas.models import Namespace
from quotas.transitions import complete_transition, note_blocking, waiting

__all__ = [
    "Advance",
    "PodGroupCounts",
    "advance_transitions",
    "live_podgroup_queues",
    "recorded_podgroup_queues",
]

log = logging.getLogger(__name__)

PODGROUPS_PATH = "/apis/scheduling.volcano.sh/v1beta1/podgroups"


@dataclass(frozen=True)
class Advance:
    """What one pass did: the teams (cluster names) whose transitions completed, and how many
    still wait."""

    completed: tuple[str, ...]
    waiting: int


def _busy(podgroup: Mapping[str, Any]) -> bool:
    return ((podgroup.get("status") or {}).get("phase") or "") != "Completed"


@dataclass(frozen=True)
class PodGroupCounts:
    """PodGroups per queue: ``busy`` those with work left, ``present`` all of them.

    A Queue about to be deleted strands only PodGroups with work left (the scheduler ignores
    the rest). A Queue about to become a parent must hold none at all: the capacity plugin's
    ``buildHierarchicalQueueAttrs`` (``pkg/scheduler/plugins/capacity/capacity.go``) checks
    every job of the session, and the session holds every PodGroup whose queue exists
    (``pkg/scheduler/cache/cache.go`` ``Snapshot``), finished or not, until it is deleted.
    """

    busy: Counter
    present: Counter


def _counts(pairs: Iterable[tuple[str, bool]]) -> PodGroupCounts:
    busy: Counter = Counter()
    present: Counter = Counter()
    for queue, working in pairs:
        present[queue] += 1
        if working:
            busy[queue] += 1
    return PodGroupCounts(busy=busy, present=present)


def live_podgroup_queues(api_client: Any) -> PodGroupCounts:
    """PodGroups per queue from one paginated LIST across all namespaces. Raises K8sError
    (e.g. 404 where Volcano is not installed)."""
    from kube.apply import call_with_retry
    from kube.observe import list_raw

    items = call_with_retry(lambda: list(list_raw(api_client, PODGROUPS_PATH)), attempts=3)
    return _counts(
        (str((pg.get("spec") or {}).get("queue") or "default"), _busy(pg)) for pg in items
    )


def recorded_podgroup_queues() -> PodGroupCounts:
    """PodGroups per queue in the latest workload collection."""
    from monitoring.models import Workload

    latest = Workload.objects.order_by("-taken_at").values_list("taken_at", flat=True).first()
    if latest is None:
        return _counts(())
    rows = Workload.objects.filter(taken_at=latest).values_list("queue", "phase")
    return _counts((queue, phase != "Completed") for queue, phase in rows if queue)


def advance_transitions(
    queues: PodGroupCounts | None = None, *, now: datetime | None = None
) -> Advance:
    """Complete every waiting transition whose Queues hold nothing it would strand (and, for a
    deactivation, whose team has no managed namespace left); record on the others how many
    PodGroups they wait for. A first child waits until the leaf Queue holds no PodGroup at
    all; a Queue to be deleted until it holds none with work left (see PodGroupCounts).
    ``queues``: PodGroups per queue (None: the latest collection)."""
    now = now or timezone.now()
    counts = recorded_podgroup_queues() if queues is None else queues
    completed: list[str] = []
    still = 0
    for transition in waiting():
        per_queue: Mapping[str, int] = (
            counts.present if transition.kind == TransitionKind.FIRST_CHILD else counts.busy
        )
        blocking = sum(per_queue.get(q, 0) for q in transition.queues)
        namespaces_left = (
            transition.kind == TransitionKind.DEACTIVATE
            and Namespace.objects.filter(team_id=transition.team_id, managed=True).exists()
        )
        if blocking or namespaces_left:
            note_blocking(transition, blocking)
            still += 1
            continue
        if complete_transition(transition.pk, now=now) is not None:
            completed.append(transition.team.cluster_name)
            parent = (transition.params or {}).get("previous_parent")
            if parent:
                from quotas.models import Team

                name = Team.objects.filter(pk=parent).values_list("cluster_name", flat=True)
                completed += list(name)
            if transition.team.parent_id:
                completed.append(transition.team.parent.cluster_name)
            log.info("transition %s completed", transition)
    return Advance(completed=tuple(sorted(set(completed))), waiting=still)
