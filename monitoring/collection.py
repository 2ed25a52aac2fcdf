"""Collection: observe the cluster (pods' requests, nodes, GPU inventory) and store one
collection in one transaction: usage samples, a capacity snapshot, the GPU inventory the
ingest checks against, and the workload records (``monitoring.workloads``)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from monitoring.collectors import k8s_usage
from monitoring.domain.aggregate import ClusterUsage
from monitoring.exceptions import CollectorError
from monitoring.models import (
    CapacitySnapshot,
    GpuInventoryNode,
    UsageSample,
)
from monitoring.units import decimal_string, is_gpu_resource
from monitoring.workloads import store_workloads
from quotas.models import Namespace

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- collection


def namespace_teams() -> dict[str, str]:
    """Return ``{namespace: team slug}`` for every namespace Fairshare knows."""
    return dict(Namespace.objects.values_list("name", "team__slug"))


def _kueue() -> bool:
    """Whether the cluster runs Kueue (``FAIRSHARE_SCHEDULER=kueue``): its Workloads are read."""
    return getattr(settings, "FAIRSHARE_SCHEDULER", "volcano") == "kueue"


def _rules() -> dict:
    """The per-DeviceClass GPU-equivalent rules (``FAIRSHARE_DRA_GPU_EQUIVALENTS``, read and
    checked at start-up by config.settings)."""
    return dict(getattr(settings, "FAIRSHARE_DRA_GPU_EQUIVALENTS", {}) or {})


def observe_cluster(
    namespace_map: Mapping[str, str],
    *,
    api_client: Any = None,
    stats: dict | None = None,
    now: datetime | None = None,
) -> tuple[ClusterUsage, str]:
    """Observe the configured cluster (or ``api_client``); return ``(usage, source)``.

    ``FAIRSHARE_CLUSTER=snapshot:PATH`` reads the dump (the demo) as the cluster at ``now``
    (default: the current time; its timestamps are moved there, so workload ages read as when
    it was taken: monitoring.domain.snapshot_clock); ``kubeconfig[:PATH]`` and
    ``in-cluster`` LIST the API server. Raises CollectorError when collection is disabled or the
    snapshot cannot be read, K8sError subclasses when the API server fails.
    """
    if api_client is not None:
        usage = k8s_usage.collect(
            api_client, namespace_map, stats=stats, kueue=_kueue(), gpu_equivalents=_rules()
        )
        return usage, "kubernetes"
    mode, _, arg = settings.FAIRSHARE_CLUSTER.partition(":")
    if mode == "snapshot":
        at = now or timezone.now()
        usage = k8s_usage.from_snapshot(
            arg, namespace_map, stats=stats, now=at, gpu_equivalents=_rules()
        )
        return usage, f"snapshot:{arg}"[:64]
    if mode == "disabled":
        raise CollectorError("usage collection is disabled (FAIRSHARE_CLUSTER=disabled)")
    from kube.client import build_api_client

    timeout = (5.0, float(getattr(settings, "FAIRSHARE_KUBE_TIMEOUT", 30)))
    client = build_api_client(mode, kubeconfig=arg or None, timeout=timeout)
    try:
        usage = k8s_usage.collect(
            client, namespace_map, stats=stats, kueue=_kueue(), gpu_equivalents=_rules()
        )
        return usage, "kubernetes"
    finally:
        client.close()


def collect_usage(*, now: datetime | None = None, api_client: Any = None):
    """Observe the cluster once and store it; return ``(CapacitySnapshot, n_samples)``.

    The source is ``api_client`` when given, else ``settings.FAIRSHARE_CLUSTER``. Raises
    CollectorError (disabled, unreadable snapshot) or K8sError (API failures); nothing is
    written then.
    """
    now = now or timezone.now()
    namespace_map = namespace_teams()
    stats: dict[str, int] = {}
    usage, source = observe_cluster(namespace_map, api_client=api_client, stats=stats, now=now)
    nodes = max(0, stats.get("nodes", 0) - len(usage.excluded_nodes))
    return store_usage(usage, now=now, source=source, nodes=nodes)


def store_usage(
    usage: ClusterUsage, *, now: datetime, source: str, nodes: int = 0
) -> tuple[CapacitySnapshot, int]:
    """Write one CapacitySnapshot and its UsageSample rows in one transaction.

    Also replaces the GPU inventory node agents are checked against (``store_gpu_inventory``).
    Rows: one per namespace × resource with a non-zero amount. GPU resources allocated on
    flavored nodes get one row per flavor; what remains (pods on unlabelled nodes) and every
    pending amount go on the flavor "" row. ``team`` is null for unassigned namespaces.
    """
    team_ids = dict(Namespace.objects.values_list("name", "team_id"))
    rows: list[UsageSample] = []
    for name, ns_usage in usage.namespaces.items():
        team_id = team_ids.get(name)
        by_flavor = usage.namespace_flavors.get(name, {})
        for resource in sorted(set(ns_usage.allocated) | set(ns_usage.pending)):
            allocated = ns_usage.allocated.get(resource, Decimal(0))
            pending = ns_usage.pending.get(resource, Decimal(0))
            if is_gpu_resource(resource):
                for flavor in sorted(by_flavor):
                    amount = by_flavor[flavor].get(resource, Decimal(0))
                    if amount:
                        rows.append(_usage_row(now, team_id, name, resource, flavor, amount, 0))
                        allocated -= amount
            if allocated or pending:
                rows.append(_usage_row(now, team_id, name, resource, "", allocated, pending))
    with transaction.atomic():
        snapshot = CapacitySnapshot.objects.create(
            taken_at=now,
            source=source,
            resources={r: decimal_string(v) for r, v in sorted(usage.capacity.items())},
            flavors={
                product: {r: decimal_string(v) for r, v in sorted(amounts.items())}
                for product, amounts in sorted(usage.flavors.items())
            },
            nodes=nodes,
            kueue_queues=dict(usage.kueue_queues),
        )
        UsageSample.objects.bulk_create(rows, batch_size=2000)
        store_gpu_inventory(usage, now=now)
        workload_rows = store_workloads(usage, now=now, team_ids=team_ids)
    for note in usage.notes:
        logger.warning("collection at %s: %s", now.isoformat(), note)
    logger.info(
        "stored collection at %s from %s: %d samples, %d workloads, %d schedulable nodes",
        now.isoformat(),
        source,
        len(rows),
        workload_rows,
        nodes,
    )
    return snapshot, len(rows)


def _usage_row(now, team_id, namespace, resource, flavor, allocated, pending) -> UsageSample:
    return UsageSample(
        taken_at=now,
        team_id=team_id,
        namespace=namespace,
        resource=resource,
        flavor=flavor,
        allocated=Decimal(allocated),
        pending=Decimal(pending),
    )


def store_gpu_inventory(usage: ClusterUsage, *, now: datetime) -> None:
    """Replace the GPU inventory (nodes with GPUs, the pods holding GPUs on each) with this
    collection's. Call inside the collection's transaction, so ingest always sees one whole
    collection. Pods bound to a node the node list did not show are left out (an agent there
    has no GPUs to report by the cluster's account)."""
    pods: dict[str, list[list]] = defaultdict(list)
    for pod in usage.gpu_pods:
        row: list = [pod.namespace[:63], pod.name[:253], pod.uid[:64]]
        if pod.gpu_uuids:
            row.append([uuid[:64] for uuid in pod.gpu_uuids])  # held through DRA claims
        pods[pod.node].append(row)
    GpuInventoryNode.objects.all().delete()
    GpuInventoryNode.objects.bulk_create(
        (
            GpuInventoryNode(
                name=node.name[:253],
                gpus=node.gpus,
                product=(node.product or "")[:128],
                pods=pods.get(node.name, []),
                collected_at=now,
            )
            for node in usage.gpu_nodes.values()
        ),
        batch_size=500,
    )
