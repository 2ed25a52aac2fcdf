"""Desired-state renderer: the tenancy model as Kubernetes manifests (pure).

``render(spec)`` turns a :class:`~scheduling.domain.types.ClusterSpec` into plain dicts ready for
server-side apply (field manager ``fairshare``). It is the equivalent of kopf's render-and-adopt:
every object carries the ownership label ``app.kubernetes.io/managed-by: fairshare``, which is
what the planner uses to decide what it may prune.

What is rendered
================

Per **managed namespace of an active team**:

* ``Namespace`` — the user's extra labels plus ours (ours win on a clash).
* ``ResourceQuota fairshare`` — ``requests.<resource>`` for every quota entry (``requests.cpu``,
  ``requests.memory``, ``requests.nvidia.com/gpu``, ...); ``limits.cpu`` / ``limits.memory`` equal
  to the request amounts only when the namespace's LimitSpec sets ``quota_limits``. Never
  ``limits.<extended>``: Kubernetes only enforces the ``requests.`` prefix for extended resources.
  Rendered even when the quota is empty, so the set of objects depends on namespaces only.
* ``LimitRange fairshare`` — one ``Container`` item (``default``, ``defaultRequest``, ``max``)
  when the namespace has a non-empty LimitSpec.
* ``RoleBinding fairshare-lead|member|viewer`` — the team's users (kind ``User``, by username)
  and groups bound to the built-in ClusterRoles ``admin`` / ``edit`` / ``view``; a binding with
  no subjects is not rendered (and so gets pruned).
* ``Role`` + ``RoleBinding fairshare-volcano`` when ``volcano_jobs`` — full access to
  ``batch.volcano.sh`` jobs and read access to ``scheduling.volcano.sh`` podgroups, bound to the
  leads and members (viewers get nothing: the Volcano kinds are not in the built-in ``view``).

Cluster-scoped:

* one Volcano ``Queue`` per active team, named after the team slug (departments too):
  ``weight``, ``reclaimable``, ``capability`` = limit, ``guarantee.resource`` = guarantee,
  ``deserved`` = the DRF fair allocation clamped for Volcano's admission webhook (see
  :func:`deserved_amounts`), ``parent`` = the parent department's slug;
* one ``PriorityClass`` per tier.

Labels: ``app.kubernetes.io/managed-by: fairshare`` on everything; ``fairshare.io/team: <slug>``
on everything a team owns; ``fairshare.io/tier: <name>`` on PriorityClasses and on a team's
Namespace and Queue when it has a tier; ``fairshare.io/department: "true"`` on department Queues.
PriorityClasses carry **no** team label: they belong to the cluster, and the obvious placeholder
``_cluster`` is not even a valid label value (values must start with an alphanumeric).

Empty maps (no capability, no guarantee, ...) and false/empty optional scalars
(``globalDefault: false``, empty description, no parent) are omitted rather than written empty,
because the API server omits them too: the planner treats the fields as owned either way, so a
field that disappears from the desired state is still noticed and cleared by the apply.

Inactive teams render nothing, and neither do their descendants: deactivating a department
takes its subtree with it (a child Queue cannot point at a parent that no longer exists).

Determinism: the output is sorted in dependency order (:func:`sort_key`: Namespaces,
PriorityClasses, Queues parents-first, then namespaced kinds) and every map is built in sorted key
order, so the same spec always gives the same list, byte for byte once serialised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from scheduling.domain.quantity import format_quantity
from scheduling.domain.types import (
    ROLES,
    ClusterSpec,
    LimitSpec,
    NamespaceSpec,
    TeamSpec,
    TierSpec,
)

__all__ = [
    "KIND_ORDER",
    "LABEL_DEPARTMENT",
    "LABEL_MANAGED_BY",
    "LABEL_TEAM",
    "LABEL_TIER",
    "MANAGER",
    "RESERVED_QUEUE_NAMES",
    "ROLE_CLUSTER_ROLES",
    "deserved_amounts",
    "file_name",
    "object_key",
    "object_name",
    "render",
    "sort_key",
]

MANAGER = "fairshare"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_TEAM = "fairshare.io/team"
LABEL_TIER = "fairshare.io/tier"
LABEL_DEPARTMENT = "fairshare.io/department"

ROLE_CLUSTER_ROLES: dict[str, str] = {"lead": "admin", "member": "edit", "viewer": "view"}
VOLCANO_ROLES = ("lead", "member")

# Volcano creates these itself; a team with one of these slugs would fight the scheduler.
RESERVED_QUEUE_NAMES = frozenset({"default", "root"})

# Creation order: what other objects refer to comes first (a Queue's parent, a namespace's
# contents, the Role a RoleBinding names). Pruning walks it backwards.
KIND_ORDER: dict[str, int] = {
    "Namespace": 0,
    "PriorityClass": 1,
    "Queue": 2,
    "ResourceQuota": 3,
    "LimitRange": 4,
    "Role": 5,
    "RoleBinding": 6,
}

_API_VERSIONS = {
    "Namespace": "v1",
    "ResourceQuota": "v1",
    "LimitRange": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "Queue": "scheduling.volcano.sh/v1beta1",
}
_RBAC_GROUP = "rbac.authorization.k8s.io"
_QUOTA_LIMIT_RESOURCES = ("cpu", "memory")

Manifest = dict[str, Any]


# ---------------------------------------------------------------- names and keys


def object_name(kind: str, owner: str = "", role: str = "") -> str:
    """Return ``metadata.name`` for a rendered object; the single place names are decided.

    ``owner`` is the namespace name for a Namespace, the team slug for a Queue and the tier name
    for a PriorityClass; ``role`` (``lead``, ``member``, ``viewer``, ``volcano``) picks the
    RoleBinding.
    The per-namespace singletons (ResourceQuota, LimitRange, the Volcano Role) are all
    ``fairshare``-prefixed so they never collide with objects a team creates itself.
    Raises ValueError for a kind the renderer does not produce.
    """
    if kind in ("Namespace", "Queue", "PriorityClass"):
        if not owner:
            raise ValueError(f"{kind} name needs an owner")
        return owner
    if kind in ("ResourceQuota", "LimitRange"):
        return MANAGER
    if kind == "Role":
        return f"{MANAGER}-volcano"
    if kind == "RoleBinding":
        if role not in (*ROLES, "volcano"):
            raise ValueError(f"unknown role {role!r}")
        return f"{MANAGER}-{role}"
    raise ValueError(f"fairshare does not render {kind}")


def object_key(manifest: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """Return ``(kind, namespace, name)``; namespace is None for cluster-scoped objects."""
    metadata = manifest.get("metadata") or {}
    return (manifest["kind"], metadata.get("namespace") or None, metadata["name"])


def file_name(manifest: Mapping[str, Any]) -> str:
    """Return a stable relative path for GitOps export.

    Namespaced objects and the Namespace itself go under ``namespaces/<ns>/`` (so deleting a
    namespace's folder removes all of it); the other cluster-scoped objects under ``cluster/``:
    ``cluster/queue-research-team.yaml``, ``namespaces/ml/resourcequota-fairshare.yaml``,
    ``namespaces/ml/namespace-ml.yaml``.
    """
    kind, namespace, name = object_key(manifest)
    base = f"{kind.lower()}-{name}.yaml"
    if kind == "Namespace":
        return f"namespaces/{name}/{base}"
    if namespace is None:
        return f"cluster/{base}"
    return f"namespaces/{namespace}/{base}"


def sort_key(
    manifest: Mapping[str, Any], depth: Mapping[str, int] | None = None
) -> tuple[int, int, str, str]:
    """Dependency-order sort key: kind rank, queue depth (parents first), namespace, name.

    ``depth`` maps queue names to their distance from the root; unknown kinds sort last.
    """
    kind, namespace, name = object_key(manifest)
    level = (depth or {}).get(name, 0) if kind == "Queue" else 0
    return (KIND_ORDER.get(kind, len(KIND_ORDER)), level, namespace or "", name)


# ---------------------------------------------------------------- quantities


def deserved_amounts(team: TeamSpec) -> dict[str, Decimal]:
    """Return the Queue ``deserved`` amounts Volcano's webhook (>= 1.15) will accept.

    For every resource that has a fair allocation or a guarantee:
    ``deserved = min(max(fair, guarantee), capability)``, capability only where the team has a
    limit for that resource. Invariants (given guarantee <= limit, checked by TeamSpec):
    every guaranteed resource appears; guarantee <= deserved <= capability.
    """
    amounts: dict[str, Decimal] = {}
    for resource in sorted(team.deserved.keys() | team.guarantee.keys()):
        amount = max(
            Decimal(team.deserved.get(resource, 0)), Decimal(team.guarantee.get(resource, 0))
        )
        if resource in team.limit:
            amount = min(amount, Decimal(team.limit[resource]))
        amounts[resource] = amount
    return amounts


def _quantities(amounts: Mapping[str, Decimal], key: Callable[[str], str] = str) -> dict[str, str]:
    return {key(r): format_quantity(amounts[r], r) for r in sorted(amounts)}


# ---------------------------------------------------------------- objects


def _labels(team: TeamSpec | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    labels = {LABEL_MANAGED_BY: MANAGER}
    if team is not None:
        labels[LABEL_TEAM] = team.slug
    labels.update(extra or {})
    return dict(sorted(labels.items()))


def _manifest(kind: str, name: str, labels: dict[str, str], namespace: str = "") -> Manifest:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    return {"apiVersion": _API_VERSIONS[kind], "kind": kind, "metadata": metadata}


def _tier_labels(team: TeamSpec) -> dict[str, str]:
    return {LABEL_TIER: team.tier} if team.tier else {}


def _priority_class(tier: TierSpec) -> Manifest:
    obj = _manifest(
        "PriorityClass",
        object_name("PriorityClass", tier.name),
        _labels(extra={LABEL_TIER: tier.name}),
    )
    obj["value"] = tier.value
    obj["preemptionPolicy"] = tier.preemption_policy
    if tier.description:
        obj["description"] = tier.description
    if tier.global_default:
        obj["globalDefault"] = True
    return obj


def _queue(team: TeamSpec) -> Manifest:
    extra = _tier_labels(team)
    if team.is_department:
        extra[LABEL_DEPARTMENT] = "true"
    obj = _manifest("Queue", object_name("Queue", team.slug), _labels(team, extra))
    spec: dict[str, Any] = {"weight": team.weight, "reclaimable": team.reclaimable}
    if team.limit:
        spec["capability"] = _quantities(team.limit)
    if team.guarantee:
        spec["guarantee"] = {"resource": _quantities(team.guarantee)}
    deserved = deserved_amounts(team)
    if deserved:
        spec["deserved"] = _quantities(deserved)
    if team.parent:
        spec["parent"] = team.parent
    obj["spec"] = spec
    return obj


def _namespace(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    labels = {**ns.labels, **_labels(team, _tier_labels(team))}
    return _manifest("Namespace", object_name("Namespace", ns.name), dict(sorted(labels.items())))


def _resource_quota(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    """ResourceQuota: ``requests.<r>`` for every entry, ``limits.cpu|memory`` only on request.

    Invariant: no ``limits.`` key other than ``limits.cpu`` and ``limits.memory``, ever.
    """
    hard = _quantities(ns.quota, key=lambda r: f"requests.{r}")
    if ns.limits is not None and ns.limits.quota_limits:
        for resource in _QUOTA_LIMIT_RESOURCES:
            if resource in ns.quota:
                hard[f"limits.{resource}"] = format_quantity(ns.quota[resource], resource)
    obj = _manifest("ResourceQuota", object_name("ResourceQuota"), _labels(team), ns.name)
    obj["spec"] = {"hard": dict(sorted(hard.items()))}
    return obj


def _limit_range(ns: NamespaceSpec, team: TeamSpec, limits: LimitSpec) -> Manifest:
    item: dict[str, Any] = {"type": "Container"}
    for key, amounts in (
        ("default", limits.default_limit),
        ("defaultRequest", limits.default_request),
        ("max", limits.max),
    ):
        if amounts:
            item[key] = _quantities(amounts)
    obj = _manifest("LimitRange", object_name("LimitRange"), _labels(team), ns.name)
    obj["spec"] = {"limits": [item]}
    return obj


def _subjects(team: TeamSpec, roles: Iterable[str]) -> list[dict[str, str]]:
    wanted = set(roles)
    subjects = {("User", m.username) for m in team.members if m.role in wanted}
    subjects |= {("Group", group) for group, role in team.groups if role in wanted}
    return [
        {"kind": kind, "apiGroup": _RBAC_GROUP, "name": name} for kind, name in sorted(subjects)
    ]


def _role_binding(
    ns: NamespaceSpec,
    team: TeamSpec,
    role: str,
    ref_kind: str,
    ref_name: str,
    subjects: list[dict[str, str]],
) -> Manifest:
    obj = _manifest("RoleBinding", object_name("RoleBinding", role=role), _labels(team), ns.name)
    obj["roleRef"] = {"apiGroup": _RBAC_GROUP, "kind": ref_kind, "name": ref_name}
    obj["subjects"] = subjects
    return obj


def _volcano_role(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    obj = _manifest("Role", object_name("Role"), _labels(team), ns.name)
    obj["rules"] = [
        {
            "apiGroups": ["batch.volcano.sh"],
            "resources": ["jobs"],
            "verbs": [
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
        },
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "resources": ["podgroups"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return obj


def _namespace_objects(ns: NamespaceSpec, team: TeamSpec) -> list[Manifest]:
    objects = [_namespace(ns, team), _resource_quota(ns, team)]
    if ns.limits is not None and not ns.limits.is_empty:
        objects.append(_limit_range(ns, team, ns.limits))
    for role in ROLES:
        subjects = _subjects(team, [role])
        if subjects:
            objects.append(
                _role_binding(ns, team, role, "ClusterRole", ROLE_CLUSTER_ROLES[role], subjects)
            )
    if ns.volcano_jobs:
        objects.append(_volcano_role(ns, team))
        subjects = _subjects(team, VOLCANO_ROLES)
        if subjects:
            objects.append(
                _role_binding(ns, team, "volcano", "Role", object_name("Role"), subjects)
            )
    return objects


# ---------------------------------------------------------------- entry point


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
        if team.slug in RESERVED_QUEUE_NAMES:
            raise ValueError(f"team {team.slug}: the name is reserved for a Volcano queue")
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


def render(spec: ClusterSpec) -> list[Manifest]:
    """Render the desired state of the cluster as a list of manifests.

    Steps:
    1. check cross-object invariants (unknown team/tier/parent, parent not a department,
       reserved queue names, duplicates, hierarchy cycles) — raises ValueError;
    2. find the effectively active teams (the team and all its ancestors active);
    3. one PriorityClass per tier; one Queue per active team;
    4. the per-namespace objects for every managed namespace of an active team;
    5. sort in dependency order (:func:`sort_key`, queue parents first).

    Invariants: deterministic; every object carries ``app.kubernetes.io/managed-by: fairshare``;
    object keys are unique; no ResourceQuota has a ``limits.`` key other than cpu/memory;
    every Queue satisfies guarantee <= deserved <= capability per resource.
    """
    teams = _check(spec)
    depths = _queue_depths(teams)
    active = _effectively_active(teams)
    objects: list[Manifest] = [_priority_class(tier) for tier in spec.tiers]
    objects += [_queue(teams[slug]) for slug in sorted(active)]
    for ns in spec.namespaces:
        if ns.managed and ns.team in active:
            objects += _namespace_objects(ns, teams[ns.team])
    return sorted(objects, key=lambda obj: sort_key(obj, depths))
