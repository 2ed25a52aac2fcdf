"""Chargeback: turn usage rollups and a rate card into a cost report (pure).

Inputs are rollup buckets (``UsageRecord``: one team x namespace x resource x flavor over a bucket
``[start, end)``), a rate card (``Rate``: price per unit-hour with a validity period) and optional
``Budget`` rows. ``report()`` answers "who allocated, used and paid for what in ``[S, E)``", grouped
by any subset of team / cost centre / resource / flavor / namespace.

Units
    Hours are *resource-hours in billing units*: GPU-hours for GPUs (and MIG slices, per slice),
    core-hours for ``cpu``, **GiB-hours** for byte resources (``memory``, ``ephemeral-storage``,
    ``hugepages-*``; records carry byte-hours, divided here by 2**30) and device-hours for any other
    extended resource. Rates and budget limits are in the same units. One currency is assumed.

The maths, for one record with bucket ``[s, e)`` and report window ``[S, E)``
    1. Clip: ``[a, b) = [max(s, S), min(e, E))``; empty means the record is outside the report.
       Usage is assumed uniform inside a bucket, so every figure is scaled by
       ``f = (b - a) / (e - s)`` (a bucket half inside the window contributes half of everything).
    2. Figures (``k`` = 1/2**30 for byte resources, else 1; ``A, U, G`` = the record's allocated,
       used and guarantee hours):
       allocated = k*A*f;  guarantee = k*G*f;  unused guarantee = k*(G - C)*f;
       for GPU resources only: used = k*U*f and idle = k*max(0, A - U)*f.
       ``C`` (the record's ``covered_hours``) is the part of the guarantee the *team's*
       allocation of the resource filled in the bucket: the rollups compute it per team,
       resource and hour as min(guarantee, the team's allocated hours over all its namespaces
       and flavors), because a guarantee is a team-level figure while allocation rows are per
       namespace and flavor. A record that does not carry it (None) covers min(G, A) of itself.
       Idle and unused guarantee are floored *per bucket*, so over-use in one hour never hides an
       idle reservation in another.
    3. Cost is charged on *allocation* (requests x time), not on utilization. ``[a, b)`` is cut at
       every rate boundary (``valid_from``/``valid_to``) that falls inside it; each piece ``[p, q)``
       costs ``k*A*(q - p)/(e - s)*price``, priced by the rate valid on that piece. A rate for the
       record's exact flavor wins over the generic (``flavor=""``) rate of the resource; pieces
       with neither are reported in ``Report.unpriced`` (hours still count, cost is 0).
    4. Records are summed into lines by the group key. Arithmetic is exact until the line is
       emitted: Decimal products and sums in a context that traps instead of rounding (``k`` =
       5**30/10**30 is a finite decimal), kept per denominator of the reduced time weight, so a
       whole bucket (weight 1) needs no division at all; a line with clipped buckets becomes one
       ``fractions.Fraction`` per figure. Only then is cost
       quantized to 0.01, hours to 0.0001 and percentages to 0.01, all ROUND_HALF_EVEN. The
       report total is the rounded exact sum, so it is the same for every grouping and differs
       from the sum of rounded line costs by at most 0.005 per line.

Hours are only added up within one resource: a line covering several resources (e.g. grouped by
team only) reports ``None`` for its hour figures and only its cost. Group by ``resource`` too to
see hours. Budgets compare the allocated hours of their resource, clipped to the budget period.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import (
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    Inexact,
    InvalidOperation,
    Overflow,
    localcontext,
)
from fractions import Fraction
from itertools import pairwise
from math import gcd
from typing import Any

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

GROUP_FIELDS: tuple[str, ...] = ("team", "cost_center", "resource", "flavor", "namespace")
# The grouping when none is asked for (page, CSV and API): by team alone a line spans several
# resources, whose hours do not add up, so it would show only its cost.
DEFAULT_GROUP_BY: tuple[str, ...] = ("team", "resource")
FIGURE_COLUMNS: tuple[str, ...] = (
    "unit",
    "allocated_hours",
    "used_hours",
    "idle_hours",
    "guarantee_hours",
    "unused_guarantee_hours",
    "cost",
    "budget_used_pct",
    "unpriced_records",
)
# One line per figure column: what it means. The Reports page's help and docs/api.md show these
# very sentences (a test checks both), so the page, the docs, the CSV and the API mean one thing.
COLUMN_DEFINITIONS: dict[str, str] = {
    "unit": "The billing unit of the line's hours: GPU-hour, core-hour, GiB-hour or device-hour.",
    "allocated_hours": (
        "Requests of the team's pods bound to nodes × time (requests × hours), in the line's unit;"
        " what cost and budgets count."
    ),
    "used_hours": (
        "Measured GPU use: GPU utilization × time from the node agents' samples, in GPU-hours"
        " (GPU resources only)."
    ),
    "idle_hours": (
        "Allocated GPU-hours not used, floored per rollup bucket: Σ max(allocated − used, 0);"
        " the idle share is idle ÷ allocated hours."
    ),
    "guarantee_hours": (
        "The team's guarantee (its reserved minimum, temporary grants included while active) ×"
        " time, in the line's unit."
    ),
    "unused_guarantee_hours": (
        "Guaranteed hours the team's allocation left empty: per hour, guarantee − min(guarantee,"
        " the team's allocated hours over all its namespaces and flavors)."
    ),
    "cost": (
        "Allocated hours × the rate card's price valid at each instant (the flavor's rate, else"
        " the resource's), rounded to 0.01; hours with no rate cost 0."
    ),
    "budget_used_pct": (
        "Allocated hours of a budgeted resource in the period ÷ the team's monthly budget × 100"
        " (the highest month)."
    ),
    "unpriced_records": (
        "Summed usage records that no rate card prices for part of their time (hours count,"
        " cost 0)."
    ),
}
# Every row carries every column so CSV headers never depend on the grouping; dimensions that are
# not grouped on are "" (as is the flavor of a flavor-less resource).
CSV_COLUMNS: tuple[str, ...] = GROUP_FIELDS + FIGURE_COLUMNS

BYTES_PER_GIB = 2**30
CENT = Decimal("0.01")
HOUR_PLACES = Decimal("0.0001")
PCT_PLACES = Decimal("0.01")

_MICROSECOND = timedelta(microseconds=1)
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})

Key = tuple[tuple[str, str], ...]


class ChargebackError(ValueError):
    """Invalid chargeback input (grouping, period, rate card, record or frozen statement)."""


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class UsageRecord:
    """One rollup bucket for one team x namespace x resource x flavor.

    Hours are in base units x hours (GPU-hours, core-hours, byte-hours). ``used_hours`` is the
    utilization-weighted figure for GPUs and 0 for other resources or when unknown.
    ``covered_hours`` is how much of ``guarantee_hours`` the team's allocation covered (module
    docstring, step 2); None means min(guarantee, allocated) of this record alone.
    """

    start: datetime
    end: datetime
    team: str
    cost_center: str
    namespace: str
    resource: str
    flavor: str
    allocated_hours: Decimal
    used_hours: Decimal
    guarantee_hours: Decimal
    covered_hours: Decimal | None = None


@dataclass(frozen=True)
class Rate:
    """Price per billing unit-hour (GPU-, core-, GiB-hour) valid in ``[valid_from, valid_to)``.

    ``flavor=""`` prices every flavor of ``resource`` that has no rate of its own; ``valid_to=None``
    means open-ended.
    """

    resource: str
    flavor: str
    price_per_unit_hour: Decimal
    valid_from: datetime
    valid_to: datetime | None = None


@dataclass(frozen=True)
class Budget:
    """A team's allowance of ``resource`` (billing unit-hours) over ``[start, end)``."""

    team: str
    resource: str
    start: datetime
    end: datetime
    limit_hours: Decimal


