"""Per-kind manifest builders: each object of the tenancy model as a plain dict.

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
  ``requests.memory``, ``requests.nvidia.com/gpu``, ...; a DRA device count
  ``<class>.deviceclass.resource.k8s.io/devices`` keeps its name, as the ResourceClaim quota
  evaluator charges it); ``limits.cpu`` / ``limits.memory`` equal
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
  :func:`.amounts.queue_amounts`), ``parent`` = the parent department's slug; a DRA device
  class's quota ``<class>.deviceclass.resource.k8s.io/devices`` appears in all three as
  ``deviceclass/<class>``, the device count Volcano's capacity plugin enforces per queue
  (volcano pkg/scheduler/plugins/capacity/capacity.go — ``parseDRAResourceList``,
  ``checkDRAAllocatable``; a capability of 0 there means *no limit*, so a zero limit is the
  namespaces' ResourceQuota's alone to enforce);
* for a department with managed namespaces of its own, one more leaf Queue
  ``<department>.own`` (a child of the department): its namespaces route there, because a queue
  with children takes no jobs. Its guarantee is what the department's own guarantee leaves after
  its teams' guarantees, its capability the department's limit, its deserved the department's
  fair allocation beyond its teams'. (Team slugs are DNS labels and cannot contain a dot, so the
  name never collides with a team's Queue.)
* one ``PriorityClass`` per tier.

Empty maps (no capability, no guarantee, ...) and false/empty optional scalars
(``globalDefault: false``, empty description, no parent) are omitted rather than written empty,
because the API server omits them too: the planner treats the fields as owned either way, so a
field that disappears from the desired state is still noticed and cleared by the apply.

Invariant: every object carries ``app.kubernetes.io/managed-by: fairshare``; no ResourceQuota
has a ``limits.`` key other than cpu/memory; no LimitRange defaults a GPU onto a container;
every map is built in sorted key order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from quotas.domain.quantity import format_quantity
from scheduling.domain.types import (
    OVERCOMMITTABLE_RESOURCES,
    ROLES,
    LimitSpec,
    NamespaceSpec,
    TeamSpec,
    TierSpec,
)

from .amounts import DEVICE_CLASS_SUFFIX, QueueAmounts, volcano_resource
from .keys import leaf_queue_name, object_name
from .labels import (
    ANNOTATION_ADOPTED,
    ANNOTATION_QUEUE,
    LABEL_DEPARTMENT,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    LABEL_TIER,
    MANAGER,
    ROLE_CLUSTER_ROLES,
    VOLCANO_ROLES,
)

__all__ = [
    "Manifest",
    "labels_for",
    "limit_range_item",
    "manifest",
    "namespace_objects",
    "priority_class",
    "quantities",
    "queue",
    "role_binding",
    "tenancy_objects",
    "tier_labels",
]

_API_VERSIONS = {
    "Namespace": "v1",
    "ResourceQuota": "v1",
    "LimitRange": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "Queue": "scheduling.volcano.sh/v1beta1",
    # Kueue's storage version (sigs.k8s.io/kueue apis/kueue/v1beta2; v1beta1 is deprecated and
    # served through conversion only).
    "ClusterQueue": "kueue.x-k8s.io/v1beta2",
    "Cohort": "kueue.x-k8s.io/v1beta2",
    "LocalQueue": "kueue.x-k8s.io/v1beta2",
    "ResourceFlavor": "kueue.x-k8s.io/v1beta2",
    "WorkloadPriorityClass": "kueue.x-k8s.io/v1beta2",
}
_RBAC_GROUP = "rbac.authorization.k8s.io"
_QUOTA_LIMIT_RESOURCES = ("cpu", "memory")

Manifest = dict[str, Any]


def quantities(amounts: Mapping[str, Decimal], key: Callable[[str], str] = str) -> dict[str, str]:
    """``amounts`` as Kubernetes quantity strings, in sorted key order (``key`` renames)."""
    return {key(r): format_quantity(amounts[r], r) for r in sorted(amounts)}


def labels_for(
    team: TeamSpec | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Our labels: the ownership label, the team's label when there is a team, then ``extra``."""
    labels = {LABEL_MANAGED_BY: MANAGER}
    if team is not None:
        labels[LABEL_TEAM] = team.slug
    labels.update(extra or {})
    return dict(sorted(labels.items()))


