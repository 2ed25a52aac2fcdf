"""Team membership changes made by leads and admins: add, change role, remove. Each is one
transaction and writes an AuditEvent.

Rules: admins manage every team, leads their team and its sub-teams (``Team.objects.led_by``).
A team keeps at least one lead unless an admin removes it (otherwise a lead could lock everyone,
including themselves, out of managing the team). Memberships become RoleBindings, so every change
asks for a cluster sync after commit.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from quotas.changes import audit
from quotas.choices import AuditVerb, MembershipRole
from quotas.exceptions import InvalidTransition, PermissionDenied
from quotas.models import Membership, Team
from quotas.querysets import is_site_admin
from quotas.signals import membership_changed

__all__ = ["add_member", "change_role", "remove_member"]


def _require_manager(actor, team: Team) -> None:
    if not Team.objects.led_by(actor).filter(pk=team.pk).exists():
        raise PermissionDenied("Only the team's leads and site admins may manage its members.")


def _check_role(role: str) -> None:
    if role not in MembershipRole.values:
        raise ValidationError({"role": f"{role!r} is not a role; choose lead, member or viewer."})


def _state(membership: Membership) -> dict:
    return {"user": membership.user.get_username(), "role": membership.role}


def _lock_team(team: Team, actor) -> None:
    """Lock the team row first, so every change to its members takes its locks in one order
    (team, then memberships): two leads demoting each other at once queue up instead of
    deadlocking on each other's membership rows (issue 27). The permission is checked again
    under the lock: the first change may have taken the second actor's lead role away."""
    Team.objects.select_for_update().filter(pk=team.pk).values_list("pk", flat=True).first()
    _require_manager(actor, team)


def _lock_membership(team: Team, membership_id: int) -> Membership:
    try:
        return (
            Membership.objects.select_for_update()
            .select_related("user")
            .get(pk=membership_id, team=team)
        )
    except Membership.DoesNotExist:
        raise InvalidTransition("This person is no longer a member of the team.") from None


def _keeps_a_lead(team: Team, membership: Membership, actor) -> None:
    """Refuse to take away the last lead's role, unless an admin does it."""
    if membership.role != MembershipRole.LEAD or is_site_admin(actor):
        return
    leads = (
        Membership.objects.select_for_update()
        .filter(team=team, role=MembershipRole.LEAD)
        .exclude(pk=membership.pk)
    )
    if not leads.exists():
        raise ValidationError({"role": "A team needs at least one lead; appoint another first."})


def _request_sync(reason: str, team: Team) -> None:
    """Memberships are rendered as RoleBindings: announce the change of ``team`` after commit
    (``membership_changed``; the scheduling app enqueues a targeted sync of that team)."""
    transaction.on_commit(
        lambda: membership_changed.send(sender=Membership, reason=reason, team_slugs=[team.slug])
    )


def add_member(team: Team, *, username: str, role: str, actor) -> Membership:
    """Add an existing, active user to ``team`` with ``role``.

    Raises PermissionDenied, ValidationError keyed ``username`` (unknown user, already a member)
    or ``role``.
    """
    _require_manager(actor, team)
    _check_role(role)
    username = (username or "").strip()
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationError({"username": f"There is no active user called {username!r}."})
    with transaction.atomic():
        if Membership.objects.filter(team=team, user=user).exists():
            raise ValidationError({"username": f"{username} is already a member of this team."})
        membership = Membership(team=team, user=user, role=role)
        membership.full_clean()
        membership.save()
        audit(
            actor=actor, verb=AuditVerb.CREATE, obj=membership, team=team, after=_state(membership)
        )
        _request_sync("add", team)
    return membership


def change_role(team: Team, membership_id: int, *, role: str, actor) -> Membership:
    """Change a member's role. Raises PermissionDenied, InvalidTransition, ValidationError."""
    _require_manager(actor, team)
    _check_role(role)
    with transaction.atomic():
        _lock_team(team, actor)
        membership = _lock_membership(team, membership_id)
        if membership.role == role:
            return membership
        if role != MembershipRole.LEAD:
            _keeps_a_lead(team, membership, actor)
        before = _state(membership)
        membership.role = role
        membership.full_clean()
        membership.save(update_fields=["role", "updated"])
        audit(
            actor=actor,
            verb=AuditVerb.UPDATE,
            obj=membership,
            team=team,
            before=before,
            after=_state(membership),
        )
        _request_sync("role", team)
    return membership


def remove_member(team: Team, membership_id: int, *, actor) -> None:
    """Remove a member. Raises PermissionDenied, InvalidTransition, ValidationError (last lead)."""
    _require_manager(actor, team)
    with transaction.atomic():
        _lock_team(team, actor)
        membership = _lock_membership(team, membership_id)
        _keeps_a_lead(team, membership, actor)
        before = _state(membership)
        audit(actor=actor, verb=AuditVerb.DELETE, obj=membership, team=team, before=before)
        membership.delete()
        _request_sync("remove", team)
