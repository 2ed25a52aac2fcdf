"""The source documents' GPU alerts (pure): thresholds, and whether one holds for a GPU now.

The cluster-management chapter of the source documents (``../shared/seeds/``, "关键监控指标")
names the thresholds; ``deploy/monitoring/prometheusrule.yaml`` writes them as Prometheus alerts
and :data:`GPU_ALERT_RULES` holds the same numbers for the team page (a test keeps the two equal):

=====================  =================================  ========  ============================
alert                  condition                          for       severity
=====================  =================================  ========  ============================
``LowGPUUtilization``  utilization < 50 % on a GPU         10m       warning (the documents'
                       allocated to a team's pod                     rule, ``for: 10m``)
``HighGPUMemoryUsage`` memory used ÷ total > 95 %          5m        warning
``HighGPUTemperature`` temperature > 85 °C                 2m        critical
=====================  =================================  ========  ============================

The documents give no duration for memory and temperature; the short ``for:`` keeps one reading
from paging anyone. Comparisons are strict, as written: 50 % exactly is not low, 95 % and 85 °C
exactly are not high.

**How a rule holds** (what Prometheus does with the ``/metrics`` series, replayed on stored
readings so the team page and the alert agree): ``/metrics`` exports a GPU's newest reading while
it is at most :data:`FRESHNESS` old, so Prometheus sees that reading's value until the next one.
For one GPU, sorted by time:

1. the newest reading is at most ``freshness`` old (else the series is gone: nothing fires);
2. walk back from the newest reading while the condition holds, the reading's namespace is the
   newest one's (a new namespace is a new series, and Prometheus restarts ``for:``), and no gap
   between two readings exceeds ``freshness`` (the series went away in between);
3. the rule is *pending* since the oldest reading of that run and *fires* once
   ``now − since ≥ for``.

Unknown values (``None``: MIG devices report no utilization, some boards no temperature) never
satisfy a condition. Nothing here reads the clock: ``now`` is passed in.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

FRESHNESS = timedelta(minutes=2)
"""How long ``/metrics`` keeps exporting a GPU after its newest reading."""

UTILIZATION = "utilization"  # util_gpu, percent
MEMORY = "memory"  # mem_used ÷ mem_total × 100, percent
TEMPERATURE = "temperature"  # temp_c, °C

_OPS: dict[str, Callable[[float, float], bool]] = {"<": operator.lt, ">": operator.gt}


@dataclass(frozen=True)
class GpuAlertRule:
    """One alert of the ``fairshare.gpu`` group, as the PrometheusRule writes it."""

    alert: str
    quantity: str  # UTILIZATION | MEMORY | TEMPERATURE
    op: str  # "<" | ">"
    threshold: float
    for_: timedelta
    severity: str
    allocated_only: bool  # only GPUs used by a pod of a known team
    unit: str
    summary: str

    def holds(self, value: float | None) -> bool:
        return value is not None and _OPS[self.op](value, self.threshold)


LOW_UTILIZATION = GpuAlertRule(
    alert="LowGPUUtilization",
    quantity=UTILIZATION,
    op="<",
    threshold=50,
    for_=timedelta(minutes=10),
    severity="warning",
    allocated_only=True,
    unit="%",
    summary="GPU utilization under 50 % for 10 minutes",
)
HIGH_MEMORY = GpuAlertRule(
    alert="HighGPUMemoryUsage",
    quantity=MEMORY,
    op=">",
    threshold=95,
    for_=timedelta(minutes=5),
    severity="warning",
    allocated_only=False,
    unit="%",
    summary="GPU memory over 95 % used",
)
HIGH_TEMPERATURE = GpuAlertRule(
    alert="HighGPUTemperature",
    quantity=TEMPERATURE,
    op=">",
    threshold=85,
    for_=timedelta(minutes=2),
    severity="critical",
    allocated_only=False,
    unit="°C",
    summary="GPU temperature over 85 °C",
)
GPU_ALERT_RULES: tuple[GpuAlertRule, ...] = (LOW_UTILIZATION, HIGH_MEMORY, HIGH_TEMPERATURE)
RULES_BY_NAME = {rule.alert: rule for rule in GPU_ALERT_RULES}
LONGEST_FOR = max(rule.for_ for rule in GPU_ALERT_RULES)


@dataclass(frozen=True)
class Reading:
    """One stored sample of one GPU, reduced to what the rules look at."""

    taken_at: datetime
    utilization: float | None = None
    memory_percent: float | None = None
    temperature: float | None = None
    namespace: str = ""
    pod: str = ""

    def value(self, quantity: str) -> float | None:
        if quantity == UTILIZATION:
            return self.utilization
        if quantity == MEMORY:
            return self.memory_percent
        if quantity == TEMPERATURE:
            return self.temperature
        raise ValueError(f"unknown quantity {quantity!r}")


def memory_percent(used: int | None, total: int | None) -> float | None:
    """Memory used ÷ total in percent; None when either is unknown or the total is 0."""
    if used is None or not total:
        return None
    return 100.0 * used / total


@dataclass(frozen=True)
class Firing:
    """A rule that holds for one GPU: pending since ``since``, firing when ``firing`` is true."""

    rule: GpuAlertRule
    since: datetime
    value: float
    firing: bool


def evaluate(
    rule: GpuAlertRule,
    readings: Sequence[Reading],
    *,
    now: datetime,
    freshness: timedelta = FRESHNESS,
) -> Firing | None:
    """Return whether ``rule`` holds for one GPU's ``readings`` (sorted by time) at ``now``.

    None when it does not hold at all; else a :class:`Firing` with ``firing`` false while the
    condition has held for less than ``rule.for_`` (Prometheus's *pending*). Readings after
    ``now`` are ignored. See the module docstring for the steps.
    """
    past = [r for r in readings if r.taken_at <= now]
    if not past or now - past[-1].taken_at > freshness:
        return None
    newest = past[-1]
    value = newest.value(rule.quantity)
    if value is None or not rule.holds(value) or (rule.allocated_only and not newest.namespace):
        return None
    since = newest.taken_at
    for reading in reversed(past[:-1]):
        if (
            since - reading.taken_at > freshness
            or reading.namespace != newest.namespace
            or not rule.holds(reading.value(rule.quantity))
        ):
            break
        since = reading.taken_at
    return Firing(rule=rule, since=since, value=value, firing=now - since >= rule.for_)


def evaluate_all(
    readings: Sequence[Reading], *, now: datetime, freshness: timedelta = FRESHNESS
) -> list[Firing]:
    """The rules of :data:`GPU_ALERT_RULES` that fire for one GPU at ``now`` (pending ones left
    out), in the order of :data:`GPU_ALERT_RULES`."""
    found = []
    for rule in GPU_ALERT_RULES:
        result = evaluate(rule, readings, now=now, freshness=freshness)
        if result is not None and result.firing:
            found.append(result)
    return found


# --------------------------------------------------------------------------- demo readings

# One reading per alert that trips that alert and no other rule, the idle-GPU detection
# (< 10 % for 30 minutes) included: utilization %, memory used as a fraction of the total, °C.
TRIPPING_VALUES: dict[str, dict[str, float]] = {
    LOW_UTILIZATION.alert: {"util_gpu": 30.0, "mem_fraction": 0.40, "temp_c": 55.0},
    HIGH_MEMORY.alert: {"util_gpu": 90.0, "mem_fraction": 0.97, "temp_c": 70.0},
    HIGH_TEMPERATURE.alert: {"util_gpu": 95.0, "mem_fraction": 0.60, "temp_c": 89.0},
}
# A reading that trips nothing.
HEALTHY_VALUES: dict[str, float] = {"util_gpu": 85.0, "mem_fraction": 0.60, "temp_c": 65.0}


def tripping_readings(
    alert: str | None,
    *,
    now: datetime,
    mem_total: int = 80 * 2**30,
    interval: timedelta = timedelta(seconds=15),
    extra: timedelta = timedelta(minutes=1),
) -> list[dict]:
    """GpuSample field values for one GPU, every ``interval`` up to ``now``, that make ``alert``
    fire at ``now`` (``alert=None``: a healthy GPU that trips nothing).

    The readings cover the alert's ``for:`` plus ``extra``; each is a dict with ``taken_at``,
    ``util_gpu``, ``mem_used``, ``mem_total`` and ``temp_c``, ready for
    ``GpuSample(node=..., uuid=..., index=..., model=..., namespace=..., pod=..., team=...,
    **reading)``. ``LowGPUUtilization`` fires only for a GPU used by a pod (``namespace`` and
    ``pod`` set) of a namespace Fairshare knows. The alert stops showing once the newest
    reading is older than :data:`FRESHNESS` (two minutes), as it would in Prometheus.

    Raises KeyError for an unknown alert name.
    """
    values = HEALTHY_VALUES if alert is None else TRIPPING_VALUES[alert]
    span = (LONGEST_FOR if alert is None else RULES_BY_NAME[alert].for_) + extra
    steps = int(span / interval)
    return [
        {
            "taken_at": now - interval * (steps - i),
            "util_gpu": values["util_gpu"],
            "mem_used": round(mem_total * values["mem_fraction"]),
            "mem_total": mem_total,
            "temp_c": values["temp_c"],
        }
        for i in range(steps + 1)
    ]
