"""The entry point, ``render(spec)``: check a ClusterSpec and assemble its manifests.

``render(spec)`` turns a :class:`~scheduling.domain.types.ClusterSpec` into plain dicts ready for
server-side apply (field manager ``fairshare``). It is the equivalent of kopf's render-and-adopt:
every object carries the ownership label ``app.kubernetes.io/managed-by: fairshare``, which is
what the planner uses to decide what it may prune.

Inactive teams render nothing, and neither do their descendants: deactivating a department
takes its subtree with it (a child Queue cannot point at a parent that no longer exists).

Invariant: the output is sorted in dependency order (:func:`.keys.sort_key`: Namespaces,
PriorityClasses, Queues parents-first, then namespaced kinds) and every map is built in sorted
key order, so the same spec always gives the same list, byte for byte once serialised.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from quotas.domain.names import protected_by, team_slug_errors
from scheduling.domain.types import ClusterSpec, TeamSpec

from .amounts import QueueAmounts, queue_amounts
from .keys import sort_key
from .labels import OWN_QUEUE_SUFFIX
from .manifests import Manifest, namespace_objects, priority_class, queue

__all__ = ["Prepared", "prepare", "render"]


def _check(spec: ClusterSpec) -> dict[str, TeamSpec]:
    """Check cross-object invariants; return teams by slug. Raises ValueError."""
    teams: dict[str, TeamSpec] = {}
    for team in spec.teams:
        if team.slug in teams:
            raise ValueError(f"duplicate team {team.slug}")
        teams[team.slug] = team
    tiers = {tier.name for tier in spec.tiers}
    if len(tiers) != len(spec.tiers):
        raise ValueError("duplicate tier names")
    if sum(tier.global_default for tier in spec.tiers) > 1:
        raise ValueError("at most one tier may be the global default")
    for team in spec.teams:
        if problems := team_slug_errors(team.slug):
            raise ValueError(f"team {team.slug}: {'; '.join(problems)}")
        if team.tier is not None and team.tier not in tiers:
            raise ValueError(f"team {team.slug}: unknown tier {team.tier}")
        if team.parent is not None:
            parent = teams.get(team.parent)
            if parent is None:
                raise ValueError(f"team {team.slug}: unknown parent {team.parent}")
            if not parent.is_department:
                raise ValueError(f"team {team.slug}: parent {team.parent} is not a department")
    names = [ns.name for ns in spec.namespaces]
    if len(set(names)) != len(names):
        raise ValueError("duplicate namespace names")
    for ns in spec.namespaces:
        if ns.team not in teams:
            raise ValueError(f"namespace {ns.name}: unknown team {ns.team}")
    return teams


def _queue_depths(teams: Mapping[str, TeamSpec]) -> dict[str, int]:
    depths: dict[str, int] = {}
    for slug in teams:
        seen: list[str] = []
        current: str | None = slug
        while current is not None:
            if current in seen:
                raise ValueError(f"team hierarchy has a cycle through {current}")
            seen.append(current)
            current = teams[current].parent
        depths[slug] = len(seen) - 1
    return depths


def _effectively_active(teams: Mapping[str, TeamSpec]) -> set[str]:
    active = set()
    for slug, team in teams.items():
        current: TeamSpec | None = team
        while current is not None and current.active:
            current = teams[current.parent] if current.parent else None
        if current is None:
            active.add(slug)
    return active


@dataclass(frozen=True)
class Prepared:
    """What every backend renders from: steps 1–3 of :func:`render`, backend-neutral.

    ``teams`` by slug; ``depths`` of every queue name (own leaves included); ``managed`` the
    namespaces that get objects; ``amounts`` every queue's guarantee, capability and deserved
    (:func:`.amounts.queue_amounts`: the one computation both backends encode).
    """

    teams: dict[str, TeamSpec]
    depths: dict[str, int]
    managed: list
    amounts: dict[str, QueueAmounts]


def prepare(spec: ClusterSpec) -> Prepared:
    """Check ``spec`` and compute what both backends render from (raises ValueError)."""
    teams = _check(spec)
    depths = _queue_depths(teams)
    active = _effectively_active(teams)
    protected = spec.protected_namespaces
    managed = [
        ns
        for ns in spec.namespaces
        if ns.managed and ns.team in active and protected_by(ns.name, protected) is None
    ]
    own_leaves = {ns.team for ns in managed if teams[ns.team].is_department}
    amounts = queue_amounts(teams, active, own_leaves)
    for slug in own_leaves:
        depths[f"{slug}{OWN_QUEUE_SUFFIX}"] = depths[slug] + 1
    return Prepared(teams, depths, managed, amounts)


def render(spec: ClusterSpec, *, namespaces_of: Collection[str] | None = None) -> list[Manifest]:
    """Render the desired state of the cluster as a list of manifests.

    ``namespaces_of`` (team slugs; None = every team) limits step 4 to those teams' namespaces —
    a targeted sync's render. The other namespaces still count where they shape cluster-scoped
    objects (a department's ``.own`` leaf Queue), so every object rendered is exactly the one a
    full render gives.

    Steps:
    1. check cross-object invariants (unknown team/tier/parent, parent not a department,
       reserved queue names, duplicates, hierarchy cycles) — raises ValueError;
    2. find the effectively active teams (the team and all its ancestors active);
    3. one PriorityClass per tier; one Queue per active team, plus ``<department>.own`` for a
       department with managed namespaces, with amounts from :func:`queue_amounts` (raises
       ValueError for a limit over a department's, or guarantees over a limit);
    4. the per-namespace objects for every managed namespace of an active team, except a
       namespace matching one of ``spec.protected_namespaces`` (glob patterns; the sync's spec
       carries the installation's, ``quotas.protection``): entry refuses those, and should one
       be in the database anyway nothing is rendered into it (defence in depth);
    5. sort in dependency order (:func:`sort_key`, queue parents first).

    Invariants: deterministic; every object carries ``app.kubernetes.io/managed-by: fairshare``;
    object keys are unique; no ResourceQuota has a ``limits.`` key other than cpu/memory;
    every Queue passes Volcano's admission rules; every managed Namespace names a leaf Queue;
    no LimitRange defaults a GPU onto a container.
    """
    ready = prepare(spec)
    objects: list[Manifest] = [priority_class(tier) for tier in spec.tiers]
    objects += [queue(ready.teams[q.team], q) for q in ready.amounts.values()]
    for ns in ready.managed:
        if namespaces_of is None or ns.team in namespaces_of:
            objects += namespace_objects(ns, ready.teams[ns.team])
    return sorted(objects, key=lambda obj: sort_key(obj, ready.depths))
