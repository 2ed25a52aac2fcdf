"""The cluster sync under faults (issue "Hardening"): random API failures, server restarts that
lose state, objects that are not ours, and a Celery worker killed in the middle of a run.

The long soak is ``bench/soak_sync.py`` (a separate command); the first test here is its short
version, with the same end checks, on a fixed seed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from bench.soak_sync import FAULTS, Soak, add_teams, lookalikes
from quotas.models import Team
from scheduling import tasks
from scheduling.choices import SyncAction, SyncStatus
from scheduling.domain.render import LABEL_MANAGED_BY
from scheduling.models import SyncRun
from scheduling.sync import create_run, run_sync
from tests.base import make_cast

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    return kubeapi


def sync_now(**kwargs) -> SyncRun:
    run = run_sync(create_run(dry_run=kwargs.pop("dry_run", False)).pk, **kwargs)
    run.refresh_from_db()
    return run


def planned_actions(run: SyncRun) -> Counter:
    return Counter(run.items.values_list("action", flat=True))


def ours(obj: dict) -> bool:
    return (obj["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == "fairshare"


# --------------------------------------------------------------------------- a short soak


@pytest.mark.slow
def test_a_short_soak_with_random_faults_converges_and_records_every_failure(cast, kubeapi):
    add_teams()
    soak = Soak(kubeapi, actor=cast.root, seed=3, runs=18, read_timeout=1.0)

    report = soak.run()

    assert report.problems == [], "\n".join(report.lines())
    # Every kind of fault was injected and fired; some items and runs failed because of them.
    assert set(report.faults) == set(FAULTS)
    assert all(report.faults[f] > 0 for f in FAULTS), report.faults
    assert report.restarts["lost state"] > 0
    assert report.failed_items > 0
    assert report.statuses[SyncStatus.FAILED] > 0
    assert report.retries > 0
    assert report.deletes > 0  # prunes happened, and every one was of a labelled object
    assert report.lookalikes_checked + report.lookalikes_waiting == len(lookalikes())
    assert report.final["steady writes"] == 0
    assert set(report.final["dry-run plan"]) == {SyncAction.UNCHANGED}
    # Nothing is left half-done in the history.
    assert not SyncRun.objects.filter(status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]).exists()


# --------------------------------------------------------------------------- not ours


def test_syncs_never_delete_or_change_objects_without_our_label(cast, cluster):
    seeded = lookalikes()
    for obj in seeded:
        cluster.put_object(obj)
    keys = [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in seeded]
    versions = {key: cluster.get(*key)["metadata"]["resourceVersion"] for key in keys}

    created = sync_now()
    Team.objects.filter(slug="dept-x").update(active=False)  # team-a and team-b go with it
    pruned = sync_now()
    dry = sync_now(dry_run=True)

    assert created.status == pruned.status == dry.status == SyncStatus.SUCCEEDED
    assert pruned.pruned_count == 16 - 3  # all but the 2 namespaces (kept) and the PriorityClass
    assert sum(n for (verb, _), n in cluster.counts.items() if verb == "delete") == 13
    assert planned_actions(dry) == {SyncAction.UNCHANGED: 1}  # the PriorityClass
    # No look-alike was ever listed, planned or recorded.
    items = set(SyncRun.objects.values_list("items__kind", "items__name", "items__namespace"))
    assert not {(kind, name, ns or "") for kind, name, ns in keys} & items
    # Every look-alike is still there, never written to (same resourceVersion).
    for key in keys:
        live = cluster.get(*key)
        assert live is not None, key
        assert live["metadata"]["resourceVersion"] == versions[key], key
    assert cluster.get("ResourceQuota", "gpu-burst", "team-a-ml") is not None
    assert [o["metadata"]["name"] for o in cluster.objects("Queue") if ours(o)] == []


# --------------------------------------------------------------------------- worker crash


def _worker_env(kubeconfig: str) -> dict[str, str]:
    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DATABASE_URL=(
            f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        DJANGO_SETTINGS_MODULE="config.settings",
        FAIRSHARE_CLUSTER=f"kubeconfig:{kubeconfig}",
        FAIRSHARE_KUBE_TIMEOUT="120",  # the held request hangs; the worker waits for it
        FAIRSHARE_LOG_LEVEL="INFO",
    )
    return env


def _forget_message(queue: str) -> None:
    """Drop the killed worker's unacknowledged message (only ours: routed to ``queue``)."""
    import redis

    client = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    try:
        for tag, payload in client.hscan_iter("unacked"):
            with contextlib.suppress(ValueError, TypeError, IndexError):
                if json.loads(payload)[2] == queue:
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)
        client.delete(queue, f"_kombu.binding.{queue}")
    finally:
        client.close()


