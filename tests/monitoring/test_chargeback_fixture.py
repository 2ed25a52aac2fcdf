"""A hand-computed chargeback, end to end: pods and GPU samples → rollups → the report, asserted
literally through the service, the CSV and the API (and the Reports page); the column
definitions are the docs' and the page's; and each figure (budget use, chargeback hours) is the
same on every surface: team page, Reports, CSV, API, alerts and their email, /metrics.

The world (UTC, collections every 30 min, GPU readings every 10 min), three hours
H0 = 05-14 23:00, H1 = 05-15 00:00, H2 = 05-15 01:00, rolled up hour by hour as the job does:

* team-a (GPU guarantee 5): pod ``train`` in team-a-ml, 4 H100s, H0-H2, each GPU read at 50 %;
  pod ``eval`` in team-a-dev, 2 H100s, H1 only, no GPU readings (idle).
* team-b (GPU guarantee 2): pod ``probe`` in team-b-ml, 1 H100, H0 only, read at 100 %.
  A temporary grant raises team-b's guarantee to 6 for H1 (window 00:00-01:00), approved by an
  admin and opened and closed by ``expire_temporary_quota``.
* Rate card for nvidia.com/gpu: 2.00 per GPU-hour until 05-15 00:00, then 3.00.
* team-a has a GPU budget of 100 GPU-hours a month.

By hand (GPU-hours):

| team   | allocated       | used              | idle    | guarantee  | unused guarantee      | cost                        |
|--------|-----------------|-------------------|---------|------------|-----------------------|-----------------------------|
| team-a | 4 + 6 + 4 = 14  | 4 × 0.5 × 3 = 6   | 14-6 = 8| 5 × 3 = 15 | (5-4)+(5-5)+(5-4) = 2 | 4×2 + 6×3 + 4×3 = 38.00     |
| team-b | 1               | 1 × 1.0 × 1 = 1   | 0       | 2+6+2 = 10 | (2-1)+(6-0)+(2-0) = 9 | 1×2 = 2.00                  |
| total  | 15              | 7                 | 8       | 25         | 11                    | 40.00                       |

team-a's budget: 14 of 100 GPU-hours = 14.00 %. Unused guarantee is per team and hour: team-a's
guarantee row (team-a-dev, flavor "") has no allocation of its own, its pods' H100 rows have no
guarantee; the team's 4-6 GPUs cover 4-5 of its 5 guaranteed each hour.
"""  # noqa: E501

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.core import mail
from django.urls import reverse

from monitoring import budgets, chargeback, rollups
from monitoring.domain.chargeback import COLUMN_DEFINITIONS, CSV_COLUMNS
from monitoring.models import GpuSample, RateCard, UsageSample
from quotas import decisions, grants
from quotas.models import Budget, Namespace, TeamQuota

pytestmark = pytest.mark.django_db

D = Decimal
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
H0 = datetime(2025, 5, 14, 23, tzinfo=UTC)
H1, H2, END = H0 + timedelta(hours=1), H0 + timedelta(hours=2), H0 + timedelta(hours=3)
NOW = END + timedelta(minutes=30)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def row(**values) -> dict[str, str]:
    return dict.fromkeys(CSV_COLUMNS, "") | {"unpriced_records": "0"} | values


EXPECTED = [
    row(
        team="team-a",
        resource=GPU,
        unit="GPU-hour",
        allocated_hours="14.0000",
        used_hours="6.0000",
        idle_hours="8.0000",
        guarantee_hours="15.0000",
        unused_guarantee_hours="2.0000",
        cost="38.00",
        budget_used_pct="14.00",
    ),
    row(
        team="team-b",
        resource=GPU,
        unit="GPU-hour",
        allocated_hours="1.0000",
        used_hours="1.0000",
        idle_hours="0.0000",
        guarantee_hours="10.0000",
        unused_guarantee_hours="9.0000",
        cost="2.00",
    ),
]
EXPECTED_TOTAL = row(
    unit="GPU-hour",
    allocated_hours="15.0000",
    used_hours="7.0000",
    idle_hours="8.0000",
    guarantee_hours="25.0000",
    unused_guarantee_hours="11.0000",
    cost="40.00",
)


