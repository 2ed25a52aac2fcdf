"""Rollups: raw samples → hourly → daily resource-hours, idempotent; retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from monitoring import services
from monitoring.models import CapacitySnapshot, GpuSample, UsageRollup, UsageSample

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
D = Decimal


def at(hour, minute=0):
    return datetime(2025, 5, 1, hour, minute, tzinfo=UTC)


@pytest.fixture
def intervals(settings):
    # Collections every 30 min (a sample holds ≤ 60 min); GPU readings every 10 min (≤ 20 min).
    settings.CELERY_BEAT_SCHEDULE = {
        "collect-usage": {
            "task": "monitoring.tasks.collect_usage",
            "schedule": timedelta(minutes=30),
        }
    }
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 600


def usage(team, when, allocated=0, pending=0, *, flavor=H100, namespace="team-a-ml"):
    return UsageSample.objects.create(
        taken_at=when,
        team=team,
        namespace=namespace,
        resource=GPU,
        flavor=flavor,
        allocated=D(allocated),
        pending=D(pending),
    )


def gpu(team, when, util, *, uuid="GPU-1", namespace="team-a-ml", pod="train-0"):
    return GpuSample.objects.create(
        taken_at=when,
        node="gpu-1",
        uuid=uuid,
        model="NVIDIA H100 80GB HBM3",
        util_gpu=util,
        namespace=namespace,
        pod=pod,
        team=team,
    )


@pytest.fixture
def samples(cast, intervals):
    a = cast.team_a
    usage(a, at(10), 4)
    usage(a, at(10), pending=2, flavor="")
    usage(a, at(10, 30), 8)
    usage(a, at(11, 15), 2)  # the 10:30 sample held 45 min; this one holds ≤ 60 min
    for minute, util in ((0, 50), (10, 100), (20, 0), (40, 20)):
        gpu(a, at(10, minute), util)
    return cast


def rows(period):
    return [
        (
            r.start,
            r.namespace,
            r.resource,
            r.flavor,
            r.team.slug if r.team else None,
            r.allocated_hours,
            r.pending_hours,
            r.used_hours,
            r.guarantee_hours,
            r.avg_utilization,
            r.samples,
        )
        for r in UsageRollup.objects.filter(period=period).order_by("start", "namespace", "flavor")
    ]


EXPECTED_HOURLY = [
    # 4 GPUs × 30 min + 8 × 30 min = 6 GPU-hours; pending 2 × 30 min (until the next collection);
    # used = (50 % × 10 + 100 % × 10 + 0 × 20 + 20 % × 20 min) = 19 GPU-minutes.
    (at(10), "team-a-ml", GPU, "", "team-a", D(0), D(1), D(0), D(20), None, 0),
    (at(10), "team-a-ml", GPU, H100, "team-a", D(6), D(0), D("0.316667"), D(0), 31.6667, 4),
    (at(10), "team-b-ml", GPU, "", "team-b", D(0), D(0), D(0), D(30), None, 0),
    # 8 × 15 min + 2 × 45 min (held until the window's end, 12:00).
    (at(11), "team-a-ml", GPU, "", "team-a", D(0), D(0), D(0), D(20), None, 0),
    (at(11), "team-a-ml", GPU, H100, "team-a", D("3.5"), D(0), D(0), D(0), None, 0),
    (at(11), "team-b-ml", GPU, "", "team-b", D(0), D(0), D(0), D(30), None, 0),
]
EXPECTED_DAILY = [
    (at(0), "team-a-ml", GPU, "", "team-a", D(0), D(1), D(0), D(40), None, 0),
    (at(0), "team-a-ml", GPU, H100, "team-a", D("9.5"), D(0), D("0.316667"), D(0), 31.6667, 4),
    (at(0), "team-b-ml", GPU, "", "team-b", D(0), D(0), D(0), D(60), None, 0),
]


def test_it_integrates_hand_computed_samples_into_hours_and_days(samples):
    result = services.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    assert (result.start, result.end, result.hourly, result.daily) == (at(10), at(12), 6, 3)
    assert rows("hour") == EXPECTED_HOURLY
    assert rows("day") == EXPECTED_DAILY


def test_running_it_twice_gives_the_same_rows(samples):
    services.rollup_usage(start=at(10), end=at(12), now=at(12, 30))
    first = (rows("hour"), rows("day"), UsageRollup.objects.count())

    services.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    assert (rows("hour"), rows("day"), UsageRollup.objects.count()) == first


def test_the_default_window_is_the_last_two_complete_hours(samples):
    result = services.rollup_usage(now=at(12, 30))

    assert (result.start, result.end) == (at(10), at(12))
    assert rows("hour") == EXPECTED_HOURLY


def test_rerunning_a_past_window_picks_up_late_gpu_samples(samples):
    services.rollup_usage(start=at(10), end=at(12), now=at(12, 30))
    gpu(samples.team_a, at(11, 0), 60)  # arrives late: 60 % for 20 min (the cap)

    services.rollup_usage(start=at(11), end=at(12), now=at(13))

    row = UsageRollup.objects.get(period="hour", start=at(11), flavor=H100)
    assert row.used_hours == D("0.200000")
    assert row.avg_utilization == 60.0
    day = UsageRollup.objects.get(period="day", start=at(0), flavor=H100)
    assert day.used_hours == D("0.516667")
    assert day.samples == 5
    assert day.avg_utilization == pytest.approx((31.6667 * 4 + 60 * 1) / 5, abs=1e-3)


def test_a_sample_holds_at_most_twice_the_collection_interval(cast, intervals):
    usage(cast.team_b, at(10), 10, namespace="team-b-ml")
    usage(cast.team_b, at(12), 10, namespace="team-b-ml")  # two hours later: an outage

    services.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    hours = UsageRollup.objects.filter(period="hour", flavor=H100).values_list(
        "start", "allocated_hours"
    )
    assert list(hours.order_by("start")) == [(at(10), D(10))]


def test_a_collection_without_the_namespace_ends_its_previous_sample(cast, intervals):
    usage(cast.team_b, at(10), 10, namespace="team-b-ml")
    CapacitySnapshot.objects.create(taken_at=at(10, 6), resources={GPU: "100"})

    services.rollup_usage(start=at(10), end=at(11), now=at(12))

    row = UsageRollup.objects.get(period="hour", flavor=H100)
    assert row.allocated_hours == D(1)  # 10 GPUs × 6 minutes


def test_it_does_not_roll_up_the_current_hour(samples):
    result = services.rollup_usage(start=at(10), end=at(14), now=at(11, 20))

    assert (result.start, result.end) == (at(10), at(11))
    assert {r[0] for r in rows("hour")} == {at(10)}


def test_prune_keeps_what_retention_asks_for(cast, settings):
    now = at(12)
    old, recent = now - timedelta(days=15), now - timedelta(days=13)
    usage(cast.team_a, old, 1)
    usage(cast.team_a, recent, 1)
    gpu(cast.team_a, old, 5)
    gpu(cast.team_a, recent, 5)
    CapacitySnapshot.objects.all().delete()
    CapacitySnapshot.objects.create(taken_at=old - timedelta(days=1), resources={})
    newest = CapacitySnapshot.objects.create(taken_at=old, resources={})
    for period, start in (("hour", now - timedelta(days=401)), ("day", now - timedelta(days=401))):
        UsageRollup.objects.create(period=period, start=start, namespace="x", resource=GPU)
    UsageRollup.objects.create(
        period="hour", start=now - timedelta(days=399), namespace="x", resource=GPU
    )

    deleted = services.prune_samples(now)

    assert deleted == {
        "usage_samples": 1,
        "gpu_samples": 1,
        "capacity_snapshots": 1,
        "hourly_rollups": 1,
    }
    assert list(UsageSample.objects.values_list("taken_at", flat=True)) == [recent]
    assert list(GpuSample.objects.values_list("taken_at", flat=True)) == [recent]
    assert list(CapacitySnapshot.objects.values_list("pk", flat=True)) == [newest.pk]
    assert UsageRollup.objects.filter(period="day").count() == 1
    assert UsageRollup.objects.filter(period="hour").count() == 1


def test_the_rollup_task_takes_iso_times_and_prunes(samples):
    from monitoring import tasks

    result = tasks.rollup_usage(start="2025-05-01T10:00:00+00:00", end="2025-05-01T12:00:00Z")

    assert (result["start"], result["end"], result["hourly"], result["daily"]) == (
        "2025-05-01T10:00:00+00:00",
        "2025-05-01T12:00:00+00:00",
        6,
        3,
    )
    assert set(result["pruned"]) == {
        "usage_samples",
        "gpu_samples",
        "capacity_snapshots",
        "hourly_rollups",
    }
