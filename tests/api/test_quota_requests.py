"""Quota request decisions through the API: the services' rules, the API's status codes."""

from __future__ import annotations

import pytest
from django.urls import reverse

from quotas.decisions import submit_request
from quotas.models import TeamQuota
from tests.base import GPU

pytestmark = pytest.mark.django_db


def _request(cast, guarantee="24", limit="48"):
    lines = [{"resource": GPU, "guarantee": guarantee, "limit": limit}]
    return submit_request(team=cast.team_a, requester=cast.alice, lines=lines, justification="x")


def _url(request, name):
    return reverse(f"quotas-api:quotarequest-{name}", args=[request.pk])


def test_a_lead_submits_and_the_answer_shows_lines_and_status(cast, client_as):
    response = client_as("lead").post(
        reverse("quotas-api:quotarequest-list"),
        {
            "team": "team-a",
            "justification": "Bigger runs.",
            "lines": [{"resource": GPU, "guarantee": 24, "limit": "48"}],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["requester"]) == ("pending", "alice")
    assert body["lines"] == [
        {
            "resource": GPU,
            "guarantee": "24",
            "limit": "48",
            "previous_guarantee": "20",
            "previous_limit": "40",
            "approved_guarantee": None,
            "approved_limit": None,
        }
    ]


def test_line_errors_name_the_line_and_field(cast, client_as):
    response = client_as("lead").post(
        reverse("quotas-api:quotarequest-list"),
        {
            "team": "team-a",
            "justification": "x",
            "lines": [{"resource": GPU, "guarantee": "50", "limit": "40"}],
        },
        format="json",
    )
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["lines[0].guarantee"]


def test_an_admin_approves_with_adjustments_and_the_quota_changes(cast, client_as):
    request = _request(cast)
    response = client_as("admin").post(
        _url(request, "approve"),
        {"note": "ok", "adjustments": {GPU: {"guarantee": "22", "limit": "44"}}},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "approved"
    assert (body["lines"][0]["approved_guarantee"], body["decided_by"]) == ("22", "root")
    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU)
    assert (quota.guarantee, quota.limit) == (22, 44)


def test_approving_twice_is_409(cast, client_as):
    request = _request(cast)
    admin = client_as("admin")
    assert admin.post(_url(request, "approve"), {}, format="json").status_code == 200
    again = admin.post(_url(request, "approve"), {}, format="json")
    assert again.status_code == 409
    assert again.json() == {
        "errors": {"detail": [f"Request #{request.pk} is approved, not pending."]}
    }


def test_approving_over_capacity_is_400_naming_the_resource(cast, client_as):
    request = _request(cast, guarantee="80", limit="90")  # 80 + team-b's 30 > 90 schedulable
    response = client_as("admin").post(_url(request, "approve"), {}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == [GPU]
    assert "over the 90 schedulable" in errors[GPU][0]
    request.refresh_from_db()
    assert request.status == "pending"


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_only_admins_decide(cast, client_as, action):
    request = _request(cast)
    assert client_as("lead").post(_url(request, action), {"note": "n"}).status_code == 403
    assert client_as("other-lead").post(_url(request, action), {"note": "n"}).status_code == 404


def test_a_rejection_needs_a_reason(cast, client_as):
    request = _request(cast)
    admin = client_as("admin")
    blank = admin.post(_url(request, "reject"), {"note": " "}, format="json")
    assert (blank.status_code, list(blank.json()["errors"])) == (400, ["note"])
    done = admin.post(_url(request, "reject"), {"note": "Not this quarter."}, format="json")
    assert (done.status_code, done.json()["status"]) == (200, "rejected")
    assert done.json()["decision_note"] == "Not this quarter."


def test_the_requester_withdraws_but_a_member_may_not(cast, client_as):
    request = _request(cast)
    assert client_as("member").post(_url(request, "withdraw")).status_code == 403
    response = client_as("lead").post(_url(request, "withdraw"))
    assert (response.status_code, response.json()["status"]) == (200, "withdrawn")
    assert client_as("lead").post(_url(request, "withdraw")).status_code == 409


def test_a_member_cannot_request_quota(cast, client_as):
    response = client_as("member").post(
        reverse("quotas-api:quotarequest-list"),
        {
            "team": "team-a",
            "justification": "x",
            "lines": [{"resource": GPU, "guarantee": "1", "limit": "2"}],
        },
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["errors"]["detail"] == [
        "Only the team's leads and site admins may request quota."
    ]