def _pod(team, namespace, gpus, start, end):
    moment = start
    while moment < end:
        UsageSample.objects.create(
            taken_at=moment,
            team=team,
            namespace=namespace,
            resource=GPU,
            flavor=H100,
            allocated=D(gpus),
        )
        moment += timedelta(minutes=30)


def _gpu(uuid, team, namespace, util, start, end):
    moment = start
    while moment < end:
        GpuSample.objects.create(
            taken_at=moment,
            node="gpu-1",
            uuid=uuid,
            model="NVIDIA H100 80GB HBM3",
            util_gpu=util,
            namespace=namespace,
            pod="p",
            team=team,
        )
        moment += timedelta(minutes=10)
    # The pod is gone: the GPU reads idle with no pod, which ends the last reading.
    GpuSample.objects.create(
        taken_at=end, node="gpu-1", uuid=uuid, model="NVIDIA H100 80GB HBM3", util_gpu=0
    )


@pytest.fixture
def world(cast, settings):
    settings.CELERY_BEAT_SCHEDULE = {
        "collect-usage": {
            "task": "monitoring.tasks.collect_usage",
            "schedule": timedelta(minutes=30),
        }
    }
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 600
    settings.FAIRSHARE_WEBHOOK_URL = ""
    a, b = cast.team_a, cast.team_b
    TeamQuota.objects.filter(team=a, resource=GPU).update(guarantee=D(5))
    TeamQuota.objects.filter(team=b, resource=GPU).update(guarantee=D(2))
    Namespace.objects.create(name="team-a-dev", team=a)
    since = datetime(2025, 1, 1, tzinfo=UTC)
    RateCard.objects.create(resource=GPU, price_per_unit_hour=D(2), valid_from=since, valid_to=H1)
    RateCard.objects.create(resource=GPU, price_per_unit_hour=D(3), valid_from=H1)
    Budget.objects.create(team=a, resource=GPU, monthly_hours=D(100))

    _pod(a, "team-a-ml", 4, H0, END)
    _pod(a, "team-a-dev", 2, H1, H2)
    _pod(b, "team-b-ml", 1, H0, H1)
    for i in range(4):
        _gpu(f"GPU-a{i}", a, "team-a-ml", 50, H0, END)
    _gpu("GPU-b0", b, "team-b-ml", 100, H0, H1)

    grant = decisions.submit_request(
        team=b,
        requester=cast.charlie,
        lines=[{"resource": GPU, "guarantee": "6", "limit": "60"}],
        justification="An evaluation hour.",
        window_start=H1,
        window_end=H2,
        now=H0 - timedelta(hours=1),
    )
    decisions.approve_request(grant.pk, approver=cast.root, now=H0 - timedelta(hours=1))

    # Hour by hour, as the hourly job does, with the grant opened and closed on time.
    for hour in (H0, H1, H2):
        grants.expire_temporary_quota(now=hour)
        rollups.rollup_usage(start=hour, end=hour + timedelta(hours=1), now=NOW)
    grants.expire_temporary_quota(now=END)
    return cast


def test_the_temporary_grant_was_applied_for_its_hour_only(world):
    guarantees = TeamQuota.objects.get(team=world.team_b, resource=GPU).guarantee
    assert guarantees == D(2)  # reverted at its end


def test_the_service_gives_the_hand_computed_table(world):
    result = chargeback.build_report(start=H0, end=END, group_by=("team", "resource"))

    assert result.rows() == EXPECTED
    assert result.total_row() == EXPECTED_TOTAL
    assert result.currency == "USD"


