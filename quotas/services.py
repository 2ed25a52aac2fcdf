"""Quota request lifecycle and direct quota changes: each function is one transaction and writes
an AuditEvent.

Lifecycle: pending → approved | rejected | withdrawn. A permanent approval applies at once
(status approved). A temporary one (with a window) is approved → active when its window opens →
expired when it closes; if the window is already open at approval it goes straight to active.

Capacity rule (DESIGN.md): per resource, Σ guarantees ≤ schedulable capacity × (1 − reserve).
The sum is hierarchical: a department counts max(own guarantee, Σ of its children's), and only
root teams are added up, so a department's guarantee already covers its children. Approved
temporary grants whose window has not opened yet are counted as reserved. The check runs under a
cluster-wide lock (``capacity_lock``) inside the approving transaction, so two admins approving
at once can never over-commit.

Hierarchy rules (DESIGN.md "Upstream semantics"; Volcano's queue webhook, see docs/upstream.md):
a department's Queue guarantee is *derived* — max(its own guarantee, Σ its teams') — so the
rules that can be broken by a change are, per resource, (1) a team's limit may not be over the
limit of its nearest ancestor that has one, and (2) a department's derived guarantee may not be
over its own limit. ``check_hierarchy`` refuses a change that would break either (a
ValidationError naming the department and the numbers); it is called by every service that
changes guarantees, limits or the team tree, inside the same transaction.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from quotas import notify
from quotas.capacity import latest_capacity
from quotas.changes import (  # re-exported: callers record changes through services
    audit,
    coalesced_quota_changes,  # noqa: F401
    notify_quota_changed,
)
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
    QuotaExceeded,
    SelfDecisionRefused,
)
from quotas.models import QuotaRequest, QuotaRequestLine, Team, TeamQuota
from quotas.quantities import (
    amount_words,
    format_quantity,
    parse_quantity,
    validate_resource_name,
)
from quotas.querysets import is_site_admin
from quotas.transitions import render_overrides

logger = logging.getLogger(__name__)

_LOCK_KEY = 0x0FA1_25A5  # advisory lock id for "guarantees of the whole cluster"


@dataclass(frozen=True)
class LineInput:
    resource: str
    guarantee: Decimal | str | int
    limit: Decimal | str | int | None


# --------------------------------------------------------------------------- helpers


def capacity_lock() -> None:
    """Serialize capacity checks across transactions (call inside ``transaction.atomic``).

    PostgreSQL: a transaction-scoped advisory lock. SQLite: writes are already serialized
    (settings use BEGIN IMMEDIATE). Other backends: lock one fixed row (the first team), which
    every capacity check locks in turn.
    """
    vendor = connection.vendor
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
    elif vendor != "sqlite":
        list(Team.objects.select_for_update().order_by("pk").values_list("pk", flat=True)[:1])


def _q(value: Decimal | None, resource: str) -> str | None:
    return None if value is None else format_quantity(value, resource)


def quota_state(team: Team) -> dict[str, dict[str, str | None]]:
    """The team's quotas as JSON-ready {resource: {guarantee, limit}} (audit before/after)."""
    return {
        q.resource: {"guarantee": _q(q.guarantee, q.resource), "limit": _q(q.limit, q.resource)}
        for q in team.quotas.all()
    }


def usable_capacity(capacity: Mapping[str, Decimal] | None = None) -> dict[str, Decimal]:
    """Schedulable capacity × (1 − reserve), per resource, from the latest capacity record."""
    amounts = latest_capacity() if capacity is None else capacity
    keep = Decimal(1) - settings.FAIRSHARE_CAPACITY_RESERVE
    result = {}
    for resource, amount in amounts.items():
        usable = amount * keep
        # Whole devices: a 10 % reserve of 1,000 GPUs leaves 900, of 7 leaves 6.
        if "/" in resource:
            usable = usable.to_integral_value(rounding="ROUND_FLOOR")
        result[resource] = usable
    return result


def committed_guarantees(
    overrides: Mapping[tuple[int, str], Decimal] | None = None,
    *,
    now: datetime | None = None,
    exclude_request: int | None = None,
) -> dict[str, Decimal]:
    """Σ guarantees per resource over the hierarchy, with ``overrides`` {(team_id, resource): g}.

    Counts active teams only, adds approved temporary grants not yet active (reserved), and
    folds departments as max(own, Σ children).
    """
    now = now or timezone.now()
    teams = dict(Team.objects.filter(active=True).values_list("id", "parent_id"))
    own: dict[tuple[int, str], Decimal] = {}
    for team_id, resource, guarantee in TeamQuota.objects.filter(team__active=True).values_list(
        "team_id", "resource", "guarantee"
    ):
        own[(team_id, resource)] = guarantee
    scheduled = QuotaRequestLine.objects.filter(
        request__status=QuotaRequestStatus.APPROVED,
        request__window_start__gt=now,
        request__team__active=True,
    ).exclude(request_id=exclude_request)
    for team_id, resource, approved in scheduled.values_list(
        "request__team_id", "resource", "approved_guarantee"
    ):
        current = own.get((team_id, resource), Decimal(0))
        if approved is not None and approved > current:
            own[(team_id, resource)] = approved
    for key, value in (overrides or {}).items():
        own[key] = value

    children: dict[int | None, list[int]] = defaultdict(list)
    for team_id, parent_id in teams.items():
        children[parent_id if parent_id in teams else None].append(team_id)
    resources = {resource for _, resource in own}

    def effective(team_id: int, resource: str, depth: int = 0) -> Decimal:
        mine = own.get((team_id, resource), Decimal(0))
        if depth > 8:
            return mine
        below = sum(
            (effective(child, resource, depth + 1) for child in children.get(team_id, ())),
            Decimal(0),
        )
        return max(mine, below)

    return {
        resource: sum((effective(root, resource) for root in children[None]), Decimal(0))
        for resource in sorted(resources)
    }


