"""The approval queue's filters, sort, age highlighting and bulk reject (one transaction)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from quotas import decisions
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import InvalidTransition, PermissionDenied
from quotas.lines import LineInput
from quotas.models import AuditEvent, QuotaRequest, Team
from tests.base import GPU

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(cast):
    """Three pending requests: team-a GPUs (10 days old, temporary), team-b GPUs (today),
    team-c (another department) CPUs (5 days old)."""
    other = Team.objects.create(slug="dept-y", name="Department Y")
    team_c = Team.objects.create(slug="team-c", name="Team C", parent=other)
    now = timezone.now()

    def submit(team, requester, resource, age_days, **window):
        request = decisions.submit_request(
            team=team,
            requester=requester,
            lines=[LineInput(resource, "25", "45")],
            justification=f"{team.slug} needs more",
            **window,
        )
        QuotaRequest.objects.filter(pk=request.pk).update(created=now - timedelta(days=age_days))
        return request

    return {
        "a": submit(cast.team_a, cast.alice, GPU, 10, window_end=now + timedelta(days=3)),
        "b": submit(cast.team_b, cast.charlie, GPU, 0),
        "c": submit(team_c, cast.root, "cpu", 5),
    }


def shown(client, **params) -> list[int]:
    response = client.get(reverse("portal:approval_queue"), params)
    assert response.status_code == 200
    return [item["request"].pk for item in response.context["items"]]


def test_filters_narrow_the_queue(client, cast, queue):
    client.force_login(cast.root)
    a, b, c = queue["a"].pk, queue["b"].pk, queue["c"].pk
    assert shown(client) == [a, c, b]  # oldest first
    assert shown(client, team="team-b") == [b]
    assert shown(client, department="dept-x") == [a, b]
    assert shown(client, resource="cpu") == [c]
    assert shown(client, older_than=4) == [a, c]
    assert shown(client, temporary="yes") == [a]
    assert shown(client, temporary="no") == [c, b]
    assert shown(client, sort="newest") == [b, c, a]
    assert shown(client, sort="team") == [a, b, c]
    assert shown(client, department="dept-x", older_than=1) == [a]


def test_old_requests_are_highlighted(client, cast, queue, settings):
    settings.FAIRSHARE_APPROVAL_AGE_WARN_DAYS = 7
    client.force_login(cast.root)
    response = client.get(reverse("portal:approval_queue"))
    old = {
        item["request"].pk: (item["old"], item["age_days"]) for item in response.context["items"]
    }
    assert old == {queue["a"].pk: (True, 10), queue["b"].pk: (False, 0), queue["c"].pk: (False, 5)}
    body = response.content.decode()
    assert body.count('class="card queue-item old"') == 1
    assert "waiting 10 days" in body


def test_bad_filters_are_ignored_not_a_500(client, cast, queue):
    client.force_login(cast.root)
    assert len(shown(client, older_than="soon", sort="sideways", temporary="maybe")) == 3


def test_bulk_reject_rejects_the_ticked_ones_with_one_reason(client, cast, queue):
    client.force_login(cast.root)
    ids = [queue["a"].pk, queue["b"].pk]
    response = client.post(
        reverse("portal:approval_bulk_reject"),
        {"bulk-requests": ids, "bulk-note": "Over budget this quarter."},
    )
    assert response.status_code == 302
    for pk in ids:
        request = QuotaRequest.objects.get(pk=pk)
        assert request.status == QuotaRequestStatus.REJECTED
        assert request.decision_note == "Over budget this quarter."
    assert QuotaRequest.objects.get(pk=queue["c"].pk).status == QuotaRequestStatus.PENDING
    assert AuditEvent.objects.filter(verb=AuditVerb.REJECT).count() == 2


def test_bulk_reject_needs_a_reason_and_a_pending_choice(client, cast, queue):
    client.force_login(cast.root)
    url = reverse("portal:approval_bulk_reject")
    no_reason = client.post(url, {"bulk-requests": [queue["a"].pk], "bulk-note": ""}, follow=True)
    assert "Reason" in no_reason.content.decode()
    decisions.withdraw_request(queue["b"].pk, actor=cast.charlie)
    stale = client.post(
        url, {"bulk-requests": [queue["a"].pk, queue["b"].pk], "bulk-note": "No."}, follow=True
    )
    assert "no longer pending" in stale.content.decode()
    assert QuotaRequest.objects.get(pk=queue["a"].pk).status == QuotaRequestStatus.PENDING


def test_the_service_rejects_all_or_none(cast, queue):
    decisions.withdraw_request(queue["b"].pk, actor=cast.charlie)
    with pytest.raises(InvalidTransition):
        decisions.reject_requests(
            [queue["a"].pk, queue["b"].pk, queue["c"].pk], approver=cast.root, note="No."
        )
    assert QuotaRequest.objects.get(pk=queue["a"].pk).status == QuotaRequestStatus.PENDING
    assert QuotaRequest.objects.get(pk=queue["c"].pk).status == QuotaRequestStatus.PENDING
    assert not AuditEvent.objects.filter(verb=AuditVerb.REJECT).exists()


@pytest.mark.parametrize("who", ["alice", "dora"])
def test_leads_cannot_bulk_reject(client, cast, queue, who):
    with pytest.raises(PermissionDenied):
        decisions.reject_requests([queue["a"].pk], approver=getattr(cast, who), note="No.")
    client.force_login(getattr(cast, who))
    response = client.post(
        reverse("portal:approval_bulk_reject"),
        {"bulk-requests": [queue["b"].pk], "bulk-note": "No."},
    )
    assert response.status_code == 403
    assert QuotaRequest.objects.get(pk=queue["b"].pk).status == QuotaRequestStatus.PENDING
