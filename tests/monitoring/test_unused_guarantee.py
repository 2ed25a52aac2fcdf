"""Unused guarantee = guarantee - what the team's allocation covered, per team, resource and hour.

The guarantee sits on one rollup row per team (its first namespace, flavor "") while GPUs are
allocated on rows of their product: a per-row min(guarantee, allocated) never saw the allocation
and reported the whole guarantee as unused (issue 29).
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.apps import apps

from monitoring import chargeback, rollups
from monitoring.models import UsageRollup, UsageSample
from quotas.models import Namespace

pytestmark = pytest.mark.django_db

D = Decimal
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


def at(hour, minute=0):
    return datetime(2025, 5, 1, hour, minute, tzinfo=UTC)


@pytest.fixture
def collected(cast, settings):
    """team-a (GPU guarantee 20) runs 6 H100s in team-a-ml and 4 in team-a-dev from 10:00 to
    12:00, collected every 30 min; team-b (guarantee 30) runs nothing."""
    settings.CELERY_BEAT_SCHEDULE = {
        "collect-usage": {
            "task": "monitoring.tasks.collect_usage",
            "schedule": timedelta(minutes=30),
        }
    }
    Namespace.objects.create(name="team-a-dev", team=cast.team_a)
    for minute in range(0, 120, 30):
        when = at(10) + timedelta(minutes=minute)
        for namespace, gpus in (("team-a-ml", 6), ("team-a-dev", 4)):
            UsageSample.objects.create(
                taken_at=when,
                team=cast.team_a,
                namespace=namespace,
                resource=GPU,
                flavor=H100,
                allocated=D(gpus),
            )
    rollups.rollup_usage(start=at(10), end=at(12), now=at(12, 30))
    return cast


def covered(period):
    return sorted(
        (r.start, r.namespace, r.flavor, r.team.slug, r.guarantee_hours, r.covered_hours)
        for r in UsageRollup.objects.filter(period=period, guarantee_hours__gt=0)
    )


def test_the_rollup_covers_a_guarantee_with_the_teams_allocation_in_every_namespace(collected):
    # team-a: min(20, 6 + 4) = 10 GPU-hours covered each hour, on its guarantee row
    # (team-a-dev sorts first); team-b allocates nothing and covers nothing.
    assert covered("hour") == [
        (at(10), "team-a-dev", "", "team-a", D(20), D(10)),
        (at(10), "team-b-ml", "", "team-b", D(30), D(0)),
        (at(11), "team-a-dev", "", "team-a", D(20), D(10)),
        (at(11), "team-b-ml", "", "team-b", D(30), D(0)),
    ]
    assert covered("day") == [
        (at(0), "team-a-dev", "", "team-a", D(40), D(20)),
        (at(0), "team-b-ml", "", "team-b", D(60), D(0)),
    ]
    assert covered("month") == covered("day")


@pytest.mark.parametrize(
    "group_by",
    [("team",), ("team", "resource"), ("team", "namespace", "resource", "flavor")],
)
def test_unused_guarantee_is_the_guarantee_less_the_teams_allocation(collected, group_by):
    start, end = at(0), at(0) + timedelta(days=1)
    report = chargeback.build_report(start=start, end=end, group_by=group_by).report
    unused = {
        (line.value("team"), line.value("namespace"), line.value("flavor")): (
            line.guarantee_hours,
            line.unused_guarantee_hours,
        )
        for line in report.lines
    }

    if "namespace" in group_by:
        # The guarantee row's line (no allocation of its own) carries the team's guarantee and
        # what all its namespaces covered; the allocation lines have no guarantee.
        assert unused[("team-a", "team-a-dev", "")] == (D(40), D(20))
        assert unused[("team-a", "team-a-dev", H100)] == (D(0), D(0))
        assert unused[("team-a", "team-a-ml", H100)] == (D(0), D(0))
    else:
        # 20 GPUs x 2 h guaranteed, 10 GPUs x 2 h allocated: 20 GPU-hours unused, not 40.
        assert unused[("team-a", "", "")] == (D(40), D(20))
    team_b = ("team-b", "team-b-ml", "") if "namespace" in group_by else ("team-b", "", "")
    assert unused[team_b] == (D(60), D(60))
    assert report.total.unused_guarantee_hours == D(80)


def test_the_migration_backfills_covered_hours_per_team_and_hour(collected):
    # Rows as they were before: no covered hours anywhere.
    UsageRollup.objects.update(covered_hours=None)
    before = chargeback.build_report(start=at(0), end=at(0) + timedelta(days=1), group_by=("team",))
    assert before.report.lines[0].unused_guarantee_hours == D(40)  # the bug: all of it unused

    migration = importlib.import_module("monitoring.migrations.0006_covered_hours_per_team")
    migration.backfill(apps, None)

    assert covered("hour")[0][-1] == D(10)
    assert covered("day")[0][-1] == D(20)
    assert covered("month")[0][-1] == D(20)
    after = chargeback.build_report(start=at(0), end=at(0) + timedelta(days=1), group_by=("team",))
    assert after.report.lines[0].unused_guarantee_hours == D(20)


def test_the_migration_covers_days_whose_hours_were_pruned_per_day(collected):
    UsageRollup.objects.update(covered_hours=None)
    UsageRollup.objects.filter(period="hour").delete()

    importlib.import_module("monitoring.migrations.0006_covered_hours_per_team").backfill(
        apps, None
    )

    # min(40 guaranteed, 20 allocated that day).
    assert covered("day") == [
        (at(0), "team-a-dev", "", "team-a", D(40), D(20)),
        (at(0), "team-b-ml", "", "team-b", D(60), D(0)),
    ]
