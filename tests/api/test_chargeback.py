"""Chargeback through the API (JSON and CSV), statements, and the database adapter's summing."""

from __future__ import annotations

import csv
import io
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from monitoring import chargeback
from monitoring.domain import chargeback as domain
from monitoring.models import RateCard, UsageRollup
from quotas.models import Budget, Namespace, Team
from tests.base import GPU

pytestmark = pytest.mark.django_db

D = Decimal
H100 = "NVIDIA-H100-80GB-HBM3"
URL = "/api/v1/chargeback/"
MAY = {"start": "2025-05-01", "end": "2025-06-01"}


def day(d: int, month: int = 5, hour: int = 0) -> datetime:
    return datetime(2025, month, d, hour, tzinfo=UTC)


def rollup(team, period, start, resource=GPU, namespace=None, flavor="", a=0, u=0, g=0):
    return UsageRollup.objects.create(
        period=period,
        start=start,
        team=team,
        namespace=namespace or (f"{team.slug}-ml" if team else "stray"),
        resource=resource,
        flavor=flavor,
        allocated_hours=D(a),
        used_hours=D(u),
        guarantee_hours=D(g),
    )


@pytest.fixture
def may(cast):
    """Hand-computed May 2025: GPUs at 2.50/GPU-hour, cores at 0.04/core-hour.

    team-a GPU: day 1 A=48 U=30 G=40, day 2 A=24 U=24 G=40 → allocated 72, used 54, idle 18,
    guarantee 80, unused guarantee 0 + 16 = 16, cost 180.00; budget 100 h → 72 %.
    team-a cpu: 100 core-hours → 4.00. team-b GPU: A=10 U=5 → idle 5, cost 25.00.
    """
    since = datetime(2025, 1, 1, tzinfo=UTC)
    RateCard.objects.create(resource=GPU, price_per_unit_hour=D("2.50"), valid_from=since)
    RateCard.objects.create(resource="cpu", price_per_unit_hour=D("0.04"), valid_from=since)
    rollup(cast.team_a, "day", day(1), a=48, u=30, g=40)
    rollup(cast.team_a, "day", day(2), a=24, u=24, g=40)
    rollup(cast.team_a, "day", day(1), resource="cpu", a=100)
    rollup(cast.team_b, "day", day(1), a=10, u=5)
    Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=D(100))
    return cast


def row(**values) -> dict[str, str]:
    base = dict.fromkeys(domain.CSV_COLUMNS, "")
    return base | {"unpriced_records": "0"} | values


EXPECTED_BY_TEAM_RESOURCE = [
    row(
        team="team-a",
        resource="cpu",
        unit="core-hour",
        allocated_hours="100.0000",
        guarantee_hours="0.0000",
        unused_guarantee_hours="0.0000",
        cost="4.00",
    ),
    row(
        team="team-a",
        resource=GPU,
        unit="GPU-hour",
        allocated_hours="72.0000",
        used_hours="54.0000",
        idle_hours="18.0000",
        guarantee_hours="80.0000",
        unused_guarantee_hours="16.0000",
        cost="180.00",
        budget_used_pct="72.00",
    ),
    row(
        team="team-b",
        resource=GPU,
        unit="GPU-hour",
        allocated_hours="10.0000",
        used_hours="5.0000",
        idle_hours="5.0000",
        guarantee_hours="0.0000",
        unused_guarantee_hours="0.0000",
        cost="25.00",
    ),
]


