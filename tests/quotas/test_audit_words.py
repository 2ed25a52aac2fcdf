"""Audit entries in plain words (issue 14), from the events the services really write."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from quotas import decisions, direct, grants, lines
from quotas.audit_words import describe
from quotas.choices import AuditVerb
from quotas.models import AuditEvent
from tests.base import GPU

pytestmark = pytest.mark.django_db


def latest(verb) -> AuditEvent:
    return AuditEvent.objects.filter(verb=verb).select_related("team").latest("created")


def submit(cast, guarantee="30", limit="50", **kwargs):
    return decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, guarantee, limit)],
        justification="more",
        **kwargs,
    )


def test_submit_approve_and_reject_read_as_sentences(cast):
    request = submit(cast, guarantee="30", limit="40")
    assert describe(latest(AuditVerb.SUBMIT)) == (
        f"alice submitted request #{request.pk} for team-a: GPU guarantee 20 → 30"
    )

    decisions.approve_request(request.pk, approver=cast.root, adjustments={GPU: ("25", "45")})
    assert describe(latest(AuditVerb.APPROVE)) == (
        f"root approved request #{request.pk} for team-a: GPU guarantee 20 → 25, GPU limit 40 → 45"
    )

    other = submit(cast, guarantee="35", limit="50")
    decisions.reject_request(other.pk, approver=cast.root, note="not now")
    assert describe(latest(AuditVerb.REJECT)) == f"root rejected request #{other.pk} for team-a"


def test_a_direct_quota_change_and_a_temporary_grant(cast):
    direct.set_team_quota(cast.team_b, GPU, guarantee="35", limit="60", actor=cast.root)
    assert describe(latest(AuditVerb.UPDATE)) == "root set team-b's quota: GPU guarantee 30 → 35"

    now = timezone.now()
    request = submit(cast, window_start=now, window_end=now + timedelta(days=1))
    decisions.approve_request(request.pk, approver=cast.root)
    grants.expire_temporary_quota(now=now + timedelta(days=2))
    assert describe(latest(AuditVerb.EXPIRE)) == (
        f"Temporary grant #{request.pk} for team-a ended: GPU guarantee 30 → 20, GPU limit 50 → 40"
    )


def test_the_audit_table_shows_the_sentence_not_the_model_label(cast):
    request = submit(cast)
    events = list(AuditEvent.objects.select_related("team"))
    html = Template('{% include "_partials/audit_table.html" with events=events %}').render(
        Context({"events": events})
    )
    assert f"alice submitted request #{request.pk} for team-a: GPU guarantee 20 → 30" in html
    assert "quotas.QuotaRequest" not in html


def test_temporary_windows_are_shown_whole():
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from quotas.templatetags.fairshare import window

    year = timezone.now().year

    def span(start, end):
        return window(SimpleNamespace(window_start=start, window_end=end))

    assert span(datetime(year, 12, 2, 9, tzinfo=UTC), datetime(year, 12, 16, tzinfo=UTC)) == (
        "Dec 2 – Dec 16"
    )
    assert span(datetime(2020, 3, 1, tzinfo=UTC), datetime(2020, 3, 8, tzinfo=UTC)) == (
        "Mar 1 – Mar 8, 2020"
    )
    assert span(datetime(2020, 12, 20, tzinfo=UTC), datetime(2021, 1, 3, tzinfo=UTC)) == (
        "Dec 20, 2020 – Jan 3, 2021"
    )
    assert span(None, None) == "permanent"
