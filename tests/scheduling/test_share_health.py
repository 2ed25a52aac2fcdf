"""share_health: failed share computations are recorded, make shares stale until the next
success, and do not stop the sync chained after the compute_shares task."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from quotas.models import TeamQuota
from scheduling import tasks
from scheduling.exceptions import ShareProblemError
from scheduling.health import prune_share_failures, share_health
from scheduling.models import ShareComputation, ShareFailure
from scheduling.services import compute_shares
from tests.base import GPU

NOW = timezone.now().replace(microsecond=0)


def break_the_problem(cast) -> TeamQuota:
    """A department limit under its children's guarantees: an invalid DRF problem."""
    return TeamQuota.objects.create(team=cast.dept, resource=GPU, guarantee=Decimal(0), limit=40)


@pytest.mark.django_db
def test_healthy_before_and_after_a_successful_computation(cast):
    assert share_health().stale is False
    assert share_health().last_good is None

    computation = compute_shares(now=NOW)

    health = share_health()
    assert health.stale is False
    assert health.last_good == computation
    assert health.failures == 0


@pytest.mark.django_db
def test_a_failure_is_recorded_and_makes_the_shares_stale_since_the_first_one(cast):
    good = compute_shares(now=NOW - timedelta(hours=2))
    quota = break_the_problem(cast)

    for minutes in (60, 30):
        with pytest.raises(ShareProblemError):
            compute_shares(trigger="test", now=NOW - timedelta(minutes=minutes))

    health = share_health()
    assert health.stale is True
    assert health.since == NOW - timedelta(minutes=60)
    assert health.failures == 2
    assert "children's guarantees" in health.error
    assert health.last_good == good
    assert ShareComputation.objects.count() == 1
    assert ShareFailure.objects.filter(trigger="test").count() == 2

    quota.delete()
    fresh = compute_shares(now=NOW)
    health = share_health()
    assert health.stale is False
    assert health.last_good == fresh


@pytest.mark.django_db
def test_stale_before_any_successful_computation(cast):
    break_the_problem(cast)
    with pytest.raises(ShareProblemError):
        compute_shares(now=NOW)

    health = share_health()
    assert health.stale is True
    assert health.last_good is None
    assert health.since == NOW


@pytest.mark.django_db
def test_the_task_reports_the_failure_instead_of_raising(cast):
    """A raising task would stop ``compute_shares | sync_cluster``: the sync must still run."""
    break_the_problem(cast)

    result = tasks.compute_shares.apply(kwargs={"trigger": "test"}).get()

    assert result["status"] == "failed"
    assert "children's guarantees" in result["error"]
    assert share_health().stale is True


@pytest.mark.django_db
def test_pruning_keeps_the_current_episode(cast):
    break_the_problem(cast)
    with pytest.raises(ShareProblemError):
        compute_shares(now=NOW - timedelta(days=60))
    assert prune_share_failures(keep_days=30, now=NOW) == 0  # nothing good since: still stale

    ShareFailure.objects.all().delete()
    TeamQuota.objects.filter(team=cast.dept).delete()
    old = ShareFailure.objects.create(failed_at=NOW - timedelta(days=50), error="old")
    compute_shares(now=NOW - timedelta(days=40))
    recent = ShareFailure.objects.create(failed_at=NOW - timedelta(days=1), error="recent")

    assert prune_share_failures(keep_days=30, now=NOW) == 1
    assert list(ShareFailure.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not ShareFailure.objects.filter(pk=old.pk).exists()