# ---------------------------------------------------------------- outputs


@dataclass(frozen=True)
class BudgetUse:
    """How much of one budget a line consumed in the part of the budget period the report covers."""

    resource: str
    start: datetime
    end: datetime
    limit_hours: Decimal
    used_hours: Decimal
    used_pct: Decimal


@dataclass(frozen=True)
class Line:
    """One report line: the group key and its figures.

    Hour figures are ``None`` when the line spans several resources (units would mix);
    ``used_hours`` and ``idle_hours`` are also ``None`` for non-GPU resources (not measured).
    ``cost`` is rounded to 0.01; ``exact_cost`` is the unrounded value, kept for reconciliation
    and never displayed.
    """

    key: Key
    unit: str
    allocated_hours: Decimal | None
    used_hours: Decimal | None
    idle_hours: Decimal | None
    guarantee_hours: Decimal | None
    unused_guarantee_hours: Decimal | None
    cost: Decimal
    budgets: tuple[BudgetUse, ...] = ()
    unpriced_records: int = 0
    exact_cost: Fraction = field(default=Fraction(0), repr=False, compare=False)

    @property
    def budget_used_pct(self) -> Decimal | None:
        """The highest percentage over the budgets that apply; None when none applies."""
        return max((use.used_pct for use in self.budgets), default=None)

    def value(self, name: str) -> str:
        """Return the key value for group field ``name``; "" when the line is not grouped by it."""
        return dict(self.key).get(name, "")


