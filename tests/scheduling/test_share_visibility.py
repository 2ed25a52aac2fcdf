"""Share visibility (issue 15, finding 12): ``FAIRSHARE_SHARE_VISIBILITY=own`` (the default)
shows people the fair-share numbers of the teams they can see, and other teams only together;
``all`` shows every team's, like Slurm's sshare. The same in previews, the dashboard and the API;
/metrics is an operator endpoint and carries every team in both modes."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from quotas import decisions, lines
from scheduling.models import ShareComputation, ShareSnapshot
from tests.base import GPU

pytestmark = pytest.mark.django_db


@pytest.fixture
def shares(cast):
    """The latest computation: a share row for each of dept-x, team-a and team-b."""
    now = timezone.now()
    computation = ShareComputation.objects.create(computed_at=now, capacity={GPU: "100"})
    rows = {}
    for team, share in ((cast.dept, 0.5), (cast.team_a, 0.2), (cast.team_b, 0.3)):
        rows[team.slug] = ShareSnapshot.objects.create(
            computation=computation,
            computed_at=now,
            team=team,
            usage={GPU: str(int(share * 100))},
            dominant_share=share,
            dominant_resource=GPU,
            fair_allocation={GPU: str(int(share * 100))},
            fair_share=share,
        )
    return rows


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_teams(user) -> list[str]:
    body = api(user).get(reverse("scheduling-api:sharesnapshot-current")).json()
    return sorted(row["team"] for row in body["results"])


# ------------------------------------------------------------------ the API


def test_by_default_the_api_shows_the_shares_of_the_teams_you_can_see(cast, shares):
    assert api_teams(cast.alice) == ["team-a"]
    assert api_teams(cast.charlie) == ["team-b"]
    assert api_teams(cast.dora) == ["dept-x", "team-a", "team-b"]
    assert api_teams(cast.root) == ["dept-x", "team-a", "team-b"]
    url = reverse("scheduling-api:sharesnapshot-detail", args=[shares["team-b"].pk])
    assert api(cast.alice).get(url).status_code == 404


def test_with_all_every_signed_in_person_sees_every_teams_shares(cast, shares, settings):
    settings.FAIRSHARE_SHARE_VISIBILITY = "all"
    assert api_teams(cast.alice) == ["dept-x", "team-a", "team-b"]
    assert api_teams(cast.nobody) == ["dept-x", "team-a", "team-b"]
    url = reverse("scheduling-api:sharesnapshot-detail", args=[shares["team-b"].pk])
    assert api(cast.alice).get(url).json()["fair_share"] == 0.3
    # Share numbers only: team-b's quotas and requests stay private.
    assert api(cast.alice).get("/api/v1/teams/team-b/").status_code == 404
    assert api(cast.alice).get("/api/v1/quotas/?team=team-b").json()["results"] == []
    assert APIClient().get(reverse("scheduling-api:sharesnapshot-current")).status_code == 401


# ------------------------------------------------------------------ the dashboard


def chart_labels(user) -> list[str]:
    chart = page(user).get(reverse("home")).context["chart"]
    return sorted(chart["charts"][0]["labels"]) if chart else []


def test_the_dashboard_chart_follows_the_setting(cast, shares, settings):
    assert chart_labels(cast.alice) == ["team-a"]
    settings.FAIRSHARE_SHARE_VISIBILITY = "all"
    assert chart_labels(cast.alice) == ["dept-x", "team-a", "team-b"]
    # The table still lists only the teams alice may open.
    rows = page(cast.alice).get(reverse("home")).context["rows"]
    assert [row["team"].slug for row in rows] == ["team-a"]


# ------------------------------------------------------------------ previews


def preview_html(client) -> str:
    data = {
        "lines-TOTAL_FORMS": "1",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
        "lines-0-guarantee": "50",
        "lines-0-limit": "60",
        "justification": "x",
        "tz": "UTC",
    }
    response = client.post(reverse("portal:quotarequest_preview", args=["team-a"]), data)
    assert response.status_code == 200
    return response.content.decode()


def test_by_default_a_leads_preview_shows_other_teams_only_together(cast):
    html = preview_html(page(cast.alice))
    assert "What team-a gets" in html
    assert "team-b" not in html and "dept-x" not in html
    assert "Other teams, together" in html
    # What they give up, in sum, where team-a's gain comes from (issue 29).
    assert 'data-amount="10">other teams, together 10<' in html
    assert "Your department's total moves ±0 GPUs: team-a's +10, its other teams' −10." in html


def test_the_department_lead_sees_its_teams_by_name(cast):
    html = preview_html(page(cast.dora))
    assert "team-b" in html and "Other teams, together" not in html


def test_with_all_a_leads_preview_names_every_team(cast, settings):
    settings.FAIRSHARE_SHARE_VISIBILITY = "all"
    html = preview_html(page(cast.alice))
    assert "team-b" in html and "Other teams, together" not in html


def test_a_stored_preview_is_shown_by_the_viewers_rule(cast):
    from scheduling.services import what_if_for_request

    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "50", "60")],
        justification="x",
    )
    request.preview = what_if_for_request(request).to_dict()
    request.save()
    assert "team-b" in request.preview["losers"]
    for user in (cast.bob, cast.vic, cast.alice):  # team-a's people open the request
        html = page(user).get(reverse("portal:quotarequest", args=[request.pk])).content.decode()
        assert "team-b" not in html, user
        assert "Other teams, together" in html
    html = page(cast.root).get(reverse("portal:quotarequest", args=[request.pk])).content.decode()
    assert "team-b" in html


# ------------------------------------------------------------------ metrics: operators


@pytest.mark.parametrize("mode", ["own", "all"])
def test_metrics_are_for_operators_and_carry_every_team_in_both_modes(cast, shares, settings, mode):
    settings.FAIRSHARE_SHARE_VISIBILITY = mode
    settings.FAIRSHARE_METRICS_TOKEN = "scrape-secret"
    text = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").content.decode()
    for slug in ("dept-x", "team-a", "team-b"):
        assert f'fairshare_fair_share{{team="{slug}"}}' in text
    assert Client().get("/metrics", REMOTE_ADDR="203.0.113.1").status_code == 401
