"""Rollups: raw samples → hourly → daily resource-hours, idempotent; retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from monitoring import rollups
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
    result = rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    assert (result.start, result.end, result.hourly, result.daily) == (at(10), at(12), 6, 3)
    assert rows("hour") == EXPECTED_HOURLY
    assert rows("day") == EXPECTED_DAILY


def test_running_it_twice_gives_the_same_rows(samples):
    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))
    first = (rows("hour"), rows("day"), UsageRollup.objects.count())

    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    assert (rows("hour"), rows("day"), UsageRollup.objects.count()) == first


def test_the_default_window_is_the_last_two_complete_hours(samples):
    result = rollups.rollup_usage(now=at(12, 30))

    assert (result.start, result.end) == (at(10), at(12))
    assert rows("hour") == EXPECTED_HOURLY


def test_rerunning_a_past_window_picks_up_late_gpu_samples(samples):
    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))
    gpu(samples.team_a, at(11, 0), 60)  # arrives late: 60 % for 20 min (the cap)

    rollups.rollup_usage(start=at(11), end=at(12), now=at(13))

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

    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    hours = UsageRollup.objects.filter(period="hour", flavor=H100).values_list(
        "start", "allocated_hours"
    )
    assert list(hours.order_by("start")) == [(at(10), D(10))]


def test_samples_taken_at_another_cadence_are_integrated_at_theirs(cast, intervals):
    """History back-filled every 2 h (collections) and 1 h (GPU readings): with the cadence
    given, each sample holds until the next; with the configured one (30/10 min) it would hold
    60/20 minutes and lose the rest."""
    for hour in (10, 12):
        usage(cast.team_b, at(hour), 10, namespace="team-b-ml")
    for hour in (10, 11, 12, 13):
        gpu(cast.team_b, at(hour), 50, namespace="team-b-ml")

    rollups.rollup_usage(
        start=at(10),
        end=at(14),
        now=at(14),
        collect_every=timedelta(hours=2),
        gpu_every=timedelta(hours=1),
    )

    hours = UsageRollup.objects.filter(period="hour", flavor=H100).order_by("start")
    assert [(r.start, r.allocated_hours, r.used_hours) for r in hours] == [
        (at(h), D(10), D("0.5")) for h in (10, 11, 12, 13)
    ]

    rollups.rollup_usage(start=at(10), end=at(14), now=at(14))  # the configured cadence
    hours = UsageRollup.objects.filter(period="hour", flavor=H100).order_by("start")
    assert [(r.allocated_hours, r.used_hours) for r in hours] == [
        (D(10), D("0.166667")), (D(0), D("0.166667")), (D(10), D("0.166667")),
        (D(0), D("0.166667")),
    ]  # fmt: skip


def test_a_collection_without_the_namespace_ends_its_previous_sample(cast, intervals):
    usage(cast.team_b, at(10), 10, namespace="team-b-ml")
    CapacitySnapshot.objects.create(taken_at=at(10, 6), resources={GPU: "100"})

    rollups.rollup_usage(start=at(10), end=at(11), now=at(12))

    row = UsageRollup.objects.get(period="hour", flavor=H100)
    assert row.allocated_hours == D(1)  # 10 GPUs × 6 minutes


def test_it_does_not_roll_up_the_current_hour(samples):
    result = rollups.rollup_usage(start=at(10), end=at(14), now=at(11, 20))

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

    from monitoring.models import GpuSampleRejection

    for hour in (old, recent):
        GpuSampleRejection.objects.create(
            node="gpu-1", hour=hour, reason="ts", count=3, last_seen_at=hour
        )

    deleted = rollups.prune_samples(now)

    assert deleted == {
        "usage_samples": 1,
        "gpu_samples": 1,
        "capacity_snapshots": 1,
        "hourly_rollups": 1,
        "gpu_sample_rejections": 1,
        "gpu_devices": 0,
    }
    assert list(GpuSampleRejection.objects.values_list("hour", flat=True)) == [recent]
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
        "gpu_sample_rejections",
        "gpu_devices",
    }


# --------------------------------------------------------------------------- monthly rollups


def month_rows():
    return sorted(
        (
            r.start,
            r.namespace,
            r.resource,
            r.flavor,
            r.team_id,
            r.allocated_hours,
            r.pending_hours,
            r.used_hours,
            r.guarantee_hours,
            r.covered_hours,
            r.busy_hours,
            r.avg_utilization,
            r.samples,
        )
        for r in UsageRollup.objects.filter(period="month")
    )


def test_rollup_usage_also_writes_the_month_of_the_days_it_touched(samples):
    result = rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    assert result.monthly == 3
    a, b = samples.team_a.pk, samples.team_b.pk
    may = at(0)  # 2025-05-01: the month and its first day start together
    # One day so far: the month is that day, plus what the team's allocation covered of its
    # guarantee (the 9.5 H100 GPU-hours, on the guarantee row) and the floor min(A, U).
    assert month_rows() == [
        (may, "team-a-ml", GPU, "", a, D(0), D(1), D(0), D(40), D("9.5"), D(0), None, 0),
        (may, "team-a-ml", GPU, H100, a, D("9.5"), D(0), D("0.316667"), D(0), D(0),
         D("0.316667"), 31.6667, 4),
        (may, "team-b-ml", GPU, "", b, D(0), D(0), D(0), D(60), D(0), D(0), None, 0),
    ]  # fmt: skip


def _random_days(cast, rng):
    """Daily rows for 2025-04-20..06-10: several namespaces, a namespace that moves from
    team-a to team-b on 05-16, an unassigned one, utilization on some days."""
    series = [
        ("team-a-ml", GPU, H100),
        ("team-a-ml", "cpu", ""),
        ("team-b-ml", GPU, ""),
        ("moving", GPU, H100),
        ("stray", "memory", ""),
    ]
    first = datetime(2025, 4, 20, tzinfo=UTC)
    for d in range(52):
        start = first + timedelta(days=d)
        for namespace, resource, flavor in series:
            team = {"team-a-ml": cast.team_a, "team-b-ml": cast.team_b, "stray": None}.get(
                namespace, cast.team_a if start < datetime(2025, 5, 16, tzinfo=UTC) else cast.team_b
            )
            util = rng.random() < 0.5
            UsageRollup.objects.create(
                period="day",
                start=start,
                team=team,
                namespace=namespace,
                resource=resource,
                flavor=flavor,
                allocated_hours=D(rng.randrange(0, 48_000_000)) / 10**6,
                pending_hours=D(rng.randrange(0, 5_000_000)) / 10**6,
                used_hours=D(rng.randrange(0, 48_000_000)) / 10**6,
                guarantee_hours=D(rng.randrange(0, 48_000_000)) / 10**6,
                avg_utilization=round(rng.uniform(0, 100), 4) if util else None,
                samples=rng.randrange(1, 500) if util else 0,
            )


def _expected_months():
    """Monthly rows computed here from the daily ones, the straightforward way."""
    sums = {}
    for r in UsageRollup.objects.filter(period="day"):
        key = (r.start.replace(day=1), r.namespace, r.resource, r.flavor, r.team_id)
        s = sums.setdefault(key, [D(0)] * 6 + [0.0, 0])
        for i, value in enumerate(
            (
                r.allocated_hours,
                r.pending_hours,
                r.used_hours,
                r.guarantee_hours,
                min(r.guarantee_hours, r.allocated_hours),
                min(r.allocated_hours, r.used_hours),
            )
        ):
            s[i] += value
        if r.avg_utilization is not None and r.samples:
            s[6] += r.avg_utilization * r.samples
            s[7] += r.samples
    return sorted(
        (*key, *s[:6], round(s[6] / s[7], 4) if s[7] else None, s[7]) for key, s in sums.items()
    )


def test_monthly_buckets_are_the_sums_of_their_days_per_team(cast):
    import random

    _random_days(cast, random.Random(11))

    written = rollups.rollup_months(
        datetime(2025, 4, 30, tzinfo=UTC), datetime(2025, 6, 2, tzinfo=UTC)
    )

    expected = _expected_months()
    assert written == len(expected) == 3 * 5 + 1  # April, May (+1: "moving" changed team), June
    ours = month_rows()
    assert [r[:11] for r in ours] == [r[:11] for r in expected]  # exact Decimal sums
    for mine, theirs in zip(ours, expected, strict=True):
        assert mine[11] == pytest.approx(theirs[11], abs=1e-4)  # float mean of the days
        assert mine[12] == theirs[12]
    moving = [r for r in ours if r[1] == "moving" and r[0].month == 5]
    assert [r[4] for r in moving] == sorted([cast.team_a.pk, cast.team_b.pk])


def test_recomputing_months_changes_nothing_and_only_touches_their_months(cast):
    import random

    _random_days(cast, random.Random(5))
    rollups.rollup_months(datetime(2025, 4, 1, tzinfo=UTC), datetime(2025, 7, 1, tzinfo=UTC))
    first = month_rows()

    assert rollups.rollup_months(at(3), at(4)) == 6  # May only ("moving": 2 teams), the same
    assert month_rows() == first
    assert UsageRollup.objects.filter(period="month").count() == len(first)

    # A day changes (a late sample): re-running its month follows, the other months stay.
    day = UsageRollup.objects.get(period="day", start=at(0, 0).replace(day=20), namespace="stray")
    day.allocated_hours += 1
    day.save()
    rollups.rollup_months(at(0), at(1))
    after = month_rows()
    changed = [(a, b) for a, b in zip(first, after, strict=True) if a != b]
    assert [(b[0], b[1], b[5] - a[5]) for a, b in changed] == [(at(0), "stray", D(1))]


def test_running_the_rollup_twice_keeps_the_same_months(samples):
    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))
    first = (month_rows(), UsageRollup.objects.count())

    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))

    assert (month_rows(), UsageRollup.objects.count()) == first


def test_a_window_across_months_rolls_up_both_months(cast, intervals):
    end_of_april = datetime(2025, 4, 30, 23, 0, tzinfo=UTC)
    usage(cast.team_a, end_of_april, 4)
    usage(cast.team_a, end_of_april + timedelta(minutes=30), 4)
    usage(cast.team_a, end_of_april + timedelta(minutes=60), 2)

    hours = timedelta(hours=1)
    result = rollups.rollup_usage(
        start=end_of_april, end=end_of_april + 2 * hours, now=end_of_april + 3 * hours
    )

    # April: 4 GPUs × 1 h; May: 2 GPUs held for the 60 min cap.
    starts = {(r[0], r[5]) for r in month_rows() if r[3] == H100}
    assert starts == {(datetime(2025, 4, 1, tzinfo=UTC), D(4)), (at(0), D(2))}
    assert result.monthly == len(month_rows())


def test_prune_keeps_monthly_rollups(cast):
    old = at(0) - timedelta(days=800)
    UsageRollup.objects.create(period="month", start=old, namespace="x", resource=GPU)

    rollups.prune_samples(at(12))

    assert UsageRollup.objects.filter(period="month").count() == 1


def test_a_month_bucket_is_unique_per_team(cast):
    from django.db import IntegrityError, transaction

    fields = {"period": "month", "start": at(0), "namespace": "x", "resource": GPU}
    UsageRollup.objects.create(team=cast.team_a, **fields)
    UsageRollup.objects.create(team=cast.team_b, **fields)  # another team: its own bucket
    UsageRollup.objects.create(team=None, **fields)
    for team in (cast.team_a, None):
        with pytest.raises(IntegrityError), transaction.atomic():
            UsageRollup.objects.create(team=team, **fields)