def check_capacity(
    overrides: Mapping[tuple[int, str], Decimal],
    *,
    now: datetime | None = None,
    exclude_request: int | None = None,
) -> None:
    """Raise QuotaExceeded if the guarantees with ``overrides`` exceed usable capacity.

    Only resources whose guarantee grows are checked: lowering or keeping a guarantee is always
    allowed, even on a cluster that shrank.
    """
    grown = {
        resource
        for (team_id, resource), value in overrides.items()
        if value
        > (
            TeamQuota.objects.filter(team_id=team_id, resource=resource)
            .values_list("guarantee", flat=True)
            .first()
            or Decimal(0)
        )
    }
    if not grown:
        return
    totals = committed_guarantees(overrides, now=now, exclude_request=exclude_request)
    usable = usable_capacity()
    reserve_pct = settings.FAIRSHARE_CAPACITY_RESERVE * 100
    for resource in sorted(grown):
        total = totals.get(resource, Decimal(0))
        available = usable.get(resource, Decimal(0))
        if total > available:
            raise QuotaExceeded(
                f"Guarantees for {resource} would total {format_quantity(total, resource)}, "
                f"over the {format_quantity(available, resource)} schedulable "
                f"(capacity less the {reserve_pct:g} % reserve).",
                resource=resource,
                requested=format_quantity(total, resource),
                available=format_quantity(available, resource),
            )


# --------------------------------------------------------------------------- hierarchy rules


@dataclass(frozen=True)
class HierarchyProblem:
    """One broken hierarchy rule: ``rule`` is ``limit`` (a limit over an ancestor's) or
    ``guarantee`` (a department's teams' guarantees over its limit)."""

    rule: str
    team_id: int  # the team whose limit is exceeded (the ancestor or the department)
    child_id: int | None  # the team over it (rule ``limit``), else None
    resource: str
    message: str

    @property
    def key(self) -> tuple:
        return (self.rule, self.team_id, self.child_id, self.resource)


def hierarchy_problems(
    quotas: Mapping[tuple[int, str], tuple[Decimal, Decimal | None]] | None = None,
    *,
    parents: Mapping[int, int | None] | None = None,
    active: Mapping[int, bool] | None = None,
) -> list[HierarchyProblem]:
    """The hierarchy rules the teams break, with ``quotas`` {(team_id, resource): (guarantee,
    limit)}, ``parents`` {team_id: parent_id} and ``active`` {team_id: bool} overriding the
    database (two queries).

    Only effectively active teams count (the team and all its ancestors active), as in the
    rendered Queues. A limit of None (or no quota row) is no ceiling; an ancestor whose limit is
    zero is skipped, as Volcano's ``findNearestAncestorCapability`` only sees positive amounts.
    """
    teams = {row["id"]: row for row in Team.objects.values("id", "slug", "parent_id", "active")}
    for team_id, parent_id in (parents or {}).items():
        teams[team_id] = {**teams[team_id], "parent_id": parent_id}
    for team_id, flag in (active or {}).items():
        teams[team_id] = {**teams[team_id], "active": flag}
    problems = _hierarchy_problems(teams, quotas)
    # While a transition waits, the cluster still has the team as it was (rendered active, or
    # under its previous department): the rules must hold for that view as well, or the
    # renderer refuses the whole desired state (quotas.transitions.render_overrides).
    overrides = render_overrides()
    if overrides:
        rendered = dict(teams)
        for team_id, override in overrides.items():
            if team_id not in rendered:
                continue
            row = dict(rendered[team_id])
            if override.get("hidden"):
                row["active"] = False
            if "active" in override:
                row["active"] = override["active"]
            if "parent_id" in override:
                row["parent_id"] = override["parent_id"]
            rendered[team_id] = row
        seen = {problem.key for problem in problems}
        problems += [p for p in _hierarchy_problems(rendered, quotas) if p.key not in seen]
    return problems


