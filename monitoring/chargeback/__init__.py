"""Chargeback at the database edge: load rollups, rate cards and budgets for ``[start, end)``, run
the pure report (monitoring.domain.chargeback), freeze months and name late changes.

The package, imports pointing down this list (no module imports one above it, nor this index):

- ``periods``: UTC hours, days and calendar months, segments of a period, ``MAX_PERIOD``;
- ``database``: the switch between the PostgreSQL fast paths and the portable path
  (``database.postgres``, the name tests patch), and the summing queries' ``work_mem``;
- ``sums``: what is summed per group and segment (``Sums``, the SQL aggregates), and how a sum
  becomes the domain records whose per-record floors equal the per-bucket ones;
- ``fast_path``: the PostgreSQL summing query (``width_bucket``, exact ``numeric``);
- ``portable``: the same sums in Python ``Decimal`` on every other database;
- ``reading``: rate cards, budgets, which monthly, daily and hourly rows a period reads (the
  month rule) and their sums; its docstring tells how the rollups are read;
- ``building``: ``build_report`` and ``ChargebackResult`` (the report plus what the API shows);
- ``statements``: ``freeze_month``, ``statement_view`` and ``AlreadyFrozen``.

This module is their index: the names below are the interface the rest of Fairshare uses.
"""

from __future__ import annotations

from .building import ChargebackResult as ChargebackResult
from .building import budget_rows as budget_rows
from .building import build_report as build_report
from .periods import MAX_PERIOD as MAX_PERIOD
from .periods import calendar_months as calendar_months
from .periods import month_bounds as month_bounds
from .statements import AlreadyFrozen as AlreadyFrozen
from .statements import freeze_month as freeze_month
from .statements import statement_view as statement_view
from .sums import UNASSIGNED as UNASSIGNED

__all__ = [
    "MAX_PERIOD",
    "UNASSIGNED",
    "AlreadyFrozen",
    "ChargebackResult",
    "build_report",
    "freeze_month",
    "month_bounds",
    "statement_view",
]
