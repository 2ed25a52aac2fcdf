"""The quotas web UI: every page × role, forms and their errors, previews that never write,
approvals, members, rebalance, escaping, CSRF and constant query counts."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from monitoring.models import IdleGpuAlert, UsageRollup, UsageSample
from quotas import decisions, lines
from quotas.choices import AuditVerb, MembershipRole, QuotaRequestStatus
from quotas.exceptions import PermissionDenied
from quotas.models import AuditEvent, Membership, QuotaRequest, Team, TeamQuota
from quotas.rebalance import rebalance
from quotas.signals import quota_changed
from scheduling.models import ShareComputation, ShareSnapshot, SyncRun
from tests.base import GPU

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _no_share_or_sync_tasks():
    """Committed quota changes enqueue share computation and a sync on the real broker; these
    tests are about the pages, so the scheduling receiver is off (listeners are tested apart)."""
    from scheduling import receivers

    uid = "scheduling.sync_on_quota"
    quota_changed.disconnect(dispatch_uid=uid)
    yield
    quota_changed.connect(receivers.on_quota_changed, dispatch_uid=uid)


def login(client: Client, user) -> Client:
    client.force_login(user)
    return client


def pending_request(cast, guarantee="30", limit="50", team=None, requester=None):
    return decisions.submit_request(
        team=team or cast.team_a,
        requester=requester or cast.alice,
        lines=[lines.LineInput(GPU, guarantee, limit)],
        justification="Bigger sweep.",
    )


def writes(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().split()[0].upper() in {"INSERT", "UPDATE", "DELETE"}
        and "django_session" not in q["sql"]
    ]


def request_form_data(**overrides) -> dict:
    """The request form for team-a (one GPU row + the blank row), GPUs raised to 30/50."""
    data = {
        "lines-TOTAL_FORMS": "2",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
        "lines-0-guarantee": "30",
        "lines-0-limit": "50",
        "lines-1-resource": "",
        "lines-1-guarantee": "",
        "lines-1-limit": "",
        "justification": "Training the <b>big</b> model.",
        "window_start": "",
        "window_end": "",
        "tz": "UTC",
    }
    data.update(overrides)
    return data


def rebalance_data(cast, **rows) -> dict:
    """The rebalance formset for the cast's active teams as they are, with ``rows`` changed."""
    teams = list(Team.objects.filter(active=True).order_by("slug"))
    data = {
        "teams-TOTAL_FORMS": str(len(teams)),
        "teams-INITIAL_FORMS": str(len(teams)),
        "teams-MIN_NUM_FORMS": "0",
        "teams-MAX_NUM_FORMS": "5000",
        "note": "quarterly rebalance",
    }
    for i, team in enumerate(teams):
        quotas = {q.resource: q.guarantee for q in team.quotas.all()}
        data[f"teams-{i}-weight"] = str(team.weight)
        data[f"teams-{i}-tier"] = str(team.tier_id or "")
        data[f"teams-{i}-gpu"] = str(int(quotas[GPU])) if GPU in quotas else ""
        data[f"teams-{i}-cpu"] = ""
        data[f"teams-{i}-memory"] = ""
        for key, value in rows.get(team.slug.replace("-", "_"), {}).items():
            data[f"teams-{i}-{key}"] = value
    return data


# --------------------------------------------------------------------------- page × role

PAGES = {
    "dashboard": lambda cast, req: reverse("home"),
    "team": lambda cast, req: reverse("portal:team", args=["team-a"]),
    "request_create": lambda cast, req: reverse("portal:quotarequest_create", args=["team-a"]),
    "request_list": lambda cast, req: reverse("portal:quotarequest_list"),
    "request_detail": lambda cast, req: reverse("portal:quotarequest", args=[req.pk]),
    "approvals": lambda cast, req: reverse("portal:approval_queue"),
    "rebalance": lambda cast, req: reverse("portal:rebalance"),
}

# Expected status per page and person: outsiders get 404 for team-a's objects, people who may
# see but not act get 403, admins-only pages 403 for everyone else.
WHO = ("root", "alice", "bob", "vic", "charlie", "dora", "nobody")
MATRIX = {  # status per person, in WHO order
    "dashboard": (200, 200, 200, 200, 200, 200, 200),
    "team": (200, 200, 200, 200, 404, 200, 404),
    "request_create": (200, 200, 403, 403, 404, 200, 404),
    "request_list": (200, 200, 200, 200, 200, 200, 200),
    "request_detail": (200, 200, 200, 200, 404, 200, 404),
    "approvals": (200, 403, 403, 403, 403, 403, 403),
    "rebalance": (200, 403, 403, 403, 403, 403, 403),
}
CASES = [
    (page, who, status)
    for page, row in MATRIX.items()
    for who, status in zip(WHO, row, strict=True)
]


