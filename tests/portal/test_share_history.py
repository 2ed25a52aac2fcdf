"""Share history (issue 32, "History you can see"): the hour's last snapshot per point, the
30-day window, chart units, decayed usage only where recorded, and the team page's charts
(scheduling.history, portal.history)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from portal.history import share_history_chart
from portal.views.teams import _CHART_SCALE
from scheduling.history import share_history
from scheduling.models import ShareComputation, ShareSnapshot
from tests.base import GPU
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

GIB = 2**30
NOW = datetime(2025, 6, 10, 12, 30, tzinfo=UTC)


def snapshot(team, at, *, gpus="0", fair="0", past=None, **amounts) -> ShareSnapshot:
    """A computation at ``at`` with ``team``'s snapshot: GPU usage/fair share, optional past use,
    and extra ``usage_<resource>`` / ``fair_<resource>`` amounts (base units)."""
    usage, fair_allocation = {GPU: gpus}, {GPU: fair}
    for key, value in amounts.items():
        kind, resource = key.split("_", 1)
        (usage if kind == "usage" else fair_allocation)[resource] = value
    computation = ShareComputation.objects.create(computed_at=at)
    return ShareSnapshot.objects.create(
        computation=computation,
        computed_at=at,
        team=team,
        usage=usage,
        fair_allocation=fair_allocation,
        past_usage=past or {},
    )


def gpu_series(history, field="usage"):
    [gpu] = [r for r in history.resources if r.resource == GPU]
    return getattr(gpu, field)


# --------------------------------------------------------------------------- share_history


def test_it_keeps_the_last_snapshot_of_each_hour_in_one_query(django_assert_num_queries):
    team = TeamFactory()
    yesterday = NOW - timedelta(days=1)
    snapshot(team, yesterday.replace(minute=40), gpus="5")
    for minute, gpus in ((5, "1"), (25, "2"), (55, "3")):
        snapshot(team, NOW.replace(hour=10, minute=minute), gpus=gpus)
    snapshot(team, NOW.replace(hour=11, minute=10), gpus="4")
    snapshot(TeamFactory(), NOW.replace(hour=11, minute=20), gpus="9")  # another team's

    with django_assert_num_queries(1):
        history = share_history(team, now=NOW)

    assert history.computed_at == [
        yesterday.replace(minute=40),
        NOW.replace(hour=10, minute=55),
        NOW.replace(hour=11, minute=10),
    ]
    assert gpu_series(history) == [Decimal(5), Decimal(3), Decimal(4)]


def test_two_computations_at_the_same_instant_count_once_the_later_one():
    team = TeamFactory()
    at = NOW.replace(minute=0)
    snapshot(team, at, gpus="1")
    snapshot(team, at, gpus="2")

    history = share_history(team, now=NOW)

    assert history.computed_at == [at]
    assert gpu_series(history) == [Decimal(2)]


def test_the_window_is_the_last_days_hours_with_at_most_24_points_a_day():
    team = TeamFactory()
    # Two computations an hour for 32 days up to NOW: pruning has not run yet.
    start = NOW.replace(minute=0) - timedelta(days=32)
    times = [start + timedelta(minutes=30 * i) for i in range(32 * 48 + 2)]
    assert times[-1] == NOW
    computations = ShareComputation.objects.bulk_create(
        ShareComputation(computed_at=at) for at in times
    )
    ShareSnapshot.objects.bulk_create(
        ShareSnapshot(
            computation=c,
            computed_at=c.computed_at,
            team=team,
            usage={GPU: str(i)},
            fair_allocation={GPU: "1"},
        )
        for i, c in enumerate(computations)
    )
    ShareSnapshot.objects.create(  # after ``now``: not part of the window
        computation=ShareComputation.objects.create(computed_at=NOW + timedelta(minutes=1)),
        computed_at=NOW + timedelta(minutes=1),
        team=team,
    )

    month = share_history(team, now=NOW)
    day = share_history(team, days=1, now=NOW)

    assert len(month.computed_at) == 720
    assert month.start == NOW.replace(minute=0) - timedelta(hours=719)
    assert month.computed_at[0] == month.start + timedelta(minutes=30)  # that hour's last
    assert month.computed_at[-1] == NOW
    steps = {b - a for a, b in zip(month.computed_at, month.computed_at[1:], strict=False)}
    assert steps == {timedelta(hours=1)}
    assert len(gpu_series(month)) == len(gpu_series(month, "fair_allocation")) == 720
    assert gpu_series(month)[-1] == Decimal(len(times) - 1)
    assert len(day.computed_at) == 24
    assert day.computed_at[0] == NOW.replace(minute=0) - timedelta(hours=23) + timedelta(minutes=30)


@pytest.mark.parametrize("days", [0, 31, -1])
def test_it_refuses_a_window_outside_1_to_30_days(days):
    with pytest.raises(ValueError, match="days"):
        share_history(TeamFactory(), days=days, now=NOW)


def test_amounts_are_in_chart_units_gpus_first():
    team = TeamFactory()
    snapshot(
        team,
        NOW,
        gpus="3",
        fair="4",
        usage_memory=str(48 * GIB),
        fair_memory=str(64 * GIB),
        usage_cpu="2.5",
        fair_cpu="16",
        **{"usage_nvidia.com/mig-1g.10gb": "2"},
    )

    history = share_history(team, now=NOW, scale=_CHART_SCALE)
    raw = share_history(team, now=NOW)

    rows = {
        r.resource: (r.unit, r.fair_allocation, r.usage, r.past_usage) for r in history.resources
    }
    assert [r.resource for r in history.resources] == [
        GPU,
        "nvidia.com/mig-1g.10gb",
        "cpu",
        "memory",
    ]
    assert rows == {
        GPU: ("", [Decimal(4)], [Decimal(3)], None),
        "nvidia.com/mig-1g.10gb": ("", [Decimal(0)], [Decimal(2)], None),
        "cpu": ("cores", [Decimal(16)], [Decimal("2.5")], None),
        "memory": ("GiB", [Decimal(64)], [Decimal(48)], None),
    }
    assert [r.usage for r in raw.resources if r.resource == "memory"] == [[Decimal(48 * GIB)]]


def test_decayed_usage_is_a_series_only_where_it_was_ever_recorded():
    team = TeamFactory()
    snapshot(team, NOW - timedelta(hours=2), gpus="2", fair="4")  # fairness over time off
    snapshot(team, NOW - timedelta(hours=1), gpus="2", fair="4", past={GPU: "1.5"})
    snapshot(team, NOW, gpus="2", fair="4", past={GPU: "1.75"}, usage_cpu="1")

    history = share_history(team, now=NOW)

    by_resource = {r.resource: r.past_usage for r in history.resources}
    assert by_resource == {GPU: [None, Decimal("1.5"), Decimal("1.75")], "cpu": None}


def test_a_department_shows_its_own_snapshot_not_the_sum_of_its_teams(cast):
    at = NOW.replace(minute=10)
    computation = ShareComputation.objects.create(computed_at=at)
    for team, gpus in ((cast.dept, "10"), (cast.team_a, "3"), (cast.team_b, "7")):
        ShareSnapshot.objects.create(
            computation=computation,
            computed_at=at,
            team=team,
            usage={GPU: gpus},
            fair_allocation={GPU: "12"},
        )

    assert gpu_series(share_history(cast.dept, now=NOW)) == [Decimal(10)]
    assert gpu_series(share_history(cast.team_a, now=NOW)) == [Decimal(3)]


# --------------------------------------------------------------------------- the chart


def test_the_chart_has_fair_allocation_usage_and_decayed_usage_per_resource():
    team = TeamFactory()
    snapshot(team, NOW - timedelta(hours=1), gpus="2", fair="4", usage_memory=str(GIB // 2))
    snapshot(team, NOW, gpus="3", fair="3.3333", past={GPU: "2.25"}, usage_memory=str(GIB))

    chart = share_history_chart(team, scale=_CHART_SCALE, now=NOW)

    gpu, memory = chart["charts"]
    assert chart["days"] == 30
    assert gpu["resource"] == GPU and gpu["type"] == "line"
    assert gpu["labels"] == [(NOW - timedelta(hours=1)).isoformat(), NOW.isoformat()]
    assert gpu["datasets"] == [
        {"label": "Fair allocation", "data": [4.0, 3.333]},
        {"label": "Usage", "data": [2.0, 3.0]},
        {"label": "Decayed usage", "data": [None, 2.25], "dashed": True},
    ]
    assert (memory["resource"], memory["unit"]) == ("memory", "GiB")
    assert [d["label"] for d in memory["datasets"]] == ["Fair allocation", "Usage"]
    assert memory["datasets"][1]["data"] == [0.5, 1.0]


# --------------------------------------------------------------------------- the team page


def chart_json(html: str, element_id: str) -> dict:
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html)
    assert match, f"no {element_id} on the page"
    return json.loads(match.group(1))


def test_the_team_page_draws_the_history_with_the_chart_script(client: Client, cast):
    now = timezone.now()
    snapshot(cast.team_a, now - timedelta(hours=3), gpus="6", fair="8")
    snapshot(cast.team_a, now - timedelta(hours=2), gpus="7", fair="8", past={GPU: "6.5"})
    snapshot(cast.team_b, now - timedelta(hours=2), gpus="11", fair="12")
    client.force_login(cast.bob)

    html = client.get(reverse("portal:team", args=["team-a"])).content.decode()

    data = chart_json(html, "team-share-history")
    [gpu] = data["charts"]
    assert gpu["resource"] == GPU
    assert gpu["datasets"] == [
        {"label": "Fair allocation", "data": [8.0, 8.0]},
        {"label": "Usage", "data": [6.0, 7.0]},
        {"label": "Decayed usage", "data": [None, 6.5], "dashed": True},
    ]
    assert 'data-chart-src="team-share-history" data-chart-index="0"' in html
    assert "Fair allocation, usage and decayed usage, last 30 days" in html
    # No hourly usage rollup, so no usage chart: the partial loads Chart.js itself, once.
    assert "team-usage-chart" not in html
    assert html.count("vendor/chart.umd.min.js") == 1


def test_the_team_page_says_when_there_is_no_history_yet(client: Client, cast):
    client.force_login(cast.alice)

    html = client.get(reverse("portal:team", args=["team-a"])).content.decode()

    assert "No share computation in the last 30 days yet" in html
    assert "team-share-history" not in html
    assert "vendor/chart.umd.min.js" not in html


def test_a_lead_never_sees_another_teams_history(client: Client, cast):
    now = timezone.now()
    snapshot(cast.team_a, now - timedelta(hours=1), gpus="17", fair="19")
    snapshot(cast.team_b, now - timedelta(hours=1), gpus="5", fair="6")
    client.force_login(cast.charlie)  # leads team-b

    other = client.get(reverse("portal:team", args=["team-a"]))
    own = client.get(reverse("portal:team", args=["team-b"])).content.decode()

    assert other.status_code == 404
    data = chart_json(own, "team-share-history")
    assert data["charts"][0]["datasets"][:2] == [
        {"label": "Fair allocation", "data": [6.0]},
        {"label": "Usage", "data": [5.0]},
    ]
    assert "17.0" not in own and "19.0" not in own


def test_the_department_page_shows_the_departments_own_history(client: Client, cast):
    at = timezone.now() - timedelta(hours=1)
    computation = ShareComputation.objects.create(computed_at=at)
    for team, gpus in ((cast.dept, "10"), (cast.team_a, "3"), (cast.team_b, "7")):
        ShareSnapshot.objects.create(
            computation=computation, computed_at=at, team=team, usage={GPU: gpus}
        )
    client.force_login(cast.dora)

    html = client.get(reverse("portal:team", args=["dept-x"])).content.decode()

    usage = chart_json(html, "team-share-history")["charts"][0]["datasets"][1]
    assert usage == {"label": "Usage", "data": [10.0]}
    assert "A department's figures are its whole subtree's." in html
