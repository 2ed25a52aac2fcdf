"""One real task round-trip: a Celery worker consuming from the real Redis broker."""

import logging

import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings

from config.celery import app
from quotas.tasks import ping


@pytest.fixture(autouse=True)
def _keep_root_log_level():
    # start_worker sets the root logger's level (to ERROR by default); later tests rely on caplog.
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


def test_celery_reads_its_configuration_from_django_settings():
    assert app.conf.broker_url == settings.CELERY_BROKER_URL
    assert app.conf.task_serializer == "json"
    assert "quotas.tasks.expire_temporary_quota" in {
        entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }


@pytest.mark.django_db(transaction=True)
def test_a_task_round_trips_through_redis_and_a_real_worker(cast):
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "the tests use the real Redis broker"
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        result = ping.delay(41)
        assert result.get(timeout=30) == {"echo": 41, "teams": 3}


@pytest.mark.django_db(transaction=True)
def test_the_expiry_task_runs_in_a_worker(cast):
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        from quotas.tasks import expire_temporary_quota

        outcome = expire_temporary_quota.delay().get(timeout=30)
    assert outcome == {"activated": [], "expired": [], "failed": {}}
