"""/api/v1/workloads/: the newest collection's workloads, filtered and scoped to visible teams."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from monitoring.models import Workload

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
URL = "/api/v1/workloads/"


def workload(team, name, *, taken_at=NOW, waiting=True, namespace=None, queue="", **extra):
    return Workload.objects.create(
        taken_at=taken_at,
        team=team,
        namespace=namespace or (f"{team.slug}-ml" if team else "sandbox"),
        name=name,
        kind="VolcanoJob",
        queue=queue or (team.slug if team else ""),
        gang_size=4,
        pods=4,
        requested={"nvidia.com/gpu": "32"},
        gpus=32,
        phase="Pending" if waiting else "Running",
        waiting=waiting,
        wait_code="fair-share" if waiting else "",
        wait_reason="waiting: team-a's queue is at its fair allocation, 16 of 16 GPUs"
        if waiting
        else "",
        **extra,
    )


@pytest.fixture
def rows(cast):
    workload(cast.team_a, "old", taken_at=NOW - timedelta(minutes=1))
    workload(cast.team_a, "train")
    workload(cast.team_a, "serve", waiting=False)
    workload(cast.team_b, "secret-b")
    workload(None, "stray")


def names(response):
    assert response.status_code == 200, response.content
    return sorted(item["name"] for item in response.json()["results"])


def test_the_url_name(cast):
    assert reverse("monitoring-api:workload-list") == URL


def test_a_lead_sees_only_their_teams_workloads_of_the_newest_collection(client_as, rows):
    assert names(client_as("lead").get(URL)) == ["serve", "train"]


def test_a_lead_cannot_see_another_teams_workloads_even_by_filter(client_as, rows):
    response = client_as("lead").get(URL, {"namespace": "team-b-ml"})
    assert names(response) == []
    assert "secret-b" not in client_as("lead").get(URL, {"team": "team-b"}).content.decode()
    assert names(client_as("other-lead").get(URL)) == ["secret-b"]


def test_an_admin_sees_every_team_and_unassigned_namespaces(client_as, rows):
    assert names(client_as("admin").get(URL)) == ["secret-b", "serve", "stray", "train"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"phase": "Pending"}, ["secret-b", "stray", "train"]),
        ({"waiting": "false"}, ["serve"]),
        ({"team": "team-a"}, ["serve", "train"]),
        ({"queue": "team-b"}, ["secret-b"]),
        ({"namespace": "sandbox"}, ["stray"]),
    ],
)
def test_it_filters(client_as, rows, query, expected):
    assert names(client_as("admin").get(URL, query)) == expected


def test_a_row_says_what_the_gang_needs_and_why_it_waits(client_as, rows):
    (item,) = client_as("lead").get(URL, {"waiting": "true"}).json()["results"]

    assert item["requested"] == {"nvidia.com/gpu": "32"}
    assert item["team"] == "team-a"
    assert (item["gang_size"], item["wait_code"]) == (4, "fair-share")
    assert item["wait_reason"].startswith("waiting: team-a's queue is at its fair allocation")


def test_anonymous_is_refused(client_as, rows):
    assert client_as("anonymous").get(URL).status_code == 401
