"""The desired state as plain data: the tenancy model read from the database into a ClusterSpec.

``build_cluster_spec()`` is the bridge between the Django models (``quotas``, ``scheduling``) and
the pure renderer: it reads every row it needs in a constant number of queries (nine, whatever
the number of teams or namespaces) and returns a :class:`~scheduling.domain.types.ClusterSpec`
that ``render()`` turns into manifests.

Derivations made here (the rules live in one place):

* **Teams**: only *effectively active* teams are included (the team and every ancestor active);
  a team whose department is deactivated disappears with it, exactly as ``render()`` would do,
  but without tripping its "parent is not a department" check. ``is_department`` = the team has
  at least one effectively active child.
* **guarantee / limit**: the TeamQuota rows (a row with no limit has no ceiling, so no
  ``capability`` entry); **deserved**: the ``fair_allocation`` of the team's ShareSnapshot in the
  latest ShareComputation (empty when there is none: the renderer then uses the guarantee).
* **members**: Membership rows of active users, as ``(username, role)``.
* **per-namespace quota**: the team's *limit* split across the team's managed namespaces by their
  ``share`` weights. Every resource is split in whole units of its grain — one device for
  extended resources (GPUs), one byte for memory-like resources, one millicore for cpu and other
  divisible resources — by the largest-remainder method, ties going to the namespace whose name
  sorts first. The parts always add up exactly to the team limit (rounded down to the grain).
* **LimitSpec**: the team's LimitPolicy rows, with namespace-specific rows replacing the team row
  of the same resource. ``quota_limits`` is set when any effective row enforces a quota limit
  (the renderer then caps ``limits.cpu``/``limits.memory``). For a non-overcommittable resource
  (GPUs) a default request without a default limit gets the request as its default limit, as
  Kubernetes itself requires.
* **tiers**: every PriorityTier.

Targeted syncs (``sync_scope(teams)``, ``build_cluster_spec(within=...)``): a change to teams T
affects T's namespaced objects and the Queues of T's *department trees* — every team under the
same top-level ancestor — because a Queue's guarantee and deserved depend on its parent's and
its siblings' (``render.queue_amounts`` works tree by tree: the roots never interact). The spec
is then read for those trees only; rendering it gives, for every object in scope, exactly what
the full render gives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Sum, Value

from monitoring.models import GpuInventoryNode
from quotas.domain.quantity import is_byte_resource
from quotas.models import (
    LimitPolicy,
    Membership,
    Namespace,
    PriorityTier,
    Team,
    TeamClusterGroup,
    TeamQuota,
)
from quotas.protection import protected_namespace_patterns
from quotas.quantities import is_integral_resource
from quotas.transitions import render_overrides
from scheduling.domain.render import CLUSTER_KINDS, LABEL_TEAM, QUEUE_KINDS
from scheduling.domain.types import (
    OVERCOMMITTABLE_RESOURCES,
    ClusterSpec,
    LimitSpec,
    MemberSpec,
    NamespaceSpec,
    TeamSpec,
    TierSpec,
)
from scheduling.models import ShareComputation, ShareSnapshot

__all__ = ["SyncScope", "build_cluster_spec", "split_quota", "sync_scope"]

_MILLI = Decimal("0.001")


def _grain(resource: str) -> Decimal:
    """The smallest unit a namespace's share of ``resource`` is counted in."""
    if is_integral_resource(resource) or is_byte_resource(resource):
        return Decimal(1)
    return _MILLI


def split_quota(
    total: Mapping[str, Decimal], shares: Mapping[str, int]
) -> dict[str, dict[str, Decimal]]:
    """Split ``total`` (resource → amount) across namespaces in proportion to ``shares``.

    Returns ``{namespace: {resource: amount}}`` for every namespace in ``shares``. Per resource:
    1. count the total in grains (see ``_grain``), rounding down;
    2. give each namespace ``floor(grains × share / Σ shares)``;
    3. hand the grains left over, one each, to the largest fractional remainders — ties to the
       namespace name that sorts first — so the parts add up exactly to the (rounded) total.
    Namespaces with no share (all zero) get nothing. Deterministic.
    """
    names = sorted(shares)
    result: dict[str, dict[str, Decimal]] = {name: {} for name in names}
    weight_sum = sum(max(0, shares[name]) for name in names)
    if not names or weight_sum == 0:
        return result
    for resource in sorted(total):
        grain = _grain(resource)
        grains = int((Decimal(total[resource]) / grain).to_integral_value(rounding=ROUND_FLOOR))
        parts: dict[str, int] = {}
        remainders: list[tuple[int, str]] = []
        for name in names:
            whole, remainder = divmod(grains * max(0, shares[name]), weight_sum)
            parts[name] = whole
            remainders.append((-remainder, name))
        left = grains - sum(parts.values())
        for _, name in sorted(remainders)[:left]:
            parts[name] += 1
        for name in names:
            result[name][resource] = parts[name] * grain
    return result


