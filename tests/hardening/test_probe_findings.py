"""The outside probe's findings (issue 15), one test (or a few) per finding, as the probe sent
them. Sign-in throttling is in tests/config/test_signin.py, node-agent ingest in
tests/monitoring/test_ingest_trust.py, share visibility in
tests/scheduling/test_share_visibility.py, the fuzz run in tests/hardening/test_fuzz.py."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.hardening.conftest import client_for

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


# ------------------------------------------------------------------ 6: NUL bytes are a 400


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (
            "/api/v1/memberships/",
            {"team": "team-a\x00", "user": "nobody", "role": "viewer"},
            "team",
        ),
        (
            "/api/v1/memberships/",
            {"team": "team-a", "user": "nob\x00ody", "role": "viewer"},
            "user",
        ),
        (
            "/api/v1/quota-requests/",
            {
                "team": "\x00",
                "justification": "x",
                "lines": [{"resource": "nvidia.com/gpu", "guarantee": "1", "limit": "2"}],
            },
            "team",
        ),
        (
            "/api/v1/quota-requests/",
            {
                "team": "team-a",
                "justification": "x",
                "lines": [{"resource": "nvidia.com/gpu\x00", "guarantee": "1", "limit": "2"}],
            },
            "lines[0].resource",
        ),
    ],
)
def test_nul_bytes_in_a_body_are_a_400_naming_the_field(world, url, body, field):
    response = post_json(client_for(world, "alice"), url, body)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()


@pytest.mark.parametrize(
    "url",
    [
        "/requests/?team=%00",
        "/requests/?status=%00",
        "/api/v1/memberships/?team=%00",
        "/api/v1/gpu-samples/?uuid=a%00b",
        "/reports/?month=2025-05%00",
    ],
)
def test_nul_bytes_in_a_query_are_a_400(world, url):
    response = client_for(world, "alice").get(url)
    assert response.status_code == 400, (url, response.status_code)


def test_the_api_names_the_parameter_holding_a_nul(world):
    response = client_for(world, "alice").get("/api/v1/memberships/?team=%00")
    assert response.json() == {"errors": {"team": ["Null characters are not allowed."]}}


# ------------------------------------------------------------------ 11: no-store


@pytest.mark.parametrize("role", ["alice", "svc_all"])
@pytest.mark.parametrize(
    "url", ["/", "/teams/team-a/", "/api/v1/teams/", "/api/v1/quota-requests/"]
)
def test_authenticated_answers_are_never_stored(world, role, url):
    response = client_for(world, role).get(url)
    assert "no-store" in response.get("Cache-Control", ""), (role, url, response.status_code)
    assert "private" in response["Cache-Control"]


# ------------------------------------------------------------------ 5: membership rules in the API


def alice_membership(world):
    from quotas.models import Membership

    return Membership.objects.get(user=world.cast.alice, team=world.cast.team_a)


def test_the_only_lead_cannot_demote_themselves_through_the_api(world):
    own = alice_membership(world)
    client = client_for(world, "alice")
    response = client.patch(
        f"/api/v1/memberships/{own.pk}/", json.dumps({"role": "member"}), "application/json"
    )
    assert response.status_code == 400, response.content
    assert "role" in response.json()["errors"]
    own.refresh_from_db()
    assert own.role == "lead"


def test_the_only_lead_cannot_remove_themselves_through_the_api(world):
    own = alice_membership(world)
    response = client_for(world, "alice").delete(f"/api/v1/memberships/{own.pk}/")
    assert response.status_code == 400, response.content
    own.refresh_from_db()


def test_with_a_second_lead_the_first_may_step_down(world):
    world.membership.role = "lead"
    world.membership.save()  # bob leads too
    own = alice_membership(world)
    response = client_for(world, "alice").patch(
        f"/api/v1/memberships/{own.pk}/", json.dumps({"role": "member"}), "application/json"
    )
    assert response.status_code == 200
    assert response.json()["role"] == "member"


@pytest.mark.parametrize("change", ["add", "role", "remove"])
def test_api_membership_changes_ask_for_a_sync_like_the_team_page(
    world, change, monkeypatch, django_capture_on_commit_callbacks
):
    from scheduling import tasks

    calls = []
    monkeypatch.setattr(tasks.sync_cluster, "delay", lambda **kw: calls.append(kw))
    client = client_for(world, "alice")
    url = f"/api/v1/memberships/{world.membership.pk}/"
    with django_capture_on_commit_callbacks(execute=True):
        if change == "add":
            body = {"team": "team-a", "user": "nobody", "role": "viewer"}
            response = post_json(client, "/api/v1/memberships/", body)
        elif change == "role":
            response = client.patch(url, json.dumps({"role": "viewer"}), "application/json")
        else:
            response = client.delete(url)
    assert response.status_code < 300, response.content
    assert calls == [{"trigger": f"members:{change}", "teams": ["team-a"]}]


def test_api_membership_changes_are_audited_once(world):
    from quotas.models import AuditEvent

    before = AuditEvent.objects.count()
    client = client_for(world, "alice")
    response = post_json(
        client, "/api/v1/memberships/", {"team": "team-a", "user": "nobody", "role": "viewer"}
    )
    assert response.status_code == 201
    assert response.json()["user"] == "nobody"
    assert AuditEvent.objects.count() == before + 1


# ------------------------------------------------------------------ 7: names that leak


@pytest.mark.parametrize("role", ["bob", "vic"])
def test_the_membership_api_does_not_tell_a_non_lead_whether_a_username_exists(world, role):
    client = client_for(world, role)
    answers = []
    for username in ("root", "no-such-user"):
        body = {"team": "team-a", "user": username, "role": "viewer"}
        response = post_json(client, "/api/v1/memberships/", body)
        answers.append((response.status_code, response.json()))
    assert answers[0] == answers[1]
    assert answers[0][0] == 403


def test_for_a_lead_an_inactive_user_reads_like_a_missing_one(world):
    from django.contrib.auth.models import User

    User.objects.create_user("gone", is_active=False)
    client = client_for(world, "alice")
    texts = []
    for username in ("gone", "ghost"):
        body = {"team": "team-a", "user": username, "role": "viewer"}
        response = post_json(client, "/api/v1/memberships/", body)
        assert response.status_code == 400
        texts.append(response.json()["errors"]["username"][0].replace(username, "…"))
    assert texts[0] == texts[1]


@pytest.fixture
def dept_member(world):
    """dana: a member of the department dept-x only (sees dept-x, not its teams)."""
    from quotas.models import Membership
    from tests.base import make_user

    dana = make_user("dana")
    Membership.objects.create(user=dana, team=world.cast.dept, role="member")
    return dana


def test_a_department_page_names_only_the_teams_its_reader_can_see(world, dept_member):
    from django.test import Client

    client = Client()
    client.force_login(dept_member)
    html = client.get("/teams/dept-x/").content.decode()
    assert "team-a" not in html and "team-b" not in html
    client.force_login(world.cast.dora)  # the department's lead sees its teams
    html = client.get("/teams/dept-x/").content.decode()
    assert "team-a" in html and "team-b" in html


@pytest.mark.parametrize(("role", "parent"), [("bob", None), ("alice", None), ("dora", "dept-x")])
def test_the_api_shows_a_teams_department_only_to_who_can_see_it(world, role, parent):
    client = client_for(world, role)
    assert client.get("/api/v1/teams/team-a/").json()["parent"] == parent
    listed = {t["slug"]: t["parent"] for t in client.get("/api/v1/teams/").json()["results"]}
    assert listed["team-a"] == parent


def test_the_team_page_names_the_department_only_to_who_can_see_it(world):
    bob = client_for(world, "bob").get("/teams/team-a/").content.decode()
    assert "dept-x" not in bob
    dora = client_for(world, "dora").get("/teams/team-a/").content.decode()
    assert "department" in dora and "dept-x" in dora


# ------------------------------------------------------------------ 8: the audit trail


@pytest.mark.parametrize(
    ("role", "shown"),
    [("vic", False), ("bob", False), ("alice", True), ("dora", True), ("root", True)],
)
def test_the_team_pages_audit_trail_is_for_leads_and_admins(world, role, shown):
    html = client_for(world, role).get("/teams/team-a/").content.decode()
    assert ("Audit trail" in html) is shown


def test_django_admin_membership_changes_go_through_the_service(
    world, monkeypatch, django_capture_on_commit_callbacks
):
    from quotas.models import AuditEvent, Membership
    from scheduling import tasks

    calls = []
    monkeypatch.setattr(tasks.sync_cluster, "delay", lambda **kw: calls.append(kw))
    client = client_for(world, "root")
    audits = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/admin/quotas/membership/add/",
            {"user": world.cast.nobody.pk, "team": world.cast.team_a.pk, "role": "viewer"},
        )
    assert response.status_code == 302, response.content[:2000]
    added = Membership.objects.get(user=world.cast.nobody)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/admin/quotas/membership/{added.pk}/change/", {"role": "member"})
    added.refresh_from_db()
    assert added.role == "member"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/admin/quotas/membership/{added.pk}/delete/", {"post": "yes"})
    assert not Membership.objects.filter(pk=added.pk).exists()
    assert [c["trigger"] for c in calls] == ["members:add", "members:role", "members:remove"]
    assert AuditEvent.objects.count() == audits + 3


# ------------------------------------------------------------------ 6: hostile times are a 400


@pytest.mark.parametrize(
    ("query", "status"),
    [
        # PostgreSQL takes offsets up to ±15:59 only: the value is converted to UTC first.
        ("valid_at=0001-01-01T00:00:00-18:44", 200),
        ("valid_at=2025-05-01T00:00:00%2B23:59", 200),
        # ... and a time that leaves the calendar on the way is a 400 naming the parameter.
        ("valid_at=0001-01-01T00:00:00%2B14:00", 400),
        ("valid_at=9999-12-31T23:59:59-18:44", 400),
    ],
)
def test_rate_card_valid_at_with_an_extreme_offset_is_not_a_500(world, query, status):
    response = client_for(world, "root").get(f"/api/v1/rate-cards/?{query}")
    assert response.status_code == status, response.content
    if status == 400:
        assert "valid_at" in response.json()["errors"]


def test_rate_card_valid_at_compares_in_utc(world):
    # The rate is valid from 2025-01-01T00:00Z; 2024-12-31T13:00-11:00 is 2025-01-01T00:00Z.
    client = client_for(world, "root")
    ok = client.get("/api/v1/rate-cards/?valid_at=2024-12-31T13:00:00-11:00")
    assert [r["id"] for r in ok.json()["results"]] == [world.rate_card.pk]
    early = client.get("/api/v1/rate-cards/?valid_at=2024-12-31T12:59:59-11:00")
    assert early.json()["results"] == []


@pytest.mark.parametrize("offset", ["%2B23:59", "-23:59", "%2B14:00"])
def test_an_updated_after_filter_with_any_offset_is_not_a_500(world, offset):
    response = client_for(world, "root").get(
        f"/api/v1/teams/?updated_after=0001-01-01T00:00:00{offset}"
    )
    assert response.status_code in (200, 400)


@pytest.mark.parametrize(
    "params",
    [
        {"start": "9999-12-31", "end": "9999-12-31"},
        {"start": "9999-12-01", "end": "9999-12-31"},
        {"start": "0001-01-01", "end": "0001-01-02"},
        {"month": "9999-12"},
        {"month": "0001-01"},
    ],
)
def test_report_dates_in_year_9999_or_1_are_form_errors(world, params):
    for name in ("portal:reports", "portal:reports_csv"):
        response = client_for(world, "root").get(reverse(name), params)
        assert response.status_code in (200, 400), (name, params, response.status_code)
        if name == "portal:reports":
            assert response.context["form"].errors, params


@pytest.mark.parametrize("month", ["9999-12", "0001-01"])
def test_freezing_a_statement_for_year_9999_or_1_is_a_400(world, month):
    response = post_json(
        client_for(world, "root"),
        reverse("monitoring-api:chargebackstatement-list"),
        {"month": month},
    )
    assert response.status_code == 400
    assert "month" in response.json()["errors"]


def test_a_request_window_that_leaves_the_calendar_in_utc_is_a_form_error(world):
    from tests.hardening.test_authorization_matrix import request_form

    client = client_for(world, "alice")
    data = request_form(world) | {"window_end": "9999-12-31T23:59", "tz": "Etc/GMT+12"}
    response = client.post(reverse("portal:quotarequest_create", args=["team-a"]), data)
    assert response.status_code == 200
    assert "Give a time between 1970 and 9000" in response.content.decode()
    assert client.get(reverse("portal:quotarequest_list")).status_code == 200


@pytest.mark.parametrize("end", ["9999-12-31T23:59:59Z", "9999-12-31T23:59:59-23:59"])
def test_an_api_request_window_in_year_9999_is_a_400(world, end):
    body = {
        "team": "team-a",
        "justification": "x",
        "window_end": end,
        "lines": [{"resource": "nvidia.com/gpu", "guarantee": "24", "limit": "48"}],
    }
    response = post_json(client_for(world, "alice"), "/api/v1/quota-requests/", body)
    assert response.status_code == 400
    assert "window_end" in response.json()["errors"]


def test_a_rate_valid_from_year_9999_is_a_400(world):
    body = {"resource": "cpu", "price_per_unit_hour": "1", "valid_from": "9999-06-01T00:00:00Z"}
    response = post_json(client_for(world, "root"), "/api/v1/rate-cards/", body)
    assert response.status_code == 400
    assert "valid_from" in response.json()["errors"]
