"""Desired-state renderer: the tenancy model as Kubernetes manifests (pure).

``render(spec)`` turns a :class:`~scheduling.domain.types.ClusterSpec` into plain dicts ready for
server-side apply (field manager ``fairshare``). It is the equivalent of kopf's render-and-adopt:
every object carries the ownership label ``app.kubernetes.io/managed-by: fairshare``, which is
what the planner uses to decide what it may prune.

What is rendered
================

Per **managed namespace of an active team**:

* ``Namespace`` — the user's extra labels plus ours (ours win on a clash), and the annotation
  ``scheduling.volcano.sh/queue-name: <leaf queue>``: Volcano's PodGroup mutating webhook
  (``pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go``) moves a PodGroup created on the
  ``default`` queue to the queue this annotation names, which is how a team's workloads reach the
  team's Queue. It always names a *leaf* queue (Volcano refuses jobs in a queue with children,
  ``jobs/validate/admit_job.go``): the team's own Queue, or for a department its own-namespaces
  queue ``<department>.own`` (see below).
* ``ResourceQuota fairshare`` — ``requests.<resource>`` for every quota entry (``requests.cpu``,
  ``requests.memory``, ``requests.nvidia.com/gpu``, ...); ``limits.cpu`` / ``limits.memory`` equal
  to the request amounts only when the namespace's LimitSpec sets ``quota_limits``. Never
  ``limits.<extended>``: Kubernetes only enforces the ``requests.`` prefix for extended resources.
  Rendered even when the quota is empty, so the set of objects depends on namespaces only.
* ``LimitRange fairshare`` — one ``Container`` item (``default``, ``defaultRequest``, ``max``)
  when the namespace has a non-empty LimitSpec, rendered as the fixed point of the API server's
  ``SetDefaults_LimitRangeItem`` (see :func:`limit_range_item`): a ``max`` without a ``default``
  would otherwise be copied into ``default`` and ``defaultRequest``, so every container that
  names no GPU would get the maximum number of GPUs. For resources that cannot be overcommitted
  (GPUs and every other extended resource) the renderer writes explicit zero defaults instead;
  for cpu/memory it writes what Kubernetes would default anyway, so nothing is left to default.
* ``RoleBinding fairshare-lead|member|viewer`` — the team's users (kind ``User``, by username)
  and groups bound to the built-in ClusterRoles ``admin`` / ``edit`` / ``view``; a binding with
  no subjects is not rendered (and so gets pruned).
* ``Role`` + ``RoleBinding fairshare-volcano`` when ``volcano_jobs`` — full access to
  ``batch.volcano.sh`` jobs and read access to ``scheduling.volcano.sh`` podgroups, bound to the
  leads and members (viewers get nothing: the Volcano kinds are not in the built-in ``view``).

Cluster-scoped:

* one Volcano ``Queue`` per active team, named after the team slug (departments too):
  ``weight``, ``reclaimable``, ``capability`` = limit, ``guarantee.resource`` = guarantee,
  ``deserved`` = the DRF fair allocation made consistent for Volcano's admission webhook (see
  :func:`queue_amounts`), ``parent`` = the parent department's slug;
* for a department with managed namespaces of its own, one more leaf Queue
  ``<department>.own`` (a child of the department): its namespaces route there, because a queue
  with children takes no jobs. Its guarantee is what the department's own guarantee leaves after
  its teams' guarantees, its capability the department's limit, its deserved the department's
  fair allocation beyond its teams'. (Team slugs are DNS labels and cannot contain a dot, so the
  name never collides with a team's Queue.)
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

Hierarchy (see :func:`queue_amounts`): a department's Queue ``guarantee`` is **derived**:
max(its own guarantee, Σ its children's Queue guarantees), per resource, so Volcano's rule
"Σ children's guarantee ≤ parent's guarantee" always holds (the capacity check in
``quotas.capacity_rule.committed_guarantees`` counts a department the same way). ``deserved`` is
fitted so that guarantee ≤ deserved ≤ capability on every Queue and Σ children's deserved ≤ the
parent's deserved. What cannot be fitted — a child's limit over its nearest ancestor's limit, or
a department whose derived guarantee exceeds its limit — is refused where changes enter
(``quotas.hierarchy``) and raises ValueError here.

Inactive teams render nothing, and neither do their descendants: deactivating a department
takes its subtree with it (a child Queue cannot point at a parent that no longer exists).

Determinism: the output is sorted in dependency order (:func:`sort_key`: Namespaces,
PriorityClasses, Queues parents-first, then namespaced kinds) and every map is built in sorted key
order, so the same spec always gives the same list, byte for byte once serialised.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from quotas.domain.names import (
    OWN_QUEUE_SUFFIX,
    RESERVED_QUEUE_NAMES,
    protected_by,
    team_slug_errors,
)
from quotas.domain.quantity import format_quantity, is_byte_resource
from scheduling.domain.types import (
    OVERCOMMITTABLE_RESOURCES,
    ROLES,
    ClusterSpec,
    LimitSpec,
    NamespaceSpec,
    TeamSpec,
    TierSpec,
)

__all__ = [
    "ANNOTATION_ADOPTED",
    "ANNOTATION_QUEUE",
    "ANNOTATION_RELEASED",
    "KIND_ORDER",
    "LABEL_DEPARTMENT",
    "LABEL_MANAGED_BY",
    "LABEL_TEAM",
    "LABEL_TIER",
    "MANAGER",
    "OWN_QUEUE_SUFFIX",
    "RESERVED_QUEUE_NAMES",
    "ROLE_CLUSTER_ROLES",
    "QueueAmounts",
    "deserved_amounts",
    "file_name",
    "leaf_queue_name",
    "limit_range_item",
    "object_key",
    "object_name",
    "queue_amounts",
    "queue_depths",
    "render",
    "sort_key",
]

MANAGER = "fairshare"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_TEAM = "fairshare.io/team"
LABEL_TIER = "fairshare.io/tier"
LABEL_DEPARTMENT = "fairshare.io/department"
# Volcano's QueueNameAnnotationKey (volcano.sh/apis pkg/apis/scheduling/v1beta1/labels.go).
ANNOTATION_QUEUE = "scheduling.volcano.sh/queue-name"
# On a Namespace that existed before Fairshare managed it: never deleted (plan releases it).
ANNOTATION_ADOPTED = "fairshare.io/adopted"
# Left on a Namespace Fairshare released (it stays, empty of ours): Fairshare had it before, so
# managing it again is not a take-over (scheduling.namespace_guard).
ANNOTATION_RELEASED = "fairshare.io/released"

ROLE_CLUSTER_ROLES: dict[str, str] = {"lead": "admin", "member": "edit", "viewer": "view"}
VOLCANO_ROLES = ("lead", "member")

# OWN_QUEUE_SUFFIX and RESERVED_QUEUE_NAMES (Volcano creates ``root`` and ``default`` itself; a
# team with one of these slugs would fight the scheduler) come from quotas.domain.names, the one
# definition of the name rules that the entry points validate against too.

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


def file_name(manifest: Mapping[str, Any], depth: int = 0) -> str:
    """Return a stable relative path for GitOps export, in an order ``kubectl apply -R -f``
    can apply in one pass (it walks the tree in lexical order).

    Cluster-scoped objects go under ``cluster/`` (before ``namespaces/``), Queues numbered by
    their ``depth`` in the hierarchy so a parent comes before its children (Volcano's webhook
    refuses a child whose parent does not exist yet); a namespace's objects under
    ``namespaces/<ns>/``, the Namespace itself first (``00-``), so deleting the folder removes
    all of it: ``cluster/priorityclass-production.yaml``, ``cluster/queue-1-cv-team.yaml``,
    ``namespaces/ml/00-namespace-ml.yaml``, ``namespaces/ml/resourcequota-fairshare.yaml``.
    """
    kind, namespace, name = object_key(manifest)
    base = f"{kind.lower()}-{name}.yaml"
    if kind == "Namespace":
        return f"namespaces/{name}/00-{base}"
    if kind == "Queue":
        return f"cluster/{kind.lower()}-{depth}-{name}.yaml"
    if namespace is None:
        return f"cluster/{base}"
    return f"namespaces/{namespace}/{base}"


def queue_depths(manifests: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Depth of each rendered Queue (0 for the top level) from the manifests' ``spec.parent``."""
    parents = {
        m["metadata"]["name"]: (m.get("spec") or {}).get("parent")
        for m in manifests
        if m.get("kind") == "Queue"
    }
    depths: dict[str, int] = {}
    for name in parents:
        depth, current = 0, parents[name]
        while current and depth <= len(parents):
            depth, current = depth + 1, parents.get(current)
        depths[name] = depth
    return depths


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
    """Return the deserved amounts of a team on its own (no hierarchy to fit into).

    For every resource that has a fair allocation or a guarantee:
    ``deserved = min(max(fair, guarantee), capability)``, capability only where the team has a
    limit for that resource. Invariants (given guarantee <= limit, checked by TeamSpec):
    every guaranteed resource appears; guarantee <= deserved <= capability.
    """
    return _clamp(team.deserved, team.guarantee, team.limit)