def _effectively_active(teams: Mapping[int, Mapping[str, Any]]) -> set[int]:
    """Ids of teams that are active together with all their ancestors (cycle-safe)."""
    active: set[int] = set()
    for team_id in teams:
        seen: set[int] = set()
        current: int | None = team_id
        while current is not None and current not in seen and current in teams:
            if not teams[current]["active"]:
                break
            seen.add(current)
            current = teams[current]["parent_id"]
        else:
            if current is None:
                active.add(team_id)
    return active


def _latest_deserved(
    team_ids: Collection[int], computation_id: int | None = None
) -> dict[int, dict[str, Decimal]]:
    if computation_id is None:
        computation = ShareComputation.objects.order_by("-computed_at", "-id").first()
        if computation is None:
            return {}
        computation_id = computation.pk
    rows = ShareSnapshot.objects.filter(
        computation_id=computation_id, team_id__in=team_ids
    ).values_list("team_id", "fair_allocation")
    deserved: dict[int, dict[str, Decimal]] = {}
    for team_id, allocation in rows:
        amounts = {}
        for resource, amount in (allocation or {}).items():
            value = Decimal(str(amount))
            if value.is_finite() and value > 0:
                amounts[resource] = value
        deserved[team_id] = amounts
    return deserved


@dataclass(frozen=True)
class SyncScope:
    """What a targeted sync plans: ``teams``' namespaced objects, the Queues of ``trees``
    (the department trees of ``teams``), and with ``queues`` every Queue."""

    teams: frozenset[str]
    trees: frozenset[str]
    queues: bool = False

    def covers(self, obj: Mapping[str, Any]) -> bool:
        """Whether a manifest or live object is in scope (by kind and team label)."""
        team = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_TEAM)
        kind = obj.get("kind")
        if kind in CLUSTER_KINDS:
            return False  # the tiers' and flavors' objects: no team changes them (full syncs do)
        if kind in QUEUE_KINDS:
            return self.queues or team in self.trees
        return team in self.teams


def sync_scope(teams: Iterable[str], *, queues: bool = False) -> SyncScope:
    """The scope of a targeted sync of ``teams`` (cluster names or slugs; unknown ones are
    kept, so a deleted team's objects are pruned): the teams, and every team in their
    department trees, all by cluster name (what the ``fairshare.io/team`` label holds)."""
    values = Team.objects.values("slug", "cluster_name", "parent__cluster_name")
    rows = {row["cluster_name"]: row["parent__cluster_name"] for row in values}
    by_slug = {row["slug"]: row["cluster_name"] for row in values}
    # Callers name teams by cluster name (the label the watcher sees) or by slug (the model's
    # receivers): a cluster name wins, a slug is translated to its team's cluster name.
    wanted = frozenset(name if name in rows else by_slug.get(name, name) for name in teams)

    def root(slug: str) -> str:
        seen = set()
        while rows.get(slug) and slug not in seen:
            seen.add(slug)
            slug = rows[slug]
        return slug

    # A team whose move waits is rendered under its previous department: both trees count.
    ids = dict(Team.objects.values_list("id", "cluster_name"))
    rendered = dict(rows)
    for team_id, override in render_overrides().items():
        if "parent_id" in override and team_id in ids:
            rendered[ids[team_id]] = ids.get(override["parent_id"])

    def root_in(parents: Mapping[str, str | None], slug: str) -> str:
        seen = set()
        while parents.get(slug) and slug not in seen:
            seen.add(slug)
            slug = parents[slug]  # type: ignore[assignment]
        return slug

    roots = {root(slug) for slug in wanted} | {root_in(rendered, slug) for slug in wanted}
    trees = (
        frozenset(slug for slug in rows if root(slug) in roots or root_in(rendered, slug) in roots)
        | wanted
    )
    return SyncScope(teams=wanted, trees=trees, queues=queues)


