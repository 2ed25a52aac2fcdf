"""What the notices say (issue 29): absolute links to a page the recipient may open, times
people read (UTC stated), verbs by what happened, and notices for direct quota sets and
rebalances — to the affected teams' leads, after commit."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.utils import timezone

from quotas import decisions, direct, grants, mailtext, notify
from quotas.lines import LineInput
from quotas.rebalance import rebalance
from tests.base import GPU

pytestmark = pytest.mark.django_db

BASE = "https://fairshare.example.com"
URL = re.compile(r"https?://[^\s>]+")
NEW_YORK = ZoneInfo("America/New_York")
ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


@pytest.fixture(autouse=True)
def base_url(settings):
    settings.FAIRSHARE_BASE_URL = BASE


def submit(cast, guarantee="30", limit="50", **kwargs):
    return decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, guarantee, limit)],
        justification="Sweep.",
        **kwargs,
    )


def links_open_for_their_recipients(client, message) -> list[str]:
    """Every link in ``message`` is absolute under BASE and answers 200 to each recipient."""
    urls = URL.findall(message.body)
    assert urls, message.body
    for url in urls:
        assert url.startswith(f"{BASE}/"), url
        for address in message.to:
            client.force_login(User.objects.get(email=address))
            assert client.get(url.removeprefix(BASE)).status_code == 200, (address, url)
    return urls


# ----------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 12, 6, 14, 5, tzinfo=UTC), "6 Dec 2026, 14:05 UTC"),
        (datetime(2027, 1, 31, 9, 0, tzinfo=ZoneInfo("Europe/Berlin")), "31 Jan 2027, 08:00 UTC"),
        (
            datetime(2026, 7, 1, 23, 30, tzinfo=ZoneInfo("America/New_York")),
            "2 Jul 2026, 03:30 UTC",
        ),
    ],
)
def test_times_read_day_month_year_in_utc(moment, text):
    assert mailtext.human_time(moment) == text


def test_links_are_joined_to_the_site_address_once(settings):
    settings.FAIRSHARE_BASE_URL = "https://fs.example.org/"
    assert mailtext.absolute_url("/requests/5/") == "https://fs.example.org/requests/5/"


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([(Decimal(20), Decimal(30), False), (Decimal(40), Decimal(50), True)], "more"),
        ([(Decimal(20), Decimal(10), False), (Decimal(40), Decimal(40), True)], "less"),
        ([(Decimal(20), Decimal(30), False), (Decimal(40), Decimal(30), True)], "mixed"),
        ([(Decimal(20), Decimal(20), False), (None, None, True)], "same"),
        ([(Decimal(20), Decimal(20), False), (None, Decimal(40), True)], "less"),  # a new ceiling
        ([(Decimal(20), Decimal(20), False), (Decimal(40), None, True)], "more"),  # ceiling lifted
    ],
)
def test_a_change_has_one_direction_where_every_amount_moves_the_same_way(pairs, expected):
    assert notify.direction(pairs) == expected


# ----------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("guarantee", "limit", "asks", "what"),
    [
        ("30", "50", "asks for more quota", "more quota"),
        ("10", "40", "asks for less quota (a cut)", "a cut (less quota)"),
        ("10", "30", "asks for less quota (a cut)", "a cut (less quota)"),
        ("30", "30", "asks to change the quota (some amounts up, some down)", "a quota change"),
    ],
)
def test_a_submission_says_which_way_the_request_goes(
    cast, client, django_capture_on_commit_callbacks, guarantee, limit, asks, what
):
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(cast, guarantee, limit)

    (message,) = mail.outbox
    assert message.to == ["root@example.org"]
    assert what in message.subject
    assert f"alice {asks} for team Team A" in message.body
    if "more" not in asks:
        assert "more quota" not in message.body
    assert f"GPUs: guarantee 20 → {guarantee}" in message.body
    assert mailtext.human_time(req.created) in message.body
    assert links_open_for_their_recipients(client, message) == [f"{BASE}/requests/{req.pk}/"]


def test_a_decision_on_a_cut_says_what_was_decided(
    cast, client, django_capture_on_commit_callbacks
):
    req = submit(cast, "10", "40")
    with django_capture_on_commit_callbacks(execute=True):
        decisions.approve_request(req.pk, approver=cast.root, note="Thanks.")

    (message,) = mail.outbox
    assert message.subject == f"[Fairshare] Quota request #{req.pk} for team-a was approved"
    assert f"root approved request #{req.pk} from team Team A on " in message.body
    assert " UTC: a cut (less quota). It is permanent." in message.body
    assert "GPUs: guarantee 20 → 10, limit 40 (unchanged)" in message.body
    assert "more quota" not in message.body
    assert links_open_for_their_recipients(client, message) == [f"{BASE}/requests/{req.pk}/"]


def test_an_adjusted_approval_says_it_was_approved_with_changes(
    cast, django_capture_on_commit_callbacks
):
    req = submit(cast)
    with django_capture_on_commit_callbacks(execute=True):
        decisions.approve_request(req.pk, approver=cast.root, adjustments={GPU: ("25", "50")})

    (message,) = mail.outbox
    assert message.subject.endswith("was approved with changes")
    assert " UTC, with changes: more quota." in message.body
    assert "guarantee 20 → 25, limit 40 → 50 — asked: guarantee 30, limit 50" in message.body


def test_a_rejection_and_a_withdrawal_say_nothing_changed(cast, django_capture_on_commit_callbacks):
    rejected, withdrawn = submit(cast), submit(cast, "10", "40")
    with django_capture_on_commit_callbacks(execute=True):
        decisions.reject_request(rejected.pk, approver=cast.root, note="Not now.")
        decisions.withdraw_request(withdrawn.pk, actor=cast.alice)

    no, back = mail.outbox
    assert no.subject.endswith("was rejected")
    assert f"root rejected request #{rejected.pk} from team Team A on " in no.body
    assert " UTC: more quota. The team's quota stays as it was." in no.body
    assert "Note: Not now." in no.body
    assert back.subject.endswith("was withdrawn")
    assert f"alice withdrew request #{withdrawn.pk} from team Team A on " in back.body
    assert " UTC: a cut (less quota). Nothing changed." in back.body


def test_a_scheduled_grant_says_when_it_starts_and_ends_in_utc(
    cast, django_capture_on_commit_callbacks
):
    now = timezone.now()
    start, end = now + timedelta(days=1), now + timedelta(days=3)
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(cast, window_start=start, window_end=end, now=now)
        decisions.approve_request(req.pk, approver=cast.root, now=now)

    submitted, approved = mail.outbox
    for message in (submitted, approved):
        assert not ISO.search(message.body), message.body
    assert f"from {mailtext.human_time(start)} to {mailtext.human_time(end)}" in submitted.body
    assert (
        f"It takes effect on {mailtext.human_time(start)} and ends on "
        f"{mailtext.human_time(end)}" in approved.body
    )
    assert approved.body.count(" UTC") >= 3  # decided, start, end


def test_expiry_and_reminders_give_human_times(cast, django_capture_on_commit_callbacks):
    now = timezone.now()
    end = now + timedelta(days=1)
    req = submit(cast, window_end=end, now=now)
    decisions.approve_request(req.pk, approver=cast.root, now=now)
    with django_capture_on_commit_callbacks(execute=True):
        grants.remind_ending_grants(now=now, days=2)
        grants.expire_temporary_quota(now=end + timedelta(minutes=1))

    soon, expired = mail.outbox
    assert f"ends on {mailtext.human_time(end)}" in soon.body
    assert f"ended on {mailtext.human_time(end)}" in expired.body
    assert not ISO.search(soon.body + expired.body)


# ----------------------------------------------------------------------------- direct sets


def test_a_direct_set_tells_the_teams_leads_from_and_to_after_commit(
    cast, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        direct.set_team_quota(
            cast.team_a, GPU, guarantee="10", limit="40", actor=cast.root, note="Rebudget."
        )
    assert mail.outbox == []  # not before commit
    for callback in callbacks:
        callback()

    (message,) = mail.outbox
    assert message.to == ["alice@example.org"]  # team-a's lead, nobody else's
    assert message.subject == "[Fairshare] Quota of team-a cut by root"
    assert "root cut the quota of team Team A directly (not through a request) on " in message.body
    assert "GPUs: guarantee 20 → 10, limit 40 (unchanged)" in message.body
    assert "Note: Rebudget." in message.body
    assert " UTC:" in message.body and not ISO.search(message.body)
    assert links_open_for_their_recipients(client, message) == [f"{BASE}/teams/team-a/"]


@pytest.mark.parametrize(
    ("guarantee", "limit", "verb"),
    [("30", "50", "raised"), ("30", "30", "changed"), ("20", None, "raised")],
)
def test_a_direct_set_is_worded_by_its_direction(
    cast, django_capture_on_commit_callbacks, guarantee, limit, verb
):
    with django_capture_on_commit_callbacks(execute=True):
        direct.set_team_quotas(cast.team_a, [LineInput(GPU, guarantee, limit)], actor=cast.root)

    (message,) = mail.outbox
    assert message.subject == f"[Fairshare] Quota of team-a {verb} by root"


def test_a_direct_set_that_changes_nothing_sends_nothing(cast, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        direct.set_team_quota(
            cast.team_a, GPU, guarantee=Decimal(20), limit=Decimal(40), actor=cast.root
        )

    assert mail.outbox == []


# ----------------------------------------------------------------------------- rebalances


def test_a_rebalance_tells_each_changed_teams_leads_what_changed_for_them(
    cast, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        rebalance(
            {
                "team-a": {"guarantee": {GPU: "10"}},
                "team-b": {"guarantee": {GPU: "40"}, "weight": 5},
                "dept-x": {"weight": 2},  # unchanged: its lead hears nothing
            },
            actor=cast.root,
            note="Q1 plan.",
        )

    # One notice per changed team (no per-quota "set" notices besides), to that team's leads.
    by_recipient = {tuple(m.to): m for m in mail.outbox}
    assert sorted(by_recipient) == [("alice@example.org",), ("charlie@example.org",)]
    a, b = by_recipient[("alice@example.org",)], by_recipient[("charlie@example.org",)]
    assert a.subject == "[Fairshare] Quota of team-a changed by a rebalance"
    assert "root rebalanced the teams' quotas on " in a.body and " UTC. For team Team A:" in a.body
    assert "GPUs: guarantee 20 → 10, limit 40 (unchanged)" in a.body
    assert "team-b" not in a.body and "Team B" not in a.body
    assert "GPUs: guarantee 30 → 40, limit 60 (unchanged)" in b.body
    assert "weight: 3 → 5" in b.body
    assert "Note: Q1 plan." in b.body
    assert links_open_for_their_recipients(client, a) == [f"{BASE}/teams/team-a/"]
    assert links_open_for_their_recipients(client, b) == [f"{BASE}/teams/team-b/"]


def test_a_refused_rebalance_sends_nothing(cast, django_capture_on_commit_callbacks):
    from django.core.exceptions import ValidationError

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ValidationError):
        rebalance({"team-a": {"guarantee": {GPU: "10"}}, "team-b": {"weight": 0}}, actor=cast.root)

    assert mail.outbox == []