@dataclass(frozen=True)
class Unpriced:
    """A stretch ``[start, end)`` of a record that no rate covers, with its allocated hours."""

    record: UsageRecord
    start: datetime
    end: datetime
    allocated_hours: Decimal
    unit: str


@dataclass(frozen=True)
class Report:
    """A chargeback report for ``[start, end)``; ``total`` is a line with the empty key."""

    start: datetime
    end: datetime
    group_by: tuple[str, ...]
    lines: tuple[Line, ...]
    total: Line
    unpriced: tuple[Unpriced, ...] = ()


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
            group_by = _check_group_by(data["group_by"])
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


# ---------------------------------------------------------------- units


def is_byte_resource(resource: str) -> bool:
    """Return True if ``resource`` is measured in bytes (billed per GiB-hour)."""
    return resource in _BYTE_RESOURCES or resource.startswith("hugepages-")


def is_gpu_resource(resource: str) -> bool:
    """Return True for GPU devices and MIG slices (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`)."""
    return resource.endswith("/gpu") or "/mig-" in resource


def unit_of(resource: str) -> str:
    """Return the billing unit of ``resource``: GPU-hour, core-hour, GiB-hour or device-hour."""
    if resource == "cpu":
        return "core-hour"
    if is_byte_resource(resource):
        return "GiB-hour"
    if is_gpu_resource(resource):
        return "GPU-hour"
    return "device-hour"


# 1/2**30 = 5**30/10**30 is a finite decimal, so the GiB conversion stays exact in Decimal.
_PER_GIB = Decimal(5**30).scaleb(-30)
_ONE = Decimal(1)


def _scale(resource: str) -> Decimal:
    return _PER_GIB if is_byte_resource(resource) else _ONE


# ---------------------------------------------------------------- report

# Every sum is kept as Decimal in this context: additions and multiplications are exact (Inexact
# traps rather than rounds), and much cheaper than Fraction arithmetic.
_EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation, Overflow])
# Rounding an exact Decimal once, half to even (quantize rounds the exact operand).
_ROUNDING = Context(prec=1000, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, Overflow])
_ZERO = Decimal(0)

# An exact value as ``{denominator: numerator}`` meaning Σ numerator / denominator. A time weight
# ``overlap / bucket`` is reduced by their gcd; a whole bucket (weight 1) lands on denominator 1,
# so in the usual case a value is one exact Decimal and needs no rational arithmetic at all.
_Parts = dict[int, Decimal]
_FIGURES = 5  # allocated, used, idle, guarantee, unused guarantee


def _new_figures() -> list[_Parts]:
    return [{} for _ in range(_FIGURES)]


@dataclass
class _Acc:
    """Exact figures for one line: five per resource, cost, budget hours by budget index."""

    by_resource: dict[str, list[_Parts]] = field(default_factory=dict)
    cost: _Parts = field(default_factory=dict)
    unpriced_records: int = 0
    budget_hours: dict[int, _Parts] = field(default_factory=dict)


