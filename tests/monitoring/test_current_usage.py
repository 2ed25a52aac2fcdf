"""Usage now, per team (issue 29): one source (monitoring.usage.current_usage) for the
dashboard, the team page and /api/v1/usage/current/; a department's figure is its subtree's on
every surface (its own page once said "No usage collected" while the dashboard showed 154)."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from monitoring.domain.subtree import descendants, subtree_totals
from monitoring.models import UsageRollup, UsageSample
from monitoring.usage import current_usage
from quotas.models import Namespace, Team
from tests.base import GPU

NOW = timezone.now().replace(microsecond=0)


def test_subtree_totals_add_every_level_once_and_keep_a_department_own_part():
    parents = {1: None, 2: 1, 3: 1, 4: 2, 5: None}
    own = {1: {"g": Decimal(8)}, 2: {"g": Decimal(1)}, 3: {"g": Decimal(2)}, 4: {"g": Decimal(4)}}
    totals = subtree_totals(parents, own)
    assert totals == {
        1: {"g": Decimal(15)},  # 8 own + 1 + 2 + 4 (a grandchild counts once)
        2: {"g": Decimal(5)},
        3: {"g": Decimal(2)},
        4: {"g": Decimal(4)},
    }
    assert 5 not in totals  # nothing of its own, nothing below
    assert descendants(parents, 1) == [1, 2, 4, 3]


def test_a_cycle_is_cut_not_looped():
    totals = subtree_totals({1: 2, 2: 1}, {1: {"g": Decimal(1)}, 2: {"g": Decimal(2)}})
    assert set(totals) == {1, 2}  # it ends, each team's figure at least its own


def _samples(cast):
    Namespace.objects.create(name="dept-x-shared", team=cast.dept)
    earlier = NOW - timedelta(minutes=5)
    for taken_at, a_gpus in ((earlier, 99), (NOW, 12)):
        UsageSample.objects.create(
            taken_at=taken_at,
            team=cast.team_a,
            namespace="team-a-ml",
            resource=GPU,
            allocated=a_gpus,
            pending=3,
        )
    UsageSample.objects.create(
        taken_at=NOW, team=cast.team_b, namespace="team-b-ml", resource=GPU, allocated=20
    )
    UsageSample.objects.create(
        taken_at=NOW, team=cast.team_b, namespace="team-b-ml", resource="cpu", allocated=64
    )
    UsageSample.objects.create(
        taken_at=NOW, team=cast.dept, namespace="dept-x-shared", resource=GPU, allocated=2
    )


@pytest.mark.django_db
def test_current_usage_is_the_latest_collection_with_departments_over_their_subtree(cast):
    _samples(cast)
    usage = current_usage()
    assert usage.taken_at == NOW
    assert usage.of(cast.team_a.pk) == {GPU: {"allocated": 12, "pending": 3}}
    assert usage.of(cast.dept.pk) == {
        "cpu": {"allocated": 64, "pending": 0},
        GPU: {"allocated": 34, "pending": 3},  # 2 own + 12 + 20
    }


def _login(client: Client, user) -> None:
    client.force_login(user)


def _figures(html: str, team: str) -> dict[str, tuple[Decimal, Decimal]]:
    """(allocated, pending) per resource from a page's data attributes for one team."""
    out = {}
    for attrs in re.findall(r"<(?:tr|div)[^>]*data-resource=[^>]*>", html):
        row_team = re.search(r'data-team="([^"]+)"', attrs)
        if row_team and row_team.group(1) != team:
            continue
        resource = re.search(r'data-resource="([^"]+)"', attrs).group(1)
        allocated = re.search(r'data-allocated="([^"]*)"', attrs).group(1)
        pending = re.search(r'data-pending="([^"]*)"', attrs).group(1)
        out[resource] = (Decimal(allocated), Decimal(pending))
    return out


def _dashboard_figures(html: str, team: str) -> dict[str, tuple[Decimal, Decimal]]:
    row = re.search(rf'<tr data-team="{team}".*?</tr>', html, re.S).group(0)
    return _figures(row, team)


@pytest.mark.django_db
def test_a_department_page_dashboard_and_api_show_the_same_subtree_figures(client, cast):
    _samples(cast)
    _login(client, cast.dora)  # the department's lead
    dashboard = client.get(reverse("home")).content.decode()
    page = client.get(reverse("portal:team", args=["dept-x"])).content.decode()
    api = client.get("/api/v1/usage/current/", {"team": "dept-x"}).json()

    expected = {GPU: (Decimal(34), Decimal(3)), "cpu": (Decimal(64), Decimal(0))}
    assert _dashboard_figures(dashboard, "dept-x") == expected
    assert _figures(page, "dept-x") == expected
    assert "No usage collected" not in page
    assert api["results"] == [
        {"team": "dept-x", "allocated": {"cpu": "64", GPU: "34"}, "pending": {"cpu": "0", GPU: "3"}}
    ]
    assert api["taken_at"] == NOW.isoformat()
    # And a team's figures are its own on all three.
    team_page = client.get(reverse("portal:team", args=["team-a"])).content.decode()
    assert _figures(team_page, "team-a") == {GPU: (Decimal(12), Decimal(3))}
    assert _dashboard_figures(dashboard, "team-a") == {GPU: (Decimal(12), Decimal(3))}


@pytest.mark.django_db
def test_the_usage_api_shows_a_lead_only_their_teams(client, cast):
    _samples(cast)
    _login(client, cast.alice)  # lead of team-a only
    body = client.get("/api/v1/usage/current/").json()
    assert [row["team"] for row in body["results"]] == ["team-a"]
    response = client.get("/api/v1/usage/current/", {"team": "team-b"})
    assert response.status_code == 404
    assert response.json()["errors"]["team"] == ["No such team: team-b."]


@pytest.mark.django_db
def test_a_department_chart_sums_its_teams_hours_but_keeps_its_own_guarantee(client, cast):
    hour = (NOW - timedelta(hours=2)).replace(minute=0, second=0)
    common = {"period": "hour", "start": hour, "resource": GPU, "flavor": ""}
    UsageRollup.objects.create(
        team=cast.team_a, namespace="team-a-ml", allocated_hours=10, guarantee_hours=20, **common
    )
    UsageRollup.objects.create(
        team=cast.team_b, namespace="team-b-ml", allocated_hours=5, guarantee_hours=30, **common
    )
    UsageRollup.objects.create(
        team=cast.dept, namespace="", allocated_hours=0, guarantee_hours=40, **common
    )
    _login(client, cast.dora)
    response = client.get(reverse("portal:team", args=["dept-x"]))
    chart = response.context["chart"]["charts"][0]
    data = {d["label"]: d["data"] for d in chart["datasets"]}
    assert data["Allocated"] == [15.0]
    assert data["Guarantee"] == [40.0]
    assert Team.objects.get(slug="dept-x").children.count() == 2
