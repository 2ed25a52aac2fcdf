"""Lines: the exact sums gathered per group key, the report total, and their rounding into Lines.

``accumulate`` turns the record sums into one ``Acc`` per line (GiB conversion applied, exact),
``total_of`` adds the lines up, and ``emit`` rounds one of them into a ``Line``: cost to 0.01,
hours to 0.0001, percentages to 0.01, all ROUND_HALF_EVEN.

Invariants: hours are only added up within one resource, so a line covering several resources
reports ``None`` for its hour figures and only its cost; the total is the rounded exact sum of
all lines, so it is the same for every grouping and differs from the sum of rounded line costs by
at most 0.005 per line.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

from .exact import (
    CENT,
    HOUR_PLACES,
    PCT_PLACES,
    Parts,
    add,
    exact,
    merge,
    round_exact,
    round_hours,
    round_parts,
)
from .model import Budget, BudgetUse, Key, Line
from .summing import FIGURES, RecordSums
from .units import is_gpu_resource, scale, unit_of


def new_figures() -> list[Parts]:
    """Five empty exact values: allocated, used, idle, guarantee, unused guarantee."""
    return [{} for _ in range(FIGURES)]


@dataclass
class Acc:
    """Exact figures for one line: five per resource, cost, budget hours by budget index."""

    by_resource: dict[str, list[Parts]] = field(default_factory=dict)
    cost: Parts = field(default_factory=dict)
    unpriced_records: int = 0
    budget_hours: dict[int, Parts] = field(default_factory=dict)


def accumulate(sums: RecordSums) -> dict[Key, Acc]:
    """One exact accumulator per line key, in billing units (runs in ``exact.EXACT``)."""
    accs: dict[Key, Acc] = defaultdict(Acc)
    for (key, resource, den), values in sums.figures.items():
        k = scale(resource)
        figures = accs[key].by_resource.get(resource)
        if figures is None:
            figures = accs[key].by_resource[resource] = new_figures()
        for parts, value in zip(figures, values, strict=True):
            add(parts, den, value * k)
    for (key, resource, den), amount in sums.cost.items():
        add(accs[key].cost, den, amount * scale(resource))
    for (key, resource, i, den), amount in sums.budget.items():
        add(accs[key].budget_hours.setdefault(i, {}), den, amount * scale(resource))
    for key, count in sums.unpriced_records.items():
        accs[key].unpriced_records = count
    return accs


def total_of(accs: dict[Key, Acc]) -> Acc:
    """The exact sum of every line: figures per resource, cost and unpriced records."""
    total = Acc()
    for acc in accs.values():
        for resource, figures in acc.by_resource.items():
            into = total.by_resource.get(resource)
            if into is None:
                into = total.by_resource[resource] = new_figures()
            for target, parts in zip(into, figures, strict=True):
                merge(target, parts)
        merge(total.cost, acc.cost)
        total.unpriced_records += acc.unpriced_records
    return total


def emit(key: Key, acc: Acc, budgets: list[tuple[Budget, Parts]]) -> Line:
    """Quantize one accumulated line; hours only when it covers a single resource."""
    uses = []
    for budget, parts in budgets:
        hours = exact(parts)
        uses.append(
            BudgetUse(
                resource=budget.resource,
                start=budget.start,
                end=budget.end,
                limit_hours=budget.limit_hours,
                used_hours=round_hours(hours),
                used_pct=round_exact(hours * 100 / Fraction(budget.limit_hours), PCT_PLACES),
            )
        )
    # One resource: hours add up. Several: units would mix, so only cost is meaningful.
    single = next(iter(acc.by_resource.items())) if len(acc.by_resource) == 1 else None
    resource, figures = single if single else ("", None)
    gpu = figures is not None and is_gpu_resource(resource)
    allocated, used, idle, guarantee, unused_guarantee = (
        [round_parts(parts, HOUR_PLACES) for parts in figures] if figures else [None] * 5
    )
    return Line(
        key=key,
        unit=unit_of(resource) if figures else "",
        allocated_hours=allocated,
        used_hours=used if gpu else None,
        idle_hours=idle if gpu else None,
        guarantee_hours=guarantee,
        unused_guarantee_hours=unused_guarantee,
        cost=round_parts(acc.cost, CENT),
        budgets=tuple(uses),
        unpriced_records=acc.unpriced_records,
        exact_cost=exact(acc.cost),
    )
