"""The demo's history: monitoring.demo (pure, deterministic) and ``manage.py backfill_demo``
(replayed through the product's own collection, rollups, budgets, shares and idle detection)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from monitoring import chargeback, demo
from monitoring.domain import gpu_alerts
from monitoring.models import (
    CapacitySnapshot,
    GpuSample,
    IdleGpuAlert,
    RateCard,
    UsageRollup,
    UsageSample,
)
from quotas.models import Budget
from scheduling.models import ShareComputation
from tests.base import GPU

H100 = "NVIDIA-H100-80GB-HBM3"
END = datetime(2026, 11, 20, 12, tzinfo=UTC)


def node(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": H100}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(namespace: str, name: str, gpus: int, *, node_name="gpu-0", phase="Running") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "resources": {"requests": {GPU: str(gpus), "cpu": "4"}}}
            ],
        },
        "status": {"phase": phase},
    }


NODES = [node("gpu-0"), node("gpu-1")]
PODS = [
    pod("team-a-ml", "train-0", 4),
    pod("team-a-ml", "notebook", 1),
    pod("team-b-ml", "train-0", 4, node_name="gpu-1"),
    pod("team-b-ml", "done", 2, node_name="gpu-1", phase="Succeeded"),
]


@pytest.fixture
def profiles(monkeypatch):
    """team-a-ml: runs a quarter of the time five weeks back, one idle notebook."""
    monkeypatch.setattr(
        demo,
        "PROFILES",
        {
            "team-a-ml": demo.Profile(duty=0.25, idle_pods=1),
            "team-b-ml": demo.Profile(duty=0.9, trips=gpu_alerts.HIGH_TEMPERATURE.alert),
        },
    )


# ---------------------------------------------------------------- the pure history


def test_every_unfinished_pod_runs_at_the_end_and_finished_ones_never(profiles):
    assert [p["metadata"]["name"] for p in demo.pods_at(PODS, END, end=END)] == [
        "train-0",
        "notebook",
        "train-0",
    ]
    assert not any(demo.running(PODS[3], END - timedelta(hours=h), end=END) for h in range(99))


def test_duty_grows_towards_the_end_and_the_history_is_deterministic(profiles):
    def share(start_days: int) -> float:
        hours = [END - timedelta(days=start_days, hours=h) for h in range(24 * 7)]
        return sum(demo.running(PODS[0], t, end=END) for t in hours) / len(hours)

    assert share(30) < share(7) < 1
    assert share(30) == share(30)  # no global random state
    assert [demo.running(PODS[0], END - timedelta(hours=h), end=END) for h in range(200)] == [
        demo.running(PODS[0], END - timedelta(hours=h), end=END) for h in range(200)
    ]


def test_gpus_get_indices_per_node_and_the_idle_and_tripping_ones_are_marked(profiles):
    gpus = demo.demo_gpus(NODES, PODS)

    assert len(gpus) == 9  # the finished pod holds none
    assert [(g.node, g.index) for g in gpus] == [("gpu-0", i) for i in range(5)] + [
        ("gpu-1", i) for i in range(4)
    ]
    assert len({g.uuid for g in gpus}) == 9
    assert {g.pod for g in gpus if g.idle} == {"notebook"}
    assert [(g.namespace, g.index) for g in gpus if g.trips] == [("team-b-ml", 0)]
    assert all(g.model == "NVIDIA H100 80GB HBM3" for g in gpus)


def test_readings_idle_under_ten_percent_and_tripping_what_they_should(profiles):
    gpus = demo.demo_gpus(NODES, PODS)
    running = {("team-a-ml", "train-0"), ("team-a-ml", "notebook"), ("team-b-ml", "train-0")}
    readings = demo.readings_at(gpus, END, end=END, running_pods=running)

    by_pod = {}
    for r in readings:
        by_pod.setdefault((r.gpu.namespace, r.gpu.pod, r.gpu.trips), []).append(r)
    assert all(r.util_gpu < 10 for r in by_pod[("team-a-ml", "notebook", "")])
    assert all(r.util_gpu > 50 for r in by_pod[("team-a-ml", "train-0", "")])
    (hot,) = by_pod[("team-b-ml", "train-0", gpu_alerts.HIGH_TEMPERATURE.alert)]
    assert gpu_alerts.HIGH_TEMPERATURE.holds(hot.temp_c)
    healthy = by_pod[("team-b-ml", "train-0", "")]
    assert not any(gpu_alerts.HIGH_TEMPERATURE.holds(r.temp_c) for r in healthy)
    assert demo.readings_at(gpus, END, end=END, running_pods=set()) == []


# ---------------------------------------------------------------- the command


@pytest.fixture
def snapshot(tmp_path, settings, cast, profiles):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": NODES + PODS}))
    settings.FAIRSHARE_CLUSTER = f"snapshot:{path}"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    CapacitySnapshot.objects.all().delete()  # the cast's; the history starts from nothing
    RateCard.objects.create(
        resource=GPU, flavor="", price_per_unit_hour=Decimal("2"), valid_from=END - timedelta(60)
    )
    Budget.objects.create(team=cast.team_b, resource=GPU, monthly_hours=Decimal(10))
    return path


def test_it_replays_the_history_through_the_product(snapshot, cast):
    call_command("backfill_demo", days=2)
    now = timezone.now()

    collections = CapacitySnapshot.objects.filter(source="demo-backfill")
    assert collections.count() > 48  # hourly for two days, then every minute for three hours
    hourly = UsageRollup.objects.filter(period="hour", resource=GPU, flavor=H100)
    team_b = hourly.filter(team=cast.team_b)
    assert team_b.count() >= 47
    assert all(r.allocated_hours <= 4 for r in team_b)  # never more than its pod holds
    assert sum(r.used_hours for r in team_b) > 0
    assert ShareComputation.objects.filter(trigger="demo-backfill").count() >= 8
    (alert,) = IdleGpuAlert.objects.filter(status="open")
    assert (alert.team, alert.pod, alert.gpus) == (cast.team_a, "notebook", 1)
    assert cast.team_b.budgets.get().alerts.filter(threshold=100).exists()
    last = UsageSample.objects.filter(taken_at=collections.latest("taken_at").taken_at)
    assert sum(s.allocated for s in last.filter(resource=GPU)) == 9  # the snapshot: all run

    report = chargeback.build_report(start=now - timedelta(days=2), end=now, group_by=("team",))
    costs = {row["team"]: Decimal(row["cost"]) for row in report.rows()}
    assert costs["team-a"] > 0 and costs["team-b"] > 0


def test_a_second_run_adds_only_the_time_since_the_first(snapshot):
    call_command("backfill_demo", days=1)
    collections = set(CapacitySnapshot.objects.values_list("taken_at", flat=True))
    samples = set(GpuSample.objects.values_list("uuid", "taken_at"))
    today = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = UsageRollup.objects.filter(period="day", start__lt=today).order_by("start", "id")
    rollups = list(days.values_list("start", "namespace", "resource", "allocated_hours"))
    assert rollups

    call_command("backfill_demo", days=1)

    added = set(CapacitySnapshot.objects.values_list("taken_at", flat=True)) - collections
    assert all(t > max(collections) for t in added) and len(added) <= 2
    new_samples = set(GpuSample.objects.values_list("uuid", "taken_at")) - samples
    assert all(t > max(t for _, t in samples) for _, t in new_samples)
    assert GpuSample.objects.count() == len(samples) + len(new_samples)  # nothing rewritten
    # The days before today are not rolled up again: the same rows, the same figures.
    assert list(days.values_list("start", "namespace", "resource", "allocated_hours")) == rollups


def test_it_needs_the_demo_snapshot_and_a_sane_period(settings, db):
    settings.FAIRSHARE_CLUSTER = "disabled"
    with pytest.raises(CommandError, match="needs FAIRSHARE_CLUSTER=snapshot:PATH"):
        call_command("backfill_demo")
    settings.FAIRSHARE_CLUSTER = "snapshot:/nonexistent.json"
    with pytest.raises(CommandError, match="cannot read the demo cluster snapshot"):
        call_command("backfill_demo")
    with pytest.raises(CommandError, match="--days must be between 1 and 60"):
        call_command("backfill_demo", days=0)


def test_profiles_are_frozen_values():
    profile = demo.Profile(duty=0.5)
    assert replace(profile, duty=0.6).duty == 0.6 and profile.duty == 0.5


def test_the_gpu_feed_stores_each_batch_in_one_transaction(transactional_db, snapshot, monkeypatch):
    """``backfill_demo --follow`` (the demo's GPU agents) once inserted its ~500 rows a minute
    in autocommit: one commit each, and on SQLite's rollback journal the pages' reads queued
    behind them (issue 29's stalls). Each batch is one transaction now, as the ingest API's."""
    import time
    import types

    from django.db import connection

    from portal.management.commands import backfill_demo as command

    batches = []
    real = command._insert_gpu_samples

    def spy(readings, team_ids):
        batches.append((len(readings), connection.in_atomic_block))
        return real(readings, team_ids)

    ticks = []

    def sleep(seconds):
        ticks.append(seconds)
        if len(ticks) > 2:  # two batches, then Ctrl-C
            raise KeyboardInterrupt

    monkeypatch.setattr(command, "_insert_gpu_samples", spy)
    clock = types.SimpleNamespace(sleep=sleep, monotonic=time.monotonic)
    monkeypatch.setattr(command, "time", clock)
    call_command("backfill_demo", days=1, follow=True)

    followed = batches[-2:]
    assert len(ticks) == 3 and all(n > 0 for n, _ in followed), batches
    assert all(atomic for _, atomic in followed)  # fails in autocommit
