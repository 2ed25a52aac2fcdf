"""Kueue Workloads as waiting work: a suspended job has no pods, so its Workload carries its
demand (the whole of it) and Kueue's reason, until it is admitted and its pods count one by one.

Objects are shaped as Kueue writes them (``apis/kueue/v1beta2/workload_types.go``: podSets with
``count`` and a pod template; ``status.conditions`` QuotaReserved/Admitted/Finished;
``status.admission.clusterQueue``).
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity

from monitoring.collectors.k8s_usage import split_workload_items
from monitoring.domain.workloads import WorkloadCollector

D = Decimal
GPU = "nvidia.com/gpu"


def workload(name="job-train-1a2b3", *, conditions=(), admission=None, count=4, gpus="2"):
    status = {"conditions": list(conditions)}
    if admission:
        status["admission"] = {"clusterQueue": admission, "podSetAssignments": []}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "team-a-ml",
            "creationTimestamp": "2026-12-07T08:00:00Z",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
            ],
        },
        "spec": {
            "queueName": "default",
            "priorityClassName": "experiment",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "trainer",
                                    "resources": {"requests": {GPU: gpus, "cpu": "8"}},
                                },
                                {"name": "sidecar", "resources": {"requests": {"cpu": "500m"}}},
                            ]
                        }
                    },
                },
                {
                    "name": "launcher",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "l", "resources": {"limits": {"cpu": "1"}}}]
                        }
                    },
                },
            ],
        },
        "status": status,
    }


PENDING = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Pending",
    "message": "couldn't assign flavors to pod set main: insufficient unused quota for "
    "nvidia.com/gpu in flavor gpu-h100, 4 more needed",
}


def collect(*items, pods=()):
    collector = WorkloadCollector(parse_quantity)
    for item in items:
        collector.add_kueue_workload(item)
    counted = [collector.add_pod(pod, "team-a-ml", request, bound) for pod, request, bound in pods]
    workloads, pending = collector.finish({"team-a-ml": "team-a"})
    return workloads, pending, counted


def test_a_waiting_workload_demands_its_whole_podsets_and_says_kueues_reason():
    [w], pending, _ = collect(workload(conditions=[PENDING]))

    assert (w.kind, w.name, w.queue, w.team) == ("Job", "train", "default", "team-a")
    # 4 × (2 GPUs, 8.5 cpu) + 1 × (1 cpu, the limit as its request)
    assert w.requested == {GPU: D(8), "cpu": D("35")}
    assert w.waiting and w.gang_size == 5 and w.phase == "Pending"
    assert w.waiting_for == {GPU: D(8), "cpu": D(35)}
    assert pending == {"team-a-ml": {GPU: D(8), "cpu": D(35)}}
    assert w.signal.code == "admission"
    assert w.signal.words == (
        "waiting: waiting for quota in Kueue queue default: couldn't assign flavors to pod set "
        "main: insufficient unused quota for nvidia.com/gpu in flavor gpu-h100, 4 more needed"
    )


def test_an_inadmissible_one_and_one_not_yet_looked_at_say_so():
    inadmissible = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Inadmissible",
        "message": "LocalQueue default doesn't exist",
    }
    [w], _, _ = collect(workload(conditions=[inadmissible]))
    assert "Kueue cannot admit it in Kueue queue default: LocalQueue default doesn't exist" in (
        w.signal.words
    )
    [fresh], _, _ = collect(workload())
    assert fresh.signal.words == "waiting: not looked at by Kueue yet (in Kueue queue default)"


def test_an_admitted_workload_is_its_owners_pods_counted_one_by_one():
    admitted = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {"type": "Admitted", "status": "True", "reason": "Admitted"},
    ]
    pod = {
        "metadata": {
            "name": "train-0",
            "ownerReferences": [{"kind": "Job", "name": "train", "controller": True}],
        },
        "spec": {},
    }
    [w], pending, counted = collect(
        workload(conditions=admitted, admission="team-a"),
        pods=[(pod, {GPU: D(2), "cpu": D("8.5")}, True)],
    )

    assert counted == [False]  # the caller counts it as allocated
    assert not w.waiting and w.queue == "team-a" and w.running == 1
    assert pending == {}


def test_quota_reserved_but_not_admitted_waits_for_its_admission_checks():
    reserved = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {
            "type": "Admitted",
            "status": "False",
            "reason": "NoChecks",
            "message": "The workload has not all checks ready",
        },
    ]
    [w], _, _ = collect(workload(conditions=reserved, admission="team-a"))
    assert w.waiting
    assert w.signal.words == (
        "waiting: quota reserved in Kueue queue team-a; not admitted yet: The workload has not "
        "all checks ready"
    )


def test_a_finished_workload_is_left_out_and_snapshots_carry_workloads():
    finished = {"type": "Finished", "status": "True", "reason": "Succeeded"}
    assert collect(workload(conditions=[finished]))[0] == []
    doc = {"kind": "List", "items": [workload(), {"kind": "Workload", "apiVersion": "other/v1"}]}
    assert [w["metadata"]["name"] for w in split_workload_items(doc)["Workload"]] == [
        "job-train-1a2b3"
    ]