def report(
    records: Iterable[UsageRecord],
    rates: Iterable[Rate],
    *,
    start: datetime,
    end: datetime,
    group_by: Sequence[str],
    budgets: Iterable[Budget] = (),
) -> Report:
    """Build the chargeback report for ``[start, end)`` grouped by ``group_by``.

    Steps:
      1. Validate the period (tz-aware, ``start < end``), the grouping (a subset of
         GROUP_FIELDS, no repeats), the rate card (no two rates for the same resource and flavor
         overlap in time) and each record (tz-aware, non-empty bucket, non-negative hours).
         Anything wrong raises ChargebackError naming the culprit.
      2. For each record: clip to the window and split at rate boundaries (module docstring;
         pieces are computed once per resource, flavor and clipped bucket). Its values, scaled
         by the integer numerator of the reduced time weight and, for cost, by the price, are
         added exactly (Decimal) to sums keyed by line, resource and the weight's denominator.
      3. Budgets apply to lines grouped by team: for each budget of the line's team (and of the
         line's resource, when grouped by resource) the line's allocated hours of that resource
         inside ``[max(start, budget.start), min(end, budget.end))`` are compared to the limit.
      4. Apply the GiB conversion to the sums (exact in Decimal), add up each line, and the
         total as the sum of all lines; emit lines sorted by key values, quantizing only now:
         a value with the single denominator 1 is rounded directly, any other through one exact
         ``Fraction`` per line and figure.

    Invariants: the same inputs in any order give the same report; ``total.cost`` does not depend
    on ``group_by``; ``total.exact_cost`` equals the sum of the lines' ``exact_cost``.
    """
    _check_period(start, end, "report")
    fields = _check_group_by(group_by)
    rate_index = _index_rates(rates)
    budget_list = tuple(budgets)
    for budget in budget_list:
        _check_budget(budget)
    use_budgets = "team" in fields
    budgets_for: dict[tuple[str, str], list[int]] = defaultdict(list)
    budgets_of_team: dict[str, list[int]] = defaultdict(list)
    for i, budget in enumerate(budget_list):
        budgets_for[(budget.team, budget.resource)].append(i)
        budgets_of_team[budget.team].append(i)

    figure_sums: dict[tuple[Key, str, int], list[Decimal]] = {}
    cost_sums: dict[tuple[Key, str, int], Decimal] = {}
    budget_sums: dict[tuple[Key, str, int, int], Decimal] = {}
    unpriced_records: dict[Key, int] = defaultdict(int)
    unpriced: list[Unpriced] = []
    pieces_of: dict[tuple[str, str, datetime, datetime], list[_Piece]] = {}
    with localcontext(_EXACT):
        for record in records:
            _check_record(record)
            s, e = record.start, record.end
            a, b = max(s, start), min(e, end)
            if a >= b:
                continue
            resource = record.resource
            key = tuple((name, getattr(record, name)) for name in fields)
            num, den = _weight(a, b, s, e)

            sums = figure_sums.get((key, resource, den))
            if sums is None:
                sums = figure_sums[(key, resource, den)] = [_ZERO] * _FIGURES
            values = _record_values(record)
            for i in range(_FIGURES):
                sums[i] += values[i] * num if num != 1 else values[i]

            allocated = record.allocated_hours
            pieces_key = (resource, record.flavor, a, b)
            pieces = pieces_of.get(pieces_key)
            if pieces is None:
                pieces = pieces_of[pieces_key] = _price_pieces(record, a, b, rate_index)
            priced_in_full = True
            for p, q, rate in pieces:
                pn, pd = _weight(p, q, s, e)
                if rate is None:
                    priced_in_full = False
                    hours = Fraction(allocated * _scale(resource)) * Fraction(pn, pd)
                    unpriced.append(Unpriced(record, p, q, _hours(hours), unit_of(resource)))
                else:
                    amount = allocated * rate.price_per_unit_hour
                    if pn != 1:
                        amount *= pn
                    cost_key = (key, resource, pd)
                    cost_sums[cost_key] = cost_sums.get(cost_key, _ZERO) + amount
            if not priced_in_full:
                unpriced_records[key] += 1

            for i in budgets_for.get((record.team, resource), ()) if use_budgets else ():
                p, q = max(a, budget_list[i].start), min(b, budget_list[i].end)
                if p < q:
                    pn, pd = _weight(p, q, s, e)
                    budget_key = (key, resource, i, pd)
                    budget_sums[budget_key] = budget_sums.get(budget_key, _ZERO) + (
                        allocated * pn if pn != 1 else allocated
                    )

        accs: dict[Key, _Acc] = defaultdict(_Acc)
        for (key, resource, den), sums in figure_sums.items():
            k = _scale(resource)
            figures = accs[key].by_resource.get(resource)
            if figures is None:
                figures = accs[key].by_resource[resource] = _new_figures()
            for parts, value in zip(figures, sums, strict=True):
                _add(parts, den, value * k)
        for (key, resource, den), amount in cost_sums.items():
            _add(accs[key].cost, den, amount * _scale(resource))
        for (key, resource, i, den), amount in budget_sums.items():
            _add(accs[key].budget_hours.setdefault(i, {}), den, amount * _scale(resource))
        for key, count in unpriced_records.items():
            accs[key].unpriced_records = count

        total = _Acc()
        for acc in accs.values():
            for resource, figures in acc.by_resource.items():
                into = total.by_resource.get(resource)
                if into is None:
                    into = total.by_resource[resource] = _new_figures()
                for target, parts in zip(into, figures, strict=True):
                    _merge(target, parts)
            _merge(total.cost, acc.cost)
            total.unpriced_records += acc.unpriced_records

    def applicable(key: Key) -> list[int]:
        if not use_budgets:
            return []
        values = dict(key)
        return [
            i
            for i in budgets_of_team.get(values["team"], ())
            if values.get("resource", budget_list[i].resource) == budget_list[i].resource
            and budget_list[i].start < end
            and start < budget_list[i].end
        ]

    lines = tuple(
        _emit(key, acc, [(budget_list[i], acc.budget_hours.get(i, {})) for i in applicable(key)])
        for key, acc in sorted(accs.items(), key=lambda item: _key_values(item[0]))
    )
    unpriced.sort(key=lambda u: (u.start, u.end, _record_key(u.record)))
    return Report(
        start=start,
        end=end,
        group_by=fields,
        lines=lines,
        total=_emit((), total, []),
        unpriced=tuple(unpriced),
    )


