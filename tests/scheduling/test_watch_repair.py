"""Watch-driven repair: ``DriftWatcher`` (what ``manage.py watch_cluster`` runs) sees a managed
object deleted or edited by hand in the fake API server and starts a targeted sync that restores
it; Fairshare's own writes start nothing."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from kubernetes.client import CoreV1Api

from kube.apply import delete
from kube.client import build_api_client
from scheduling.choices import SyncStatus
from scheduling.models import SyncRun
from scheduling.sync import create_run, run_sync
from scheduling.watch import DriftWatcher
from tests.base import make_cast


@pytest.fixture
def inline_syncs(monkeypatch):
    """A queued sync runs at once in the thread that enqueued it (a free worker)."""

    def delay(run_id: int) -> None:
        try:
            run_sync(run_id)
        finally:
            connection.close()

    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", delay)


@pytest.mark.django_db(transaction=True)
def test_a_deleted_or_edited_managed_object_is_restored_by_the_watcher(
    kubeapi, settings, inline_syncs
):
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    assert run_sync(create_run().pk).status == SyncStatus.SUCCEEDED
    kubeapi.bookmark_interval = 0.2
    api_client = build_api_client("kubeconfig", kubeconfig=kubeapi.kubeconfig_path, timeout=10)
    watcher = DriftWatcher(api_client, interval=0.2, timeout_seconds=5)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,))
    thread.start()
    human = kubeapi.api_client()
    try:
        _wait_until(lambda: all(r.lists for r in watcher.reflectors))
        time.sleep(0.3)
        assert watcher.requested == []  # a converged cluster: nothing to repair

        delete(human, "RoleBinding", "fairshare-lead", "team-a-ml")
        _wait_until(lambda: kubeapi.get("RoleBinding", "fairshare-lead", "team-a-ml"))

        CoreV1Api(human).patch_namespaced_resource_quota(
            "fairshare", "team-b-ml", {"spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}
        )
        _wait_until(
            lambda: (
                kubeapi.get("ResourceQuota", "fairshare", "team-b-ml")["spec"]["hard"][
                    "requests.nvidia.com/gpu"
                ]
                == "60"
            )
        )
        time.sleep(0.5)  # the repairs' own writes must not start more syncs
    finally:
        stop.set()
        thread.join(timeout=15)
        api_client.close()

    assert not thread.is_alive()
    assert watcher.requested == [
        {"trigger": "watch", "teams": ["team-a"]},
        {"trigger": "watch", "teams": ["team-b"]},
    ]
    repairs = list(SyncRun.objects.filter(trigger="watch").order_by("pk"))
    assert [(r.status, r.scope) for r in repairs] == [
        (SyncStatus.SUCCEEDED, {"teams": ["team-a"]}),
        (SyncStatus.SUCCEEDED, {"teams": ["team-b"]}),
    ]
    assert (repairs[0].created_count, repairs[1].updated_count, repairs[1].drift_count) == (1, 1, 1)


def test_flushes_are_rate_limited_and_coalesced():
    started: list[dict] = []
    watcher = DriftWatcher(None, interval=1.0, kinds=(), start=lambda **kw: started.append(kw))
    gone = {"kind": "RoleBinding", "metadata": {"name": "x", "labels": {"fairshare.io/team": "a"}}}

    watcher.on_event("DELETED", gone, gone)
    assert watcher.flush(now=100.0) == {"trigger": "watch", "teams": ["a"]}
    watcher.on_event("DELETED", {**gone, "metadata": {**gone["metadata"], "labels": {}}}, None)
    watcher.on_event("DELETED", {**gone, "metadata": {"labels": {"fairshare.io/team": "b"}}}, None)
    assert watcher.flush(now=100.5) is None  # within the interval: held back
    assert watcher.flush(now=101.0) == {"trigger": "watch"}  # an unlabelled object: full sync
    assert watcher.flush(now=105.0) is None  # nothing dirty
    assert started == [{"trigger": "watch", "teams": ["a"]}, {"trigger": "watch"}]


def test_an_object_equal_to_what_fairshare_applied_is_not_drift():
    started: list[dict] = []
    watcher = DriftWatcher(None, interval=0.0, kinds=(), start=lambda **kw: started.append(kw))
    applied = (
        '{"kind":"ResourceQuota","metadata":{"labels":{"fairshare.io/team":"a"},"name":"q"},'
        '"spec":{"hard":{"requests.cpu":"1"}}}'
    )
    live = {
        "kind": "ResourceQuota",
        "metadata": {
            "name": "q",
            "labels": {"fairshare.io/team": "a"},
            "annotations": {"fairshare.io/last-applied": applied},
        },
        "spec": {"hard": {"requests.cpu": "1000m"}},  # the same quantity
    }
    watcher.on_event("MODIFIED", live, None)
    assert watcher.flush(now=1.0) is None
    watcher.on_event("MODIFIED", {**live, "spec": {"hard": {"requests.cpu": "2"}}}, None)
    assert watcher.flush(now=2.0) == {"trigger": "watch", "teams": ["a"]}


@pytest.mark.django_db
def test_watch_cluster_refuses_without_an_api_server(settings):
    settings.FAIRSHARE_CLUSTER = "snapshot:/tmp/x.json"
    with pytest.raises(CommandError, match="needs an API server"):
        call_command("watch_cluster", "--seconds", "1")
    with pytest.raises(CommandError, match="--interval must be greater than 0"):
        call_command("watch_cluster", "--interval", "0")


def _wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)