def test_the_hand_computed_month_comes_out_in_json_and_the_same_in_csv(may, client_as):
    client = client_as("admin")
    response = client.get(URL, MAY | {"group_by": "team,resource"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["rows"] == EXPECTED_BY_TEAM_RESOURCE
    assert body["total"]["cost"] == "209.00"
    assert body["budgets"] == [
        {
            "team": "team-a",
            "resource": GPU,
            "start": "2025-05-01T00:00:00+00:00",
            "end": "2025-06-01T00:00:00+00:00",
            "limit_hours": "100.000",
            "allocated_hours": "72.0000",
            "used_hours": "72.0000",  # the former name of allocated_hours
            "used_pct": "72.00",
        }
    ]
    for extra in ({"format": "csv"}, {}):
        headers = {} if extra else {"HTTP_ACCEPT": "text/csv"}
        as_csv = client.get(URL, MAY | {"group_by": "team,resource"} | extra, **headers)
        assert as_csv.status_code == 200
        assert as_csv["Content-Type"].startswith("text/csv")
        assert "attachment" in as_csv["Content-Disposition"]
        parsed = list(csv.DictReader(io.StringIO(as_csv.content.decode())))
        assert parsed == body["rows"]


def test_the_default_grouping_is_team_and_resource_so_every_line_has_hours(may, client_as):
    body = client_as("admin").get(URL, MAY).json()
    assert body["group_by"] == ["team", "resource"]
    assert [(r["team"], r["resource"], r["allocated_hours"]) for r in body["rows"]] == [
        ("team-a", "cpu", "100.0000"),
        ("team-a", GPU, "72.0000"),
        ("team-b", GPU, "10.0000"),
    ]


def test_grouping_by_team_gives_cost_only_and_the_same_total(may, client_as):
    body = client_as("admin").get(URL, MAY | {"group_by": "team"}).json()
    assert [(r["team"], r["allocated_hours"], r["cost"]) for r in body["rows"]] == [
        ("team-a", "", "184.00"),
        ("team-b", "10.0000", "25.00"),  # a single resource: hours add up
    ]
    assert body["total"]["cost"] == "209.00"


@pytest.mark.parametrize(
    ("role", "teams"),
    [
        ("admin", ["team-a", "team-b"]),
        ("service-chargeback", ["team-a", "team-b"]),
        ("service-all", ["team-a", "team-b"]),
        ("lead", ["team-a"]),
        ("member", ["team-a"]),
        ("viewer", ["team-a"]),
        ("other-lead", ["team-b"]),
        ("dept-lead", ["team-a", "team-b"]),
        ("nobody", []),
    ],
)
def test_each_reader_sees_only_their_teams_rows(may, client_as, role, teams):
    body = client_as(role).get(URL, MAY | {"group_by": "team"}).json()
    assert [r["team"] for r in body["rows"]] == teams
    if teams == ["team-a"]:
        assert body["total"]["cost"] == "184.00"


@pytest.mark.parametrize(("role", "status"), [("anonymous", 401), ("node-agent", 403)])
def test_anonymous_and_node_agents_cannot_read_chargeback(may, client_as, role, status):
    assert client_as(role).get(URL, MAY).status_code == status


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (MAY | {"group_by": "team,planet"}, "group_by"),
        (MAY | {"group_by": "team,team"}, "group_by"),
        ({"start": "2025-06-01", "end": "2025-05-01"}, "end"),
        ({"start": "2025-05-01", "end": "2025-05-01"}, "end"),
        ({"start": "yesterday", "end": "2025-05-01"}, "start"),
        ({"start": "2025-02-30", "end": "2025-05-01"}, "start"),
        ({"start": "2025-05-01"}, "end"),
        ({"start": "2024-01-01", "end": "2025-02-05"}, "end"),
    ],
)
def test_bad_input_is_400_naming_the_field(cast, client_as, params, field):
    response = client_as("admin").get(URL, params)
    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_csv_cells_that_look_like_formulas_are_defused(may, client_as):
    Team.objects.filter(pk=may.team_a.pk).update(cost_center='=HYPERLINK("http://x")')
    response = client_as("admin").get(URL, MAY | {"group_by": "cost_center", "format": "csv"})
    line, _ = csv.DictReader(io.StringIO(response.content.decode()))
    assert line["cost_center"] == '\'=HYPERLINK("http://x")'
    assert (
        client_as("admin")
        .get(URL, MAY | {"group_by": "cost_center"})
        .json()["rows"][0]["cost_center"]
        .startswith("=HYPERLINK")
    )