def _weight(a: datetime, b: datetime, s: datetime, e: datetime) -> tuple[int, int]:
    """Return the share ``(b - a) / (e - s)`` of a bucket as a reduced (numerator, denominator)."""
    if a == s and b == e:
        return 1, 1
    part, whole = _micros(b - a), _micros(e - s)
    divisor = gcd(part, whole)
    return part // divisor, whole // divisor


def _add(parts: _Parts, den: int, value: Decimal) -> None:
    parts[den] = parts[den] + value if den in parts else value


def _merge(into: _Parts, parts: _Parts) -> None:
    for den, value in parts.items():
        _add(into, den, value)


def _exact(parts: _Parts) -> Fraction:
    """The exact value Σ numerator / denominator as a Fraction."""
    return sum((Fraction(value) / den for den, value in parts.items()), Fraction(0))


def _record_values(record: UsageRecord) -> tuple[Decimal, Decimal, Decimal, Decimal, Decimal]:
    """Return (allocated, used, idle, guarantee, unused guarantee) of one whole bucket.

    Raw record units (before clipping and the GiB conversion). Idle and unused guarantee are
    floored at zero here, per bucket; unused guarantee is the guarantee less what the team's
    allocation covered (``covered_hours``, else the record's own allocation); used and idle are
    zero for non-GPU resources.
    """
    allocated, guarantee = record.allocated_hours, record.guarantee_hours
    covered = allocated if record.covered_hours is None else record.covered_hours
    unused_guarantee = guarantee - covered if guarantee > covered else _ZERO
    if not is_gpu_resource(record.resource):
        return allocated, _ZERO, _ZERO, guarantee, unused_guarantee
    used = record.used_hours
    idle = allocated - used if allocated > used else _ZERO
    return allocated, used, idle, guarantee, unused_guarantee


