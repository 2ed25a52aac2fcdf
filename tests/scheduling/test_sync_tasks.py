"""Celery glue of the sync engine: tasks, start_sync enqueueing, the quota_changed receiver."""

from __future__ import annotations

import logging
from decimal import Decimal
from unittest import mock

import pytest
from celery.canvas import _chain
from kombu.exceptions import OperationalError

from kube.errors import K8sTransient
from quotas.direct import set_team_quota
from quotas.signals import quota_changed
from scheduling import sync, tasks
from scheduling.choices import SyncStatus
from scheduling.models import SyncRun
from scheduling.sync import create_run, start_sync
from tests.base import GPU


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    return kubeapi


def test_start_sync_creates_a_queued_run_and_enqueues_it_after_commit(
    cast, django_capture_on_commit_callbacks
):
    with (
        mock.patch.object(tasks.sync_cluster, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        run = start_sync(dry_run=True, trigger="api", requested_by=cast.root)
        assert delay.call_count == 0  # not before commit

    assert len(callbacks) == 1
    delay.assert_called_once_with(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.dry_run, run.trigger, run.requested_by) == (
        SyncStatus.QUEUED,
        True,
        "api",
        cast.root,
    )


def test_start_sync_marks_the_run_failed_when_the_broker_is_down(
    cast, django_capture_on_commit_callbacks
):
    with (
        mock.patch.object(tasks.sync_cluster, "delay", side_effect=OperationalError("down")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        run = start_sync()

    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert "broker unavailable" in run.error


def test_the_scheduled_task_without_a_run_creates_one_and_enqueues_it(
    cast, cluster, django_capture_on_commit_callbacks
):
    with (
        mock.patch.object(tasks.sync_cluster, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = tasks.sync_cluster()

    run = SyncRun.objects.get()
    assert result == {"run_id": run.pk, "status": SyncStatus.QUEUED}
    assert run.trigger == "schedule"
    delay.assert_called_once_with(run_id=run.pk)


def test_the_scheduled_task_does_nothing_when_kubernetes_is_disabled(cast, settings):
    settings.FAIRSHARE_CLUSTER = "disabled"

    with mock.patch.object(tasks.sync_cluster, "delay") as delay:
        result = tasks.sync_cluster()

    assert result == {"run_id": None, "status": "skipped"}
    assert not SyncRun.objects.exists()
    delay.assert_not_called()


def test_the_task_runs_the_given_sync(cast, cluster):
    run = create_run(trigger="api")

    result = tasks.sync_cluster.apply(kwargs={"run_id": run.pk}).get()

    assert result == {"run_id": run.pk, "status": SyncStatus.SUCCEEDED}
    run.refresh_from_db()
    assert run.created_count == 16
    assert cluster.get("Queue", "team-a") is not None


def test_the_task_retries_only_transient_errors_a_bounded_number_of_times():
    assert tasks.sync_cluster.autoretry_for == (K8sTransient,)
    assert tasks.sync_cluster.retry_backoff is True
    assert tasks.sync_cluster.max_retries == 3


def test_the_task_retries_an_unreachable_server_on_the_same_run_then_fails_it(
    cast, cluster, monkeypatch
):
    monkeypatch.setattr("scheduling.sync.planning.RETRY_ATTEMPTS", 1)
    run = create_run()
    calls = []
    real = sync.run_sync

    def counting(run_id, **kwargs):
        calls.append(kwargs["requeue_on_transient"])
        return real(run_id, **kwargs)

    monkeypatch.setattr(sync, "run_sync", counting)
    cluster.stop()
    try:
        result = tasks.sync_cluster.apply(kwargs={"run_id": run.pk})
    finally:
        cluster.start()

    assert result.failed()
    assert isinstance(result.result, K8sTransient)
    assert calls == [True, True, True, False]  # the same run, requeued until the last retry
    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert "unreachable" in run.error
    assert SyncRun.objects.count() == 1


def test_the_compute_shares_task_calls_the_service(monkeypatch):
    from scheduling import services

    computation = mock.Mock(pk=7, teams=3)
    compute = mock.Mock(return_value=computation)
    monkeypatch.setattr(services, "compute_shares", compute)

    assert tasks.compute_shares(trigger="quota-change") == {"computation_id": 7, "teams": 3}
    compute.assert_called_once_with(trigger="quota-change")


# --------------------------------------------------------------------------- receiver


def chained(apply_async: mock.Mock) -> list[tuple[str, dict]]:
    [call] = apply_async.call_args_list
    workflow = call.args[0]
    return [(sig.task, dict(sig.kwargs)) for sig in workflow.tasks]


@pytest.mark.django_db
def test_a_quota_change_syncs_the_teams_at_once_and_chains_shares_then_queues(cast):
    with (
        mock.patch.object(_chain, "apply_async", autospec=True) as apply_async,
        mock.patch.object(tasks.sync_cluster, "delay") as delay,
    ):
        quota_changed.send(sender=None, team_ids=[cast.team_a.pk], reason="approve")

    # Quotas and RBAC do not wait for the share computation: a targeted sync goes first.
    delay.assert_called_once_with(trigger="quota-change:approve", teams=["team-a"])
    assert chained(apply_async) == [
        ("scheduling.tasks.compute_shares", {"trigger": "quota-change:approve"}),
        (
            "scheduling.tasks.sync_cluster",
            {"trigger": "quota-change:approve:shares", "queues": True},
        ),
    ]
    [call] = apply_async.call_args_list
    assert all(sig.immutable for sig in call.args[0].tasks)


def test_a_quota_service_triggers_the_sync_and_the_chain_after_commit(
    cast, django_capture_on_commit_callbacks
):
    with (
        mock.patch.object(_chain, "apply_async", autospec=True) as apply_async,
        mock.patch.object(tasks.sync_cluster, "delay") as delay,
    ):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            set_team_quota(
                cast.team_a, GPU, guarantee=Decimal(10), limit=Decimal(20), actor=cast.root
            )
        assert apply_async.call_count == 0
        assert delay.call_count == 0
        for callback in callbacks:
            callback()

    delay.assert_called_once_with(trigger="quota-change:set-quota", teams=["team-a"])
    assert [task for task, _ in chained(apply_async)] == [
        "scheduling.tasks.compute_shares",
        "scheduling.tasks.sync_cluster",
    ]


@pytest.mark.django_db
def test_a_broker_outage_is_logged_and_does_not_break_the_request(caplog):
    with (
        mock.patch.object(tasks.sync_cluster, "delay", side_effect=OperationalError("refused")),
        caplog.at_level(logging.ERROR, logger="scheduling.receivers"),
    ):
        quota_changed.send(sender=None, team_ids=[4], reason="set-quota")

    [record] = caplog.records
    assert "could not enqueue" in record.getMessage()
    assert "[4]" in record.getMessage()


@pytest.mark.django_db
def test_a_sync_task_without_a_run_creates_a_targeted_run_when_given_teams(settings):
    settings.FAIRSHARE_CLUSTER = "kubeconfig:/nowhere"  # the enqueue waits for a commit

    result = tasks.sync_cluster.run(trigger="t", teams=["team-b", "team-a"])

    run = SyncRun.objects.get(pk=result["run_id"])
    assert run.scope == {"teams": ["team-a", "team-b"]}
    assert run.is_targeted


@pytest.mark.django_db
def test_compute_shares_task_skips_cleanly_before_any_capacity_was_collected():
    from scheduling.tasks import compute_shares

    assert compute_shares(trigger="test") == {
        "computation_id": None,
        "teams": 0,
        "status": "skipped",
    }


@pytest.mark.django_db
def test_prune_history_drops_old_finished_runs_but_keeps_the_newest_and_running_ones():
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import SyncRun
    from scheduling.sync import prune_sync_history

    now = timezone.now()
    old = [SyncRun.objects.create(status="succeeded") for _ in range(3)]
    running = SyncRun.objects.create(status="running")
    SyncRun.objects.filter(pk__in=[r.pk for r in [*old, running]]).update(
        created=now - timedelta(days=30)
    )
    fresh = SyncRun.objects.create(status="failed")
    assert prune_sync_history(keep_days=14, keep_last=1, now=now) == 3
    assert set(SyncRun.objects.values_list("pk", flat=True)) == {running.pk, fresh.pk}


def test_a_fresh_web_process_knows_the_sync_task_by_name():
    """The web process enqueues ``sync_cluster`` by name; Celery's autodiscovery only runs
    when a worker starts, so a process that never imported scheduling.tasks (gunicorn)
    once answered POST /sync/start/ with NotRegistered. A new interpreter proves the app
    registry has it after django.setup() alone."""
    import os
    import subprocess
    import sys

    code = (
        "import django; django.setup()\n"
        "from celery import current_app\n"
        f"print({sync.SYNC_TASK!r} in current_app.tasks)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "FAIRSHARE_DEBUG": "true"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
