"""Put GPUs and GPU pods into the GPU inventory the way a collection does: Kubernetes Node and
Pod objects through the real aggregation (monitoring.domain.aggregate) and store_gpu_inventory."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from kubernetes.utils import parse_quantity

from monitoring.collection import store_gpu_inventory
from monitoring.domain.aggregate import aggregate

H100 = "NVIDIA-H100-80GB-HBM3"  # the node label of an "NVIDIA H100 80GB HBM3"


def node_object(name: str, *, gpus: int = 8, product: str | None = H100, label_count=True):
    labels = {"kubernetes.io/hostname": name}
    if product:
        labels["nvidia.com/gpu.product"] = product
    if label_count:
        labels["nvidia.com/gpu.count"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_object(node: str, namespace: str, name: str, *, uid: str | None = None, gpus: int = 1):
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def place(
    nodes: Iterable[dict] = (),
    pods: Iterable[dict] = (),
    *,
    now: datetime | None = None,
) -> None:
    usage = aggregate(list(nodes), list(pods), {}, parse_quantity=parse_quantity)
    store_gpu_inventory(usage, now=now or datetime.now(UTC))