def test_the_api_and_its_csv_give_the_hand_computed_table(world, client):
    client.force_login(world.root)
    params = {"start": "2025-05-14T23:00:00Z", "end": "2025-05-15T02:00:00Z"}

    body = client.get("/api/v1/chargeback/", params).json()  # default grouping: team, resource
    download = client.get("/api/v1/chargeback/", params | {"format": "csv"})

    assert body["group_by"] == ["team", "resource"]
    assert body["rows"] == EXPECTED
    assert body["total"] == EXPECTED_TOTAL
    assert list(csv.DictReader(io.StringIO(download.content.decode()))) == EXPECTED


def test_the_reports_page_and_its_csv_give_the_hand_computed_table(world, client):
    # Whole days (the page's periods): nothing else happened on those days.
    client.force_login(world.root)
    params = {"start": "2025-05-14", "end": "2025-05-15"}

    page = client.get(reverse("portal:reports"), params)
    download = client.get(reverse("portal:reports_csv"), params)

    assert [dict(line) for line in report_lines(page.content.decode())] == [
        {name.replace("_", "-"): value for name, value in expected.items()} for expected in EXPECTED
    ]
    assert list(csv.DictReader(io.StringIO(download.content.decode()))) == EXPECTED


class _Lines(HTMLParser):
    """The ``data-*`` attributes of elements with a given class (the walk reads the same)."""

    def __init__(self, css_class: str):
        super().__init__()
        self.css_class, self.found = css_class, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.css_class in (attrs.get("class") or "").split():
            self.found.append({k[5:]: v for k, v in attrs.items() if k.startswith("data-")})


def data_of(html: str, css_class: str) -> list[dict[str, str]]:
    parser = _Lines(css_class)
    parser.feed(html)
    return parser.found


def report_lines(html: str) -> list[dict[str, str]]:
    return data_of(html, "report-line")


# ------------------------------------------------------------------ definitions


def test_every_figure_column_has_one_definition_shown_on_the_page_and_in_the_docs(world, client):
    client.force_login(world.root)
    page = client.get(reverse("portal:reports"), {"start": "2025-05-14", "end": "2025-05-15"})
    html = page.content.decode()
    docs = DOCS.read_text()

    assert set(COLUMN_DEFINITIONS) == set(CSV_COLUMNS) - {
        "team",
        "cost_center",
        "resource",
        "flavor",
        "namespace",
    }
    for name, definition in COLUMN_DEFINITIONS.items():
        assert f"* `{name}`: {definition}\n" in docs, name
        shown = re.search(rf'<dd data-definition="{name}">(.*?)</dd>', html)
        assert shown is not None, name
        assert shown.group(1).replace("&#x27;", "'") == definition


# ------------------------------------------------------------------ every surface, one figure


@pytest.fixture
def at_now(monkeypatch, world, settings):
    """The clock at NOW (half an hour after the last rolled-up hour), team-a's budget 16 h."""
    from django.utils import timezone

    settings.FAIRSHARE_METRICS_TOKEN = ""
    settings.FAIRSHARE_BUDGET_THRESHOLDS = [80, 100]
    Budget.objects.filter(team=world.team_a).update(monthly_hours=D(16))
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return world


