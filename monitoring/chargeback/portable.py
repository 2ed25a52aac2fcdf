"""The portable path: the fast path's sums, added up exactly in Python on every other database.

Invariant: the same sums, per (segment, group), as ``fast_path.sum_rows_in_sql`` on the same
rows, to the last digit: exact Python ``Decimal`` over rows the ORM has converted (SQLite keeps
decimals as floating point, and its ``sum()`` would round where PostgreSQL's ``numeric`` does not).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from datetime import datetime, timedelta

from monitoring.models import UsageRollup

from .sums import UNASSIGNED, Sums


def sum_rows_in_python(
    rows,
    plain: list[tuple[datetime, datetime]],
    segments_of: dict[str, list[tuple[datetime, datetime]]],
    by_team: bool,
    by_namespace: bool,
    step: timedelta,
) -> list[tuple]:
    """The portable equivalent of ``fast_path.sum_rows_in_sql`` (every database but PostgreSQL).

    The same sums, per (segment, group), added up exactly in Python ``Decimal`` from rows the
    ORM has converted (SQLite keeps decimals as floating point, and its ``sum()`` would round
    where PostgreSQL's ``numeric`` does not). The segment of a row is found by bisecting the
    segment starts, as ``width_bucket`` does; monthly rows bring their stored per-day floors.
    """
    starts_of = {resource: [lo for lo, _ in segments] for resource, segments in segments_of.items()}
    plain_starts = [lo for lo, _ in plain]
    columns = ["period", "start", "resource", "flavor", "allocated_hours", "used_hours"]
    columns += ["guarantee_hours", "covered_hours", "busy_hours"]
    if by_team:
        columns += ["team_id", "team__slug", "team__cost_center"]
    if by_namespace:
        columns.append("namespace")
    sums: dict[tuple, Sums] = defaultdict(Sums)
    for row in rows.order_by().values(*columns).iterator(chunk_size=5000):
        resource = row["resource"]
        starts = starts_of.get(resource, plain_starts)
        segment = bisect_right(starts, row["start"]) - 1
        if by_team and row["team_id"] is not None:
            team, cost_center = row["team__slug"], row["team__cost_center"] or ""
        elif by_team:
            team, cost_center = UNASSIGNED, ""
        else:
            team = cost_center = ""
        group = (team, cost_center, row.get("namespace", ""), resource, row["flavor"])
        a, u, g = row["allocated_hours"], row["used_hours"], row["guarantee_hours"]
        covered = row["covered_hours"]
        if covered is None:
            covered = min(g, a)
        busy = row["busy_hours"] if row["period"] == UsageRollup.MONTH else min(a, u)
        sums[(resource, segment, group)].add(Sums(a, u, g, covered, a - busy))
    return [
        (segments_of.get(resource, plain)[segment], group, s)
        for (resource, segment, group), s in sums.items()
    ]
