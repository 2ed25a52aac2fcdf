"""A node agent's NVML samples join DRA claims by GPU UUID (issue 34): the ResourceSlices name each
device's physical GPU (``uuid``, a MIG device's ``parentUUID``), which is the UUID NVML reports,
so a sample whose processes name no pod is attributed to the pod holding that GPU through a
claim. Cluster of tests/monitoring/test_dra_capacity.py: on node b, GPU-b0 is cut into seven
1g.10gb devices (the claim mig-shared, reserved by pods mig-0 and mig-1), GPU-b1 is the whole
GPU of pod nlp/whole."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from monitoring import collection
from monitoring.ingest import ingest_gpu_batch
from monitoring.models import GpuInventoryNode, GpuSample
from tests.monitoring.test_dra_capacity import cluster_items, usage_of

NOW = datetime(2025, 5, 1, 12, 0, 30, tzinfo=UTC)
TS = "2025-05-01T12:00:00+00:00"


def sample(uuid, index, processes=None):
    return {
        "ts": TS,
        "uuid": uuid,
        "index": index,
        "model": "NVIDIA H100 80GB HBM3",
        "util_gpu": 50,
        "util_mem": 10,
        "mem_used": 1,
        "mem_total": 85899345920,
        "power_w": 300.0,
        "temp_c": 50,
        "processes": processes,
    }


@pytest.fixture
def collected(db):
    collection.store_usage(usage_of(cluster_items()), now=NOW, source="test")


def ingest(*samples):
    return ingest_gpu_batch(
        token_node="b",
        batch={"node": "b", "agent": {"version": "0.1.0"}, "samples": list(samples)},
        now=NOW,
    )


def attributed():
    return {s.uuid: (s.namespace, s.pod) for s in GpuSample.objects.all()}


def test_the_inventory_keeps_the_gpus_each_pod_holds(collected):
    pods = GpuInventoryNode.objects.get(name="b").pods
    assert sorted(pods) == [
        ["nlp", "whole", "uid-nlp-whole", ["GPU-b1"]],
        ["vision", "mig-0", "uid-vision-mig-0", ["GPU-b0"]],
        ["vision", "mig-1", "uid-vision-mig-1", ["GPU-b0"]],
    ]


def test_a_sample_without_pod_processes_goes_to_the_claims_pod(collected):
    result = ingest(sample("GPU-b0", 0, []), sample("GPU-b1", 1, None))

    assert (result.accepted, result.rejected_reasons) == (2, [])
    # GPU-b0's claim is shared by mig-0 and mig-1: the first by name.
    assert attributed() == {"GPU-b0": ("vision", "mig-0"), "GPU-b1": ("nlp", "whole")}


def test_a_process_naming_its_pod_still_decides(collected):
    named = [{"pid": 7, "pod_uid": "uid-vision-mig-1", "mem_used": 5}]

    ingest(sample("GPU-b0", 0, named))

    assert attributed() == {"GPU-b0": ("vision", "mig-1")}
