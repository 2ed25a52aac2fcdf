"""Transitions (services): team changes the cluster takes on only when nothing would be stranded.

Volcano fixes a PodGroup's queue when the PodGroup is created (``mutate_podgroup.go`` routes on
CREATE only; the job controller never moves it), and its capacity plugin in hierarchy mode
refuses allocation for the whole cluster while a job sits in a queue that has children. So a
change of the tenancy model that would delete a Queue holding PodGroups, or turn one into a
parent, is recorded at once but reaches the cluster only when that Queue is empty:

* **deactivate** — a team made inactive keeps its Queue (and ``<x>.own``) and its namespaces'
  quota until no PodGroup with work left is in them and its namespaces have been released or
  moved to another team; when it is its department's last team, also until the department's
  ``<x>.own`` (which goes when the department becomes a leaf again) holds none;
* **first_child** — a team placed under a department that is a leaf today: the department's
  Queue would become a parent, so until it holds no PodGroups the team stays where it was
  (a new team: out of the cluster);
* **move** — a team leaving a department whose last team it is: the department would become a
  leaf again and ``<x>.own`` (its own namespaces' queue) would go, so the team stays under it
  until ``<x>.own`` holds no PodGroups.

Which PodGroups exist is known only to the scheduling side (``scheduling.transitions`` counts
them from the live cluster or the latest workload collection and completes transitions);
this module records, cancels and completes them, audited. ``render_overrides()`` is what the
desired state reads: how to render each team with a waiting transition.

Every path that saves a Team (API, Django admin, portal, management commands, shell) goes
through ``Team.save``, which sends ``quotas.signals.team_saved``; :func:`on_team_saved` is its
receiver (connected when this module is imported, which ``QuotasConfig.ready`` does); a save made by
:func:`cancel_transition` itself is marked so that it starts nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone

from quotas.changes import audit, notify_quota_changed
from quotas.choices import AuditVerb, TransitionKind, TransitionState
from quotas.exceptions import InvalidTransition, PermissionDenied
from quotas.models import Namespace, Team, Transition
from quotas.querysets import is_site_admin
from quotas.signals import team_saved

__all__ = [
    "OWN_SUFFIX",
    "cancel_transition",
    "complete_transition",
    "describe",
    "note_blocking",
    "on_team_saved",
    "render_overrides",
    "waiting",
]

OWN_SUFFIX = ".own"  # scheduling.domain.render.OWN_QUEUE_SUFFIX (quotas imports no scheduling)


def waiting():
    return Transition.objects.filter(state=TransitionState.WAITING).select_related("team")


def _audit(actor, verb: str, transition: Transition, note: str) -> None:
    audit(
        actor=actor,
        verb=verb,
        obj=transition,
        team=transition.team,
        after={
            "kind": transition.kind,
            "state": transition.state,
            "params": transition.params,
            "waiting_for": transition.waiting_for,
            "blocking": transition.blocking,
        },
        note=note,
    )


def _has_other_children(team_id: int, but: int) -> bool:
    return Team.objects.filter(parent_id=team_id, active=True).exclude(pk=but).exists()


def _routes_workloads(team_id: int) -> bool:
    """Whether PodGroups can sit in the team's leaf queue: namespaces route PodGroups to the
    queue they name (``mutate_podgroup.go``), so a team without managed namespaces has none
    routed to it and its changes need not wait."""
    return Namespace.objects.filter(team_id=team_id, managed=True).exists()


def describe(transition: Transition, blocking: int | None = None) -> str:
    """What the transition waits for, in words ("waiting for 3 workloads in queue research-team
    to finish before it can become a department")."""
    params = transition.params or {}
    queues = ", ".join(transition.queues) or "its queue"
    count = transition.blocking if blocking is None else blocking
    work = f"{count} workload{'s' if count != 1 else ''}" if count else "the workloads"
    if transition.kind == TransitionKind.DEACTIVATE:
        left = Namespace.objects.filter(team=transition.team, managed=True).count()
        text = f"waiting for {work} in queue {queues} to finish"
        if left:
            text += (
                f", and for its {left} namespace{'s' if left != 1 else ''} to be released or "
                "moved to another team (they keep their quota until then)"
            )
        text += " before the team is removed from the cluster"
        if params.get("previous_parent_name"):
            text += f" and {params['previous_parent_name']} loses its last team"
        return text
    if transition.kind == TransitionKind.FIRST_CHILD:
        parent = params.get("parent_name") or "its department"
        return (
            f"waiting for {work} in queue {queues} to finish and be cleaned up before "
            f"{parent} can become a department with {transition.team.slug} in it"
        )
    return (
        f"waiting for {work} in queue {queues} to finish before "
        f"{params.get('previous_parent_name') or 'its department'} can lose its last team"
    )


def on_team_saved(
    team: Team,
    *,
    before: dict[str, Any] | None,
    actor=None,
    now: datetime | None = None,
) -> Transition | None:
    """Record the transition a save of ``team`` needs, if any (``Team.save``'s ``team_saved``
    signal, inside its transaction). ``before``: the row's ``parent_id`` and ``active`` before
    the save (None for a new team). Returns the transition started, or None.

    A save that undoes what a waiting transition of the team was for (reactivated, moved back)
    cancels it; any other change while one waits replaces it, keeping where the team was
    rendered before the first one.
    """
    now = now or timezone.now()
    current = waiting().filter(team=team).first()
    previous_parent = before["parent_id"] if before else None
    was_active = bool(before["active"]) if before else False
    if current is not None:
        # The cluster still has the team as it was before the waiting transition: active,
        # under its previous department (or, for a new team, not at all).
        previous_parent = (current.params or {}).get("previous_parent")
        was_active = True
        if (current.params or {}).get("new"):
            before = None
    kind = None
    queues: list[str] = []
    params: dict[str, Any] = {"previous_parent": previous_parent, "new": before is None}
    if before is not None and was_active and not team.active:
        kind = TransitionKind.DEACTIVATE if _routes_workloads(team.pk) else None
        queues = [team.cluster_name, f"{team.cluster_name}{OWN_SUFFIX}"]
        # A department's last active team going: the department becomes a leaf again and its
        # ``<x>.own`` leaf (its own namespaces' queue) goes, so wait for that one too.
        parent = team.parent
        if (
            parent is not None
            and not _has_other_children(parent.pk, but=team.pk)
            and _routes_workloads(parent.pk)
        ):
            kind = TransitionKind.DEACTIVATE
            queues.append(f"{parent.cluster_name}{OWN_SUFFIX}")
            params["previous_parent_name"] = parent.slug
    elif team.active and team.parent_id != previous_parent:
        parent = team.parent
        if (
            parent is not None
            and not _has_other_children(parent.pk, but=team.pk)
            and _routes_workloads(parent.pk)
        ):
            kind = TransitionKind.FIRST_CHILD
            queues.append(parent.cluster_name)
            params["parent_name"] = parent.slug
        old = Team.objects.filter(pk=previous_parent).first() if previous_parent else None
        if (
            old is not None
            and not _has_other_children(old.pk, but=team.pk)
            and _routes_workloads(old.pk)
        ):
            kind = kind or TransitionKind.MOVE
            queues.append(f"{old.cluster_name}{OWN_SUFFIX}")
            params["previous_parent_name"] = old.slug
    if current is not None:
        current.state = TransitionState.CANCELLED
        current.completed_at = now
        current.save(update_fields=["state", "completed_at"])
        _audit(
            actor,
            AuditVerb.UPDATE,
            current,
            "superseded by a later change" if kind else "undone by a later change",
        )
    if kind is None:
        return None
    params["queues"] = queues
    transition = Transition(
        team=team,
        kind=kind,
        params=params,
        since=now,
        started_by=actor if actor is not None and actor.is_authenticated else None,
    )
    transition.waiting_for = describe(transition, 0)
    transition.save()
    _audit(actor, AuditVerb.CREATE, transition, "started: " + transition.waiting_for)
    return transition


@receiver(team_saved, sender=Team, dispatch_uid="quotas.transitions.on_team_saved")
def _on_team_saved(sender, *, team: Team, before, actor=None, **kwargs) -> None:
    on_team_saved(team, before=before, actor=actor)


def complete_transition(transition_id: int, *, now: datetime | None = None) -> Transition | None:
    """Mark a waiting transition completed (the cluster holds nothing it would strand); None
    when it is no longer waiting."""
    now = now or timezone.now()
    with transaction.atomic():
        transition = (
            Transition.objects.select_for_update()
            .filter(pk=transition_id, state=TransitionState.WAITING)
            .first()
        )
        if transition is None:
            return None
        transition.state = TransitionState.COMPLETED
        transition.completed_at = now
        transition.blocking = 0
        transition.save(update_fields=["state", "completed_at", "blocking"])
        _audit(None, AuditVerb.UPDATE, transition, "completed: nothing in the cluster waits on it")
        return transition


def note_blocking(transition: Transition, blocking: int) -> None:
    """Record how many PodGroups a waiting transition still waits for (and the words)."""
    text = describe(transition, blocking)
    if transition.blocking != blocking or transition.waiting_for != text:
        Transition.objects.filter(pk=transition.pk, state=TransitionState.WAITING).update(
            blocking=blocking, waiting_for=text[:500]
        )


def cancel_transition(transition_id: int, *, actor, now: datetime | None = None) -> Transition:
    """Cancel a waiting transition and restore the model as it was before it (site admins
    only): a deactivated team is active again, a moved team is back under its previous
    department, a new team placed under a busy leaf team is made inactive (it never reached
    the cluster). Audited; a targeted sync follows after commit.

    Raises PermissionDenied for a non-admin, InvalidTransition when it is not waiting.
    """
    if not is_site_admin(actor):
        raise PermissionDenied("Only a site admin can cancel a transition.")
    now = now or timezone.now()
    with transaction.atomic():
        transition = Transition.objects.select_for_update().filter(pk=transition_id).first()
        if transition is None or transition.state != TransitionState.WAITING:
            raise InvalidTransition(
                "Only a waiting transition can be cancelled; this one is "
                f"{transition.state if transition else 'gone'}."
            )
        team = Team.objects.select_for_update().get(pk=transition.team_id)
        params = transition.params or {}
        if transition.kind == TransitionKind.DEACTIVATE:
            team.active = True
        elif params.get("new"):
            team.active = False
        else:
            team.parent_id = params.get("previous_parent")
        team._skip_transitions = True
        team.save()
        transition.state = TransitionState.CANCELLED
        transition.completed_at = now
        transition.save(update_fields=["state", "completed_at"])
        _audit(actor, AuditVerb.UPDATE, transition, "cancelled; the team is back as it was")
        touched = [team.pk, params.get("previous_parent"), team.parent_id]
        notify_quota_changed([t for t in touched if t], "transition-cancelled")
    return transition


def render_overrides() -> dict[int, dict[str, Any]]:
    """How to render each team with a waiting transition: ``{team_id: {"active": True}}`` (a
    deactivation), ``{"parent_id": id}`` (under its previous department) or
    ``{"hidden": True}`` (a new team not in the cluster yet)."""
    overrides: dict[int, dict[str, Any]] = {}
    for team_id, kind, params in Transition.objects.filter(
        state=TransitionState.WAITING
    ).values_list("team_id", "kind", "params"):
        params = params or {}
        if kind == TransitionKind.DEACTIVATE:
            overrides[team_id] = {"active": True}
        elif params.get("new"):
            overrides[team_id] = {"hidden": True}
        else:
            overrides[team_id] = {"parent_id": params.get("previous_parent")}
    return overrides
