"""Per-kind builders of the Kueue backend: ResourceFlavor, WorkloadPriorityClass, Cohort,
ClusterQueue, LocalQueue and the read-only Kueue Role (field meanings from Kueue's
``apis/kueue/v1beta2`` types; see docs/upstream.md for each).

Invariant: every object carries ``app.kubernetes.io/managed-by: fairshare``; team-owned ones
``fairshare.io/team``; maps in sorted key order, lists in a fixed order (resources as covered,
flavors by name), so the same spec renders byte for byte the same.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from quotas.domain.quantity import format_quantity
from scheduling.domain.render import (
    LABEL_DEPARTMENT,
    LABEL_TEAM,
    LABEL_TIER,
    QueueAmounts,
    leaf_queue_name,
    object_name,
)
from scheduling.domain.render.labels import ROOT_COHORT
from scheduling.domain.render.manifests import (
    Manifest,
    labels_for,
    manifest,
    role_binding,
    tenancy_objects,
    tier_labels,
)
from scheduling.domain.types import ROLES, NamespaceSpec, TeamSpec, TierSpec

from .quotas import FlavorQuota, NodeQuotas

__all__ = [
    "DEFAULT_FLAVOR",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "cluster_queue",
    "cohort",
    "flavor_name",
    "flavor_weights",
    "namespace_objects",
    "preemption",
    "resource_flavors",
    "root_cohort",
    "workload_priority_class",
]

DEFAULT_FLAVOR = "default-flavor"
GPU_RESOURCE = "nvidia.com/gpu"
# NVIDIA GPU feature discovery's product label (the one Fairshare's collector reads too).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_NOT_NAME = re.compile(r"[^a-z0-9]+")


def flavor_name(product: str) -> str:
    """``gpu-<product>`` as a DNS label (``NVIDIA-H100-80GB`` → ``gpu-nvidia-h100-80gb``)."""
    return ("gpu-" + _NOT_NAME.sub("-", product.lower()).strip("-"))[:63].rstrip("-")


def flavor_weights(
    resources: Sequence[str], gpu_products: Sequence[tuple[str, int]]
) -> dict[str, dict[str, Decimal]]:
    """The flavors covering each resource and their weights: ``nvidia.com/gpu`` one flavor per
    GPU product weighted by its GPU count (when products are known), everything else the
    default flavor. Raises ValueError when two products give the same flavor name."""
    gpu = {flavor_name(p): Decimal(n) for p, n in gpu_products}
    if len(gpu) != len(gpu_products):
        raise ValueError("two GPU products map to the same ResourceFlavor name")
    return {
        r: dict(gpu) if r == GPU_RESOURCE and gpu else {DEFAULT_FLAVOR: Decimal(1)}
        for r in resources
    }


def resource_flavors(gpu_products: Sequence[tuple[str, int]]) -> list[Manifest]:
    """The default flavor (no node labels: any node) and one flavor per GPU product."""
    objects = [_flavor(DEFAULT_FLAVOR, {})]
    for product, _ in gpu_products:
        objects.append(_flavor(flavor_name(product), {GPU_PRODUCT_LABEL: product}))
    return objects


def _flavor(name: str, node_labels: Mapping[str, str]) -> Manifest:
    obj = manifest("ResourceFlavor", object_name("ResourceFlavor", name), labels_for())
    obj["spec"] = {"nodeLabels": dict(node_labels)} if node_labels else {}
    return obj


def workload_priority_class(tier: TierSpec) -> Manifest:
    """A tier's WorkloadPriorityClass (``value`` and ``description`` sit at the top level)."""
    obj = manifest(
        "WorkloadPriorityClass",
        object_name("WorkloadPriorityClass", tier.name),
        labels_for(extra={LABEL_TIER: tier.name}),
    )
    obj["value"] = tier.value
    if tier.description:
        obj["description"] = tier.description
    return obj


def root_cohort() -> Manifest:
    """The root Cohort: no parent, no quota of its own (limits need a parent)."""
    obj = manifest("Cohort", object_name("Cohort", ROOT_COHORT), labels_for())
    obj["spec"] = {}
    return obj


