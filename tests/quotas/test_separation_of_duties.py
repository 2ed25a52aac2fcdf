"""Separation of duties (issue 15, finding 10): an admin may not decide their own quota request,
unless they are the only active site admin, and that exception is audited
(``FAIRSHARE_SEPARATION_OF_DUTIES=strict|sole-admin|off``)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from quotas import decisions
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import SelfDecisionRefused
from quotas.lines import LineInput
from quotas.models import AuditEvent, QuotaRequest
from tests.base import GPU, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_sync(monkeypatch):
    from quotas.signals import quota_changed
    from scheduling import receivers

    quota_changed.disconnect(dispatch_uid="scheduling.sync_on_quota")
    yield
    quota_changed.connect(receivers.on_quota_changed, dispatch_uid="scheduling.sync_on_quota")


def own_request(cast) -> QuotaRequest:
    return decisions.submit_request(
        team=cast.team_a,
        requester=cast.root,
        lines=[LineInput(GPU, "22", "40")],
        justification="Root asks for team-a.",
    )


@pytest.fixture
def second_admin(cast):
    return make_user("ada", admin=True)


@pytest.mark.parametrize("decide", ["approve", "reject"])
def test_an_admin_cannot_decide_their_own_request_when_another_admin_can(
    cast, second_admin, decide
):
    request = own_request(cast)
    with pytest.raises(SelfDecisionRefused):
        if decide == "approve":
            decisions.approve_request(request.pk, approver=cast.root)
        else:
            decisions.reject_request(request.pk, approver=cast.root, note="no")
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.PENDING
    decided = decisions.approve_request(request.pk, approver=second_admin)
    assert decided.status == QuotaRequestStatus.APPROVED
    assert decided.decided_by == second_admin


def test_the_only_admin_may_decide_their_own_request_and_it_is_audited(cast):
    request = own_request(cast)
    decisions.approve_request(request.pk, approver=cast.root, note="Nobody else to ask.")
    event = AuditEvent.objects.get(verb=AuditVerb.APPROVE, object_id=str(request.pk))
    assert "separation-of-duties exception" in event.note
    assert event.note.endswith("Nobody else to ask.")


def test_an_inactive_second_admin_does_not_count(cast, second_admin):
    second_admin.is_active = False
    second_admin.save()
    request = own_request(cast)
    decisions.reject_request(request.pk, approver=cast.root, note="Changed my mind.")
    event = AuditEvent.objects.get(verb=AuditVerb.REJECT, object_id=str(request.pk))
    assert "separation-of-duties exception" in event.note


def test_strict_mode_refuses_even_the_only_admin(cast, settings):
    settings.FAIRSHARE_SEPARATION_OF_DUTIES = "strict"
    request = own_request(cast)
    with pytest.raises(SelfDecisionRefused):
        decisions.approve_request(request.pk, approver=cast.root)


def test_off_lets_admins_decide_their_own_requests_without_a_note(cast, second_admin, settings):
    settings.FAIRSHARE_SEPARATION_OF_DUTIES = "off"
    request = own_request(cast)
    decisions.approve_request(request.pk, approver=cast.root)
    event = AuditEvent.objects.get(verb=AuditVerb.APPROVE, object_id=str(request.pk))
    assert event.note == ""


def test_other_peoples_requests_need_no_exception(cast):
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "22", "40")],
        justification="x",
    )
    decisions.approve_request(request.pk, approver=cast.root)
    assert AuditEvent.objects.get(verb=AuditVerb.APPROVE).note == ""


def test_the_api_answers_403_to_a_self_approval(cast, second_admin):
    request = own_request(cast)
    client = APIClient()
    client.force_authenticate(cast.root)
    response = client.post(f"/api/v1/quota-requests/{request.pk}/approve/", {}, format="json")
    assert response.status_code == 403
    assert "separation of duties" in response.json()["errors"]["detail"][0]


def test_the_decision_form_says_why_it_refuses(cast, second_admin):
    request = own_request(cast)
    client = Client()
    client.force_login(cast.root)
    response = client.post(
        reverse("portal:quotarequest_decide", args=[request.pk]),
        {
            "decision": "reject",
            f"r{request.pk}-note": "no",
            f"r{request.pk}-line0_guarantee": "22",
            f"r{request.pk}-line0_limit": "40",
        },
    )
    assert response.status_code == 200
    assert "another site admin must decide it" in response.content.decode()
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.PENDING