@pytest.mark.parametrize(("page", "who", "status"), CASES)
def test_each_page_answers_each_role_as_the_security_model_says(client, cast, page, who, status):
    req = pending_request(cast)
    login(client, getattr(cast, who))

    response = client.get(PAGES[page](cast, req))

    assert response.status_code == status


@pytest.mark.parametrize("page", sorted(PAGES))
def test_anonymous_visitors_are_sent_to_the_login_page(client, cast, page):
    req = pending_request(cast)
    url = PAGES[page](cast, req)

    response = client.get(url)

    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_the_request_list_shows_only_requests_the_user_may_see(client, cast):
    mine = pending_request(cast)
    theirs = pending_request(cast, team=cast.team_b, requester=cast.charlie)

    login(client, cast.bob)
    shown = list(client.get(reverse("portal:quotarequest_list")).context["page"].object_list)

    assert shown == [mine]
    login(client, cast.root)
    shown = list(client.get(reverse("portal:quotarequest_list")).context["page"].object_list)
    assert set(shown) == {mine, theirs}


def test_the_dashboard_shows_only_the_teams_a_member_belongs_to(client, cast):
    login(client, cast.bob)

    rows = client.get(reverse("home")).context["rows"]

    assert [row["team"].slug for row in rows] == ["team-a"]
    assert rows[0]["role"] == MembershipRole.MEMBER


def test_the_dashboard_tells_people_without_teams_what_to_do(client, cast):
    login(client, cast.nobody)

    response = client.get(reverse("home"))

    assert b"You are not a member of any team yet" in response.content


def test_the_dashboard_shows_capacity_usage_shares_idle_gpus_and_the_last_sync(client, cast):
    UsageSample.objects.create(
        taken_at=NOW, team=cast.team_a, namespace="team-a-ml", resource=GPU, allocated=12, pending=3
    )
    computation = ShareComputation.objects.create(computed_at=NOW, capacity={GPU: "100"})
    ShareSnapshot.objects.create(
        computation=computation,
        computed_at=NOW,
        team=cast.team_a,
        dominant_share=0.12,
        dominant_resource=GPU,
        fair_share=0.25,
        fair_allocation={GPU: "25"},
    )
    IdleGpuAlert.objects.create(
        team=cast.team_a, namespace="team-a-ml", gpus=2, started_at=NOW, last_seen_at=NOW
    )
    SyncRun.objects.create(status="succeeded", updated_count=4)
    login(client, cast.alice)

    response = client.get(reverse("home"))

    text = response.content.decode()
    assert "12.0 %" in text and "25.0 %" in text  # dominant share and fair share
    assert "(+3)" in text  # pending GPUs
    assert "2 GPUs" in text  # idle
    assert "Succeeded" in text
    assert 'id="dashboard-chart"' in text  # chart data for fairshare.js, no inline script code
    assert "<script>" not in text


def test_team_names_and_justifications_are_escaped(client, cast):
    cast.team_a.name = "<script>alert('x')</script>"
    cast.team_a.save()
    req = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "30", "50")],
        justification="<img src=x onerror=alert(1)>",
    )
    login(client, cast.root)

    for url in (
        reverse("home"),
        reverse("portal:team", args=["team-a"]),
        reverse("portal:quotarequest", args=[req.pk]),
        reverse("portal:approval_queue"),
    ):
        text = client.get(url).content.decode()
        assert "<script>alert" not in text, url
        assert "<img src=x" not in text, url
    assert "&lt;script&gt;" in client.get(reverse("home")).content.decode()


def test_forms_are_protected_against_csrf(cast):
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.alice)
    url = reverse("portal:quotarequest_create", args=["team-a"])

    assert b"csrfmiddlewaretoken" in client.get(url).content
    assert client.post(url, request_form_data()).status_code == 403
    assert not QuotaRequest.objects.exists()


# --------------------------------------------------------------------------- request form


def test_the_request_form_is_prefilled_with_the_current_quota_and_a_blank_row(client, cast):
    login(client, cast.alice)

    formset = client.get(reverse("portal:quotarequest_create", args=["team-a"])).context["formset"]

    assert [f.initial for f in formset.forms[:1]] == [
        {"resource": GPU, "guarantee": "20", "limit": "40"}
    ]
    assert len(formset.forms) == 2 and not formset.forms[1].initial


def test_a_lead_submits_a_request_and_the_approvers_are_emailed(
    client, cast, django_capture_on_commit_callbacks
):
    login(client, cast.alice)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("portal:quotarequest_create", args=["team-a"]), request_form_data()
        )

    req = QuotaRequest.objects.get()
    assert response.status_code == 302 and response.url == reverse(
        "portal:quotarequest", args=[req.pk]
    )
    line = req.lines.get()
    assert (line.resource, line.guarantee, line.limit) == (GPU, Decimal(30), Decimal(50))
    assert req.justification == "Training the <b>big</b> model."
    assert [m.to for m in mail.outbox] == [["root@example.org"]]
    assert f"#{req.pk}" in mail.outbox[0].subject


