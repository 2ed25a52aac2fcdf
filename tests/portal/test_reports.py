"""The chargeback report pages: the same numbers as the API (page, CSV and JSON), scoping by
team, period and grouping validation as form errors, the chart data, constant query counts."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from monitoring.models import RateCard, UsageRollup
from quotas.models import Budget, Team
from tests.base import GPU

pytestmark = pytest.mark.django_db

D = Decimal
PAGE = reverse("portal:reports")
CSV = reverse("portal:reports_csv")
API = "/api/v1/chargeback/"
MAY = {"month": "2025-05"}


def day(d: int, month: int = 5) -> datetime:
    return datetime(2025, month, d, tzinfo=UTC)


def rollup(team, start, resource=GPU, flavor="", a=0, u=0, g=0, period="day"):
    return UsageRollup.objects.create(
        period=period,
        start=start,
        team=team,
        namespace=f"{team.slug}-ml" if team else "stray",
        resource=resource,
        flavor=flavor,
        allocated_hours=D(a),
        used_hours=D(u),
        guarantee_hours=D(g),
    )


@pytest.fixture
def may(cast):
    """May 2025 (as tests/api/test_chargeback.py): GPUs at 2.50/GPU-hour, cores at 0.04.

    team-a GPU: allocated 72, used 54 → 180.00; team-a cpu 100 core-hours → 4.00;
    team-b GPU allocated 10 → 25.00; an unassigned namespace 4 GPU-hours → 10.00.
    """
    since = datetime(2025, 1, 1, tzinfo=UTC)
    RateCard.objects.create(resource=GPU, price_per_unit_hour=D("2.50"), valid_from=since)
    RateCard.objects.create(resource="cpu", price_per_unit_hour=D("0.04"), valid_from=since)
    rollup(cast.team_a, day(1), a=48, u=30, g=40, flavor="H100")
    rollup(cast.team_a, day(2), a=24, u=24, g=40, flavor="H100")
    rollup(cast.team_a, day(3), resource="cpu", a=100)
    rollup(cast.team_b, day(3), a=10, u=5, flavor="A100")
    rollup(None, day(4), a=4)
    rollup(cast.team_a, day(6, month=6), a=1000)  # June: outside the period
    Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=D(100))
    return cast


def page_rows(response) -> list[dict]:
    return response.context["rows"] if response.context.get("rows") is not None else []


def csv_rows(content: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(content.decode())))


# --------------------------------------------------------------------------- same numbers


@pytest.mark.parametrize(
    "group_by", ["team", "cost_center", "resource", "flavor", "team,resource", "team,flavor"]
)
def test_the_page_the_csv_and_the_api_show_the_same_numbers(client, may, group_by):
    client.force_login(may.root)
    fields = group_by.split(",")

    page = client.get(PAGE, {**MAY, "group_by": fields})
    download = client.get(CSV, {**MAY, "group_by": fields})
    api = client.get(API, {"start": "2025-05-01", "end": "2025-06-01", "group_by": group_by})
    api_csv = client.get(
        API, {"start": "2025-05-01", "end": "2025-06-01", "group_by": group_by, "format": "csv"}
    )

    assert page.status_code == download.status_code == api.status_code == 200
    assert page_rows(page) == api.json()["rows"]
    assert page.context["total"] == api.json()["total"]
    assert page.context["budgets"] == api.json()["budgets"]
    assert download.content == api_csv.content
    assert download["Content-Disposition"] == api_csv["Content-Disposition"]
    assert download["Content-Type"].startswith("text/csv")


def test_the_table_shows_the_api_strings(client, may):
    client.force_login(may.root)

    response = client.get(PAGE, MAY | {"group_by": "team"})

    body = response.content.decode()
    by_team = {row["team"]: row for row in page_rows(response)}
    assert by_team["team-a"]["cost"] == "184.00"
    assert by_team["team-b"]["cost"] == "25.00"
    assert by_team["unassigned"]["cost"] == "10.00"
    assert response.context["total"]["cost"] == "219.00"
    assert "184.00" in body and "219.00" in body
    assert by_team["team-a"]["budget_used_pct"] == "72.00"


def test_start_and_end_dates_are_inclusive_and_match_the_api_end_plus_one_day(client, may):
    client.force_login(may.root)

    page = client.get(PAGE, {"start": "2025-05-02", "end": "2025-05-03", "group_by": "team"})
    api = client.get(API, {"start": "2025-05-02", "end": "2025-05-04", "group_by": "team"})

    assert page_rows(page) == api.json()["rows"]
    assert {row["team"]: row["allocated_hours"] for row in page_rows(page)} == {
        "team-a": "",  # GPU and cpu lines mixed: no single unit
        "team-b": "10.0000",
    }
    assert page.context["api_url"].endswith("start=2025-05-02&end=2025-05-04&group_by=team")


def test_the_api_style_comma_separated_grouping_is_accepted(client, may):
    client.force_login(may.root)
    response = client.get(PAGE, {**MAY, "group_by": "team,resource"})
    assert response.context["group_by"] == ("team", "resource")


def test_without_parameters_the_current_month_by_team_and_resource_is_shown(client, cast):
    client.force_login(cast.root)

    response = client.get(PAGE)

    assert response.status_code == 200
    assert response.context["group_by"] == ("team", "resource")
    assert response.context["start"].day == 1
    assert b"No usage recorded" in response.content


# --------------------------------------------------------------------------- scoping


@pytest.mark.parametrize(
    ("who", "teams"),
    [
        ("root", {"team-a", "team-b", "unassigned"}),
        ("alice", {"team-a"}),
        ("bob", {"team-a"}),
        ("vic", {"team-a"}),
        ("charlie", {"team-b"}),
        ("dora", {"team-a", "team-b"}),
        ("nobody", set()),
    ],
)
def test_each_person_sees_only_their_teams_lines_on_the_page_and_in_the_csv(
    client, may, who, teams
):
    user = getattr(may, who)
    client.force_login(user)

    page = client.get(PAGE, MAY)
    download = client.get(CSV, MAY)
    api = client.get(API, {"start": "2025-05-01", "end": "2025-06-01"})

    assert {row["team"] for row in page_rows(page)} == teams
    assert {row["team"] for row in csv_rows(download.content)} == teams
    assert page_rows(page) == api.json()["rows"]
    assert page.context["total"] == api.json()["total"]


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    for url in (PAGE, CSV):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"start": "2025-05-10", "end": "2025-05-01"}, "end", "The end date is before the start"),
        ({"start": "2025-05-10"}, "end", "Give an end date too"),
        ({"end": "2025-05-10"}, "start", "Give a start date too"),
        ({"start": "2024-01-01", "end": "2025-12-31"}, "end", "at most 400 days"),
        ({"month": "May"}, "month", "Give the month as YYYY-MM"),
        ({"start": "yesterday", "end": "2025-05-01"}, "start", "Enter a valid date"),
        ({**MAY, "group_by": "planet"}, "group_by", "Unknown grouping planet"),
        ({**MAY, "group_by": "team,team"}, "group_by", "Each grouping may appear once"),
    ],
)
def test_bad_periods_and_groupings_are_form_errors(client, may, params, field, message):
    client.force_login(may.alice)

    page = client.get(PAGE, params)
    download = client.get(CSV, params)

    assert page.status_code == 200
    assert message in " ".join(page.context["form"].errors[field])
    assert "result" not in page.context
    assert 'class="field-error"' in page.content.decode()
    assert download.status_code == 400
    assert csv_rows(download.content)[0]["field"] == field
    assert message in csv_rows(download.content)[0]["message"]


def test_a_rate_card_problem_is_a_form_error_not_a_crash(client, may):
    RateCard.objects.create(
        resource="memory", price_per_unit_hour=D("0.01"), currency="EUR", valid_from=day(1)
    )
    client.force_login(may.root)

    response = client.get(PAGE, MAY)

    assert response.status_code == 200
    assert "rate cards mix currencies" in " ".join(response.context["form"].non_field_errors())


# --------------------------------------------------------------------------- chart


def test_the_chart_data_is_embedded_as_json_for_fairshare_js(client, may):
    client.force_login(may.root)

    response = client.get(PAGE, MAY | {"group_by": "team"})

    body = response.content.decode()
    assert '<script id="report-chart" type="application/json">' in body
    assert 'data-chart-src="report-chart"' in body
    assert "vendor/chart.umd.min.js" in body
    raw = body.split('<script id="report-chart" type="application/json">')[1].split("</script>")[0]
    [chart] = json.loads(raw)["charts"]
    assert chart["labels"] == ["team-a", "team-b", "unassigned"]  # by cost, largest first
    assert chart["datasets"][0]["data"] == [184.0, 25.0, 10.0]
    assert chart["unit"] == "USD"


def test_team_names_in_the_report_are_escaped(client, may):
    Team.objects.filter(pk=may.team_b.pk).update(cost_center="<script>alert(1)</script>")
    client.force_login(may.root)

    body = client.get(PAGE, {**MAY, "group_by": "cost_center"}).content.decode()

    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


# --------------------------------------------------------------------------- query counts


@pytest.mark.parametrize("who", ["root", "alice"])
def test_the_report_runs_a_constant_number_of_queries(
    client, may, django_assert_max_num_queries, who
):
    client.force_login(getattr(may, who))
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(PAGE, MAY).status_code == 200
    few = len(ctx.captured_queries)

    for i in range(30):
        team = Team.objects.create(slug=f"bulk-{i}", name=f"Bulk {i}", parent=may.team_a)
        for d in (1, 2, 3):
            rollup(team, day(d), a=5, u=1)
        Budget.objects.create(team=team, resource=GPU, monthly_hours=D(10))

    with django_assert_max_num_queries(few):
        response = client.get(PAGE, MAY)
    assert len(page_rows(response)) >= 31