def preemption(tier: TierSpec | None) -> dict[str, str]:
    """A ClusterQueue's ``preemption``: ``reclaimWithinCohort: Any`` (take back what others
    borrowed of this team's nominal quota, its fair allocation: what Volcano's reclaim does for
    a Queue's ``deserved``), and ``withinClusterQueue: LowerPriority`` unless the team's tier
    never preempts (``preemptionPolicy: Never``). ``borrowWithinCohort`` stays Kueue's default
    (``Never``), which the CRD requires when reclaiming is ``Never`` and allows otherwise."""
    never = tier is not None and tier.preemption_policy == "Never"
    return {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "Never" if never else "LowerPriority",
    }


def _q(amount: Decimal, resource: str) -> str:
    return format_quantity(amount, resource)


def _resource_groups(
    node: NodeQuotas, resources: Sequence[str], flavors_of: Mapping[str, Mapping[str, Decimal]]
) -> list[dict[str, Any]]:
    """One resource group per set of flavors (the default flavor's resources; the GPU
    products' ``nvidia.com/gpu``), each flavor listing every covered resource in order."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for r in resources:
        groups.setdefault(tuple(sorted(flavors_of[r])), []).append(r)
    rendered = []
    for flavors, covered in groups.items():
        rendered.append(
            {
                "coveredResources": list(covered),
                "flavors": [
                    {
                        "name": f,
                        "resources": [_resource(r, node.quotas[r][f]) for r in covered],
                    }
                    for f in flavors
                ],
            }
        )
    return rendered


def _resource(resource: str, quota: FlavorQuota) -> dict[str, str]:
    out = {"name": resource, "nominalQuota": _q(quota.nominal, resource)}
    if quota.borrowing is not None:
        out["borrowingLimit"] = _q(quota.borrowing, resource)
    if quota.lending is not None:
        out["lendingLimit"] = _q(quota.lending, resource)
    return out


def _parent(amounts: QueueAmounts) -> str:
    return amounts.parent or ROOT_COHORT


def cohort(
    team: TeamSpec,
    amounts: QueueAmounts,
    node: NodeQuotas,
    resources: Sequence[str],
    flavors_of: Mapping[str, Mapping[str, Decimal]],
) -> Manifest:
    """A department's Cohort, under its department or the root Cohort."""
    extra = {**tier_labels(team), LABEL_DEPARTMENT: "true"}
    obj = manifest("Cohort", object_name("Cohort", amounts.name), labels_for(team, extra))
    obj["spec"] = {
        "parentName": _parent(amounts),
        "resourceGroups": _resource_groups(node, resources, flavors_of),
        "fairSharing": {"weight": str(team.weight)},
    }
    return obj


def cluster_queue(
    team: TeamSpec,
    amounts: QueueAmounts,
    node: NodeQuotas,
    resources: Sequence[str],
    flavors_of: Mapping[str, Mapping[str, Decimal]],
    tier: TierSpec | None,
) -> Manifest:
    """A team's ClusterQueue (or a department's ``<slug>.own``), selecting the team's
    namespaces, in its department's Cohort or the root Cohort."""
    obj = manifest(
        "ClusterQueue",
        object_name("ClusterQueue", amounts.name),
        labels_for(team, tier_labels(team)),
    )
    obj["spec"] = {
        "cohortName": _parent(amounts),
        "namespaceSelector": {"matchLabels": {LABEL_TEAM: team.slug}},
        "resourceGroups": _resource_groups(node, resources, flavors_of),
        "fairSharing": {"weight": str(team.weight)},
        "preemption": preemption(tier),
    }
    return obj


def _local_queue(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    obj = manifest("LocalQueue", object_name("LocalQueue"), labels_for(team), ns.name)
    obj["spec"] = {"clusterQueue": leaf_queue_name(team)}
    return obj


def _kueue_role(ns: NamespaceSpec, team: TeamSpec) -> Manifest:
    obj = manifest("Role", object_name("Role", role="kueue"), labels_for(team), ns.name)
    obj["rules"] = [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["localqueues", "workloads"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    return obj


def namespace_objects(ns: NamespaceSpec, team: TeamSpec) -> list[Manifest]:
    """What the Kueue backend renders for one managed namespace, the Namespace first."""
    objects = tenancy_objects(ns, team, route=False)
    objects.append(_local_queue(ns, team))
    binding = role_binding(ns, team, "kueue", ROLES, object_name("Role", role="kueue"))
    if binding is not None:
        objects += [_kueue_role(ns, team), binding]
    return objects
