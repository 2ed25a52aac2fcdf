"""Server-rendered chargeback reports: a page (chart + table) and its CSV download.

The figures come from exactly what the REST API uses — ``monitoring.chargeback.build_report``
with the user (so leads, members and viewers get only their teams' lines, admins everything)
and ``ChargebackResult.rows()`` (``monitoring.domain.chargeback.to_rows``) — and the CSV is
written by the API's own ``ChargebackCSVRenderer``: the page, the CSV and
``/api/v1/chargeback/`` always show the same numbers for the same period and grouping.

Period: a calendar month (``month=2025-05``), or ``start`` and ``end`` dates, both *inclusive*
(people pick "1 to 31 May"); dates are UTC days, as in the API. The API's ``end`` is exclusive,
so the page's ``end`` + 1 day is the API's ``end`` (the page links the equivalent API call).
Start/end take precedence over the month; with neither, the current month is shown.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from monitoring import chargeback
from monitoring.api.renderers import ChargebackCSVRenderer
from monitoring.budgets import budget_use
from monitoring.domain.chargeback import (
    COLUMN_DEFINITIONS,
    CSV_COLUMNS,
    DEFAULT_GROUP_BY,
    FIGURE_COLUMNS,
    GROUP_FIELDS,
    ChargebackError,
)
from quotas.models import Team
from quotas.querysets import is_site_admin

CHART_LINES = 20
GROUP_LABELS = {
    "team": "Team",
    "cost_center": "Cost center",
    "resource": "Resource",
    "flavor": "GPU flavor",
    "namespace": "Namespace",
}
FIGURE_LABELS = {
    "unit": "Unit",
    "allocated_hours": "Allocated hours",
    "used_hours": "Used GPU-hours (measured)",
    "idle_hours": "Idle GPU-hours",
    "guarantee_hours": "Guarantee hours",
    "unused_guarantee_hours": "Unused guarantee hours",
    "cost": "Cost",
    "budget_used_pct": "Budget used %",
    "unpriced_records": "Unpriced records",
}


class GroupByField(forms.MultipleChoiceField):
    """Groupings as repeated parameters (``group_by=team&group_by=resource``) or the API's
    comma-separated form (``group_by=team,resource``)."""

    def to_python(self, value):
        values = super().to_python(value)
        return [part.strip() for v in values for part in v.split(",") if part.strip()]

    def validate(self, value):
        super().validate(value)
        if len(set(value)) != len(value):
            raise forms.ValidationError("Each grouping may appear once.", code="repeated")


# The API's MomentField accepts the same years: the period arithmetic (the day after the end,
# the next month) must never leave the calendar.
EARLIEST_DAY = date(1970, 1, 1)
LATEST_DAY = date(9000, 12, 31)


def _in_range(day: date | None) -> date | None:
    if day is not None and not EARLIEST_DAY <= day <= LATEST_DAY:
        raise forms.ValidationError(
            f"Give a date from {EARLIEST_DAY.year} to {LATEST_DAY.year}.", code="out_of_range"
        )
    return day


class ReportForm(forms.Form):
    """The period and grouping of a chargeback report (a GET form)."""

    month = forms.CharField(
        required=False,
        label="Month",
        widget=forms.DateInput(attrs={"type": "month"}),
        help_text="A calendar month (UTC), or leave empty and give start and end.",
    )
    start = forms.DateField(
        required=False,
        label="From",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    end = forms.DateField(
        required=False,
        label="To (inclusive)",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    group_by = GroupByField(
        required=False,
        label="Group by",
        choices=[(name, GROUP_LABELS[name]) for name in GROUP_FIELDS],
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "invalid_choice": "Unknown grouping %(value)s; choose from "
            + ", ".join(GROUP_FIELDS)
            + "."
        },
        help_text="Default: team and resource (a line over several resources shows only cost).",
    )

    def clean_month(self) -> date | None:
        value = (self.cleaned_data.get("month") or "").strip()
        if not value:
            return None
        try:
            month = datetime.strptime(value, "%Y-%m").date()
        except ValueError:
            raise forms.ValidationError("Give the month as YYYY-MM.", code="invalid") from None
        return _in_range(month)

    def clean_start(self) -> date | None:
        return _in_range(self.cleaned_data.get("start"))

    def clean_end(self) -> date | None:
        return _in_range(self.cleaned_data.get("end"))

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if self.errors:
            return data
        if start or end:
            if not start:
                self.add_error("start", "Give a start date too (or clear the end date).")
            elif not end:
                self.add_error("end", "Give an end date too (or clear the start date).")
            elif end < start:
                self.add_error("end", "The end date is before the start date.")
            elif end + timedelta(days=1) - start > chargeback.MAX_PERIOD:
                self.add_error("end", f"A report covers at most {chargeback.MAX_PERIOD.days} days.")
        data["group_by"] = tuple(data.get("group_by") or DEFAULT_GROUP_BY)
        return data

    def period(self, *, today: date) -> tuple[datetime, datetime]:
        """[start, end) in UTC from a valid form: start/end, else the month, else this month."""
        data = self.cleaned_data
        if data.get("start") and data.get("end"):
            start = datetime.combine(data["start"], datetime.min.time(), tzinfo=UTC)
            end = datetime.combine(data["end"], datetime.min.time(), tzinfo=UTC)
            return start, end + timedelta(days=1)
        return chargeback.month_bounds(data.get("month") or today.replace(day=1))


def _chart_value(value: str) -> float | None:
    try:
        return float(Decimal(value)) if value != "" else None
    except InvalidOperation:
        return None


def _chart(rows: list[dict], group_by: tuple[str, ...], currency: str) -> dict | None:
    """Cost per line (or allocated hours when nothing is priced), the CHART_LINES largest."""
    if not rows:
        return None
    priced = any(_chart_value(row["cost"]) for row in rows)
    column = "cost" if priced else "allocated_hours"
    points = [
        (" · ".join(row[f] or "—" for f in group_by) or "total", _chart_value(row[column]))
        for row in rows
    ]
    points = [(label, value) for label, value in points if value is not None]
    if not points:
        return None
    points.sort(key=lambda p: (-p[1], p[0]))
    points = points[:CHART_LINES]
    unit = currency if priced else "hours"
    return {
        "charts": [
            {
                "type": "bar",
                "unit": unit,
                "labels": [label for label, _ in points],
                "datasets": [
                    {
                        "label": f"Cost ({currency})" if priced else "Allocated hours",
                        "data": [round(value, 2) for _, value in points],
                    }
                ],
            }
        ],
        "truncated": len(rows) > CHART_LINES,
        "column": column,
    }


def _api_query(start: datetime, end: datetime, group_by: tuple[str, ...]) -> str:
    return urlencode(
        {
            "start": start.date().isoformat(),
            "end": end.date().isoformat(),
            "group_by": ",".join(group_by),
        }
    )


def _form(request) -> ReportForm:
    """The bound form; with no period given the month field shows the current month."""
    data = request.GET.copy()
    if not any(data.get(name) for name in ("month", "start", "end")):
        data["month"] = f"{timezone.now().astimezone(UTC):%Y-%m}"
    if "group_by" not in data:
        data.setlist("group_by", list(DEFAULT_GROUP_BY))
    return ReportForm(data)


def _report(request, form: ReportForm):
    """Build the report for a valid form; a ChargebackError becomes a form error (None)."""
    start, end = form.period(today=timezone.now().astimezone(UTC).date())
    group_by = form.cleaned_data["group_by"]
    try:
        result = chargeback.build_report(start=start, end=end, group_by=group_by, user=request.user)
    except ChargebackError as e:
        form.add_error(None, str(e))
        return None, start, end, group_by
    return result, start, end, group_by


def _budgets(request, result, start: datetime, end: datetime) -> tuple[list[dict], datetime | None]:
    """The budget table: this month's budget use (``monitoring.budgets.budget_use``, the figure
    the team page, the API, alerts and /metrics show, with its cut-off) when the period is the
    current month; else what each line consumed of each month's budget in the period."""
    now = timezone.now()
    if chargeback.month_bounds(now.astimezone(UTC).date()) != (start, end):
        return result.budget_rows(), None
    teams = Team.objects.visible_to(request.user)
    uses = budget_use(now=now, teams=teams)
    rows = [
        {
            "team": use.team.slug,
            "resource": use.resource,
            "start": use.month_start.isoformat(),
            "limit_hours": format(use.budget_hours, "f"),
            "allocated_hours": format(use.allocated_hours, "f"),
            "used_pct": format(use.percent, "f"),
        }
        for use in uses
    ]
    return rows, (uses[0].cutoff if uses else None)


