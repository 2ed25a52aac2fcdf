"""Workload records: stored per collection with why each waits, bounded, and fed to DRF demand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from monitoring import collection
from monitoring.models import Workload
from scheduling.models import ShareComputation, ShareSnapshot
from scheduling.shares import load_inputs
from tests.monitoring.test_collect import node, pod

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REFUSAL = (
    'Error creating: pods "etl-x" is forbidden: exceeded quota: fairshare, requested: '
    "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=43, limited: "
    "requests.nvidia.com/gpu=43"
)


def podgroup(name, ns, *, min_member, gpus_each, phase="Pending", queue="team-a"):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {
            "minMember": min_member,
            "queue": queue,
            "minResources": {GPU: str(min_member * gpus_each)},
        },
        "status": {"phase": phase},
    }


@pytest.fixture
def cluster(kubeapi):
    kubeapi.load([node(f"gpu-{i}", gpus=8, product="H100") for i in range(4)])
    running = [pod(f"held-{i}", "team-a-ml", {GPU: "8"}, node_name=f"gpu-{i}") for i in range(2)]
    for p in running:
        p["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "held"}
    kubeapi.load(
        [
            podgroup("held", "team-a-ml", min_member=2, gpus_each=8, phase="Running"),
            podgroup("small", "team-a-ml", min_member=1, gpus_each=8),
            podgroup("big", "team-a-ml", min_member=4, gpus_each=8),
            *running,
            {
                "kind": "Event",
                "metadata": {"name": "etl.1", "namespace": "team-b-ml"},
                "involvedObject": {"kind": "Job", "name": "etl", "namespace": "team-b-ml"},
                "type": "Warning",
                "reason": "FailedCreate",
                "message": REFUSAL,
            },
        ]
    )
    return kubeapi


@pytest.fixture
def fair_share(cast):
    computation = ShareComputation.objects.create(computed_at=NOW - timedelta(minutes=3))
    ShareSnapshot.objects.create(
        computation=computation,
        computed_at=computation.computed_at,
        team=cast.team_a,
        fair_allocation={GPU: "16"},
    )


def test_each_collection_records_its_workloads_with_reasons(cast, fair_share, cluster):
    collection.collect_usage(now=NOW, api_client=cluster.api_client())

    rows = {
        (w.namespace, w.name): w for w in Workload.objects.filter(taken_at=NOW).select_related()
    }
    assert set(rows) == {
        ("team-a-ml", "held"),
        ("team-a-ml", "small"),
        ("team-a-ml", "big"),
        ("team-b-ml", "etl"),
    }
    held, small, big, etl = (
        rows[k] for k in sorted(rows, key=lambda k: ["held", "small", "big", "etl"].index(k[1]))
    )
    assert (held.phase, held.waiting, held.running, held.gpus, held.wait_code) == (
        "Running",
        False,
        2,
        16,
        "",
    )
    assert held.team == cast.team_a
    # team-a holds 16 GPUs, its fair allocation is 16 and its limit 40.
    assert (small.wait_code, small.wait_reason) == (
        "fair-share",
        "waiting: team-a's queue is at its fair allocation, 16 of 16 GPUs",
    )
    assert (big.wait_code, big.gpus, big.gang_size) == ("capability", 32, 4)
    assert big.wait_reason == (
        "waiting: team-a's queue would pass its capability, 16 of 40 GPUs in use, this needs 32"
    )
    assert (etl.kind, etl.team, etl.wait_code) == ("Job", cast.team_b, "quota")
    assert etl.wait_reason == (
        "waiting: namespace team-b-ml's ResourceQuota allows 43 GPUs, 43 are in use"
    )
    assert big.created == datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_drf_demand_counts_whole_pending_gangs(cast, cluster):
    collection.collect_usage(now=NOW, api_client=cluster.api_client())

    team_a = load_inputs().teams["team-a"]

    assert team_a.usage[GPU] == 16
    # 1×8 + 4×8 waiting, each gang whole; the running gang adds nothing pending.
    assert team_a.pending[GPU] == 40


def test_only_the_newest_collections_are_kept(cast, cluster, settings):
    settings.FAIRSHARE_WORKLOAD_COLLECTIONS = 2
    for minutes in range(3):
        collection.collect_usage(
            now=NOW + timedelta(minutes=minutes), api_client=cluster.api_client()
        )

    kept = sorted(set(Workload.objects.values_list("taken_at", flat=True)))
    assert kept == [NOW + timedelta(minutes=1), NOW + timedelta(minutes=2)]