def _hierarchy_problems(
    teams: Mapping[int, Mapping[str, Any]],
    quotas: Mapping[tuple[int, str], tuple[Decimal, Decimal | None]] | None,
) -> list[HierarchyProblem]:
    included: set[int] = set()
    for team_id in teams:
        seen: set[int] = set()
        current: int | None = team_id
        while current is not None and current in teams and current not in seen:
            if not teams[current]["active"]:
                break
            seen.add(current)
            current = teams[current]["parent_id"]
        else:
            if current is None:
                included.add(team_id)
    own: dict[tuple[int, str], tuple[Decimal, Decimal | None]] = {
        (t, r): (g, lim)
        for t, r, g, lim in TeamQuota.objects.filter(team_id__in=included).values_list(
            "team_id", "resource", "guarantee", "limit"
        )
    }
    own.update({k: v for k, v in (quotas or {}).items() if k[0] in included})
    children: dict[int, list[int]] = defaultdict(list)
    for team_id in sorted(included):
        parent = teams[team_id]["parent_id"]
        if parent in included:
            children[parent].append(team_id)
    resources = sorted({r for _, r in own})
    memo: dict[tuple[int, str], Decimal] = {}

    def derived(team_id: int, resource: str) -> Decimal:
        key = (team_id, resource)
        if key not in memo:
            mine = own.get(key, (Decimal(0), None))[0]
            below = sum((derived(c, resource) for c in children[team_id]), Decimal(0))
            memo[key] = max(mine, below)
        return memo[key]

    def limit_of(team_id: int, resource: str) -> Decimal | None:
        return own.get((team_id, resource), (Decimal(0), None))[1]

    problems: list[HierarchyProblem] = []
    for team_id in sorted(included, key=lambda t: teams[t]["slug"]):
        slug = teams[team_id]["slug"]
        for resource in resources:
            mine = limit_of(team_id, resource)
            zero = _zero_ancestor(team_id, resource, teams, included, limit_of)
            if mine is not None and mine > 0 and zero is not None:
                problems.append(
                    HierarchyProblem(
                        "limit",
                        zero,
                        team_id,
                        resource,
                        _zero_limit_message(teams[zero]["slug"], slug, mine, resource),
                    )
                )
            elif mine is not None:
                ancestor = teams[team_id]["parent_id"]
                while ancestor in included and not limit_of(ancestor, resource):
                    ancestor = teams[ancestor]["parent_id"]
                if ancestor in included:
                    ceiling = limit_of(ancestor, resource)
                    if ceiling is not None and mine > ceiling:
                        problems.append(
                            HierarchyProblem(
                                "limit",
                                ancestor,
                                team_id,
                                resource,
                                f"{teams[ancestor]['slug']}'s limit is "
                                f"{amount_words(ceiling, resource)}; {slug}'s limit would be "
                                f"{amount_words(mine, resource)}, over it.",
                            )
                        )
            if children[team_id] and mine is not None:
                total = sum((derived(c, resource) for c in children[team_id]), Decimal(0))
                if total > mine:
                    problems.append(
                        HierarchyProblem(
                            "guarantee",
                            team_id,
                            None,
                            resource,
                            f"{slug}'s limit is {amount_words(mine, resource)}; its teams "
                            f"would be guaranteed {amount_words(total, resource)}.",
                        )
                    )
    return problems


def _zero_ancestor(team_id, resource, teams, included, limit_of) -> int | None:
    """The nearest department above ``team_id`` whose limit for ``resource`` is exactly 0."""
    node = teams[team_id]["parent_id"]
    seen: set[int] = set()
    while node in included and node not in seen:
        seen.add(node)
        limit = limit_of(node, resource)
        if limit is not None and limit == 0:
            return node
        node = teams[node]["parent_id"]
    return None


def _zero_limit_message(department: str, slug: str, limit: Decimal, resource: str) -> str:
    """Why a department limit of 0 over a team's positive limit is refused, from Volcano's
    capacity plugin (``pkg/scheduler/plugins/capacity/capacity.go``): its webhook lets the pair
    through (``findNearestAncestorCapability`` skips amounts under 0.1), but the scheduler
    does not do what either reading of it means."""
    if resource in ("cpu", "memory"):
        why = (
            f"Volcano's capacity plugin reads a {resource} capability of 0 as no ceiling at all "
            "(checkHierarchicalQueue gives it the parent's), so the 0 would limit nothing"
        )
    else:
        why = (
            f"Volcano's capacity plugin reads it as none of {resource} for every team below "
            f"{department} (the subtree's realCapability is cut to 0), so {slug}'s limit of "
            f"{amount_words(limit, resource)} could never be used"
        )
    return (
        f"{department}'s limit is 0 while {slug}'s limit would be "
        f"{amount_words(limit, resource)}: {why}. Set {department}'s limit to at least "
        f"{amount_words(limit, resource)}, or leave it empty for no ceiling."
    )


def new_hierarchy_problems(
    quotas: Mapping[tuple[int, str], tuple[Decimal, Decimal | None]] | None = None,
    *,
    parents: Mapping[int, int | None] | None = None,
    active: Mapping[int, bool] | None = None,
) -> list[HierarchyProblem]:
    """The problems the change would add to those that exist now (see ``check_hierarchy``)."""
    before = {p.key for p in hierarchy_problems()}
    return [
        p for p in hierarchy_problems(quotas, parents=parents, active=active) if p.key not in before
    ]


def check_hierarchy(
    quotas: Mapping[tuple[int, str], tuple[Decimal, Decimal | None]] | None = None,
    *,
    parents: Mapping[int, int | None] | None = None,
    active: Mapping[int, bool] | None = None,
    field: str | None = None,
) -> None:
    """Raise ValidationError if the change (see ``hierarchy_problems``) breaks a hierarchy rule
    that holds now; rules already broken before it (data from before the rules) do not block it.

    Errors are keyed ``limit`` or ``guarantee`` (the value to change), prefixed by the resource
    (``nvidia.com/gpu.limit``) when ``field`` is ``"resource"``, or all under ``field`` when it
    names one (``parent``).
    """
    new = new_hierarchy_problems(quotas, parents=parents, active=active)
    if not new:
        return
    changed_limits = {
        (t, r)
        for (t, r), (_, lim) in (quotas or {}).items()
        if lim
        != (TeamQuota.objects.filter(team_id=t, resource=r).values_list("limit", flat=True).first())
    }
    errors: dict[str, list[str]] = defaultdict(list)
    for problem in new:
        if field not in (None, "resource"):
            key = field
        else:
            limit_changed = (problem.team_id, problem.resource) in changed_limits
            key = "limit" if problem.rule == "limit" or limit_changed else "guarantee"
            if field == "resource":
                key = f"{problem.resource}.{key}"
        errors[key].append(problem.message)
    raise ValidationError(dict(errors))


