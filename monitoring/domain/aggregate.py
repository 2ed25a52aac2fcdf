"""Cluster usage aggregation (pure): Kubernetes nodes and pods → capacity, allocation and demand.

Input is what the API server returns (``kubectl get nodes,pods -A -o json`` items, as plain
dicts); output is a frozen :class:`ClusterUsage` whose :meth:`ClusterUsage.to_json_dict` is exactly
the ``collect_usage --print`` format of DESIGN.md § Monitoring. All amounts are exact ``Decimal``
values in base units (cores, bytes, devices). Quantity strings are parsed by an injected
``parse_quantity`` (callers pass ``kubernetes.utils.parse_quantity``); this module imports only the
standard library.

Rules (Kubernetes semantics):

* **Capacity** counts nodes that are Ready (condition ``Ready`` is ``"True"``) and schedulable
  (not ``spec.unschedulable``, i.e. not cordoned). Each counts ``status.allocatable`` for every
  resource it lists (``cpu``, ``memory``, ``pods``, ``nvidia.com/gpu``, hugepages, ...; zeros are
  kept); when allocatable is missing, ``status.capacity`` is used, which is the API's documented
  default. Taints do not exclude a node: GPU nodes are commonly tainted
  ``nvidia.com/gpu:NoSchedule`` and still serve the pods that tolerate it. A node's **flavor** is
  its ``nvidia.com/gpu.product`` label; nodes without the label have no flavor and appear only in
  the total.
* **Effective pod request** per resource (the scheduler's ``PodRequests``)::

      max( Σ regular containers + Σ sidecars,
           max over init containers i of  request(i) + Σ sidecars declared before i )
      + spec.overhead

  A sidecar is an init container with ``restartPolicy: Always``; it keeps running next to the
  regular containers, so it counts in the first sum and under every init container declared after
  it. A container's request for a resource defaults to its limit when only the limit is set (the API
  server's defaulting, applied here so raw manifests count like admitted pods); missing means 0.
  Extended resources (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ``rdma/...``) follow the same
  rule. Pod-level ``spec.resources`` and in-place resize status are not considered.
* **Phase**: ``Succeeded`` and ``Failed`` pods count for nothing. A pod bound to a node
  (``spec.nodeName`` set: Running, Unknown, or Pending while images pull) is *allocated* and is
  attributed to that node's flavor. An unbound pod is *pending* demand.
* Pods on excluded (NotReady or cordoned) nodes still count as **allocated**: they hold the
  resources (and their team's quota) until they terminate, exactly as Kubernetes' ResourceQuota
  counts them. Capacity and allocation can therefore disagree by what sits on excluded nodes; the
  names of excluded nodes are on the result so reports can say why.
* **Teams**: an injected ``{namespace: team_slug}`` mapping names each namespace's team; other
  namespaces belong to ``"unassigned"``. Every mapped namespace appears in the output (with empty
  usage if it has no pods), plus every namespace that has a non-terminal pod.

* **GPU inventory**: nodes with GPUs (the ``nvidia.com/gpu.count`` label, else allocatable
  ``nvidia.com/gpu``; the ``nvidia.com/gpu.product`` label) and the bound pods that request GPUs
  or MIG slices, by node, namespace, name and UID. A node agent may report only these.

Scale: ``aggregate`` reads ``nodes`` once into a name → flavor map (thousands) and then streams
``pods`` in a single pass (hundreds of thousands), keeping only per-namespace sums and the names
of the pods that hold GPUs (bounded by the GPUs and MIG slices), so memory does not grow with the
number of pods. Parsed quantity strings are cached per call: the same ``"500m"``
appears on most pods.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .requests import _parse_resources, pod_request

if TYPE_CHECKING:
    from monitoring.domain.workloads import Workload, WorkloadCollector

__all__ = [
    "GPU_PRODUCT_LABEL",
    "UNASSIGNED",
    "ClusterUsage",
    "GpuNode",
    "GpuPod",
    "NamespaceUsage",
    "NodeCapacity",
    "TeamUsage",
    "aggregate",
    "cached_parser",
    "gpu_node",
    "is_gpu_request",
    "json_number",
    "node_capacity",
    "parse_list_dump",
    "pod_request",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
UNASSIGNED = "unassigned"

ParseQuantity = Callable[[Any], Decimal]
Resources = dict[str, Decimal]

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_CACHE_LIMIT = 65_536


# ---------------------------------------------------------------- result types


@dataclass(frozen=True)
class NodeCapacity:
    """One node as the aggregation sees it: allocatable resources, flavor and eligibility."""

    name: str
    flavor: str | None
    allocatable: Mapping[str, Decimal]
    ready: bool
    unschedulable: bool

    @property
    def schedulable(self) -> bool:
        """True if the node's allocatable counts toward capacity (Ready and not cordoned)."""
        return self.ready and not self.unschedulable