def test_a_new_resource_row_is_added_to_the_request(client, cast):
    login(client, cast.alice)
    data = request_form_data(
        **{
            "lines-0-guarantee": "20",
            "lines-0-limit": "40",
            "lines-1-resource": "cpu",
            "lines-1-guarantee": "500m",
            "lines-1-limit": "2",
        }
    )

    client.post(reverse("portal:quotarequest_create", args=["team-a"]), data)

    line = QuotaRequest.objects.get().lines.get()  # the unchanged GPU row is not a line
    assert (line.resource, line.guarantee, line.limit) == ("cpu", Decimal("0.5"), Decimal(2))


def test_a_temporary_request_reads_the_window_in_the_browsers_time_zone(client, cast):
    login(client, cast.alice)
    data = request_form_data(
        window_start="2099-01-01T09:00", window_end="2099-01-02T09:00", tz="Europe/Berlin"
    )

    client.post(reverse("portal:quotarequest_create", args=["team-a"]), data)

    req = QuotaRequest.objects.get()
    assert req.window_start.isoformat() == "2099-01-01T08:00:00+00:00"
    assert req.window_end.isoformat() == "2099-01-02T08:00:00+00:00"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"lines-0-guarantee": "lots"}, "guarantee", "is not a Kubernetes quantity"),
        ({"lines-0-guarantee": "-1"}, "guarantee", "cannot be negative"),
        ({"lines-0-guarantee": "2.5"}, "guarantee", "whole devices"),
        ({"lines-0-guarantee": "60"}, "guarantee", "Guarantee cannot exceed the limit."),
        ({"lines-0-limit": ""}, "limit", "Enter an amount."),
        ({"lines-1-guarantee": "4"}, "resource", "Name the resource"),
        (
            {"lines-1-resource": "gpu", "lines-1-guarantee": "1", "lines-1-limit": "1"},
            "resource",
            "is not a Kubernetes resource name",
        ),
    ],
)
def test_bad_amounts_are_shown_next_to_their_row(client, cast, overrides, field, message):
    login(client, cast.alice)

    response = client.post(
        reverse("portal:quotarequest_create", args=["team-a"]), request_form_data(**overrides)
    )

    assert response.status_code == 200
    formset = response.context["formset"]
    row = 1 if any(key.startswith("lines-1") for key in overrides) else 0
    assert any(message in error for error in formset.forms[row].errors[field])
    assert message.split(" ")[0] in response.content.decode()
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"window_start": "2099-01-02T00:00"}, "window_end", "needs an end"),
        (
            {"window_start": "2099-01-02T00:00", "window_end": "2099-01-01T00:00"},
            "window_end",
            "must end after it starts",
        ),
        ({"window_end": "2001-01-01T00:00"}, "window_end", "must end in the future"),
        ({"window_end": "next tuesday"}, "window_end", "Enter a valid date/time."),
        ({"justification": ""}, "justification", "This field is required."),
    ],
)
def test_a_bad_window_or_missing_justification_is_shown_next_to_the_field(
    client, cast, overrides, field, message
):
    login(client, cast.alice)

    response = client.post(
        reverse("portal:quotarequest_create", args=["team-a"]), request_form_data(**overrides)
    )

    assert any(message in e for e in response.context["form"].errors[field])
    assert not QuotaRequest.objects.exists()


def test_a_request_that_changes_nothing_says_so(client, cast):
    login(client, cast.alice)

    response = client.post(
        reverse("portal:quotarequest_create", args=["team-a"]),
        request_form_data(**{"lines-0-guarantee": "20", "lines-0-limit": "40"}),
    )

    assert "Change at least one amount" in response.context["form"].non_field_errors()[0]


def test_service_errors_keyed_by_line_land_on_the_row_that_sent_it(client, cast):
    login(client, cast.alice)
    error = ValidationError({"lines[0].limit": ["Too big for us."]})

    with mock.patch.object(decisions, "submit_request", side_effect=error):
        response = client.post(
            reverse("portal:quotarequest_create", args=["team-a"]), request_form_data()
        )

    assert response.context["formset"].forms[0].errors["limit"] == ["Too big for us."]


# --------------------------------------------------------------------------- previews


def test_the_preview_endpoint_returns_the_partial_and_writes_nothing(client, cast):
    login(client, cast.alice)
    before = (QuotaRequest.objects.count(), AuditEvent.objects.count())

    with CaptureQueriesContext(connection) as ctx:
        response = client.post(
            reverse("portal:quotarequest_preview", args=["team-a"]),
            request_form_data(),
            HTTP_HX_REQUEST="true",
        )

    assert response.status_code == 200
    text = response.content.decode()
    assert "<html" not in text and 'class="whatif"' in text
    assert "What team-a gets" in text
    assert writes(ctx.captured_queries) == []
    assert (QuotaRequest.objects.count(), AuditEvent.objects.count()) == before
    assert ShareComputation.objects.count() == 0


