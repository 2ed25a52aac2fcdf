"""monitoring.domain.gpu_alerts: when a GPU alert holds for one GPU's readings (pure, no DB)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from monitoring.domain.gpu_alerts import (
    GPU_ALERT_RULES,
    HIGH_MEMORY,
    HIGH_TEMPERATURE,
    LOW_UTILIZATION,
    Reading,
    evaluate,
    evaluate_all,
    memory_percent,
    tripping_readings,
)

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
STEP = timedelta(seconds=15)


def run(minutes: float, *, util=None, mem=None, temp=None, namespace="team-a-ml", end=NOW):
    """Readings every 15 s over ``minutes`` up to ``end``, all with the same values."""
    steps = round(minutes * 60 / 15)
    return [
        Reading(
            taken_at=end - STEP * (steps - i),
            utilization=util,
            memory_percent=mem,
            temperature=temp,
            namespace=namespace,
            pod="train-0" if namespace else "",
        )
        for i in range(steps + 1)
    ]


def test_the_rules_are_the_documents_thresholds():
    assert [(r.alert, r.op, r.threshold, r.for_, r.severity) for r in GPU_ALERT_RULES] == [
        ("LowGPUUtilization", "<", 50, timedelta(minutes=10), "warning"),
        ("HighGPUMemoryUsage", ">", 95, timedelta(minutes=5), "warning"),
        ("HighGPUTemperature", ">", 85, timedelta(minutes=2), "critical"),
    ]


@pytest.mark.parametrize(
    ("minutes", "util", "firing"),
    [(11, 49, True), (10, 49, True), (9, 49, False), (60, 50, None), (60, 51, None)],
)
def test_low_utilization_fires_after_10_minutes_under_50(minutes, util, firing):
    result = evaluate(LOW_UTILIZATION, run(minutes, util=util), now=NOW)

    if firing is None:
        assert result is None
    else:
        assert result is not None
        assert (result.firing, result.since, result.value) == (
            firing,
            NOW - timedelta(minutes=minutes),
            util,
        )


def test_one_reading_over_the_threshold_restarts_the_duration():
    readings = run(20, util=20)
    readings[-30] = Reading(
        taken_at=readings[-30].taken_at, utilization=70, namespace="team-a-ml", pod="train-0"
    )

    result = evaluate(LOW_UTILIZATION, readings, now=NOW)

    assert result is not None
    assert result.since == readings[-29].taken_at
    assert result.firing is False  # 29 × 15 s = 7¼ minutes


def test_a_gap_longer_than_the_window_restarts_the_duration():
    before = run(10, util=20, end=NOW - timedelta(minutes=8))
    after = run(5, util=20)

    result = evaluate(LOW_UTILIZATION, before + after, now=NOW)

    assert result is not None
    assert (result.since, result.firing) == (NOW - timedelta(minutes=5), False)
    # A gap within the window does not: the series never went away.
    short_gap = run(10, util=20, end=NOW - timedelta(minutes=6, seconds=45)) + after
    assert evaluate(LOW_UTILIZATION, short_gap, now=NOW).firing is True


def test_a_gpu_that_stopped_reporting_alerts_no_more():
    readings = run(30, util=5, end=NOW - timedelta(minutes=2, seconds=1))

    assert evaluate(LOW_UTILIZATION, readings, now=NOW) is None
    assert evaluate(LOW_UTILIZATION, readings, now=NOW - timedelta(seconds=2)).firing is True


def test_a_new_namespace_restarts_the_duration():
    readings = run(20, util=20, namespace="team-b-ml", end=NOW - timedelta(minutes=6))
    readings += run(6, util=20)[1:]

    result = evaluate(LOW_UTILIZATION, readings, now=NOW)

    assert (result.since, result.firing) == (NOW - timedelta(minutes=6) + STEP, False)


def test_low_utilization_needs_a_pod_but_memory_and_temperature_do_not():
    free = run(30, util=0, mem=99, temp=90, namespace="")

    assert evaluate(LOW_UTILIZATION, free, now=NOW) is None
    assert [f.rule for f in evaluate_all(free, now=NOW)] == [HIGH_MEMORY, HIGH_TEMPERATURE]


@pytest.mark.parametrize(
    ("rule", "values", "minutes", "firing"),
    [
        (HIGH_MEMORY, {"mem": 96}, 5, True),
        (HIGH_MEMORY, {"mem": 96}, 4.75, False),
        (HIGH_MEMORY, {"mem": 95}, 60, None),
        (HIGH_TEMPERATURE, {"temp": 86}, 2, True),
        (HIGH_TEMPERATURE, {"temp": 86}, 1.75, False),
        (HIGH_TEMPERATURE, {"temp": 85}, 60, None),
    ],
)
def test_memory_and_temperature_fire_strictly_over_the_threshold(rule, values, minutes, firing):
    result = evaluate(rule, run(minutes, **values), now=NOW)

    assert (None if result is None else result.firing) is firing


def test_unknown_values_never_alert():
    mig = run(30, util=None, mem=None, temp=None)

    assert evaluate_all(mig, now=NOW) == []
    assert all(evaluate(rule, mig, now=NOW) is None for rule in GPU_ALERT_RULES)


def test_readings_after_now_are_not_read():
    readings = run(11, util=20) + run(1, util=90, end=NOW + timedelta(minutes=1))[1:]

    assert evaluate(LOW_UTILIZATION, readings, now=NOW).firing is True


def test_memory_percent():
    assert memory_percent(60, 80) == 75
    assert memory_percent(None, 80) is None
    assert memory_percent(1, 0) is None
    assert memory_percent(1, None) is None


# ---------------------------------------------------------------- demo readings


def as_readings(rows, namespace="team-a-ml"):
    return [
        Reading(
            taken_at=r["taken_at"],
            utilization=r["util_gpu"],
            memory_percent=memory_percent(r["mem_used"], r["mem_total"]),
            temperature=r["temp_c"],
            namespace=namespace,
            pod="train-0",
        )
        for r in rows
    ]


@pytest.mark.parametrize("rule", GPU_ALERT_RULES, ids=lambda r: r.alert)
def test_tripping_readings_trip_their_alert_and_no_other(rule):
    rows = tripping_readings(rule.alert, now=NOW)

    assert [f.rule for f in evaluate_all(as_readings(rows), now=NOW)] == [rule]
    assert rows[-1]["taken_at"] == NOW
    assert NOW - rows[0]["taken_at"] >= rule.for_
    # Nor Fairshare's idle-GPU detection (under 10 %).
    assert all(r["util_gpu"] >= 10 for r in rows)


def test_healthy_readings_trip_nothing():
    rows = tripping_readings(None, now=NOW, interval=timedelta(seconds=30))

    assert evaluate_all(as_readings(rows), now=NOW) == []
    assert rows[1]["taken_at"] - rows[0]["taken_at"] == timedelta(seconds=30)


def test_tripping_readings_refuse_an_unknown_alert():
    with pytest.raises(KeyError):
        tripping_readings("GpuOnFire", now=NOW)


def test_the_module_is_pure():
    code = (
        "import sys, monitoring.domain.gpu_alerts; "
        "bad = [m for m in sys.modules if m.split('.')[0] in {'django', 'kubernetes', 'pynvml'}]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
