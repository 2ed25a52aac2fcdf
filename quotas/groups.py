"""Identity-provider groups → team memberships and site admin (issue 33).

Admins write :class:`~quotas.models.GroupRule` rows: a group name or pattern (fnmatch, case-
sensitive) gives a role in a team, or an exact group name makes its members site admins (as do
the names in ``FAIRSHARE_OIDC_ADMIN_GROUPS``). At every single sign-on :func:`apply_groups`
brings the user's memberships in line with the groups the identity provider sent:

1. For each team some rule matches, the wanted role is the highest one matched
   (lead > member > viewer).
2. A team the user is not in gets a membership, marked derived (:class:`DerivedMembership`).
3. A derived membership takes the wanted role; one no rule wants any more is removed.
   A hand-made membership (no marker) is left alone, whatever the groups say.
4. The last-lead rule of ``quotas.members`` holds: a derived lead who is the team's last lead
   keeps the role (audited with a note) until the team has another lead.
5. Site admin: given (the ``admins`` group) when an admin group matches, and taken away again
   only when it was given this way (``ExternalIdentity.admin_from_groups``).

Separation of duties is untouched: it is checked when a request is decided
(``quotas.decisions.check_separation_of_duties``), whoever made the decider an admin.
Everything happens in the caller's transaction; teams are locked before memberships, the order
``quotas.members`` uses.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from quotas.changes import audit
from quotas.choices import AuditVerb, MembershipRole
from quotas.exceptions import PermissionDenied
from quotas.members import _keeps_a_lead, _state  # the one last-lead rule, not a copy
from quotas.models import (
    DerivedMembership,
    ExternalIdentity,
    GroupRule,
    Membership,
    Team,
    TeamClusterGroup,
)
from quotas.querysets import is_site_admin
from quotas.signals import membership_changed

__all__ = [
    "GroupOutcome",
    "add_cluster_group",
    "apply_groups",
    "create_rule",
    "delete_rule",
    "preview_rule",
    "remove_cluster_group",
    "wanted_roles",
]

ROLE_RANK = {MembershipRole.VIEWER: 0, MembershipRole.MEMBER: 1, MembershipRole.LEAD: 2}
NOTE = "from identity-provider groups at sign-in"


def matches(pattern: str, group: str) -> bool:
    """Case-sensitive: identity providers treat ``Team-A`` and ``team-a`` as two groups."""
    return fnmatch.fnmatchcase(group, pattern)


def wanted_roles(
    groups: Sequence[str], rules: Iterable[GroupRule]
) -> tuple[dict[int, tuple[str, list[str]]], list[str]]:
    """Return ({team_id: (role, the groups that gave it)}, the groups that make a site admin)."""
    teams: dict[int, tuple[str, list[str]]] = {}
    admin: list[str] = []
    for rule in rules:
        hits = sorted(g for g in groups if matches(rule.pattern, g))
        if not hits:
            continue
        if rule.site_admin:
            admin.extend(hits)
            continue
        role, given_by = teams.get(rule.team_id, (None, []))
        if role is None or ROLE_RANK[rule.role] > ROLE_RANK[role]:
            role = rule.role
        teams[rule.team_id] = (role, sorted(set(given_by) | set(hits)))
    admin.extend(g for g in settings.FAIRSHARE_OIDC_ADMIN_GROUPS if g in groups)
    return teams, sorted(set(admin))


@dataclass
class GroupOutcome:
    joined: list[str] = field(default_factory=list)  # "team-a (lead)"
    changed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    kept_last_lead: list[str] = field(default_factory=list)  # team slugs
    site_admin: bool | None = None  # True given, False taken away, None unchanged


def apply_groups(user, identity: ExternalIdentity, groups: Sequence[str]) -> GroupOutcome:
    """Bring ``user``'s derived memberships and site admin in line with ``groups``.

    Must run inside the caller's transaction (the sign-in); writes AuditEvents and announces
    the changed teams after commit.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("apply_groups runs inside the sign-in's transaction.")
    outcome = GroupOutcome()
    # Rules of inactive teams give nothing (and so derived memberships there end).
    rules = GroupRule.objects.filter(Q(site_admin=True) | Q(team__active=True)).select_related(
        "team"
    )
    wanted, admin_groups = wanted_roles(groups, rules)

    current = {
        m.team_id: m
        for m in Membership.objects.filter(user=user).select_related("team", "derived", "user")
    }
    touched = sorted(set(wanted) | {t for t, m in current.items() if _is_derived(m)})
    # Lock the teams, then the memberships: the order quotas.members takes its locks in.
    teams = {
        t.pk: t for t in Team.objects.select_for_update().filter(pk__in=touched).order_by("pk")
    }
    list(Membership.objects.select_for_update().filter(user=user).order_by("pk"))
    changed_slugs: set[str] = set()

    for team_id in touched:
        team = teams[team_id]
        membership = current.get(team_id)
        if team_id in wanted:
            role, given_by = wanted[team_id]
            if membership is None:
                membership = Membership(user=user, team=team, role=role)
                membership.full_clean()
                membership.save()
                DerivedMembership.objects.create(membership=membership, groups=given_by)
                audit(
                    actor=None,
                    verb=AuditVerb.CREATE,
                    obj=membership,
                    team=team,
                    after=_state(membership),
                    note=NOTE,
                )
                outcome.joined.append(f"{team.slug} ({role})")
                changed_slugs.add(team.slug)
                continue
            if not _is_derived(membership):
                continue  # hand-made: left alone
            marker = membership.derived
            if marker.groups != given_by:
                marker.groups = given_by
                marker.save(update_fields=["groups", "updated"])
            if membership.role == role:
                continue
            if not _may_stop_leading(team, membership):
                outcome.kept_last_lead.append(team.slug)
                continue
            before = _state(membership)
            membership.role = role
            membership.save(update_fields=["role", "updated"])
            audit(
                actor=None,
                verb=AuditVerb.UPDATE,
                obj=membership,
                team=team,
                before=before,
                after=_state(membership),
                note=NOTE,
            )
            outcome.changed.append(f"{team.slug} ({role})")
            changed_slugs.add(team.slug)
        elif membership is not None and _is_derived(membership):
            if not _may_stop_leading(team, membership):
                outcome.kept_last_lead.append(team.slug)
                continue
            audit(
                actor=None,
                verb=AuditVerb.DELETE,
                obj=membership,
                team=team,
                before=_state(membership),
                note=NOTE,
            )
            membership.delete()
            outcome.left.append(team.slug)
            changed_slugs.add(team.slug)

    outcome.site_admin = _apply_site_admin(user, identity, bool(admin_groups))
    if changed_slugs:
        slugs = sorted(changed_slugs)
        transaction.on_commit(
            lambda: membership_changed.send(sender=Membership, reason="groups", team_slugs=slugs)
        )
    return outcome