def _emit(key: Key, acc: _Acc, budgets: list[tuple[Budget, _Parts]]) -> Line:
    """Quantize one accumulated line; hours only when it covers a single resource."""
    uses = []
    for budget, parts in budgets:
        hours = _exact(parts)
        uses.append(
            BudgetUse(
                resource=budget.resource,
                start=budget.start,
                end=budget.end,
                limit_hours=budget.limit_hours,
                used_hours=_hours(hours),
                used_pct=_round(hours * 100 / Fraction(budget.limit_hours), PCT_PLACES),
            )
        )
    # One resource: hours add up. Several: units would mix, so only cost is meaningful.
    single = next(iter(acc.by_resource.items())) if len(acc.by_resource) == 1 else None
    resource, figures = single if single else ("", None)
    gpu = figures is not None and is_gpu_resource(resource)
    allocated, used, idle, guarantee, unused_guarantee = (
        [_round_parts(parts, HOUR_PLACES) for parts in figures] if figures else [None] * 5
    )
    return Line(
        key=key,
        unit=unit_of(resource) if figures else "",
        allocated_hours=allocated,
        used_hours=used if gpu else None,
        idle_hours=idle if gpu else None,
        guarantee_hours=guarantee,
        unused_guarantee_hours=unused_guarantee,
        cost=_round_parts(acc.cost, CENT),
        budgets=tuple(uses),
        unpriced_records=acc.unpriced_records,
        exact_cost=_exact(acc.cost),
    )


# ---------------------------------------------------------------- rates


_RateIndex = dict[tuple[str, str], list[Rate]]


def _index_rates(rates: Iterable[Rate]) -> _RateIndex:
    """Group rates by (resource, flavor), sorted by ``valid_from``; reject overlaps.

    Two rates for the same resource and flavor that are valid at the same instant would make the
    price ambiguous, so that raises ChargebackError naming both.
    """
    index: _RateIndex = defaultdict(list)
    for rate in rates:
        _check_aware(rate.valid_from, "rate valid_from")
        if rate.valid_to is not None:
            _check_aware(rate.valid_to, "rate valid_to")
            if rate.valid_to <= rate.valid_from:
                raise ChargebackError(f"rate valid_to must be after valid_from: {rate!r}")
        price = rate.price_per_unit_hour
        if not isinstance(price, Decimal) or not price.is_finite() or price < 0:
            raise ChargebackError(f"rate price must be a finite, non-negative Decimal: {rate!r}")
        index[(rate.resource, rate.flavor)].append(rate)
    for group in index.values():
        group.sort(key=lambda r: r.valid_from)
        for before, after in pairwise(group):
            if before.valid_to is None or before.valid_to > after.valid_from:
                raise ChargebackError(f"overlapping rates: {before!r} and {after!r}")
    return dict(index)


def _valid_at(rates: list[Rate], t: datetime) -> Rate | None:
    for rate in rates:
        if rate.valid_from <= t and (rate.valid_to is None or t < rate.valid_to):
            return rate
    return None


_Piece = tuple[datetime, datetime, Rate | None]


def _price_pieces(record: UsageRecord, a: datetime, b: datetime, index: _RateIndex) -> list[_Piece]:
    """Cut ``[a, b)`` at every rate boundary inside it and price each piece.

    Within a piece no rate starts or ends, so the rate valid at the piece's start is valid on all
    of it: the exact-flavor rate if any, else the generic one, else None (unpriced). Adjacent
    pieces with the same rate are merged.
    """
    exact = index.get((record.resource, record.flavor), []) if record.flavor else []
    generic = index.get((record.resource, ""), [])
    cuts = {a, b}
    for rate in (*exact, *generic):
        for t in (rate.valid_from, rate.valid_to):
            if t is not None and a < t < b:
                cuts.add(t)
    points = sorted(cuts)
    pieces: list[_Piece] = []
    for p, q in pairwise(points):
        rate = _valid_at(exact, p) or _valid_at(generic, p)
        if pieces and pieces[-1][2] is rate:
            pieces[-1] = (pieces[-1][0], q, rate)
        else:
            pieces.append((p, q, rate))
    return pieces