def test_csv_errors_come_back_as_csv(cast, client_as):
    response = client_as("admin").get(URL, {"start": "x", "end": "y", "format": "csv"})
    assert response.status_code == 400
    assert response.content.decode().splitlines()[0] == "field,message"


def test_the_query_count_does_not_depend_on_the_number_of_teams(may, client_as):
    client = client_as("admin")

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(URL, MAY | {"group_by": "team,resource"}).status_code == 200
        return [q["sql"][:60] for q in queries.captured_queries]

    count()  # the admin check is cached on the user after the first request
    few = count()
    for i in range(6):
        team = Team.objects.create(slug=f"extra-{i}", name=f"Extra {i}")
        Namespace.objects.create(name=f"extra-{i}-ml", team=team)
        Budget.objects.create(team=team, monthly_hours=D(10))
        rollup(team, "day", day(3), a=5)
        rollup(team, "hour", day(3, hour=5), a=1)
    assert len(count()) == len(few), (few, count())


# ---------------------------------------------------------------- statements


def test_a_frozen_month_stays_put_and_late_rollups_are_reported(may, client_as):
    admin = client_as("admin")
    url = reverse("monitoring-api:chargebackstatement-list")
    created = admin.post(url, {"month": "2025-05", "group_by": "team,resource"}, format="json")
    assert created.status_code == 201, created.content
    frozen = created.json()
    assert (frozen["rows"], frozen["late"]) == (EXPECTED_BY_TEAM_RESOURCE, [])
    assert frozen["total_cost"] == "209.00"

    rollup(may.team_a, "day", day(20), a=8, u=8)  # arrives after the month was frozen
    detail = admin.get(frozen["url"]).json()
    assert detail["rows"] == EXPECTED_BY_TEAM_RESOURCE
    assert detail["total_cost"] == "209.00"
    assert detail["late"] == [
        {
            "key": {"team": "team-a", "resource": GPU},
            "kind": "changed",
            "changes": [
                {"column": "allocated_hours", "frozen": "72.0000", "current": "80.0000"},
                {"column": "used_hours", "frozen": "54.0000", "current": "62.0000"},
                {"column": "cost", "frozen": "180.00", "current": "200.00"},
                {"column": "budget_used_pct", "frozen": "72.00", "current": "80.00"},
            ],
        }
    ]
    # A lead sees their team's frozen rows and late changes, nobody else's.
    as_lead = client_as("other-lead").get(frozen["url"]).json()
    assert [r["team"] for r in as_lead["rows"]] == ["team-b"]
    assert (as_lead["late"], as_lead["total_cost"]) == ([], None)


def test_freezing_twice_is_409_and_an_open_month_is_400(may, client_as):
    admin = client_as("admin")
    url = reverse("monitoring-api:chargebackstatement-list")
    assert admin.post(url, {"month": "2025-05"}, format="json").status_code == 201
    again = admin.post(url, {"month": "2025-05"}, format="json")
    assert again.status_code == 409
    future = admin.post(url, {"month": "2999-01"}, format="json")
    assert (future.status_code, list(future.json()["errors"])) == (400, ["detail"])
    malformed = admin.post(url, {"month": "May"}, format="json")
    assert (malformed.status_code, list(malformed.json()["errors"])) == (400, ["month"])
    assert client_as("lead").post(url, {"month": "2025-04"}, format="json").status_code == 403
    assert client_as("service-chargeback").post(url, {"month": "2025-04"}).status_code == 403


# ---------------------------------------------------------------- adapter = pure report on rows


