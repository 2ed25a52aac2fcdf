"""Where a preview's change comes from: the bookkeeping of a what-if, exact (pure).

A what-if preview solves the fair shares twice, before and after a change, and shows what the
requesting team (the *focus*) gains or loses. Every unit it gains comes from somewhere: from a
team outside it that gives it up, or from capacity nobody was allocated. This module does that
accounting, so the rows a person reads ("who gives up what") add up to the gain they are shown.

Terms:

* A team's *own part* is what it holds itself: a team without teams its whole allocation, a
  department its allocation less its teams' (its own workloads; H-DRF's implicit member). The
  own parts of all teams add up to the roots' allocations, and spare capacity is the capacity
  less that.
* The focus's *department chain* is its ancestors. They are not "other teams": their allocation
  contains the focus's own, so their movement is shown in words (``DepartmentMove``), never as a
  team giving something up.

The identity (exact in Decimals, whatever the rounding before): for each resource,
``gain(focus) = Σ over teams outside the focus's subtree of −Δ(own part) + (spare before −
spare after)``. ``sources`` returns those terms; their sum equals the focus's change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

Amounts = Mapping[str, Decimal]


@dataclass(frozen=True)
class TeamChange:
    """A team's fair allocation before and after (its whole subtree), and its parent."""

    slug: str
    parent: str | None
    before: Amounts
    after: Amounts


@dataclass(frozen=True)
class DepartmentMove:
    """How a department above the focus moves, split into its parts (exact)."""

    slug: str
    before: Decimal
    after: Decimal
    focus: Decimal  # the focus's change (part of the department's)
    other_teams: Decimal  # the department's other teams' change, together
    own: Decimal  # the department's own workloads' change

    @property
    def delta(self) -> Decimal:
        return self.after - self.before


@dataclass(frozen=True)
class ResourceSources:
    """Where the focus's change of one resource comes from (gain > 0) or goes to (gain < 0).

    ``teams``: for each team outside the focus's subtree and its department chain (and for the
    own workloads of departments in the chain, keyed by the department's slug in ``chain_own``),
    what it gives up (positive) or takes (negative); ``spare``: the change of unallocated
    capacity given up (positive: spare capacity the focus now holds). ``gain == sum(teams) +
    sum(chain_own) + spare`` exactly.
    """

    resource: str
    gain: Decimal
    teams: dict[str, Decimal]
    chain_own: dict[str, Decimal]
    spare: Decimal
    departments: list[DepartmentMove] = field(default_factory=list)

    def total(self) -> Decimal:
        return (
            sum(self.teams.values(), Decimal(0))
            + sum(self.chain_own.values(), Decimal(0))
            + (self.spare)
        )


def children_of(teams: Iterable[TeamChange]) -> dict[str, list[str]]:
    """{parent slug: [child slugs, sorted]} over the teams whose parent is among them."""
    teams = list(teams)
    known = {t.slug for t in teams}
    result: dict[str, list[str]] = {}
    for team in sorted(teams, key=lambda t: t.slug):
        if team.parent is not None and team.parent in known:
            result.setdefault(team.parent, []).append(team.slug)
    return result


def own_parts(teams: Mapping[str, TeamChange], side: str) -> dict[str, dict[str, Decimal]]:
    """Each team's own part (``before`` or ``after``): its amounts less its children's."""
    kids = children_of(teams.values())
    result: dict[str, dict[str, Decimal]] = {}
    for slug, team in teams.items():
        amounts = dict(getattr(team, side))
        for kid in kids.get(slug, ()):
            for resource, amount in getattr(teams[kid], side).items():
                amounts[resource] = amounts.get(resource, Decimal(0)) - amount
        result[slug] = amounts
    return result


def ancestors(teams: Mapping[str, TeamChange], slug: str) -> list[str]:
    """The department chain of ``slug``, nearest first (a parent outside ``teams`` ends it)."""
    chain: list[str] = []
    parent = teams[slug].parent
    while parent is not None and parent in teams and parent not in chain:
        chain.append(parent)
        parent = teams[parent].parent
    return chain


def subtree(teams: Mapping[str, TeamChange], slug: str) -> set[str]:
    kids = children_of(teams.values())
    result, stack = set(), [slug]
    while stack:
        name = stack.pop()
        result.add(name)
        stack.extend(kids.get(name, ()))
    return result


def sources(
    teams: Mapping[str, TeamChange], capacity: Amounts, focus: str
) -> list[ResourceSources]:
    """Per resource the focus's fair allocation changes on: where the change comes from.

    Steps: 1. own parts before and after; 2. spare = capacity − Σ roots' allocations, both
    sides; 3. every team outside the focus's subtree contributes −Δ(own part): teams in the
    department chain into ``chain_own``, the others into ``teams`` (zeros left out); 4. the
    department moves, nearest first. Resources in sorted order (GPUs are not special here).
    """
    before_own, after_own = own_parts(teams, "before"), own_parts(teams, "after")
    chain = ancestors(teams, focus)
    inside = subtree(teams, focus)
    roots = [slug for slug, t in teams.items() if t.parent is None or t.parent not in teams]
    focus_team = teams[focus]
    resources = sorted(set(focus_team.before) | set(focus_team.after))
    result = []
    for resource in resources:
        gain = focus_team.after.get(resource, Decimal(0)) - focus_team.before.get(
            resource, Decimal(0)
        )
        if gain == 0:
            continue
        held_before = sum((teams[r].before.get(resource, Decimal(0)) for r in roots), Decimal(0))
        held_after = sum((teams[r].after.get(resource, Decimal(0)) for r in roots), Decimal(0))
        cap = capacity.get(resource, Decimal(0))
        spare = (cap - held_before) - (cap - held_after)
        given: dict[str, Decimal] = {}
        chain_own: dict[str, Decimal] = {}
        for slug in sorted(teams):
            if slug in inside:
                continue
            change = before_own[slug].get(resource, Decimal(0)) - after_own[slug].get(
                resource, Decimal(0)
            )
            if change == 0:
                continue
            (chain_own if slug in chain else given)[slug] = change
        departments = []
        for dept in chain:
            d = teams[dept]
            before = d.before.get(resource, Decimal(0))
            after = d.after.get(resource, Decimal(0))
            own = after_own[dept].get(resource, Decimal(0)) - before_own[dept].get(
                resource, Decimal(0)
            )
            departments.append(
                DepartmentMove(
                    slug=dept,
                    before=before,
                    after=after,
                    focus=gain,
                    other_teams=(after - before) - gain - own,
                    own=own,
                )
            )
        result.append(
            ResourceSources(
                resource=resource,
                gain=gain,
                teams=given,
                chain_own=chain_own,
                spare=spare,
                departments=departments,
            )
        )
    return result
