"""Quota request notifications: who is emailed, what the webhook gets, and that a failing
channel never fails (or undoes) the request that triggered it."""

from __future__ import annotations

import json
import smtplib
from unittest import mock

import pytest
from django.core import mail

from quotas import decisions, lines, notify
from tests.base import GPU

pytestmark = pytest.mark.django_db


def submit(cast):
    return decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "30", "50")],
        justification="Bigger sweep.",
    )


def test_nothing_is_sent_before_the_transaction_commits(cast):
    with mock.patch.object(notify, "post_webhook") as poster:
        notify.request_submitted(submit(cast))

    assert mail.outbox == []
    poster.assert_not_called()


def test_a_submitted_request_reaches_the_approvers_and_the_webhook(
    cast, django_capture_on_commit_callbacks
):
    req = submit(cast)

    with (
        mock.patch.object(notify, "post_webhook") as poster,
        django_capture_on_commit_callbacks(execute=True),
    ):
        notify.request_submitted(req, url="https://fairshare.example/requests/1/")

    (message,) = mail.outbox
    assert message.to == ["root@example.org"]
    assert message.subject == (
        f"[Fairshare] Quota request #{req.pk} from team-a awaits approval: more quota"
    )
    assert "GPUs: guarantee 20 → 30, limit 40 → 50" in message.body
    assert "Bigger sweep." in message.body
    assert "https://fairshare.example/requests/1/" in message.body
    (text,), _ = poster.call_args
    assert text.startswith(f"*Quota request #{req.pk} from team-a awaits approval: more quota*")


def test_a_decision_reaches_the_requester_and_the_leads_with_the_note(
    cast, django_capture_on_commit_callbacks
):
    req = submit(cast)
    decided = decisions.approve_request(
        req.pk, approver=cast.root, note="Granted for Q3.", adjustments={GPU: ("25", "50")}
    )

    with (
        mock.patch.object(notify, "post_webhook") as poster,
        django_capture_on_commit_callbacks(execute=True),
    ):
        notify.request_decided(decided)

    (message,) = mail.outbox
    assert message.to == ["alice@example.org"]
    assert "was approved" in message.subject
    assert "GPUs: guarantee 20 → 25, limit 40 → 50 — asked: guarantee 30, limit 50" in message.body
    assert "Granted for Q3." in message.body
    poster.assert_called_once()


def test_the_webhook_gets_a_slack_compatible_body(
    cast, settings, django_capture_on_commit_callbacks
):
    settings.FAIRSHARE_WEBHOOK_URL = "https://hooks.example/T000/B000/XXX"
    req = submit(cast)

    with (
        mock.patch("quotas.webhook.urllib.request.urlopen") as urlopen,
        django_capture_on_commit_callbacks(execute=True),
    ):
        notify.request_submitted(req)

    (http_request,), kwargs = urlopen.call_args
    assert http_request.full_url == "https://hooks.example/T000/B000/XXX"
    assert http_request.get_method() == "POST"
    body = json.loads(http_request.data)
    assert list(body) == ["text"] and f"#{req.pk}" in body["text"]
    assert kwargs["timeout"] > 0


def test_a_failing_mail_server_is_logged_and_the_webhook_still_posts(
    cast, caplog, django_capture_on_commit_callbacks
):
    req = submit(cast)

    with (
        mock.patch.object(notify, "send_mail", side_effect=smtplib.SMTPException("down")),
        mock.patch.object(notify, "post_webhook") as poster,
        django_capture_on_commit_callbacks(execute=True),
    ):
        notify.request_submitted(req)

    poster.assert_called_once()
    assert "cannot email" in caplog.text


def test_an_unexpected_failure_never_breaks_the_request(
    client, cast, caplog, django_capture_on_commit_callbacks
):
    client.force_login(cast.alice)
    data = {
        "lines-TOTAL_FORMS": "1",
        "lines-INITIAL_FORMS": "1",
        "lines-0-guarantee": "30",
        "lines-0-limit": "50",
        "justification": "x",
    }

    with (
        mock.patch.object(notify, "post_webhook", side_effect=RuntimeError("boom")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = client.post("/teams/team-a/requests/new/", data)

    assert response.status_code == 302
    assert "notification failed" in caplog.text


def test_teams_without_lead_emails_only_get_the_webhook(cast, django_capture_on_commit_callbacks):
    cast.alice.email = ""
    cast.alice.save()
    decided = decisions.reject_request(submit(cast).pk, approver=cast.root, note="No.")

    with (
        mock.patch.object(notify, "post_webhook") as poster,
        django_capture_on_commit_callbacks(execute=True),
    ):
        notify.request_decided(decided)

    assert mail.outbox == []
    assert "was rejected" in poster.call_args.args[0]


def test_services_notify_whoever_calls_them_api_or_ui(
    cast, mailoutbox, settings, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from quotas import decisions, grants
    from quotas.lines import LineInput

    settings.FAIRSHARE_BASE_URL = "https://fairshare.example.com"
    cast.alice.email, cast.root.email = "alice@example.org", "root@example.org"
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        request = decisions.submit_request(
            team=cast.team_a,
            requester=cast.alice,
            lines=[LineInput("nvidia.com/gpu", "30", "50")],
            justification="x",
            window_end=now + timedelta(days=1),
            now=now,
        )
    assert mailoutbox[-1].to == ["root@example.org"]
    assert f"https://fairshare.example.com/requests/{request.pk}/" in mailoutbox[-1].body
    with django_capture_on_commit_callbacks(execute=True):
        decisions.approve_request(request.pk, approver=cast.root, now=now)
    assert "was approved" in mailoutbox[-1].subject
    with django_capture_on_commit_callbacks(execute=True):
        grants.expire_temporary_quota(now=now + timedelta(days=2))
    assert "expired" in mailoutbox[-1].subject
    assert mailoutbox[-1].to == ["alice@example.org"]