def hierarchy_floor(team: Team, resource: str) -> Decimal:
    """The lowest limit ``team`` can have for ``resource`` without breaking a hierarchy rule:
    its teams' largest limit and their derived guarantees' sum (0 for a team without teams)."""
    limits = TeamQuota.objects.filter(
        team__parent=team, team__active=True, resource=resource, limit__isnull=False
    ).values_list("limit", flat=True)
    floor = max([Decimal(0), *limits])
    children = list(Team.objects.filter(parent=team, active=True).values_list("pk", flat=True))
    if children:
        guarantees = committed_guarantees_of(children, resource)
        floor = max(floor, guarantees)
    return floor


def committed_guarantees_of(team_ids: Iterable[int], resource: str) -> Decimal:
    """Σ of the teams' derived guarantees (max(own, Σ their teams')) for ``resource``."""
    total = Decimal(0)
    for team_id in team_ids:
        own = TeamQuota.objects.filter(team_id=team_id, resource=resource).values_list(
            "guarantee", flat=True
        ).first() or Decimal(0)
        below = list(
            Team.objects.filter(parent_id=team_id, active=True).values_list("pk", flat=True)
        )
        total += max(own, committed_guarantees_of(below, resource) if below else Decimal(0))
    return total


def _parse_lines(lines: Iterable[LineInput | Mapping]) -> list[LineInput]:
    parsed: list[LineInput] = []
    errors: dict[str, list[str]] = {}
    seen: set[str] = set()
    for index, raw in enumerate(lines):
        line = raw if isinstance(raw, LineInput) else LineInput(**raw)
        prefix = f"lines[{index}]"
        try:
            validate_resource_name(line.resource)
        except ValidationError as e:
            errors[f"{prefix}.resource"] = e.messages
            continue
        if line.resource in seen:
            errors[f"{prefix}.resource"] = [f"{line.resource} appears more than once."]
            continue
        seen.add(line.resource)
        try:
            guarantee = parse_quantity(line.guarantee, field="guarantee")
            if line.limit is None or line.limit == "":
                raise ValidationError({"limit": "A new limit is required."})
            limit = parse_quantity(line.limit, field="limit")
            QuotaRequestLine(resource=line.resource, guarantee=guarantee, limit=limit).clean()
        except ValidationError as e:
            for field, messages in e.message_dict.items():
                errors[f"{prefix}.{field}"] = messages
            continue
        parsed.append(LineInput(line.resource, guarantee, limit))
    if not parsed and not errors:
        errors["lines"] = ["A request needs at least one resource."]
    if errors:
        raise ValidationError(errors)
    return parsed


def check_request_fits_cluster(
    lines: Iterable[LineInput],
    current: Mapping[str, tuple[Decimal, Decimal | None]] | None = None,
    capacity: Mapping[str, Decimal] | None = None,
) -> None:
    """Refuse raises the cluster can never give: a guarantee over the usable capacity
    (capacity × (1 − reserve)) or a limit over the whole capacity. ``current`` {resource:
    (guarantee, limit)} is what the team has: lowering an amount is always allowed, even when
    the cluster shrank under it (None limit: no ceiling, so any limit lowers it). Resources the
    cluster does not report (no capacity collected yet, or a resource it lacks) are not checked
    here; approval checks guarantees against the capacity again. Errors are keyed
    ``lines[i].guarantee`` / ``lines[i].limit``, as ``_parse_lines``'s."""
    capacity = latest_capacity() if capacity is None else capacity
    usable = usable_capacity(capacity)
    errors: dict[str, list[str]] = {}
    for index, line in enumerate(lines):
        total = capacity.get(line.resource)
        if total is None:
            continue
        had_guarantee, had_limit = (current or {}).get(line.resource, (Decimal(0), Decimal(0)))
        raises_limit = had_limit is not None and line.limit is not None and line.limit > had_limit
        if raises_limit and line.limit > total:
            errors[f"lines[{index}].limit"] = [
                f"The cluster has {amount_words(total, line.resource)}; a limit of "
                f"{amount_words(line.limit, line.resource)} could never be used."
            ]
        if line.guarantee > had_guarantee and line.guarantee > usable[line.resource]:
            errors[f"lines[{index}].guarantee"] = [
                f"At most {amount_words(usable[line.resource], line.resource)} of the "
                f"cluster's {amount_words(total, line.resource)} can be guaranteed (the rest "
                f"is held in reserve); a guarantee of "
                f"{amount_words(line.guarantee, line.resource)} could never be approved."
            ]
    if errors:
        raise ValidationError(errors)


# --------------------------------------------------------------------------- services


def submit_request(
    *,
    team: Team,
    requester,
    lines: Iterable[LineInput | Mapping],
    justification: str,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    now: datetime | None = None,
) -> QuotaRequest:
    """Create a pending request. Only leads of the team (or its department) and admins may.

    Raises PermissionDenied, or ValidationError keyed by field (``lines[0].limit``,
    ``window_end``, ``justification``) with nothing saved.
    """
    now = now or timezone.now()
    if not Team.objects.led_by(requester).filter(pk=team.pk).exists():
        raise PermissionDenied("Only the team's leads and site admins may request quota.")
    if not team.active:
        raise ValidationError({"team": "This team is inactive."})
    parsed = _parse_lines(lines)
    if window_end is not None and window_start is None:
        window_start = now
    if window_end is not None and window_end <= now:
        raise ValidationError({"window_end": "The window must end in the future."})
    current = {q.resource: q for q in team.quotas.all()}
    check_request_fits_cluster(parsed, {r: (q.guarantee, q.limit) for r, q in current.items()})
    if all(
        line.resource in current
        and current[line.resource].guarantee == line.guarantee
        and current[line.resource].limit == line.limit
        for line in parsed
    ):
        raise ValidationError({"lines": "The requested amounts equal the current quota."})

    with transaction.atomic():
        request = QuotaRequest(
            team=team,
            requester=requester,
            justification=(justification or "").strip(),
            window_start=window_start,
            window_end=window_end,
        )
        request.full_clean()
        request.save()
        for line in parsed:
            existing = current.get(line.resource)
            row = QuotaRequestLine(
                request=request,
                resource=line.resource,
                guarantee=line.guarantee,
                limit=line.limit,
                previous_guarantee=existing.guarantee if existing else Decimal(0),
                previous_limit=existing.limit if existing else None,
            )
            row.full_clean(exclude=["request"])
            row.save()
        audit(
            actor=requester,
            verb=AuditVerb.SUBMIT,
            obj=request,
            team=team,
            after=request_state(request),
            note=request.justification[:500],
        )
        notify.request_submitted(request)
    return request


