"""How long workloads waited, per team and week (pure).

Input: one :class:`StartedWait` per workload whose start was observed (``monitoring.models.
WorkloadRecord`` with ``started`` and ``waited_seconds``: from its creation to the first
collection that saw it run). Output: one :class:`WeekWaits` per team and ISO week (weeks start
on Monday, UTC) of the *start*: how many started, the median, the 90th percentile (nearest
rank: the smallest wait at least 90 % of them did not exceed) and the longest wait, in whole
seconds. Teams in slug order, weeks newest first. Nothing here reads the clock or settings.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

__all__ = ["StartedWait", "WeekWaits", "percentile", "week_start", "weekly_waits"]


@dataclass(frozen=True)
class StartedWait:
    team: str
    started: datetime
    waited_seconds: int


@dataclass(frozen=True)
class WeekWaits:
    team: str
    week: date  # the Monday (UTC) the week starts on
    started: int
    median_seconds: int
    p90_seconds: int
    longest_seconds: int


def week_start(moment: datetime) -> date:
    """The Monday (UTC) of ``moment``'s ISO week."""
    day = moment.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def percentile(values: list[int], share: float) -> int:
    """Nearest-rank percentile of ``values`` (sorted or not); raises ValueError when empty."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def weekly_waits(waits: Iterable[StartedWait]) -> list[WeekWaits]:
    """Group ``waits`` by team and week of their start (module docstring)."""
    groups: dict[tuple[str, date], list[int]] = defaultdict(list)
    for wait in waits:
        groups[(wait.team, week_start(wait.started))].append(max(0, int(wait.waited_seconds)))
    rows = [
        WeekWaits(
            team=team,
            week=week,
            started=len(values),
            median_seconds=round(statistics.median(values)),
            p90_seconds=percentile(values, 0.9),
            longest_seconds=max(values),
        )
        for (team, week), values in groups.items()
    ]
    rows.sort(key=lambda r: (r.team, -r.week.toordinal()))
    return rows
