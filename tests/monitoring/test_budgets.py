"""Budgets: month-to-date usage crosses 80 % and 100 % → one alert (and one email) each."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from monitoring import services
from monitoring.models import BudgetAlert, UsageRollup, UsageSample
from quotas.models import Budget

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
NOW = datetime(2025, 5, 20, 12, 30, tzinfo=UTC)


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
    UsageRollup.objects.create(
        period="hour",
        start=start,
        team=team,
        namespace=namespace,
        resource=resource,
        flavor=H100,
        allocated_hours=Decimal(hours),
    )


def test_it_stays_quiet_under_80_percent(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 79)
    rolled(budget.team, datetime(2025, 4, 30, 9, tzinfo=UTC), 500)  # last month
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 500, resource="cpu")

    assert services.check_budgets(now=NOW) == []
    assert not BudgetAlert.objects.exists()
    assert mail.outbox == []


def test_it_alerts_once_at_80_percent_counting_raw_samples_not_yet_rolled_up(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 79)
    # 4 GPUs from 12:00 to now (12:30): 2 GPU-hours that no rollup has seen yet.
    UsageSample.objects.create(
        taken_at=NOW - timedelta(minutes=30),
        team=budget.team,
        namespace="team-a-ml",
        resource=GPU,
        flavor=H100,
        allocated=Decimal(4),
    )

    created = services.check_budgets(now=NOW)
    again = services.check_budgets(now=NOW + timedelta(minutes=5))

    alert = BudgetAlert.objects.get()
    assert created == [alert]
    assert again == []
    assert (alert.month, alert.threshold, alert.used_hours) == (date(2025, 5, 1), 80, Decimal("81"))
    assert alert.notified_at is not None
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.org"]
    assert mail.outbox[0].subject == "[Fairshare] team-a reached 80 % of its nvidia.com/gpu budget"
    assert "81.000 of its 100.000 nvidia.com/gpu-hours for May 2025" in mail.outbox[0].body


def test_it_alerts_at_100_percent_without_repeating_80(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 85)
    services.check_budgets(now=NOW)
    rolled(budget.team, datetime(2025, 5, 3, 9, tzinfo=UTC), 20)

    created = services.check_budgets(now=NOW)

    assert [a.threshold for a in created] == [100]
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [80, 100]
    assert len(mail.outbox) == 2


def test_crossing_both_thresholds_at_once_raises_both(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 100)

    created = services.check_budgets(now=NOW)

    assert [a.threshold for a in created] == [80, 100]
    assert len(mail.outbox) == 2


def test_a_new_month_starts_from_zero(budget):
    rolled(budget.team, datetime(2025, 5, 2, 9, tzinfo=UTC), 90)
    services.check_budgets(now=NOW)
    rolled(budget.team, datetime(2025, 6, 1, 0, tzinfo=UTC), 81)

    created = services.check_budgets(now=datetime(2025, 6, 2, tzinfo=UTC))

    assert [(a.month, a.threshold) for a in created] == [(date(2025, 6, 1), 80)]


def test_other_teams_usage_does_not_count(budget, cast):
    rolled(cast.team_b, datetime(2025, 5, 2, 9, tzinfo=UTC), 1000, namespace="team-b-ml")

    assert services.check_budgets(now=NOW) == []