@dataclass(frozen=True)
class NamespaceUsage:
    """Resources held (``allocated``) and wanted (``pending``) by one namespace's live pods."""

    team: str
    allocated: Mapping[str, Decimal]
    pending: Mapping[str, Decimal]


@dataclass(frozen=True)
class TeamUsage:
    """Sum of :class:`NamespaceUsage` over a team's namespaces."""

    allocated: Mapping[str, Decimal]
    pending: Mapping[str, Decimal]


@dataclass(frozen=True)
class GpuNode:
    """A node with GPUs: how many physical GPUs the cluster says it has, and their product.

    ``gpus`` is the ``nvidia.com/gpu.count`` label (GPU feature discovery; it counts physical
    GPUs also when MIG slices are what is allocatable), else the node's allocatable (or
    capacity) ``nvidia.com/gpu``. ``product`` is the ``nvidia.com/gpu.product`` label or None.
    """

    name: str
    gpus: int
    product: str | None


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A pod bound to a node that requests GPUs (``*/gpu`` or MIG ``*/mig-*`` resources).

    ``gpu_uuids``: the physical GPUs it holds through DRA claims, where the ResourceSlices name
    them (``monitoring.domain.dra``): a node agent's sample of such a GPU whose processes name
    no pod is attributed to it (``monitoring.ingest``); empty for device-plugin GPUs, whose
    UUIDs Kubernetes does not publish."""

    node: str
    namespace: str
    name: str
    uid: str
    gpu_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterUsage:
    """Aggregate of one cluster observation.

    ``capacity`` and ``flavors`` count schedulable nodes only; ``flavors`` maps a GPU product to
    the allocatable of its schedulable nodes. ``flavor_allocated`` is ``{team: {product:
    {resource: amount}}}``: everything a team's bound pods hold on nodes of each flavor (GPUs and
    the CPU/memory that came with them), for chargeback by flavor; pods on nodes without a flavor,
    or on nodes missing from the node list, are not in it. ``pod_counts`` has keys
    ``allocated``, ``pending`` and ``finished``. ``excluded_nodes`` lists, sorted, the nodes left
    out of capacity. ``namespace_flavors`` is the same as ``flavor_allocated`` keyed by namespace
    instead of team (``{namespace: {product: {resource: amount}}}``).
    """

    capacity: Mapping[str, Decimal]
    flavors: Mapping[str, Mapping[str, Decimal]]
    namespaces: Mapping[str, NamespaceUsage]
    teams: Mapping[str, TeamUsage]
    flavor_allocated: Mapping[str, Mapping[str, Mapping[str, Decimal]]]
    excluded_nodes: tuple[str, ...]
    pod_counts: Mapping[str, int]
    namespace_flavors: Mapping[str, Mapping[str, Mapping[str, Decimal]]] = field(
        default_factory=dict
    )
    # What GPU samples are checked against (monitoring.ingest.ingest_gpu_batch): every node
    # that has GPUs, Ready or not (its pods still hold them), and every bound pod asking for GPUs.
    gpu_nodes: Mapping[str, GpuNode] = field(default_factory=dict)
    gpu_pods: tuple[GpuPod, ...] = ()
    # With a WorkloadCollector: one record per gang / owner group (monitoring.domain.workloads).
    workloads: tuple[Workload, ...] = ()
    # What the collection could not see (e.g. "Volcano's PodGroup CRD is not installed").
    notes: tuple[str, ...] = ()
    # With the Kueue backend: what Kueue reports per managed ClusterQueue
    # (monitoring.domain.kueue_status.queue_statuses).
    kueue_queues: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_json_dict(self, *, include_teams: bool = False) -> dict[str, Any]:
        """Render the ``collect_usage --print`` document (sorted keys, :func:`json_number` values).

        With ``include_teams``, also add ``"teams": {slug: {"allocated", "pending"}}`` and
        ``"flavor_allocated": {slug: {product: {res: n}}}``; without it the document has exactly
        the three keys of DESIGN.md (``capacity``, ``flavors``, ``namespaces``).
        """
        doc: dict[str, Any] = {
            "capacity": _render(self.capacity),
            "flavors": {name: _render(self.flavors[name]) for name in sorted(self.flavors)},
            "namespaces": {
                name: {
                    "team": usage.team,
                    "allocated": _render(usage.allocated),
                    "pending": _render(usage.pending),
                }
                for name, usage in sorted(self.namespaces.items())
            },
        }
        if include_teams:
            doc["teams"] = {
                slug: {"allocated": _render(usage.allocated), "pending": _render(usage.pending)}
                for slug, usage in sorted(self.teams.items())
            }
            doc["flavor_allocated"] = {
                slug: {flavor: _render(res) for flavor, res in sorted(by_flavor.items())}
                for slug, by_flavor in sorted(self.flavor_allocated.items())
            }
        return doc


def json_number(amount: Decimal) -> int | float:
    """Render a base-unit amount as a JSON number: ``int`` when integral, else ``float``.

    Integral amounts (devices, bytes, whole cores) are exact at any size. Fractional amounts are
    CPU milli-cores in practice (``Decimal("2.5")`` → ``2.5``); ``float`` keeps them JSON numbers,
    as the design's "numbers in base units" asks, and its shortest repr prints the same digits for
    up to 15 significant digits. Exact values stay available as Decimals on :class:`ClusterUsage`.
    """
    if amount == amount.to_integral_value():
        return int(amount)
    return float(amount)


def _render(resources: Mapping[str, Decimal]) -> dict[str, int | float]:
    return {name: json_number(resources[name]) for name in sorted(resources)}


# ---------------------------------------------------------------- quantities


def cached_parser(parse_quantity: ParseQuantity) -> ParseQuantity:
    """Wrap ``parse_quantity`` with a memo keyed by the raw quantity (``"500m"``, ``"8"``, ``8``).

    The cache is private to the returned function and is cleared when it reaches 65,536 entries,
    so a hostile spread of distinct strings cannot grow memory without bound. Parsing errors
    (``ValueError``) propagate and are not cached.
    """
    cache: dict[Hashable, Decimal] = {}

    def parse(quantity: Any) -> Decimal:
        try:
            return cache[quantity]
        except KeyError:
            pass
        value = parse_quantity(quantity)
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[quantity] = value
        return value

    return parse


def _add_into(total: Resources, amounts: Mapping[str, Decimal]) -> None:
    for name, amount in amounts.items():
        total[name] = total[name] + amount if name in total else amount


def node_capacity(node: Mapping[str, Any], parse_quantity: ParseQuantity) -> NodeCapacity:
    """Read one Node object: name, flavor label, allocatable, Ready and cordon state.

    ``ready`` is True only when a ``Ready`` condition with status ``"True"`` exists: a node that has
    never reported (no conditions) or whose status is ``"Unknown"`` is not Ready. ``allocatable``
    falls back to ``status.capacity`` when absent.
    """
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = metadata.get("labels") or {}
    ready = any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or ()
    )
    raw = status.get("allocatable")
    if raw is None:
        raw = status.get("capacity")
    return NodeCapacity(
        name=metadata.get("name", ""),
        flavor=labels.get(GPU_PRODUCT_LABEL) or None,
        allocatable=_parse_resources(raw, parse_quantity),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
    )


GPU_COUNT_LABEL = "nvidia.com/gpu.count"
_GPU = "nvidia.com/gpu"


def is_gpu_request(resource: str) -> bool:
    """True for whole GPUs (``*/gpu``) and MIG slices (``*/mig-*``)."""
    return resource.endswith("/gpu") or "/mig-" in resource


def gpu_node(node: Mapping[str, Any], parse_quantity: ParseQuantity) -> GpuNode | None:
    """The node's GPUs (see :class:`GpuNode`), or None when the cluster counts none."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = node.get("status") or {}
    count = 0
    label = labels.get(GPU_COUNT_LABEL)
    if isinstance(label, str) and label.isascii() and label.isdigit():
        count = int(label)
    else:
        for key in ("allocatable", "capacity"):
            raw = (status.get(key) or {}).get(_GPU)
            if raw is not None:
                amount = parse_quantity(raw)
                count = int(amount) if amount > 0 else 0
                break
    if count <= 0:
        return None
    return GpuNode(
        name=metadata.get("name", ""), gpus=count, product=labels.get(GPU_PRODUCT_LABEL) or None
    )


