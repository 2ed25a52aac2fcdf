"""The team page's share history charts: ``scheduling.history.share_history`` in the shape that
static/js/fairshare.js draws (``{"charts": [{"type", "resource", "unit", "labels",
"datasets": [{"label", "data", "dashed"}]}]}``, as the usage chart of portal/views/teams.py)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from quotas.models import Team
from scheduling.history import MAX_DAYS, Scale, share_history


def _numbers(values: list[Decimal | None]) -> list[float | None]:
    # None stays null: Chart.js leaves a gap where a computation recorded no past use.
    return [None if v is None else float(round(v, 3)) for v in values]


def share_history_chart(
    team: Team, *, scale: Scale, now: datetime | None = None, days: int = MAX_DAYS
) -> dict:
    """One line chart per resource (GPUs first): fair allocation, usage and decayed usage per
    hour over the last ``days`` days, in the chart units of ``scale``; no decayed usage line
    for a resource whose past use was never recorded. ``charts`` is empty before the first
    share computation of the window."""
    history = share_history(team, days=days, now=now, scale=scale)
    labels = [at.isoformat() for at in history.computed_at]
    charts = []
    for series in history.resources:
        datasets = [
            {"label": "Fair allocation", "data": _numbers(series.fair_allocation)},
            {"label": "Usage", "data": _numbers(series.usage)},
        ]
        if series.past_usage is not None:
            datasets.append(
                {"label": "Decayed usage", "data": _numbers(series.past_usage), "dashed": True}
            )
        charts.append(
            {
                "type": "line",
                "resource": series.resource,
                "unit": series.unit,
                "labels": labels,
                "datasets": datasets,
            }
        )
    return {"charts": charts, "days": history.days}