def test_the_preview_flags_a_request_over_capacity(client, cast):
    login(client, cast.alice)

    response = client.post(
        reverse("portal:quotarequest_preview", args=["team-a"]),
        request_form_data(**{"lines-0-guarantee": "70", "lines-0-limit": "80"}),
    )

    assert "Over capacity" in response.content.decode()


def test_the_preview_says_what_a_device_class_line_does(client, cast):
    """Issue 34: a lead adding a DRA device class in the browser form sees what enforces it."""
    login(client, cast.alice)
    mig = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"

    response = client.post(
        reverse("portal:quotarequest_preview", args=["team-a"]),
        request_form_data(
            **{"lines-1-resource": mig, "lines-1-guarantee": "0", "lines-1-limit": "8"}
        ),
    )

    text = response.content.decode()
    assert response.status_code == 200
    assert "<strong>Device class:</strong> mig.nvidia.com devices (Dynamic Resource" in text
    assert "a limit of 8 devices caps team-a&#x27;s ResourceClaims" in text


def test_the_preview_asks_to_fix_bad_amounts_first(client, cast):
    login(client, cast.alice)

    response = client.post(
        reverse("portal:quotarequest_preview", args=["team-a"]),
        request_form_data(**{"lines-0-guarantee": "lots"}),
    )

    assert "Fix the highlighted amounts" in response.content.decode()


@pytest.mark.parametrize(("who", "status"), [("bob", 403), ("charlie", 404), ("dora", 200)])
def test_only_leads_may_preview(client, cast, who, status):
    login(client, getattr(cast, who))

    response = client.post(
        reverse("portal:quotarequest_preview", args=["team-a"]), request_form_data()
    )

    assert response.status_code == status


def test_the_approval_preview_uses_the_adjusted_amounts_and_writes_nothing(client, cast):
    req = pending_request(cast)
    login(client, cast.root)
    url = reverse("portal:approval_preview", args=[req.pk])

    with CaptureQueriesContext(connection) as ctx:
        lazy = client.get(url)
        adjusted = client.post(
            url, {f"r{req.pk}-line0_guarantee": "25", f"r{req.pk}-line0_limit": "50"}
        )

    assert lazy.status_code == adjusted.status_code == 200
    assert "What team-a gets" in lazy.content.decode()
    assert "What team-a gets" in adjusted.content.decode()
    assert writes(ctx.captured_queries) == []


def test_a_failing_solver_shows_a_message_instead_of_breaking_the_form(client, cast, caplog):
    login(client, cast.alice)

    with mock.patch("portal.previews.what_if", side_effect=IndexError("solver bug")):
        response = client.post(
            reverse("portal:quotarequest_preview", args=["team-a"]), request_form_data()
        )

    assert response.status_code == 200
    assert "The preview could not be computed" in response.content.decode()
    assert "solver bug" in caplog.text  # logged with its traceback


def test_a_decided_request_shows_the_preview_it_was_decided_on(client, cast):
    req = pending_request(cast)
    login(client, cast.root)
    client.post(
        reverse("portal:quotarequest_decide", args=[req.pk]),
        {"decision": "approve", f"r{req.pk}-line0_guarantee": "30", f"r{req.pk}-line0_limit": "50"},
    )

    response = client.get(reverse("portal:quotarequest", args=[req.pk]))

    assert response.context["whatif"] is None
    assert response.context["stored_preview"]["focus"]["slug"] == "team-a"
    assert "Preview the decision was made on" in response.content.decode()


# --------------------------------------------------------------------------- detail, withdraw


def test_the_requester_withdraws_a_pending_request_and_the_team_is_told(
    client, cast, django_capture_on_commit_callbacks
):
    req = pending_request(cast)
    login(client, cast.alice)
    assert client.get(reverse("portal:quotarequest", args=[req.pk])).context["can_withdraw"]

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("portal:quotarequest_withdraw", args=[req.pk]))

    req.refresh_from_db()
    assert response.status_code == 302
    assert req.status == QuotaRequestStatus.WITHDRAWN
    assert "withdrawn" in mail.outbox[0].subject


@pytest.mark.parametrize(("who", "status"), [("bob", 403), ("vic", 403), ("charlie", 404)])
def test_members_and_outsiders_cannot_withdraw(client, cast, who, status):
    req = pending_request(cast)
    login(client, getattr(cast, who))

    response = client.post(reverse("portal:quotarequest_withdraw", args=[req.pk]))

    assert response.status_code == status
    req.refresh_from_db()
    assert req.status == QuotaRequestStatus.PENDING


