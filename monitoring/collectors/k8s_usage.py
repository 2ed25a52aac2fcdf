"""Cluster usage collector: LIST nodes and live pods, stream them into the pure aggregation.

Two sources, same result (:class:`monitoring.domain.aggregate.ClusterUsage`):

* :func:`collect` reads the API server through ``kube.observe.list_raw`` (the only
  package that talks to the ``kubernetes`` client). Nodes first, then pods, each as a paginated
  LIST (``limit`` + ``continue``) served from the API server's watch cache
  (``resourceVersion=0``), parsed as raw JSON dicts (no client model objects). Pods are filtered
  server-side to the non-terminal phases with
  ``fieldSelector=status.phase!=Succeeded,status.phase!=Failed``; the aggregation skips finished
  pods too, so a server that ignored the selector would still give the right answer. Pages are
  consumed as they arrive, so memory holds one page plus per-namespace sums, not the pod list.
  A transient failure (429, 5xx, timeout) restarts the whole observation (``call_with_retry``),
  so pages from two attempts are never mixed.
  Before the pods, the workload kinds are LISTed the same way (paginated, from the cache):
  Volcano PodGroups (``scheduling.volcano.sh/v1beta1``), Volcano Jobs (``batch.volcano.sh/
  v1alpha1``) and Warning Events (``fieldSelector=type=Warning``: quota refusals are Warnings).
  A cluster without Volcano answers 404 for the CRDs' paths; that kind is then skipped and the
  result carries a note saying so. They feed :class:`monitoring.domain.workloads.WorkloadCollector`
  so pods are grouped into gangs in the same single pass.
* :func:`from_snapshot` reads a ``kubectl get nodes,pods,podgroups,jobs,events -A -o json`` dump
  (the demo mode, ``FAIRSHARE_CLUSTER=snapshot:PATH``); the workload kinds are optional. When the
  dump also holds ``resource.k8s.io`` objects (ResourceClaims, ResourceSlices, DeviceClasses), the
  claims' GPU-equivalents and device-class counts are added (:mod:`monitoring.domain.dra`).
  :func:`collect` LISTs the same kinds (``resource.k8s.io/v1`` ResourceClaims, ResourceSlices,
  DeviceClasses; paginated, from the cache) before the pods and adds them the same way
  (``dra.add_dra_usage``), so the same objects give the same usage. A cluster that does not
  serve ``resource.k8s.io/v1`` (404: before Kubernetes 1.34, or the group disabled) or forbids
  listing it (403: an older ClusterRole) is collected without DRA, with one note saying so.

Quantities are parsed with ``kubernetes.utils.parse_quantity`` (exact Decimals).

Note: real API servers before Kubernetes 1.31 ignore ``limit`` when ``resourceVersion=0`` is
served from the watch cache and answer in one page; the collector handles both.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

from kube.apply import call_with_retry
from kube.errors import K8sNotFound, K8sPermanent
from kube.observe import MANAGED_SELECTOR, list_raw
from monitoring.domain import dra, snapshot_clock
from monitoring.domain.aggregate import ClusterUsage, aggregate, parse_list_dump
from monitoring.domain.kueue_status import queue_statuses
from monitoring.domain.workloads import WorkloadCollector
from monitoring.exceptions import CollectorError

NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PODGROUPS_PATH = "/apis/scheduling.volcano.sh/v1beta1/podgroups"
VOLCANO_JOBS_PATH = "/apis/batch.volcano.sh/v1alpha1/jobs"
EVENTS_PATH = "/api/v1/events"
RESOURCECLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
RESOURCESLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
DEVICECLASSES_PATH = "/apis/resource.k8s.io/v1/deviceclasses"
# (stats key, path) of the Dynamic Resource Allocation kinds; ResourceClaimTemplates are not
# needed for counting (a generated claim is found through the pod's status).
DRA_KINDS = (
    ("resourceclaims", RESOURCECLAIMS_PATH),
    ("resourceslices", RESOURCESLICES_PATH),
    ("deviceclasses", DEVICECLASSES_PATH),
)
DRA_WHAT = "Dynamic Resource Allocation (resource.k8s.io/v1)"
WARNINGS = "type=Warning"
DEFAULT_PAGE_SIZE = 500
# (stats key, path, extra params, WorkloadCollector method, what a 404 means)
WORKLOAD_KINDS = (
    ("vcjobs", VOLCANO_JOBS_PATH, {}, "add_job", "Volcano's Job CRD (batch.volcano.sh)"),
    (
        "podgroups",
        PODGROUPS_PATH,
        {},
        "add_podgroup",
        "Volcano's PodGroup CRD (scheduling.volcano.sh)",
    ),
    ("events", EVENTS_PATH, {"fieldSelector": WARNINGS}, "add_event", "Events"),
)
# Kueue's ClusterQueues Fairshare manages, for what Kueue says about them (status), and its
# Workloads (both only with the Kueue backend, whose RBAC overlay grants the list: a suspended
# job has no pods, so its Workload is the only trace of the work it waits to do).
KUEUE_CLUSTER_QUEUES = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
KUEUE_COHORTS = "/apis/kueue.x-k8s.io/v1beta2/cohorts"
KUEUE_WORKLOADS = (
    "kueue-workloads",
    "/apis/kueue.x-k8s.io/v1beta2/workloads",
    {},
    "add_kueue_workload",
    "Kueue's Workload CRD (kueue.x-k8s.io)",
)

Stats = MutableMapping[str, int]
logger = logging.getLogger(__name__)


def _counted(items: Iterator[dict[str, Any]], stats: Stats, key: str) -> Iterator[dict[str, Any]]:
    for item in items:
        stats[key] = stats.get(key, 0) + 1
        yield item


def _list_dra(
    api_client: Any, params: Mapping[str, str], page_size: int, counts: Stats, notes: list[str]
) -> dra.DraObjects | None:
    """LIST the DRA kinds; None when the cluster has none of them, does not serve the group
    (404) or does not let Fairshare list it (403): then one note says which."""
    found: dict[str, list[dict[str, Any]]] = {}
    missing: dict[str, str] = {}
    for key, path in DRA_KINDS:
        try:
            compact = _DRA_COMPACT.get(key, _same)
            found[key] = [
                compact(item)
                for item in list_raw(api_client, path, page_size=page_size, params=dict(params))
            ]
        except K8sNotFound:
            missing[key] = "not served by the cluster"
        except K8sPermanent as e:
            if e.status != 403:
                raise
            missing[key] = "not listable (403 Forbidden: check the ClusterRole)"
    if missing:
        why = "; ".join(sorted(set(missing.values())))
        notes.append(f"{DRA_WHAT} {why}: claims not counted")
        logger.info("collector: %s %s; DRA skipped", DRA_WHAT, why)
        return None
    for key, items in found.items():
        counts[key] = len(items)
    if not any(found.values()):
        return None
    return dra.DraObjects(
        claims=tuple(found["resourceclaims"]),
        slices=tuple(found["resourceslices"]),
        classes=tuple(found["deviceclasses"]),
    )


def _same(item: dict[str, Any]) -> dict[str, Any]:
    return item


def _dra_claim(claim: Mapping[str, Any]) -> dict[str, Any]:
    """What ``dra.dra_usage`` reads of a ResourceClaim (namespace, name, the extended-resource
    annotation, the requests, the allocation results and who reserves it): a collection of
    tens of thousands of claims keeps these, not the objects (managedFields, conditions…)."""
    metadata = claim.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    kept: dict[str, Any] = {
        "kind": "ResourceClaim",
        "metadata": {"namespace": metadata.get("namespace"), "name": metadata.get("name")},
        "spec": {
            "devices": {
                "requests": ((claim.get("spec") or {}).get("devices") or {}).get("requests")
            }
        },
        "status": {},
    }
    if dra.EXTENDED_RESOURCE_CLAIM in annotations:
        kept["metadata"]["annotations"] = {
            dra.EXTENDED_RESOURCE_CLAIM: annotations[dra.EXTENDED_RESOURCE_CLAIM]
        }
    if allocation:
        kept["status"]["allocation"] = {
            "devices": {"results": (allocation.get("devices") or {}).get("results")}
        }
    if status.get("reservedFor"):
        kept["status"]["reservedFor"] = status["reservedFor"]
    return kept


def _dra_slice(item: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceSlice's ``spec`` (driver, pool, node, devices: what capacity and the
    DeviceClass selectors read), without its metadata."""
    return {"kind": "ResourceSlice", "spec": item.get("spec") or {}}


