"""Rebalance: change the weights, tiers and guarantees of many teams at once, atomically.

Admins use it to re-shape the whole cluster (a new team arrives, a department shrinks). Either
every change is applied or none is: one transaction, validated as a whole before anything is
written, capacity re-checked under the cluster-wide capacity lock with all proposed guarantees
together (so moving GPUs from one team to another works even on a full cluster).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from quotas import notify
from quotas.capacity_rule import capacity_lock, check_capacity
from quotas.changes import audit, coalesced_quota_changes, notify_quota_changed
from quotas.choices import AuditVerb
from quotas.direct import set_team_quota
from quotas.exceptions import PermissionDenied
from quotas.hierarchy import new_hierarchy_problems
from quotas.models import PriorityTier, Team, TeamQuota
from quotas.quantities import format_quantity, parse_quantity
from quotas.querysets import is_site_admin

__all__ = ["RebalanceResult", "rebalance"]

logger = logging.getLogger(__name__)

_KEYS = {"weight", "tier", "guarantee"}


@dataclass(frozen=True)
class RebalanceResult:
    """What changed: team slugs whose weight or tier changed, and (slug, resource) quotas."""

    teams: list[str] = field(default_factory=list)
    quotas: list[tuple[str, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.teams or self.quotas)


def _team_state(team: Team) -> dict:
    return {"weight": team.weight, "tier": team.tier.name if team.tier else None}


def _resolve_tier(value) -> PriorityTier | None:
    """A tier from an instance, a primary key or a name; None or "" means no tier."""
    if value is None or value == "":
        return None
    if isinstance(value, PriorityTier):
        return value
    lookup = {"pk": value} if str(value).isdigit() else {"name": value}
    tier = PriorityTier.objects.filter(**lookup).first()
    if tier is None:
        raise ValidationError({"tier": f"There is no priority tier {value!r}."})
    return tier


def _check_hierarchy(
    quota_updates: list[tuple[Team, str, Decimal, Decimal | None, Decimal]],
) -> None:
    """Refuse guarantees that would put a department's teams over its limit (all together).

    Each message goes on every changed guarantee of that resource under the department (for
    the rule "limit" on the team itself): ``<slug>.guarantee.<resource>``.
    """
    problems = new_hierarchy_problems(
        {(team.pk, res): (amount, limit) for team, res, amount, limit, _ in quota_updates}
    )
    if not problems:
        return
    parents = dict(Team.objects.values_list("pk", "parent_id"))

    def under(team_id: int, department_id: int) -> bool:
        seen: set[int] = set()
        current: int | None = team_id
        while current is not None and current not in seen:
            if current == department_id:
                return True
            seen.add(current)
            current = parents.get(current)
        return False

    errors: dict[str, list[str]] = {}
    for problem in problems:
        targets = [
            (team, res)
            for team, res, amount, _, old in quota_updates
            if res == problem.resource
            and amount > old
            and (problem.child_id == team.pk or under(team.pk, problem.team_id))
        ] or [(team, res) for team, res, *_ in quota_updates if res == problem.resource]
        for team, res in targets:
            errors.setdefault(f"{team.slug}.guarantee.{res}", []).append(problem.message)
    raise ValidationError(errors)


def rebalance(changes: Mapping[str, Mapping], *, actor, note: str = "") -> RebalanceResult:
    """Apply ``{team_slug: {"weight": int, "tier": tier | id | name | None, "guarantee":
    {resource: amount}}}`` in one transaction.

    Steps:
    1. lock capacity and the teams, validate every change (weights 1–65535, known tiers,
       quantities, guarantee ≤ the team's current limit) and collect every error;
    2. check capacity and the hierarchy rules (a department's teams' guarantees within its
       limit) with all new guarantees at once;
    3. save weights and tiers (``full_clean``, one ``rebalance`` AuditEvent per team), then the
       guarantees through ``set_team_quota`` — decreases first, so no intermediate state is
       over capacity;
    4. after commit, ``quota_changed`` fires once for every team touched (quotas, weights and
       tiers), which recomputes shares and then syncs the cluster; each team whose quota,
       weight or tier changed has its leads told what changed, from → to
       (``notify.rebalanced``).

    Unchanged values are skipped. Raises PermissionDenied (not an admin), ValidationError keyed
    ``<slug>.weight``, ``<slug>.tier`` or ``<slug>.guarantee.<resource>`` (nothing saved),
    QuotaExceeded (nothing saved).
    """
    if not is_site_admin(actor):
        raise PermissionDenied("Only site admins may rebalance teams.")
    result = RebalanceResult()
    with transaction.atomic():
        capacity_lock()
        teams = {
            t.slug: t
            for t in Team.objects.select_for_update(of=("self",))
            .select_related("tier")
            .filter(slug__in=list(changes))
        }
        quotas = {
            (q.team_id, q.resource): q for q in TeamQuota.objects.filter(team__in=teams.values())
        }
        team_updates, quota_updates = _validated(changes, teams, quotas)

        check_capacity({(team.pk, res): amount for team, res, amount, _, _ in quota_updates})
        _check_hierarchy(quota_updates)

        for team, before in team_updates:
            team.save(update_fields=["weight", "tier", "updated"])
            audit(
                actor=actor,
                verb=AuditVerb.REBALANCE,
                obj=team,
                team=team,
                before=before,
                after=_team_state(team),
                note=note,
            )
            result.teams.append(team.slug)
        with coalesced_quota_changes("rebalance"):
            # Decreases first: every intermediate total stays at or below the checked final one.
            for team, resource, amount, limit, _old in sorted(
                quota_updates, key=lambda u: (u[2] > u[4], u[0].slug, u[1])
            ):
                set_team_quota(
                    team,
                    resource,
                    guarantee=amount,
                    limit=limit,
                    actor=actor,
                    note=note or f"rebalance: guarantee {format_quantity(amount, resource)}",
                    announce=False,
                )
                result.quotas.append((team.slug, resource))
            notify_quota_changed([team.pk for team, _ in team_updates], "rebalance")
        _announce(team_updates, quota_updates, actor=actor, note=note)
    return result


def _validated(
    changes: Mapping[str, Mapping], teams: Mapping[str, Team], quotas: Mapping[tuple, TeamQuota]
) -> tuple[list[tuple[Team, dict]], list[tuple[Team, str, Decimal, Decimal | None, Decimal]]]:
    """Step 1 of ``rebalance``: apply every change to the (locked) teams in memory, validate it
    and collect all the errors at once; return the teams whose weight or tier changed (with
    their state before) and the guarantees that change ``(team, resource, new, limit, old)``.
    Raises ValidationError with every error keyed by field; nothing is saved."""
    errors: dict[str, list[str]] = {}
    team_updates: list[tuple[Team, dict]] = []
    quota_updates: list[tuple[Team, str, Decimal, Decimal | None, Decimal]] = []
    for slug, change in sorted(changes.items()):
        team = teams.get(slug)
        if team is None:
            errors[slug] = [f"There is no team {slug!r}."]
            continue
        unknown = sorted(set(change) - _KEYS)
        if unknown:
            errors[f"{slug}.{unknown[0]}"] = ["Unknown field."]
            continue
        before = _team_state(team)
        if "weight" in change:
            team.weight = change["weight"]
        if "tier" in change:
            try:
                team.tier = _resolve_tier(change["tier"])
            except ValidationError as e:
                errors[f"{slug}.tier"] = e.message_dict["tier"]
        try:
            team.full_clean()
        except ValidationError as e:
            for name, messages in e.message_dict.items():
                errors[f"{slug}.{name}"] = messages
        if _team_state(team) != before:
            team_updates.append((team, before))
        for resource, raw in sorted(change.get("guarantee", {}).items()):
            key = f"{slug}.guarantee.{resource}"
            current = quotas.get((team.pk, resource))
            limit = current.limit if current else None
            try:
                amount = parse_quantity(raw, field=key)
                TeamQuota(team=team, resource=resource, guarantee=amount, limit=limit).clean()
            except ValidationError as e:
                errors[key] = [m for messages in e.message_dict.values() for m in messages]
                continue
            old = current.guarantee if current else Decimal(0)
            if amount != old:
                quota_updates.append((team, resource, amount, limit, old))
    if errors:
        raise ValidationError(errors)
    return team_updates, quota_updates


def _announce(team_updates, quota_updates, *, actor, note: str) -> None:
    """One notice per team whose quota, weight or tier changed, to its leads (after commit):
    from → to for each."""
    now = timezone.now()
    quota_changes: dict[int, dict] = {}
    for team, resource, amount, limit, old in quota_updates:
        quota_changes.setdefault(team.pk, {})[resource] = ((old, limit), (amount, limit))
    setting_changes: dict[int, dict] = {}
    for team, before in team_updates:
        after = _team_state(team)
        setting_changes[team.pk] = {
            key: (str(before[key] or "none"), str(after[key] or "none"))
            for key in ("weight", "tier")
        }
    teams = {team.pk: team for team, *_ in [*quota_updates, *team_updates]}
    for team_id, team in sorted(teams.items(), key=lambda item: item[1].slug):
        notify.rebalanced(
            team,
            quota_changes.get(team_id, {}),
            settings_changed=setting_changes.get(team_id),
            actor=actor,
            note=note,
            at=now,
        )