def test_members_see_no_withdraw_button(client, cast):
    req = pending_request(cast)
    login(client, cast.bob)

    response = client.get(reverse("portal:quotarequest", args=[req.pk]))

    assert not response.context["can_withdraw"]
    assert b"Withdraw" not in response.content
    assert response.context["decision_form"] is None


# --------------------------------------------------------------------------- approvals


def test_the_queue_lists_pending_requests_oldest_first(client, cast):
    first = pending_request(cast)
    second = pending_request(cast, team=cast.team_b, requester=cast.charlie, guarantee="35")
    decisions.withdraw_request(first.pk, actor=cast.alice)
    third = pending_request(cast, guarantee="25")
    login(client, cast.root)

    items = client.get(reverse("portal:approval_queue")).context["items"]

    assert [item["request"] for item in items] == [second, third]


def test_approving_from_the_queue_raises_the_quota_and_stores_the_preview(
    client, cast, django_capture_on_commit_callbacks
):
    req = pending_request(cast)
    login(client, cast.root)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("portal:quotarequest_decide", args=[req.pk]),
            {
                "decision": "approve",
                f"r{req.pk}-line0_guarantee": "30",
                f"r{req.pk}-line0_limit": "50",
                f"r{req.pk}-note": "Go.",
                "next": reverse("portal:approval_queue"),
            },
        )

    assert response.status_code == 302 and response.url == reverse("portal:approval_queue")
    req.refresh_from_db()
    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU)
    assert req.status == QuotaRequestStatus.APPROVED and req.decided_by == cast.root
    assert (quota.guarantee, quota.limit) == (Decimal(30), Decimal(50))
    assert {t["team"] for t in req.preview["teams"]} >= {"team-a", "team-b"}
    assert sorted(mail.outbox[0].to) == ["alice@example.org"]
    assert "approved" in mail.outbox[0].subject


def test_an_approver_may_grant_adjusted_amounts(client, cast):
    req = pending_request(cast)
    login(client, cast.root)

    client.post(
        reverse("portal:quotarequest_decide", args=[req.pk]),
        {
            "decision": "approve",
            f"r{req.pk}-line0_guarantee": "25",
            f"r{req.pk}-line0_limit": "45",
        },
    )

    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU)
    assert (quota.guarantee, quota.limit) == (Decimal(25), Decimal(45))
    assert QuotaRequest.objects.get().preview["changes"] == {
        "team-a": {"guarantee": {GPU: "25"}, "limit": {GPU: "45"}}
    }


def test_over_capacity_is_shown_as_an_error_on_the_resource_and_nothing_changes(client, cast):
    req = pending_request(cast, guarantee="70", limit="80")  # 70 + 30 > 90 guaranteeable
    login(client, cast.root)

    response = client.post(
        reverse("portal:quotarequest_decide", args=[req.pk]),
        {"decision": "approve", f"r{req.pk}-line0_guarantee": "70", f"r{req.pk}-line0_limit": "80"},
    )

    assert response.status_code == 200
    errors = response.context["decision_form"].errors["line0_guarantee"]
    assert any(GPU in e and "over the 90 schedulable" in e for e in errors)
    req.refresh_from_db()
    assert req.status == QuotaRequestStatus.PENDING
    assert TeamQuota.objects.get(team=cast.team_a, resource=GPU).guarantee == Decimal(20)


def test_a_decrease_below_usage_is_flagged_with_the_namespaces_that_keep_running(client, cast):
    UsageSample.objects.create(
        taken_at=NOW, team=cast.team_a, namespace="team-a-ml", resource=GPU, allocated=18
    )
    req = pending_request(cast, guarantee="5", limit="10")
    login(client, cast.root)

    text = client.get(reverse("portal:approval_preview", args=[req.pk])).content.decode()

    assert "Below current usage" in text
    assert "<code>team-a-ml</code> keeps running 18" in text


def test_rejecting_needs_a_reason(client, cast):
    req = pending_request(cast)
    login(client, cast.root)

    response = client.post(
        reverse("portal:quotarequest_decide", args=[req.pk]),
        {"decision": "reject", f"r{req.pk}-line0_guarantee": "30", f"r{req.pk}-line0_limit": "50"},
    )

    assert "Give the team a reason" in response.context["decision_form"].errors["note"][0]
    req.refresh_from_db()
    assert req.status == QuotaRequestStatus.PENDING


def test_rejecting_with_a_reason_tells_the_team(client, cast, django_capture_on_commit_callbacks):
    req = pending_request(cast)
    login(client, cast.root)

    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("portal:quotarequest_decide", args=[req.pk]),
            {
                "decision": "reject",
                f"r{req.pk}-line0_guarantee": "30",
                f"r{req.pk}-line0_limit": "50",
                f"r{req.pk}-note": "Not this quarter.",
            },
        )

    req.refresh_from_db()
    assert req.status == QuotaRequestStatus.REJECTED
    assert "Not this quarter." in mail.outbox[0].body