def _is_derived(membership: Membership) -> bool:
    try:
        return membership.derived is not None
    except DerivedMembership.DoesNotExist:
        return False


def _may_stop_leading(team: Team, membership: Membership) -> bool:
    """The last-lead rule (``quotas.members._keeps_a_lead``) with nobody's admin exemption."""
    try:
        _keeps_a_lead(team, membership, None)
    except ValidationError:
        audit(
            actor=None,
            verb=AuditVerb.UPDATE,
            obj=membership,
            team=team,
            before=_state(membership),
            after=_state(membership),
            note=f"{NOTE}: kept as the team's last lead; appoint another lead",
        )
        return False
    return True


def _apply_site_admin(user, identity: ExternalIdentity, wanted: bool) -> bool | None:
    user.__dict__.pop("_fairshare_is_admin", None)  # is_site_admin's cache
    admins, _ = Group.objects.get_or_create(name=settings.ADMINS_GROUP)
    in_group = user.groups.filter(pk=admins.pk).exists()
    if wanted and not in_group:
        user.groups.add(admins)
        identity.admin_from_groups = True
        identity.save(update_fields=["admin_from_groups", "updated"])
        audit(
            actor=None,
            verb=AuditVerb.UPDATE,
            obj=user,
            team=None,
            after={"site_admin": True},
            note=NOTE,
        )
        return True
    if not wanted and in_group and identity.admin_from_groups:
        user.groups.remove(admins)
        identity.admin_from_groups = False
        identity.save(update_fields=["admin_from_groups", "updated"])
        audit(
            actor=None,
            verb=AuditVerb.UPDATE,
            obj=user,
            team=None,
            before={"site_admin": True},
            after={"site_admin": False},
            note=NOTE,
        )
        return False
    return None