def request_state(request: QuotaRequest) -> dict:
    return {
        "status": request.status,
        "window_start": request.window_start.isoformat() if request.window_start else None,
        "window_end": request.window_end.isoformat() if request.window_end else None,
        "lines": {
            line.resource: {
                "guarantee": _q(line.guarantee, line.resource),
                "limit": _q(line.limit, line.resource),
                "previous_guarantee": _q(line.previous_guarantee, line.resource),
                "previous_limit": _q(line.previous_limit, line.resource),
                "approved_guarantee": _q(line.approved_guarantee, line.resource),
                "approved_limit": _q(line.approved_limit, line.resource),
            }
            for line in request.lines.all()
        },
    }


def _lock_request(request_id: int) -> QuotaRequest:
    try:
        return QuotaRequest.objects.select_for_update().select_related("team").get(pk=request_id)
    except QuotaRequest.DoesNotExist:
        raise InvalidTransition(f"Quota request {request_id} does not exist.") from None


def _apply_lines(request: QuotaRequest, *, now: datetime) -> None:
    """Raise the team's quotas to the approved amounts and remember the deltas."""
    team = request.team
    overrides = {(team.pk, line.resource): line.approved_guarantee for line in request.lines.all()}
    check_capacity(overrides, now=now, exclude_request=request.pk)
    check_hierarchy(
        {
            (team.pk, line.resource): (line.approved_guarantee, line.approved_limit)
            for line in request.lines.all()
        },
        field="resource",
    )
    for line in request.lines.all():
        quota, _ = TeamQuota.objects.select_for_update().get_or_create(
            team=team, resource=line.resource, defaults={"guarantee": Decimal(0), "limit": None}
        )
        line.applied_guarantee_delta = line.approved_guarantee - quota.guarantee
        line.applied_limit_delta = (
            None if quota.limit is None else line.approved_limit - quota.limit
        )
        line.previous_guarantee, line.previous_limit = quota.guarantee, quota.limit
        quota.guarantee, quota.limit = line.approved_guarantee, line.approved_limit
        quota.full_clean()
        quota.save()
        line.save()


SOD_EXCEPTION_NOTE = (
    "Decided by its own requester, the only active site admin "
    "(separation-of-duties exception, FAIRSHARE_SEPARATION_OF_DUTIES=sole-admin)."
)


def active_site_admin_count() -> int:
    from django.contrib.auth import get_user_model
    from django.db.models import Q

    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name=settings.ADMINS_GROUP))
        .distinct()
        .count()
    )


def check_separation_of_duties(request: QuotaRequest, decider) -> bool:
    """May ``decider`` (a site admin) decide ``request``? Return True when they may only by
    the sole-admin exception (the caller audits it), False when no exception was needed.

    ``FAIRSHARE_SEPARATION_OF_DUTIES``: ``strict`` (nobody decides their own request),
    ``sole-admin`` (the default: unless they are the only active site admin) or ``off``.
    Raises SelfDecisionRefused otherwise.
    """
    mode = getattr(settings, "FAIRSHARE_SEPARATION_OF_DUTIES", "sole-admin")
    if mode == "off" or request.requester_id != decider.pk:
        return False
    if mode == "sole-admin" and active_site_admin_count() == 1:
        return True
    raise SelfDecisionRefused(
        f"You requested #{request.pk} yourself; another site admin must decide it "
        "(separation of duties)."
    )


