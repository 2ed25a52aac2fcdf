"""Notifications about quotas: by email and, optionally, to a Slack-compatible webhook.

* a request submitted → the site admins (the approvers), so someone looks at the queue;
* approved (with changes) / rejected / withdrawn → the requester and the team's leads;
* a temporary grant expired, ended early or ending soon → the requester and the team's leads;
* an admin set a team's quota directly → the team's leads (``quota_set``);
* a rebalance → the leads of each team whose quota, weight or tier changed (``rebalanced``).

Worded by what happened: a request that lowers quota asks for "less quota (a cut)", a direct
set says "raised", "cut" or "changed"; amounts read ``from → to``. Every message links to the
page it is about under ``FAIRSHARE_BASE_URL`` and gives times as ``6 Dec 2026, 14:05 UTC``
(``quotas.mailtext``). The services send these (so the UI, the REST API, the admin and the
commands notify alike).

Delivery is best effort and happens after the transaction commits: a failing mail server or
webhook is logged and never raised, so it cannot undo or fail the decision that was made. The
webhook body is ``{"text": ...}`` (``quotas.webhook.post_webhook``, shared with the
alerts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.urls import reverse

from quotas import mailtext
from quotas.choices import MembershipRole, QuotaRequestStatus
from quotas.models import Membership, QuotaRequest, Team
from quotas.webhook import post_webhook

__all__ = [
    "direction",
    "grant_ending_soon",
    "quota_set",
    "rebalanced",
    "request_decided",
    "request_direction",
    "request_ended_early",
    "request_expired",
    "request_submitted",
]

logger = logging.getLogger(__name__)


def _admin_emails() -> list[str]:
    users = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name=settings.ADMINS_GROUP))
    )
    return sorted({email for email in users.values_list("email", flat=True) if email})


def _team_emails(request: QuotaRequest) -> list[str]:
    leads = Membership.objects.filter(
        team_id=request.team_id, role=MembershipRole.LEAD, user__is_active=True
    ).values_list("user__email", flat=True)
    emails = set(leads)
    if request.requester.is_active:
        emails.add(request.requester.email)
    return sorted(email for email in emails if email)


def _lead_emails(team_id: int) -> list[str]:
    leads = Membership.objects.filter(
        team_id=team_id, role=MembershipRole.LEAD, user__is_active=True
    ).values_list("user__email", flat=True)
    return sorted({email for email in leads if email})


def _who(user) -> str:
    return user.get_username() if user is not None else "someone"


def _at_most(a: Decimal | None, b: Decimal | None) -> bool:
    """a ≤ b for amounts where None is "no limit" (above every number)."""
    if b is None:
        return True
    return a is not None and a <= b


def direction(pairs: Iterable[tuple[Decimal | None, Decimal | None, bool]]) -> str:
    """Which way amounts move: ``more``, ``less`` (a cut), ``mixed`` or ``same``.

    ``pairs`` are (before, after, is_limit); an absent limit (None) is above every amount.
    """
    up = down = False
    for before, after, _is_limit in pairs:
        if before == after:
            continue
        if _at_most(before, after):
            up = True
        else:
            down = True
    if up and down:
        return "mixed"
    return "more" if up else "less" if down else "same"


# What a request (or a change) asks for, by direction: the submission's verb phrase and a noun
# phrase for subjects and decisions.
_ASKS = {
    "more": "asks for more quota",
    "less": "asks for less quota (a cut)",
    "mixed": "asks to change the quota (some amounts up, some down)",
    "same": "asks to keep the quota as it is",
}
_WHAT = {
    "more": "more quota",
    "less": "a cut (less quota)",
    "mixed": "a quota change (some amounts up, some down)",
    "same": "no change",
}


def _request_pairs(request: QuotaRequest, *, approved: bool = False):
    for line in request.lines.all():
        g, lim = line.guarantee, line.limit
        if approved and line.approved_guarantee is not None:
            g, lim = line.approved_guarantee, line.approved_limit
        yield line.previous_guarantee, g, False
        yield line.previous_limit, lim, True


def request_direction(request: QuotaRequest, *, approved: bool = False) -> str:
    """``more``, ``less``, ``mixed`` or ``same``: the requested (or approved) amounts against
    the quota they replace."""
    return direction(_request_pairs(request, approved=approved))


def _lines(request: QuotaRequest, *, approved: bool = False) -> str:
    """One line per resource: ``GPUs: guarantee 20 → 30, limit 40 → 50`` — the approved amounts
    where ``approved`` (with what was asked where the approver changed it)."""
    rows = []
    for line in request.lines.all():
        res = line.resource
        g, lim = line.guarantee, line.limit
        asked = ""
        if approved and line.approved_guarantee is not None:
            g, lim = line.approved_guarantee, line.approved_limit
            if (g, lim) != (line.guarantee, line.limit):
                asked = (
                    f" — asked: guarantee {mailtext.amount(line.guarantee, res)}, "
                    f"limit {mailtext.amount(line.limit, res, limit=True)}"
                )
        rows.append(
            f"  {mailtext.resource_name(res)}: "
            f"guarantee {mailtext.change(line.previous_guarantee, g, res)}, "
            f"limit {mailtext.change(line.previous_limit, lim, res, limit=True)}{asked}"
        )
    return "\n".join(rows)


def _adjusted(request: QuotaRequest) -> bool:
    return any(
        line.approved_guarantee is not None
        and (line.approved_guarantee, line.approved_limit) != (line.guarantee, line.limit)
        for line in request.lines.all()
    )


def _window(request: QuotaRequest) -> str:
    if not request.window_end:
        return "permanent"
    start = mailtext.human_time(request.window_start) if request.window_start else "now"
    return f"temporary, from {start} to {mailtext.human_time(request.window_end)}"


def _deliver(subject: str, body: str, recipients: Iterable[str], *, url: str = "") -> None:
    recipients = list(recipients)
    if recipients:
        try:
            send_mail(
                f"[Fairshare] {subject}",
                body + (f"\n\n{url}" if url else ""),
                settings.DEFAULT_FROM_EMAIL,
                recipients,
            )
        except (OSError, ValueError) as e:
            # smtplib errors are OSErrors; a malformed header is a ValueError.
            logger.error("cannot email %r to %d recipient(s): %s", subject, len(recipients), e)
    post_webhook(f"*{subject}*\n{body}" + (f"\n<{url}>" if url else ""))


def _after_commit(send) -> None:
    """Run ``send`` after commit, logging (never raising) whatever goes wrong."""

    def guarded() -> None:
        try:
            send()
        except Exception:  # a notification must never fail the request that triggered it
            logger.exception("quota request notification failed")

    transaction.on_commit(guarded)


def _url(request: QuotaRequest) -> str:
    return mailtext.absolute_url(reverse("portal:quotarequest", args=[request.pk]))


def _team_url(slug: str) -> str:
    return mailtext.absolute_url(reverse("portal:team", args=[slug]))


def request_submitted(request: QuotaRequest, *, url: str = "") -> None:
    """Tell the approvers that ``request`` waits for a decision (after commit)."""
    url = url or _url(request)

    def send() -> None:
        which = request_direction(request)
        subject = (
            f"Quota request #{request.pk} from {request.team.slug} awaits approval: {_WHAT[which]}"
        )
        body = (
            f"{request.requester.get_username()} {_ASKS[which]} for team {request.team.name} "
            f"({_window(request)}), on {mailtext.human_time(request.created)}:\n"
            f"{_lines(request)}\n\nJustification:\n{request.justification}"
        )
        _deliver(subject, body, _admin_emails(), url=url)

    _after_commit(send)


def _decision(request: QuotaRequest, who: str) -> tuple[str, str]:
    """(subject verb, first sentence) for a decided request, worded by what happened."""
    at = mailtext.human_time(request.decided_at)
    if request.status == QuotaRequestStatus.REJECTED:
        what = _WHAT[request_direction(request)]
        return "was rejected", (
            f"{who} rejected request #{request.pk} from team {request.team.name} on {at}: "
            f"{what}. The team's quota stays as it was. It asked for ({_window(request)}):\n"
            f"{_lines(request)}"
        )
    if request.status == QuotaRequestStatus.WITHDRAWN:
        what = _WHAT[request_direction(request)]
        return "was withdrawn", (
            f"{who} withdrew request #{request.pk} from team {request.team.name} on {at}: "
            f"{what}. Nothing changed. It asked for ({_window(request)}):\n{_lines(request)}"
        )
    what = _WHAT[request_direction(request, approved=True)]
    adjusted = _adjusted(request)
    verb = "was approved with changes" if adjusted else "was approved"
    if (
        request.status == QuotaRequestStatus.APPROVED
        and request.window_start
        and (request.decided_at is None or request.window_start > request.decided_at)
    ):
        when = (
            f"It takes effect on {mailtext.human_time(request.window_start)} and ends on "
            f"{mailtext.human_time(request.window_end)}, when the quota goes back by what it "
            "added."
        )
    elif request.window_end:
        when = (
            f"It is temporary: it ends on {mailtext.human_time(request.window_end)}, when the "
            "quota goes back by what it added."
        )
    else:
        when = "It is permanent."
    return verb, (
        f"{who} approved request #{request.pk} from team {request.team.name} on {at}"
        f"{', with changes' if adjusted else ''}: {what}. {when}\n"
        f"{_lines(request, approved=True)}"
    )


def request_decided(request: QuotaRequest, *, actor=None, url: str = "") -> None:
    """Tell the requester and the team's leads what happened to ``request`` (after commit):
    approved (with changes, where the approver adjusted amounts), rejected or withdrawn."""
    url = url or _url(request)

    def send() -> None:
        verb, body = _decision(request, _who(request.decided_by or actor))
        subject = f"Quota request #{request.pk} for {request.team.slug} {verb}"
        if request.decision_note:
            body += f"\n\nNote: {request.decision_note}"
        _deliver(subject, body, _team_emails(request), url=url)

    _after_commit(send)


def request_expired(request: QuotaRequest) -> None:
    """Tell the requester and the team's leads that a temporary grant ended (after commit)."""
    url = _url(request)

    def send() -> None:
        subject = f"Temporary quota #{request.pk} for {request.team.slug} expired"
        body = (
            f"The temporary grant of request #{request.pk} ended on "
            f"{mailtext.human_time(request.window_end)}; the team's quota went back by what it "
            f"added. The grant was:\n{_lines(request, approved=True)}"
        )
        _deliver(subject, body, _team_emails(request), url=url)

    _after_commit(send)