def _wait_for(predicate, *, timeout: float, what: str, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    output = log.read_text()[-3000:] if log is not None and log.exists() else ""
    pytest.fail(f"timed out waiting for {what}\n{output}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_whose_worker_is_killed_is_failed_and_the_next_sync_completes_it(
    kubeapi, settings, tmp_path
):
    """A real ``celery worker`` process takes the run; it is SIGKILLed while the run is
    RUNNING (held on one object by the API server). Nothing finishes the run until the stale
    window passes; then the next sync marks it FAILED ("worker lost") and converges."""
    if not str(django_settings.CELERY_BROKER_URL).startswith("redis://"):
        pytest.skip("needs the Redis broker of the test settings")
    if connection.vendor != "postgresql":
        pytest.skip("the worker process shares the test database through DATABASE_URL")
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_SYNC_STALE_AFTER = 8
    held = kubeapi.fault("timeout", verb="apply", kind="Queue", name="team-b", delay=120, times=1)
    queue = f"soak-crash-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,  # the interpreter running the tests, wherever its venv is
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--pool=solo",
                "-Q",
                queue,
                "-n",
                f"{queue}@%h",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
            ],
            cwd=ROOT,
            env=_worker_env(kubeapi.kubeconfig_path),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        run = create_run(trigger="crash")
        tasks.sync_cluster.apply_async(kwargs={"run_id": run.pk}, queue=queue)

        _wait_for(lambda: held.fired, timeout=40, what="the held apply", proc=proc, log=log)
        run.refresh_from_db()
        assert run.status == SyncStatus.RUNNING
        assert run.worker.endswith(f":{proc.pid}")
        applied = [o for o in kubeapi.objects("PriorityClass") if ours(o)]
        assert applied  # mid-run: the PriorityClasses went in before the held Queue
        # (Namespaces now go after the Queues: each is routed once its Queue is Open.)

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        kubeapi.clear_faults()
        _forget_message(queue)

    run.refresh_from_db()
    assert run.status == SyncStatus.RUNNING  # the dead worker cannot say so itself
    heartbeat = run.heartbeat_at
    early = None
    if (timezone.now() - heartbeat).total_seconds() < settings.FAIRSHARE_SYNC_STALE_AFTER - 2:
        # Within the stale window the dead run still counts as running: single flight holds.
        early = sync_now()
        assert early.status == SyncStatus.QUEUED  # a pending request, not failed
        assert early.log.startswith(f"Waiting: sync #{run.pk} is running")
    stale_at = heartbeat.timestamp() + settings.FAIRSHARE_SYNC_STALE_AFTER + 0.5
    time.sleep(max(0.0, stale_at - timezone.now().timestamp()))

    after = sync_now()

    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert run.error.startswith("Worker lost")
    assert run.finished_at is not None
    assert run.items.count() == 0
    assert after.status == SyncStatus.SUCCEEDED, after.error
    assert after.created_count > 0 and after.unchanged_count > 0  # re-planned from live state
    assert after.created_count + after.unchanged_count == 16
    if early is not None:  # the request made while the dead run held the lock was carried out
        early.refresh_from_db()
        assert (early.status, early.merged_into_id) == (SyncStatus.MERGED, after.pk)
    check = sync_now(dry_run=True)
    assert planned_actions(check) == {SyncAction.UNCHANGED: 16}
