"""Stale fair shares as people see them (issue 14): the banner in plain words, /metrics, and one
admin notification per failure episode (not per attempt)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.metrics import build_registry
from quotas.mailtext import absolute_url, human_time
from quotas.models import TeamQuota
from scheduling.exceptions import ShareProblemError
from scheduling.health import banner, explain_share_error
from scheduling.models import ShareFailure
from scheduling.services import compute_shares
from tests.base import GPU

NOW = timezone.now().replace(microsecond=0)


def break_the_problem(cast) -> TeamQuota:
    """dept-x limited to 40 GPUs under its teams' 20 + 30 guaranteed (written around the
    services, as data from before the rules or a shrunk cluster would be)."""
    return TeamQuota.objects.create(team=cast.dept, resource=GPU, guarantee=Decimal(0), limit=40)


def fail(at):
    with pytest.raises(ShareProblemError):
        compute_shares(trigger="test", now=at)


def gauges() -> dict:
    from prometheus_client import generate_latest

    text = generate_latest(build_registry()).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(("fairshare_shares_", "fairshare_share_failures"))
    }


def test_solver_messages_in_plain_words():
    assert (
        explain_share_error(
            "tenant 'ai-research': its children's guarantees of 'nvidia.com/gpu' (664) exceed its "
            "limit (208)"
        )
        == "ai-research's limit is 208 GPUs, but its teams are guaranteed 664 GPUs."
    )
    assert (
        explain_share_error(
            "tenant 'team-a': guarantee['nvidia.com/gpu'] (906.977) "
            "exceeds limit['nvidia.com/gpu'] (64)"
        )
        == "team-a is guaranteed 906 GPUs, more than its limit of 64 GPUs."
    )
    assert (
        explain_share_error("guarantee['cpu']: sum of guarantees (1200) exceeds capacity (1000)")
        == "The teams are guaranteed 1200 CPU cores in total, "
        "more than the cluster's 1000 CPU cores."
    )
    assert explain_share_error("tenant 'x': unknown parent 'y'") == "team 'x': unknown parent 'y'"


@pytest.mark.django_db
def test_the_banner_says_since_when_and_why(cast):
    good = compute_shares(now=NOW - timedelta(hours=3))
    assert banner() is None
    break_the_problem(cast)
    fail(NOW - timedelta(hours=2))
    fail(NOW - timedelta(hours=1))

    shown = banner()
    assert shown.since == NOW - timedelta(hours=2)
    assert shown.failures == 2
    assert shown.last_good_at == good.computed_at
    assert shown.why == "dept-x's limit is 40 GPUs, but its teams are guaranteed 50 GPUs."

    request = RequestFactory().get("/")
    request.user = cast.root
    html = Template("{% load share_health %}{% share_health_banner %}").render(
        Context({"request": request})
    )
    assert "Fair shares are out of date" in html
    assert "the last 2 computations failed" in html
    assert "dept-x&#x27;s limit is 40 GPUs, but its teams are guaranteed 50 GPUs." in html
    assert (NOW - timedelta(hours=2)).isoformat() in html  # the <time> of "since"
    assert "Fix the quotas named above" in html  # admins are told what to do


@pytest.mark.django_db
def test_no_banner_while_shares_are_current(cast):
    compute_shares(now=NOW)
    request = RequestFactory().get("/")
    request.user = cast.alice
    html = Template("{% load share_health %}{% share_health_banner %}").render(
        Context({"request": request})
    )
    assert html.strip() == ""


@pytest.mark.django_db
def test_metrics_expose_staleness(cast):
    good = compute_shares(now=NOW - timedelta(hours=3))
    assert gauges() == {
        "fairshare_shares_computed_timestamp_seconds": good.computed_at.timestamp(),
        "fairshare_shares_stale": 0.0,
        "fairshare_share_failures": 0.0,
        "fairshare_shares_last_success_timestamp_seconds": good.computed_at.timestamp(),
    }
    break_the_problem(cast)
    fail(NOW - timedelta(hours=2))
    fail(NOW - timedelta(hours=1))

    values = gauges()
    assert values["fairshare_shares_stale"] == 1.0
    assert values["fairshare_share_failures"] == 2.0
    assert values["fairshare_shares_stale_since_timestamp_seconds"] == (
        (NOW - timedelta(hours=2)).timestamp()
    )
    assert values["fairshare_shares_last_success_timestamp_seconds"] == (
        good.computed_at.timestamp()
    )


@pytest.mark.django_db(transaction=True)
def test_admins_get_one_notification_per_failure_episode(cast):
    compute_shares(now=NOW - timedelta(hours=5))
    quota = break_the_problem(cast)
    for hours in (4, 3, 2):
        fail(NOW - timedelta(hours=hours))

    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["root@example.org"]
    assert "Fair shares are stale" in message.subject
    assert "dept-x's limit is 40 GPUs, but its teams are guaranteed 50 GPUs." in message.body
    # Times people read (UTC stated), and an absolute link to the dashboard.
    assert f"could not be computed at {human_time(NOW - timedelta(hours=4))}:" in message.body
    assert f"(computed {human_time(NOW - timedelta(hours=5))})" in message.body
    assert message.body.rstrip().endswith(absolute_url("/"))
    assert ShareFailure.objects.filter(notified=True).count() == 1

    # Fixed, then broken again: a new episode, one more notification.
    quota.delete()
    compute_shares(now=NOW - timedelta(minutes=90))
    break_the_problem(cast)
    fail(NOW - timedelta(minutes=60))
    fail(NOW - timedelta(minutes=30))

    assert len(mail.outbox) == 2
