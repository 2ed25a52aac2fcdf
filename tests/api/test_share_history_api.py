"""``GET /api/v1/teams/{slug}/share-history/?days=`` (issue 32, "History you can see"): who may
read which team's history, the ``days`` window and its validation, canonical quantities, and
the schema entry."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone

from scheduling.models import ShareComputation, ShareSnapshot
from tests.base import GPU

pytestmark = pytest.mark.django_db

GIB = 2**30


def url(slug: str, days: object | None = None) -> str:
    tail = "" if days is None else f"?days={days}"
    return f"/api/v1/teams/{slug}/share-history/{tail}"


def snapshot(team, at, *, gpus, fair, past=None, memory=None) -> ShareSnapshot:
    usage, fair_allocation = {GPU: gpus}, {GPU: fair}
    if memory is not None:
        usage["memory"] = memory
    return ShareSnapshot.objects.create(
        computation=ShareComputation.objects.create(computed_at=at),
        computed_at=at,
        team=team,
        usage=usage,
        fair_allocation=fair_allocation,
        past_usage=past or {},
    )


@pytest.fixture
def history(cast):
    """team-a: three computations in one hour two days ago, one 40 days ago (before pruning),
    one an hour ago with past use; team-b one of its own."""
    now = timezone.now().replace(microsecond=0)
    two_days = (now - timedelta(days=2)).replace(minute=5, second=0)
    for minutes, gpus in ((0, "1"), (20, "2"), (40, "3")):
        snapshot(cast.team_a, two_days + timedelta(minutes=minutes), gpus=gpus, fair="4")
    snapshot(cast.team_a, now - timedelta(days=40), gpus="9", fair="9")
    recent = now - timedelta(hours=1)
    snapshot(cast.team_a, recent, gpus="2.5", fair="4", past={GPU: "2.25"}, memory=str(16 * GIB))
    snapshot(cast.team_b, recent, gpus="30", fair="31")
    return {"last_of_hour": two_days + timedelta(minutes=40), "recent": recent}


def times(body) -> list[str]:
    return body["computed_at"]


def iso(at) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_a_member_reads_the_hourly_history_in_canonical_quantities(client_as, history):
    response = client_as("member").get(url("team-a"))

    assert response.status_code == 200
    body = response.json()
    assert (body["team"], body["days"]) == ("team-a", 30)
    assert times(body) == [iso(history["last_of_hour"]), iso(history["recent"])]
    gpu, memory = body["resources"]
    assert gpu == {
        "resource": GPU,
        "fair_allocation": ["4", "4"],
        "usage": ["3", "2500m"],
        "past_usage": [None, "2250m"],
    }
    assert memory == {
        "resource": "memory",
        "fair_allocation": ["0", "0"],
        "usage": ["0", "16Gi"],
        "past_usage": None,
    }


def test_days_narrows_the_window(client_as, history):
    body = client_as("lead").get(url("team-a", 1)).json()

    assert body["days"] == 1
    assert times(body) == [iso(history["recent"])]
    assert body["resources"][0]["usage"] == ["2500m"]
    # An empty value is no value (as for every optional query parameter): the 30 days.
    assert client_as("lead").get(url("team-a", "")).json()["days"] == 30


@pytest.mark.parametrize("days", ["0", "31", "-3", "abc", "1.5"])
def test_days_outside_1_to_30_is_a_400_naming_the_field(client_as, history, days):
    response = client_as("lead").get(url("team-a", days))

    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["days"]


@pytest.mark.parametrize(
    ("role", "status"),
    [
        ("viewer", 200),
        ("member", 200),
        ("lead", 200),
        ("dept-lead", 200),
        ("admin", 200),
        ("personal-lead", 200),
        ("service-all", 200),
        ("other-lead", 404),
        ("nobody", 404),
        ("service-chargeback", 403),
        ("node-agent", 403),
        ("anonymous", 401),
    ],
)
def test_each_role_reads_team_as_history_as_the_team_page_allows(client_as, history, role, status):
    response = client_as(role).get(url("team-a"))

    assert response.status_code == status
    if status == 200:
        assert response.json()["resources"][0]["usage"] == ["3", "2500m"]
    else:
        assert "2500m" not in response.content.decode()


def test_a_lead_never_reads_another_teams_history_even_when_shares_are_public(
    client_as, history, settings
):
    settings.FAIRSHARE_SHARE_VISIBILITY = "all"  # every team's current numbers, not history
    charlie = client_as("other-lead")

    assert charlie.get(url("team-a")).status_code == 404
    assert charlie.get(url("team-a", 0)).status_code == 404  # no hint from validation either
    own = charlie.get(url("team-b")).json()
    assert own["resources"][0]["usage"] == ["30"]


def test_an_unknown_team_is_a_404(client_as, cast):
    assert client_as("admin").get(url("no-such-team")).status_code == 404


def test_a_department_reads_its_own_snapshot(client_as, cast):
    at = timezone.now() - timedelta(hours=1)
    computation = ShareComputation.objects.create(computed_at=at)
    for team, gpus in ((cast.dept, "10"), (cast.team_a, "3"), (cast.team_b, "7")):
        ShareSnapshot.objects.create(
            computation=computation, computed_at=at, team=team, usage={GPU: gpus}
        )

    body = client_as("dept-lead").get(url("dept-x")).json()

    assert body["resources"][0]["usage"] == ["10"]


def test_a_team_without_computations_has_an_empty_history(client_as, cast):
    body = client_as("lead").get(url("team-a")).json()

    assert (body["computed_at"], body["resources"]) == ([], [])


@pytest.mark.one_database
def test_the_schema_documents_the_endpoint_and_its_days_parameter(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    operation = yaml.safe_load(out.read_text())["paths"]["/api/v1/teams/{slug}/share-history/"]
    params = {p["name"]: p for p in operation["get"]["parameters"]}
    assert params["days"]["in"] == "query"
    assert (params["days"]["schema"]["minimum"], params["days"]["schema"]["maximum"]) == (1, 30)
    assert params["slug"]["in"] == "path"
    assert set(operation) == {"get"}
    assert {"200", "400", "404"} <= set(operation["get"]["responses"])
