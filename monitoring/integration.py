"""Integration: point samples turned into resource-hours per bucket (the rollups' and budgets'
arithmetic). Every function takes ``now`` (default: the clock) so a past window can be replayed.

**Integration rule**:

* A ``UsageSample`` describes the cluster from its collection time until the next collection,
  capped at 2 × the collection interval (the ``collect-usage`` beat schedule, default 60 s):
  a collector outage therefore counts at most two intervals after the last sample, never the
  whole outage. Collections are the distinct times of ``UsageSample`` and ``CapacitySnapshot``
  rows, so a collection that found a namespace idle (no row) ends that namespace's previous
  sample. The last sample holds until ``now`` at most.
* A ``GpuSample`` describes its GPU until the same GPU's next sample, capped at 2 × the agent
  interval (``FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS``, default 15 s). ``used_hours`` =
  Σ util_gpu/100 × that time, for samples attributed to a pod; ``avg_utilization`` is the
  time-weighted mean. Samples without utilization (MIG devices) count for neither.
* Intervals are split at bucket boundaries; buckets are UTC hours and UTC days. Monthly
  rollups (UTC calendar months) are sums of the daily ones (``rollup_usage``).
* ``guarantee_hours`` (TeamQuota guarantee × hours) goes on the row of the team's first
  namespace (by name), resource as in the quota, flavor "". Teams without a namespace get no
  guarantee row. Quotas have no history, so re-running an old window uses today's guarantees.

GPU flavors: the node label ``nvidia.com/gpu.product`` is NVML's device name with spaces
replaced by dashes (GPU feature discovery's rule), so a GpuSample's ``model`` maps to the same
flavor as the allocated amounts of its node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import Min

from monitoring.models import (
    CapacitySnapshot,
    GpuSample,
    UsageRollup,
    UsageSample,
)
from monitoring.units import GPU, HOUR, collect_interval, flavor_of_model, gpu_agent_interval
from quotas.models import Namespace, TeamQuota

_AMOUNT_PLACES = Decimal("0.000001")


# --------------------------------------------------------------------------- integration


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _spread(a: datetime, b: datetime, size: timedelta) -> Iterator[tuple[datetime, float]]:
    """Split [a, b) at bucket boundaries; yield ``(bucket start, seconds)``."""
    floor = floor_hour if size == HOUR else floor_day
    while a < b:
        bucket = floor(a)
        end = min(b, bucket + size)
        yield bucket, (end - a).total_seconds()
        a = end


@dataclass
class BucketTotals:
    """Running totals of one bucket × namespace × resource × flavor (seconds, not hours)."""

    team_id: int | None = None
    allocated: Decimal = Decimal(0)
    pending: Decimal = Decimal(0)
    guarantee: Decimal = Decimal(0)
    used: float = 0.0
    util_seconds: float = 0.0
    samples: int = 0

    def to_rollup(self, period: str, key: tuple) -> UsageRollup:
        start, namespace, resource, flavor = key
        avg = 100 * self.used / self.util_seconds if self.util_seconds else None
        return UsageRollup(
            period=period,
            start=start,
            team_id=self.team_id,
            namespace=namespace,
            resource=resource,
            flavor=flavor,
            allocated_hours=_hours(self.allocated),
            pending_hours=_hours(self.pending),
            used_hours=_hours(Decimal(repr(self.used))),
            guarantee_hours=_hours(self.guarantee),
            avg_utilization=None if avg is None else round(avg, 4),
            samples=self.samples,
        )


def _hours(seconds: Decimal) -> Decimal:
    return (seconds / 3600).quantize(_AMOUNT_PLACES)


BucketKey = tuple[datetime, str, str, str]


def _collection_times(lo: datetime, hi: datetime) -> list[datetime]:
    times = set(
        UsageSample.objects.filter(taken_at__gte=lo, taken_at__lt=hi)
        .values_list("taken_at", flat=True)
        .distinct()
    )
    times.update(
        CapacitySnapshot.objects.filter(taken_at__gte=lo, taken_at__lt=hi).values_list(
            "taken_at", flat=True
        )
    )
    return sorted(times)


def _next_collection(after: datetime) -> datetime | None:
    candidates = [
        UsageSample.objects.filter(taken_at__gte=after).aggregate(t=Min("taken_at"))["t"],
        CapacitySnapshot.objects.filter(taken_at__gte=after).aggregate(t=Min("taken_at"))["t"],
    ]
    return min((t for t in candidates if t is not None), default=None)


def integrate_usage(
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    size: timedelta = HOUR,
    resources: Iterable[str] | None = None,
    gpu: bool = True,
    collect_every: timedelta | None = None,
    gpu_every: timedelta | None = None,
) -> dict[BucketKey, BucketTotals]:
    """Integrate raw samples over [start, end) into buckets of ``size`` (see module docstring).

    Returns ``{(bucket start, namespace, resource, flavor): totals in seconds}``; buckets may be
    partial when ``start``/``end`` are not aligned. ``resources`` limits the UsageSample rows
    read; ``gpu=False`` skips GpuSamples (budgets need allocation only). ``collect_every`` and
    ``gpu_every`` replace the configured collector and agent intervals, for samples that were
    taken at another cadence (history imported or back-filled at a coarser step).
    """
    acc: dict[BucketKey, BucketTotals] = defaultdict(BucketTotals)
    cap = 2 * (collect_every or collect_interval())
    horizon = min(end, now)
    times = _collection_times(start - cap, end)
    following = _next_collection(end)
    hold: dict[datetime, datetime] = {}
    for i, moment in enumerate(times):
        nxt = times[i + 1] if i + 1 < len(times) else following
        limit = moment + cap
        hold[moment] = min(limit, nxt) if nxt is not None else min(limit, max(horizon, moment))

    rows = UsageSample.objects.filter(taken_at__gte=start - cap, taken_at__lt=end)
    if resources is not None:
        rows = rows.filter(resource__in=list(resources))
    for taken_at, team_id, namespace, resource, flavor, allocated, pending in rows.values_list(
        "taken_at", "team_id", "namespace", "resource", "flavor", "allocated", "pending"
    ).iterator(chunk_size=5000):
        a, b = max(taken_at, start), min(hold.get(taken_at, taken_at), end)
        for bucket, seconds in _spread(a, b, size):
            item = acc[(bucket, namespace, resource, flavor)]
            item.team_id = item.team_id or team_id
            secs = Decimal(repr(seconds))
            item.allocated += allocated * secs
            item.pending += pending * secs

    if gpu:
        _integrate_gpus(acc, start, end, horizon, size, 2 * (gpu_every or gpu_agent_interval()))
    return acc


def _integrate_gpus(
    acc: dict[BucketKey, BucketTotals],
    start: datetime,
    end: datetime,
    horizon: datetime,
    size: timedelta,
    cap: timedelta,
) -> None:
    rows = (
        GpuSample.objects.filter(taken_at__gte=start - cap, taken_at__lt=end + cap)
        .order_by("uuid", "taken_at")
        .values_list("uuid", "taken_at", "util_gpu", "namespace", "team_id", "model")
    )
    previous = None
    for row in rows.iterator(chunk_size=5000):
        if previous is not None:
            _add_gpu_interval(
                acc,
                previous,
                row if row[0] == previous[0] else None,
                start,
                end,
                horizon,
                cap,
                size,
            )
        previous = row
    if previous is not None:
        _add_gpu_interval(acc, previous, None, start, end, horizon, cap, size)


def _add_gpu_interval(acc, sample, following, start, end, horizon, cap, size) -> None:
    _, taken_at, util, namespace, team_id, model = sample
    if util is None or not namespace:
        return
    limit = taken_at + cap
    stop = min(limit, following[1]) if following is not None else min(limit, max(horizon, taken_at))
    key_tail = (namespace, GPU, flavor_of_model(model))
    if start <= taken_at < end:
        item = acc[(floor_hour(taken_at) if size == HOUR else floor_day(taken_at), *key_tail)]
        item.samples += 1
        item.team_id = item.team_id or team_id
    for bucket, seconds in _spread(max(taken_at, start), min(stop, end), size):
        item = acc[(bucket, *key_tail)]
        item.team_id = item.team_id or team_id
        item.used += util / 100 * seconds
        item.util_seconds += seconds


def add_guarantees(
    acc: dict[BucketKey, BucketTotals], buckets: list[datetime], size: timedelta
) -> None:
    """Add each active team's guarantee × the bucket's length to the row of its first namespace
    (by name), flavor "" (the integration rule above), for every bucket in ``buckets``."""
    first_namespace: dict[int, str] = {}
    for team_id, name in Namespace.objects.order_by("name").values_list("team_id", "name"):
        first_namespace.setdefault(team_id, name)
    quotas = TeamQuota.objects.filter(guarantee__gt=0, team__active=True).values_list(
        "team_id", "resource", "guarantee"
    )
    seconds = Decimal(int(size.total_seconds()))
    for team_id, resource, guarantee in quotas:
        namespace = first_namespace.get(team_id)
        if namespace is None:
            continue
        for bucket in buckets:
            item = acc[(bucket, namespace, resource, "")]
            item.team_id = team_id
            item.guarantee += Decimal(guarantee) * seconds
