"""Rows and statements: a report as flat string rows (JSON, CSV), frozen, and diffed later.

``to_rows`` gives one dict of strings per line, keyed by ``CSV_COLUMNS``; ``freeze`` captures those
rows as an immutable, JSON-serializable ``FrozenStatement``; ``diff_reports`` names the lines whose
displayed figures changed since a statement was issued (late samples).

Invariant: JSON, CSV and frozen statements are built from the very same strings (Decimals in
fixed-point notation: cost and percentages with 2 places, hours with 4; ``None`` as ""), so they
always agree, and a diff compares what was displayed, not unrounded values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from .columns import CSV_COLUMNS, FIGURE_COLUMNS, GROUP_FIELDS
from .model import ChargebackError, Key, Report, key_values
from .validation import check_group_by


@dataclass(frozen=True)
class FrozenStatement:
    """An issued statement: the report's rows as strings, immutable and JSON-serializable."""

    start: datetime
    end: datetime
    group_by: tuple[str, ...]
    rows: tuple[tuple[tuple[str, str], ...], ...]
    total_cost: Decimal
    unpriced_records: int

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (ISO datetimes, Decimals as strings)."""
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "group_by": list(self.group_by),
            "rows": [dict(row) for row in self.rows],
            "total_cost": _fmt(self.total_cost),
            "unpriced_records": self.unpriced_records,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrozenStatement:
        """Rebuild a statement stored with ``to_dict()``; raise ChargebackError if malformed."""
        try:
            group_by = check_group_by(data["group_by"])
            start = datetime.fromisoformat(data["start"])
            end = datetime.fromisoformat(data["end"])
            rows = tuple(tuple((c, str(row[c])) for c in CSV_COLUMNS) for row in data["rows"])
            return cls(
                start=start,
                end=end,
                group_by=group_by,
                rows=rows,
                total_cost=Decimal(data["total_cost"]),
                unpriced_records=int(data["unpriced_records"]),
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as e:
            raise ChargebackError(f"malformed frozen statement: {e!r}") from e


@dataclass(frozen=True)
class LineChange:
    """A line whose figures differ between a frozen statement and a current report.

    ``kind`` is ``added`` (only in the current report), ``removed`` (only in the frozen one) or
    ``changed``; ``changes`` lists ``(column, frozen value, current value)`` as displayed strings.
    """

    key: Key
    kind: str
    changes: tuple[tuple[str, str, str], ...]


def to_rows(report: Report) -> list[dict[str, str]]:
    """Return one flat dict per line, keyed by CSV_COLUMNS, every value a string.

    The same strings feed JSON and CSV so both always agree: Decimals in fixed-point notation
    (cost and percentages with 2 places, hours with 4), ``None`` as "", counts as integers.
    """
    rows = []
    for line in report.lines:
        row = {name: line.value(name) for name in GROUP_FIELDS}
        row.update(
            unit=line.unit,
            allocated_hours=_fmt(line.allocated_hours),
            used_hours=_fmt(line.used_hours),
            idle_hours=_fmt(line.idle_hours),
            guarantee_hours=_fmt(line.guarantee_hours),
            unused_guarantee_hours=_fmt(line.unused_guarantee_hours),
            cost=_fmt(line.cost),
            budget_used_pct=_fmt(line.budget_used_pct),
            unpriced_records=str(line.unpriced_records),
        )
        rows.append({name: row[name] for name in CSV_COLUMNS})
    return rows


def freeze(report: Report) -> FrozenStatement:
    """Capture ``report`` as an immutable statement of displayed strings plus its totals."""
    return FrozenStatement(
        start=report.start,
        end=report.end,
        group_by=report.group_by,
        rows=tuple(tuple(row.items()) for row in to_rows(report)),
        total_cost=report.total.cost,
        unpriced_records=report.total.unpriced_records,
    )


def diff_reports(frozen: FrozenStatement, current: Report | FrozenStatement) -> list[LineChange]:
    """Name the lines whose displayed figures changed since ``frozen`` was issued.

    Used to surface late samples: re-run the report for the frozen period and diff. Lines are
    matched by group key; figures are compared as displayed strings, so changes smaller than the
    display precision are not reported. Returns changes sorted by key. Raises ChargebackError if
    the two cover different periods or groupings.
    """
    now = current if isinstance(current, FrozenStatement) else freeze(current)
    if (frozen.start, frozen.end, frozen.group_by) != (now.start, now.end, now.group_by):
        raise ChargebackError(
            "cannot diff statements of different periods or groupings: "
            f"[{frozen.start}, {frozen.end}) by {frozen.group_by} vs "
            f"[{now.start}, {now.end}) by {now.group_by}"
        )

    def by_key(statement: FrozenStatement) -> dict[Key, dict[str, str]]:
        out = {}
        for pairs in statement.rows:
            row = dict(pairs)
            out[tuple((name, row[name]) for name in statement.group_by)] = row
        return out

    before, after = by_key(frozen), by_key(now)
    changes = []
    for key in sorted(before.keys() | after.keys(), key=key_values):
        old, new = before.get(key), after.get(key)
        columns = tuple(
            (name, (old or {}).get(name, ""), (new or {}).get(name, ""))
            for name in FIGURE_COLUMNS
            if (old or {}).get(name, "") != (new or {}).get(name, "")
        )
        if old is None:
            changes.append(LineChange(key, "added", columns))
        elif new is None:
            changes.append(LineChange(key, "removed", columns))
        elif columns:
            changes.append(LineChange(key, "changed", columns))
    return changes


def _fmt(value: Decimal | None) -> str:
    """A Decimal in fixed-point notation, None as ""."""
    return "" if value is None else format(value, "f")
