"""The third outside probe's findings (issue 27), one test (or a few) per finding. Sign-in
throttling is in tests/config/test_signin.py."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import SyncStatus
from scheduling.models import SyncRun

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# ------------------------------------------------- share visibility: the sync-run pages


@pytest.fixture
def targeted_run(cast):
    now = timezone.now()
    return SyncRun.objects.create(
        status=SyncStatus.SUCCEEDED,
        trigger="quota-change:approve",
        requested_by=cast.charlie,
        scope={"teams": ["team-a", "team-b"]},
        started_at=now,
        finished_at=now,
    )


@pytest.mark.parametrize("page", ["list", "detail"])
def test_sync_pages_name_no_other_team_trigger_or_requester(cast, targeted_run, settings, page):
    settings.FAIRSHARE_SHARE_VISIBILITY = "own"
    url = (
        reverse("scheduling:syncrun_list")
        if page == "list"
        else reverse("scheduling:syncrun", args=[targeted_run.pk])
    )
    outsider = signed_in(cast.nobody).get(url).content.decode()
    assert "team-a" not in outsider and "team-b" not in outsider
    assert "charlie" not in outsider
    assert "quota-change:approve" not in outsider
    assert "2 others" in outsider
    alice = signed_in(cast.alice).get(url).content.decode()
    assert "team-a" in alice and "team-b" not in alice and "1 other" in alice
    assert "charlie" not in alice
    # The lead who started it sees that it was them; an admin sees everything.
    assert "by charlie" in signed_in(cast.charlie).get(url).content.decode()
    root = signed_in(cast.root).get(url).content.decode()
    assert "team-b" in root and "by charlie" in root and "quota-change:approve" in root
    # Share visibility "all": every team's name, still not who started it.
    settings.FAIRSHARE_SHARE_VISIBILITY = "all"
    alice = signed_in(cast.alice).get(url).content.decode()
    assert "team-b" in alice and "charlie" not in alice


# ------------------------------------------- share visibility: previews and their flags


@pytest.fixture
def dept_limit(cast):
    """dept-x may hold 60 GPUs; team-a (20/40) and team-b (30/60) fit under it."""
    from decimal import Decimal

    from quotas.models import TeamQuota
    from tests.base import GPU

    return TeamQuota.objects.create(
        team=cast.dept, resource=GPU, guarantee=Decimal(0), limit=Decimal(60)
    )


def _over_the_department(cast):
    from tests.base import GPU

    # team-a asks for 35 guaranteed (35 + 30 = 65 over 60) and a limit of 70 (over 60).
    return {"team-a": {"guarantee": {GPU: "35"}, "limit": {GPU: "70"}}}


def test_a_preview_names_no_department_its_limit_or_sibling_guarantees(cast, dept_limit, settings):
    from portal.previews import fresh_whatif

    settings.FAIRSHARE_SHARE_VISIBILITY = "own"
    whatif = fresh_whatif(_over_the_department(cast), viewer=cast.alice, focus="team-a")
    flags = [f for f in whatif["flags"] if f["kind"] == "hierarchy"]
    assert flags and whatif["blocking"]
    text = " ".join(f["message"] for f in flags)
    assert "dept-x" not in text and "60" not in text and "65" not in text
    assert "department above the team" in text
    # The department's lead and admins see the numbers.
    for viewer in (cast.dora, cast.root):
        whatif = fresh_whatif(_over_the_department(cast), viewer=viewer, focus="team-a")
        text = " ".join(f["message"] for f in whatif["flags"] if f["kind"] == "hierarchy")
        assert "dept-x" in text and "65" in text


@pytest.mark.parametrize("who", ["alice", "bob", "vic"])
def test_a_stored_preview_on_the_request_page_hides_the_department(cast, dept_limit, who):
    from portal.previews import request_preview
    from quotas.decisions import submit_request
    from quotas.lines import LineInput
    from tests.base import GPU

    request = submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "35", "70")],
        justification="more",
    )
    request.preview = request_preview(request)
    request.save(update_fields=["preview"])
    assert "dept-x" in json.dumps(request.preview)
    page = signed_in(getattr(cast, who)).get(reverse("portal:quotarequest", args=[request.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "department above the team" in body
    assert "dept-x" not in body and "guaranteed 65" not in body


# ------------------------------------------------------------------ statements


def test_outsiders_see_no_statement_and_team_members_only_their_rows(world):
    from rest_framework.test import APIClient

    cast, statement = world.cast, world.statement

    def as_user(user):
        client = APIClient()
        client.force_authenticate(user)
        return client

    outsider = as_user(cast.nobody)
    assert outsider.get("/api/v1/chargeback/statements/").json()["results"] == []
    assert outsider.get(f"/api/v1/chargeback/statements/{statement.pk}/").status_code == 404
    listed = as_user(cast.vic).get("/api/v1/chargeback/statements/").json()["results"]
    assert [row["id"] for row in listed] == [statement.pk]
    rows = as_user(cast.vic).get(f"/api/v1/chargeback/statements/{statement.pk}/").json()["rows"]
    assert {row["team"] for row in rows} <= {"team-a"}


# ------------------------------------------------------------------ the six 500s


def _api(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_membership_without_role_is_a_400_naming_role(cast):
    for user in (cast.alice, cast.vic, cast.root):  # a lead, a viewer, an admin
        response = post_json(_api(user), "/api/v1/memberships/", {"team": "team-a", "user": "dora"})
        assert response.status_code == 400, (user, response.content)
        assert "role" in response.json()["errors"]


def test_the_schema_says_role_is_required_to_create_a_membership(cast):
    client = _api(cast.root)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    body = schema["components"]["schemas"]["MembershipRequest"]
    assert "role" in body["required"]


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/memberships/", '{"team": "team-a", "user": "dora", "role": "\\ud800"}', "role"),
        ("/api/v1/memberships/", '{"team": "team-a", "user": "\\udfff", "role": "member"}', "user"),
        ("/api/v1/memberships/", '{"team": "team-a", "user": "dora", "\\ud800": 1}', "\\ud800"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(cast, url, body, field):
    response = _api(cast.alice).post(url, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert "surrogate" in json.dumps(response.json()["errors"]).lower()


def test_a_lone_surrogate_in_the_agent_version_stores_nothing(cast, settings):
    from monitoring.models import GpuSample
    from tests.monitoring.gpu_inventory import node_object, place, pod_object
    from tests.monitoring.test_ingest_trust import NOW, agent_client, sample

    settings.FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS = 10**9
    place([node_object("gpu-1", gpus=2)], [pod_object("gpu-1", "team-a-ml", "train-0")], now=NOW)
    body = json.dumps({"node": "gpu-1", "agent": {"version": "\udc80"}, "samples": [sample()]})
    response = agent_client(cast).post("/api/v1/gpu-samples/ingest/", body, "application/json")
    assert response.status_code == 400, response.content
    assert "agent.version" in response.json()["errors"]
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize("depth", [65, 1000, 50_000])
def test_an_over_deep_json_body_is_a_400(cast, depth):
    body = '{"team": "team-a", "user": "dora", "role": ' + "[" * depth + "]" * depth + "}"
    response = _api(cast.alice).post("/api/v1/memberships/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:200]
    assert "deep" in json.dumps(response.json())


def test_a_body_at_the_depth_limit_is_read_as_usual(cast):
    body = {"team": "team-a", "user": "dora", "role": [[[[[[["deep"]]]]]]]}
    response = post_json(_api(cast.alice), "/api/v1/memberships/", body)
    assert response.status_code == 400  # parsed, then refused as no valid role
    assert "not a valid choice" in response.json()["errors"]["role"][0]


# ------------------------------------------------------------------ the Django admin


def _admin(cast) -> Client:
    client = Client()
    client.force_login(cast.root)
    return client


def test_the_admin_cannot_delete_audit_events(cast):
    from quotas.changes import audit
    from quotas.models import AuditEvent

    event = audit(actor=cast.root, verb="update", obj=cast.team_a, team=cast.team_a)
    client = _admin(cast)
    response = client.post(f"/admin/quotas/auditevent/{event.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    client.post(
        "/admin/quotas/auditevent/",
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
    )
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_the_admin_cannot_reassign_unrevoke_or_extend_a_token(cast):
    from datetime import timedelta

    from quotas.models import AuditEvent
    from quotas.tokens import issue_token, revoke_token

    token = issue_token(owner=cast.alice, name="laptop", actor=cast.alice).token
    revoke_token(token.pk, actor=cast.alice)
    token.refresh_from_db()
    revoked_at, expires_at = token.revoked_at, token.expires_at
    client = _admin(cast)
    response = client.post(
        f"/admin/quotas/apitoken/{token.pk}/change/",
        {
            "name": "renamed",
            "kind": "service",
            "user": cast.root.pk,
            "scopes": '["read:all"]',
            "node": "",
            "expires_at_0": "2099-01-01",
            "expires_at_1": "00:00:00",
            "revoked_at_0": "",
            "revoked_at_1": "",
        },
    )
    assert response.status_code == 302, response.content[:500]
    token.refresh_from_db()
    assert token.name == "renamed"  # the one thing that may change, audited
    assert (token.user, token.kind, token.scopes) == (cast.alice, "personal", [])
    assert (token.revoked_at, token.expires_at) == (revoked_at, expires_at)
    assert expires_at is None or expires_at < revoked_at + timedelta(days=400)
    assert AuditEvent.objects.filter(object_id=str(token.pk), after__name="renamed").exists()
    assert (
        client.post(f"/admin/quotas/apitoken/{token.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )


def test_the_admin_revokes_tokens_through_the_service(cast):
    from quotas.models import ApiToken, AuditEvent
    from quotas.tokens import issue_token

    token = issue_token(owner=cast.alice, name="laptop", actor=cast.alice).token
    _admin(cast).post(
        "/admin/quotas/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
    )
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert AuditEvent.objects.filter(object_id=str(token.pk), verb="delete").exists()


def test_the_admin_cannot_decide_a_request(cast):
    from quotas.decisions import submit_request
    from quotas.lines import LineInput
    from quotas.models import QuotaRequest
    from tests.base import GPU

    request = submit_request(
        team=cast.team_a, requester=cast.alice, lines=[LineInput(GPU, "1", "40")], justification="x"
    )
    client = _admin(cast)
    page = client.get(f"/admin/quotas/quotarequest/{request.pk}/change/")
    assert page.status_code == 200 and 'name="status"' not in page.content.decode()
    client.post(
        f"/admin/quotas/quotarequest/{request.pk}/change/",
        {"status": "approved", "decided_by": cast.root.pk, "team": cast.team_a.pk},
    )
    assert QuotaRequest.objects.get(pk=request.pk).status == "pending"
    line = request.lines.get()
    assert client.get(f"/admin/quotas/quotarequestline/{line.pk}/delete/").status_code == 403


def test_the_admin_cannot_edit_frozen_statements_or_rollups(world):
    from monitoring.models import ChargebackStatement, UsageRollup

    client = _admin(world.cast)
    statement = world.statement
    before = ChargebackStatement.objects.get(pk=statement.pk).data
    client.post(
        f"/admin/monitoring/chargebackstatement/{statement.pk}/change/",
        {"start_0": "2020-01-01", "start_1": "00:00", "data": "{}", "group_by": "team"},
    )
    assert ChargebackStatement.objects.get(pk=statement.pk).data == before
    page = f"/admin/monitoring/chargebackstatement/{statement.pk}/delete/"
    assert client.get(page).status_code == 403
    rollup = UsageRollup.objects.first()
    assert client.get(f"/admin/monitoring/usagerollup/{rollup.pk}/delete/").status_code == 403
    assert client.get("/admin/monitoring/usagerollup/add/").status_code == 403


def test_an_admin_quota_save_goes_through_the_service_and_is_audited(cast):
    from quotas.models import AuditEvent, TeamQuota

    quota = TeamQuota.objects.get(team=cast.team_a, resource="nvidia.com/gpu")
    client = _admin(cast)
    response = client.post(
        f"/admin/quotas/teamquota/{quota.pk}/change/", {"guarantee": "25", "limit": "40"}
    )
    assert response.status_code == 302, response.content[:800]
    quota.refresh_from_db()
    assert quota.guarantee == 25
    event = AuditEvent.objects.filter(object_type="quotas.TeamQuota").latest("id")
    assert event.actor == cast.root and event.after["nvidia.com/gpu"]["guarantee"] == "25"
    # Over capacity (100 GPUs, 30 guaranteed elsewhere): a form error, not a 500 or a save.
    response = client.post(
        f"/admin/quotas/teamquota/{quota.pk}/change/", {"guarantee": "95", "limit": "95"}
    )
    assert response.status_code == 200
    quota.refresh_from_db()
    assert quota.guarantee == 25


def test_every_other_admin_save_and_delete_is_audited(cast):
    from quotas.models import AuditEvent, Budget

    client = _admin(cast)
    response = client.post(
        "/admin/quotas/budget/add/",
        {"team": cast.team_a.pk, "resource": "nvidia.com/gpu", "monthly_hours": "100"},
    )
    assert response.status_code == 302, response.content[:800]
    budget = Budget.objects.get(team=cast.team_a)
    created = AuditEvent.objects.get(object_type="quotas.Budget", verb="create")
    assert created.actor == cast.root and created.team == cast.team_a
    client.post(f"/admin/quotas/budget/{budget.pk}/delete/", {"post": "yes"})
    assert not Budget.objects.filter(pk=budget.pk).exists()
    assert AuditEvent.objects.filter(object_type="quotas.Budget", verb="delete").exists()


# ------------------------------------------------------------------ the mutation gap


def test_approving_a_grant_whose_window_opens_later_checks_the_department_limit(cast, dept_limit):
    """Removing the hierarchy check from approve_request's future-window branch passed the
    whole suite (issue 27's mutation run): a later grant obeys the department's limit too."""
    from datetime import timedelta

    from django.core.exceptions import ValidationError

    from quotas.decisions import approve_request, submit_request
    from quotas.lines import LineInput
    from quotas.models import AuditEvent, QuotaRequest
    from tests.base import GPU

    now = timezone.now()
    request = submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "35", "40")],  # 35 + team-b's 30 = 65, over dept-x's 60
        justification="a later burst",
        window_start=now + timedelta(days=2),
        window_end=now + timedelta(days=9),
    )
    with pytest.raises(ValidationError) as refused:
        approve_request(request.pk, approver=cast.root, now=now)
    assert "dept-x" in str(refused.value.message_dict)
    assert QuotaRequest.objects.get(pk=request.pk).status == "pending"
    assert not AuditEvent.objects.filter(verb="approve").exists()
    # Within the limit, the same later grant is approved.
    fits = submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "30", "40")],
        justification="a smaller one",
        window_start=now + timedelta(days=2),
        window_end=now + timedelta(days=9),
    )
    assert approve_request(fits.pk, approver=cast.root, now=now).status == "approved"


# ------------------------------------------------------------------ low findings


@pytest.mark.parametrize(("who", "sees"), [("alice", True), ("bob", False), ("vic", False)])
def test_only_leads_and_admins_see_the_audit_before_and_after_on_a_request(cast, who, sees):
    from quotas.decisions import submit_request
    from quotas.lines import LineInput
    from tests.base import GPU

    request = submit_request(
        team=cast.team_a, requester=cast.alice, lines=[LineInput(GPU, "1", "40")], justification="x"
    )
    body = signed_in(getattr(cast, who)).get(reverse("portal:quotarequest", args=[request.pk]))
    text = body.content.decode()
    assert ("before / after" in text) is sees
    assert ("for the team&#x27;s leads" in text or "for the team's leads" in text) is not sees


def test_readyz_names_nothing_about_the_database(client, monkeypatch, db):
    from django.db import OperationalError

    from config import health

    class Down:
        def cursor(self):
            raise OperationalError(
                'connection to server at "db.internal" (10.0.0.9), port 5432 failed: '
                'FATAL: password authentication failed for user "fairshare"'
            )

    monkeypatch.setattr(health, "connection", Down())
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "unavailable"}


def test_a_person_holds_a_bounded_number_of_live_personal_tokens(cast, settings):
    from django.core.exceptions import ValidationError

    from quotas.tokens import issue_token, revoke_token

    settings.FAIRSHARE_TOKEN_MAX_PERSONAL = 3
    tokens = [issue_token(owner=cast.bob, name=f"t{i}", actor=cast.bob).token for i in range(3)]
    with pytest.raises(ValidationError) as refused:
        issue_token(owner=cast.bob, name="t3", actor=cast.bob)
    assert "name" in refused.value.message_dict
    assert issue_token(owner=cast.alice, name="hers", actor=cast.alice)  # per person
    revoke_token(tokens[0].pk, actor=cast.bob)
    assert issue_token(owner=cast.bob, name="t3", actor=cast.bob)
    # Through the API: a 400 naming the field.
    response = post_json(_api(cast.bob), "/api/v1/tokens/", {"name": "t4"})
    assert response.status_code == 400 and "name" in response.json()["errors"]


def test_personal_tokens_share_their_users_api_budget(cast, monkeypatch):
    from django.core.cache import cache

    from config.api_policy import UserOrTokenRateThrottle
    from quotas.tokens import issue_token

    monkeypatch.setattr(UserOrTokenRateThrottle, "THROTTLE_RATES", {"user": "3/min"})
    cache.clear()
    raws = [issue_token(owner=cast.bob, name=f"t{i}", actor=cast.bob).raw for i in range(2)]
    answers = [
        Client(HTTP_AUTHORIZATION=f"Bearer {raws[i % 2]}").get("/api/v1/teams/").status_code
        for i in range(5)
    ]
    assert answers == [200, 200, 200, 429, 429]
    cache.clear()


def test_previews_are_bounded_per_person_and_at_once(cast, settings, monkeypatch):
    from django.core.cache import cache

    from portal import previews
    from tests.base import GPU

    cache.clear()
    monkeypatch.setattr(previews, "_clock", lambda: 60 * 1_000_000 + 1.0)
    settings.FAIRSHARE_PREVIEW_RATE_PER_MINUTE = 2
    change = {"team-a": {"guarantee": {GPU: "21"}, "limit": {GPU: "40"}}}
    results = [previews.fresh_whatif(change, viewer=cast.alice, focus="team-a") for _ in range(3)]
    assert [r.get("error") is None for r in results] == [True, True, False]
    assert "2 a minute" in results[2]["error"]
    assert previews.fresh_whatif(change, viewer=cast.charlie).get("error") is None  # per person
    # At once over everyone: a fifth preview while four run is refused, and the slots return.
    settings.FAIRSHARE_PREVIEW_RATE_PER_MINUTE = 100
    settings.FAIRSHARE_PREVIEW_CONCURRENCY = 1
    with previews.preview_allowance(cast.dora) as refused:
        assert refused is None
        busy = previews.fresh_whatif(change, viewer=cast.charlie)
    assert busy["error"] == previews.PREVIEWS_BUSY
    assert previews.fresh_whatif(change, viewer=cast.charlie).get("error") is None
    # The page of a pending request computes its preview under the same allowance.
    settings.FAIRSHARE_PREVIEW_RATE_PER_MINUTE = 1
    cache.clear()
    from quotas.decisions import submit_request
    from quotas.lines import LineInput

    request = submit_request(
        team=cast.team_a, requester=cast.alice, lines=[LineInput(GPU, "1", "40")], justification="x"
    )
    client = signed_in(cast.vic)
    client.get(reverse("portal:quotarequest", args=[request.pk]))
    page = client.get(reverse("portal:quotarequest", args=[request.pk])).content.decode()
    assert "1 a minute" in page
    cache.clear()


def test_the_json_renderer_escapes_a_lone_surrogate_instead_of_failing():
    from config.api import SurrogateSafeJSONRenderer

    body = SurrogateSafeJSONRenderer().render({"role": ['"\udc80" is not a valid choice.']})
    assert json.loads(body) == {"role": ['"\udc80" is not a valid choice.']}
    assert b"\\udc80" in body
    assert SurrogateSafeJSONRenderer().render({"name": "é"}) == '{"name":"é"}'.encode()