# ---------------------------------------------------------------- rows, freezing, diffs


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
    for key in sorted(before.keys() | after.keys(), key=_key_values):
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


# ---------------------------------------------------------------- helpers


def _check_group_by(group_by: Sequence[str]) -> tuple[str, ...]:
    # A bare string is a Sequence[str] too; "team" would otherwise become ("t", "e", "a", "m").
    if isinstance(group_by, str):
        raise ChargebackError(
            f"group_by must be a sequence of field names, not the string {group_by!r}"
        )
    fields = tuple(group_by)
    for name in fields:
        if name not in GROUP_FIELDS:
            raise ChargebackError(
                f"invalid group_by field {name!r}; allowed: {', '.join(GROUP_FIELDS)}"
            )
    if len(set(fields)) != len(fields):
        raise ChargebackError(f"group_by repeats a field: {fields!r}")
    return fields


def _check_aware(t: datetime, what: str) -> None:
    if not isinstance(t, datetime) or t.utcoffset() is None:
        raise ChargebackError(f"{what} must be a timezone-aware datetime, got {t!r}")


def _check_period(start: datetime, end: datetime, what: str) -> None:
    _check_aware(start, f"{what} start")
    _check_aware(end, f"{what} end")
    if end <= start:
        raise ChargebackError(f"{what} end must be after start: [{start}, {end})")


def _check_record(record: UsageRecord) -> None:
    _check_period(record.start, record.end, "usage record")
    for name in ("allocated_hours", "used_hours", "guarantee_hours", "covered_hours"):
        value = getattr(record, name)
        if value is None and name == "covered_hours":
            continue
        if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
            raise ChargebackError(f"{name} must be a finite, non-negative Decimal: {record!r}")


def _check_budget(budget: Budget) -> None:
    _check_period(budget.start, budget.end, "budget")
    limit = budget.limit_hours
    if not isinstance(limit, Decimal) or not limit.is_finite() or limit <= 0:
        raise ChargebackError(f"budget limit must be a positive Decimal: {budget!r}")


def _key_values(key: Key) -> tuple[str, ...]:
    return tuple(value for _, value in key)


def _record_key(record: UsageRecord) -> tuple[Any, ...]:
    # Every field, so that distinct records never tie and input order never shows through.
    return (
        record.team,
        record.namespace,
        record.resource,
        record.flavor,
        record.cost_center,
        record.start,
        record.end,
        record.allocated_hours,
        record.used_hours,
        record.guarantee_hours,
        record.covered_hours is None,
        record.covered_hours or _ZERO,
    )


def _micros(delta: timedelta) -> int:
    return delta // _MICROSECOND


def _round(value: Fraction, places: Decimal) -> Decimal:
    """Round an exact value to ``places`` (a power of ten) with ROUND_HALF_EVEN."""
    exponent = places.as_tuple().exponent
    assert isinstance(exponent, int)
    # round() on a Fraction rounds half to even: exactly decimal.ROUND_HALF_EVEN, with no
    # intermediate Decimal context that could round first.
    return Decimal(round(value * Fraction(10) ** -exponent)).scaleb(exponent)


def _round_parts(parts: _Parts, places: Decimal) -> Decimal:
    """Round an exact ``{denominator: numerator}`` value like ``_round``.

    With the single denominator 1 the value is one exact Decimal, rounded by ``quantize``;
    otherwise it goes through ``Fraction`` (``_exact``).
    """
    if not parts:
        return _ZERO.quantize(places)
    if len(parts) == 1 and 1 in parts:
        return parts[1].quantize(places, context=_ROUNDING)
    return _round(_exact(parts), places)


def _hours(value: Fraction) -> Decimal:
    return _round(value, HOUR_PLACES)


def _fmt(value: Decimal | None) -> str:
    return "" if value is None else format(value, "f")
