"""Budgets: budget use (allocated hours this month, up to the newest rolled-up hour) crosses
80 % and 100 % → one alert (and one email) each."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from monitoring import budgets
from monitoring.models import BudgetAlert, UsageRollup, UsageSample
from quotas.models import Budget

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
NOW = datetime(2025, 5, 20, 12, 30, tzinfo=UTC)
D = Decimal


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.FAIRSHARE_BUDGET_THRESHOLDS = [80, 100]
    settings.FAIRSHARE_WEBHOOK_URL = ""
    settings.CELERY_BEAT_SCHEDULE = {
        "collect-usage": {
            "task": "monitoring.tasks.collect_usage",
            "schedule": timedelta(minutes=30),
        }
    }


@pytest.fixture
def budget(cast):
    return Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=Decimal(100))


def rolled(team, start, hours, *, namespace="team-a-ml", resource=GPU):
    """An hourly rollup, and its day's row grown by as much (as the rollup job writes both)."""
    UsageRollup.objects.create(
        period="hour",
        start=start,
        team=team,
        namespace=namespace,
        resource=resource,
        flavor=H100,
        allocated_hours=Decimal(hours),
    )
    day, _ = UsageRollup.objects.get_or_create(
        period="day",
        start=start.replace(hour=0),
        namespace=namespace,
        resource=resource,
        flavor=H100,
        defaults={"team": team},
    )
    day.allocated_hours += Decimal(hours)
    day.save()


def test_it_stays_quiet_under_80_percent(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 79)
    rolled(budget.team, datetime(2025, 4, 30, 9, tzinfo=UTC), 500)  # last month
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 500, resource="cpu")

    assert budgets.check_budgets(now=NOW) == []
    assert not BudgetAlert.objects.exists()
    assert mail.outbox == []


def test_it_alerts_once_at_80_percent_counting_rolled_up_hours_only(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 79)
    rolled(budget.team, datetime(2025, 5, 20, 11, tzinfo=UTC), 2)  # the newest rolled-up hour
    # 4 GPUs from 12:00 to now (12:30): not rolled up yet, so not counted anywhere yet.
    UsageSample.objects.create(
        taken_at=NOW - timedelta(minutes=30),
        team=budget.team,
        namespace="team-a-ml",
        resource=GPU,
        flavor=H100,
        allocated=Decimal(4),
    )

    created = budgets.check_budgets(now=NOW)
    again = budgets.check_budgets(now=NOW + timedelta(minutes=5))

    alert = BudgetAlert.objects.get()
    assert created == [alert]
    assert again == []
    assert (alert.month, alert.threshold, alert.allocated_hours) == (
        date(2025, 5, 1),
        80,
        Decimal("81"),
    )
    assert alert.notified_at is not None
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.org"]
    assert mail.outbox[0].subject == "[Fairshare] team-a reached 80 % of its nvidia.com/gpu budget"
    assert mail.outbox[0].body == (
        "Team Team A has allocated 81.0 of its 100.0 nvidia.com/gpu GPU-hours budgeted for May"
        " 2025 (81.00 %, the 80 % threshold), counted up to 2025-05-20 12:00 UTC."
    )


def test_budget_use_counts_up_to_the_end_of_the_newest_rolled_up_hour(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 30)
    rolled(budget.team, datetime(2025, 5, 20, 9, tzinfo=UTC), D("12.5"))

    (use,) = budgets.budget_use(now=NOW)

    assert (use.team, use.resource, use.unit) == (budget.team, GPU, "GPU-hour")
    assert (use.allocated_hours, use.budget_hours, use.percent) == (
        D("42.5000"),
        D(100),
        D("42.50"),
    )
    assert (use.month_start, use.cutoff) == (
        datetime(2025, 5, 1, tzinfo=UTC),
        datetime(2025, 5, 20, 10, tzinfo=UTC),
    )
    assert budgets.month_to_date_hours(now=NOW) == {(budget.team.pk, GPU): D("42.5000")}


def test_budget_use_before_any_rollup_is_zero_up_to_the_months_start(budget):
    (use,) = budgets.budget_use(now=NOW)

    assert (use.allocated_hours, use.percent) == (D(0), D(0))
    assert use.cutoff == datetime(2025, 5, 1, tzinfo=UTC)


def test_a_memory_budget_counts_gib_hours_like_chargeback(cast):
    Budget.objects.create(team=cast.team_a, resource="memory", monthly_hours=D(1000))
    rolled(cast.team_a, datetime(2025, 5, 2, 9, tzinfo=UTC), 2**30 * 250, resource="memory")

    (use,) = budgets.budget_use(now=NOW)

    assert (use.allocated_hours, use.unit, use.percent) == (D(250), "GiB-hour", D(25))


def test_it_alerts_at_100_percent_without_repeating_80(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 85)
    budgets.check_budgets(now=NOW)
    rolled(budget.team, datetime(2025, 5, 3, 9, tzinfo=UTC), 20)

    created = budgets.check_budgets(now=NOW)

    assert [a.threshold for a in created] == [100]
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [80, 100]
    assert len(mail.outbox) == 2


def test_crossing_both_thresholds_at_once_raises_both(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 100)

    created = budgets.check_budgets(now=NOW)

    assert [a.threshold for a in created] == [80, 100]
    assert len(mail.outbox) == 2


def test_a_new_month_starts_from_zero(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 90)
    budgets.check_budgets(now=NOW)
    rolled(budget.team, datetime(2025, 6, 1, 0, tzinfo=UTC), 81)

    created = budgets.check_budgets(now=datetime(2025, 6, 2, tzinfo=UTC))

    assert [(a.month, a.threshold) for a in created] == [(date(2025, 6, 1), 80)]


def test_other_teams_usage_does_not_count(budget, cast):
    rolled(cast.team_b, datetime(2025, 5, 2, 9, tzinfo=UTC), 1000, namespace="team-b-ml")

    assert budgets.check_budgets(now=NOW) == []
