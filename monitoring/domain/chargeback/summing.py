"""Summing records: clip each bucket to the window and add its figures, cost and budget hours.

For one record with bucket ``[s, e)`` and report window ``[S, E)`` (``reporting``'s docstring has
the whole derivation): the bucket is clipped to ``[a, b) = [max(s, S), min(e, E))`` and every
figure scaled by the reduced time weight ``(b - a) / (e - s)``; cost is the allocation priced
piece by piece (``rates.price_pieces``); budget hours are the allocation inside each budget's
period. Records outside the window are skipped.

Invariant: every sum is exact (Decimal in ``exact.EXACT``, the caller's context) and in *record*
units, keyed by line, resource and the weight's denominator: the GiB conversion and the division
by the denominator happen later, once per sum (``lines.accumulate``), so the order of the records
never changes a figure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from .exact import ZERO, round_hours, weight
from .model import Budget, Key, Unpriced, UsageRecord
from .rates import Piece, RateIndex, price_pieces
from .units import is_gpu_resource, scale, unit_of
from .validation import check_record

FIGURES = 5  # allocated, used, idle, guarantee, unused guarantee


@dataclass
class RecordSums:
    """The exact sums of a report's records, in record units (before the GiB conversion).

    ``figures`` and ``cost`` are keyed by (line key, resource, weight denominator), ``budget`` by
    (line key, resource, budget index, denominator); ``unpriced_records`` counts per line the
    records that some stretch of time left unpriced, ``unpriced`` lists those stretches.
    """

    figures: dict[tuple[Key, str, int], list[Decimal]] = field(default_factory=dict)
    cost: dict[tuple[Key, str, int], Decimal] = field(default_factory=dict)
    budget: dict[tuple[Key, str, int, int], Decimal] = field(default_factory=dict)
    unpriced_records: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    unpriced: list[Unpriced] = field(default_factory=list)


def record_values(record: UsageRecord) -> tuple[Decimal, Decimal, Decimal, Decimal, Decimal]:
    """Return (allocated, used, idle, guarantee, unused guarantee) of one whole bucket.

    Raw record units (before clipping and the GiB conversion). Idle and unused guarantee are
    floored at zero here, per bucket; unused guarantee is the guarantee less what the team's
    allocation covered (``covered_hours``, else the record's own allocation); used and idle are
    zero for non-GPU resources.
    """
    allocated, guarantee = record.allocated_hours, record.guarantee_hours
    covered = allocated if record.covered_hours is None else record.covered_hours
    unused_guarantee = guarantee - covered if guarantee > covered else ZERO
    if not is_gpu_resource(record.resource):
        return allocated, ZERO, ZERO, guarantee, unused_guarantee
    used = record.used_hours
    idle = allocated - used if allocated > used else ZERO
    return allocated, used, idle, guarantee, unused_guarantee


def sum_records(
    records: Iterable[UsageRecord],
    *,
    fields: tuple[str, ...],
    rate_index: RateIndex,
    budget_list: tuple[Budget, ...],
    budgets_for: Mapping[tuple[str, str], list[int]],
    start: datetime,
    end: datetime,
) -> RecordSums:
    """Check each record and add its clipped figures, cost and budget hours to the sums.

    ``budgets_for`` maps (team, resource) to the indexes in ``budget_list`` of the budgets whose
    hours the record counts towards (empty when the report does not apply budgets). Price
    pieces are computed once per resource, flavor and clipped bucket. Runs in the caller's
    Decimal context (``exact.EXACT``). One loop on purpose: it runs once per record (some 10^5
    in a month's report), so its steps are not calls of their own.
    """
    out = RecordSums()
    figure_sums, cost_sums, budget_sums = out.figures, out.cost, out.budget
    unpriced_records, unpriced = out.unpriced_records, out.unpriced
    pieces_of: dict[tuple[str, str, datetime, datetime], list[Piece]] = {}
    for record in records:
        check_record(record)
        s, e = record.start, record.end
        a, b = max(s, start), min(e, end)
        if a >= b:
            continue
        resource = record.resource
        key = tuple((name, getattr(record, name)) for name in fields)
        num, den = weight(a, b, s, e)

        sums = figure_sums.get((key, resource, den))
        if sums is None:
            sums = figure_sums[(key, resource, den)] = [ZERO] * FIGURES
        values = record_values(record)
        for i in range(FIGURES):
            sums[i] += values[i] * num if num != 1 else values[i]

        allocated = record.allocated_hours
        pieces_key = (resource, record.flavor, a, b)
        pieces = pieces_of.get(pieces_key)
        if pieces is None:
            pieces = pieces_of[pieces_key] = price_pieces(record, a, b, rate_index)
        priced_in_full = True
        for p, q, rate in pieces:
            pn, pd = weight(p, q, s, e)
            if rate is None:
                priced_in_full = False
                hours = Fraction(allocated * scale(resource)) * Fraction(pn, pd)
                unpriced.append(Unpriced(record, p, q, round_hours(hours), unit_of(resource)))
            else:
                amount = allocated * rate.price_per_unit_hour
                if pn != 1:
                    amount *= pn
                cost_key = (key, resource, pd)
                cost_sums[cost_key] = cost_sums.get(cost_key, ZERO) + amount
        if not priced_in_full:
            unpriced_records[key] += 1

        for i in budgets_for.get((record.team, resource), ()):
            p, q = max(a, budget_list[i].start), min(b, budget_list[i].end)
            if p < q:
                pn, pd = weight(p, q, s, e)
                budget_key = (key, resource, i, pd)
                budget_sums[budget_key] = budget_sums.get(budget_key, ZERO) + (
                    allocated * pn if pn != 1 else allocated
                )
    return out