def approve_request(
    request_id: int,
    *,
    approver,
    note: str = "",
    adjustments: Mapping[str, tuple[Decimal | str, Decimal | str]] | None = None,
    preview: dict | None = None,
    now: datetime | None = None,
) -> QuotaRequest:
    """Approve a pending request, optionally with adjusted amounts {resource: (g, l)}.

    Raises PermissionDenied (not an admin), InvalidTransition (not pending: approving twice
    approves once), QuotaExceeded (over capacity; nothing changes), ValidationError (bad
    adjustment). Notifies ``quota_changed`` after commit.
    """
    now = now or timezone.now()
    if not is_site_admin(approver):
        raise PermissionDenied("Only site admins may approve quota requests.")
    with transaction.atomic():
        capacity_lock()
        request = _lock_request(request_id)
        self_decided = check_separation_of_duties(request, approver)
        if request.status != QuotaRequestStatus.PENDING:
            raise InvalidTransition(f"Request #{request.pk} is {request.status}, not pending.")
        if request.window_end is not None and request.window_end <= now:
            raise InvalidTransition(f"Request #{request.pk}'s window has already ended.")
        before = quota_state(request.team)
        lines = list(request.lines.all())
        adjustments = dict(adjustments or {})
        unknown = set(adjustments) - {line.resource for line in lines}
        if unknown:
            raise ValidationError(
                {"adjustments": f"Not in the request: {', '.join(sorted(unknown))}."}
            )
        for line in lines:
            guarantee, limit = line.guarantee, line.limit
            if line.resource in adjustments:
                g, lim = adjustments[line.resource]
                guarantee = parse_quantity(g, field=f"{line.resource}.guarantee")
                limit = parse_quantity(lim, field=f"{line.resource}.limit")
            line.approved_guarantee, line.approved_limit = guarantee, limit
            line.full_clean(exclude=["request"])
            line.save()
        request.decided_by = approver
        request.decided_at = now
        request.decision_note = note
        request.preview = preview or {}
        # A grant whose window has not opened changes nothing yet: it is applied (and the sync
        # that applies it recorded) when it activates.
        applied: list[int] = []
        if request.window_start is not None and request.window_start > now:
            request.status = QuotaRequestStatus.APPROVED
            overrides = {}
            current = {q.resource: q.guarantee for q in request.team.quotas.all()}
            for line in lines:
                overrides[(request.team_id, line.resource)] = max(
                    line.approved_guarantee, current.get(line.resource, Decimal(0))
                )
            check_capacity(overrides, now=now, exclude_request=request.pk)
            # As the grant will be when its window opens (checked again then).
            check_hierarchy(
                {
                    (request.team_id, line.resource): (
                        line.approved_guarantee,
                        line.approved_limit,
                    )
                    for line in lines
                },
                field="resource",
            )
        else:
            _apply_lines(request, now=now)
            applied = [request.pk]
            request.status = (
                QuotaRequestStatus.ACTIVE if request.is_temporary else QuotaRequestStatus.APPROVED
            )
            request.activated_at = now
        request.save()
        audit(
            actor=approver,
            verb=AuditVerb.APPROVE,
            obj=request,
            team=request.team,
            before=before,
            after=quota_state(request.team) | {"request": request_state(request)},
            note=f"{SOD_EXCEPTION_NOTE} {note}".strip() if self_decided else note,
        )
        notify_quota_changed([request.team_id], "approve", request_ids=applied)
        notify.request_decided(request, actor=approver)
    return request


def reject_request(request_id: int, *, approver, note: str, now: datetime | None = None):
    """Reject a pending request; a reason is required.

    Raises PermissionDenied, InvalidTransition, ValidationError (no reason).
    """
    now = now or timezone.now()
    if not is_site_admin(approver):
        raise PermissionDenied("Only site admins may reject quota requests.")
    if not (note or "").strip():
        raise ValidationError({"note": "Give the team a reason for the rejection."})
    with transaction.atomic():
        request = _lock_request(request_id)
        self_decided = check_separation_of_duties(request, approver)
        if request.status != QuotaRequestStatus.PENDING:
            raise InvalidTransition(f"Request #{request.pk} is {request.status}, not pending.")
        request.status = QuotaRequestStatus.REJECTED
        request.decided_by, request.decided_at, request.decision_note = approver, now, note.strip()
        request.save()
        if self_decided:
            note = f"{SOD_EXCEPTION_NOTE} {note}"
        audit(actor=approver, verb=AuditVerb.REJECT, obj=request, team=request.team, note=note)
        notify.request_decided(request, actor=approver)
    return request


def reject_requests(
    request_ids: Iterable[int], *, approver, note: str, now: datetime | None = None
) -> list[QuotaRequest]:
    """Reject several pending requests with one reason, in one transaction: all or none.

    Each is rejected as by ``reject_request`` (audited, its team told after commit). Raises
    PermissionDenied, ValidationError (no reason: ``note``; no request: ``requests``),
    InvalidTransition naming the first request that is not pending (nothing is rejected).
    """
    ids = sorted(set(request_ids))
    if not is_site_admin(approver):
        raise PermissionDenied("Only site admins may reject quota requests.")
    if not ids:
        raise ValidationError({"requests": "Choose at least one request to reject."})
    if not (note or "").strip():
        raise ValidationError({"note": "Give the teams a reason for the rejection."})
    now = now or timezone.now()
    with transaction.atomic():
        return [reject_request(pk, approver=approver, note=note, now=now) for pk in ids]


def withdraw_request(request_id: int, *, actor, now: datetime | None = None) -> QuotaRequest:
    """Withdraw a pending request: its requester, a lead of the team, or an admin may."""
    with transaction.atomic():
        request = _lock_request(request_id)
        allowed = (
            request.requester_id == actor.pk
            or Team.objects.led_by(actor).filter(pk=request.team_id).exists()
        )
        if not allowed:
            raise PermissionDenied("Only the requester, the team's leads or admins may withdraw.")
        if request.status != QuotaRequestStatus.PENDING:
            raise InvalidTransition(f"Request #{request.pk} is {request.status}, not pending.")
        request.status = QuotaRequestStatus.WITHDRAWN
        request.decided_at = now or timezone.now()
        request.save()
        audit(actor=actor, verb=AuditVerb.WITHDRAW, obj=request, team=request.team)
        notify.request_decided(request, actor=actor)
    return request


@dataclass(frozen=True)
class ExpiryResult:
    activated: list[int]
    expired: list[int]
    failed: dict[int, str]


