"""DRA GPUs are capacity and carry their node's flavor (Rules 5 and 6 of monitoring.domain.dra).

The hand-written cluster (every node 32 cores, 128Gi, 110 pods; product label H100 unless said):

* ``a``: DRA only, a slice of 2 whole GPUs (``GPU-a0``, ``GPU-a1``) → 2;
* ``b``: DRA only, static MIG: seven 1g.10gb devices of ONE parent (``parentUUID: GPU-b0``) and
  one whole GPU ``GPU-b1`` → 2 physical GPUs (not 8);
* ``c``: NotReady, a slice of 4 GPUs → no capacity, but in the GPU inventory (4);
* ``d``: device plugin ``nvidia.com/gpu: 4`` allocatable AND a slice of the same 4 GPUs → 4
  (max, not 8), with a note;
* ``e``: no product label, DRA only: whole ``gpu-0`` (uuid) and two MIG devices of ``gpu-3``
  that name no ``parentUUID`` (grouped by their canonical name ``gpu-3-mig-...``) → 2, no flavor;
* a slice of node ``ghost``, which is not in the node list (2 GPUs) → not counted, one note.

Capacity ``nvidia.com/gpu`` = a 2 + b 2 + d 4 + e 2 = 10 (c excluded, ghost unknown);
flavor H100 = a 2 + b 2 + d 4 = 8; cpu 4 × 32 = 128 in total, 3 × 32 = 96 for H100.

Pods (1 core each) and claims:

* ``vision`` (team ``cv``): ``train`` on a holds claim ``two-gpus`` (a/gpu-0, a/gpu-1) → 2;
  ``mig-0`` and ``mig-1`` on b share claim ``mig-shared`` (one 1g.10gb) → 0.125 once;
  ``plugin`` on d requests ``nvidia.com/gpu: 1`` from the device plugin → 1 (the aggregation's).
  allocated GPUs 3.125, all H100; cpu 4 on H100.
* ``nlp`` (team ``lang``): ``whole`` on b holds ``whole-b`` (b/gpu-1) → 1 H100; ``stuck`` on
  NotReady c holds ``on-c`` (c/gpu-0) → 1 H100 (pods on excluded nodes keep their flavor);
  ``plain`` on e holds ``on-e`` (e/gpu-0) → 1, no flavor; ``waiting`` (unbound) wants
  ``pending-one`` (1 whole GPU) → pending 1, no flavor.
  allocated GPUs 3, of which 2 on H100; cpu 2 on H100 (whole, stuck; plain is on unlabelled e).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from kubernetes.utils import parse_quantity

from monitoring.collectors import k8s_usage
from monitoring.domain import dra
from monitoring.domain.aggregate import GpuNode, GpuPod, aggregate
from monitoring.models import UsageSample

D = Decimal
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
GI = 2**30
FIXTURE = Path(__file__).parent / "fixtures" / "dra_cluster.json"
TEAMS = {"vision": "cv", "nlp": "lang"}


# ---------------------------------------------------------------- builders


def node(name, *, product=H100, ready=True, gpus=None, unschedulable=False):
    allocatable = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    if gpus is not None:
        allocatable[GPU] = str(gpus)
    labels = {"kubernetes.io/hostname": name}
    if product:
        labels["nvidia.com/gpu.product"] = product
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def whole(name, uuid=None):
    attributes = {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"}}
    if uuid:
        attributes["uuid"] = {"string": uuid}
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": "81559Mi"}}}


def mig(name, first_slice, parent=None, slices=1):
    attributes = {"type": {"string": "mig"}, "profile": {"string": "1g.10gb"}}
    if parent:
        attributes["parentUUID"] = {"string": parent}
    capacity = {"memory": {"value": "9984Mi"}}
    for i in range(first_slice, first_slice + slices):
        capacity[f"memorySlice{i}"] = {"value": "1"}
    return {"name": name, "attributes": attributes, "capacity": capacity}


def resource_slice(node_name, devices, *, generation=1):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu.nvidia.com-x"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def pod(namespace, name, node_name=None, *, claim=None, gpus=None):
    resources = {"requests": {"cpu": "1"}}
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}
    spec = {"containers": [{"name": "main", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    if claim:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}"},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def claim(namespace, name, devices=(), *, reserved_by=(), count=None, device_class=None):
    """An allocated claim of ``devices`` ((pool, device) pairs) reserved by the named pods, or,
    without devices, an unallocated one asking for ``count`` devices of ``device_class``."""
    exactly = {"deviceClassName": device_class or "gpu.nvidia.com", "allocationMode": "ExactCount"}
    if count is not None:
        exactly["count"] = count
    item = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        "status": {},
    }
    if devices:
        item["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": p, "device": d}
                        for p, d in devices
                    ]
                }
            },
            "reservedFor": [
                {"resource": "pods", "name": who, "uid": f"uid-{namespace}-{who}"}
                for who in reserved_by
            ],
        }
    return item


def cluster_items():
    b_migs = [
        mig(f"gpu-0-mig-1g10gb-19-{i}", i, parent="GPU-b0") for i in range(7)
    ]  # 7 × 1g.10gb on one GPU
    return [
        node("a"),
        node("b"),
        node("c", ready=False),
        node("d", gpus=4),
        node("e", product=None),
        resource_slice("a", [whole("gpu-0", "GPU-a0"), whole("gpu-1", "GPU-a1")]),
        resource_slice("b", [*b_migs, whole("gpu-1", "GPU-b1")]),
        resource_slice("c", [whole(f"gpu-{i}", f"GPU-c{i}") for i in range(4)]),
        resource_slice("d", [whole(f"gpu-{i}", f"GPU-d{i}") for i in range(4)]),
        resource_slice(
            "e",
            [
                whole("gpu-0", "GPU-e0"),
                mig("gpu-3-mig-1g10gb-19-0", 0),
                mig("gpu-3-mig-1g10gb-19-1", 1),
            ],
        ),
        resource_slice("ghost", [whole("gpu-0", "GPU-g0"), whole("gpu-1", "GPU-g1")]),
        pod("vision", "train", "a", claim="two-gpus"),
        pod("vision", "mig-0", "b", claim="mig-shared"),
        pod("vision", "mig-1", "b", claim="mig-shared"),
        pod("vision", "plugin", "d", gpus=1),
        pod("nlp", "whole", "b", claim="whole-b"),
        pod("nlp", "stuck", "c", claim="on-c"),
        pod("nlp", "plain", "e", claim="on-e"),
        pod("nlp", "waiting", claim="pending-one"),
        claim("vision", "two-gpus", [("a", "gpu-0"), ("a", "gpu-1")], reserved_by=["train"]),
        claim(
            "vision",
            "mig-shared",
            [("b", "gpu-0-mig-1g10gb-19-0")],
            reserved_by=["mig-0", "mig-1"],
            device_class="mig.nvidia.com",
        ),
        claim("nlp", "whole-b", [("b", "gpu-1")], reserved_by=["whole"]),
        claim("nlp", "on-c", [("c", "gpu-0")], reserved_by=["stuck"]),
        claim("nlp", "on-e", [("e", "gpu-0")], reserved_by=["plain"]),
        claim("nlp", "pending-one", count=1),
    ]


def cluster_doc():
    return {"apiVersion": "v1", "kind": "List", "items": cluster_items()}


def usage_of(items, teams=TEAMS):
    nodes = [i for i in items if i["kind"] == "Node"]
    pods = [i for i in items if i["kind"] == "Pod"]
    objects = dra.split_dra_items({"kind": "List", "items": items})
    base = aggregate(nodes, pods, teams, parse_quantity=parse_quantity)
    return dra.add_dra_usage(
        base, dra.dra_usage(objects, pods), teams, nodes=nodes, parse_quantity=parse_quantity
    )


# ---------------------------------------------------------------- pure rules


def test_capacity_counts_physical_dra_gpus_of_schedulable_nodes_once():
    usage = usage_of(cluster_items())

    # a 2 + b 2 (7 MIG devices of GPU-b0 are one GPU, + GPU-b1) + d max(4, 4) + e 2 (GPU-e0 and
    # the gpu-3 of its two parentless MIG devices); c is NotReady, ghost is not a node
    assert usage.capacity == {
        "cpu": D(4 * 32),
        "memory": D(4 * 128 * GI),
        "pods": D(4 * 110),
        GPU: D(10),
    }
    # e has no product label: only the total
    assert usage.flavors == {
        H100: {"cpu": D(3 * 32), "memory": D(3 * 128 * GI), "pods": D(3 * 110), GPU: D(8)}
    }
    assert usage.excluded_nodes == ("c",)
    assert usage.notes == (
        "DRA: ResourceSlices of nodes ghost (not in the node list) publish 2 GPUs: "
        "not counted as capacity",
        "DRA: node d advertises 4 nvidia.com/gpu (device plugin) and publishes 4 DRA GPUs: "
        "counted once, as 4",
    )


def test_the_gpu_inventory_holds_dra_nodes_whatever_their_state():
    usage = usage_of(cluster_items())

    assert usage.gpu_nodes == {
        "a": GpuNode("a", 2, H100),
        "b": GpuNode("b", 2, H100),
        "c": GpuNode("c", 4, H100),  # NotReady: its pods still hold its GPUs
        "d": GpuNode("d", 4, H100),  # allocatable 4 and DRA 4: 4
        "e": GpuNode("e", 2, None),
    }


def test_the_gpu_inventory_lists_the_pods_holding_claimed_gpus():
    usage = usage_of(cluster_items())

    # plugin by its own request; the others by their claims (mig-0 and mig-1 share one), with
    # the UUIDs of the physical GPUs their devices are on (a MIG device: its parentUUID), which
    # the slices name and NVML reports; waiting is unbound
    assert usage.gpu_pods == (
        GpuPod("a", "vision", "train", "uid-vision-train", ("GPU-a0", "GPU-a1")),
        GpuPod("b", "nlp", "whole", "uid-nlp-whole", ("GPU-b1",)),
        GpuPod("b", "vision", "mig-0", "uid-vision-mig-0", ("GPU-b0",)),
        GpuPod("b", "vision", "mig-1", "uid-vision-mig-1", ("GPU-b0",)),
        GpuPod("c", "nlp", "stuck", "uid-nlp-stuck", ("GPU-c0",)),
        GpuPod("d", "vision", "plugin", "uid-vision-plugin"),
        GpuPod("e", "nlp", "plain", "uid-nlp-plain", ("GPU-e0",)),
    )


def test_dra_usage_is_attributed_to_the_flavor_of_its_devices_node():
    usage = usage_of(cluster_items())

    # vision: two-gpus 2 + mig-shared 0.125 (once, for two pods) + plugin's own 1 = 3.125
    assert usage.namespaces["vision"].allocated[GPU] == D("3.125")
    # nlp: whole-b 1 + on-c 1 + on-e 1 = 3; pending-one 1
    assert usage.namespaces["nlp"].allocated[GPU] == D(3)
    assert usage.namespaces["nlp"].pending[GPU] == D(1)
    assert usage.namespace_flavors == {
        # train, mig-0, mig-1, plugin: 4 cores on H100 nodes; GPUs all on H100
        "vision": {H100: {"cpu": D(4), GPU: D("3.125")}},
        # whole (b) and stuck (c, NotReady) on H100: 2 cores, 2 GPUs; plain on unlabelled e
        # and the pending claim have no flavor
        "nlp": {H100: {"cpu": D(2), GPU: D(2)}},
    }
    assert usage.flavor_allocated == {
        "cv": {H100: {"cpu": D(4), GPU: D("3.125")}},
        "lang": {H100: {"cpu": D(2), GPU: D(2)}},
    }


def test_stored_rows_carry_the_product_and_the_rest_stays_on_the_empty_flavor():
    usage = usage_of(cluster_items())
    rows = {}
    for name, ns_usage in usage.namespaces.items():
        by_flavor = usage.namespace_flavors.get(name, {})
        rows[name] = {
            flavor: amounts[GPU] for flavor, amounts in by_flavor.items() if GPU in amounts
        }
        rows[name][""] = ns_usage.allocated[GPU] - sum(rows[name].values(), D(0))
    # what store_usage will write: vision all on H100; nlp 2 on H100, e's 1 on ""
    assert rows == {"vision": {H100: D("3.125"), "": D(0)}, "nlp": {H100: D(2), "": D(1)}}


def test_without_nodes_capacity_and_flavors_are_the_aggregations():
    items = cluster_items()
    nodes = [i for i in items if i["kind"] == "Node"]
    pods = [i for i in items if i["kind"] == "Pod"]
    base = aggregate(nodes, pods, TEAMS, parse_quantity=parse_quantity)
    objects = dra.split_dra_items(cluster_doc())

    usage = dra.add_dra_usage(base, dra.dra_usage(objects, pods), TEAMS)

    # only d's 4 device-plugin GPUs
    assert usage.capacity[GPU] == D(4)
    assert usage.flavors == base.flavors
    assert usage.namespace_flavors == base.namespace_flavors
    assert usage.gpu_nodes == base.gpu_nodes == {"d": GpuNode("d", 4, H100)}


def test_a_node_with_more_dra_gpus_than_plugin_gpus_counts_the_dra_figure():
    items = [node("x", gpus=2), resource_slice("x", [whole(f"gpu-{i}", f"U{i}") for i in range(3)])]

    usage = usage_of(items, {})

    assert usage.capacity[GPU] == D(3)
    assert usage.flavors[H100][GPU] == D(3)
    assert usage.gpu_nodes == {"x": GpuNode("x", 3, H100)}
    assert usage.notes == (
        "DRA: node x advertises 2 nvidia.com/gpu (device plugin) and publishes 3 DRA GPUs: "
        "counted once, as 3",
    )


def test_a_cordoned_node_and_the_gpu_count_label():
    cordoned = node("y", unschedulable=True)
    cordoned["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"
    items = [cordoned, resource_slice("y", [whole("gpu-0", "U0"), whole("gpu-1", "U1")])]

    usage = usage_of(items, {})

    assert GPU not in usage.capacity
    assert usage.flavors == {}
    # GPU feature discovery's count of physical GPUs wins in the inventory
    assert usage.gpu_nodes == {"y": GpuNode("y", 8, H100)}


def test_physical_gpu_identity():
    def device(kind, name, uuid=None, parent=None):
        return dra.SliceDevice("gpu.nvidia.com", "p", name, kind, 0, "n", uuid, parent)

    assert dra.physical_gpu(device("gpu", "gpu-0", uuid="GPU-1")) == ("GPU-1", False)
    assert dra.physical_gpu(device("gpu", "gpu-0")) == ("gpu-0", False)
    assert dra.physical_gpu(device("mig", "gpu-0-mig-1g10gb-19-0", parent="GPU-1")) == (
        "GPU-1",
        False,
    )
    assert dra.physical_gpu(device("mig", "gpu-2-mig-1g10gb-19-3")) == ("gpu-2", False)
    assert dra.physical_gpu(device("mig", "odd")) == ("odd", True)
    assert dra.physical_gpu(device("vfio", "gpu-0")) == (None, False)


def test_a_parentless_oddly_named_mig_device_is_a_gpu_of_its_own_with_a_note():
    slices = [
        resource_slice("z", [mig("odd-a", 0), mig("odd-b", 1)]),
        {  # a pool with no node (network-attached): never capacity
            "spec": {
                "driver": "gpu.nvidia.com",
                "pool": {"name": "shared", "generation": 1},
                "allNodes": True,
                "devices": [whole("gpu-0", "S0")],
            }
        },
        {  # another driver: not GPUs
            "spec": {
                "driver": "other.example.com",
                "nodeName": "z",
                "pool": {"name": "z", "generation": 1},
                "devices": [whole("gpu-9", "O9")],
            }
        },
    ]
    notes = []

    assert dra.node_gpus(dra.slice_devices(slices), notes) == {"z": 2}
    assert notes == [
        "DRA: ResourceSlices of pools shared name no node (spec.nodeName): their GPUs are not "
        "counted as capacity",
        "DRA: MIG devices z/odd-a, z/odd-b name no parentUUID: each counted as a physical GPU "
        "of its own",
    ]


def test_only_the_newest_generation_of_a_pool_is_capacity():
    items = [
        node("a"),
        resource_slice("a", [whole(f"gpu-{i}", f"OLD{i}") for i in range(8)], generation=1),
        resource_slice("a", [whole("gpu-0", "NEW0")], generation=2),
    ]

    assert usage_of(items, {}).capacity[GPU] == D(1)


# ---------------------------------------------------------------- end to end


@pytest.mark.django_db
def test_collect_usage_prints_dra_capacity_and_stores_the_product_flavor():
    out = StringIO()
    call_command("collect_usage", "--snapshot", str(FIXTURE), "--print", stdout=out)
    doc = json.loads(out.getvalue())

    # gpu-1: 8 device-plugin GPUs; dra-1: 8 whole GPUs; dra-2: 3 MIG devices of GPU-dra2-0 and
    # GPU-dra2-1 → 2 physical GPUs: 8 + 8 + 2 = 18, all three nodes H100
    # and the DeviceClasses select dra-1's 8 whole GPUs and dra-2's 3 MIG devices (Rule 7)
    capacity = {
        "cpu": 3 * 64,
        "memory": 3 * 256 * GI,
        GPU: 18,
        "pods": 3 * 110,
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": 8,
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": 3,
    }
    assert doc["capacity"] == capacity
    assert doc["flavors"] == {H100: capacity}

    call_command("collect_usage", "--snapshot", str(FIXTURE), stdout=StringIO())
    rows = {
        (r.namespace, r.resource, r.flavor): (r.allocated, r.pending)
        for r in UsageSample.objects.filter(resource=GPU)
    }
    # ml-c's MIG claims on dra-2 (0.125 + 0.5 + 0.125) carry dra-2's product
    assert rows[("ml-c", GPU, H100)] == (D("0.75"), D(0))
    assert ("ml-c", GPU, "") not in rows
    # ml-a: plugin-train 2 on gpu-1 + whole-gpu 1 + shared-gpus 2 on dra-1, all H100;
    # plugin-wait's pending GPU on the "" row
    assert rows[("ml-a", GPU, H100)] == (D(5), D(0))
    assert rows[("ml-a", GPU, "")] == (D(0), D(1))


def test_the_live_collector_gives_the_snapshots_capacity_and_flavors(kubeapi, tmp_path):
    items = cluster_items()
    kubeapi.load([i for i in items if i["kind"] != "ResourceClaimTemplate"])
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster_doc()))

    live = k8s_usage.collect(kubeapi.api_client(), TEAMS, page_size=2)
    snapshot = k8s_usage.from_snapshot(path, TEAMS)

    assert live.to_json_dict(include_teams=True) == snapshot.to_json_dict(include_teams=True)
    assert live.namespace_flavors == snapshot.namespace_flavors == usage_of(items).namespace_flavors
    assert live.gpu_nodes == snapshot.gpu_nodes
    assert live.gpu_pods == snapshot.gpu_pods
    assert live.notes == snapshot.notes
    assert snapshot.capacity[GPU] == D(10)


# ---------------------------------------------------------------- chargeback

# The hour test_dra_chargeback.py bills (eight 1g.10gb claims of one H100 held through it).
H0 = datetime(2025, 5, 14, 10, tzinfo=UTC)