def test_deciding_twice_shows_a_message_instead_of_an_error(client, cast):
    req = pending_request(cast)
    decisions.reject_request(req.pk, approver=cast.root, note="No.")
    login(client, cast.root)

    response = client.post(
        reverse("portal:quotarequest_decide", args=[req.pk]),
        {"decision": "approve", f"r{req.pk}-line0_guarantee": "30", f"r{req.pk}-line0_limit": "50"},
        follow=True,
    )

    assert "not pending" in response.content.decode()
    assert TeamQuota.objects.get(team=cast.team_a, resource=GPU).guarantee == Decimal(20)


@pytest.mark.parametrize("who", ["alice", "bob", "dora"])
def test_only_admins_decide(client, cast, who):
    req = pending_request(cast)
    login(client, getattr(cast, who))

    response = client.post(
        reverse("portal:quotarequest_decide", args=[req.pk]),
        {"decision": "approve", f"r{req.pk}-line0_guarantee": "30", f"r{req.pk}-line0_limit": "50"},
    )

    assert response.status_code == 403
    req.refresh_from_db()
    assert req.status == QuotaRequestStatus.PENDING


# --------------------------------------------------------------------------- team page, members


def test_the_team_page_shows_usage_chart_data_members_requests_and_audit(client, cast):
    hour = NOW.replace(minute=0, second=0) - timezone.timedelta(hours=2)
    UsageRollup.objects.create(
        period="hour",
        start=hour,
        team=cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        allocated_hours=Decimal(12),
        guarantee_hours=Decimal(20),
    )
    pending_request(cast)
    login(client, cast.bob)

    response = client.get(reverse("portal:team", args=["team-a"]))

    chart = response.context["chart"]["charts"][0]
    assert chart["resource"] == GPU
    assert chart["labels"] == [hour.isoformat()]
    assert [d["data"] for d in chart["datasets"]] == [[12.0], [0.0], [20.0], [40.0]]
    text = response.content.decode()
    assert 'id="team-usage-chart"' in text
    assert "alice" in text and "team-a-ml" in text
    assert not response.context["can_write"]
    assert "Add a member" not in text  # members only read
    assert "Audit trail" not in text  # the audit trail is for leads and admins
    login(client, cast.alice)
    text = client.get(reverse("portal:team", args=["team-a"])).content.decode()
    assert "Audit trail" in text and "alice submitted request #" in text


def test_a_lead_adds_changes_and_removes_members_with_audit_events(client, cast):
    login(client, cast.alice)
    base = reverse("portal:member_add", args=["team-a"])

    client.post(base, {"add-username": "nobody", "add-role": "viewer"})
    membership = Membership.objects.get(team=cast.team_a, user=cast.nobody)
    client.post(
        reverse("portal:member_update", args=["team-a", membership.pk]),
        {f"m{membership.pk}-role": "member"},
    )
    membership.refresh_from_db()
    assert membership.role == MembershipRole.MEMBER
    client.post(reverse("portal:member_remove", args=["team-a", membership.pk]))

    assert not Membership.objects.filter(pk=membership.pk).exists()
    verbs = list(
        AuditEvent.objects.filter(team=cast.team_a, object_type="quotas.Membership")
        .order_by("id")
        .values_list("verb", flat=True)
    )
    assert verbs == [AuditVerb.CREATE, AuditVerb.UPDATE, AuditVerb.DELETE]


def test_adding_an_unknown_user_shows_why(client, cast):
    login(client, cast.alice)

    response = client.post(
        reverse("portal:member_add", args=["team-a"]),
        {"add-username": "ghost", "add-role": "member"},
        follow=True,
    )

    assert "no active user called" in response.content.decode()


def test_the_last_lead_cannot_demote_themselves(client, cast):
    login(client, cast.alice)
    membership = Membership.objects.get(team=cast.team_a, user=cast.alice)

    response = client.post(
        reverse("portal:member_update", args=["team-a", membership.pk]),
        {f"m{membership.pk}-role": "member"},
        follow=True,
    )

    membership.refresh_from_db()
    assert membership.role == MembershipRole.LEAD
    assert "at least one lead" in response.content.decode()


@pytest.mark.parametrize(("who", "status"), [("bob", 403), ("vic", 403), ("charlie", 404)])
def test_members_and_outsiders_cannot_manage_members(client, cast, who, status):
    login(client, getattr(cast, who))

    response = client.post(
        reverse("portal:member_add", args=["team-a"]),
        {"add-username": "nobody", "add-role": "lead"},
    )

    assert response.status_code == status
    assert not Membership.objects.filter(user=cast.nobody).exists()


# --------------------------------------------------------------------------- rebalance