def _limit_spec(rows: Iterable[Mapping[str, Any]]) -> LimitSpec | None:
    """Build a LimitSpec from the effective policy rows of one namespace (None when empty)."""
    default_request: dict[str, Decimal] = {}
    default_limit: dict[str, Decimal] = {}
    maximum: dict[str, Decimal] = {}
    quota_limits = False
    for row in rows:
        resource = row["resource"]
        if row["default_request"] is not None:
            default_request[resource] = row["default_request"]
        if row["default_limit"] is not None:
            default_limit[resource] = row["default_limit"]
        elif row["default_request"] is not None and resource not in OVERCOMMITTABLE_RESOURCES:
            default_limit[resource] = row["default_request"]
        if row["max_per_container"] is not None:
            maximum[resource] = row["max_per_container"]
        quota_limits = quota_limits or bool(row["enforce_quota_limit"])
    spec = LimitSpec(
        default_request=default_request,
        default_limit=default_limit,
        max=maximum,
        quota_limits=quota_limits,
    )
    return None if spec.is_empty and not quota_limits else spec


def build_cluster_spec(
    *, within: Collection[str] | None = None, computation_id: int | None = None
) -> ClusterSpec:
    """Read the tenancy model and return it as a ClusterSpec (ten queries).

    ``within`` (team cluster names closed under parent and children, i.e. whole department trees, as
    ``sync_scope`` gives): read only those teams and what hangs off them. None: every team.
    ``computation_id``: the ShareComputation whose fair allocations become ``deserved`` (the
    sync passes the last good one it records on the run); None: the latest.

    Raises ValueError (from the spec dataclasses) when the database holds something the renderer
    cannot express, e.g. a GPU default request different from its default limit.
    """
    teams = _team_rows(within)
    included = _effectively_active(teams)
    guarantee, limit = _quota_maps(included)
    return ClusterSpec(
        teams=_team_specs(teams, included, guarantee, limit, computation_id),
        namespaces=_namespace_specs(teams, included, limit),
        tiers=_tier_specs(),
        protected_namespaces=protected_namespace_patterns(),
        gpu_products=_gpu_products(),
    )


def _gpu_products() -> tuple[tuple[str, int], ...]:
    """The cluster's GPU products (``nvidia.com/gpu.product``) and their GPU counts, from the
    latest collection's inventory (nodes without the label are left out): the Kueue backend's
    GPU ResourceFlavors."""
    rows = (
        GpuInventoryNode.objects.exclude(product="")
        .values("product")
        .annotate(total=Sum("gpus"))
        .order_by("product")
    )
    return tuple((row["product"], int(row["total"])) for row in rows if row["total"])


def _tier_specs() -> tuple[TierSpec, ...]:
    """Every priority tier (one PriorityClass each)."""
    tiers = tuple(
        TierSpec(
            name=row["name"],
            value=row["value"],
            preemption_policy=row["preemption_policy"],
            description=row["description"],
        )
        for row in PriorityTier.objects.values("name", "value", "preemption_policy", "description")
    )
    return tiers


def _team_rows(within: Collection[str] | None) -> dict[int, dict[str, Any]]:
    """The teams (of ``within``'s trees, or all) by id, named by their cluster name, as the cluster
    has them where a transition waits (``quotas.transitions.render_overrides``)."""
    # The spec names teams by their fixed cluster name: renaming a slug changes nothing here.
    teams = {
        row["id"]: {**row, "slug": row["cluster_name"]}
        for row in (
            Team.objects.filter(cluster_name__in=within)
            if within is not None
            else Team.objects.all()
        ).values("id", "cluster_name", "parent_id", "weight", "tier__name", "reclaimable", "active")
    }
    # A team whose transition waits is rendered as the cluster has it (quotas.transitions).
    for team_id, override in render_overrides().items():
        if team_id not in teams:
            continue
        if override.get("hidden"):
            del teams[team_id]
        elif "parent_id" in override:
            teams[team_id]["parent_id"] = override["parent_id"]
        else:
            teams[team_id]["active"] = True
    return teams


def _quota_maps(
    included: Collection[int],
) -> tuple[dict[int, dict[str, Decimal]], dict[int, dict[str, Decimal]]]:
    """Guarantees (non-zero) and limits (set) of the included teams, by team id and resource."""
    guarantee: dict[int, dict[str, Decimal]] = defaultdict(dict)
    limit: dict[int, dict[str, Decimal]] = defaultdict(dict)
    for row in TeamQuota.objects.filter(team_id__in=included).values(
        "team_id", "resource", "guarantee", "limit"
    ):
        if row["guarantee"]:
            guarantee[row["team_id"]][row["resource"]] = row["guarantee"]
        if row["limit"] is not None:
            limit[row["team_id"]][row["resource"]] = row["limit"]
    return guarantee, limit


