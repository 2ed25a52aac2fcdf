"""The dashboard's presenter alone (portal.dashboard): what each viewer's dashboard holds, without
HTTP or templates."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from monitoring.models import UsageSample
from portal import dashboard
from quotas.models import Team

GPU = "nvidia.com/gpu"


def slugs(context):
    return [row["slug"] for row in context["rows"]]


def cell(row, resource=GPU):
    return next(c for c in row["resources"] if c["resource"] == resource)


@pytest.mark.django_db
def test_a_lead_sees_only_their_team_and_no_cluster_wide_guarantees(cast):
    lead = dashboard.dashboard_context(cast.alice)
    assert slugs(lead) == ["team-a"]
    (row,) = lead["rows"]
    assert row["role"] == "lead" and not row["parent_visible"]
    assert (cell(row)["guarantee"], cell(row)["limit"]) == (Decimal(20), Decimal(40))
    gpus = next(r for r in lead["capacity_rows"] if r["resource"] == GPU)
    assert (gpus["capacity"], gpus["usable"], gpus["guaranteed"]) == (100, 90, None)
    assert not lead["is_admin"]


@pytest.mark.django_db
def test_an_admin_sees_the_tree_and_what_is_committed(cast):
    admin = dashboard.dashboard_context(cast.root)
    assert slugs(admin) == ["dept-x", "team-a", "team-b"]  # the department, then its teams
    assert admin["tree"] and admin["sort"] == "team" and admin["team_count"] == 3
    gpus = next(r for r in admin["capacity_rows"] if r["resource"] == GPU)
    assert gpus["guaranteed"] == 50  # the department counts its teams' 20 + 30 once


@pytest.mark.django_db
def test_usage_now_fills_the_cells_and_flags_a_team_over_its_limit(cast):
    now = timezone.now()
    for team, namespace, allocated in (
        (cast.team_a, "team-a-ml", 44),
        (cast.team_b, "team-b-ml", 5),
    ):
        UsageSample.objects.create(
            taken_at=now, team=team, namespace=namespace, resource=GPU, flavor="",
            allocated=Decimal(allocated), pending=Decimal(2),
        )  # fmt: skip
    rows = {row["slug"]: row for row in dashboard.dashboard_context(cast.root)["rows"]}
    a, b = cell(rows["team-a"]), cell(rows["team-b"])
    assert (a["allocated"], a["pending"], a["over"], a["scale"]) == (44, 2, True, 40)
    assert (b["allocated"], b["over"]) == (5, False)
    assert rows["team-a"]["gpu_allocated"] == 44
    assert cell(rows["dept-x"])["allocated"] == 49  # a department: its subtree's


@pytest.mark.django_db
def test_sorting_is_server_side_and_an_unknown_sort_is_the_tree(cast):
    by_weight = dashboard.dashboard_context(cast.root, sort="-weight")
    assert slugs(by_weight) == ["team-b", "dept-x", "team-a"] and not by_weight["tree"]
    assert dashboard.dashboard_context(cast.root, sort="'; drop")["sort"] == "team"


def test_the_chart_orders_by_dominant_share_and_says_when_it_left_teams_out():
    snap = lambda d, f: SimpleNamespace(dominant_share=d, fair_share=f)  # noqa: E731
    shared = [(f"t{i:02d}", snap(i / 100, 0.5)) for i in range(dashboard.CHART_TEAMS + 2)]
    chart, truncated = dashboard.share_chart(shared)
    assert truncated and len(chart["labels"]) == dashboard.CHART_TEAMS
    assert chart["labels"][:2] == ["t31", "t30"]
    assert chart["datasets"][0]["data"][0] == 31.0 and chart["datasets"][1]["data"][0] == 50.0
    assert dashboard.share_chart(shared[:3]) == (
        {
            "type": "bar",
            "unit": "%",
            "labels": ["t02", "t01", "t00"],
            "datasets": [
                {"label": "Dominant share now", "data": [2.0, 1.0, 0.0]},
                {"label": "Fair share (DRF)", "data": [50.0, 50.0, 50.0]},
            ],
        },
        False,
    )


@pytest.mark.django_db
def test_the_number_of_queries_does_not_grow_with_the_teams(cast):
    def count():
        with CaptureQueriesContext(connection) as queries:
            context = dashboard.dashboard_context(cast.root)
            list(context["rows"])
        return len(queries)

    count()  # warm: one-off lookups (content types, caches) are not the page's
    few = count()
    for i in range(40):
        Team.objects.create(slug=f"bulk-{i:02d}", name=f"Bulk {i}", parent=cast.dept)
    assert count() == few
