"""GPUs requested through Dynamic Resource Allocation (pure): claims → usage and demand.

Input is what ``kubectl get nodes,pods,resourceclaims,resourceslices,deviceclasses -A -o json``
prints (``resource.k8s.io/v1`` ResourceClaims, ResourceSlices, DeviceClasses and
ResourceClaimTemplates next to the pods, as plain dicts). Output is, per namespace, what its
counted claims add to the ``allocated`` and ``pending`` maps of
:class:`monitoring.domain.aggregate.ClusterUsage`: ``nvidia.com/gpu`` in GPU-equivalents
(exact ``Decimal`` fractions: a 1g.10gb MIG device is ``0.125``) and one
``<class>.deviceclass.resource.k8s.io/devices`` device count per device class. The rules are
those of ``dra-rules.md`` (issue 34); sources are kubernetes/kubernetes master unless named
otherwise, NVIDIA's driver is NVIDIA/k8s-dra-driver-gpu v25.12.0.

* **Rule 1 — which claims count, once, and where.** A claim counts for its own namespace, once
  however many pods share it. *Allocated*: ``status.allocation`` is set and ``status.reservedFor``
  names (``resource: pods``, empty ``apiGroup``) the uid of a pod in the input that is not
  Succeeded/Failed. *Pending*: no allocation, and a Pending pod without ``spec.nodeName``
  references it by ``spec.resourceClaims[].resourceClaimName`` or, for a claim generated from a
  template, by ``status.resourceClaimStatuses[].resourceClaimName`` (generated names are resolved
  through the pod status, never guessed). Anything else counts nothing: a claim reserved only by
  finished or vanished pods is one the claim controller is about to release
  (pkg/controller/resourceclaim/controller.go — ``syncClaim``, ``isPodDone``; "currently allowed
  to use the claim": staging/src/k8s.io/api/resource/v1/types.go —
  ``ResourceClaimStatus.ReservedFor``). ResourceQuota would still charge such a claim; Fairshare
  reports usage and demand, not quota charge.
* **Rule 2 — device counts per class**, exactly as the ResourceQuota claim evaluator charges
  them, from ``claim.spec`` (pkg/quota/v1/evaluator/core/resource_claims.go —
  ``claimEvaluator.Usage``; its test ``TestResourceClaimEvaluatorUsage``): ``exactly``
  ExactCount → ``count`` (default 1); ``exactly`` All → 32 (``AllocationResultsMaxSize``,
  types.go); ``firstAvailable`` → every class named, each with its largest subrequest; unknown
  modes or request kinds → 0. Admin-access and extended-resource claims are charged like any
  other (test case ``admin``; KEP-5018 § ResourceQuota; ``addExtendedResourceQuota``).
* **Rule 3 — ``nvidia.com/gpu`` in GPU-equivalents.** Pods' own ``nvidia.com/gpu`` requests are
  counted by the aggregation as before. An allocated claim adds, per allocation result of driver
  ``gpu.nvidia.com``, the device found in the ResourceSlices by (driver, pool, device) — the
  pool's highest ``generation`` only: attribute ``type`` ``gpu`` → 1; ``mig`` → its
  ``memorySlice<N>`` capacities ÷ 8 (cmd/gpu-kubelet-plugin/deviceinfo.go —
  ``MigDeviceInfo.GetDevice``; 8 memory slices on A100/H100/H200/B200, NVIDIA MIG User Guide
  "Supported MIG Profiles"); a result with ``adminAccess: true`` → 0 (it does not hold the device:
  pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go —
  ``foreachAllocatedDevice``). A claim annotated ``resource.kubernetes.io/extended-resource-claim:
  "true"`` adds 0: its GPUs are the owning pod's ``nvidia.com/gpu`` request, already counted
  (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go; resource_claims.go —
  ``getVerifiedPodUsage``). A pending claim adds ``count`` whole GPUs per ``exactly`` ExactCount
  request of class ``gpu.nvidia.com`` (pending MIG, All and firstAvailable requests: nothing, the
  device is not chosen yet).
* **Rule 7 — capacity of a device class** (with the dump's nodes): each DeviceClass's
  ``<class>.deviceclass.resource.k8s.io/devices`` capacity is the number of devices its CEL
  selectors select among the slices of schedulable nodes (:mod:`.dra_classes`); a class whose
  selectors cannot be evaluated has none (a note says so). A device-class quota's guarantee is
  checked against it, as any guarantee against its resource's capacity.
* **Per DeviceClass** (``FAIRSHARE_DRA_GPU_EQUIVALENTS``, :func:`parse_gpu_equivalents`): a
  configured class replaces Rule 3b/3d for its requests' results: a fixed fraction per device,
  or memory slices ÷ N (docs/dra.md).
* **Rule 4** — cpu, memory and the pods' own requests are untouched; a dump without
  ``resource.k8s.io`` objects gives exactly the aggregation's output.
* **Rule 5 — capacity from ResourceSlices** (with the dump's nodes, :func:`add_dra_usage`). A
  node running NVIDIA's DRA driver usually advertises no ``nvidia.com/gpu`` allocatable (the
  device plugin is off), so its GPUs are read from the slices of driver ``gpu.nvidia.com`` (the
  pool's highest generation, :func:`slice_devices`), each slice's ``spec.nodeName`` naming the
  node (one pool per node: cmd/gpu-kubelet-plugin/driver.go — ``publishResources``). A node's
  DRA GPUs are its distinct *physical* GPUs (:func:`physical_gpu`): a ``type: gpu`` device is
  its own GPU (its ``uuid`` attribute, else its name); a ``type: mig`` device belongs to its
  ``parentUUID`` (cmd/gpu-kubelet-plugin/mig.go — ``CommonAttributesMig``), else to the
  ``gpu-<minor>`` its canonical name starts with (``MigSpecTuple.ToCanonicalName``), else it is
  counted as a GPU of its own, with a note. In static-MIG mode the MIG-enabled parent is not
  published at all (cmd/gpu-kubelet-plugin/nvlib.go — ``enumerateAllPossibleDevices``), hence
  the parent identity: seven 1g.10gb devices of one GPU are 1 GPU of capacity, not 7. These
  GPUs count like device-plugin GPUs: into ``capacity["nvidia.com/gpu"]`` and ``flavors[product]``
  for schedulable (Ready, not cordoned) nodes only, product = the node's ``nvidia.com/gpu.product``
  label (none: total only). Never twice: a node that also advertises allocatable
  ``nvidia.com/gpu`` counts ``max(allocatable, DRA GPUs)`` (a note names it). Slices of nodes
  not in the dump, or without ``spec.nodeName``, count nothing (one note). The GPU inventory
  (``gpu_nodes``, what node agents' NVML samples are checked against) gets every node with DRA
  GPUs, Ready or not: its ``nvidia.com/gpu.count`` label when set (GPU feature discovery counts
  physical GPUs), else ``max(allocatable, DRA GPUs)``; its ``gpu_pods`` get the bound live pods
  that reserve an allocated claim holding GPUs, so a node agent's samples of them are accepted.
* **Rule 6 — flavor of DRA usage.** An allocated claim's GPU-equivalents (Rule 3b) go to the
  flavor of the node each device is published on (its slice's ``spec.nodeName`` → that node's
  product label): ``namespace_flavors[ns][product]`` and ``flavor_allocated[team][product]``,
  as bound pods' requests do (monitoring.collection.store_usage then writes one UsageSample row
  per flavor, and a RateCard per product prices it). Devices on nodes without the label or
  missing from the dump have no flavor (the flavor ``""`` row, as pods there); pending demand
  has no flavor (the device is not chosen).

Devices of other drivers, devices missing from the slices and MIG types other than the above
add 0 GPU-equivalents; each missing device is named in a note. DeviceClasses and
ResourceClaimTemplates are recognised as DRA objects but not needed for counting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from quotas.domain.quantity import DEVICE_CLASS_SUFFIX

from .aggregate import (
    GPU_COUNT_LABEL,
    UNASSIGNED,
    ClusterUsage,
    GpuNode,
    GpuPod,
    NamespaceUsage,
    NodeCapacity,
    TeamUsage,
    json_number,
    node_capacity,
)
from .dra_classes import class_devices_per_node, newest_slices

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "DraObjects",
    "DraUsage",
    "GpuEquivalentRule",
    "SliceDevice",
    "add_dra_usage",
    "claim_state",
    "class_devices",
    "class_resource",
    "dra_usage",
    "gpu_equivalent",
    "node_gpus",
    "parse_gpu_equivalents",
    "physical_gpu",
    "slice_devices",
    "split_dra_items",
]

GPU = "nvidia.com/gpu"
NVIDIA_DRIVER = "gpu.nvidia.com"
NVIDIA_GPU_CLASS = "gpu.nvidia.com"
# staging/src/k8s.io/api/resource/v1/types.go — AllocationResultsMaxSize.
ALLOCATION_RESULTS_MAX_SIZE = 32
# Memory slices of one A100/H100/H200/B200 GPU (NVIDIA MIG User Guide, "Fraction of Memory").
MIG_MEMORY_SLICES = 8
# types.go — ExtendedResourceClaimAnnotation.
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"

_DRA_API = "resource.k8s.io/"
_FINISHED = frozenset({"Succeeded", "Failed"})
_MEMORY_SLICE = re.compile(r"(?:[^/]+/)?memorySlice\d+")
_MIG_NAME = re.compile(r"(gpu-\d+)-mig-")

Resources = dict[str, Decimal]
DeviceKey = tuple[str, str, str]


# ---------------------------------------------------------------- input


@dataclass(frozen=True)
class DraObjects:
    """The ``resource.k8s.io`` items of a dump, by kind."""

    claims: tuple[Mapping[str, Any], ...] = ()
    slices: tuple[Mapping[str, Any], ...] = ()
    classes: tuple[Mapping[str, Any], ...] = ()
    templates: tuple[Mapping[str, Any], ...] = ()


def split_dra_items(doc: Mapping[str, Any]) -> DraObjects | None:
    """The DRA objects of a ``kubectl get ... -o json`` List, or None when it holds none.

    Also accepts a bare ``ResourceClaimList`` / ``ResourceSliceList`` (items carry no kind).
    """
    kind = doc.get("kind")
    items = doc.get("items") or ()
    found: dict[str, list[Mapping[str, Any]]] = {
        "ResourceClaim": [],
        "ResourceSlice": [],
        "DeviceClass": [],
        "ResourceClaimTemplate": [],
    }
    list_kind = kind[: -len("List")] if isinstance(kind, str) and kind.endswith("List") else None
    if list_kind in found and str(doc.get("apiVersion") or "").startswith(_DRA_API):
        found[list_kind] = [item for item in items if isinstance(item, Mapping)]
    elif kind == "List":
        for item in items:
            if not isinstance(item, Mapping):
                continue
            if item.get("kind") in found and str(item.get("apiVersion") or "").startswith(_DRA_API):
                found[item["kind"]].append(item)
    if not any(found.values()):
        return None
    return DraObjects(
        claims=tuple(found["ResourceClaim"]),
        slices=tuple(found["ResourceSlice"]),
        classes=tuple(found["DeviceClass"]),
        templates=tuple(found["ResourceClaimTemplate"]),
    )


@dataclass(frozen=True)
class SliceDevice:
    """One published device: its key, ``type`` attribute and number of memory slices; the node
    its slice names (``spec.nodeName``, None for network-attached pools) and its ``uuid`` /
    ``parentUUID`` attributes (for :func:`physical_gpu`)."""

    driver: str
    pool: str
    name: str
    type: str | None
    memory_slices: int
    node: str | None = None
    uuid: str | None = None
    parent_uuid: str | None = None


def _attribute(attributes: Mapping[str, Any], name: str, driver: str) -> Any:
    """A device attribute's value; names may be qualified with the driver's domain."""
    raw = attributes.get(name)
    if raw is None:
        raw = attributes.get(f"{driver}/{name}")
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return raw[kind]
    return None


def slice_devices(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, SliceDevice]:
    """Every device of the ResourceSlices, keyed by (driver, pool, device name).

    A pool (driver, ``spec.pool.name``) may be spread over several slices and, while its driver
    republishes it, over two generations: only slices of the pool's highest
    ``spec.pool.generation`` are read (types.go — ``ResourcePool.Generation``: "consumers
    should only use the highest generation").
    """
    devices: dict[DeviceKey, SliceDevice] = {}
    for item in newest_slices(slices):
        spec = item.get("spec") or {}
        pool = spec.get("pool") or {}
        driver, pool_name = str(spec.get("driver") or ""), str(pool.get("name") or "")
        for device in spec.get("devices") or ():
            name = str(device.get("name") or "")
            attributes = device.get("attributes") or {}
            kind = _attribute(attributes, "type", driver)
            uuid = _attribute(attributes, "uuid", driver)
            parent = _attribute(attributes, "parentUUID", driver)
            capacity = device.get("capacity") or {}
            devices[(driver, pool_name, name)] = SliceDevice(
                driver=driver,
                pool=pool_name,
                name=name,
                type=kind if isinstance(kind, str) else None,
                memory_slices=sum(1 for cap in capacity if _MEMORY_SLICE.fullmatch(str(cap))),
                node=str(spec["nodeName"]) if spec.get("nodeName") else None,
                uuid=uuid if isinstance(uuid, str) and uuid else None,
                parent_uuid=parent if isinstance(parent, str) and parent else None,
            )
    return devices


def physical_gpu(device: SliceDevice) -> tuple[str | None, bool]:
    """Rule 5: the identity of the physical GPU ``device`` is or belongs to, and whether that
    identity is only the device's own name for a MIG device (a guess, worth a note).

    ``type: gpu`` → its ``uuid``, else its name; ``type: mig`` → its ``parentUUID``, else the
    ``gpu-<minor>`` its canonical name starts with (cmd/gpu-kubelet-plugin/mig.go —
    ``MigSpecTuple.ToCanonicalName``: ``gpu-<minor>-mig-<profile>-<id>-<start>``, and a whole
    GPU is named ``gpu-<minor>``), else its own name. Other types: None (not a GPU).
    """
    if device.type == "gpu":
        return (device.uuid or device.name), False
    if device.type == "mig":
        if device.parent_uuid:
            return device.parent_uuid, False
        match = _MIG_NAME.match(device.name)
        if match:
            return match.group(1), False
        return device.name, True
    return None, False


def node_gpus(
    devices: Mapping[DeviceKey, SliceDevice], notes: list[str] | None = None
) -> dict[str, int]:
    """Rule 5: distinct physical GPUs per node among the ``gpu.nvidia.com`` devices (sorted by
    node). Devices of slices without a node are left out; a MIG device with no parent to go by
    counts as a GPU of its own and is named in ``notes``."""
    identities: dict[str, set[str]] = {}
    unattached: set[str] = set()
    guessed: list[str] = []
    for (driver, pool, name), device in sorted(devices.items()):
        if driver != NVIDIA_DRIVER:
            continue
        identity, guess = physical_gpu(device)
        if identity is None:
            continue
        if device.node is None:
            unattached.add(pool)
            continue
        if guess:
            guessed.append(f"{pool}/{name}")
        identities.setdefault(device.node, set()).add(identity)
    if notes is not None:
        if unattached:
            notes.append(
                "DRA: ResourceSlices of pools " + ", ".join(sorted(unattached)) + " name no node "
                "(spec.nodeName): their GPUs are not counted as capacity"
            )
        if guessed:
            notes.append(
                "DRA: MIG devices " + ", ".join(guessed) + " name no parentUUID: each counted "
                "as a physical GPU of its own"
            )
    return {node: len(ids) for node, ids in sorted(identities.items())}


# ---------------------------------------------------------------- rules


def gpu_equivalent(device: SliceDevice) -> Decimal:
    """Rule 3b: a whole GPU is 1; a MIG device holds its memory slices out of 8; else 0."""
    if device.type == "gpu":
        return Decimal(1)
    if device.type == "mig":
        return Decimal(device.memory_slices) / Decimal(MIG_MEMORY_SLICES)
    return Decimal(0)


@dataclass(frozen=True)
class GpuEquivalentRule:
    """How a device of one DeviceClass counts in GPU-equivalents, configured per class
    (``FAIRSHARE_DRA_GPU_EQUIVALENTS``, :func:`parse_gpu_equivalents`), in place of Rule 3b:
    ``per_device`` — a fixed fraction of a GPU per device (a shared or time-sliced device, a
    device of another driver); ``slices_of`` — the device's ``memorySlice<N>`` capacities ÷
    this number (a MIG class of a GPU with other than 8 memory slices: the A30 has 4)."""

    per_device: Decimal | None = None
    slices_of: int | None = None

    def amount(self, device: SliceDevice | None) -> Decimal | None:
        """GPU-equivalents of one allocated ``device``; None when the rule needs the device's
        memory slices and the device is not in the slices."""
        if self.per_device is not None:
            return self.per_device
        if device is None or not self.slices_of:
            return None
        return Decimal(device.memory_slices) / Decimal(self.slices_of)


_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SLICES = re.compile(r"^slices/([0-9]+)$")


def parse_gpu_equivalents(text: str) -> dict[str, GpuEquivalentRule]:
    """Read ``CLASS=FRACTION`` / ``CLASS=slices/N`` entries, comma-separated (empty: none).

    ``CLASS`` is a DeviceClass name (a DNS subdomain, metadata.name); ``FRACTION`` a decimal
    with 0 < FRACTION <= 1 (GPU-equivalents per device); ``N`` a whole number >= 1 (memory
    slices of the whole GPU). Raises ValueError naming the entry and the rule it breaks.
    """
    rules: dict[str, GpuEquivalentRule] = {}
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, value = (part.strip() for part in entry.partition("="))
        if not sep or not name or not value:
            raise ValueError(f"entry {entry!r}: must be CLASS=FRACTION or CLASS=slices/N")
        if len(name) > 253 or not _CLASS_NAME.match(name):
            raise ValueError(
                f"entry {entry!r}: {name!r} is not a DeviceClass name (a DNS subdomain: "
                "lower-case letters, digits, '-' and '.', at most 253 characters)"
            )
        if name in rules:
            raise ValueError(f"entry {entry!r}: DeviceClass {name} is configured twice")
        slices = _SLICES.match(value)
        if slices:
            n = int(slices.group(1))
            if n < 1:
                raise ValueError(f"entry {entry!r}: slices/N needs a whole number N >= 1")
            rules[name] = GpuEquivalentRule(slices_of=n)
            continue
        try:
            fraction = Decimal(value)
        except ArithmeticError:
            fraction = None
        if fraction is None or not fraction.is_finite() or not 0 < fraction <= 1:
            raise ValueError(
                f"entry {entry!r}: {value!r} must be a fraction of a GPU with 0 < FRACTION "
                "<= 1, or slices/N"
            )
        rules[name] = GpuEquivalentRule(per_device=fraction)
    return rules


def _request_classes(claim: Mapping[str, Any]) -> dict[str, str]:
    """The device class of each request name a claim's allocation results can name:
    ``<request>`` for ``exactly``, ``<request>/<subrequest>`` for ``firstAvailable``
    (types.go — ``DeviceRequestAllocationResult.Request``)."""
    classes: dict[str, str] = {}
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        name = str(request.get("name") or "")
        exactly = request.get("exactly")
        if exactly:
            classes[name] = str(exactly.get("deviceClassName") or "")
        for sub in request.get("firstAvailable") or ():
            classes[f"{name}/{sub.get('name')}"] = str(sub.get("deviceClassName") or "")
    return classes


def class_resource(device_class: str) -> str:
    """The ResourceQuota name of a device class's device count."""
    return device_class + DEVICE_CLASS_SUFFIX


def _devices(request: Mapping[str, Any]) -> int:
    """Devices one ``exactly`` request or ``firstAvailable`` subrequest asks for (Rule 2)."""
    mode = request.get("allocationMode") or "ExactCount"
    if mode == "ExactCount":
        count = request.get("count")
        return 1 if count is None else int(count)
    if mode == "All":
        return ALLOCATION_RESULTS_MAX_SIZE
    return 0  # an unknown mode (after a downgrade) is charged nothing


def class_devices(claim: Mapping[str, Any]) -> dict[str, int]:
    """Rule 2: device count per device class, from ``claim.spec``, as ResourceQuota charges.

    Steps (resource_claims.go — ``claimEvaluator.Usage``):
    1. ``exactly``: add :func:`_devices` to its ``deviceClassName`` (also for admin access).
    2. ``firstAvailable``: per class named among the subrequests, take the largest; add each.
    3. Anything else: nothing. A class named with 0 devices is still listed (with 0).
    """
    counts: dict[str, int] = {}
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    for request in requests:
        exactly = request.get("exactly")
        alternatives = request.get("firstAvailable")
        if exactly:
            name = str(exactly.get("deviceClassName") or "")
            counts[name] = counts.get(name, 0) + _devices(exactly)
        elif alternatives:
            largest: dict[str, int] = {}
            for sub in alternatives:
                name = str(sub.get("deviceClassName") or "")
                largest[name] = max(largest.get(name, 0), _devices(sub))
            for name, n in largest.items():
                counts[name] = counts.get(name, 0) + n
    return counts


def _is_extended_resource_claim(claim: Mapping[str, Any]) -> bool:
    """Rule 3c: the scheduler's claim for a pod's ``nvidia.com/gpu`` request
    (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return annotations.get(EXTENDED_RESOURCE_CLAIM) == "true"


def _pending_gpus(
    claim: Mapping[str, Any], rules: Mapping[str, GpuEquivalentRule] | None = None
) -> Decimal:
    """Rule 3d: whole GPUs of a pending claim's ``exactly`` ExactCount ``gpu.nvidia.com``
    requests (MIG, All and firstAvailable: the device is not chosen yet, nothing). Requests
    with ``adminAccess`` are 0, as their allocated results are (Rule 3b): admin access never
    holds a device, so it is no demand for one either (pkg/scheduler/framework/plugins/
    dynamicresources/allocateddevices.go — ``foreachAllocatedDevice``; a deliberate reading of
    Rule 3d, which names no admin case)."""
    total = Decimal(0)
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        exactly = request.get("exactly")
        if (
            not exactly
            or (exactly.get("allocationMode") or "ExactCount") != "ExactCount"
            or exactly.get("adminAccess")
        ):
            continue
        rule = (rules or {}).get(str(exactly.get("deviceClassName") or ""))
        if rule is not None:
            # A configured class: its fixed fraction per device (a slices/N rule needs the
            # device, not chosen yet: nothing).
            if rule.per_device is not None:
                total += _devices(exactly) * rule.per_device
        elif exactly.get("deviceClassName") == NVIDIA_GPU_CLASS:
            total += _devices(exactly)
    return total


def _allocated_gpus(
    claim: Mapping[str, Any],
    devices: Mapping[DeviceKey, SliceDevice],
    notes: list[str],
    by_node: dict[str, Decimal] | None = None,
    rules: Mapping[str, GpuEquivalentRule] | None = None,
) -> Decimal:
    """Rule 3b: GPU-equivalents of the devices actually allocated to the claim; with
    ``by_node``, also added there per node the devices are published on (Rule 6). A result of
    a request whose DeviceClass has a configured :class:`GpuEquivalentRule` counts by that
    rule instead, whatever its driver."""
    total = Decimal(0)
    classes = _request_classes(claim) if rules else {}
    for result in _results(claim):
        if result.get("adminAccess"):
            # Admin access does not hold the device (pkg/scheduler/framework/plugins/
            # dynamicresources/allocateddevices.go — foreachAllocatedDevice): 0, or it would
            # count the GPU twice.
            continue
        rule = (rules or {}).get(classes.get(str(result.get("request") or ""), ""))
        if rule is None and result.get("driver") != NVIDIA_DRIVER:
            continue  # another driver's device, no rule for its class: 0
        key = _device_key(result)
        device = devices.get(key)
        if rule is not None:
            amount = rule.amount(device)  # None: a slices/N rule for a device not in the slices
        else:
            amount = None if device is None else gpu_equivalent(device)
        if amount is None:
            metadata = claim.get("metadata") or {}
            notes.append(
                f"DRA: claim {metadata.get('namespace')}/{metadata.get('name')} holds device "
                f"{key[1]}/{key[2]}, not in any ResourceSlice: counted as 0 GPUs"
            )
            continue
        total += amount
        if by_node is not None and amount and device is not None and device.node:
            by_node[device.node] = by_node.get(device.node, Decimal(0)) + amount
    return total


def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """An allocated claim's ``status.allocation.devices.results``."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or ())


def _device_key(result: Mapping[str, Any]) -> DeviceKey:
    """The (driver, pool, device) an allocation result names, to look it up in the slices."""
    return (
        str(result.get("driver") or ""),
        str(result.get("pool") or ""),
        str(result.get("device") or ""),
    )


def _claimed_gpu_uuids(
    claim: Mapping[str, Any], devices: Mapping[DeviceKey, SliceDevice]
) -> set[str]:
    """The UUIDs of the physical GPUs an allocated claim's devices are on (a whole GPU's
    ``uuid``, a MIG device's ``parentUUID``: what NVML reports as the GPU's UUID, so a node
    agent's sample joins the claim by it). Admin-access results hold nothing."""
    uuids: set[str] = set()
    for result in _results(claim):
        if result.get("adminAccess"):
            continue
        device = devices.get(_device_key(result))
        if device is None:
            continue
        uuid = device.uuid if device.type == "gpu" else device.parent_uuid
        if uuid:
            uuids.add(uuid)
    return uuids


@dataclass(frozen=True)
class _PodIndex:
    live_uids: frozenset[str]
    pending_refs: frozenset[tuple[str, str]]
    # uid → GpuPod of every live pod bound to a node (for the GPU inventory, Rule 5)
    bound: Mapping[str, GpuPod] = field(default_factory=dict)


def _index_pods(pods: Iterable[Mapping[str, Any]]) -> _PodIndex:
    """The uids of pods not Succeeded/Failed, and (namespace, claim) referenced by unbound
    Pending pods."""
    live: set[str] = set()
    refs: set[tuple[str, str]] = set()
    bound: dict[str, GpuPod] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase in _FINISHED:
            continue
        if metadata.get("uid"):
            live.add(str(metadata["uid"]))
            if spec.get("nodeName"):
                bound[str(metadata["uid"])] = GpuPod(
                    node=str(spec["nodeName"]),
                    namespace=str(metadata.get("namespace") or "default"),
                    name=str(metadata.get("name") or ""),
                    uid=str(metadata["uid"]),
                )
        if spec.get("nodeName") or phase not in ("Pending", None):
            continue
        namespace = metadata.get("namespace") or "default"
        for entry in spec.get("resourceClaims") or ():
            if entry.get("resourceClaimName"):
                refs.add((namespace, str(entry["resourceClaimName"])))
        for entry in status.get("resourceClaimStatuses") or ():
            if entry.get("resourceClaimName"):
                refs.add((namespace, str(entry["resourceClaimName"])))
    return _PodIndex(frozenset(live), frozenset(refs), bound)


def claim_state(
    claim: Mapping[str, Any],
    live_uids: frozenset[str] | set[str],
    pending_refs: frozenset[tuple[str, str]] | set[tuple[str, str]],
) -> str | None:
    """Rule 1: ``"allocated"``, ``"pending"`` or None (counts nothing).

    Allocated needs a reservation by a live pod ("currently allowed to use the claim", types.go
    — ``ResourceClaimStatus.ReservedFor``); a claim reserved only by done or vanished pods is
    about to be released (pkg/controller/resourceclaim/controller.go — ``syncClaim``,
    ``isPodDone``) and counts nothing. Pending needs an unbound Pending pod referencing it.
    """
    metadata = claim.get("metadata") or {}
    status = claim.get("status") or {}
    if status.get("allocation"):
        for entry in status.get("reservedFor") or ():
            if (
                entry.get("resource") == "pods"
                and not entry.get("apiGroup")
                and str(entry.get("uid") or "") in live_uids
            ):
                return "allocated"
        return None
    key = (metadata.get("namespace") or "default", str(metadata.get("name") or ""))
    return "pending" if key in pending_refs else None


# ---------------------------------------------------------------- result


@dataclass(frozen=True)
class DraUsage:
    """Per namespace, what counted claims add to ``allocated`` and ``pending``.

    ``allocated_nodes``: per namespace, the ``nvidia.com/gpu`` of its allocated claims by the
    node their devices are published on (``{namespace: {node: GPU-equivalents}}``; devices of
    slices without a node are not in it), for the flavor attribution of Rule 6. ``node_gpus``:
    physical DRA GPUs per node (Rule 5, :func:`node_gpus`). ``gpu_pods``: the bound live pods
    reserving an allocated claim that holds GPUs (for the GPU inventory node agents report
    against; extended-resource claims' pods are there already, through their own request).
    """

    allocated: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    pending: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    allocated_nodes: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    node_gpus: Mapping[str, int] = field(default_factory=dict)
    gpu_pods: tuple[GpuPod, ...] = ()
    # DeviceClass → node → devices of the class its slices publish (Rule 7)
    class_nodes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def dra_usage(
    objects: DraObjects,
    pods: Iterable[Mapping[str, Any]],
    gpu_equivalents: Mapping[str, GpuEquivalentRule] | None = None,
) -> DraUsage:
    """Count the claims of ``objects`` against ``pods`` (all of the dump's pods, finished too);
    ``gpu_equivalents`` are the per-class rules that replace Rule 3b/3d for their classes.

    Steps:
    1. Index the pods: live uids; claims referenced by unbound Pending pods (Rule 1).
    2. Read the devices of each pool's highest generation (:func:`slice_devices`).
    3. For each claim, in name order, decide its state (:func:`claim_state`); for a counted
       claim add its :func:`class_devices` (Rule 2) and its GPU-equivalents (Rule 3: the
       allocated devices, or the pending whole-GPU requests; 0 for an extended-resource claim)
       to its namespace's ``allocated`` or ``pending``. ``nvidia.com/gpu`` appears only when
       the namespace's claims add more than 0. Allocated GPU-equivalents are also kept per
       node of their devices (``allocated_nodes``, Rule 6).
    4. Count each node's physical DRA GPUs (:func:`node_gpus`, Rule 5).

    Invariants: each claim counts at most once; deterministic for the same input.
    """
    index = _index_pods(pods)
    devices = slice_devices(objects.slices)
    out: dict[str, dict[str, Resources]] = {"allocated": {}, "pending": {}}
    on_nodes: dict[str, dict[str, Decimal]] = {}
    holders: dict[str, GpuPod] = {}
    notes: list[str] = []
    claims = sorted(
        objects.claims,
        key=lambda c: (
            str((c.get("metadata") or {}).get("namespace") or ""),
            str((c.get("metadata") or {}).get("name") or ""),
        ),
    )
    for claim in claims:
        state = claim_state(claim, index.live_uids, index.pending_refs)
        if state is None:
            continue
        namespace = (claim.get("metadata") or {}).get("namespace") or "default"
        into = out[state].setdefault(namespace, {})
        for device_class, n in class_devices(claim).items():
            name = class_resource(device_class)
            into[name] = into.get(name, Decimal(0)) + n
        if _is_extended_resource_claim(claim):
            continue  # Rule 3c: already the pod's nvidia.com/gpu request
        if state == "allocated":
            gpus = _allocated_gpus(
                claim, devices, notes, on_nodes.setdefault(namespace, {}), gpu_equivalents
            )
        else:
            gpus = _pending_gpus(claim, gpu_equivalents)
        if gpus:
            into[GPU] = into.get(GPU, Decimal(0)) + gpus
            if state == "allocated":
                uuids = _claimed_gpu_uuids(claim, devices)
                for entry in (claim.get("status") or {}).get("reservedFor") or ():
                    holder = holders.get(str(entry.get("uid") or "")) or index.bound.get(
                        str(entry.get("uid") or "")
                    )
                    if holder is not None and entry.get("resource") == "pods":
                        held = tuple(sorted(set(holder.gpu_uuids) | uuids))
                        holders[holder.uid] = replace(holder, gpu_uuids=held)
    gpus_per_node = node_gpus(devices, notes)
    per_class = class_devices_per_node(objects.classes, objects.slices, notes)
    return DraUsage(
        allocated=out["allocated"],
        pending=out["pending"],
        notes=tuple(notes),
        allocated_nodes={ns: dict(sorted(by.items())) for ns, by in sorted(on_nodes.items()) if by},
        node_gpus=gpus_per_node,
        gpu_pods=tuple(sorted(holders.values(), key=_pod_order)),
        class_nodes=per_class,
    )


def _pod_order(pod: GpuPod) -> tuple[str, str, str, str]:
    return (pod.node, pod.namespace, pod.name, pod.uid)


def _plus(base: Mapping[str, Decimal], extra: Mapping[str, Decimal] | None) -> dict[str, Decimal]:
    total = dict(base)
    for name, amount in (extra or {}).items():
        total[name] = total[name] + amount if name in total else amount
    return total


def _merged_pods(*groups: Iterable[GpuPod]) -> tuple[GpuPod, ...]:
    """The pods of ``groups``, once per uid (a pod with device-plugin GPUs and claimed ones:
    the union of their GPU UUIDs), in inventory order."""
    by_uid: dict[tuple[str, str, str, str], GpuPod] = {}
    for group in groups:
        for pod in group:
            key = (pod.node, pod.namespace, pod.name, pod.uid)
            seen = by_uid.get(key)
            uuids = set(pod.gpu_uuids) | set(seen.gpu_uuids if seen else ())
            by_uid[key] = replace(pod, gpu_uuids=tuple(sorted(uuids)))
    return tuple(sorted(by_uid.values(), key=_pod_order))


def add_dra_usage(
    usage: ClusterUsage,
    dra: DraUsage,
    namespace_teams: Mapping[str, str],
    *,
    nodes: Iterable[Mapping[str, Any]] | None = None,
    parse_quantity: Callable[[Any], Decimal] | None = None,
) -> ClusterUsage:
    """``usage`` with ``dra`` added to its namespaces and teams (and its notes).

    With ``nodes`` (the dump's Node objects, the ones ``usage`` was aggregated from, and the
    ``parse_quantity`` it used) also:

    * Rule 5 — each node's physical DRA GPUs (``dra.node_gpus``) join ``capacity`` and
      ``flavors[product]`` (``nvidia.com/gpu``) if the node is schedulable, counted once with
      its device-plugin allocatable (``max`` of the two, noted when both are there), and the GPU
      inventory ``gpu_nodes`` (every state; the ``nvidia.com/gpu.count`` label wins);
    * Rule 6 — each namespace's allocated claim GPUs go to the flavor of the node their devices
      are on: ``namespace_flavors`` and its team's ``flavor_allocated`` (no product label, or a
      node missing from ``nodes``: no flavor, the ``""`` row).

    The pods holding claimed GPUs (``dra.gpu_pods``) join the inventory's ``gpu_pods`` in any
    case. Without ``nodes``, capacity, flavors, per-flavor sums and ``gpu_nodes`` are unchanged.
    Pod counts and workloads are never changed. Only a node's ``nvidia.com/gpu`` is added:
    device-class counts are claims' usage, not capacity.
    """
    names = sorted(set(usage.namespaces) | set(dra.allocated) | set(dra.pending))
    namespaces: dict[str, NamespaceUsage] = {}
    teams: dict[str, dict[str, Resources]] = {}
    for name in names:
        before = usage.namespaces.get(name)
        team = before.team if before else namespace_teams.get(name, UNASSIGNED)
        ns = NamespaceUsage(
            team,
            _plus(before.allocated if before else {}, dra.allocated.get(name)),
            _plus(before.pending if before else {}, dra.pending.get(name)),
        )
        namespaces[name] = ns
        sums = teams.setdefault(team, {"allocated": {}, "pending": {}})
        sums["allocated"] = _plus(sums["allocated"], ns.allocated)
        sums["pending"] = _plus(sums["pending"], ns.pending)
    merged = replace(
        usage,
        namespaces=namespaces,
        teams={
            slug: TeamUsage(teams[slug]["allocated"], teams[slug]["pending"])
            for slug in sorted(teams)
        },
        notes=(*usage.notes, *dra.notes),
        gpu_pods=_merged_pods(usage.gpu_pods, dra.gpu_pods),
    )
    if nodes is None:
        return merged
    if parse_quantity is None:
        raise ValueError("add_dra_usage: nodes need the parse_quantity they were aggregated with")
    return _add_dra_nodes(merged, dra, nodes, parse_quantity)


def _gpu_count_label(node: Mapping[str, Any]) -> int | None:
    """The node's ``nvidia.com/gpu.count`` label when it is a positive integer (as
    :func:`monitoring.domain.aggregate.gpu_node` reads it)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    label = labels.get(GPU_COUNT_LABEL)
    if isinstance(label, str) and label.isascii() and label.isdigit() and int(label) > 0:
        return int(label)
    return None


def _add_dra_nodes(
    usage: ClusterUsage,
    dra: DraUsage,
    nodes: Iterable[Mapping[str, Any]],
    parse_quantity: Callable[[Any], Decimal],
) -> ClusterUsage:
    """Rules 5 and 6 of :func:`add_dra_usage` (``usage`` already holds the claims)."""
    known: dict[str, NodeCapacity] = {}
    labelled: dict[str, int | None] = {}
    for node in nodes:
        info = node_capacity(node, parse_quantity)
        known[info.name] = info
        labelled[info.name] = _gpu_count_label(node)
    notes: list[str] = []
    capacity = dict(usage.capacity)
    flavors = {flavor: dict(amounts) for flavor, amounts in usage.flavors.items()}
    gpu_nodes = dict(usage.gpu_nodes)

    missing = sorted(name for name in dra.node_gpus if name not in known)
    if missing:
        lost = sum(dra.node_gpus[name] for name in missing)
        notes.append(
            f"DRA: ResourceSlices of nodes {', '.join(missing)} (not in the node list) publish "
            f"{lost} GPUs: not counted as capacity"
        )
    for name, dra_gpus in dra.node_gpus.items():
        info = known.get(name)
        if info is None:
            continue
        plugin = info.allocatable.get(GPU, Decimal(0))
        counted = max(plugin, Decimal(dra_gpus))
        if plugin > 0:
            notes.append(
                f"DRA: node {name} advertises {json_number(plugin)} nvidia.com/gpu (device "
                f"plugin) and publishes {dra_gpus} DRA GPUs: counted once, as "
                f"{json_number(counted)}"
            )
        if labelled[name] is None:
            before = gpu_nodes.get(name)
            gpus = max(before.gpus if before else 0, int(counted))
            gpu_nodes[name] = GpuNode(name=name, gpus=gpus, product=info.flavor)
        extra = counted - plugin
        if extra <= 0 or not info.schedulable:
            continue
        capacity[GPU] = capacity.get(GPU, Decimal(0)) + extra
        if info.flavor is not None:
            into = flavors.setdefault(info.flavor, {})
            into[GPU] = into.get(GPU, Decimal(0)) + extra

    # Rule 7: devices per DeviceClass on schedulable nodes, the capacity of device-class quota.
    # As the nodes' allocatable: in total and per flavor (the node's GPU product).
    for device_class, per_node in dra.class_nodes.items():
        name = class_resource(device_class)
        capacity[name] = Decimal(0)
        for node, n in per_node.items():
            info = known.get(node)
            if info is None or not info.schedulable:
                continue
            capacity[name] += n
            if info.flavor is not None:
                into = flavors.setdefault(info.flavor, {})
                into[name] = into.get(name, Decimal(0)) + n

    namespace_flavors = {
        ns: {flavor: dict(amounts) for flavor, amounts in by.items()}
        for ns, by in usage.namespace_flavors.items()
    }
    flavor_allocated = {
        team: {flavor: dict(amounts) for flavor, amounts in by.items()}
        for team, by in usage.flavor_allocated.items()
    }
    for ns, by_node in sorted(dra.allocated_nodes.items()):
        team = usage.namespaces[ns].team
        for node, amount in sorted(by_node.items()):
            info = known.get(node)
            if info is None or info.flavor is None:
                continue
            for into in (
                namespace_flavors.setdefault(ns, {}).setdefault(info.flavor, {}),
                flavor_allocated.setdefault(team, {}).setdefault(info.flavor, {}),
            ):
                into[GPU] = into.get(GPU, Decimal(0)) + amount

    return replace(
        usage,
        capacity=capacity,
        flavors=dict(sorted(flavors.items())),
        namespace_flavors={
            ns: dict(sorted(by.items())) for ns, by in sorted(namespace_flavors.items())
        },
        flavor_allocated={
            team: dict(sorted(by.items())) for team, by in sorted(flavor_allocated.items())
        },
        gpu_nodes=dict(sorted(gpu_nodes.items())),
        notes=(*usage.notes, *notes),
    )