_DRA_COMPACT = {"resourceclaims": _dra_claim, "resourceslices": _dra_slice}


def _dra_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What ``dra.dra_usage`` reads of a pod (uid, name, phase, node, claim references)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            "uid": metadata.get("uid"),
            "namespace": metadata.get("namespace"),
            "name": metadata.get("name"),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "resourceClaims": spec.get("resourceClaims"),
        },
        "status": {
            "phase": status.get("phase"),
            "resourceClaimStatuses": status.get("resourceClaimStatuses"),
        },
    }


def _kept(items: Iterator[dict[str, Any]], into: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Pass the pods on, keeping the compact record of those that take part in DRA: a pod that
    references a claim (``spec.resourceClaims``, ``status.resourceClaimStatuses``) or got one for
    an extended resource (``status.extendedResourceClaimStatus``). Only such a pod can reserve a
    claim (the scheduler reserves a claim for the pods that reference it), so the others change
    nothing ``dra_usage`` counts, and a cluster of 150,000 pods does not keep 150,000 records."""
    for item in items:
        spec, status = item.get("spec") or {}, item.get("status") or {}
        if (
            spec.get("resourceClaims")
            or status.get("resourceClaimStatuses")
            or status.get("extendedResourceClaimStatus")
        ):
            into.append(_dra_pod(item))
        yield item


def _dra_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """What ``dra.add_dra_usage`` reads of a node (name, GPU labels, cordon, Ready, GPUs)."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = node.get("status") or {}
    kept: dict[str, Any] = {
        "metadata": {
            "name": metadata.get("name"),
            "labels": {k: v for k, v in labels.items() if k in _DRA_NODE_LABELS},
        },
        "spec": {"unschedulable": (node.get("spec") or {}).get("unschedulable")},
        "status": {
            "conditions": [c for c in status.get("conditions") or () if c.get("type") == "Ready"]
        },
    }
    for key in ("allocatable", "capacity"):
        if status.get(key) is not None:
            gpus = status[key].get(dra.GPU)
            kept["status"][key] = {} if gpus is None else {dra.GPU: gpus}
    return kept


_DRA_NODE_LABELS = frozenset({"nvidia.com/gpu.product", "nvidia.com/gpu.count"})


def _kept_nodes(
    items: Iterator[dict[str, Any]], into: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    for item in items:
        into.append(_dra_node(item))
        yield item


def collect(
    api_client: Any,
    namespace_teams: Mapping[str, str],
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    attempts: int = 3,
    stats: Stats | None = None,
    kueue: bool = False,
    gpu_equivalents: Mapping[str, dra.GpuEquivalentRule] | None = None,
) -> ClusterUsage:
    """Observe the cluster once and return its aggregate.

    ``namespace_teams`` maps namespace → team slug (others are ``unassigned``). ``stats``, if
    given, receives ``nodes`` and ``pods`` (objects read, from the successful attempt), and
    ``resourceclaims``, ``resourceslices``, ``deviceclasses`` when the cluster has DRA objects.
    ``kueue``: also list Kueue's Workloads (the Kueue backend). ``gpu_equivalents``: the
    per-DeviceClass GPU-equivalent rules (``settings.FAIRSHARE_DRA_GPU_EQUIVALENTS``,
    :func:`monitoring.domain.dra.parse_gpu_equivalents`).
    Raises ``kube.errors.K8sError`` subclasses when the API keeps failing.
    """

    def observe() -> ClusterUsage:
        counts: dict[str, int] = {"nodes": 0, "pods": 0}
        params = {"resourceVersion": "0"}
        workloads = WorkloadCollector(parse_quantity)
        # Jobs before PodGroups, so a PodGroup owned by a Job finds it.
        kinds = (*WORKLOAD_KINDS, KUEUE_WORKLOADS) if kueue else WORKLOAD_KINDS
        for key, path, extra, method, what in kinds:
            add = getattr(workloads, method)
            counts[key] = 0
            try:
                for item in list_raw(
                    api_client, path, page_size=page_size, params={**params, **extra}
                ):
                    counts[key] += 1
                    add(item)
            except K8sNotFound:
                workloads.notes.append(f"{what} not served by the cluster: skipped")
                logger.info("collector: %s not served (404); skipped", what)
        dra_counts: dict[str, int] = {}
        dra_objects = _list_dra(api_client, params, page_size, dra_counts, workloads.notes)
        nodes = list_raw(api_client, NODES_PATH, page_size=page_size, params=params)
        pods = _counted(
            list_raw(
                api_client,
                PODS_PATH,
                page_size=page_size,
                params={**params, "fieldSelector": LIVE_PODS},
            ),
            counts,
            "pods",
        )
        # With claims to count, keep what dra_usage reads of each pod (finished pods are
        # filtered server-side; dra_usage ignores them anyway, so the result is the snapshot's).
        dra_pods: list[dict[str, Any]] = []
        if dra_objects is not None and dra_objects.claims:
            pods = _kept(pods, dra_pods)
        # With slices, keep what add_dra_usage reads of each node (capacity and flavor of DRA
        # GPUs, Rules 5 and 6 of monitoring.domain.dra).
        dra_nodes: list[dict[str, Any]] = []
        if dra_objects is not None and dra_objects.slices:
            nodes = _kept_nodes(nodes, dra_nodes)
        usage = aggregate(
            _counted(nodes, counts, "nodes"),
            pods,
            namespace_teams,
            parse_quantity=parse_quantity,
            workloads=workloads,
        )
        if dra_objects is not None:
            counts.update(dra_counts)
            usage = dra.add_dra_usage(
                usage,
                dra.dra_usage(dra_objects, dra_pods, gpu_equivalents),
                namespace_teams,
                nodes=dra_nodes,
                parse_quantity=parse_quantity,
            )
        if kueue:
            statuses: dict[str, dict[str, Any]] = {}
            for kind, path in (("ClusterQueue", KUEUE_CLUSTER_QUEUES), ("Cohort", KUEUE_COHORTS)):
                try:
                    items = list(
                        list_raw(
                            api_client,
                            path,
                            page_size=page_size,
                            params={**params, "labelSelector": MANAGED_SELECTOR},
                        )
                    )
                except K8sNotFound:
                    items = []
                    logger.info("collector: Kueue's %s CRD not served (404); skipped", kind)
                counts[f"kueue-{kind.lower()}s"] = len(items)
                statuses.update(queue_statuses(items, parse_quantity, kind=kind))
            usage = replace(usage, kueue_queues=dict(sorted(statuses.items())))
        if stats is not None:
            stats.update(counts)
        return usage

    return call_with_retry(observe, attempts=attempts)


def from_snapshot(
    path: str | Path,
    namespace_teams: Mapping[str, str],
    *,
    stats: Stats | None = None,
    now: datetime | None = None,
    gpu_equivalents: Mapping[str, dra.GpuEquivalentRule] | None = None,
) -> ClusterUsage:
    """Aggregate a ``kubectl get nodes,pods -A -o json`` dump (with DRA objects, if any).

    With ``now``, the dump stands for the cluster at ``now``: its timestamps are moved by
    ``now`` minus its newest one (:func:`monitoring.domain.snapshot_clock.redate`), so a pod
    that had waited 40 minutes when it was taken is shown waiting 40 minutes, not a year.

    Raises CollectorError, naming the file, when it is missing, unreadable, not JSON, not a
    Kubernetes List, or holds a quantity that does not parse.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise CollectorError(f"cannot read cluster snapshot {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise CollectorError(f"cluster snapshot {path} is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise CollectorError(f"cluster snapshot {path} is not a Kubernetes List object")
    try:
        if now is not None:
            doc = snapshot_clock.redate(doc, now)
        nodes, pods = parse_list_dump(doc)
        workloads = WorkloadCollector(parse_quantity)
        extra = split_workload_items(doc)
        for kind in ("Job", "PodGroup", "Workload", "Event"):
            for item in extra[kind]:
                getattr(workloads, _ADDERS[kind])(item)
        usage = aggregate(
            nodes, pods, namespace_teams, parse_quantity=parse_quantity, workloads=workloads
        )
        dra_objects = dra.split_dra_items(doc)
        if dra_objects is not None:
            usage = dra.add_dra_usage(
                usage,
                dra.dra_usage(dra_objects, pods, gpu_equivalents),
                namespace_teams,
                nodes=nodes,
                parse_quantity=parse_quantity,
            )
    except (ValueError, TypeError, AttributeError, ArithmeticError) as e:
        raise CollectorError(f"cluster snapshot {path} cannot be read: {e}") from e
    if stats is not None:
        stats.update(
            {
                "nodes": len(nodes),
                "pods": len(pods),
                "podgroups": len(extra["PodGroup"]),
                "vcjobs": len(extra["Job"]),
                "events": len(extra["Event"]),
                "kueue-workloads": len(extra["Workload"]),
            }
        )
        if dra_objects is not None:
            stats["resourceclaims"] = len(dra_objects.claims)
            stats["resourceslices"] = len(dra_objects.slices)
    return usage


_ADDERS = {
    "Job": "add_job",
    "PodGroup": "add_podgroup",
    "Workload": "add_kueue_workload",
    "Event": "add_event",
}


def split_workload_items(doc: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The PodGroups, Volcano Jobs and Events of a ``kubectl get ... -o json`` List (by
    ``kind`` and API group; a ``batch/v1`` Job is not a Volcano Job)."""
    out: dict[str, list[dict[str, Any]]] = {"Job": [], "PodGroup": [], "Workload": [], "Event": []}
    if doc.get("kind") != "List":
        return out
    for item in doc.get("items") or ():
        kind = item.get("kind") if isinstance(item, dict) else None
        api = str(item.get("apiVersion") or "") if kind else ""
        if kind == "PodGroup" and api.startswith("scheduling.volcano.sh/"):
            out["PodGroup"].append(item)
        elif kind == "Job" and api.startswith("batch.volcano.sh/"):
            out["Job"].append(item)
        elif kind == "Workload" and api.startswith("kueue.x-k8s.io/"):
            out["Workload"].append(item)
        elif kind == "Event":
            out["Event"].append(item)
    return out
