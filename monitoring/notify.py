"""Notifications for monitoring alerts: email to a team's leads, plus an optional webhook.

The webhook (``FAIRSHARE_WEBHOOK_URL``) receives a Slack-compatible JSON body ``{"text": ...}``
(Slack, Mattermost and Rocket.Chat incoming webhooks all accept it). Delivery is best effort:
a failing mail server or webhook is logged with the team and subject and never raised, so an
outage of the notification channel cannot fail the detection job that found the problem (the
alert row is written either way and shows on /metrics).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import send_mail

from quotas.choices import MembershipRole
from quotas.models import Membership, Team
from quotas.webhook import post_webhook

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """What a notification reached: the email recipients and whether the webhook took it."""

    recipients: tuple[str, ...]
    emailed: bool
    webhook: bool


def lead_emails(team: Team) -> list[str]:
    """Return the sorted email addresses of the team's active leads (empty ones skipped)."""
    emails = Membership.objects.filter(
        team=team, role=MembershipRole.LEAD, user__is_active=True
    ).values_list("user__email", flat=True)
    return sorted({email for email in emails if email})


def notify_team(team: Team, *, subject: str, body: str) -> Delivery:
    """Email ``subject``/``body`` to the team's leads and post it to the webhook, if configured.

    Returns what was delivered; errors are logged, not raised. A team without leads (or
    without lead emails) gets only the webhook post, and a warning in the log.
    """
    recipients = lead_emails(team)
    emailed = False
    if recipients:
        try:
            send_mail(
                f"[Fairshare] {subject}",
                body,
                settings.DEFAULT_FROM_EMAIL,
                recipients,
                fail_silently=False,
            )
            emailed = True
        except (OSError, ValueError) as e:
            # smtplib errors are OSErrors; a malformed header is a ValueError.
            logger.error("cannot email the leads of %s about %r: %s", team.slug, subject, e)
    else:
        logger.warning("team %s has no lead with an email; %r not emailed", team.slug, subject)
    webhook = post_webhook(f"*{subject}* (team {team.slug})\n{body}")
    return Delivery(recipients=tuple(recipients), emailed=emailed, webhook=webhook)