def expire_temporary_quota(*, now: datetime | None = None) -> ExpiryResult:
    """Open and close the windows of temporary grants.

    1. Approved requests whose window has opened are applied (capacity re-checked) → active.
    2. Active requests whose window has closed are reverted by their recorded deltas → expired.
       A revert composes with changes made meanwhile: it subtracts what the grant added,
       never below zero, and keeps guarantee ≤ limit.
    Each request is its own transaction, so one failure doesn't block the others; a failure is
    logged and retried on the next run. Idempotent.
    """
    now = now or timezone.now()
    activated, expired, failed = [], [], {}
    due = QuotaRequest.objects.filter(
        status=QuotaRequestStatus.APPROVED, window_start__lte=now, window_end__gt=now
    ).values_list("pk", flat=True)
    for pk in list(due):
        try:
            with transaction.atomic():
                capacity_lock()
                request = _lock_request(pk)
                if request.status != QuotaRequestStatus.APPROVED:
                    continue
                before = quota_state(request.team)
                _apply_lines(request, now=now)
                request.status, request.activated_at = QuotaRequestStatus.ACTIVE, now
                request.save()
                audit(
                    actor=None,
                    verb=AuditVerb.ACTIVATE,
                    obj=request,
                    team=request.team,
                    before=before,
                    after=quota_state(request.team),
                )
                notify_quota_changed([request.team_id], "activate", request_ids=[request.pk])
            activated.append(pk)
        except QuotaExceeded as e:
            logger.warning("Temporary grant #%s cannot start yet: %s", pk, e)
            failed[pk] = str(e)
        except ValidationError as e:
            # A hierarchy rule (the department's limit changed since the approval).
            message = " ".join(m for messages in e.message_dict.values() for m in messages)
            logger.warning("Temporary grant #%s cannot start yet: %s", pk, message)
            failed[pk] = message
    ended = QuotaRequest.objects.filter(
        status__in=[QuotaRequestStatus.ACTIVE, QuotaRequestStatus.APPROVED],
        window_end__lte=now,
    ).values_list("pk", flat=True)
    for pk in list(ended):
        with transaction.atomic():
            request = _lock_request(pk)
            if request.window_end is None or request.window_end > now:
                continue
            before = quota_state(request.team)
            if request.status == QuotaRequestStatus.ACTIVE:
                _revert_lines(request)
            elif request.status != QuotaRequestStatus.APPROVED:
                continue
            request.status, request.expired_at = QuotaRequestStatus.EXPIRED, now
            request.save()
            audit(
                actor=None,
                verb=AuditVerb.EXPIRE,
                obj=request,
                team=request.team,
                before=before,
                after=quota_state(request.team),
            )
            notify_quota_changed([request.team_id], "expire")
            notify.request_expired(request)
        expired.append(pk)
    return ExpiryResult(activated, expired, failed)


def remind_ending_grants(*, now: datetime | None = None, days: int | None = None) -> list[int]:
    """Tell the teams whose active temporary grant ends within ``days``
    (``FAIRSHARE_GRANT_REMINDER_DAYS``; 0 turns reminders off) that it will end.

    Idempotent, also across concurrent runs: a grant's ``reminder_sent_at`` is claimed by one
    conditional UPDATE before its notification is queued (after commit), so each grant gets
    one reminder. Returns the ids reminded by this run.
    """
    now = now or timezone.now()
    days = settings.FAIRSHARE_GRANT_REMINDER_DAYS if days is None else days
    if days <= 0:
        return []
    due = QuotaRequest.objects.filter(
        status=QuotaRequestStatus.ACTIVE,
        reminder_sent_at__isnull=True,
        window_end__gt=now,
        window_end__lte=now + timedelta(days=days),
    ).values_list("pk", flat=True)
    reminded = []
    for pk in list(due):
        with transaction.atomic():
            claimed = QuotaRequest.objects.filter(
                pk=pk, reminder_sent_at__isnull=True, status=QuotaRequestStatus.ACTIVE
            ).update(reminder_sent_at=now)
            if not claimed:
                continue
            request = QuotaRequest.objects.select_related("team", "requester").get(pk=pk)
            notify.grant_ending_soon(request)
        reminded.append(pk)
    return reminded


def _revert_lines(request: QuotaRequest) -> None:
    for line in request.lines.all():
        quota = (
            TeamQuota.objects.select_for_update()
            .filter(team=request.team, resource=line.resource)
            .first()
        )
        if quota is None:
            continue
        if line.applied_guarantee_delta is not None:
            quota.guarantee = max(Decimal(0), quota.guarantee - line.applied_guarantee_delta)
        if line.applied_limit_delta is not None and quota.limit is not None:
            quota.limit = max(Decimal(0), quota.limit - line.applied_limit_delta)
        elif line.applied_limit_delta is None and quota.limit == line.approved_limit:
            quota.limit = line.previous_limit  # the grant set a ceiling where there was none
        if quota.limit is not None:
            # A department's limit never drops below what its teams hold (hierarchy rules).
            floor = hierarchy_floor(request.team, line.resource)
            if quota.limit < floor:
                logger.warning(
                    "Temporary grant #%s: %s limit of %s kept at %s for its teams",
                    request.pk,
                    line.resource,
                    request.team.slug,
                    format_quantity(floor, line.resource),
                )
                quota.limit = floor
        if quota.limit is not None and quota.guarantee > quota.limit:
            quota.guarantee = quota.limit
        quota.full_clean()
        quota.save()


def set_team_quota(
    team: Team,
    resource: str,
    *,
    guarantee: Decimal | str,
    limit: Decimal | str | None,
    actor,
    note: str = "",
    announce: bool = True,
) -> TeamQuota:
    """Set a team's quota directly (admins): capacity re-checked under the lock, audited; the
    team's leads are told after commit (``announce=False``: the caller tells them, as a
    rebalance does)."""
    if not is_site_admin(actor):
        raise PermissionDenied("Only site admins may set quotas directly.")
    g = parse_quantity(guarantee, field="guarantee")
    lim = None if limit in (None, "") else parse_quantity(limit, field="limit")
    return _set_quotas(team, {resource: (g, lim)}, actor=actor, note=note, announce=announce)[0]


