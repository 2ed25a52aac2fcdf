"""Tests for monitoring.domain.aggregate: pods and nodes → capacity, allocation and demand."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from bench import cluster_gen
from monitoring.domain.aggregate import (
    UNASSIGNED,
    ClusterUsage,
    GpuNode,
    GpuPod,
    NodeCapacity,
    aggregate,
    cached_parser,
    gpu_node,
    json_number,
    node_capacity,
    parse_list_dump,
    pod_request,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "monitoring" / "fixtures" / "demo_cluster.json"
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
KI, MI, GI = 2**10, 2**20, 2**30
D = Decimal


# ---------------------------------------------------------------- literal builders


def ctr(requests=None, limits=None, *, restart_policy=None, name="c"):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    out = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def pod(
    containers,
    *,
    init=None,
    overhead=None,
    namespace="team-a",
    node=None,
    phase="Running",
    name="p",
):
    spec = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if node is not None:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name, allocatable, *, product=None, ready="True", unschedulable=False):
    labels = {"kubernetes.io/hostname": name}
    if product is not None:
        labels["nvidia.com/gpu.product"] = product
    spec = {"unschedulable": True} if unschedulable else {}
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": conditions},
    }


# ---------------------------------------------------------------- pod_request


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(
            pod([ctr({"cpu": "500m", "memory": "1Gi"})]),
            {"cpu": D("0.5"), "memory": D(GI)},
            id="one container",
        ),
        pytest.param(
            pod([ctr({"cpu": "1", "memory": "2Gi"}), ctr({"cpu": "250m", "memory": "512Mi"})]),
            {"cpu": D("1.25"), "memory": D(2 * GI + 512 * MI)},
            id="containers are summed",
        ),
        pytest.param(
            pod([ctr({"cpu": "500m"}, {"cpu": "2", "memory": "4Gi", GPU: "1"})]),
            {"cpu": D("0.5"), "memory": D(4 * GI), GPU: D(1)},
            id="a limit without a request becomes the request",
        ),
        pytest.param(
            pod([ctr({"cpu": "0"}, {"cpu": "2"})]),
            {"cpu": D(0)},
            id="an explicit zero request wins over the limit",
        ),
        pytest.param(pod([ctr(), {"name": "bare", "image": "x"}]), {}, id="no resources at all"),
        pytest.param(
            pod(
                [ctr({"cpu": "1", "memory": "2Gi"})],
                init=[ctr({"cpu": "4", "memory": "1Gi"})],
            ),
            {"cpu": D(4), "memory": D(2 * GI)},
            id="a regular init container raises the peak per resource",
        ),
        pytest.param(
            pod(
                [ctr({"cpu": "1", "memory": "1Gi"})],
                init=[
                    ctr({"cpu": "500m", "memory": "256Mi"}, restart_policy="Always"),
                    ctr({"cpu": "2", "memory": "8Gi"}),
                ],
            ),
            {"cpu": D("2.5"), "memory": D(8 * GI + 256 * MI)},
            id="a sidecar before an init container runs next to it",
        ),
        pytest.param(
            pod(
                [ctr({"cpu": "1", "memory": "1Gi"})],
                init=[
                    ctr({"cpu": "2", "memory": "8Gi"}),
                    ctr({"cpu": "500m", "memory": "256Mi"}, restart_policy="Always"),
                ],
            ),
            {"cpu": D(2), "memory": D(8 * GI)},
            id="a sidecar after an init container does not",
        ),
        pytest.param(
            pod(
                [ctr({"cpu": "1", "memory": "1Gi"})],
                init=[ctr({"cpu": "500m", "memory": "256Mi"}, restart_policy="Always")],
            ),
            {"cpu": D("1.5"), "memory": D(GI + 256 * MI)},
            id="a sidecar adds to the regular containers",
        ),
        pytest.param(
            pod(
                [ctr({"cpu": "1"})],
                init=[
                    ctr({"cpu": "1"}, restart_policy="Always"),
                    ctr({"cpu": "5"}),
                    ctr({"cpu": "2"}, restart_policy="Always"),
                ],
            ),
            {"cpu": D(6)},
            id="only sidecars declared before count under an init container",
        ),
        pytest.param(
            pod([ctr({"cpu": "1", "memory": "1Gi"})], overhead={"cpu": "250m", "memory": "160Mi"}),
            {"cpu": D("1.25"), "memory": D(GI + 160 * MI)},
            id="overhead is added on top",
        ),
        pytest.param(
            pod(
                [ctr({"cpu": "100m"})],
                init=[ctr({"cpu": "4", "memory": "1Gi"})],
                overhead={"cpu": "250m"},
            ),
            {"cpu": D("4.25"), "memory": D(GI)},
            id="overhead is added after the init peak",
        ),
        pytest.param(
            pod(
                [
                    ctr(None, {GPU: "8", "rdma/rdma_shared_device_a": "1"}),
                    ctr({"nvidia.com/mig-1g.10gb": "2"}, {"nvidia.com/mig-1g.10gb": "2"}),
                ]
            ),
            {GPU: D(8), "rdma/rdma_shared_device_a": D(1), "nvidia.com/mig-1g.10gb": D(2)},
            id="extended resources count like any other",
        ),
    ],
)
def test_pod_request_follows_the_scheduler(the_pod, expected):
    assert pod_request(the_pod, parse_quantity) == expected


def test_pod_request_ignores_the_phase():
    finished = pod([ctr({GPU: "1"})], phase="Succeeded")
    assert pod_request(finished, parse_quantity) == {GPU: D(1)}


millis = st.integers(min_value=0, max_value=64_000)


@settings(deadline=None, derandomize=True)  # no deadline: a busy machine is not a failure
@given(
    regular=st.lists(millis, min_size=1, max_size=4),
    inits=st.lists(st.tuples(millis, st.booleans()), max_size=5),
    overhead=millis,
)
def test_pod_request_is_never_below_what_runs_at_any_one_time(regular, inits, overhead):
    the_pod = pod(
        [ctr({"cpu": f"{m}m"}) for m in regular],
        init=[ctr({"cpu": f"{m}m"}, restart_policy="Always" if s else None) for m, s in inits],
        overhead={"cpu": f"{overhead}m"},
    )
    cpu = pod_request(the_pod, parse_quantity)["cpu"]
    sidecars = [m for m, s in inits if s]
    steady = sum(regular) + sum(sidecars)
    peaks = [steady]
    before = 0
    for m, is_sidecar in inits:
        if is_sidecar:
            before += m
        else:
            peaks.append(m + before)
    assert cpu * 1000 == max(peaks) + overhead


# ---------------------------------------------------------------- node_capacity


@pytest.mark.parametrize(
    ("ready", "unschedulable", "expected_ready", "schedulable"),
    [
        ("True", False, True, True),
        ("False", False, False, False),
        ("Unknown", False, False, False),
        (None, False, False, False),
        ("True", True, True, False),
    ],
)
def test_node_counts_only_when_ready_and_not_cordoned(
    ready, unschedulable, expected_ready, schedulable
):
    info = node_capacity(
        node("n1", {"cpu": "4"}, ready=ready, unschedulable=unschedulable), parse_quantity
    )
    assert (info.ready, info.schedulable) == (expected_ready, schedulable)


def test_node_capacity_reads_allocatable_and_flavor():
    info = node_capacity(
        node("gpu-1", {"cpu": "191500m", "memory": "2112880640Ki", GPU: "8"}, product=H100),
        parse_quantity,
    )
    assert info == NodeCapacity(
        name="gpu-1",
        flavor=H100,
        allocatable={"cpu": D("191.5"), "memory": D(2015 * GI), GPU: D(8)},
        ready=True,
        unschedulable=False,
    )


def test_node_capacity_falls_back_to_capacity_without_allocatable():
    raw = node("cpu-1", {})
    del raw["status"]["allocatable"]
    raw["status"]["capacity"] = {"cpu": "64"}
    info = node_capacity(raw, parse_quantity)
    assert (info.flavor, info.allocatable) == (None, {"cpu": D(64)})


# ---------------------------------------------------------------- aggregate


NODES = [
    node("gpu-a", {"cpu": "192", "memory": "2015Gi", GPU: "8"}, product=H100),
    node("gpu-b", {"cpu": "96", "memory": "1Ti", GPU: "8"}, product=A100),
    node("gpu-c", {"cpu": "192", "memory": "2015Gi", GPU: "8"}, product=H100, ready="False"),
    node("gpu-d", {"cpu": "192", "memory": "2015Gi", GPU: "8"}, product=H100, unschedulable=True),
    node("cpu-a", {"cpu": "64", "memory": "256Gi"}),
]
TEAMS = {"research-ml": "research", "research-nlp": "research", "prod-serving": "prod"}
PODS = [
    pod([ctr({"cpu": "16", "memory": "64Gi", GPU: "4"})], namespace="research-ml", node="gpu-a"),
    pod(
        [ctr(None, {"cpu": "8", "memory": "32Gi", GPU: "2"})],
        namespace="research-ml",
        node="gpu-b",
        phase="Pending",
    ),
    pod([ctr({"cpu": "32", "memory": "256Gi", GPU: "8"})], namespace="research-ml"),
    pod([ctr({GPU: "8"})], namespace="research-ml", node="gpu-a", phase="Succeeded"),
    pod([ctr({GPU: "8"})], namespace="research-nlp", node="gpu-b", phase="Failed"),
    pod([ctr({"cpu": "4", "memory": "16Gi", GPU: "1"})], namespace="research-nlp", node="gpu-c"),
    pod(
        [ctr({"cpu": "2", "memory": "8Gi", GPU: "1"})],
        init=[ctr({"cpu": "500m", "memory": "256Mi"}, restart_policy="Always")],
        namespace="research-nlp",
        node="gpu-d",
    ),
    pod([ctr({"cpu": "100m", "memory": "70Mi"})], namespace="kube-system", node="cpu-a"),
    pod([ctr({"cpu": "1", "memory": "1Gi"})], namespace="kube-system", node="gone-node"),
    pod([ctr({"cpu": "1"})], overhead={"cpu": "250m"}, namespace="scratch"),
]


def test_it_aggregates_a_small_cluster():
    usage = aggregate(NODES, PODS, TEAMS, parse_quantity=parse_quantity)
    assert usage.to_json_dict() == {
        "capacity": {"cpu": 352, "memory": 3295 * GI, GPU: 16},
        "flavors": {
            A100: {"cpu": 96, "memory": 1024 * GI, GPU: 8},
            H100: {"cpu": 192, "memory": 2015 * GI, GPU: 8},
        },
        "namespaces": {
            "kube-system": {
                "team": "unassigned",
                "allocated": {"cpu": 1.1, "memory": GI + 70 * MI},
                "pending": {},
            },
            "prod-serving": {"team": "prod", "allocated": {}, "pending": {}},
            "research-ml": {
                "team": "research",
                "allocated": {"cpu": 24, "memory": 96 * GI, GPU: 6},
                "pending": {"cpu": 32, "memory": 256 * GI, GPU: 8},
            },
            "research-nlp": {
                "team": "research",
                "allocated": {"cpu": 6.5, "memory": 24 * GI + 256 * MI, GPU: 2},
                "pending": {},
            },
            "scratch": {"team": "unassigned", "allocated": {}, "pending": {"cpu": 1.25}},
        },
    }


def test_it_sums_teams_and_flavors_for_chargeback():
    usage = aggregate(NODES, PODS, TEAMS, parse_quantity=parse_quantity)
    doc = usage.to_json_dict(include_teams=True)
    assert doc["teams"] == {
        "prod": {"allocated": {}, "pending": {}},
        "research": {
            "allocated": {"cpu": 30.5, "memory": 120 * GI + 256 * MI, GPU: 8},
            "pending": {"cpu": 32, "memory": 256 * GI, GPU: 8},
        },
        "unassigned": {
            "allocated": {"cpu": 1.1, "memory": GI + 70 * MI},
            "pending": {"cpu": 1.25},
        },
    }
    # Pods on the NotReady (gpu-c) and cordoned (gpu-d) H100 nodes still hold H100s; the pod on a
    # node missing from the list has no flavor and the cpu-a pod's node has none either.
    assert doc["flavor_allocated"] == {
        "research": {
            A100: {"cpu": 8, "memory": 32 * GI, GPU: 2},
            H100: {"cpu": 22.5, "memory": 88 * GI + 256 * MI, GPU: 6},
        },
    }
    assert usage.excluded_nodes == ("gpu-c", "gpu-d")
    assert usage.pod_counts == {"allocated": 6, "pending": 2, "finished": 2}


def test_it_counts_pods_on_excluded_nodes_as_allocated_but_not_their_capacity():
    nodes = [node("gpu-c", {GPU: "8"}, product=H100, ready="False")]
    pods = [pod([ctr({GPU: "8"})], namespace="research-ml", node="gpu-c")]
    usage = aggregate(nodes, pods, TEAMS, parse_quantity=parse_quantity)
    assert usage.capacity == {}
    assert usage.flavors == {}
    assert usage.namespaces["research-ml"].allocated == {GPU: D(8)}


def test_the_default_document_has_exactly_the_design_keys():
    usage = aggregate([], [], {}, parse_quantity=parse_quantity)
    assert usage.to_json_dict() == {"capacity": {}, "flavors": {}, "namespaces": {}}


def test_a_pod_without_namespace_belongs_to_default():
    the_pod = pod([ctr({"cpu": "1"})])
    del the_pod["metadata"]["namespace"]
    usage = aggregate([], [the_pod], {}, parse_quantity=parse_quantity)
    assert usage.namespaces["default"].team == UNASSIGNED
    assert usage.namespaces["default"].pending == {"cpu": D(1)}


def test_it_is_the_same_whatever_the_pod_order():
    forward = aggregate(NODES, PODS, TEAMS, parse_quantity=parse_quantity)
    backward = aggregate(NODES, PODS[::-1], TEAMS, parse_quantity=parse_quantity)
    assert forward == backward
    assert json.dumps(forward.to_json_dict(include_teams=True)) == json.dumps(
        backward.to_json_dict(include_teams=True)
    )


def test_it_streams_nodes_and_pods_from_generators():
    usage = aggregate((n for n in NODES), (p for p in PODS), TEAMS, parse_quantity=parse_quantity)
    assert usage == aggregate(NODES, PODS, TEAMS, parse_quantity=parse_quantity)


def test_it_parses_each_distinct_quantity_once():
    calls = []

    def counting(quantity):
        calls.append(quantity)
        return parse_quantity(quantity)

    pods = [pod([ctr({"cpu": "500m", "memory": "1Gi"})], node="n") for _ in range(1000)]
    usage = aggregate([], pods, {}, parse_quantity=counting)
    assert sorted(calls) == ["1Gi", "500m"]
    assert usage.namespaces["team-a"].allocated == {"cpu": D(500), "memory": D(1000 * GI)}


def test_cached_parser_does_not_cache_errors():
    parse = cached_parser(parse_quantity)
    for _ in range(2):
        with pytest.raises(ValueError):
            parse("12XB")
    assert parse(8) == D(8)


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        (D("8.000"), 8),
        (D(2015 * GI), 2015 * GI),
        (D("0.500"), 0.5),
        (D("1234.567"), 1234.567),
        (D("1E+3"), 1000),
    ],
)
def test_json_numbers_are_ints_when_integral_else_floats(amount, expected):
    rendered = json_number(amount)
    assert (rendered, type(rendered)) == (expected, type(expected))


# ---------------------------------------------------------------- parse_list_dump


def test_parse_list_dump_splits_a_kubectl_list():
    doc = {
        "kind": "List",
        "items": [
            {"kind": "Node", "metadata": {"name": "n1"}},
            {"kind": "Pod", "metadata": {"name": "p1"}},
            {"kind": "Namespace", "metadata": {"name": "ns"}},
            {"kind": "Pod", "metadata": {"name": "p2"}},
        ],
    }
    nodes, pods = parse_list_dump(doc)
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]
    assert [p["metadata"]["name"] for p in pods] == ["p1", "p2"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("NodeList", (1, 0)), ("PodList", (0, 1))],
)
def test_parse_list_dump_accepts_api_lists_whose_items_have_no_kind(kind, expected):
    nodes, pods = parse_list_dump({"kind": kind, "items": [{"metadata": {"name": "x"}}]})
    assert (len(nodes), len(pods)) == expected


@pytest.mark.parametrize(
    "doc",
    [{"kind": "Pod", "metadata": {}}, {"kind": "ConfigMap", "items": []}, {"items": "nope"}],
)
def test_parse_list_dump_rejects_other_documents(doc):
    with pytest.raises(ValueError):
        parse_list_dump(doc)


# ---------------------------------------------------------------- the demo fixture


@pytest.fixture(scope="module")
def demo_usage() -> ClusterUsage:
    nodes, pods = parse_list_dump(json.loads(DEMO.read_text()))
    teams = {ns: ns.split("-")[0] for ns in cluster_gen.DEMO_NAMESPACES}
    return aggregate(nodes, pods, teams, parse_quantity=parse_quantity)


def test_the_demo_cluster_has_exactly_1000_schedulable_gpus(demo_usage):
    assert demo_usage.capacity[GPU] == 1000
    assert demo_usage.flavors == {
        H100: {
            "cpu": D(125 * 192),
            "ephemeral-storage": D(125 * 3200 * GI),
            "hugepages-1Gi": D(0),
            "hugepages-2Mi": D(0),
            "memory": D(125 * 2015 * GI),
            "pods": D(125 * 110),
            GPU: D(1000),
        }
    }
    assert demo_usage.capacity["cpu"] == 125 * 192 + 16 * 64
    assert demo_usage.capacity["memory"] == 125 * 2015 * GI + 16 * 256 * GI
    assert demo_usage.excluded_nodes == ("gpu-h100-125", "gpu-h100-126")


def test_the_demo_cluster_has_the_advertised_gpu_usage(demo_usage):
    gpus = {
        ns: (usage.team, usage.allocated.get(GPU, 0), usage.pending.get(GPU, 0))
        for ns, usage in demo_usage.namespaces.items()
    }
    assert gpus == {
        "cv-vision": ("cv", 64, 16),
        "kube-system": (UNASSIGNED, 0, 0),
        "platform-tools": ("platform", 0, 0),
        "prod-inference": ("prod", 24, 1),
        "prod-training": ("prod", 96, 0),
        "research-ml": ("research", 36, 16),
        "research-nlp": ("research", 20, 8),
        "shared-batch": (UNASSIGNED, 224, 8),
        "speech-asr": ("speech", 34, 4),
    }
    # 554 pods: 399 kube-system (143 + 127 + 127 DaemonSet pods, 2 CoreDNS) and 155 workload pods,
    # of which 13 are unbound and 19 finished (10 Succeeded data-prep, 3 Failed, 6 CI runs).
    assert demo_usage.pod_counts == {"allocated": 522, "pending": 13, "finished": 19}
    # 16 of the 498 allocated GPUs sit on the NotReady and the cordoned node.
    assert sum(by[H100].get(GPU, 0) for by in demo_usage.flavor_allocated.values()) == 498


# seed_demo's limits (cores, Gi, GPUs) per namespace: the team limit split by Namespace.share
# (research-ml 2 : research-nlp 1, prod-training 3 : prod-inference 1), GPUs in whole devices.
DEMO_RESOURCE_QUOTAS = {
    "research-ml": (D(1024) / 3, D(4096) / 3, 43),
    "research-nlp": (D(512) / 3, D(2048) / 3, 21),
    "prod-training": (768, 3072, 102),
    "prod-inference": (256, 1024, 34),
    "cv-vision": (512, 2048, 96),
    "speech-asr": (256, 1024, 48),
    "platform-tools": (128, 512, 16),
}


def test_the_demo_cluster_fits_the_demo_resource_quotas(demo_usage):
    allocated = {
        ns: (
            usage.allocated.get("cpu", 0),
            usage.allocated.get("memory", 0) / GI,
            usage.allocated.get(GPU, 0),
        )
        for ns, usage in demo_usage.namespaces.items()
        if ns in DEMO_RESOURCE_QUOTAS
    }
    assert allocated == {
        "research-ml": (208, 1152, 36),
        "research-nlp": (128, 640, 20),
        "prod-training": (576, 2944, 96),
        "prod-inference": (D("193.5"), D("960.75"), 24),
        "cv-vision": (450, D("1985.25"), 64),
        "speech-asr": (184, 928, 34),
        "platform-tools": (D("30.5"), D("120.3125"), 0),
    }
    for ns, amounts in allocated.items():
        assert all(a <= q for a, q in zip(amounts, DEMO_RESOURCE_QUOTAS[ns], strict=True)), ns


def test_the_demo_cluster_never_overcommits_a_node():
    nodes, pods = parse_list_dump(json.loads(DEMO.read_text()))
    parse = cached_parser(parse_quantity)
    held: dict[str, dict[str, Decimal]] = {}
    for p in pods:
        if p["status"]["phase"] in ("Running", "Pending") and "nodeName" in p["spec"]:
            for res, amount in pod_request(p, parse).items():
                per_node = held.setdefault(p["spec"]["nodeName"], {})
                per_node[res] = per_node.get(res, 0) + amount
    for n in nodes:
        info = node_capacity(n, parse)
        for res, amount in held.get(info.name, {}).items():
            assert amount <= info.allocatable[res], (info.name, res)


def test_the_committed_demo_fixture_is_what_the_generator_prints():
    """Nodes and pods come from the generator, byte for byte; after them the fixture holds what
    an earlier sync left (scripts/make_demo_cluster.py), which the generator does not write."""
    items = json.loads(DEMO.read_text())["items"]
    ours = [
        item
        for item in items
        if item["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "fairshare"
    ]
    assert ours and items[-len(ours) :] == ours
    out, expected = io.StringIO(), io.StringIO()
    cluster_gen.write_list(cluster_gen.demo_cluster()["items"], out)
    cluster_gen.write_list(items[: -len(ours)], expected)
    assert out.getvalue() == expected.getvalue()
    full = io.StringIO()
    cluster_gen.write_list(items, full)
    assert full.getvalue() == DEMO.read_text()  # the committed layout: one item a line
    assert len(DEMO.read_text()) < 1_500_000


# ---------------------------------------------------------------- generator and purity


def test_the_scale_generator_is_deterministic_and_lazy():
    nodes = cluster_gen.generate_nodes(20, seed=7)
    assert nodes == cluster_gen.generate_nodes(20, seed=7)
    pods = cluster_gen.generate_pods(500, nodes, seed=7)
    assert not isinstance(pods, list)
    pods = list(pods)
    assert pods == list(cluster_gen.generate_pods(500, nodes, seed=7))
    names = {n["metadata"]["name"] for n in nodes}
    assert {p["spec"]["nodeName"] for p in pods if "nodeName" in p["spec"]} <= names
    usage = aggregate(nodes, pods, {}, parse_quantity=parse_quantity)
    assert sum(usage.pod_counts.values()) == 500


def test_the_aggregate_module_imports_only_the_standard_library():
    code = (
        "import sys, monitoring.domain.aggregate; "
        "bad = [m for m in sys.modules if m.split('.')[0] in {'django', 'kubernetes', 'pynvml'}]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# ---------------------------------------------------------------- GPU inventory (ingest checks)


@pytest.mark.parametrize(
    ("labels", "allocatable", "expected"),
    [
        ({"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": H100}, {GPU: "8"}, (8, H100)),
        # MIG: the slices are allocatable, the label still counts the physical GPUs.
        ({"nvidia.com/gpu.count": "4"}, {"nvidia.com/mig-1g.10gb": "28"}, (4, None)),
        ({}, {GPU: "2"}, (2, None)),
        ({"nvidia.com/gpu.count": "x"}, {GPU: "2"}, (2, None)),
        ({}, {"cpu": "64"}, None),
        ({"nvidia.com/gpu.count": "0"}, {GPU: "0"}, None),
    ],
)
def test_gpu_node_counts_physical_gpus(labels, allocatable, expected):
    the_node = node("n1", allocatable)
    the_node["metadata"]["labels"].update(labels)
    got = gpu_node(the_node, parse_quantity)
    assert (None if got is None else (got.gpus, got.product)) == expected


def test_the_inventory_lists_gpu_nodes_whatever_their_state_and_bound_gpu_pods():
    nodes = [
        node("g1", {GPU: "8"}, product=H100),
        node("g2", {GPU: "4"}, ready="False"),  # its pods still hold GPUs
        node("c1", {"cpu": "64"}),
    ]
    gpu = ctr(limits={GPU: "1"})
    mig = ctr(requests={"nvidia.com/mig-1g.10gb": "1"})
    pods = [
        pod([gpu], node="g1", name="train-0", namespace="team-a"),
        pod([mig], node="g2", name="mig-0", namespace="team-b"),
        pod([ctr(requests={"cpu": "1"})], node="g1", name="cpu-only"),
        pod([gpu], name="waiting"),  # not bound: demand, not on a node
        pod([gpu], node="g1", name="done", phase="Succeeded"),
    ]
    pods[0]["metadata"]["uid"] = "u-1"
    usage = aggregate(nodes, pods, {}, parse_quantity=parse_quantity)
    assert usage.gpu_nodes == {"g1": GpuNode("g1", 8, H100), "g2": GpuNode("g2", 4, None)}
    assert usage.gpu_pods == (
        GpuPod("g1", "team-a", "train-0", "u-1"),
        GpuPod("g2", "team-b", "mig-0", ""),
    )
