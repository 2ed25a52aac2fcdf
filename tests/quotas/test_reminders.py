"""Reminders before a temporary grant ends (one per grant), and absolute links in emails."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from quotas import decisions, grants
from quotas.lines import LineInput
from quotas.models import QuotaRequest
from tests.base import GPU

pytestmark = pytest.mark.django_db


def grant(cast, *, ends_in: timedelta, limit: str = "50"):
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "30", limit)],
        justification="Sweeps.",
        window_end=timezone.now() + ends_in,
    )
    return decisions.approve_request(request.pk, approver=cast.root)


def test_one_reminder_goes_out_n_days_before_the_end(
    cast, settings, django_capture_on_commit_callbacks
):
    settings.FAIRSHARE_GRANT_REMINDER_DAYS = 2
    settings.FAIRSHARE_BASE_URL = "https://fairshare.example.com/"
    soon = grant(cast, ends_in=timedelta(days=1, hours=12))
    later = grant(cast, ends_in=timedelta(days=5), limit="55")
    now = timezone.now()
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        first = grants.remind_ending_grants(now=now)
    with django_capture_on_commit_callbacks(execute=True):
        again = grants.remind_ending_grants(now=now + timedelta(hours=1))

    assert first == [soon.pk] and again == []
    [message] = mail.outbox
    assert "ends soon" in message.subject
    assert "alice@example.org" in message.to
    assert f"https://fairshare.example.com/requests/{soon.pk}/" in message.body
    assert QuotaRequest.objects.get(pk=soon.pk).reminder_sent_at is not None
    assert QuotaRequest.objects.get(pk=later.pk).reminder_sent_at is None

    # Three days on, the other grant enters the window: its own single reminder.
    with django_capture_on_commit_callbacks(execute=True):
        assert grants.remind_ending_grants(now=now + timedelta(days=3, hours=1)) == [later.pk]
    assert len(mail.outbox) == 2


def test_no_reminder_for_ended_or_scheduled_grants_or_when_turned_off(cast, settings):
    ended = grant(cast, ends_in=timedelta(days=1))
    grants.end_temporary_grant(ended.pk, actor=cast.alice)
    assert grants.remind_ending_grants(days=2) == []
    grant(cast, ends_in=timedelta(days=1), limit="55")
    settings.FAIRSHARE_GRANT_REMINDER_DAYS = 0
    assert grants.remind_ending_grants() == []


def test_the_beat_schedule_runs_the_reminder_task(settings):
    from quotas.tasks import remind_ending_grants

    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "quotas.tasks.remind_ending_grants" in tasks
    assert remind_ending_grants.name == "quotas.tasks.remind_ending_grants"
