"""Time for the chargeback edge: UTC hours, days and calendar months, and segments of a period.

Invariant: everything here is UTC and half-open (``[lo, hi)``); a day or hour boundary is the
floor of an instant, and the segments of a range cover it exactly, without gaps or overlaps.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

MAX_PERIOD = timedelta(days=400)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def floor_to(t: datetime, step: timedelta) -> datetime:
    """``t`` in UTC, floored to the hour, or to the day if ``step`` is ``DAY``."""
    t = t.astimezone(UTC)
    if step == DAY:
        return t.replace(hour=0, minute=0, second=0, microsecond=0)
    return t.replace(minute=0, second=0, microsecond=0)


def ceil_to(t: datetime, step: timedelta) -> datetime:
    """``t`` in UTC, rounded up to the hour, or to the day if ``step`` is ``DAY``."""
    floor = floor_to(t, step)
    return floor if floor == t else floor + step


def _next_month(t: datetime) -> datetime:
    """The first instant of the month after ``t``'s (``t`` the first instant of a month)."""
    return t.replace(year=t.year + t.month // 12, month=t.month % 12 + 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) in UTC."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    return start, _next_month(start)


def calendar_months(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """Calendar months (UTC) overlapping [start, end)."""
    first = floor_to(start, DAY).replace(day=1)
    out = []
    while first < end:
        out.append((first, _next_month(first)))
        first = _next_month(first)
    return out


def cut_segments(lo: datetime, hi: datetime, cuts: Iterable[datetime], step: timedelta) -> list:
    """Split [lo, hi) (aligned to ``step``) at ``cuts``; an unaligned cut isolates its step."""
    points = {lo, hi}
    for t in cuts:
        for p in (floor_to(t, step), ceil_to(t, step)):
            if lo < p < hi:
                points.add(p)
    return list(pairwise(sorted(points)))


def whole_months(lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
    """Calendar months (UTC) lying entirely inside [lo, hi) (``lo`` aligned to a day)."""
    return [(a, b) for a, b in calendar_months(lo, hi) if lo <= a and b <= hi]


def merge_ranges(points: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Merge adjacent [a, b) intervals (sorted)."""
    out: list[tuple[datetime, datetime]] = []
    for a, b in sorted(points):
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out