def manifest(kind: str, name: str, labels: dict[str, str], namespace: str = "") -> Manifest:
    """The skeleton of a rendered object: apiVersion, kind and metadata (name, namespace,
    labels), for every kind either backend renders."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    return {"apiVersion": _API_VERSIONS[kind], "kind": kind, "metadata": metadata}


def tier_labels(team: TeamSpec) -> dict[str, str]:
    return {LABEL_TIER: team.tier} if team.tier else {}


def priority_class(tier: TierSpec) -> Manifest:
    """The PriorityClass of a tier (no team label: it belongs to the cluster)."""
    obj = manifest(
        "PriorityClass",
        object_name("PriorityClass", tier.name),
        labels_for(extra={LABEL_TIER: tier.name}),
    )
    obj["value"] = tier.value
    obj["preemptionPolicy"] = tier.preemption_policy
    if tier.description:
        obj["description"] = tier.description
    if tier.global_default:
        obj["globalDefault"] = True
    return obj


def queue(team: TeamSpec, amounts: QueueAmounts) -> Manifest:
    """The Volcano Queue ``amounts.name`` of ``team`` (its own, or its ``.own`` leaf)."""
    extra = tier_labels(team)
    if team.is_department and amounts.name == team.slug:
        extra[LABEL_DEPARTMENT] = "true"
    obj = manifest("Queue", object_name("Queue", amounts.name), labels_for(team, extra))
    spec: dict[str, Any] = {"weight": team.weight, "reclaimable": team.reclaimable}
    if amounts.capability:
        spec["capability"] = _volcano_quantities(amounts.capability)
    if amounts.guarantee:
        spec["guarantee"] = {"resource": _volcano_quantities(amounts.guarantee)}
    if amounts.deserved:
        spec["deserved"] = _volcano_quantities(amounts.deserved)
    if amounts.parent:
        spec["parent"] = amounts.parent
    obj["spec"] = spec
    return obj


def _volcano_quantities(amounts: Mapping[str, Decimal]) -> dict[str, str]:
    """``amounts`` under the names Volcano reads, in sorted key order (``deviceclass/<class>``
    for a DRA device count, :func:`.amounts.volcano_resource`)."""
    named = {volcano_resource(r): format_quantity(v, r) for r, v in amounts.items()}
    return dict(sorted(named.items()))


def _namespace(ns: NamespaceSpec, team: TeamSpec, *, route: bool = True) -> Manifest:
    labels = {**ns.labels, **labels_for(team, tier_labels(team))}
    obj = manifest("Namespace", object_name("Namespace", ns.name), dict(sorted(labels.items())))
    annotations: dict[str, str] = {}
    if route:
        annotations[ANNOTATION_QUEUE] = leaf_queue_name(team)
    if ns.adopted:
        annotations[ANNOTATION_ADOPTED] = "true"
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def _quota_key(resource: str) -> str:
    """The ResourceQuota ``hard`` key of a quota entry: ``requests.<r>``, or a DRA device
    class's ``<class>.deviceclass.resource.k8s.io/devices`` as it is."""
    return resource if resource.endswith(DEVICE_CLASS_SUFFIX) else f"requests.{resource}"


def _resource_quota(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    """ResourceQuota: ``requests.<r>`` for every entry (a DRA device class's
    ``<class>.deviceclass.resource.k8s.io/devices`` unprefixed), ``limits.cpu|memory`` only on
    request.

    Invariant: no ``limits.`` key other than ``limits.cpu`` and ``limits.memory``, ever.
    """
    hard = quantities(ns.quota, key=_quota_key)
    if ns.limits is not None and ns.limits.quota_limits:
        for resource in _QUOTA_LIMIT_RESOURCES:
            if resource in ns.quota:
                hard[f"limits.{resource}"] = format_quantity(ns.quota[resource], resource)
    obj = manifest("ResourceQuota", object_name("ResourceQuota"), labels_for(team), ns.name)
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
            item[key] = quantities(amounts)
    return item


def _limit_range(ns: NamespaceSpec, team: TeamSpec, limits: LimitSpec) -> Manifest:
    obj = manifest("LimitRange", object_name("LimitRange"), labels_for(team), ns.name)
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
    obj = manifest("RoleBinding", object_name("RoleBinding", role=role), labels_for(team), ns.name)
    obj["roleRef"] = {"apiGroup": _RBAC_GROUP, "kind": ref_kind, "name": ref_name}
    obj["subjects"] = subjects
    return obj


def _volcano_role(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    obj = manifest("Role", object_name("Role"), labels_for(team), ns.name)
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


def tenancy_objects(ns: NamespaceSpec, team: TeamSpec, *, route: bool) -> list[Manifest]:
    """What every backend renders for one managed namespace, the Namespace itself first: the
    Namespace (with Volcano's queue annotation when ``route``), its ResourceQuota, LimitRange
    and the lead/member/viewer RoleBindings."""
    objects = [_namespace(ns, team, route=route), _resource_quota(ns, team)]
    if ns.limits is not None and not ns.limits.is_empty:
        objects.append(_limit_range(ns, team, ns.limits))
    for role in ROLES:
        subjects = _subjects(team, [role])
        if subjects:
            objects.append(
                _role_binding(ns, team, role, "ClusterRole", ROLE_CLUSTER_ROLES[role], subjects)
            )
    return objects


def role_binding(
    ns: NamespaceSpec, team: TeamSpec, role: str, roles: Iterable[str], role_name: str
) -> Manifest | None:
    """The RoleBinding ``fairshare-<role>`` of ``ns`` binding the team's people in ``roles`` to
    the namespace's Role ``role_name``; None when nobody holds those roles."""
    subjects = _subjects(team, roles)
    if not subjects:
        return None
    return _role_binding(ns, team, role, "Role", role_name, subjects)


def namespace_objects(ns: NamespaceSpec, team: TeamSpec) -> list[Manifest]:
    """Every object the Volcano backend renders for one managed namespace, Namespace first."""
    objects = tenancy_objects(ns, team, route=True)
    if ns.volcano_jobs:
        objects.append(_volcano_role(ns, team))
        subjects = _subjects(team, VOLCANO_ROLES)
        if subjects:
            objects.append(
                _role_binding(ns, team, "volcano", "Role", object_name("Role"), subjects)
            )
    return objects
