"""A team's fair-share history: fair allocation, usage and decayed usage over the last days.

Share computations run every few minutes and are kept for 30 days
(``services.prune_share_history``), so a month holds thousands of snapshots per team. The history
keeps one point per hour, the hour's last snapshot of the team, chosen in the database (a
``ROW_NUMBER()`` window over the UTC hour, one query on PostgreSQL and SQLite alike). The window
is the ``days * 24`` hours up to ``now``, the current (partial) hour included, so a series has at
most ``days * 24`` points (720 for 30 days).

A department's snapshot already counts its whole subtree, so a department's history is its own
snapshots; nothing is summed here. Issue 32 ("Fairness over time").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.db.models import F, Window
from django.db.models.functions import RowNumber, TruncHour
from django.utils import timezone

from quotas.models import Team
from quotas.quantities import GPU
from scheduling.models import ShareSnapshot

__all__ = [
    "MAX_DAYS",
    "ResourceHistory",
    "Scale",
    "ShareHistory",
    "hourly_snapshots",
    "share_history",
]

# Snapshots older than this are pruned, so a longer window would show nothing more.
MAX_DAYS = 30

# resource -> (base units per display unit, display unit), e.g. {"memory": (2**30, "GiB")}.
Scale = Mapping[str, tuple[Decimal, str]]
_BASE = (Decimal(1), "")


@dataclass(frozen=True)
class ResourceHistory:
    """One resource's series, aligned with ``ShareHistory.computed_at``.

    ``past_usage`` is None when no point in the window recorded past use of this resource (the
    feature was off); otherwise an element is None where that point recorded no past use at
    all (off at that computation).
    """

    resource: str
    unit: str
    fair_allocation: list[Decimal]
    usage: list[Decimal]
    past_usage: list[Decimal | None] | None


@dataclass(frozen=True)
class ShareHistory:
    start: datetime  # the start of the window's first hour
    end: datetime  # ``now``
    days: int
    computed_at: list[datetime]  # the snapshot chosen for each hour, oldest first
    resources: list[ResourceHistory]  # GPUs first, then other extended resources, then the rest


def resource_order(resource: str) -> tuple[bool, bool, str]:
    """Sort key of the team page's charts: GPUs, extended resources, then cpu, memory, …"""
    return (resource != GPU, "/" not in resource, resource)


def window_start(now: datetime, days: int) -> datetime:
    """The start of the first of the ``days * 24`` UTC hours that end with ``now``'s hour."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return hour - timedelta(hours=days * 24 - 1)


def hourly_snapshots(team: Team, *, start: datetime, end: datetime) -> list[ShareSnapshot]:
    """The team's last snapshot of each UTC hour in [start, end], oldest first (one query).

    Ties within an hour (two computations at the same instant) go to the later computation.
    """
    hour = TruncHour("computed_at", tzinfo=UTC)
    return list(
        ShareSnapshot.objects.filter(team=team, computed_at__gte=start, computed_at__lte=end)
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[hour],
                order_by=[F("computed_at").desc(), F("id").desc()],
            )
        )
        .filter(rank=1)
        .only("id", "computed_at", "usage", "fair_allocation", "past_usage")
        .order_by("computed_at", "id")
    )


def _amount(amounts: Mapping, resource: str) -> Decimal:
    """An amount of a snapshot's JSON map (absent or unreadable: 0)."""
    try:
        return Decimal(str(amounts.get(resource, 0)))
    except InvalidOperation:
        return Decimal(0)


def share_history(
    team: Team, *, days: int = MAX_DAYS, now: datetime | None = None, scale: Scale | None = None
) -> ShareHistory:
    """The team's fair allocation, usage (allocated) and decayed usage, one point an hour.

    Amounts are in base units (devices, cores, bytes), or divided into the display units that
    ``scale`` gives per resource (the team page passes its chart units: GiB, cores). Resources
    are those any chosen snapshot names; a snapshot that lacks one counts 0 for it. Raises
    ValueError unless 1 <= days <= MAX_DAYS.
    """
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be between 1 and {MAX_DAYS}")
    now = now or timezone.now()
    start = window_start(now, days)
    snapshots = hourly_snapshots(team, start=start, end=now)
    names: set[str] = set()
    for snapshot in snapshots:
        names |= set(snapshot.fair_allocation) | set(snapshot.usage) | set(snapshot.past_usage)
    resources = []
    for resource in sorted(names, key=resource_order):
        factor, unit = (scale or {}).get(resource, _BASE)

        def series(field: str, resource: str = resource, factor: Decimal = factor) -> list:
            return [_amount(getattr(s, field), resource) / factor for s in snapshots]

        resources.append(
            ResourceHistory(
                resource=resource,
                unit=unit,
                fair_allocation=series("fair_allocation"),
                usage=series("usage"),
                past_usage=(
                    [
                        _amount(s.past_usage, resource) / factor if s.past_usage else None
                        for s in snapshots
                    ]
                    if any(resource in s.past_usage for s in snapshots)
                    else None
                ),
            )
        )
    return ShareHistory(
        start=start,
        end=now,
        days=days,
        computed_at=[snapshot.computed_at for snapshot in snapshots],
        resources=resources,
    )
