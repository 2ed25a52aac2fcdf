"""Which database answers: the PostgreSQL fast paths, or the portable path every other one takes.

Invariant: both paths give the same figures to the last digit (tests/api/test_chargeback.py
compares them); ``postgres`` is the only switch between them, so a test that patches it here
(``monkeypatch.setattr(database, "postgres", ...)``) sends every query down the portable path.
Callers look it up as ``database.postgres`` at call time for that reason.
"""

from __future__ import annotations

from django.db import connections

WORK_MEM = "64MB"  # per summing query, SET LOCAL (transaction-scoped)


def postgres(using: str) -> bool:
    """Whether the PostgreSQL fast paths apply (``width_bucket``, ``unnest``, exact ``numeric``
    sums); every other database takes the portable path, which gives the same figures."""
    return connections[using].vendor == "postgresql"


def more_work_mem(using: str) -> None:
    """``SET LOCAL work_mem`` for the summing queries (ends with the caller's transaction).

    Enough to hash-aggregate tens of thousands of groups in memory: with the default 4 MB the
    sums of a month of daily rows (232 k rows, 8 k groups) sort on disk and the planner picks a
    parallel seq scan over every period instead of the (period, start) index (~0.3 s more).
    """
    if WORK_MEM and postgres(using):
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT set_config('work_mem', %s, true)", [WORK_MEM])