def test_rebalance_preview_shows_the_plan_and_writes_nothing(client, cast):
    login(client, cast.root)
    data = rebalance_data(cast, team_a={"weight": "4", "gpu": "30"}) | {"action": "preview"}

    with CaptureQueriesContext(connection) as ctx:
        response = client.post(reverse("portal:rebalance"), data)

    assert response.status_code == 200
    assert response.context["whatif"] and not response.context["errors"]
    assert "Teams whose fair allocation moves" in response.content.decode() or (
        "No other team" in response.content.decode()
    )
    assert writes(ctx.captured_queries) == []


def test_rebalance_applies_weights_tiers_and_guarantees_together(client, cast):
    login(client, cast.root)
    data = rebalance_data(
        cast,
        team_a={"weight": "3", "gpu": "10", "tier": ""},
        team_b={"gpu": "40", "cpu": "100"},
    ) | {"action": "apply"}

    response = client.post(reverse("portal:rebalance"), data)

    assert response.status_code == 302
    cast.team_a.refresh_from_db()
    assert (cast.team_a.weight, cast.team_a.tier) == (3, None)
    guarantees = dict(
        TeamQuota.objects.filter(team__slug__in=["team-a", "team-b"])
        .values_list("team__slug", "guarantee")
        .filter(resource=GPU)
    )
    assert guarantees == {"team-a": Decimal(10), "team-b": Decimal(40)}
    assert TeamQuota.objects.get(team=cast.team_b, resource="cpu").guarantee == Decimal(100)
    assert AuditEvent.objects.filter(verb=AuditVerb.REBALANCE, team=cast.team_a).exists()


def test_one_bad_row_saves_nothing(client, cast):
    login(client, cast.root)
    data = rebalance_data(cast, team_a={"weight": "7"}, team_b={"gpu": "70"}) | {
        "action": "apply"
    }  # team-b's limit is 60

    response = client.post(reverse("portal:rebalance"), data)

    assert response.status_code == 200
    form = response.context["formset"].form_for("team-b")
    assert "Guarantee cannot exceed the limit." in form.errors["gpu"]
    cast.team_a.refresh_from_db()
    assert cast.team_a.weight == 1
    assert TeamQuota.objects.get(team=cast.team_b, resource=GPU).guarantee == Decimal(30)
    assert not AuditEvent.objects.filter(verb=AuditVerb.REBALANCE).exists()


def test_rebalance_over_capacity_saves_nothing(client, cast):
    login(client, cast.root)
    data = rebalance_data(cast, team_a={"weight": "7", "gpu": "40"}, team_b={"gpu": "60"}) | {
        "action": "apply"
    }

    response = client.post(reverse("portal:rebalance"), data)

    assert any("over the 90 schedulable" in e for e in response.context["errors"])
    cast.team_a.refresh_from_db()
    assert cast.team_a.weight == 1
    assert TeamQuota.objects.get(team=cast.team_a, resource=GPU).guarantee == Decimal(20)


def test_rebalance_with_nothing_changed_says_so(client, cast):
    login(client, cast.root)

    response = client.post(reverse("portal:rebalance"), rebalance_data(cast) | {"action": "apply"})

    assert "Nothing changed" in response.context["errors"][0]


def test_rebalance_applies_decreases_first_so_a_full_cluster_can_move_guarantees(cast):
    rebalance(
        {"team-a": {"guarantee": {GPU: "40"}}, "team-b": {"guarantee": {GPU: "50"}}},
        actor=cast.root,
    )

    # 90 of 90 guaranteed: team-b's +10 only fits after team-a's -10.
    rebalance(
        {"team-a": {"guarantee": {GPU: "30"}}, "team-b": {"guarantee": {GPU: "60"}}},
        actor=cast.root,
    )

    assert dict(TeamQuota.objects.filter(resource=GPU).values_list("team__slug", "guarantee")) == {
        "team-a": Decimal(30),
        "team-b": Decimal(60),
    }


def test_rebalance_refuses_non_admins_and_unknown_teams(cast):
    with pytest.raises(PermissionDenied):
        rebalance({"team-a": {"weight": 2}}, actor=cast.alice)
    with pytest.raises(ValidationError) as e:
        rebalance({"team-a": {"weight": 2}, "ghost": {"weight": 2}}, actor=cast.root)

    assert e.value.message_dict == {"ghost": ["There is no team 'ghost'."]}
    cast.team_a.refresh_from_db()
    assert cast.team_a.weight == 1


def test_rebalance_announces_weight_changes_after_commit(cast, django_capture_on_commit_callbacks):
    received = []

    def listener(sender, team_ids, reason, **kwargs):
        received.append((team_ids, reason))

    quota_changed.connect(listener)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            rebalance({"team-b": {"weight": 5, "tier": None}}, actor=cast.root)
    finally:
        quota_changed.disconnect(listener)

    assert received == [([cast.team_b.pk], "rebalance")]


# --------------------------------------------------------------------------- query counts


