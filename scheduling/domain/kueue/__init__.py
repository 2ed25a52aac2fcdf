"""The Kueue backend's desired-state renderer: the tenancy model as Kueue objects (pure).

``render(spec)`` gives, from the same :class:`~scheduling.domain.types.ClusterSpec` and the same
queue amounts as the Volcano renderer (:func:`scheduling.domain.render.prepare`), Kueue's
objects (``kueue.x-k8s.io/v1beta2``, the version Kueue stores: ``apis/kueue/v1beta2``):

* one **ResourceFlavor** ``default-flavor`` (no node labels: every node) for cpu, memory and every
  other resource, and one per GPU product (``gpu-<product>``, ``nodeLabels:
  nvidia.com/gpu.product: <product>``) for ``nvidia.com/gpu`` when the cluster's products are
  known (``spec.gpu_products``), else ``nvidia.com/gpu`` is on the default flavor too;
* one **WorkloadPriorityClass** per tier (``value``, ``description``), beside the tier's
  PriorityClass (the pods' priority; Kueue orders and preempts workloads by the former);
* the root **Cohort** ``fairshare.root`` and one **Cohort** per department (``parentName``: its
  department or the root), one **ClusterQueue** per team and per department with namespaces of its
  own (``<department>.own``, as on Volcano), with ``cohortName``, ``resourceGroups`` covering
  *every* resource of the model (0 where a team has none: under Kueue's default quota check a
  workload asking for a resource its ClusterQueue does not cover is inadmissible, where Volcano
  leaves it unlimited; a DRA device class's count ``<class>.deviceclass.resource.k8s.io/devices``
  is covered under that name, which Kueue's ``resources.deviceClassMappings`` must map the class
  to: ``kube.scheduler_config.kueue_config_warnings``, deploy/kueue/helm-values.yaml), amounts
  from :mod:`.quotas` (guarantee never lent, limit as ceiling, fair allocation as nominal quota:
  the proof is there), ``fairSharing.weight`` = the team's weight, ``namespaceSelector`` = the
  team's namespaces (``fairshare.io/team: <slug>``; a ClusterQueue without one selects no
  namespace, ``clusterqueue_types.go``), and ``preemption`` from the tier
  (:func:`.manifests.preemption`);
* per managed namespace: the backend-neutral objects (Namespace without Volcano's routing
  annotation, ResourceQuota, LimitRange, RoleBindings), a **LocalQueue** ``default`` pointing at
  the team's ClusterQueue — jobs name it with ``kueue.x-k8s.io/queue-name: default``, and a job
  without the label gets it by LocalQueue defaulting (Kueue ``pkg/controller/jobframework/
  defaults.go``, on by default since v0.12) — and a read-only Role ``fairshare-kueue`` on
  LocalQueues and Workloads bound to every member of the team (kueue#1526).

Invariant: deterministic, sorted in dependency order (``render.sort_key``), every object carries
``app.kubernetes.io/managed-by: fairshare`` (the root Cohort and the flavors and priority
classes no team label, like PriorityClasses); for every team, Σ flavors of the rendered
amounts equal the Volcano Queue's guarantee, deserved and capability.
"""

from __future__ import annotations

from collections.abc import Collection

from scheduling.domain.render import sort_key
from scheduling.domain.render.assemble import prepare
from scheduling.domain.render.manifests import Manifest, priority_class
from scheduling.domain.types import ClusterSpec

from .manifests import (
    DEFAULT_FLAVOR,
    GPU_RESOURCE,
    cluster_queue,
    cohort,
    flavor_weights,
    namespace_objects,
    resource_flavors,
    root_cohort,
    workload_priority_class,
)
from .quotas import node_quotas

__all__ = ["DEFAULT_FLAVOR", "GPU_RESOURCE", "covered_resources", "limitations", "render"]


def covered_resources(spec_amounts) -> list[str]:
    """Every resource of the model: cpu and memory, and any resource a queue has an amount of."""
    resources = {"cpu", "memory"}
    for q in spec_amounts.values():
        resources |= q.guarantee.keys() | q.capability.keys() | q.deserved.keys()
    return sorted(resources)


def limitations(spec: ClusterSpec) -> list[str]:
    """What of ``spec`` Kueue cannot carry out: Volcano's ``reclaimable: false`` (a queue whose
    borrowed resources are never taken back) has no ClusterQueue field — Kueue decides
    reclaiming on the *reclaiming* side (``preemption.reclaimWithinCohort``), for every lender
    alike. Fairshare keeps every ClusterQueue's ``reclaimWithinCohort: Any`` (a fair allocation
    must be reclaimable) and says so here, once per sync, naming the teams."""
    teams = sorted(t.slug for t in spec.teams if t.active and not t.reclaimable)
    if not teams:
        return []
    return [
        "Warning: Kueue has no equivalent of Volcano's reclaimable: false (teams "
        f"{', '.join(teams)}): their workloads that borrow beyond the team's fair allocation "
        "may be preempted when a lender reclaims its quota."
    ]


def render(spec: ClusterSpec, *, namespaces_of: Collection[str] | None = None) -> list[Manifest]:
    """Render the desired state as Kueue objects (``namespaces_of`` as in the Volcano
    renderer: a targeted sync's namespaces; cluster-scoped objects are always complete).

    Raises ValueError for what the Volcano renderer refuses (the same checks run).
    """
    ready = prepare(spec)
    resources = covered_resources(ready.amounts)
    flavors_of = flavor_weights(resources, spec.gpu_products)
    nodes = node_quotas(ready.amounts, resources, flavors_of)
    tiers = {tier.name: tier for tier in spec.tiers}
    objects: list[Manifest] = [priority_class(tier) for tier in spec.tiers]
    objects += [workload_priority_class(tier) for tier in spec.tiers]
    objects += resource_flavors(spec.gpu_products)
    objects.append(root_cohort())
    for name, amounts in ready.amounts.items():
        team = ready.teams[amounts.team]
        node = nodes[name]
        if node.cohort:
            objects.append(cohort(team, amounts, node, resources, flavors_of))
        else:
            tier = tiers.get(team.tier) if team.tier else None
            objects.append(cluster_queue(team, amounts, node, resources, flavors_of, tier))
    for ns in ready.managed:
        if namespaces_of is None or ns.team in namespaces_of:
            objects += namespace_objects(ns, ready.teams[ns.team])
    depths = dict(ready.depths)
    for name in depths:
        depths[name] += 1  # under the root Cohort
    return sorted(objects, key=lambda obj: sort_key(obj, depths))