def _team_specs(
    teams: Mapping[int, Mapping[str, Any]],
    included: Collection[int],
    guarantee: Mapping[int, Mapping[str, Decimal]],
    limit: Mapping[int, Mapping[str, Decimal]],
    computation_id: int | None,
) -> tuple[TeamSpec, ...]:
    """One TeamSpec per included team: quotas, deserved (the computation's fair allocation),
    active members, and whether it is a department (an included team's parent)."""
    departments = {teams[t]["parent_id"] for t in included if teams[t]["parent_id"] is not None}
    deserved = _latest_deserved(included, computation_id)

    # People and identity-provider groups in one query (a UNION): the constant query count.
    members: dict[int, list[MemberSpec]] = defaultdict(list)
    groups: dict[int, list[tuple[str, str]]] = defaultdict(list)
    people = (
        Membership.objects.filter(team_id__in=included, user__is_active=True)
        .order_by()
        .values_list("team_id", "user__username", "role", Value("user"))
    )
    for team_id, name, role, kind in people.union(_cluster_groups(included), all=True):
        if kind == "user":
            members[team_id].append(MemberSpec(username=name, role=role))
        elif not (subject := _group_subject(name, role))[0].startswith("system:"):
            groups[team_id].append(subject)  # never Kubernetes' own groups

    team_specs = tuple(
        TeamSpec(
            slug=row["slug"],
            parent=teams[row["parent_id"]]["slug"] if row["parent_id"] else None,
            weight=row["weight"],
            tier=row["tier__name"],
            reclaimable=row["reclaimable"],
            active=True,
            guarantee=guarantee.get(team_id, {}),
            limit=limit.get(team_id, {}),
            deserved=deserved.get(team_id, {}),
            members=tuple(members.get(team_id, ())),
            groups=tuple(groups.get(team_id, ())),
            is_department=team_id in departments,
        )
        for team_id, row in teams.items()
        if team_id in included
    )
    return team_specs


def _cluster_groups(included: Collection[int]):
    """The identity-provider groups the teams bind (issue 33), as rows like the members'."""
    return (
        TeamClusterGroup.objects.filter(team_id__in=included)
        .order_by()
        .values_list("team_id", "group", "role", Value("group"))
    )


def _group_subject(group: str, role: str) -> tuple[str, str]:
    """A group named as the API server sees it: with its ``--oidc-groups-prefix``
    (FAIRSHARE_OIDC_GROUP_PREFIX)."""
    return f"{getattr(settings, 'FAIRSHARE_OIDC_GROUP_PREFIX', '')}{group}", role


def _namespace_specs(
    teams: Mapping[int, Mapping[str, Any]],
    included: Collection[int],
    limit: Mapping[int, Mapping[str, Decimal]],
) -> tuple[NamespaceSpec, ...]:
    """One NamespaceSpec per namespace of the included teams: the team's limit split over its
    managed namespaces by share, and the limit policy in effect (the namespace's, else the
    team's)."""
    namespaces = list(
        Namespace.objects.filter(team_id__in=included).values(
            "id", "name", "team_id", "managed", "labels", "share", "volcano_jobs", "adopted"
        )
    )

    team_policies: dict[int, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    ns_policies: dict[int, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for row in LimitPolicy.objects.filter(team_id__in=included).values(
        "team_id",
        "namespace_id",
        "resource",
        "default_request",
        "default_limit",
        "max_per_container",
        "enforce_quota_limit",
    ):
        if row["namespace_id"] is None:
            team_policies[row["team_id"]][row["resource"]] = row
        else:
            ns_policies[row["namespace_id"]][row["resource"]] = row

    shares: dict[int, dict[str, int]] = defaultdict(dict)
    for ns in namespaces:
        if ns["managed"]:
            shares[ns["team_id"]][ns["name"]] = ns["share"]
    quotas = {
        team_id: split_quota(limit.get(team_id, {}), team_shares)
        for team_id, team_shares in shares.items()
    }

    namespace_specs = []
    for ns in namespaces:
        effective = {**team_policies.get(ns["team_id"], {}), **ns_policies.get(ns["id"], {})}
        namespace_specs.append(
            NamespaceSpec(
                name=ns["name"],
                team=teams[ns["team_id"]]["slug"],
                managed=ns["managed"],
                labels=dict(ns["labels"] or {}),
                quota=quotas.get(ns["team_id"], {}).get(ns["name"], {}) if ns["managed"] else {},
                limits=_limit_spec(effective[r] for r in sorted(effective)),
                volcano_jobs=ns["volcano_jobs"],
                adopted=ns["adopted"],
            )
        )
    return tuple(namespace_specs)
