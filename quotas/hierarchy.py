"""Hierarchy rules (DESIGN.md "Upstream semantics"; Volcano's queue webhook, see docs/upstream.md).

A department's Queue guarantee is *derived* — max(its own guarantee, Σ its teams') — so the
rules that can be broken by a change are, per resource, (1) a team's limit may not be over the
limit of its nearest ancestor that has one, and (2) a department's derived guarantee may not be
over its own limit. ``check_hierarchy`` refuses a change that would break either (a
ValidationError naming the department and the numbers); it is called by every service that
changes guarantees, limits or the team tree, inside the same transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError

from quotas.models import Team, TeamQuota
from quotas.quantities import (
    amount_words,
)
from quotas.transitions import render_overrides

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
