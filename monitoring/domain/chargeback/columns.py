"""The report's vocabulary: the fields a report groups by and the figure columns of every row.

Invariant: every row (page, CSV, API, frozen statement) carries exactly ``CSV_COLUMNS``, in that
order, whatever the grouping; ``COLUMN_DEFINITIONS`` defines each figure column in one sentence,
and the Reports page's help and docs/api.md show these very sentences (a test checks both).
"""

from __future__ import annotations

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