def request_ended_early(request: QuotaRequest, *, actor=None) -> None:
    """Tell the requester and the team's leads that a temporary grant was ended before its
    window closed (after commit)."""
    url = _url(request)

    def send() -> None:
        subject = f"Temporary quota #{request.pk} for {request.team.slug} ended early"
        body = (
            f"{_who(actor)} ended the temporary grant of request #{request.pk} "
            f"({_window(request)}) on {mailtext.human_time(request.expired_at)}; the team's "
            f"quota went back by what it added. The grant was:\n"
            f"{_lines(request, approved=True)}"
        )
        _deliver(subject, body, _team_emails(request), url=url)

    _after_commit(send)


def grant_ending_soon(request: QuotaRequest) -> None:
    """Remind the requester and the team's leads that a temporary grant ends soon, and how
    to keep the quota (after commit)."""
    url = _url(request)

    def send() -> None:
        subject = f"Temporary quota #{request.pk} for {request.team.slug} ends soon"
        body = (
            f"The temporary grant of request #{request.pk} for team {request.team.name} ends on "
            f"{mailtext.human_time(request.window_end)}; the team's quota then goes back by "
            f"what it added. The grant is:\n{_lines(request, approved=True)}\n\n"
            "To keep it, request the quota again from the team's page before then."
        )
        _deliver(subject, body, _team_emails(request), url=url)

    _after_commit(send)


