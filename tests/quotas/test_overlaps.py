"""Overlapping requests (issue 14): same team, a shared resource, overlapping windows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas import decisions, lines
from quotas.models import QuotaRequest
from quotas.overlaps import overlaps
from tests.base import GPU

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def submit(cast, team=None, resource=GPU, start=None, end=None, guarantee="25", limit="40"):
    return decisions.submit_request(
        team=team or cast.team_a,
        requester=cast.root,
        lines=[lines.LineInput(resource, guarantee, limit)],
        justification="more",
        window_start=start,
        window_end=end,
        now=NOW,
    )


def test_overlapping_pending_requests_flag_each_other(cast):
    first = submit(cast, start=NOW + timedelta(days=1), end=NOW + timedelta(days=15))
    second = submit(cast, start=NOW + timedelta(days=10), end=NOW + timedelta(days=20))
    later = submit(cast, start=NOW + timedelta(days=20), end=NOW + timedelta(days=30))  # touches
    other_team = submit(cast, team=cast.team_b, guarantee="35", limit="60")
    other_resource = submit(cast, resource="cpu", guarantee="4", limit="8")

    found = overlaps(QuotaRequest.objects.all())

    assert [o.other_id for o in found[first.pk]] == [second.pk]
    assert sorted(o.other_id for o in found[second.pk]) == [first.pk]
    assert later.pk not in found  # [day 20, day 30) starts where second ends
    assert other_team.pk not in found and other_resource.pk not in found
    assert found[first.pk][0].message == (
        f"Overlaps pending request #{second.pk} for the same team and GPUs: approving one "
        "changes what the other adds."
    )


def test_a_permanent_request_overlaps_every_later_window(cast):
    permanent = submit(cast)
    temporary = submit(cast, start=NOW + timedelta(days=100), end=NOW + timedelta(days=101))
    found = overlaps([permanent, temporary])
    assert [o.other_id for o in found[permanent.pk]] == [temporary.pk]
    assert [o.other_id for o in found[temporary.pk]] == [permanent.pk]


def test_after_a_decision_the_other_request_says_its_before_includes_it(cast):
    first = submit(cast, guarantee="25", limit="40")
    second = submit(cast, guarantee="28", limit="40")
    decisions.approve_request(first.pk, approver=cast.root)
    second.refresh_from_db()

    (flag,) = overlaps([second])[second.pk]

    assert flag.decided and flag.other_id == first.pk
    assert flag.message == (
        f"Request #{first.pk} for the same team and GPUs was approved after this one was "
        "submitted: the preview's \u201cbefore\u201d already includes it."
    )


def test_rejected_requests_do_not_overlap(cast):
    first = submit(cast)
    second = submit(cast, guarantee="28")
    decisions.reject_request(first.pk, approver=cast.root, note="no")
    assert overlaps([second]) == {}


def test_two_queries_for_a_page_of_requests(cast):
    for _ in range(5):
        submit(cast)
    requests = list(QuotaRequest.objects.prefetch_related("lines"))
    with CaptureQueriesContext(connection) as ctx:
        found = overlaps(requests)
    assert len(found) == 5
    assert len(ctx.captured_queries) == 2