# ----------------------------------------------------------------------------- admin's rules


def _require_admin(actor) -> None:
    if not is_site_admin(actor):
        raise PermissionDenied("Only site admins manage group rules and cluster groups.")


def preview_rule(pattern: str) -> list[dict[str, object]]:
    """Who a rule with ``pattern`` matches: the users whose groups at their last sign-in
    match, with those groups, by username."""
    validate_group_name(pattern)
    found: dict[str, set[str]] = {}
    for username, groups in ExternalIdentity.objects.filter(user__is_active=True).values_list(
        "user__username", "groups"
    ):
        hits = {g for g in groups or [] if isinstance(g, str) and matches(pattern, g)}
        if hits:
            found.setdefault(username, set()).update(hits)
    return [{"username": u, "groups": sorted(g)} for u, g in sorted(found.items())]


def validate_group_name(value: str) -> None:
    from quotas.models import validate_group_name as check

    try:
        check(value)
    except ValidationError as e:
        raise ValidationError({"pattern": e.messages}) from None


def create_rule(
    *, pattern: str, team: Team | None, role: str, site_admin: bool, actor
) -> GroupRule:
    """Add a rule. Raises PermissionDenied or ValidationError (keyed by field). It takes effect
    at each matched person's next sign-in."""
    _require_admin(actor)
    rule = GroupRule(
        pattern=(pattern or "").strip(),
        team=None if site_admin else team,
        role="" if site_admin else (role or ""),
        site_admin=site_admin,
        created_by=actor,
    )
    with transaction.atomic():
        rule.full_clean()
        rule.save()
        audit(actor=actor, verb=AuditVerb.CREATE, obj=rule, team=rule.team, after=_rule(rule))
    return rule


def delete_rule(rule_id: int, *, actor) -> None:
    """Remove a rule; the memberships it gave end at each person's next sign-in."""
    _require_admin(actor)
    with transaction.atomic():
        rule = GroupRule.objects.select_for_update().filter(pk=rule_id).first()
        if rule is None:
            raise ValidationError({"detail": "This rule does not exist any more."})
        audit(actor=actor, verb=AuditVerb.DELETE, obj=rule, team=rule.team, before=_rule(rule))
        rule.delete()


def _rule(rule: GroupRule) -> dict[str, object]:
    return {
        "pattern": rule.pattern,
        "team": rule.team.slug if rule.team else None,
        "role": rule.role,
        "site_admin": rule.site_admin,
    }


def add_cluster_group(team: Team, *, group: str, role: str, actor) -> TeamClusterGroup:
    """Bind an identity-provider group in the team's namespaces. Raises PermissionDenied,
    ValidationError. Announces the team for a sync after commit."""
    _require_admin(actor)
    with transaction.atomic():
        binding = TeamClusterGroup(team=team, group=(group or "").strip(), role=role)
        binding.full_clean()
        binding.save()
        audit(
            actor=actor,
            verb=AuditVerb.CREATE,
            obj=binding,
            team=team,
            after={"group": binding.group, "role": binding.role},
        )
        _announce(team)
    return binding


def remove_cluster_group(binding_id: int, *, actor) -> None:
    _require_admin(actor)
    with transaction.atomic():
        binding = (
            TeamClusterGroup.objects.select_for_update()
            .select_related("team")
            .filter(pk=binding_id)
            .first()
        )
        if binding is None:
            raise ValidationError({"detail": "This group binding does not exist any more."})
        audit(
            actor=actor,
            verb=AuditVerb.DELETE,
            obj=binding,
            team=binding.team,
            before={"group": binding.group, "role": binding.role},
        )
        binding.delete()
        _announce(binding.team)


def _announce(team: Team) -> None:
    slug = team.slug
    transaction.on_commit(
        lambda: membership_changed.send(sender=Membership, reason="groups", team_slugs=[slug])
    )
