"""The sync engine (scheduling.sync) end to end: database → render → plan → the fake API server,
through the real kubernetes client, with SyncRun/SyncItem and audit records asserted."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from kube.errors import K8sConfigError, K8sTransient
from quotas.models import AuditEvent, Namespace, Team, TeamQuota
from scheduling import sync
from scheduling.choices import SyncAction, SyncStatus
from scheduling.models import SyncRun
from scheduling.sync import LAST_APPLIED_ANNOTATION, create_run, reap_stale_runs, run_sync
from tests.base import GPU, make_cast

MANAGED_KINDS = (
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "Role",
    "RoleBinding",
    "PriorityClass",
    "Queue",
)


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    return kubeapi


@pytest.fixture
def quick_retries(monkeypatch):
    """Fewer attempts per call so the failure paths do not sleep for seconds."""
    monkeypatch.setattr("scheduling.sync.planning.RETRY_ATTEMPTS", 2)


def sync_now(**kwargs) -> SyncRun:
    run = run_sync(create_run(dry_run=kwargs.pop("dry_run", False)).pk, **kwargs)
    run.refresh_from_db()
    return run


def item(run, kind, name, namespace=""):
    return run.items.get(kind=kind, name=name, namespace=namespace)


def planned(run) -> list[tuple[str, str, str, str]]:
    return list(run.items.order_by("id").values_list("kind", "namespace", "name", "planned_action"))


# --------------------------------------------------------------------------- happy path


def test_first_sync_creates_every_object(cast, cluster):
    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert run.error == ""
    assert run.created_count == 16
    assert (run.updated_count, run.unchanged_count, run.pruned_count, run.failed_count) == (
        0,
        0,
        0,
        0,
    )
    assert run.total == run.done == run.items.count() == 16
    assert run.started_at and run.finished_at and run.heartbeat_at
    assert set(run.items.values_list("action", flat=True)) == {SyncAction.CREATE}

    queue = cluster.get("Queue", "team-a")
    assert queue["spec"]["parent"] == "dept-x"
    assert queue["spec"]["capability"] == {GPU: "40"}
    assert queue["spec"]["guarantee"] == {"resource": {GPU: "20"}}
    assert cluster.get("Queue", "dept-x")["metadata"]["labels"]["fairshare.io/department"] == "true"
    quota = cluster.get("ResourceQuota", "fairshare", "team-a-ml")
    assert quota["spec"]["hard"] == {f"requests.{GPU}": "40"}
    binding = cluster.get("RoleBinding", "fairshare-lead", "team-a-ml")
    assert binding["roleRef"]["name"] == "admin"
    assert [s["name"] for s in binding["subjects"]] == ["alice"]
    assert cluster.get("PriorityClass", "experiment")["value"] == 100000
    assert "fairshare" in [m["manager"] for m in quota["metadata"]["managedFields"]]

    rq_item = item(run, "ResourceQuota", "fairshare", "team-a-ml")
    assert rq_item.team_slug == "team-a"
    assert rq_item.attempts == 1
    assert f"spec.hard.requests.{GPU}: (none) -> 40" in rq_item.diff

    [event] = AuditEvent.objects.filter(verb="sync")
    assert event.object_id == str(run.pk)
    assert event.after["created"] == 16


def test_second_sync_issues_no_writes_and_one_list_per_kind(cast, cluster):
    sync_now()
    cluster.reset_counts()

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert cluster.writes() == 0
    assert {kind: cluster.counts[("list", kind)] for kind in MANAGED_KINDS} == dict.fromkeys(
        MANAGED_KINDS, 1
    )
    # ... plus one read of Volcano's scheduler configuration (absent here: no warning)
    assert cluster.counts[("get", "ConfigMap")] == 1
    assert sum(cluster.counts.values()) == len(MANAGED_KINDS) + 1
    assert run.unchanged_count == run.items.count() == 16
    assert run.created_count == run.updated_count == run.drift_count == 0
    assert AuditEvent.objects.filter(verb="sync").count() == 1  # the first sync only


def test_a_hand_edited_quota_is_reported_as_drift_and_corrected(cast, cluster):
    sync_now()
    edited = cluster.get("ResourceQuota", "fairshare", "team-a-ml")
    edited["spec"]["hard"][f"requests.{GPU}"] = "99"
    cluster.put_object(edited)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert run.updated_count == 1
    assert run.drift_count == 1
    rq = item(run, "ResourceQuota", "fairshare", "team-a-ml")
    assert rq.action == SyncAction.UPDATE
    assert rq.drift is True
    assert f"spec.hard.requests.{GPU}: 99 -> 40" in rq.diff
    assert "drift" in rq.diff
    live = cluster.get("ResourceQuota", "fairshare", "team-a-ml")
    assert live["spec"]["hard"][f"requests.{GPU}"] == "40"


def test_a_quota_change_in_the_database_is_an_update_not_drift(cast, cluster):
    sync_now()
    TeamQuota.objects.filter(team=cast.team_a, resource=GPU).update(limit=Decimal(48))

    run = sync_now()

    rq = item(run, "ResourceQuota", "fairshare", "team-a-ml")
    assert rq.action == SyncAction.UPDATE
    assert rq.drift is False
    assert run.drift_count == 0
    assert f"spec.hard.requests.{GPU}: 40 -> 48" in rq.diff
    assert LAST_APPLIED_ANNOTATION not in rq.diff
    assert cluster.get("Queue", "team-a")["spec"]["capability"] == {GPU: "48"}


def test_deactivating_a_team_prunes_its_bindings_and_queue_but_keeps_the_namespace(cast, cluster):
    sync_now()
    Team.objects.filter(pk=cast.team_a.pk).update(active=False)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    pruned = set(run.items.filter(action=SyncAction.PRUNE).values_list("kind", "name"))
    assert pruned == {
        ("Queue", "team-a"),
        ("ResourceQuota", "fairshare"),
        ("Role", "fairshare-volcano"),
        ("RoleBinding", "fairshare-lead"),
        ("RoleBinding", "fairshare-member"),
        ("RoleBinding", "fairshare-viewer"),
        ("RoleBinding", "fairshare-volcano"),
    }
    assert run.pruned_count == 7
    assert cluster.get("Queue", "team-a") is None
    assert cluster.objects("RoleBinding", "team-a-ml") == []
    assert cluster.get("Namespace", "team-a-ml") is not None
    assert cluster.get("Queue", "team-b") is not None


def test_dry_run_writes_nothing_and_shows_the_same_plan(cast, cluster):
    sync_now()
    Team.objects.filter(pk=cast.team_b.pk).update(weight=5)
    Namespace.objects.create(name="team-a-extra", team=cast.team_a)
    cluster.reset_counts()

    dry = sync_now(dry_run=True)

    assert dry.status == SyncStatus.SUCCEEDED
    assert dry.dry_run is True
    assert cluster.writes() == 0
    assert cluster.get("Namespace", "team-a-extra") is None
    assert AuditEvent.objects.filter(verb="sync").count() == 1
    assert dry.created_count > 0 and dry.updated_count > 0

    real = sync_now()

    assert planned(real) == planned(dry)
    assert [i.diff for i in real.items.order_by("id")] == [i.diff for i in dry.items.order_by("id")]
    assert cluster.get("Namespace", "team-a-extra") is not None
    assert cluster.get("Queue", "team-b")["spec"]["weight"] == 5


# --------------------------------------------------------------------------- failures


def test_a_500_on_one_object_fails_that_item_and_the_next_run_retries_it(
    cast, cluster, quick_retries
):
    cluster.fault(500, verb="apply", kind="Queue", name="team-b", times=None)

    run = sync_now()

    assert run.status == SyncStatus.FAILED
    # The Queue, and its namespace's routing: team-b-ml is created (its quota and RBAC go out)
    # without the queue-name annotation, since a PodGroup routed there would be denied.
    assert run.failed_count == 2
    assert run.created_count == 14
    assert "2 of 16 objects failed" in run.error
    unrouted = item(run, "Namespace", "team-b-ml")
    assert unrouted.action == SyncAction.FAILED
    assert (
        "Kept the old scheduling.volcano.sh/queue-name: Queue team-b could not be written in "
        "this run, and Volcano denies a PodGroup in a queue that is not Open" in unrouted.error
    )
    namespace = cluster.get("Namespace", "team-b-ml")
    annotations = namespace["metadata"].get("annotations") or {}
    assert "scheduling.volcano.sh/queue-name" not in annotations
    failed = item(run, "Queue", "team-b")
    assert failed.action == SyncAction.FAILED
    assert failed.planned_action == SyncAction.CREATE
    assert "500" in failed.error
    assert failed.attempts == 2
    assert cluster.get("Queue", "team-b") is None
    assert cluster.get("Queue", "team-a") is not None
    assert cluster.get("ResourceQuota", "fairshare", "team-b-ml") is not None

    cluster.clear_faults()
    again = sync_now()

    assert again.status == SyncStatus.SUCCEEDED
    assert item(again, "Queue", "team-b").action == SyncAction.CREATE
    assert item(again, "Namespace", "team-b-ml").action == SyncAction.UPDATE
    assert again.created_count == 1
    assert again.updated_count == 1
    assert again.unchanged_count == 14
    namespace = cluster.get("Namespace", "team-b-ml")
    assert namespace["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-b"


def test_a_timeout_on_one_object_fails_that_item_only(cast, cluster, quick_retries, settings):
    settings.FAIRSHARE_KUBE_TIMEOUT = 1
    cluster.fault(
        "timeout", verb="apply", kind="ResourceQuota", namespace="team-a-ml", delay=3, times=None
    )

    run = sync_now()

    assert run.status == SyncStatus.FAILED
    assert run.failed_count == 1
    failed = item(run, "ResourceQuota", "fairshare", "team-a-ml")
    assert failed.action == SyncAction.FAILED
    assert "timed out" in failed.error
    assert cluster.get("ResourceQuota", "fairshare", "team-a-ml") is None
    assert cluster.get("ResourceQuota", "fairshare", "team-b-ml") is not None
    assert run.created_count == 15


def test_a_422_fails_the_item_at_once_without_retrying(cast, cluster):
    cluster.fault(422, verb="apply", kind="PriorityClass", times=None)

    run = sync_now()

    failed = item(run, "PriorityClass", "experiment")
    assert failed.action == SyncAction.FAILED
    assert failed.attempts == 1
    assert run.status == SyncStatus.FAILED
    assert run.created_count == 15


def test_a_429_is_retried_after_the_servers_retry_after(cast, cluster):
    cluster.fault(429, verb="apply", kind="Queue", name="team-a", retry_after=1, times=1)
    started = time.monotonic()

    run = sync_now()

    assert time.monotonic() - started >= 1.0
    assert run.status == SyncStatus.SUCCEEDED
    created = item(run, "Queue", "team-a")
    assert created.action == SyncAction.CREATE
    assert created.attempts == 2
    assert cluster.get("Queue", "team-a") is not None


def test_an_unreachable_api_server_fails_the_run_with_no_partial_state(
    cast, cluster, quick_retries
):
    cluster.stop()
    try:
        run = create_run()
        with pytest.raises(K8sTransient, match="unreachable"):
            run_sync(run.pk)
    finally:
        cluster.start()

    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert "unreachable" in run.error
    assert run.finished_at is not None
    assert run.items.count() == 0
    assert (run.created_count, run.failed_count, run.total, run.done) == (0, 0, 0, 0)
    assert not AuditEvent.objects.filter(verb="sync").exists()


def test_an_unreachable_api_server_requeues_the_run_when_the_task_will_retry(
    cast, cluster, quick_retries
):
    cluster.stop()
    try:
        run = create_run()
        with pytest.raises(K8sTransient):
            run_sync(run.pk, requeue_on_transient=True)
    finally:
        cluster.start()

    run.refresh_from_db()
    assert run.status == SyncStatus.QUEUED
    assert run.error.startswith("Retrying after:")
    assert run.items.count() == 0

    assert sync_now_existing(run).status == SyncStatus.SUCCEEDED


def sync_now_existing(run) -> SyncRun:
    run = run_sync(run.pk)
    run.refresh_from_db()
    return run


def test_the_api_server_going_away_mid_apply_fails_the_run_without_items(
    cast, cluster, quick_retries
):
    # Every write gets no answer: the engine gives up after three objects in a row.
    cluster.fault("reset", verb="write", times=None)

    run = create_run()
    with pytest.raises(K8sTransient, match="3 objects in a row"):
        run_sync(run.pk)

    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert "0 of 16 changes were applied" in run.error
    assert run.items.count() == 0


def test_a_disabled_cluster_fails_the_run_with_a_clear_error(cast, settings):
    settings.FAIRSHARE_CLUSTER = "disabled"
    run = create_run()

    with pytest.raises(K8sConfigError):
        run_sync(run.pk)

    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert "disabled" in run.error
    assert run.items.count() == 0


def _dump(kubeapi, path, *, extra=()) -> None:
    """What ``kubectl get <managed kinds>,nodes,pods -A -o json`` prints for ``kubeapi``."""
    import json

    items = [obj | {"kind": kind} for kind in MANAGED_KINDS for obj in kubeapi.objects(kind)]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {}}
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [*items, node, *extra]})
    )


def test_snapshot_mode_plans_against_the_objects_in_the_snapshot(cast, kubeapi, settings, tmp_path):
    """The demo's cluster is a file: a sync plans against the managed objects in it (as an
    earlier sync left them), shows drift, updates and prunes, and applies nothing."""
    assert sync_now(api_client=kubeapi.api_client()).status == SyncStatus.SUCCEEDED
    quota = kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "99"  # a hand edit: drift
    kubeapi.put_object(quota)
    gone = kubeapi.get("Queue", "team-b") | {"kind": "Queue"}
    gone["metadata"] = {**gone["metadata"], "name": "retired-team", "uid": "u-retired"}
    snapshot = tmp_path / "cluster.json"
    _dump(kubeapi, snapshot, extra=[gone])  # retired-team: managed, no longer desired → prune
    TeamQuota.objects.filter(team=cast.team_b, resource=GPU).update(limit=Decimal(50))  # stale
    settings.FAIRSHARE_CLUSTER = f"snapshot:{snapshot}"
    before = snapshot.read_bytes()
    writes, audited = kubeapi.writes(), AuditEvent.objects.filter(verb="sync").count()

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert run.dry_run is True
    assert sync.PLAN_ONLY in run.log and "export_manifests" in run.log
    assert run.drift_count == 1
    assert item(run, "ResourceQuota", "fairshare", "team-a-ml").drift is True
    updated = set(run.items.filter(action=SyncAction.UPDATE).values_list("kind", "name"))
    assert ("ResourceQuota", "fairshare") in updated and ("Queue", "team-b") in updated
    assert list(run.items.filter(action=SyncAction.PRUNE).values_list("kind", "name")) == [
        ("Queue", "retired-team")
    ]
    assert run.unchanged_count > 0 and run.created_count == 0
    assert snapshot.read_bytes() == before and kubeapi.writes() == writes
    assert AuditEvent.objects.filter(verb="sync").count() == audited


def test_snapshot_mode_with_an_unreadable_snapshot_fails_with_its_name(cast, settings):
    settings.FAIRSHARE_CLUSTER = "snapshot:/nonexistent/demo.json"

    with pytest.raises(sync.SyncError):
        sync_now()

    run = SyncRun.objects.get()
    assert run.status == SyncStatus.FAILED
    assert "cannot read the cluster snapshot /nonexistent/demo.json" in run.error
    assert not run.items.exists()


def test_an_explicit_api_client_overrides_the_setting(cast, kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = "disabled"

    run = sync_now(api_client=kubeapi.api_client())

    assert run.status == SyncStatus.SUCCEEDED
    assert kubeapi.get("Queue", "team-a") is not None


# --------------------------------------------------------------------------- runs and locks


def test_a_run_that_is_not_queued_is_left_alone(cast, cluster):
    run = sync_now()
    cluster.reset_counts()

    again = run_sync(run.pk)

    assert again.status == SyncStatus.SUCCEEDED
    assert again.items.count() == 16
    assert sum(cluster.counts.values()) == 0


def test_a_run_whose_worker_died_is_marked_failed_by_the_next_sync(cast, cluster, settings):
    settings.FAIRSHARE_SYNC_STALE_AFTER = 600
    long_ago = timezone.now() - timedelta(hours=1)
    lost = SyncRun.objects.create(status=SyncStatus.RUNNING, started_at=long_ago)
    SyncRun.objects.filter(pk=lost.pk).update(heartbeat_at=long_ago)
    alive = SyncRun.objects.create(status=SyncStatus.RUNNING, heartbeat_at=timezone.now())
    forgotten = SyncRun.objects.create(dry_run=True)
    SyncRun.objects.filter(pk=forgotten.pk).update(created=long_ago)
    # A sync request whose message was lost is not failed: the next run carries it out.
    lost_message = SyncRun.objects.create()
    SyncRun.objects.filter(pk=lost_message.pk).update(created=long_ago)

    # A fresh RUNNING row does not block: single flight is the Redis lock here.
    run = sync_now()

    lost.refresh_from_db()
    alive.refresh_from_db()
    forgotten.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED
    assert lost.status == SyncStatus.FAILED
    assert lost.error.startswith("Worker lost")
    assert lost.finished_at is not None
    assert forgotten.status == SyncStatus.FAILED
    assert forgotten.error.startswith("Never started")
    lost_message.refresh_from_db()
    assert lost_message.status == SyncStatus.MERGED
    assert lost_message.merged_into_id == run.pk
    assert alive.status == SyncStatus.RUNNING
    assert reap_stale_runs() == 0


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_triggers_run_one_sync(kubeapi, settings, monkeypatch):
    """Real threads, real Redis lock: the first to take the lock syncs and, as both requests
    were queued before it started, takes the other in (MERGED, not failed): one sync."""
    if connection.vendor != "postgresql":
        # Both threads write at once; SQLite's shared-cache in-memory test database answers
        # "database table is locked" at once instead of waiting as a database file does.
        pytest.skip("two writing threads on one test database: needs PostgreSQL")
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    enqueued: list[int] = []
    monkeypatch.setattr(
        "scheduling.tasks.sync_cluster.delay", lambda run_id: enqueued.append(run_id)
    )
    # The lock holder's first LIST is throttled for a second, so the other trigger arrives
    # while the sync is still running.
    kubeapi.fault(429, verb="list", kind="Namespace", retry_after=1, times=1)
    runs = [create_run(trigger="race"), create_run(trigger="race")]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def trigger(run_id: int) -> None:
        from django.db import connection

        try:
            barrier.wait()
            run_sync(run_id)
        except BaseException as e:  # surfaced below
            errors.append(e)
        finally:
            connection.close()

    threads = [threading.Thread(target=trigger, args=(r.pk,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == []
    for run in runs:
        run.refresh_from_db()
    statuses = sorted(r.status for r in runs)
    assert statuses == [SyncStatus.MERGED, SyncStatus.SUCCEEDED]
    [winner] = [r for r in runs if r.status == SyncStatus.SUCCEEDED]
    [merged] = [r for r in runs if r.status == SyncStatus.MERGED]
    assert merged.merged_into_id == winner.pk
    assert merged.log.startswith(f"Included in sync #{winner.pk}")
    assert merged.error == ""
    assert merged.items.count() == 0
    assert winner.created_count == 16
    # One LIST, retried once after the 429; then the namespace guard's LIST by name for each
    # Namespace the run creates (does it exist already, unadopted?).
    created = Namespace.objects.filter(managed=True).count()
    assert kubeapi.counts[("list", "Namespace")] == 2 + created
    # One run observed the cluster (Queues are listed again while it waits for the ones it
    # created to be Open before routing namespaces to them).
    assert kubeapi.counts[("list", "ResourceQuota")] == 1
    assert enqueued == []  # nothing was pending afterwards: no follow-up


@pytest.mark.django_db(transaction=True)
def test_without_redis_the_database_claim_keeps_syncs_single_flight(kubeapi, settings):
    settings.REDIS_URL = ""
    settings.CELERY_BROKER_URL = "filesystem://"
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    running = SyncRun.objects.create(status=SyncStatus.RUNNING, heartbeat_at=timezone.now())

    waiting = sync_now()

    assert waiting.status == SyncStatus.QUEUED
    assert waiting.log.startswith(f"Waiting: sync #{running.pk} is running")
    assert kubeapi.writes() == 0

    SyncRun.objects.filter(pk=running.pk).update(status=SyncStatus.SUCCEEDED)
    follow_up = sync_now()
    assert follow_up.status == SyncStatus.SUCCEEDED
    waiting.refresh_from_db()
    assert waiting.status == SyncStatus.MERGED
    assert waiting.merged_into_id == follow_up.pk


# --------------------------------------------------------------------------- scheduler config


def test_a_sync_warns_when_the_live_scheduler_configuration_lacks_capacity(cast, cluster):
    cluster.put_object({"kind": "Namespace", "metadata": {"name": "volcano-system"}})
    chart_default = (
        'actions: "enqueue, allocate, backfill"\ntiers:\n- plugins:\n  - name: priority\n'
        "  - name: gang\n- plugins:\n  - name: drf\n  - name: proportion\n"
    )
    cluster.put_object(
        {
            "kind": "ConfigMap",
            "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
            "data": {"volcano-scheduler.conf": chart_default},
        }
    )

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert (
        "Warning: Volcano scheduler configuration volcano-system/volcano-scheduler-configmap: "
        "the capacity plugin is not enabled (plugins: drf, gang, priority, proportion)"
    ) in run.log


def test_no_warning_with_the_shipped_scheduler_configuration(cast, cluster):
    from pathlib import Path

    import yaml

    shipped = yaml.safe_load(
        (
            Path(__file__).parents[2] / "deploy/volcano/non-helm/volcano-scheduler-configmap.yaml"
        ).read_text()
    )
    cluster.put_object({"kind": "Namespace", "metadata": {"name": "volcano-system"}})
    cluster.put_object(shipped)

    run = sync_now()

    assert run.status == SyncStatus.SUCCEEDED
    assert "Warning" not in run.log


@pytest.mark.django_db
def test_items_are_recorded_exactly_and_in_plan_order():
    """Every character of a diff and an error survives the bulk insert (COPY's text format on
    PostgreSQL escapes tabs, newlines and backslashes; bulk_create elsewhere)."""
    from scheduling.domain.plan import Change
    from scheduling.models import SyncItem
    from scheduling.sync.recording import _insert_items
    from scheduling.sync.writers import Outcome

    run = create_run()
    awkward = "a\tb\\nc\nd\r\n\\\\ é 🚀 \\N \x7f"
    outcomes = [
        Outcome(
            Change("create", "ResourceQuota", f"ns-{i}", "fairshare", None, ()),
            action="failed" if i == 1 else "create",
            drift=i == 2,
            diff=f"{i}: {awkward}",
            error=awkward if i == 1 else "",
            attempts=i,
        )
        for i in range(3)
    ]

    _insert_items(run.pk, outcomes)

    items = list(
        run.items.order_by("id").values_list(
            "namespace", "action", "drift", "diff", "error", "attempts"
        )
    )
    assert items == [
        ("ns-0", "create", False, f"0: {awkward}", "", 0),
        ("ns-1", "failed", False, f"1: {awkward}", awkward, 1),
        ("ns-2", "create", True, f"2: {awkward}", "", 2),
    ]
    assert SyncItem.objects.filter(run=run).count() == 3