def parse_list_dump(doc: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``kubectl get nodes,pods -A -o json`` document into ``(nodes, pods)``.

    Accepts a ``List`` whose items carry their own ``kind`` (what kubectl prints), and also a plain
    ``NodeList`` or ``PodList`` (what the API returns; its items carry no ``kind``). Items of other
    kinds (Namespaces, Events, ...) are ignored. Order is preserved. Raises ValueError for any other
    document.
    """
    kind = doc.get("kind")
    items = doc.get("items")
    if not isinstance(items, list):
        raise ValueError(f"expected a Kubernetes List with items, got kind={kind!r}")
    if kind == "NodeList":
        return list(items), []
    if kind == "PodList":
        return [], list(items)
    if kind != "List":
        raise ValueError(f"expected kind List, NodeList or PodList, got {kind!r}")
    nodes = [item for item in items if item.get("kind") == "Node"]
    pods = [item for item in items if item.get("kind") == "Pod"]
    return nodes, pods


# ---------------------------------------------------------------- aggregation


@dataclass
class _Nodes:
    """Step 1's result: schedulable capacity (whole and per flavor), each node's flavor, the
    nodes left out, and the GPU nodes of the inventory."""

    capacity: Resources = field(default_factory=dict)
    flavors: dict[str, Resources] = field(default_factory=dict)
    node_flavor: dict[str, str | None] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)
    gpu_nodes: dict[str, GpuNode] = field(default_factory=dict)


def _read_nodes(nodes: Iterable[Mapping[str, Any]], parse) -> _Nodes:
    """Step 1 of :func:`aggregate`: read every node once."""
    seen = _Nodes()
    capacity, flavors, node_flavor = seen.capacity, seen.flavors, seen.node_flavor
    excluded, gpu_nodes = seen.excluded, seen.gpu_nodes
    for node in nodes:
        info = node_capacity(node, parse)
        node_flavor[info.name] = info.flavor
        gpus = gpu_node(node, parse)
        if gpus is not None:
            gpu_nodes[gpus.name] = gpus
        if not info.schedulable:
            excluded.append(info.name)
            continue
        _add_into(capacity, info.allocatable)
        if info.flavor is not None:
            _add_into(flavors.setdefault(info.flavor, {}), info.allocatable)
    return seen


@dataclass
class _Pods:
    """Step 2's result: per namespace what bound pods hold and what waits, bound requests per
    namespace and node flavor, pod counts, and the GPU pods of the inventory."""

    allocated: dict[str, Resources]
    pending: dict[str, Resources]
    by_flavor: dict[tuple[str, str], Resources] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: {"allocated": 0, "pending": 0, "finished": 0}
    )
    gpu_pods: list[GpuPod] = field(default_factory=list)


def _read_pods(
    pods: Iterable[Mapping[str, Any]],
    parse,
    namespace_teams: Mapping[str, str],
    node_flavor: Mapping[str, str | None],
    workloads: WorkloadCollector | None,
) -> _Pods:
    """Step 2 of :func:`aggregate`: stream the pods once (and feed ``workloads``)."""
    seen = _Pods({name: {} for name in namespace_teams}, {name: {} for name in namespace_teams})
    allocated, pending, by_flavor = seen.allocated, seen.pending, seen.by_flavor
    counts, gpu_pods = seen.counts, seen.gpu_pods
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in _FINISHED_PHASES:
            counts["finished"] += 1
            continue
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        request = pod_request(pod, parse)
        node_name = (pod.get("spec") or {}).get("nodeName")
        in_gang = False
        if workloads is not None:
            in_gang = workloads.add_pod(pod, namespace, request, bool(node_name))
        if node_name:
            counts["allocated"] += 1
            if any(amount > 0 and is_gpu_request(name) for name, amount in request.items()):
                # Interned: thousands of pods share a node and a namespace name.
                gpu_pods.append(
                    GpuPod(
                        node=sys.intern(node_name),
                        namespace=sys.intern(namespace),
                        name=metadata.get("name") or "",
                        uid=metadata.get("uid") or "",
                    )
                )
            if namespace not in allocated:
                allocated[namespace] = {}
                pending[namespace] = {}
            _add_into(allocated[namespace], request)
            flavor = node_flavor.get(node_name)
            if flavor is not None:
                _add_into(by_flavor.setdefault((namespace, flavor), {}), request)
        else:
            counts["pending"] += 1
            if namespace not in pending:
                allocated[namespace] = {}
                pending[namespace] = {}
            if not in_gang:
                _add_into(pending[namespace], request)
    return seen


def aggregate(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    namespace_teams: Mapping[str, str],
    *,
    parse_quantity: ParseQuantity,
    workloads: WorkloadCollector | None = None,
) -> ClusterUsage:
    """Aggregate one observation of the cluster into a :class:`ClusterUsage`.

    Steps:
    1. Read every node (:func:`node_capacity`): remember its flavor by name; add the allocatable of
       schedulable nodes to ``capacity`` and to its flavor; list the others as excluded.
    2. Stream the pods once. Skip Succeeded/Failed; compute :func:`pod_request`; add it to the
       namespace's ``allocated`` if ``spec.nodeName`` is set (and to the sum per namespace and
       node flavor), else to its ``pending``.
    3. Name each namespace's team (``namespace_teams``, else ``"unassigned"``); sum namespaces into
       teams and the per-namespace flavor sums into ``flavor_allocated``.
    4. With ``workloads`` (fed PodGroups, Jobs and Events already), every live pod also goes to
       its workload; an unbound pod of a waiting gang is not pending on its own: the gang's whole
       demand is added to its namespace's ``pending`` instead (gang demand, see
       ``monitoring.domain.workloads``).
    5. Along the way, keep the GPU inventory that node agents' samples are checked against: every
       node with GPUs (:func:`gpu_node`) and every bound pod requesting GPUs (``gpu_pods``).

    Invariants: deterministic for the same input (pod order does not matter); Σ over namespaces
    of ``allocated`` equals Σ over teams; no resource is dropped (a pod asking for something no
    node has still shows it). ``nodes`` is consumed before ``pods`` is touched, so both may be
    generators.
    """
    parse = cached_parser(parse_quantity)
    cluster = _read_nodes(nodes, parse)
    seen = _read_pods(pods, parse, namespace_teams, cluster.node_flavor, workloads)
    allocated, pending = seen.allocated, seen.pending
    records: tuple[Workload, ...] = ()
    if workloads is not None:
        found, gang_pending = workloads.finish(namespace_teams, unassigned=UNASSIGNED)
        records = tuple(found)
        for namespace, demand in gang_pending.items():
            if namespace not in pending:
                allocated[namespace] = {}
                pending[namespace] = {}
            _add_into(pending[namespace], demand)

    namespaces: dict[str, NamespaceUsage] = {}
    team_allocated: dict[str, Resources] = {}
    team_pending: dict[str, Resources] = {}
    for name in sorted(allocated):
        team = namespace_teams.get(name, UNASSIGNED)
        namespaces[name] = NamespaceUsage(team, allocated[name], pending[name])
        _add_into(team_allocated.setdefault(team, {}), allocated[name])
        _add_into(team_pending.setdefault(team, {}), pending[name])
    teams = {
        slug: TeamUsage(team_allocated[slug], team_pending[slug]) for slug in sorted(team_allocated)
    }

    flavor_allocated: dict[str, dict[str, Resources]] = {}
    namespace_flavors: dict[str, dict[str, Resources]] = {}
    for (namespace, flavor), request in sorted(seen.by_flavor.items()):
        team = namespace_teams.get(namespace, UNASSIGNED)
        _add_into(flavor_allocated.setdefault(team, {}).setdefault(flavor, {}), request)
        namespace_flavors.setdefault(namespace, {})[flavor] = request

    return ClusterUsage(
        capacity=cluster.capacity,
        flavors=cluster.flavors,
        namespaces=namespaces,
        teams=teams,
        flavor_allocated=flavor_allocated,
        excluded_nodes=tuple(sorted(cluster.excluded)),
        pod_counts=seen.counts,
        namespace_flavors=namespace_flavors,
        gpu_nodes=dict(sorted(cluster.gpu_nodes.items())),
        gpu_pods=tuple(sorted(seen.gpu_pods, key=lambda p: (p.node, p.namespace, p.name, p.uid))),
        workloads=records,
        notes=tuple(workloads.notes) if workloads is not None else (),
    )