def set_team_quotas(
    team: Team, lines: Iterable[LineInput], *, actor, note: str = ""
) -> list[TeamQuota]:
    """Set several of a team's quotas at once (admins), under the rules of an approval.

    The same checks as approving a request with these amounts: resource names, guarantee ≤
    limit, the capacity rule (only growing guarantees are checked) and the hierarchy rules
    (``check_hierarchy``), all in one transaction under the capacity lock, with one audit entry.
    Errors are keyed ``lines[i].<field>`` (bad amounts), ``<resource>.guarantee``/``.limit``
    (hierarchy) or ``lines``; QuotaExceeded names the resource over capacity.
    """
    if not is_site_admin(actor):
        raise PermissionDenied("Only site admins may set quotas directly.")
    amounts: dict[str, tuple[Decimal, Decimal | None]] = {}
    errors: dict[str, list[str]] = defaultdict(list)
    for index, line in enumerate(lines):
        key = f"lines[{index}]"
        try:
            validate_resource_name(line.resource)
        except ValidationError as e:
            errors[f"{key}.resource"].extend(e.messages)
            continue
        if line.resource in amounts:
            errors[f"{key}.resource"].append(f"{line.resource} is listed twice.")
            continue
        try:
            g = parse_quantity(line.guarantee, field=f"{key}.guarantee")
            lim = (
                None
                if line.limit in (None, "")
                else parse_quantity(line.limit, field=f"{key}.limit")
            )
        except ValidationError as e:
            for field, messages in e.message_dict.items():
                errors[field].extend(messages)
            continue
        if lim is not None and g > lim:
            errors[f"{key}.guarantee"].append("The guarantee cannot be over the limit.")
            continue
        amounts[line.resource] = (g, lim)
    if errors:
        raise ValidationError(dict(errors))
    if not amounts:
        raise ValidationError({"lines": "Change at least one amount."})
    note = (note or "").strip()[:500]
    return _set_quotas(team, amounts, actor=actor, note=note, hierarchy_field="resource")


def _set_quotas(
    team: Team,
    amounts: Mapping[str, tuple[Decimal, Decimal | None]],
    *,
    actor,
    note: str,
    hierarchy_field: str | None = None,
    announce: bool = True,
) -> list[TeamQuota]:
    with transaction.atomic():
        capacity_lock()
        before = quota_state(team)
        check_capacity({(team.pk, resource): g for resource, (g, _lim) in amounts.items()})
        check_hierarchy(
            {(team.pk, resource): pair for resource, pair in amounts.items()},
            field=hierarchy_field,
        )
        quotas = []
        changes: dict[str, tuple[tuple[Decimal, Decimal | None] | None, tuple]] = {}
        for resource, (g, lim) in sorted(amounts.items()):
            quota = (
                TeamQuota.objects.select_for_update().filter(team=team, resource=resource).first()
            )
            before_amounts = None if quota is None else (quota.guarantee, quota.limit)
            changes[resource] = (before_amounts, (g, lim))
            quota = quota or TeamQuota(team=team, resource=resource)
            quota.guarantee, quota.limit = g, lim
            quota.full_clean()
            quota.save()
            quotas.append(quota)
        audit(
            actor=actor,
            verb=AuditVerb.UPDATE,
            obj=quotas[0] if len(quotas) == 1 else team,
            team=team,
            before=before,
            after=quota_state(team),
            note=note,
        )
        notify_quota_changed([team.pk], "set-quota")
        if announce:
            notify.quota_set(team, changes, actor=actor, note=note, at=timezone.now())
    return quotas


def end_temporary_grant(
    request_id: int, *, actor, note: str = "", now: datetime | None = None
) -> QuotaRequest:
    """End a temporary grant before its window closes: admins, or a lead of its team.

    An active grant is reverted by its recorded deltas exactly as on expiry (composing with
    changes made meanwhile); an approved one whose window has not opened is simply not applied.
    Status becomes expired, with ``expired_at`` now; audited, the team told after commit.
    Raises PermissionDenied, InvalidTransition (not a running or scheduled temporary grant).
    """
    now = now or timezone.now()
    with transaction.atomic():
        request = _lock_request(request_id)
        if not (
            is_site_admin(actor) or Team.objects.led_by(actor).filter(pk=request.team_id).exists()
        ):
            raise PermissionDenied("Only site admins and the team's leads may end its grants.")
        temporary_states = (QuotaRequestStatus.ACTIVE, QuotaRequestStatus.APPROVED)
        if not request.is_temporary or request.status not in temporary_states:
            raise InvalidTransition(
                f"Request #{request.pk} is not a running or scheduled temporary grant "
                f"(it is {request.get_status_display().lower()})."
            )
        before = quota_state(request.team)
        if request.status == QuotaRequestStatus.ACTIVE:
            _revert_lines(request)
        request.status, request.expired_at = QuotaRequestStatus.EXPIRED, now
        request.save()
        who = getattr(actor, "username", "") or "system"
        audit(
            actor=actor,
            verb=AuditVerb.EXPIRE,
            obj=request,
            team=request.team,
            before=before,
            after=quota_state(request.team),
            note=(f"Ended early by {who}." + (f" {note.strip()}" if note.strip() else ""))[:500],
        )
        notify_quota_changed([request.team_id], "end-early")
        notify.request_ended_early(request, actor=actor)
    return request