@login_required
@require_GET
def reports(request):
    """Chargeback for a period, grouped as chosen: a chart, the table and a CSV link."""
    form = _form(request)
    this_month = timezone.now().astimezone(UTC).date().replace(day=1)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    context: dict = {
        "form": form,
        "is_admin": is_site_admin(request.user),
        "quick_months": [
            {"label": "This month (to date)", "value": f"{this_month:%Y-%m}"},
            {"label": f"Last month ({last_month:%B %Y})", "value": f"{last_month:%Y-%m}"},
        ],
    }
    if form.is_valid():
        result, start, end, group_by = _report(request, form)
        if result is not None:
            rows = result.rows()
            query = _api_query(start, end, group_by)
            budgets, budget_cutoff = _budgets(request, result, start, end)
            context.update(
                {
                    "result": result,
                    "rows": rows,
                    "total": result.total_row(),
                    "budgets": budgets,
                    "budget_cutoff": budget_cutoff,
                    "start": start,
                    "end": end,
                    "last_day": end - timedelta(days=1),
                    "group_by": group_by,
                    "group_columns": [
                        {"name": name, "label": GROUP_LABELS[name]} for name in group_by
                    ],
                    "figure_columns": [
                        {
                            "name": name,
                            "label": FIGURE_LABELS[name],
                            "definition": COLUMN_DEFINITIONS[name],
                        }
                        for name in FIGURE_COLUMNS
                    ],
                    "table": [
                        {
                            "keys": [row[name] for name in group_by],
                            "figures": [row[name] for name in FIGURE_COLUMNS],
                            "attrs": [(name.replace("_", "-"), row[name]) for name in CSV_COLUMNS],
                        }
                        for row in rows
                    ],
                    "total_figures": [result.total_row()[name] for name in FIGURE_COLUMNS],
                    "chart": _chart(rows, group_by, result.currency),
                    "csv_query": query,
                    "api_url": f"{reverse('monitoring-api:chargeback')}?{query}",
                    "unpriced": result.report.total.unpriced_records,
                }
            )
    return render(request, "monitoring/reports.html", context)


@login_required
@require_GET
def reports_csv(request):
    """The report as CSV: the API's renderer over the API's rows (columns CSV_COLUMNS).

    An invalid period or grouping answers 400 with ``field,message`` lines, like the API.
    """
    form = _form(request)
    renderer = ChargebackCSVRenderer()
    result = None
    if form.is_valid():
        result, start, end, _ = _report(request, form)
    if result is None:
        errors = {
            "non_field_errors" if field == "__all__" else field: list(messages)
            for field, messages in form.errors.items()
        }
        body = renderer.render({"errors": errors})
        return HttpResponse(body, status=400, content_type="text/csv; charset=utf-8")
    response = HttpResponse(
        renderer.render({"rows": result.rows(), "columns": list(CSV_COLUMNS)}),
        content_type="text/csv; charset=utf-8",
    )
    name = f"chargeback-{start:%Y%m%d}-{end:%Y%m%d}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
