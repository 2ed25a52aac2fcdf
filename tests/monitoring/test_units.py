"""The units every monitoring room shares (monitoring.units)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

from monitoring import units


def test_flavors_are_nvml_names_with_dashes_as_gpu_feature_discovery_labels_them():
    assert units.flavor_of_model("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert units.flavor_of_model("  Tesla  T4 ") == "Tesla-T4"


def test_gpu_resources_include_mig_slices_and_nothing_else():
    assert units.is_gpu_resource("nvidia.com/gpu")
    assert units.is_gpu_resource("nvidia.com/mig-1g.10gb")
    assert not units.is_gpu_resource("cpu")
    assert not units.is_gpu_resource("memory")


def test_amounts_are_written_without_exponents():
    assert units.decimal_string(Decimal("1E+3")) == "1000"
    assert units.decimal_string(Decimal("2.500")) == "2.5"
    assert units.decimal_string(Decimal("0.000001")) == "0.000001"


def test_buckets_are_utc_whatever_the_offset_of_the_moment():
    moment = datetime(2025, 3, 1, 1, 30, tzinfo=timezone(timedelta(hours=2)))  # 23:30 UTC, Feb 28
    assert units.floor_hour(moment) == datetime(2025, 2, 28, 23, tzinfo=UTC)
    assert units.floor_day(moment) == datetime(2025, 2, 28, tzinfo=UTC)
    assert units.month_start(moment) == datetime(2025, 2, 1, tzinfo=UTC)


def test_intervals_come_from_the_beat_schedule_and_the_agent_setting(settings):
    settings.CELERY_BEAT_SCHEDULE = {"collect-usage": {"schedule": 45}}
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 20
    assert units.collect_interval() == timedelta(seconds=45)
    assert units.gpu_agent_interval() == timedelta(seconds=20)
    settings.CELERY_BEAT_SCHEDULE = {}
    assert units.collect_interval() == timedelta(seconds=60)
