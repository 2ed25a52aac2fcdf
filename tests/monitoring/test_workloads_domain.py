"""Workloads (pure): grouping into gangs and owners, gang demand, and each wait reason."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes.utils import parse_quantity

from monitoring.domain.aggregate import aggregate
from monitoring.domain.workloads import (
    QueueState,
    WaitReason,
    WorkloadCollector,
    parse_quota_refusal,
    wait_reason,
)

GPU = "nvidia.com/gpu"
REFUSAL = (
    'Error creating: pods "train-abc" is forbidden: exceeded quota: fairshare, requested: '
    "requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=43, limited: "
    "requests.nvidia.com/gpu=43"
)


def pod(name, ns="ml", *, gpus=8, node=None, group=None, owner=None, labels=None, unsched=None):
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    if group:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    spec = {"containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]}
    status = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    elif unsched is not None:
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        if unsched:
            condition["message"] = unsched
        status["conditions"] = [condition]
    return {"metadata": meta, "spec": spec, "status": status}


def podgroup(
    name,
    ns="ml",
    *,
    min_member=4,
    phase="Pending",
    min_resources=None,
    owner=None,
    conditions=None,
    queue="research",
):
    meta = {"name": name, "namespace": ns, "creationTimestamp": "2026-11-30T10:00:00Z"}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "name": owner,
                "controller": True,
            }
        ]
    spec = {"minMember": min_member, "queue": queue}
    if min_resources:
        spec["minResources"] = min_resources
    return {
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions or []},
    }


def run(pods, podgroups=(), jobs=(), events=(), teams=None):
    collector = WorkloadCollector(parse_quantity)
    for job in jobs:
        collector.add_job(job)
    for pg in podgroups:
        collector.add_podgroup(pg)
    for event in events:
        collector.add_event(event)
    usage = aggregate(
        [], pods, teams or {"ml": "research"}, parse_quantity=parse_quantity, workloads=collector
    )
    return usage, {(w.kind, w.name): w for w in usage.workloads}


# ---------------------------------------------------------------- gang demand


def test_a_pending_4x8_gang_is_32_gpus_of_demand():
    pods = [pod(f"g-{i}", group="g") for i in range(4)]

    usage, workloads = run(pods, [podgroup("g")])

    assert usage.namespaces["ml"].pending == {GPU: Decimal(32)}
    gang = workloads[("PodGroup", "g")]
    assert (gang.gang_size, gang.pods, gang.gpus, gang.waiting) == (4, 4, 32, True)
    assert gang.waiting_for == {GPU: Decimal(32)}


def test_a_pending_gang_demands_its_whole_size_even_before_all_pods_exist():
    # Only one of the four pods has been created: the gang still needs 32 GPUs to start.
    usage, _ = run([pod("g-0", group="g")], [podgroup("g")])

    assert usage.namespaces["ml"].pending == {GPU: Decimal(32)}


def test_min_resources_wins_and_a_gang_without_pods_still_demands_it():
    usage, workloads = run([], [podgroup("g", min_resources={GPU: "16", "cpu": "8"})])

    assert usage.namespaces["ml"].pending == {GPU: Decimal(16), "cpu": Decimal(8)}
    assert workloads[("PodGroup", "g")].requested == {GPU: Decimal(16), "cpu": Decimal(8)}


def test_bound_members_of_a_waiting_gang_count_as_allocated_not_twice():
    pods = [pod("g-0", group="g", node="n1"), pod("g-1", group="g")]

    usage, _ = run(pods, [podgroup("g", min_member=2, phase="Inqueue")])

    assert usage.namespaces["ml"].allocated == {GPU: Decimal(8)}
    assert usage.namespaces["ml"].pending == {GPU: Decimal(8)}


def test_a_running_gangs_extra_pending_pods_count_one_by_one():
    pods = [
        pod("g-0", group="g", node="n1"),
        pod("g-1", group="g", node="n1"),
        pod("g-2", group="g"),
    ]

    usage, workloads = run(pods, [podgroup("g", min_member=2, phase="Running")])

    assert usage.namespaces["ml"].pending == {GPU: Decimal(8)}
    assert workloads[("PodGroup", "g")].waiting is False


def test_a_volcano_job_without_pods_demands_its_min_available_task_pods():
    job = {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "minAvailable": 3,
            "queue": "research",
            "tasks": [
                {
                    "name": "ps",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]
                        }
                    },
                },
                {
                    "name": "worker",
                    "replicas": 4,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {GPU: "8"}}}]
                        }
                    },
                },
            ],
        },
    }

    usage, workloads = run([], [podgroup("train-uid", owner="train", min_member=3)], [job])

    # 1 ps + 2 workers are the first three pods.
    assert usage.namespaces["ml"].pending == {"cpu": Decimal(4), GPU: Decimal(16)}
    assert workloads[("VolcanoJob", "train")].queue == "research"


# ---------------------------------------------------------------- grouping


def test_pods_without_a_podgroup_are_grouped_by_owner():
    pods = [
        pod(
            "web-7d4b9c-a",
            owner=("ReplicaSet", "web-7d4b9c"),
            labels={"pod-template-hash": "7d4b9c"},
            gpus=1,
            node="n1",
        ),
        pod(
            "web-7d4b9c-b",
            owner=("ReplicaSet", "web-7d4b9c"),
            labels={"pod-template-hash": "7d4b9c"},
            gpus=1,
            unsched="",
        ),
        pod("ft-worker-0", owner=("PyTorchJob", "ft"), gpus=2),
        pod("ft-worker-1", owner=("PyTorchJob", "ft"), gpus=2),
        pod("adhoc", gpus=1, node="n1"),
        pod("bench-0", labels={"volcano.sh/job-name": "bench"}, gpus=4),
    ]

    usage, workloads = run(pods)

    assert sorted(workloads) == [
        ("Deployment", "web"),
        ("Pod", "adhoc"),
        ("PyTorchJob", "ft"),
        ("VolcanoJob", "bench"),
    ]
    web = workloads[("Deployment", "web")]
    assert (web.phase, web.requested, web.waiting_for) == (
        "Partial",
        {GPU: Decimal(2)},
        {GPU: Decimal(1)},
    )
    assert web.signal.words == "waiting: the scheduler found no node for 1 of its pods"
    assert workloads[("PyTorchJob", "ft")].requested == {GPU: Decimal(4)}
    assert workloads[("Pod", "adhoc")].waiting is False
    # Not gangs: pending counts pod by pod, as before.
    assert usage.namespaces["ml"].pending == {GPU: Decimal(1 + 4 + 4)}


# ---------------------------------------------------------------- reasons


def test_it_parses_a_quota_refusal():
    refusal = parse_quota_refusal(REFUSAL)

    assert refusal.quota == "fairshare"
    assert refusal.limited == {"requests.nvidia.com/gpu": "43"}
    assert refusal.used == {"requests.nvidia.com/gpu": "43"}
    assert parse_quota_refusal("Created pod: train-abc") is None


def quota_event(kind="Job", name="train"):
    return {
        "metadata": {"name": f"{name}.1", "namespace": "ml"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ml"},
        "type": "Warning",
        "reason": "FailedCreate",
        "message": REFUSAL,
        "lastTimestamp": "2026-11-30T10:05:00Z",
    }


def test_a_refused_job_without_pods_is_a_workload_waiting_on_its_quota():
    _, workloads = run([], events=[quota_event()])

    job = workloads[("Job", "train")]
    assert job.waiting
    assert wait_reason(job) == WaitReason(
        "quota", "waiting: namespace ml's ResourceQuota allows 43 GPUs, 43 are in use"
    )


QUEUE = QueueState(
    team="research-team",
    in_use={GPU: Decimal(64)},
    fair={GPU: Decimal(64)},
    limit={GPU: Decimal(80)},
)


@pytest.mark.parametrize(
    ("podgroups", "pods", "events", "queue", "expected"),
    [
        (
            [podgroup("g-uid", owner="g")],
            [pod("g-0", group="g-uid")],
            [quota_event("Job", "g")],
            QUEUE,
            WaitReason(
                "quota", "waiting: namespace ml's ResourceQuota allows 43 GPUs, 43 are in use"
            ),
        ),
        (
            [podgroup("g", min_member=3, min_resources={GPU: "24"})],
            [],
            [],
            QUEUE,
            WaitReason(
                "capability",
                "waiting: research-team's queue would pass its capability, 64 of 80 GPUs in use, "
                "this needs 24",
            ),
        ),
        (
            [podgroup("g", min_member=1, min_resources={GPU: "8"})],
            [],
            [],
            QUEUE,
            WaitReason(
                "fair-share",
                "waiting: research-team's queue is at its fair allocation, 64 of 64 GPUs",
            ),
        ),
        (
            [
                podgroup(
                    "g",
                    min_member=1,
                    conditions=[
                        {
                            "type": "Unschedulable",
                            "status": "True",
                            "reason": "NotEnoughResources",
                            "message": "1/1 tasks in gang unschedulable",
                        }
                    ],
                )
            ],
            [],
            [],
            QueueState("research-team", in_use={GPU: Decimal(0)}, fair={GPU: Decimal(64)}),
            WaitReason("unschedulable", "waiting: 1/1 tasks in gang unschedulable"),
        ),
        (
            [],
            [pod("solo", unsched="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")],
            [],
            QUEUE,
            WaitReason(
                "unschedulable", "waiting: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
            ),
        ),
        (
            [podgroup("g", min_member=1)],
            [],
            [],
            None,
            WaitReason("pending", "waiting: not scheduled yet"),
        ),
    ],
    ids=[
        "quota",
        "capability",
        "fair-share",
        "podgroup-unschedulable",
        "pod-unschedulable",
        "pending",
    ],
)
def test_each_wait_reason(podgroups, pods, events, queue, expected):
    _, workloads = run(pods, podgroups, events=events)
    (workload,) = [w for w in workloads.values() if w.waiting]

    assert wait_reason(workload, queue=queue) == expected


def test_a_running_workload_has_no_wait_reason():
    _, workloads = run([pod("a", node="n1")])

    assert wait_reason(workloads[("Pod", "a")], queue=QUEUE) is None
