"""Integration alone (monitoring.integration.integrate_usage): point samples become seconds per
bucket by the rule of the module's docstring, before any rollup row is written."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from monitoring.integration import add_guarantees, integrate_usage
from monitoring.models import CapacitySnapshot, GpuSample, UsageSample
from monitoring.units import DAY, HOUR
from quotas.models import TeamQuota

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


def at(hour, minute=0, day=1):
    return datetime(2025, 5, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def every_30_min(settings):
    settings.CELERY_BEAT_SCHEDULE = {
        "collect-usage": {"task": "monitoring.tasks.collect_usage", "schedule": 1800}
    }
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 600


def sample(team, when, allocated, pending=0, namespace="team-a-ml"):
    UsageSample.objects.create(
        taken_at=when, team=team, namespace=namespace, resource=GPU, flavor=H100,
        allocated=Decimal(allocated), pending=Decimal(pending),
    )  # fmt: skip


@pytest.mark.django_db
def test_a_sample_holds_until_the_next_collection_split_at_the_hour(cast, every_30_min):
    sample(cast.team_a, at(10, 40), 4, pending=1)
    sample(cast.team_a, at(11, 10), 2)
    acc = integrate_usage(at(10), at(12), now=at(12), size=HOUR)
    ten, eleven = acc[(at(10), "team-a-ml", GPU, H100)], acc[(at(11), "team-a-ml", GPU, H100)]
    # 4 GPUs for the 20 minutes to 11:00 and 10 more to 11:10; then 2 GPUs to the window's end.
    assert ten.allocated == 4 * 20 * 60 and ten.pending == 20 * 60
    assert eleven.allocated == 4 * 10 * 60 + 2 * 50 * 60
    later = integrate_usage(at(10), at(14), now=at(14), size=HOUR)
    assert later[(at(12), "team-a-ml", GPU, H100)].allocated == 2 * 10 * 60  # capped at 60 min
    assert ten.team_id == cast.team_a.pk


@pytest.mark.django_db
def test_an_outage_counts_two_intervals_and_the_last_sample_stops_at_now(cast, every_30_min):
    sample(cast.team_a, at(9), 3)  # then nothing: the collector stopped
    acc = integrate_usage(at(9), at(12), now=at(12), size=HOUR)
    assert acc[(at(9), "team-a-ml", GPU, H100)].allocated == 3 * 3600  # 2 × 30 min
    assert (at(10), "team-a-ml", GPU, H100) not in acc
    sample(cast.team_a, at(11, 50), 5)
    CapacitySnapshot.objects.all().delete()  # the cast's, taken today: no collection after now
    acc = integrate_usage(at(11), at(13), now=at(11, 55), size=HOUR)
    assert acc[(at(11), "team-a-ml", GPU, H100)].allocated == 5 * 5 * 60


@pytest.mark.django_db
def test_gpu_utilization_counts_time_weighted_and_only_for_pods(cast, every_30_min):
    common = {"node": "gpu-1", "uuid": "GPU-1", "model": "NVIDIA H100 80GB HBM3"}
    pod = {"namespace": "team-a-ml", "pod": "train-0", "team": cast.team_a}
    GpuSample.objects.create(taken_at=at(10), util_gpu=50, **common, **pod)
    GpuSample.objects.create(taken_at=at(10, 10), util_gpu=100, **common, **pod)
    GpuSample.objects.create(taken_at=at(10, 20), util_gpu=90, **common)  # no pod: not anyone's
    acc = integrate_usage(at(10), at(11), now=at(11), size=HOUR)
    item = acc[(at(10), "team-a-ml", GPU, H100)]
    assert item.used == pytest.approx(0.5 * 600 + 1.0 * 600)
    assert item.util_seconds == pytest.approx(1200)
    assert item.to_rollup("hour", (at(10), "team-a-ml", GPU, H100)).avg_utilization == 75


@pytest.mark.django_db
def test_daily_buckets_and_guarantees_on_the_first_namespace(cast, every_30_min):
    sample(cast.team_a, at(23, 45), 1)
    acc = integrate_usage(at(0), at(0, day=3), now=at(0, day=3), size=DAY)
    assert acc[(at(0), "team-a-ml", GPU, H100)].allocated == 15 * 60
    assert acc[(at(0, day=2), "team-a-ml", GPU, H100)].allocated == 45 * 60
    TeamQuota.objects.update_or_create(
        team=cast.team_a, resource=GPU, defaults={"guarantee": 2, "limit": 4}
    )
    first = sorted(cast.team_a.namespaces.values_list("name", flat=True))[0]
    add_guarantees(acc, [at(0)], DAY)
    assert acc[(at(0), first, GPU, "")].guarantee == 2 * 86400
