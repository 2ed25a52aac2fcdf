"""Notifications about quota requests: by email and, optionally, to a Slack-compatible webhook.

* submitted → the site admins (the approvers), so someone looks at the queue;
* approved / rejected / withdrawn → the requester and the team's leads;
* a temporary grant expired → the requester and the team's leads.

The services send these (so the UI and the REST API notify alike); links use
``FAIRSHARE_BASE_URL``.

Delivery is best effort and happens after the transaction commits: a failing mail server or
webhook is logged and never raised, so it cannot undo or fail the decision that was made. The
webhook body is ``{"text": ...}`` (``quotas.webhook.post_webhook``, shared with the
alerts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.urls import reverse

from quotas.choices import MembershipRole, QuotaRequestStatus
from quotas.models import Membership, QuotaRequest
from quotas.quantities import format_quantity
from quotas.webhook import post_webhook

__all__ = [
    "grant_ending_soon",
    "request_decided",
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


def _lines(request: QuotaRequest) -> str:
    def amount(value, resource):
        return "no limit" if value is None else format_quantity(value, resource)

    rows = []
    for line in request.lines.all():
        granted = ""
        if line.approved_guarantee is not None:
            granted = (
                f" (approved: {amount(line.approved_guarantee, line.resource)} / "
                f"{amount(line.approved_limit, line.resource)})"
            )
        rows.append(
            f"  {line.resource}: guarantee {amount(line.guarantee, line.resource)}, "
            f"limit {amount(line.limit, line.resource)}{granted}"
        )
    return "\n".join(rows)


def _window(request: QuotaRequest) -> str:
    if not request.window_end:
        return "permanent"
    start = request.window_start.isoformat(timespec="minutes") if request.window_start else "now"
    return f"temporary, {start} to {request.window_end.isoformat(timespec='minutes')}"


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
    base = getattr(settings, "FAIRSHARE_BASE_URL", "").rstrip("/")
    return f"{base}{reverse('portal:quotarequest', args=[request.pk])}" if base else ""


def request_submitted(request: QuotaRequest, *, url: str = "") -> None:
    """Tell the approvers that ``request`` waits for a decision (after commit)."""
    url = url or _url(request)

    def send() -> None:
        subject = f"Quota request #{request.pk} from {request.team.slug} awaits approval"
        body = (
            f"{request.requester.get_username()} asks for more quota for team "
            f"{request.team.name} ({_window(request)}):\n{_lines(request)}\n\n"
            f"Justification:\n{request.justification}"
        )
        _deliver(subject, body, _admin_emails(), url=url)

    _after_commit(send)


def request_decided(request: QuotaRequest, *, actor=None, url: str = "") -> None:
    """Tell the requester and the team's leads what happened to ``request`` (after commit)."""
    url = url or _url(request)

    def send() -> None:
        verb = {
            QuotaRequestStatus.REJECTED: "was rejected",
            QuotaRequestStatus.WITHDRAWN: "was withdrawn",
        }.get(request.status, "was approved")
        by = request.decided_by or actor
        who = by.get_username() if by is not None else "someone"
        subject = f"Quota request #{request.pk} for {request.team.slug} {verb}"
        body = f"Request #{request.pk} {verb} by {who} ({_window(request)}):\n{_lines(request)}"
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
            f"The temporary grant of request #{request.pk} ended at "
            f"{request.window_end.isoformat(timespec='minutes')}; the team's quota went back "
            f"by what it added:\n{_lines(request)}"
        )
        _deliver(subject, body, _team_emails(request), url=url)

    _after_commit(send)


def request_ended_early(request: QuotaRequest, *, actor=None) -> None:
    """Tell the requester and the team's leads that a temporary grant was ended before its
    window closed (after commit)."""
    url = _url(request)

    def send() -> None:
        who = actor.get_username() if actor is not None else "someone"
        subject = f"Temporary quota #{request.pk} for {request.team.slug} ended early"
        body = (
            f"{who} ended the temporary grant of request #{request.pk} ({_window(request)}) "
            f"at {request.expired_at.isoformat(timespec='minutes')}; the team's quota went "
            f"back by what it added:\n{_lines(request)}"
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
            f"The temporary grant of request #{request.pk} for team {request.team.name} ends at "
            f"{request.window_end.isoformat(timespec='minutes')}; the team's quota then goes "
            f"back by what it added:\n{_lines(request)}\n\n"
            "To keep it, request the quota again from the team's page before then."
        )
        _deliver(subject, body, _team_emails(request), url=url)

    _after_commit(send)
