"""The live collector counts Dynamic Resource Allocation claims as snapshots do (issue 34).

The cluster of tests/monitoring/fixtures/dra_cluster.json (see test_dra_counting.py for what it
holds) is loaded into the fake API server; the live collection (``k8s_usage.collect``, which
LISTs ``resource.k8s.io/v1`` ResourceClaims, ResourceSlices and DeviceClasses) must give the
same usage as ``from_snapshot`` of the file. The fixture's ResourceClaimTemplate is not loaded:
the collector does not need it (a generated claim is found through the pod's status).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kube.errors import K8sPermanent
from monitoring.collectors import k8s_usage

FIXTURE = Path(__file__).parent / "fixtures" / "dra_cluster.json"
GPU = "nvidia.com/gpu"
DRA = "resource.k8s.io"
TEAMS = {"ml-a": "team-a", "ml-b": "team-b", "ml-c": "team-a"}


def fixture_objects(*, dra: bool = True) -> list[dict]:
    doc = json.loads(FIXTURE.read_text())
    served = {"Node", "Pod"} | ({"ResourceClaim", "ResourceSlice", "DeviceClass"} if dra else set())
    return [copy.deepcopy(i) for i in doc["items"] if i["kind"] in served]


@pytest.fixture
def dra_cluster(kubeapi):
    kubeapi.load(fixture_objects())
    return kubeapi


def as_dict(usage):
    return usage.to_json_dict()


@pytest.mark.parametrize("page_size", [2, 500])
def test_the_live_collection_counts_claims_as_the_snapshot_does(dra_cluster, page_size):
    stats = {}

    live = k8s_usage.collect(dra_cluster.api_client(), TEAMS, page_size=page_size, stats=stats)
    snapshot = k8s_usage.from_snapshot(FIXTURE, TEAMS)

    live_doc, snapshot_doc = as_dict(live), as_dict(snapshot)
    assert live_doc["namespaces"] == snapshot_doc["namespaces"]
    assert live.teams == snapshot.teams
    assert live_doc == snapshot_doc
    assert live.notes == snapshot.notes
    # DRA adds GPUs the device plugin's requests alone do not show (ml-c has only MIG claims).
    assert live.namespaces["ml-c"].allocated[GPU] > 0
    assert (stats["resourceclaims"], stats["resourceslices"], stats["deviceclasses"]) == (12, 3, 2)
    assert dra_cluster.counts[("list", "ResourceClaim")] == (12 + page_size - 1) // page_size


def test_a_cluster_without_dra_is_collected_and_says_so_once(kubeapi):
    kubeapi.load(fixture_objects(dra=False))
    kubeapi.uninstall(DRA)
    stats = {}

    usage = k8s_usage.collect(kubeapi.api_client(), TEAMS, page_size=3, stats=stats)

    dra_notes = [n for n in usage.notes if DRA in n]
    assert len(dra_notes) == 1
    assert "not served" in dra_notes[0]
    assert "resourceclaims" not in stats
    finished = [p for p in fixture_objects(dra=False) if p["kind"] == "Pod"]
    finished = [p for p in finished if p["status"].get("phase") in ("Succeeded", "Failed")]
    assert stats["pods"] == 15 - len(finished)  # finished pods are filtered server-side
    # Pods are counted as before: exactly the aggregation of the same cluster without DRA.
    kubeapi.reset()
    kubeapi.load(fixture_objects(dra=False))
    served = k8s_usage.collect(kubeapi.api_client(), TEAMS, page_size=3)
    assert as_dict(usage)["namespaces"] == as_dict(served)["namespaces"]
    assert [n for n in served.notes if DRA in n] == []


def test_a_forbidden_dra_list_is_skipped_with_a_note(dra_cluster):
    dra_cluster.fault(403, verb="list", kind="ResourceSlice", times=None)

    usage = k8s_usage.collect(dra_cluster.api_client(), TEAMS)

    [note] = [n for n in usage.notes if DRA in n]
    assert "403" in note
    # No claim is counted: ml-c's only GPUs are MIG claims.
    assert GPU not in usage.namespaces["ml-c"].allocated
    assert usage.pod_counts["allocated"] > 0


def test_other_permanent_errors_still_fail_the_collection(dra_cluster):
    dra_cluster.fault(400, verb="list", kind="ResourceClaim", times=None)

    with pytest.raises(K8sPermanent):
        k8s_usage.collect(dra_cluster.api_client(), TEAMS)