def _random_rollups(cast, rng: random.Random) -> None:
    """Daily rows for 2025-04-27..05-05 and hourly rows for the edge days, with over-use and
    over-guarantee buckets, several namespaces, flavors, cpu and memory, an unassigned one."""
    series = [
        (cast.team_a, "team-a-ml", GPU, H100),
        (cast.team_a, "team-a-ml", GPU, ""),
        (cast.team_a, "team-a-dev", "cpu", ""),
        (cast.team_b, "team-b-ml", GPU, H100),
        (cast.team_b, "team-b-ml", "memory", ""),
        (None, "stray", GPU, H100),
    ]

    def amount(scale: int) -> Decimal:
        return D(rng.randrange(0, scale * 10**6)) / 10**6

    for team, namespace, resource, flavor in series:
        scale = 2**34 if resource == "memory" else 24
        for d in range(9):
            start = day(27, 4) + timedelta(days=d)
            rollup(
                team,
                "day",
                start,
                resource,
                namespace,
                flavor,
                amount(scale),
                amount(scale),
                amount(scale),
            )
        for edge in (day(29, 4), day(3)):
            for h in range(24):
                start = edge + timedelta(hours=h)
                a = amount(scale // 24 or 1)
                rollup(
                    team,
                    "hour",
                    start,
                    resource,
                    namespace,
                    flavor,
                    a,
                    amount(scale // 24),
                    amount(scale // 24),
                )


def _baseline(start, end, group_by, budgets) -> domain.Report:
    """The pure report over the very rollup rows the adapter should read (unsummed)."""
    d0 = (start + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    d1 = end.replace(hour=0, minute=0, second=0, microsecond=0)
    records = []
    for r in UsageRollup.objects.select_related("team"):
        bucket = timedelta(days=1) if r.period == "day" else timedelta(hours=1)
        in_days = d0 <= r.start < d1
        if (r.period == "day") != in_days or r.start + bucket <= start or r.start >= end:
            continue
        records.append(
            domain.UsageRecord(
                start=r.start,
                end=r.start + bucket,
                team=r.team.slug if r.team else "unassigned",
                cost_center=r.team.cost_center if r.team else "",
                namespace=r.namespace,
                resource=r.resource,
                flavor=r.flavor,
                allocated_hours=r.allocated_hours,
                used_hours=r.used_hours,
                guarantee_hours=r.guarantee_hours,
            )
        )
    rates = [
        domain.Rate(c.resource, c.flavor, c.price_per_unit_hour, c.valid_from, c.valid_to)
        for c in RateCard.objects.all()
    ]
    return domain.report(records, rates, start=start, end=end, group_by=group_by, budgets=budgets)


@pytest.mark.parametrize(
    "group_by",
    [
        ("team",),
        ("team", "resource"),
        ("resource", "flavor"),
        ("cost_center",),
        ("team", "namespace", "resource", "flavor"),
        (),
    ],
)
def test_summing_in_sql_gives_exactly_the_figures_of_the_raw_rollups(cast, group_by):
    _random_rollups(cast, random.Random(7))
    since = datetime(2025, 1, 1, tzinfo=UTC)
    change = datetime(2025, 5, 1, 13, 17, tzinfo=UTC)  # a price change in the middle of a day
    RateCard.objects.create(resource=GPU, price_per_unit_hour=D("2.5"), valid_from=since)
    RateCard.objects.create(
        resource=GPU, flavor=H100, price_per_unit_hour=D("3.1"), valid_from=since, valid_to=change
    )
    RateCard.objects.create(
        resource=GPU, flavor=H100, price_per_unit_hour=D("4"), valid_from=change
    )
    RateCard.objects.create(resource="cpu", price_per_unit_hour=D("0.04"), valid_from=since)
    RateCard.objects.create(resource="memory", price_per_unit_hour=D("0.005"), valid_from=since)
    Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=D(300))
    start = datetime(2025, 4, 29, 6, 30, tzinfo=UTC)
    end = datetime(2025, 5, 3, 10, 15, tzinfo=UTC)
    budgets = [
        domain.Budget("team-a", GPU, day(1, 4), day(1, 5), D(300)),
        domain.Budget("team-a", GPU, day(1, 5), day(1, 6), D(300)),
    ]

    ours = chargeback.build_report(start=start, end=end, group_by=group_by).report
    theirs = _baseline(start, end, group_by, budgets if "team" in group_by else [])

    assert len(ours.lines) > (0 if group_by else -1)
    assert domain.to_rows(ours) == domain.to_rows(theirs)
    assert [line.budgets for line in ours.lines] == [line.budgets for line in theirs.lines]
    assert ours.total.exact_cost == theirs.total.exact_cost
    assert domain.to_rows(replace_lines(ours)) == domain.to_rows(replace_lines(theirs))


def replace_lines(report: domain.Report) -> domain.Report:
    from dataclasses import replace

    return replace(report, lines=(report.total,))


# ---------------------------------------------------------------- monthly rollups

SERIES = [
    ("team-a-ml", GPU, H100),
    ("team-a-ml", GPU, ""),
    ("team-a-dev", "cpu", ""),
    ("team-b-ml", GPU, H100),
    ("team-b-ml", "memory", ""),
    ("moving", GPU, H100),  # team-a until 04-15, team-b from 04-16
    ("stray", GPU, H100),  # no team: unassigned
]


def _team_of(cast, namespace: str, start: datetime):
    if namespace == "moving":
        return cast.team_a if start < day(16, 4) else cast.team_b
    return {"team-a": cast.team_a, "team-b": cast.team_b}.get(namespace[:6])


def _days_and_edge_hours(cast, rng: random.Random) -> None:
    """Daily rows for 2025-02-25..07-05 (over-use and over-guarantee days included) and hourly
    rows for 03-01 and 06-30, the edge days of the offset report below."""

    def amount(scale: int) -> Decimal:
        return D(rng.randrange(0, scale * 10**6)) / 10**6

    for namespace, resource, flavor in SERIES:
        scale = 2**34 if resource == "memory" else 24
        for d in range(131):
            start = day(25, 2) + timedelta(days=d)
            team = _team_of(cast, namespace, start)
            a, u, g = amount(scale), amount(scale), amount(scale)
            rollup(team, "day", start, resource, namespace, flavor, a, u, g)
        for edge in (day(1, 3), day(30, 6)):
            for h in range(24):
                a, u, g = amount(scale // 24), amount(scale // 24), amount(scale // 24)
                team = _team_of(cast, namespace, edge)
                rollup(
                    team, "hour", edge + timedelta(hours=h), resource, namespace, flavor, a, u, g
                )


@pytest.fixture
def spring(cast):
    """Rollups for March..June 2025 with rates changing inside April (GPU H100, mid-day), on a
    day boundary inside May (cpu) and on a month boundary (memory, 06-01), and budgets."""
    _days_and_edge_hours(cast, random.Random(3))
    since = datetime(2025, 1, 1, tzinfo=UTC)
    cards = [
        (GPU, "", "2.5", since, None),
        (GPU, H100, "3.1", since, datetime(2025, 4, 16, 13, 17, tzinfo=UTC)),
        (GPU, H100, "4", datetime(2025, 4, 16, 13, 17, tzinfo=UTC), None),
        ("cpu", "", "0.04", since, day(10)),
        ("cpu", "", "0.05", day(10), None),
        ("memory", "", "0.005", since, day(1, 6)),
        ("memory", "", "0.006", day(1, 6), None),
    ]
    for resource, flavor, price, valid_from, valid_to in cards:
        RateCard.objects.create(
            resource=resource,
            flavor=flavor,
            price_per_unit_hour=D(price),
            valid_from=valid_from,
            valid_to=valid_to,
        )
    Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=D(900))
    Budget.objects.create(team=cast.team_b, resource="memory", monthly_hours=D(30000))
    return cast


GROUPINGS = [
    ("team",),
    ("team", "resource"),
    ("team", "namespace", "resource", "flavor"),
    ("cost_center", "resource"),
    ("resource", "flavor"),
    (),
]
WHOLE_MONTHS = (day(1, 3), day(1, 7))
OFFSET = (datetime(2025, 3, 1, 6, 30, tzinfo=UTC), datetime(2025, 6, 30, 10, 15, tzinfo=UTC))


def _figures(result: chargeback.ChargebackResult):
    report = result.report
    exact = report.total.exact_cost
    if connection.vendor == "sqlite":
        # SQLite keeps a decimal column's values as 64-bit floats (15 significant digits):
        # monthly sums of byte-hours lose their last digits when stored. Every figure shown
        # (rows, totals, budgets: the cents and hours above) is still identical; the exact
        # total only to 12 significant digits.
        exact = f"{float(exact):.12g}"
    return (
        result.rows(),
        result.total_row(),
        result.budget_rows(),
        exact,
        [(u.start, u.end, u.hours) for u in report.unpriced],
    )


def _by_days(start, end, group_by) -> domain.Report:
    """The pure report over the raw daily rows of [start, end) (both aligned to days)."""
    records = [
        domain.UsageRecord(
            start=r.start,
            end=r.start + timedelta(days=1),
            team=r.team.slug if r.team else "unassigned",
            cost_center=r.team.cost_center if r.team else "",
            namespace=r.namespace,
            resource=r.resource,
            flavor=r.flavor,
            allocated_hours=r.allocated_hours,
            used_hours=r.used_hours,
            guarantee_hours=r.guarantee_hours,
        )
        for r in UsageRollup.objects.filter(
            period="day", start__gte=start, start__lt=end
        ).select_related("team")
    ]
    rates = [
        domain.Rate(c.resource, c.flavor, c.price_per_unit_hour, c.valid_from, c.valid_to)
        for c in RateCard.objects.all()
    ]
    budgets = [
        domain.Budget(b.team.slug, b.resource, a, z, b.monthly_hours)
        for b in Budget.objects.select_related("team")
        for a, z in chargeback.calendar_months(start, end)
    ]
    return domain.report(
        records,
        rates,
        start=start,
        end=end,
        group_by=group_by,
        budgets=budgets if "team" in group_by else [],
    )


@pytest.mark.parametrize("group_by", GROUPINGS)
def test_whole_months_from_monthly_rollups_give_exactly_the_daily_figures(spring, group_by):
    from monitoring.rollups import rollup_months

    start, end = WHOLE_MONTHS
    from_days = chargeback.build_report(start=start, end=end, group_by=group_by)
    assert domain.to_rows(from_days.report) == domain.to_rows(_by_days(start, end, group_by))

    assert rollup_months(start, end) > 0
    with CaptureQueriesContext(connection) as queries:
        from_months = chargeback.build_report(start=start, end=end, group_by=group_by)

    assert any("'month'" in q["sql"] for q in queries.captured_queries)
    assert len(from_months.rows()) > 0
    assert _figures(from_months) == _figures(from_days)
    assert [line.budgets for line in from_months.report.lines] == [
        line.budgets for line in from_days.report.lines
    ]


@pytest.mark.parametrize("group_by", [("team", "resource"), ("resource", "flavor")])
def test_an_offset_period_reads_months_days_and_hours_with_the_same_figures(spring, group_by):
    from monitoring.rollups import rollup_months

    start, end = OFFSET  # 03-01 06:30 .. 06-30 10:15: hours, days, April + May, days, hours
    from_days = chargeback.build_report(start=start, end=end, group_by=group_by)
    rollup_months(*WHOLE_MONTHS)
    from_months = chargeback.build_report(start=start, end=end, group_by=group_by)

    assert _figures(from_months) == _figures(from_days)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="compares PostgreSQL's fast paths")
@pytest.mark.parametrize("group_by", GROUPINGS)
def test_the_portable_path_gives_exactly_the_postgresql_figures(spring, group_by, monkeypatch):
    """The sums SQLite gets (Python Decimal over ORM rows, monthly rollups summed in Python)
    equal PostgreSQL's width_bucket/unnest/numeric SQL, to the last digit, on the same rows."""
    from monitoring import rollups
    from monitoring.rollups import rollup_months

    start, end = OFFSET
    rollup_months(*WHOLE_MONTHS)
    fast = _figures(chargeback.build_report(start=start, end=end, group_by=group_by))
    fast_months = list(
        UsageRollup.objects.filter(period="month").order_by("id").values_list(
            "start", "namespace", "resource", "flavor", "team_id", "allocated_hours",
            "pending_hours", "used_hours", "guarantee_hours", "covered_hours", "busy_hours",
            "avg_utilization", "samples",
        )
    )  # fmt: skip

    monkeypatch.setattr(chargeback.database, "postgres", lambda using: False)
    monkeypatch.setattr(rollups, "_postgres", lambda: False)
    with CaptureQueriesContext(connection) as queries:
        portable = _figures(chargeback.build_report(start=start, end=end, group_by=group_by))
    assert not any("width_bucket" in q["sql"] or "unnest" in q["sql"] for q in queries)
    assert portable == fast
    assert fast[3] != 0

    rollup_months(*WHOLE_MONTHS)
    portable_months = list(
        UsageRollup.objects.filter(period="month").order_by("id").values_list(
            "start", "namespace", "resource", "flavor", "team_id", "allocated_hours",
            "pending_hours", "used_hours", "guarantee_hours", "covered_hours", "busy_hours",
            "avg_utilization", "samples",
        )
    )  # fmt: skip
    assert sorted(portable_months, key=repr) == sorted(fast_months, key=repr)
    assert len(fast_months) > 10


def test_a_lead_sees_the_same_rows_from_months_and_the_moved_namespace_stays_split(
    spring, client_as
):
    from monitoring.rollups import rollup_months

    params = {"start": "2025-03-01", "end": "2025-07-01", "group_by": "team,namespace,resource"}
    before = client_as("lead").get(URL, params).json()
    rollup_months(*WHOLE_MONTHS)
    after = client_as("lead").get(URL, params).json()

    assert after == before
    assert {(r["team"], r["namespace"]) for r in after["rows"]} == {
        ("team-a", "team-a-ml"),
        ("team-a", "team-a-dev"),
        ("team-a", "moving"),  # 03-01..04-15 only: April's month row per team
    }


def test_a_month_with_a_rate_change_inside_is_read_from_its_days(spring):
    """Month rule: for GPUs April has a rate change inside (read from days), May does not; for
    cpu May has one (days), April does not; memory changes on 06-01, a month boundary."""
    from monitoring.rollups import rollup_months

    start, end = WHOLE_MONTHS
    rollup_months(start, end)
    reference = _figures(chargeback.build_report(start=start, end=end, group_by=("resource",)))

    def tamper(month: int, resource: str) -> bool:
        """Change the monthly rows of a month and resource: does the report notice?"""
        rows = UsageRollup.objects.filter(period="month", start=day(1, month), resource=resource)
        # Doubled (not + 1): visible in byte-hours too, and exactly undone on either database.
        assert rows.update(allocated_hours=F("allocated_hours") * 2) > 0
        changed = _figures(chargeback.build_report(start=start, end=end, group_by=("resource",)))
        rows.update(allocated_hours=F("allocated_hours") / 2)
        return changed != reference

    assert not tamper(4, GPU)  # April GPUs: a rate change inside → days
    assert tamper(5, GPU)  # May GPUs: monthly rows
    assert not tamper(5, "cpu")  # cpu price changes on 05-10 → days
    assert tamper(4, "cpu")
    assert tamper(5, "memory") and tamper(6, "memory")  # the 06-01 change is a boundary


def test_a_month_without_monthly_rollups_is_read_from_its_days(spring):
    from monitoring.rollups import rollup_months

    start, end = WHOLE_MONTHS
    from_days = _figures(chargeback.build_report(start=start, end=end, group_by=("team",)))
    rollup_months(day(1, 4), day(1, 5))  # April only (e.g. before a backfill)
    stale = {"allocated_hours": F("allocated_hours") + 1}  # on purpose, to see them read
    UsageRollup.objects.filter(period="month").update(**stale)

    from_april_months = chargeback.build_report(start=start, end=end, group_by=("team",))

    assert _figures(from_april_months) != from_days  # April came from the (tampered) months
    rollup_months(*WHOLE_MONTHS)
    assert _figures(chargeback.build_report(start=start, end=end, group_by=("team",))) == (
        from_days
    )