Amounts = tuple[Decimal, Decimal | None]


def _quota_rows(changes: Mapping[str, tuple[Amounts | None, Amounts]]) -> list[str]:
    rows = []
    for res, (before, after) in sorted(changes.items()):
        g0, l0 = before if before is not None else (Decimal(0), None)
        g1, l1 = after
        rows.append(
            f"  {mailtext.resource_name(res)}: guarantee {mailtext.change(g0, g1, res)}, "
            f"limit {mailtext.change(l0, l1, res, limit=True)}"
        )
    return rows


def _quota_direction(changes: Mapping[str, tuple[Amounts | None, Amounts]]) -> str:
    pairs = []
    for before, after in changes.values():
        g0, l0 = before if before is not None else (Decimal(0), None)
        pairs += [(g0, after[0], False), (l0, after[1], True)]
    return direction(pairs)


_SET_VERB = {"more": "raised", "less": "cut", "mixed": "changed"}


def quota_set(
    team: Team,
    changes: Mapping[str, tuple[Amounts | None, Amounts]],
    *,
    actor,
    note: str = "",
    at: datetime,
) -> None:
    """Tell ``team``'s leads that an admin set its quota directly (not through a request),
    after commit: ``changes`` is {resource: ((guarantee, limit) before or None, after)}.

    Nothing is sent when no amount changed.
    """
    changes = {res: pair for res, pair in changes.items() if pair[0] != pair[1]}
    which = _quota_direction(changes)
    if which == "same":
        return
    url = _team_url(team.slug)

    def send() -> None:
        verb = _SET_VERB[which]
        subject = f"Quota of {team.slug} {verb} by {_who(actor)}"
        body = (
            f"{_who(actor)} {verb} the quota of team {team.name} directly (not through a "
            f"request) on {mailtext.human_time(at)}:\n" + "\n".join(_quota_rows(changes))
        )
        if note:
            body += f"\n\nNote: {note}"
        _deliver(subject, body, _lead_emails(team.pk), url=url)

    _after_commit(send)


def rebalanced(
    team: Team,
    changes: Mapping[str, tuple[Amounts | None, Amounts]],
    *,
    settings_changed: Mapping[str, tuple[str, str]] | None = None,
    actor,
    note: str = "",
    at: datetime,
) -> None:
    """Tell ``team``'s leads what a rebalance changed for it (after commit): its quotas
    (``changes`` as in ``quota_set``) and ``settings_changed`` {"weight" | "tier": (from, to)}.

    Nothing is sent when nothing of the team's changed.
    """
    changes = {res: pair for res, pair in changes.items() if pair[0] != pair[1]}
    settings_changed = {
        k: pair for k, pair in (settings_changed or {}).items() if pair[0] != pair[1]
    }
    if not changes and not settings_changed:
        return
    url = _team_url(team.slug)

    def send() -> None:
        subject = f"Quota of {team.slug} changed by a rebalance"
        rows = _quota_rows(changes)
        rows += [f"  {key}: {old} → {new}" for key, (old, new) in sorted(settings_changed.items())]
        body = (
            f"{_who(actor)} rebalanced the teams' quotas on {mailtext.human_time(at)}. "
            f"For team {team.name}:\n" + "\n".join(rows)
        )
        if note:
            body += f"\n\nNote: {note}"
        _deliver(subject, body, _lead_emails(team.pk), url=url)

    _after_commit(send)
