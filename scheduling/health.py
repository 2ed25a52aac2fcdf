"""Stale fair shares in plain words: the banner that the dashboard, team pages and approval queue
show, and the one notification admins get per failure episode.

An *episode* runs from the first failed share computation after the latest successful one to the
next success (``share_health`` below). ``share_failed`` is called by
``compute_shares`` for every failure; only the episode's first failure notifies (its
``ShareFailure.notified`` is set), so a computation retried every minute sends one email, not
sixty. Delivery is after commit and best effort (logged, never raised), as quota notifications.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from quotas.mailtext import absolute_url, human_time
from quotas.quantities import amount_words
from scheduling.models import ShareComputation, ShareFailure

__all__ = [
    "Banner",
    "ShareHealth",
    "banner",
    "explain_share_error",
    "prune_share_failures",
    "share_failed",
    "share_health",
]

logger = logging.getLogger(__name__)

# The solver's messages (scheduling.domain.fairness) that quotas can cause.
_CHILDREN_OVER_LIMIT = re.compile(
    r"tenant '(?P<team>[^']+)': its children's guarantees of '(?P<resource>[^']+)' "
    r"\((?P<total>[^)]+)\) exceed its limit \((?P<limit>[^)]+)\)"
)
_GUARANTEE_OVER_LIMIT = re.compile(
    r"tenant '(?P<team>[^']+)': guarantee\['(?P<resource>[^']+)'\] \((?P<total>[^)]+)\) "
    r"exceeds limit\['[^']+'\] \((?P<limit>[^)]+)\)"
)
_OVER_CAPACITY = re.compile(
    r"guarantee\['(?P<resource>[^']+)'\]: sum of guarantees \((?P<total>[^)]+)\) exceeds "
    r"capacity \((?P<limit>[^)]+)\)"
)


def _words(text: str, resource: str) -> str:
    try:
        return amount_words(Decimal(text), resource)
    except (InvalidOperation, ValueError):
        return f"{text} {resource}"


def explain_share_error(error: str) -> str:
    """The solver's message as people say it, e.g. ``tenant 'ai-research': its children's
    guarantees of 'nvidia.com/gpu' (664) exceed its limit (208)`` → ``ai-research's limit is
    208 GPUs, but its teams are guaranteed 664 GPUs.``. Other messages keep their text, with
    "team" for the solver's "tenant"."""
    if m := _CHILDREN_OVER_LIMIT.search(error):
        r = m["resource"]
        return (
            f"{m['team']}'s limit is {_words(m['limit'], r)}, but its teams are guaranteed "
            f"{_words(m['total'], r)}."
        )
    if m := _GUARANTEE_OVER_LIMIT.search(error):
        r = m["resource"]
        return (
            f"{m['team']} is guaranteed {_words(m['total'], r)}, more than its limit of "
            f"{_words(m['limit'], r)}."
        )
    if m := _OVER_CAPACITY.search(error):
        r = m["resource"]
        return (
            f"The teams are guaranteed {_words(m['total'], r)} in total, more than the "
            f"cluster's {_words(m['limit'], r)}."
        )
    return re.sub(r"\btenant\b", "team", error)


@dataclass(frozen=True)
class Banner:
    """What the stale-shares banner says (None from ``banner`` while shares are current)."""

    since: datetime
    why: str
    failures: int
    last_good_at: datetime | None


def banner(health=None) -> Banner | None:
    """The banner for ``health`` (default: ``share_health()``, two queries), or None."""
    if health is None:
        health = share_health()
    if not health.stale:
        return None
    return Banner(
        since=health.since,
        why=explain_share_error(health.error),
        failures=health.failures,
        last_good_at=health.last_good.computed_at if health.last_good else None,
    )


def _admin_emails() -> list[str]:
    users = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name=settings.ADMINS_GROUP))
    )
    return sorted({email for email in users.values_list("email", flat=True) if email})


def share_failed(failure) -> bool:
    """Notify the admins if ``failure`` (a saved ShareFailure) opens a stale episode; return
    whether it did. Marks the failure ``notified`` so later failures of the episode stay quiet."""
    last_good = ShareComputation.objects.order_by("-computed_at", "-id").first()
    episode = ShareFailure.objects.exclude(pk=failure.pk)
    if last_good is not None:
        episode = episode.filter(failed_at__gte=last_good.computed_at)
    if episode.filter(notified=True).exists():
        return False
    ShareFailure.objects.filter(pk=failure.pk).update(notified=True)
    why = explain_share_error(failure.error)
    since = human_time(failure.failed_at)
    last = human_time(last_good.computed_at) if last_good else "never"
    subject = "[Fairshare] Fair shares are stale: the computation failed"
    body = (
        f"Fair shares could not be computed at {since}: {why}\n\n"
        f"The dashboard and the Volcano Queues keep the last good shares (computed {last}) "
        "until a computation succeeds. Fix the quotas named above; you get this message once "
        "per failure episode, not for every retry.\n\n"
        f"Solver message: {failure.error}"
    )
    body += f"\n\n{absolute_url(reverse('home'))}"

    def send() -> None:
        from quotas.webhook import post_webhook

        try:
            recipients = _admin_emails()
            if recipients:
                send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)
            post_webhook(f"*{subject.removeprefix('[Fairshare] ')}*\n{why}")
        except Exception:  # a notification must never fail the computation's caller
            logger.exception("share failure notification failed")

    transaction.on_commit(send)
    return True


@dataclass(frozen=True)
class ShareHealth:
    """Whether the latest fair shares are current.

    ``stale``: a computation failed after the latest successful one; ``since``: the first such
    failure; ``error``: the latest failure's message; ``failures``: how many failed since the last
    success; ``last_good``: the latest successful computation (None before the first).
    """

    stale: bool
    since: datetime | None = None
    error: str = ""
    failures: int = 0
    last_good: ShareComputation | None = None
    latest_failure_id: int | None = None


def share_health() -> ShareHealth:
    """The share status that the dashboard banner, /metrics and the sync's stale flag read.

    Two queries."""
    last_good = ShareComputation.objects.order_by("-computed_at", "-id").first()
    failures = ShareFailure.objects.order_by("-failed_at", "-id")
    if last_good is not None:
        failures = failures.filter(failed_at__gte=last_good.computed_at)
    rows = list(failures.values("id", "failed_at", "error")[:1000])
    if not rows:
        return ShareHealth(stale=False, last_good=last_good)
    return ShareHealth(
        stale=True,
        since=rows[-1]["failed_at"],
        error=rows[0]["error"],
        failures=len(rows),
        last_good=last_good,
        latest_failure_id=rows[0]["id"],
    )


def prune_share_failures(*, keep_days: int = 30, now: datetime | None = None) -> int:
    """Delete failures older than ``keep_days``, except those of the current stale episode."""
    if keep_days < 0:
        raise ValueError("keep_days must be >= 0")
    cutoff = (now or timezone.now()) - timedelta(days=keep_days)
    last_good = ShareComputation.objects.order_by("-computed_at", "-id").first()
    if last_good is None:  # never computed: every failure is the current episode
        return 0
    old = ShareFailure.objects.filter(failed_at__lt=min(cutoff, last_good.computed_at))
    deleted, _ = old.delete()
    return deleted