def add_teams(count: int) -> None:
    computation = ShareComputation.objects.order_by("-id").first() or (
        ShareComputation.objects.create(computed_at=NOW)
    )
    for i in range(count):
        team = Team.objects.create(slug=f"bulk-{Team.objects.count()}-{i}", name=f"Bulk {i}")
        TeamQuota.objects.create(team=team, resource=GPU, guarantee=0, limit=Decimal(2))
        TeamQuota.objects.create(team=team, resource="cpu", guarantee=0, limit=Decimal(8))
        UsageSample.objects.create(
            taken_at=NOW, team=team, namespace=f"ns-{team.slug}", resource=GPU, allocated=1
        )
        ShareSnapshot.objects.create(
            computation=computation,
            computed_at=NOW,
            team=team,
            dominant_share=0.01,
            fair_allocation={GPU: "1"},
        )
        IdleGpuAlert.objects.create(team=team, gpus=1, started_at=NOW, last_seen_at=NOW)
        decisions.submit_request(
            team=team,
            requester=User.objects.get(username="root"),
            lines=[lines.LineInput(GPU, "1", "2")],
            justification="more",
        )


@pytest.mark.parametrize("url_name", ["home", "portal:approval_queue", "portal:quotarequest_list"])
def test_list_pages_run_a_constant_number_of_queries(
    client, cast, django_assert_max_num_queries, url_name
):
    SyncRun.objects.create(status="succeeded")
    add_teams(3)
    login(client, cast.root)
    url = reverse(url_name)
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    few = len(ctx.captured_queries)

    add_teams(27)
    with django_assert_max_num_queries(few):
        response = client.get(url)

    assert response.status_code == 200
    if url_name == "home":
        assert len(response.context["rows"]) == 33


def test_a_members_dashboard_runs_a_constant_number_of_queries(
    client, cast, django_assert_max_num_queries
):
    def join(n):
        add_teams(n)
        for team in Team.objects.filter(slug__startswith="bulk-"):
            Membership.objects.get_or_create(user=cast.bob, team=team)

    join(3)
    login(client, cast.bob)
    with CaptureQueriesContext(connection) as ctx:
        client.get(reverse("home"))
    few = len(ctx.captured_queries)

    join(27)
    with django_assert_max_num_queries(few):
        response = client.get(reverse("home"))

    assert len(response.context["rows"]) == 31


@pytest.mark.parametrize(
    ("amount", "resource", "shown"),
    [
        (Decimal(14158336 * 2**20), "memory", "13.5Ti"),
        (Decimal("22521.6"), "cpu", "22521.6"),
        (Decimal("0.5"), "cpu", "500m"),
        (Decimal(64 * 2**30), "memory", "64Gi"),
        (Decimal(8), "nvidia.com/gpu", "8"),
        # GPU-equivalents of MIG slices held through DRA (issue 34): a fraction of a GPU.
        (Decimal("0.125"), "nvidia.com/gpu", "0.125"),
        (Decimal("2.375"), "nvidia.com/gpu", "2.375"),
        (Decimal("0.5"), "example.com/fpga", "500m"),
    ],
)
def test_quantities_are_shown_readably(amount, resource, shown):
    from quotas.templatetags.fairshare import quantity

    assert quantity(amount, resource) == shown


def test_the_dashboard_pages_and_sorts_all_teams_server_side(client, cast, settings):
    from portal import dashboard

    for i in range(dashboard.PAGE_SIZE + 5):
        Team.objects.create(slug=f"bulk-{i:03d}", name=f"Bulk {i}", weight=(i % 7) + 1)
    client.force_login(cast.root)
    first = client.get(reverse("home")).content.decode()
    assert "bulk-000" in first and "bulk-054" not in first
    assert "of 58" in first  # 55 bulk teams + dept-x, team-a, team-b
    last = client.get(reverse("home"), {"page": 2}).content.decode()
    assert "bulk-054" in last and "team-b" in last
    by_weight = client.get(reverse("home"), {"sort": "-weight"}).content.decode()
    assert "bulk-006" in by_weight  # weight 7: first page
    assert "bulk-000" not in by_weight  # weight 1: sorted onto the last page


def test_only_site_admins_are_offered_the_adopt_page_on_a_team_without_namespaces(client, cast):
    """The adopt page is for site admins: a department lead (whose department has no namespaces
    of its own) reads that an admin adopts, with no link that would answer 403."""
    from quotas.models import Namespace

    assert not Namespace.objects.filter(team=cast.dept).exists()
    adopt = reverse("portal:adopt_namespace")
    client.force_login(cast.dora)
    page = client.get(reverse("portal:team", args=[cast.dept.slug])).content.decode()
    assert "adopted by an admin" in page
    assert adopt not in page
    assert client.get(adopt).status_code == 403
    client.force_login(cast.root)
    page = client.get(reverse("portal:team", args=[cast.dept.slug])).content.decode()
    assert f'href="{adopt}"' in page
