"""Units every monitoring room shares: GPU resource names and flavors, exact amounts, the
collection and agent intervals, and the UTC hour/day/month buckets usage is counted in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings

GPU = "nvidia.com/gpu"
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def collect_interval() -> timedelta:
    """The collection interval from the ``collect-usage`` beat entry (default 60 s)."""
    entry = getattr(settings, "CELERY_BEAT_SCHEDULE", {}).get("collect-usage") or {}
    schedule = entry.get("schedule")
    if isinstance(schedule, timedelta):
        return schedule
    if isinstance(schedule, int | float):
        return timedelta(seconds=schedule)
    return timedelta(seconds=60)


def gpu_agent_interval() -> timedelta:
    """The agents' sampling interval (``FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS``, default 15)."""
    return timedelta(seconds=getattr(settings, "FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS", 15))


def is_gpu_resource(resource: str) -> bool:
    """True for resources tracked per GPU flavor: ``*/gpu`` and MIG slices (``*/mig-*``)."""
    return resource.endswith("/gpu") or "/mig-" in resource


def flavor_of_model(model: str) -> str:
    """Map an NVML device name to the node label value (``NVIDIA H100`` → ``NVIDIA-H100``)."""
    return "-".join(model.split())


def decimal_string(amount: Decimal) -> str:
    """Render an exact amount without exponent (``Decimal("1E+3")`` → ``"1000"``)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


def floor_hour(moment: datetime) -> datetime:
    """The start of ``moment``'s UTC hour (the hourly rollups' bucket)."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    """The start of ``moment``'s UTC day (the daily rollups' bucket)."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    """The first instant of ``moment``'s calendar month, in UTC (rollups are UTC buckets)."""
    return floor_day(moment).replace(day=1)
