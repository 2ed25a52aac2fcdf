"""What notification texts share: links people can click and times people can read.

* ``absolute_url(path)``: ``FAIRSHARE_BASE_URL`` (the address people open Fairshare at; default
  ``http://127.0.0.1:8000``) joined with a path from ``reverse()``, so a link in an email or a
  webhook message opens the page it is about.
* ``human_time(moment)``: ``6 Dec 2026, 14:05 UTC``. Users have no time zone of their own, so
  every notification states UTC rather than guessing; the month is spelled out in English
  whatever the server's locale.
* ``amount`` / ``change``: amounts as the pages show them (``64Gi``, ``no limit``) and a
  change as ``20 → 30``.

Used by ``quotas.notify`` (request notices, direct quota sets, rebalances); the budget and
share alerts may use them too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from quotas.templatetags.fairshare import quantity, resource_label

__all__ = ["absolute_url", "amount", "change", "human_time", "resource_name"]

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def absolute_url(path: str) -> str:
    """``path`` (``/requests/5/``) under ``FAIRSHARE_BASE_URL``: ``http://host/requests/5/``."""
    base = str(getattr(settings, "FAIRSHARE_BASE_URL", "") or "").rstrip("/")
    return f"{base}/{path.lstrip('/')}"


def human_time(moment: datetime | None) -> str:
    """``6 Dec 2026, 14:05 UTC`` (aware times converted to UTC; naive ones taken as UTC)."""
    if moment is None:
        return "now"
    if timezone.is_aware(moment):
        moment = moment.astimezone(UTC)
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}, {moment:%H:%M} UTC"


def resource_name(resource: str) -> str:
    """``nvidia.com/gpu`` → ``GPUs``, ``cpu`` → ``CPU cores``; others as they are."""
    return resource_label(resource)


def amount(value: Decimal | None, resource: str, *, limit: bool = False) -> str:
    """An amount as the pages show it; an absent limit reads ``no limit``."""
    if value is None:
        return "no limit" if limit else "0"
    return quantity(value, resource)


def change(
    before: Decimal | None, after: Decimal | None, resource: str, *, limit: bool = False
) -> str:
    """``20 → 30``, or just ``30 (unchanged)`` when it stayed."""
    if before == after:
        return f"{amount(after, resource, limit=limit)} (unchanged)"
    return f"{amount(before, resource, limit=limit)} → {amount(after, resource, limit=limit)}"