def _metrics(client) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_budget_use_is_the_same_on_every_surface(at_now, client):
    # 14 of 16 GPU-hours = 87.50 %, counted up to 02:00, the end of the newest rolled-up hour
    # (the raw samples of 02:00-02:30 are in no surface yet).
    client.force_login(at_now.root)
    expected = {
        "team": "team-a",
        "resource": GPU,
        "allocated-hours": "14.0000",
        "budget-hours": "16.000",
        "percent": "87.50",
        "cutoff": "2025-05-15T02:00:00+00:00",
    }

    (use,) = budgets.budget_use()
    team_page = data_of(
        client.get(reverse("portal:team", args=["team-a"])).content.decode(), "budget-use"
    )
    reports = data_of(client.get(reverse("portal:reports")).content.decode(), "budget-use")
    api = client.get("/api/v1/budget-use/", {"team": "team-a"}).json()
    metrics = _metrics(client)
    alerts = budgets.check_budgets()

    assert (use.allocated_hours, use.budget_hours, use.percent, use.cutoff) == (
        D("14.0000"),
        D(16),
        D("87.50"),
        datetime(2025, 5, 15, 2, tzinfo=UTC),
    )
    assert team_page == [expected]
    assert reports == [expected | {"month": "2025-05"}]
    assert api == {
        "month_start": "2025-05-01T00:00:00+00:00",
        "cutoff": "2025-05-15T02:00:00+00:00",
        "results": [
            {
                "team": "team-a",
                "resource": GPU,
                "unit": "GPU-hour",
                "month": "2025-05",
                "allocated_hours": "14.0000",
                "budget_hours": "16.000",
                "percent": "87.50",
            }
        ],
    }
    labels = (("resource", GPU), ("team", "team-a"))
    assert metrics[("fairshare_budget_allocated_hours", labels)] == 14.0
    assert metrics[("fairshare_budget_used_hours", labels)] == 14.0
    assert metrics[("fairshare_budget_hours", labels)] == 16.0
    assert metrics[("fairshare_budget_cutoff_timestamp_seconds", ())] == use.cutoff.timestamp()
    assert [(a.threshold, a.allocated_hours) for a in alerts] == [(80, D("14.0000"))]
    assert "allocated 14.0 of its 16.0 nvidia.com/gpu GPU-hours" in mail.outbox[-1].body
    assert "(87.50 %, the 80 % threshold), counted up to 2025-05-15 02:00 UTC" in (
        mail.outbox[-1].body
    )


def test_a_lead_sees_only_their_teams_budget_use_on_every_surface(at_now, client):
    Budget.objects.create(team=at_now.team_b, resource=GPU, monthly_hours=D(50))
    client.force_login(at_now.charlie)  # team-b's lead

    reports = data_of(client.get(reverse("portal:reports")).content.decode(), "budget-use")
    api = client.get("/api/v1/budget-use/").json()["results"]

    assert [(b["team"], b["allocated-hours"], b["percent"]) for b in reports] == [
        ("team-b", "1.0000", "2.00")
    ]
    assert [(b["team"], b["allocated_hours"], b["percent"]) for b in api] == [
        ("team-b", "1.0000", "2.00")
    ]
    assert client.get("/api/v1/budget-use/", {"team": "team-a"}).status_code == 404
    assert client.get(reverse("portal:team", args=["team-a"])).status_code == 404


def test_chargeback_hours_are_the_same_on_every_surface(at_now, client):
    # This month's report (the page's default: this month, by team and resource), its CSV, the
    # API and its CSV: the hand-computed lines, unused guarantee included.
    client.force_login(at_now.root)
    may = {"start": "2025-05-01", "end": "2025-06-01"}

    page = report_lines(client.get(reverse("portal:reports")).content.decode())
    page_csv = client.get(reverse("portal:reports_csv"))
    api = client.get("/api/v1/chargeback/", may).json()
    api_csv = client.get("/api/v1/chargeback/", may | {"format": "csv"})
    service = chargeback.build_report(
        start=datetime(2025, 5, 1, tzinfo=UTC),
        end=datetime(2025, 6, 1, tzinfo=UTC),
        group_by=("team", "resource"),
    ).rows()

    figures = ["allocated_hours", "used_hours", "guarantee_hours", "unused_guarantee_hours"]
    expected = [[r["team"], *(r[f] for f in figures), r["cost"]] for r in EXPECTED]
    dashed = [f.replace("_", "-") for f in figures]
    assert [[r["team"], *(r[f] for f in dashed), r["cost"]] for r in page] == expected
    for rows in (
        service,
        api["rows"],
        list(csv.DictReader(io.StringIO(page_csv.content.decode()))),
        list(csv.DictReader(io.StringIO(api_csv.content.decode()))),
    ):
        assert [[r["team"], *(r[f] for f in figures), r["cost"]] for r in rows] == expected
