"""Chargeback: turn usage rollups and a rate card into a cost report (pure).

Inputs are rollup buckets (``UsageRecord``), a rate card (``Rate``) and optional ``Budget`` rows;
``report()`` answers "who allocated, used and paid for what in ``[S, E)``", grouped by any subset
of team / cost centre / resource / flavor / namespace. The maths is in ``reporting``'s docstring.

The package, imports pointing down this list (no module imports one above it, nor this index):

- ``columns``: the vocabulary: ``GROUP_FIELDS``, ``DEFAULT_GROUP_BY``, ``FIGURE_COLUMNS``,
  ``COLUMN_DEFINITIONS`` and ``CSV_COLUMNS``;
- ``units``: billing units (GPU-, core-, GiB-, device-hours) and the exact GiB conversion;
- ``exact``: exact sums per time-weight denominator, and the single rounding at the end;
- ``model``: the inputs and outputs (``UsageRecord``, ``Rate``, ``Budget``, ``Line``, ``Report``
  ...) and ``ChargebackError``;
- ``validation``: the checks of grouping, periods, records and budgets;
- ``rates``: the rate card indexed, and a record's time cut into priced pieces;
- ``summing``: each record clipped, weighted, priced and added to exact sums;
- ``lines``: the sums gathered per line and in total, then rounded into ``Line`` s;
- ``reporting``: ``report()``, stringing the above together;
- ``statements``: rows as strings (``to_rows``), ``freeze``, ``FrozenStatement`` and
  ``diff_reports``.

This module is their index: the names below are the interface the rest of Fairshare uses.
"""

from __future__ import annotations

from .columns import COLUMN_DEFINITIONS as COLUMN_DEFINITIONS
from .columns import CSV_COLUMNS as CSV_COLUMNS
from .columns import DEFAULT_GROUP_BY as DEFAULT_GROUP_BY
from .columns import FIGURE_COLUMNS as FIGURE_COLUMNS
from .columns import GROUP_FIELDS as GROUP_FIELDS
from .exact import CENT as CENT
from .exact import HOUR_PLACES as HOUR_PLACES
from .exact import PCT_PLACES as PCT_PLACES
from .model import Budget as Budget
from .model import BudgetUse as BudgetUse
from .model import ChargebackError as ChargebackError
from .model import Key as Key
from .model import Line as Line
from .model import Rate as Rate
from .model import Report as Report
from .model import Unpriced as Unpriced
from .model import UsageRecord as UsageRecord
from .reporting import report as report
from .statements import FrozenStatement as FrozenStatement
from .statements import LineChange as LineChange
from .statements import diff_reports as diff_reports
from .statements import freeze as freeze
from .statements import to_rows as to_rows
from .units import BYTES_PER_GIB as BYTES_PER_GIB
from .units import is_byte_resource as is_byte_resource
from .units import is_gpu_resource as is_gpu_resource
from .units import unit_of as unit_of

__all__ = [
    "COLUMN_DEFINITIONS",
    "CSV_COLUMNS",
    "DEFAULT_GROUP_BY",
    "FIGURE_COLUMNS",
    "GROUP_FIELDS",
    "Budget",
    "BudgetUse",
    "ChargebackError",
    "FrozenStatement",
    "Line",
    "LineChange",
    "Rate",
    "Report",
    "Unpriced",
    "UsageRecord",
    "diff_reports",
    "freeze",
    "is_byte_resource",
    "is_gpu_resource",
    "report",
    "to_rows",
    "unit_of",
]
