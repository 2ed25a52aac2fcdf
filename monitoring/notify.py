"""Notifications for monitoring alerts: email to a team's leads, plus an optional webhook.

The webhook (``FAIRSHARE_WEBHOOK_URL``) receives a Slack-compatible JSON body ``{"text": ...}``
(Slack, Mattermost and Rocket.Chat incoming webhooks all accept it). Delivery is best effort:
a failing mail server or webhook is logged with the team and subject and never raised, so an
outage of the notification channel cannot fail the detection job that found the problem (the
alert row is written either way and shows on /metrics).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException

from django.conf import settings
from django.core.mail import send_mail

from quotas.choices import MembershipRole
from quotas.models import Membership, Team

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 5.0


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


def post_webhook(text: str, *, url: str | None = None) -> bool:
    """POST ``{"text": text}`` to ``url`` (default ``FAIRSHARE_WEBHOOK_URL``).

    Return True when the webhook answered 2xx, False when none is configured or it failed
    (logged; the URL is not logged since it usually embeds a secret).
    """
    url = url if url is not None else getattr(settings, "FAIRSHARE_WEBHOOK_URL", "")
    if not url:
        return False
    if not url.startswith(("https://", "http://")):
        logger.error("FAIRSHARE_WEBHOOK_URL must be an http(s) URL; notification not sent")
        return False
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "fairshare"},
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:
            response.read()
    except urllib.error.HTTPError as e:
        logger.error("webhook answered HTTP %s; notification not delivered", e.code)
        return False
    except (urllib.error.URLError, HTTPException, OSError) as e:
        logger.error("webhook unreachable (%s); notification not delivered", e)
        return False
    return True
