"""Usage collection: through the fake API server, from a snapshot, and the collect_usage command."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from kube.errors import K8sTransient
from monitoring import collection
from monitoring.collectors import k8s_usage
from monitoring.exceptions import CollectorError
from monitoring.models import CapacitySnapshot, UsageSample

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "monitoring" / "fixtures" / "demo_cluster.json"
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
GI = 2**30


def node(name, *, gpus=0, product=None, ready=True, unschedulable=False):
    labels = {"kubernetes.io/hostname": name}
    allocatable = {"cpu": "64", "memory": "256Gi"}
    if gpus:
        allocatable[GPU] = str(gpus)
        labels["nvidia.com/gpu.product"] = product
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name, namespace, requests, *, node_name=None, phase="Running"):
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


@pytest.fixture
def small_cluster(kubeapi):
    kubeapi.load(
        [
            node("gpu-1", gpus=8, product=H100),
            node("gpu-2", gpus=8, product=H100),
            node("gpu-3", gpus=8, product=H100, ready=False),
            node("cpu-1"),
            node("cpu-2", unschedulable=True),
        ]
    )
    pods = [
        pod(f"train-{i}", "team-a-ml", {GPU: "2", "cpu": "4"}, node_name="gpu-1") for i in range(3)
    ]
    pods += [
        pod(f"web-{i}", "team-b-ml", {"cpu": "500m", "memory": "1Gi"}, node_name="cpu-1")
        for i in range(4)
    ]
    pods.append(pod("queued", "team-a-ml", {GPU: "4"}))
    pods.append(pod("done", "team-a-ml", {GPU: "8"}, node_name="gpu-2", phase="Succeeded"))
    pods.append(pod("crashed", "team-b-ml", {GPU: "8"}, node_name="gpu-2", phase="Failed"))
    pods.append(pod("stray", "sandbox", {GPU: "1"}, node_name="gpu-2"))
    kubeapi.load(pods)
    return kubeapi


def test_it_collects_nodes_and_live_pods_page_by_page(small_cluster):
    stats = {}

    usage = k8s_usage.collect(
        small_cluster.api_client(), {"team-a-ml": "team-a"}, page_size=2, stats=stats
    )

    # 5 nodes in pages of 2 → 3 LISTs; 9 live pods (2 finished ones filtered server-side) → 5;
    # one (empty) LIST each of the workload kinds and of the DRA kinds.
    assert small_cluster.counts == {
        ("list", "Node"): 3,
        ("list", "Pod"): 5,
        ("list", "Job"): 1,
        ("list", "PodGroup"): 1,
        ("list", "Event"): 1,
        ("list", "ResourceClaim"): 1,
        ("list", "ResourceSlice"): 1,
        ("list", "DeviceClass"): 1,
    }
    assert small_cluster.writes() == 0
    assert stats == {"nodes": 5, "pods": 9, "podgroups": 0, "vcjobs": 0, "events": 0}
    assert usage.capacity[GPU] == 16
    assert usage.capacity["cpu"] == 64 * 3
    assert usage.excluded_nodes == ("cpu-2", "gpu-3")
    assert usage.pod_counts == {"allocated": 8, "pending": 1, "finished": 0}
    assert usage.to_json_dict()["namespaces"] == {
        "sandbox": {"team": "unassigned", "allocated": {GPU: 1}, "pending": {}},
        "team-a-ml": {"team": "team-a", "allocated": {"cpu": 12, GPU: 6}, "pending": {GPU: 4}},
        "team-b-ml": {
            "team": "unassigned",
            "allocated": {"cpu": 2, "memory": 4 * GI},
            "pending": {},
        },
    }


def test_it_restarts_the_listing_after_a_transient_error(small_cluster):
    small_cluster.fault(500, verb="list", kind="Pod", times=1, retry_after=None)

    usage = k8s_usage.collect(small_cluster.api_client(), {}, page_size=100)

    assert usage.pod_counts["allocated"] == 8
    assert small_cluster.counts[("list", "Node")] == 2
    assert small_cluster.counts[("list", "Pod")] == 2
    assert small_cluster.counts[("list", "PodGroup")] == 2  # the whole observation restarts


def test_it_gives_up_when_the_api_keeps_failing(small_cluster):
    small_cluster.fault(503, verb="list", kind="Node", times=None, retry_after=None)

    with pytest.raises(K8sTransient):
        k8s_usage.collect(small_cluster.api_client(), {}, attempts=2)


def test_it_stores_a_collection_with_flavored_gpu_rows(cast, small_cluster):
    snapshot, n = collection.collect_usage(now=NOW, api_client=small_cluster.api_client())

    snapshot.refresh_from_db()
    assert snapshot.taken_at == NOW
    assert snapshot.source == "kubernetes"
    assert snapshot.nodes == 3
    assert snapshot.resources == {"cpu": "192", "memory": str(3 * 256 * GI), GPU: "16"}
    assert snapshot.flavors == {H100: {"cpu": "128", "memory": str(2 * 256 * GI), GPU: "16"}}
    rows = sorted(
        (s.namespace, s.team.slug if s.team else None, s.resource, s.flavor, s.allocated, s.pending)
        for s in UsageSample.objects.filter(taken_at=NOW)
    )
    assert rows == [
        ("sandbox", None, GPU, H100, Decimal(1), Decimal(0)),
        ("team-a-ml", "team-a", "cpu", "", Decimal(12), Decimal(0)),
        ("team-a-ml", "team-a", GPU, "", Decimal(0), Decimal(4)),
        ("team-a-ml", "team-a", GPU, H100, Decimal(6), Decimal(0)),
        ("team-b-ml", "team-b", "cpu", "", Decimal(2), Decimal(0)),
        ("team-b-ml", "team-b", "memory", "", Decimal(4 * GI), Decimal(0)),
    ]
    assert n == 6


def test_the_demo_snapshot_mode_stores_1000_schedulable_gpus(cast, settings):
    settings.FAIRSHARE_CLUSTER = f"snapshot:{DEMO}"

    snapshot, n = collection.collect_usage(now=NOW)

    assert snapshot.resources[GPU] == "1000"
    assert snapshot.flavors[H100][GPU] == "1000"
    assert snapshot.source.startswith("snapshot:")
    assert snapshot.nodes == 141
    assert n == UsageSample.objects.filter(taken_at=NOW).count() > 0
    allocated = sum(s.allocated for s in UsageSample.objects.filter(taken_at=NOW, resource=GPU))
    assert allocated == 498


def test_it_refuses_to_collect_when_disabled(cast, settings):
    settings.FAIRSHARE_CLUSTER = "disabled"

    with pytest.raises(CollectorError, match="disabled"):
        collection.collect_usage(now=NOW)
    assert not CapacitySnapshot.objects.filter(taken_at=NOW).exists()


# ---------------------------------------------------------------- the command


def test_print_outputs_designs_format_and_writes_nothing(cast):
    out = StringIO()
    before = CapacitySnapshot.objects.count()

    call_command("collect_usage", "--snapshot", str(DEMO), "--print", stdout=out)

    doc = json.loads(out.getvalue())
    assert sorted(doc) == ["capacity", "flavors", "namespaces"]
    assert doc["capacity"][GPU] == 1000
    assert isinstance(doc["capacity"]["memory"], int)
    assert doc["flavors"][H100][GPU] == 1000
    some = next(iter(doc["namespaces"].values()))
    assert sorted(some) == ["allocated", "pending", "team"]
    assert CapacitySnapshot.objects.count() == before
    assert UsageSample.objects.count() == 0


def test_print_names_teams_of_known_namespaces(cast, tmp_path):
    dump = tmp_path / "cluster.json"
    items = [
        node("gpu-1", gpus=8, product=H100),
        pod("p", "team-a-ml", {GPU: "8"}, node_name="gpu-1"),
    ]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    out = StringIO()

    call_command("collect_usage", "--snapshot", str(dump), "--print", stdout=out)

    assert json.loads(out.getvalue()) == {
        "capacity": {"cpu": 64, "memory": 256 * GI, GPU: 8},
        "flavors": {H100: {"cpu": 64, "memory": 256 * GI, GPU: 8}},
        "namespaces": {
            "team-a-ml": {"team": "team-a", "allocated": {GPU: 8}, "pending": {}},
            "team-b-ml": {"team": "team-b", "allocated": {}, "pending": {}},
        },
    }


def test_the_command_stores_a_collection_from_a_snapshot(cast):
    out = StringIO()

    call_command("collect_usage", "--snapshot", str(DEMO), stdout=out)

    snapshot = CapacitySnapshot.objects.order_by("-id").first()
    assert snapshot.resources[GPU] == "1000"
    assert UsageSample.objects.filter(taken_at=snapshot.taken_at).exists()
    assert "Stored collection" in out.getvalue()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read cluster snapshot"),
        ("{not json", "is not valid JSON"),
        ('{"kind": "Pod", "items": 3}', "cannot be read"),
        ("[1, 2]", "is not a Kubernetes List"),
    ],
)
def test_the_command_fails_clearly_on_a_bad_snapshot(cast, tmp_path, content, message):
    path = tmp_path / "dump.json"
    if content is not None:
        path.write_text(content)

    with pytest.raises(CommandError, match=message):
        call_command("collect_usage", "--snapshot", str(path), "--print", stdout=StringIO())


def test_the_command_exits_non_zero_on_a_missing_file(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "collect_usage",
            "--snapshot",
            str(tmp_path / "nope.json"),
            "--print",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1
    assert "cannot read cluster snapshot" in result.stderr
    assert "nope.json" in result.stderr


# ---------------------------------------------------------------- tasks


def test_the_collect_task_skips_when_collection_is_disabled(db, settings):
    from monitoring import tasks

    settings.FAIRSHARE_CLUSTER = "disabled"

    assert tasks.collect_usage() == {"skipped": "FAIRSHARE_CLUSTER=disabled"}
    assert not CapacitySnapshot.objects.exists()


def test_the_collect_task_stores_the_demo_snapshot(cast, settings):
    from monitoring import tasks

    settings.FAIRSHARE_CLUSTER = f"snapshot:{DEMO}"

    result = tasks.collect_usage()

    snapshot = CapacitySnapshot.objects.get(pk=result["snapshot"])
    assert snapshot.resources[GPU] == "1000"
    assert result["samples"] == UsageSample.objects.filter(taken_at=snapshot.taken_at).count()


# --------------------------------------------------------------------------- workloads


def gang_objects():
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "train-1234",
            "namespace": "team-a-ml",
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "1234",
                    "controller": True,
                }
            ],
        },
        "spec": {"minMember": 4, "queue": "team-a"},
        "status": {"phase": "Pending"},
    }
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a-ml"},
        "spec": {"minAvailable": 4, "queue": "team-a", "tasks": []},
    }
    pods = []
    for i in range(4):
        p = pod(f"train-worker-{i}", "team-a-ml", {GPU: "8"}, phase="Pending")
        p["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "train-1234"}
        pods.append(p)
    event = {
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "team-b-ml"},
        "involvedObject": {"kind": "ReplicaSet", "name": "web-5f6", "namespace": "team-b-ml"},
        "type": "Warning",
        "reason": "FailedCreate",
        "message": 'Error creating: pods "web-5f6-x" is forbidden: exceeded quota: fairshare, '
        "requested: requests.cpu=2, used: requests.cpu=8, limited: requests.cpu=8",
    }
    return [podgroup, job, *pods, event]


def test_it_collects_podgroups_jobs_and_events_into_workloads(small_cluster):
    small_cluster.load(gang_objects())
    stats = {}

    usage = k8s_usage.collect(
        small_cluster.api_client(), {"team-a-ml": "team-a"}, page_size=2, stats=stats
    )

    assert stats["podgroups"] == 1 and stats["vcjobs"] == 1 and stats["events"] == 1
    workloads = {(w.kind, w.name): w for w in usage.workloads}
    gang = workloads[("VolcanoJob", "train")]
    assert (gang.team, gang.queue, gang.gang_size, gang.gpus, gang.phase) == (
        "team-a",
        "team-a",
        4,
        32,
        "Pending",
    )
    refused = workloads[("ReplicaSet", "web-5f6")]
    assert refused.signal.code == "quota"
    # the gang's 32 GPUs, plus the one pod pending on its own ("queued", 4 GPUs)
    assert usage.namespaces["team-a-ml"].pending == {GPU: 36}
    assert usage.notes == ()


def test_it_collects_without_volcano_and_says_so(small_cluster):
    small_cluster.uninstall("scheduling.volcano.sh", "batch.volcano.sh")

    usage = k8s_usage.collect(small_cluster.api_client(), {}, page_size=100)

    assert usage.pod_counts["allocated"] == 8
    assert len(usage.notes) == 2
    assert "PodGroup CRD" in usage.notes[1]
    assert ("Pod", "queued") in {(w.kind, w.name) for w in usage.workloads}


def test_snapshot_mode_reads_podgroups_jobs_and_events(tmp_path):
    path = tmp_path / "cluster.json"
    items = [node("gpu-1", gpus=8, product=H100), *gang_objects()]
    path.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": items}))
    stats = {}

    usage = k8s_usage.from_snapshot(path, {"team-a-ml": "team-a"}, stats=stats)

    assert stats["podgroups"] == 1 and stats["events"] == 1
    assert usage.namespaces["team-a-ml"].pending == {GPU: 32}
    kinds = {(w.kind, w.name) for w in usage.workloads}
    assert kinds == {("VolcanoJob", "train"), ("ReplicaSet", "web-5f6")}