def _clamp(
    wanted: Mapping[str, Decimal], low: Mapping[str, Decimal], high: Mapping[str, Decimal]
) -> dict[str, Decimal]:
    amounts: dict[str, Decimal] = {}
    for resource in sorted(wanted.keys() | low.keys()):
        amount = max(Decimal(wanted.get(resource, 0)), Decimal(low.get(resource, 0)))
        if resource in high:
            amount = min(amount, Decimal(high[resource]))
        amounts[resource] = amount
    return amounts


def _grain(resource: str) -> Decimal:
    """The unit deserved amounts are cut in when they are scaled: devices, bytes, millicores."""
    if "/" in resource or is_byte_resource(resource):
        return Decimal(1)
    return Decimal("0.001")


def _positive(amounts: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {r: Decimal(v) for r, v in sorted(amounts.items()) if Decimal(v) > 0}


def _quantities(amounts: Mapping[str, Decimal], key: Callable[[str], str] = str) -> dict[str, str]:
    return {key(r): format_quantity(amounts[r], r) for r in sorted(amounts)}


# ---------------------------------------------------------------- the queue hierarchy


@dataclass(frozen=True)
class QueueAmounts:
    """What one rendered Queue carries: ``parent`` (None at the top), and the amounts."""

    name: str
    team: str
    parent: str | None
    guarantee: dict[str, Decimal] = field(default_factory=dict)
    capability: dict[str, Decimal] = field(default_factory=dict)
    deserved: dict[str, Decimal] = field(default_factory=dict)


def leaf_queue_name(team: TeamSpec) -> str:
    """The queue a team's namespaces route to: its own Queue, or ``<slug>.own`` for a
    department (a queue with children takes no jobs)."""
    return f"{team.slug}{OWN_QUEUE_SUFFIX}" if team.is_department else team.slug


def _fmt(amount: Decimal, resource: str) -> str:
    return format_quantity(amount, resource)


def queue_amounts(
    teams: Mapping[str, TeamSpec], active: Iterable[str], own_leaves: Iterable[str] = ()
) -> dict[str, QueueAmounts]:
    """Compute every Queue's guarantee, capability and deserved so Volcano admits all of them.

    Volcano's validating webhook (``pkg/webhooks/admission/queues/validate/validate_queue.go``)
    requires, per resource: guarantee <= deserved <= capability; a child's capability <= its
    nearest ancestor's; Σ children's guarantee <= the parent's guarantee and Σ children's deserved
    <= the parent's deserved (a resource the children have and the parent lacks counts as 0 on the
    parent: ``Resource.LessPartly`` with ``Zero``).

    ``active`` are the team slugs that get a Queue; ``own_leaves`` the departments that also get
    an own-namespaces leaf ``<slug>.own``. Steps:

    1. guarantee, bottom-up: a leaf has its own guarantee; a department max(own, Σ children's);
       the own leaf takes what the department's own guarantee leaves after its teams';
    2. capability = the team's limit (the own leaf: the department's); check that no Queue's
       capability is over its nearest ancestor's and no guarantee over its capability, else
       raise ValueError naming the department and the numbers;
    3. wanted deserved, bottom-up: a leaf clamps its fair allocation between guarantee and
       capability; a department clamps max(its fair allocation, Σ children's wanted); the own
       leaf wants the department's fair allocation beyond its teams';
    4. deserved, top-down: a top-level Queue gets what it wants; children whose wanted amounts
       do not fit their parent's deserved keep their guarantees and share the rest in
       proportion to what they wanted above it, cut down to whole grains (devices, bytes,
       millicores), so the sum never exceeds the parent's.

    Zero amounts are left out. Deterministic: children are visited in name order.
    """
    active = set(active)
    children: dict[str, list[str]] = {slug: [] for slug in active}
    parents: dict[str, str | None] = {}
    for slug in sorted(active):
        parent = teams[slug].parent
        parents[slug] = parent if parent in active else None
        if parents[slug] is not None:
            children[parents[slug]].append(slug)  # type: ignore[index]
    own: dict[str, str] = {}
    for slug in sorted(set(own_leaves) & active):
        leaf = f"{slug}{OWN_QUEUE_SUFFIX}"
        own[leaf] = slug
        parents[leaf] = slug
        children[leaf] = []
        children[slug].append(leaf)

    guarantee: dict[str, dict[str, Decimal]] = {}
    capability: dict[str, dict[str, Decimal]] = {}
    fair: dict[str, dict[str, Decimal]] = {}

    def down(name: str) -> None:  # post-order: children first
        for child in children[name]:
            if child not in own:
                down(child)
        if name in own:
            return
        team = teams[name]
        capability[name] = {r: Decimal(v) for r, v in team.limit.items()}
        fair[name] = {r: Decimal(v) for r, v in team.deserved.items()}
        mine = {r: Decimal(v) for r, v in team.guarantee.items()}
        teams_sum = _sum(guarantee[c] for c in children[name] if c not in own)
        derived = {
            r: max(mine.get(r, Decimal(0)), teams_sum.get(r, Decimal(0)))
            for r in mine.keys() | teams_sum.keys()
        }
        guarantee[name] = _positive(derived)
        for leaf in (c for c in children[name] if c in own):
            guarantee[leaf] = _positive({r: mine[r] - teams_sum.get(r, Decimal(0)) for r in mine})
            capability[leaf] = dict(capability[name])
            teams_fair = _sum(fair[c] for c in children[name] if c not in own)
            fair[leaf] = _positive(
                {r: v - teams_fair.get(r, Decimal(0)) for r, v in fair[name].items()}
            )

    roots = sorted(name for name in active if parents[name] is None)
    for root in roots:
        down(root)
    names = sorted(guarantee)
    for name in names:
        _check_queue(name, own.get(name, name), parents, guarantee, capability)

    wanted: dict[str, dict[str, Decimal]] = {}

    def want(name: str) -> dict[str, Decimal]:
        below = _sum(want(child) for child in children[name])
        mine = fair[name]
        merged = {
            r: max(mine.get(r, Decimal(0)), below.get(r, Decimal(0)))
            for r in mine.keys() | below.keys()
        }
        wanted[name] = _positive(_clamp(merged, guarantee[name], capability[name]))
        return wanted[name]

    deserved: dict[str, dict[str, Decimal]] = {}

    def fit(name: str) -> None:
        budget = deserved[name]
        kids = children[name]
        for child in kids:
            deserved[child] = dict(wanted[child])
        for resource in sorted({r for c in kids for r in wanted[c]}):
            total = sum((wanted[c].get(resource, Decimal(0)) for c in kids), Decimal(0))
            room = budget.get(resource, Decimal(0))
            if total <= room:
                continue
            base = sum((guarantee[c].get(resource, Decimal(0)) for c in kids), Decimal(0))
            excess = total - base
            grain = _grain(resource)
            for child in kids:
                low = guarantee[child].get(resource, Decimal(0))
                extra = wanted[child].get(resource, Decimal(0)) - low
                share = (extra * (room - base) / excess / grain).to_integral_value(ROUND_FLOOR)
                deserved[child][resource] = low + share * grain
        for child in kids:
            deserved[child] = _positive(deserved[child])
            fit(child)

    for root in roots:
        want(root)
        deserved[root] = dict(wanted[root])
        fit(root)

    return {
        name: QueueAmounts(
            name=name,
            team=own.get(name, name),
            parent=parents[name],
            guarantee=guarantee[name],
            capability=capability[name],
            deserved=deserved[name],
        )
        for name in names
    }


def _sum(maps: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for amounts in maps:
        for resource, amount in amounts.items():
            total[resource] = total.get(resource, Decimal(0)) + Decimal(amount)
    return total


def _check_queue(
    name: str,
    team: str,
    parents: Mapping[str, str | None],
    guarantee: Mapping[str, Mapping[str, Decimal]],
    capability: Mapping[str, Mapping[str, Decimal]],
) -> None:
    """Raise ValueError when a Queue's amounts break a rule no fitting can repair."""
    for resource, amount in sorted(guarantee[name].items()):
        cap = capability[name].get(resource)
        if cap is not None and amount > cap:
            raise ValueError(
                f"team {team}: guarantees for {resource} total {_fmt(amount, resource)} "
                f"(its own and its teams'), over its {_fmt(cap, resource)} limit"
            )
    for resource, amount in sorted(capability[name].items()):
        ancestor = parents.get(name)
        # Volcano's findNearestAncestorCapability: the first ancestor with a positive amount.
        while ancestor is not None and not capability[ancestor].get(resource):
            ancestor = parents.get(ancestor)
        if ancestor is not None and amount > capability[ancestor][resource]:
            raise ValueError(
                f"team {team}: its {resource} limit {_fmt(amount, resource)} is over the "
                f"{_fmt(capability[ancestor][resource], resource)} limit of department "
                f"{ancestor}"
            )


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


def _queue(team: TeamSpec, amounts: QueueAmounts) -> Manifest:
    extra = _tier_labels(team)
    if team.is_department and amounts.name == team.slug:
        extra[LABEL_DEPARTMENT] = "true"
    obj = _manifest("Queue", object_name("Queue", amounts.name), _labels(team, extra))
    spec: dict[str, Any] = {"weight": team.weight, "reclaimable": team.reclaimable}
    if amounts.capability:
        spec["capability"] = _quantities(amounts.capability)
    if amounts.guarantee:
        spec["guarantee"] = {"resource": _quantities(amounts.guarantee)}
    if amounts.deserved:
        spec["deserved"] = _quantities(amounts.deserved)
    if amounts.parent:
        spec["parent"] = amounts.parent
    obj["spec"] = spec
    return obj


def _namespace(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    labels = {**ns.labels, **_labels(team, _tier_labels(team))}
    obj = _manifest("Namespace", object_name("Namespace", ns.name), dict(sorted(labels.items())))
    obj["metadata"]["annotations"] = {ANNOTATION_QUEUE: leaf_queue_name(team)}
    if ns.adopted:
        obj["metadata"]["annotations"][ANNOTATION_ADOPTED] = "true"
    return obj


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


def limit_range_item(limits: LimitSpec) -> dict[str, Any]:
    """The ``Container`` LimitRange item for ``limits``, as the API server will store it.

    Kubernetes ``pkg/apis/core/v1/defaults.go`` ``SetDefaults_LimitRangeItem`` copies ``max``
    into a missing ``default`` and ``default`` into a missing ``defaultRequest``; LimitRanger
    then gives every container without a request/limit of its own those defaults. So:

    1. a resource that cannot be overcommitted (GPUs, MIG slices, every extended resource) with
       a ``max`` and no default gets explicit zero defaults: a container that names no GPU gets
       ``nvidia.com/gpu: 0`` (no device, nothing counted against the quota) instead of the
       maximum. (A ``type: Pod`` max would not do: LimitRanger's ``maxConstraint`` refuses a
       pod in which any container lacks a limit for the resource, i.e. every CPU-only pod.)
    2. cpu/memory (overcommittable) get what Kubernetes would default anyway (``default`` = max,
       ``defaultRequest`` = default), written out so that nothing is left for the server to add
       and the planner compares like with like.

    Invariants: the result is a fixed point of ``SetDefaults_LimitRangeItem``; no resource
    that cannot be overcommitted has a non-zero default unless the policy set one.
    """
    default = {r: Decimal(v) for r, v in limits.default_limit.items()}
    request = {r: Decimal(v) for r, v in limits.default_request.items()}
    for resource, amount in limits.max.items():
        if resource not in default:
            default[resource] = (
                Decimal(amount) if resource in OVERCOMMITTABLE_RESOURCES else Decimal(0)
            )
    for resource, amount in default.items():
        request.setdefault(resource, amount)
    item: dict[str, Any] = {"type": "Container"}
    for key, amounts in (("default", default), ("defaultRequest", request), ("max", limits.max)):
        if amounts:
            item[key] = _quantities(amounts)
    return item


def _limit_range(ns: NamespaceSpec, team: TeamSpec, limits: LimitSpec) -> Manifest:
    obj = _manifest("LimitRange", object_name("LimitRange"), _labels(team), ns.name)
    obj["spec"] = {"limits": [limit_range_item(limits)]}
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
    objects: list[Manifest] = [_priority_class(tier) for tier in spec.tiers]
    objects += [_queue(teams[q.team], q) for q in amounts.values()]
    for ns in managed:
        if namespaces_of is None or ns.team in namespaces_of:
            objects += _namespace_objects(ns, teams[ns.team])
    return sorted(objects, key=lambda obj: sort_key(obj, depths))
