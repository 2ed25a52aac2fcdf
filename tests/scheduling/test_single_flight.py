"""Single flight that coalesces: a sync asked for while another runs is never dropped nor
failed; exactly one follow-up carries out every request that arrived meanwhile, across threads
(real Redis lock, real PostgreSQL/SQLite rows) and across a worker that died holding the lock."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from quotas.models import TeamQuota
from scheduling import sync
from scheduling.choices import SyncStatus
from scheduling.models import SyncRun
from scheduling.sync import create_run, run_sync
from tests.base import GPU, make_cast


@pytest.fixture
def inline_follow_ups(monkeypatch):
    """``sync_cluster.delay`` runs the follow-up at once, in the thread that enqueued it (what
    a free worker would do), and records every message."""
    enqueued: list[int] = []

    def delay(run_id: int) -> None:
        enqueued.append(run_id)
        run_sync(run_id)

    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", delay)
    return enqueued


@pytest.mark.django_db(transaction=True)
def test_a_sync_requested_during_another_is_run_afterwards_exactly_once(
    kubeapi, settings, inline_follow_ups
):
    cast = make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    first = create_run(trigger="first")
    # The first run has read the database (rendered) and is stuck for a second on its first
    # LIST, so the change below is one it cannot have seen.
    kubeapi.fault(429, verb="list", kind="Namespace", retry_after=1, times=1)
    errors: list[BaseException] = []

    def run_first() -> None:
        try:
            run_sync(first.pk)
        except BaseException as e:  # surfaced below
            errors.append(e)
        finally:
            connection.close()

    thread = threading.Thread(target=run_first)
    thread.start()
    _wait_until(lambda: kubeapi.counts[("list", "Namespace")] >= 1)
    TeamQuota.objects.filter(team=cast.team_a, resource=GPU).update(limit=Decimal(36))
    burst = [create_run(trigger=f"burst-{i}", teams=["team-a"]) for i in range(5)]
    answers = [run_sync(r.pk) for r in burst]
    thread.join(timeout=60)

    assert errors == []
    assert [a.status for a in answers] == [SyncStatus.QUEUED] * 5  # waiting, not failed
    assert all(a.log.startswith(f"Waiting: sync #{first.pk} is running") for a in answers)
    first.refresh_from_db()
    assert first.status == SyncStatus.SUCCEEDED
    for run in burst:
        run.refresh_from_db()
    follow_up, *merged = burst
    # One message, for the oldest pending request; it took in the other four.
    assert inline_follow_ups == [follow_up.pk]
    assert follow_up.status == SyncStatus.SUCCEEDED
    updated = set(follow_up.items.filter(action="update").values_list("kind", "name"))
    assert updated == {("ResourceQuota", "fairshare"), ("Queue", "team-a")}  # the new limit
    assert [(m.status, m.merged_into_id) for m in merged] == [(SyncStatus.MERGED, follow_up.pk)] * 4
    assert all(m.log.startswith(f"Included in sync #{follow_up.pk}") for m in merged)
    assert all(m.error == "" for m in merged)
    # Two runs did work — the first and the follow-up — and the change reached the cluster.
    assert kubeapi.counts[("list", "ResourceQuota")] == 2
    quota = kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "36"
    assert not SyncRun.objects.filter(status=SyncStatus.QUEUED).exists()


@pytest.mark.django_db
def test_the_follow_up_plans_the_union_of_the_merged_scopes(kubeapi, settings, monkeypatch):
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", lambda run_id: None)
    leader = create_run(teams=["team-a"])
    create_run(teams=["team-b"])

    run = run_sync(leader.pk)

    assert run.status == SyncStatus.SUCCEEDED
    assert run.scope == {"teams": ["team-a", "team-b"]}
    full = create_run()
    create_run(teams=["team-a"])
    newer = create_run(teams=["team-b"])
    assert run_sync(newer.pk).scope == {}  # a full request in the merge makes it full
    full.refresh_from_db()
    assert (full.status, full.merged_into_id) == (SyncStatus.MERGED, newer.pk)


@pytest.mark.django_db
def test_a_dry_run_is_not_merged_into_a_sync(kubeapi, settings, monkeypatch):
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", lambda run_id: None)
    dry = create_run(dry_run=True)

    run = run_sync(create_run().pk)

    dry.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED
    assert dry.status == SyncStatus.QUEUED
    assert run_sync(dry.pk).status == SyncStatus.SUCCEEDED


@pytest.mark.django_db
def test_requests_waiting_on_a_dead_worker_are_carried_out_by_the_next_run(
    kubeapi, settings, monkeypatch
):
    """The worker of sync #N died holding the Redis lock; requests queued behind it stay
    pending (not failed) until the stale window passes; then the next run reaps #N, takes the
    lock over and merges them."""
    make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_SYNC_STALE_AFTER = 600
    enqueued: list[int] = []
    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", enqueued.append)
    dead = SyncRun.objects.create(status=SyncStatus.RUNNING, heartbeat_at=timezone.now())
    client = redis.Redis.from_url(sync.lock_url())
    client.set(sync.lock_key(), f"{dead.pk}:deadbeef", ex=900)
    try:
        waiting = run_sync(create_run(teams=["team-a"]).pk)
        assert waiting.status == SyncStatus.QUEUED
        assert enqueued == []

        long_ago = timezone.now() - timedelta(hours=1)
        SyncRun.objects.filter(pk=dead.pk).update(heartbeat_at=long_ago)
        beat = run_sync(create_run(trigger="schedule").pk)
    finally:
        client.delete(sync.lock_key())
        client.close()

    dead.refresh_from_db()
    waiting.refresh_from_db()
    assert dead.status == SyncStatus.FAILED and dead.error.startswith("Worker lost")
    assert beat.status == SyncStatus.SUCCEEDED
    assert beat.created_count == 16
    assert (waiting.status, waiting.merged_into_id) == (SyncStatus.MERGED, beat.pk)


def _wait_until(predicate, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


@pytest.mark.django_db
def test_a_merged_request_says_which_sync_included_it_on_its_page_and_in_the_api(client):
    cast = make_cast()
    follow_up = SyncRun.objects.create(status=SyncStatus.SUCCEEDED, scope={"teams": ["team-a"]})
    merged = SyncRun.objects.create(
        status=SyncStatus.MERGED, merged_into=follow_up, scope={"teams": ["team-a"]}
    )
    client.force_login(cast.root)  # the API's sync runs are for admins

    link = reverse("scheduling:syncrun", args=[follow_up.pk])
    page = client.get(reverse("scheduling:syncrun", args=[merged.pk])).content.decode()
    api = client.get(f"/api/v1/sync-runs/{merged.pk}/").json()
    listing = client.get(reverse("scheduling:syncrun_list")).content.decode()

    assert f'Included in <a href="{link}">sync #{follow_up.pk}</a>' in page
    assert "Targeted: teams team-a" in page
    assert 'badge merged">Merged</span>' in page
    assert (api["status"], api["merged_into"], api["scope"]) == (
        "merged",
        follow_up.pk,
        {"teams": ["team-a"]},
    )
    assert f'included in <a href="{link}">#{follow_up.pk}</a>' in listing
