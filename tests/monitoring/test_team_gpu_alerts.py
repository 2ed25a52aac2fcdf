"""A team's current GPU alerts (monitoring.gpu_alerts.current_gpu_alerts) and the team page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.domain.gpu_alerts import tripping_readings
from monitoring.gpu_alerts import current_gpu_alerts
from monitoring.models import GpuSample

H100 = "NVIDIA H100 80GB HBM3"


def add_gpu(uuid, alert, *, team, now, node="gpu-1", index=0, namespace=None, pod="train-0"):
    """One GPU whose samples trip ``alert`` at ``now`` (None: a healthy GPU)."""
    namespace = namespace if namespace is not None else team.namespaces.get().name
    GpuSample.objects.bulk_create(
        GpuSample(
            node=node,
            uuid=uuid,
            index=index,
            model=H100,
            namespace=namespace,
            pod=pod if namespace else "",
            team=team,
            **reading,
        )
        for reading in tripping_readings(alert, now=now)
    )


@pytest.fixture
def gpus(cast):
    now = timezone.now()
    a = cast.team_a
    add_gpu("GPU-low", "LowGPUUtilization", team=a, now=now, index=0)
    add_gpu("GPU-full", "HighGPUMemoryUsage", team=a, now=now, index=1)
    add_gpu("GPU-hot", "HighGPUTemperature", team=a, now=now, node="gpu-2", index=0)
    add_gpu("GPU-fine", None, team=a, now=now, index=2)
    add_gpu("GPU-b-hot", "HighGPUTemperature", team=cast.team_b, now=now, node="gpu-9")
    return now


def test_it_finds_each_alert_of_the_teams_gpus_critical_first(cast, gpus):
    alerts = current_gpu_alerts(team=cast.team_a, now=gpus)

    assert [(a.alert, a.severity, a.uuid, a.node, a.index) for a in alerts] == [
        ("HighGPUTemperature", "critical", "GPU-hot", "gpu-2", 0),
        ("LowGPUUtilization", "warning", "GPU-low", "gpu-1", 0),
        ("HighGPUMemoryUsage", "warning", "GPU-full", "gpu-1", 1),
    ]
    hot = alerts[0]
    assert (hot.value, hot.unit, hot.namespace, hot.pod, hot.model) == (
        89.0,
        "°C",
        "team-a-ml",
        "train-0",
        H100,
    )
    assert hot.since == gpus - timedelta(minutes=3)
    assert alerts[2].value == pytest.approx(97.0, abs=0.01)


def test_it_reads_only_the_teams_own_samples(cast, gpus):
    alerts = current_gpu_alerts(team=cast.team_b, now=gpus)

    assert [(a.alert, a.uuid) for a in alerts] == [("HighGPUTemperature", "GPU-b-hot")]


def test_alerts_go_when_the_gpus_stop_reporting(cast, gpus):
    assert current_gpu_alerts(team=cast.team_a, now=gpus + timedelta(minutes=2, seconds=1)) == []


def test_a_gpu_that_moved_to_the_team_starts_afresh(cast):
    now = timezone.now()
    add_gpu("GPU-moved", "LowGPUUtilization", team=cast.team_b, now=now - timedelta(minutes=4))
    for row in tripping_readings("LowGPUUtilization", now=now)[-16:]:  # the last 3¾ minutes
        GpuSample.objects.create(
            node="gpu-1",
            uuid="GPU-moved",
            namespace="team-a-ml",
            pod="new",
            team=cast.team_a,
            **row,
        )

    assert current_gpu_alerts(team=cast.team_a, now=now) == []
    assert current_gpu_alerts(team=cast.team_b, now=now) == []  # gone from team-b 4 minutes ago


def test_it_runs_one_query_whatever_the_number_of_gpus(cast, gpus, django_assert_num_queries):
    with django_assert_num_queries(1):
        current_gpu_alerts(team=cast.team_a, now=gpus)


# ---------------------------------------------------------------- the team page


def test_the_team_page_shows_the_teams_current_gpu_alerts(client, cast, gpus):
    client.force_login(cast.bob)  # a member

    page = client.get("/teams/team-a/").content.decode()

    section = page[page.index('id="gpu-alerts"') : page.index('aria-labelledby="ns-h"')]
    for text in (
        "HighGPUTemperature",
        "LowGPUUtilization",
        "HighGPUMemoryUsage",
        "gpu-2 GPU 0",
        "team-a-ml/train-0",
        "89 °C",
        "97 %",
    ):
        assert text in section, text
    assert "GPU-b-hot" not in page and "gpu-9" not in page


def test_a_lead_cannot_see_another_teams_gpu_alerts(client, cast, gpus):
    client.force_login(cast.charlie)  # lead of team-b

    assert client.get("/teams/team-a/").status_code == 404
    own = client.get("/teams/team-b/").content.decode()
    assert "gpu-9 GPU 0" in own
    assert "gpu-2" not in own and "LowGPUUtilization" not in own


def test_a_team_without_alerts_says_so(client, cast):
    add_gpu("GPU-fine", None, team=cast.team_a, now=timezone.now())
    client.force_login(cast.alice)

    page = client.get("/teams/team-a/").content.decode()

    assert "No GPU alerts" in page
