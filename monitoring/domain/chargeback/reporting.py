"""``report()``: who allocated, used and paid for what in ``[S, E)``, grouped by any subset of
team / cost centre / resource / flavor / namespace.

Units are billing units (``units``): GPU-, core-, GiB- or device-hours; one currency is assumed.

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

Steps 1 to 3 are ``summing``, step 4 is ``lines``; this module validates, strings them together
and picks the budgets of each line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import localcontext
from typing import Any

from .exact import EXACT, ZERO
from .lines import accumulate, emit, total_of
from .model import Budget, Key, Rate, Report, UsageRecord, key_values
from .rates import index_rates
from .summing import sum_records
from .validation import check_budget, check_group_by, check_period


@dataclass(frozen=True)
class _BudgetIndex:
    """A report's budgets (checked) with their indexes by (team, resource) and by team.

    Budgets apply to lines grouped by team only (``used``); otherwise no record counts towards
    any (``for_resource`` is empty) and no line shows one.
    """

    budgets: tuple[Budget, ...]
    used: bool
    for_resource: dict[tuple[str, str], list[int]]
    of_team: dict[str, list[int]]

    @classmethod
    def of(cls, budgets: Iterable[Budget], *, used: bool) -> _BudgetIndex:
        """Check ``budgets`` and index them; ``used``: whether the report applies budgets."""
        budget_list = tuple(budgets)
        for budget in budget_list:
            check_budget(budget)
        budgets_for: dict[tuple[str, str], list[int]] = defaultdict(list)
        budgets_of_team: dict[str, list[int]] = defaultdict(list)
        for i, budget in enumerate(budget_list):
            budgets_for[(budget.team, budget.resource)].append(i)
            budgets_of_team[budget.team].append(i)
        return cls(budget_list, used, budgets_for if used else {}, budgets_of_team)

    def applicable(self, key: Key, start: datetime, end: datetime) -> list[int]:
        """The budgets a line shows: of its team (and resource, if grouped by it) in the window."""
        if not self.used:
            return []
        values = dict(key)
        budget_list = self.budgets
        return [
            i
            for i in self.of_team.get(values["team"], ())
            if values.get("resource", budget_list[i].resource) == budget_list[i].resource
            and budget_list[i].start < end
            and start < budget_list[i].end
        ]


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
         added exactly (Decimal) to sums keyed by line, resource and the weight's denominator
         (``summing.sum_records``).
      3. Budgets apply to lines grouped by team: for each budget of the line's team (and of the
         line's resource, when grouped by resource) the line's allocated hours of that resource
         inside ``[max(start, budget.start), min(end, budget.end))`` are compared to the limit.
      4. Apply the GiB conversion to the sums (exact in Decimal), add up each line, and the
         total as the sum of all lines (``lines.accumulate``, ``lines.total_of``); emit lines
         sorted by key values, quantizing only now (``lines.emit``): a value with the single
         denominator 1 is rounded directly, any other through one exact ``Fraction`` per line
         and figure.

    Invariants: the same inputs in any order give the same report; ``total.cost`` does not depend
    on ``group_by``; ``total.exact_cost`` equals the sum of the lines' ``exact_cost``.
    """
    check_period(start, end, "report")
    fields = check_group_by(group_by)
    rate_index = index_rates(rates)
    index = _BudgetIndex.of(budgets, used="team" in fields)
    with localcontext(EXACT):
        sums = sum_records(
            records,
            fields=fields,
            rate_index=rate_index,
            budget_list=index.budgets,
            budgets_for=index.for_resource,
            start=start,
            end=end,
        )
        accs = accumulate(sums)
        total = total_of(accs)

    lines = tuple(
        emit(
            key,
            acc,
            [
                (index.budgets[i], acc.budget_hours.get(i, {}))
                for i in index.applicable(key, start, end)
            ],
        )
        for key, acc in sorted(accs.items(), key=lambda item: key_values(item[0]))
    )
    unpriced = sorted(sums.unpriced, key=lambda u: (u.start, u.end, _record_key(u.record)))
    return Report(
        start=start,
        end=end,
        group_by=fields,
        lines=lines,
        total=emit((), total, []),
        unpriced=tuple(unpriced),
    )


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
        record.covered_hours or ZERO,
    )
