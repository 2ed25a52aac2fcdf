"""Chargeback maths: hand-computed cases, then invariants (no database)."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitoring.domain.chargeback import (
    CSV_COLUMNS,
    Budget,
    ChargebackError,
    FrozenStatement,
    LineChange,
    Rate,
    Report,
    UsageRecord,
    diff_reports,
    freeze,
    is_byte_resource,
    is_gpu_resource,
    report,
    to_rows,
)

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"
GIB = 2**30
D = Decimal


def at(hour: int, minute: int = 0, day: int = 1) -> datetime:
    """2025-06-<day> <hour>:<minute> UTC; hour may run past 23 into the next days."""
    return datetime(2025, 6, day, tzinfo=UTC) + timedelta(hours=hour, minutes=minute)


def rec(
    start: datetime | None = None, end: datetime | None = None, **overrides: object
) -> UsageRecord:
    """An hourly bucket: team-a runs 8 H100s at 75 % utilization with a guarantee of 4."""
    fields: dict[str, object] = {
        "team": "team-a",
        "cost_center": "cc-100",
        "namespace": "a-train",
        "resource": GPU,
        "flavor": H100,
        "allocated_hours": D(8),
        "used_hours": D(6),
        "guarantee_hours": D(4),
    }
    fields.update(overrides)
    start = start or at(0)
    return UsageRecord(start=start, end=end or start + timedelta(hours=1), **fields)  # type: ignore[arg-type]


def hourly(n: int, first: int = 0, **overrides: object) -> list[UsageRecord]:
    return [rec(at(first + i), **overrides) for i in range(n)]


GPU_RATE = Rate(GPU, "", D("2.50"), valid_from=at(0, day=1) - timedelta(days=365))
CPU_RATE = Rate("cpu", "", D("0.04"), valid_from=GPU_RATE.valid_from)
MEMORY_RATE = Rate("memory", "", D("0.005"), valid_from=GPU_RATE.valid_from)
JUNE = Budget("team-a", GPU, start=at(0), end=at(0) + timedelta(days=30), limit_hours=D(100))


def only(result: Report):
    (line,) = result.lines
    return line


# ---------------------------------------------------------------- hand-computed cases


def test_it_charges_one_team_for_gpu_hours_at_the_rate():
    # 3 hours x 8 GPUs = 24 GPU-hours x 2.50 = 60.00
    result = report(hourly(3), [GPU_RATE], start=at(0), end=at(3), group_by=["team"])

    line = only(result)
    assert line.key == (("team", "team-a"),)
    assert line.unit == "GPU-hour"
    assert line.allocated_hours == D("24.0000")
    assert line.used_hours == D("18.0000")
    assert line.idle_hours == D("6.0000")
    assert line.guarantee_hours == D("12.0000")
    assert line.unused_guarantee_hours == D("0.0000")
    assert line.cost == D("60.00")
    assert result.total.cost == D("60.00")
    assert result.unpriced == ()


def test_it_charges_partial_hour_buckets_by_their_own_hours():
    # 10:00-10:45 with 4 GPUs = 3 GPU-hours; 10:45-11:00 with 4 GPUs = 1 GPU-hour; x 2.50
    records = [
        rec(at(10), at(10, 45), allocated_hours=D(3), used_hours=D(3), guarantee_hours=D(0)),
        rec(at(10, 45), at(11), allocated_hours=D(1), used_hours=D(0), guarantee_hours=D(0)),
    ]
    line = only(report(records, [GPU_RATE], start=at(10), end=at(11), group_by=["team"]))

    assert (line.allocated_hours, line.used_hours, line.idle_hours) == (D(4), D(3), D(1))
    assert line.cost == D("10.00")


@pytest.mark.parametrize(
    ("bucket", "window", "hours", "cost"),
    [
        # 00:30-01:30 bucket, window from 01:00: half inside -> 4 of 8 GPU-hours
        ((at(0, 30), at(1, 30)), (at(1), at(3)), D("4.0000"), D("10.00")),
        # 00:30-01:30 bucket, window until 00:50: 20 of 60 minutes -> 8/3 GPU-hours -> 6.666...
        ((at(0, 30), at(1, 30)), (at(0), at(0, 50)), D("2.6667"), D("6.67")),
        # a daily bucket of 240 GPU-hours, window 06:00-12:00: a quarter -> 60 GPU-hours
        ((at(0), at(24)), (at(6), at(12)), D("60.0000"), D("150.00")),
        # entirely outside the window: no line at all (checked below)
        ((at(5), at(6)), (at(0), at(5)), None, None),
    ],
)
def test_it_counts_a_bucket_partly_outside_the_period_pro_rata(bucket, window, hours, cost):
    daily = bucket[1] - bucket[0] == timedelta(days=1)
    record = rec(*bucket, allocated_hours=D(240) if daily else D(8))
    result = report([record], [GPU_RATE], start=window[0], end=window[1], group_by=["team"])

    if hours is None:
        assert result.lines == ()
        assert result.total.cost == D("0.00")
    else:
        assert only(result).allocated_hours == hours
        assert only(result).cost == cost


def test_it_splits_a_bucket_across_a_rate_change_by_time():
    # 2.00 until 12:30, 3.00 after: 4 GPU-hours at each price = 8.00 + 12.00
    rates = [
        Rate(GPU, "", D("2.00"), valid_from=at(0), valid_to=at(12, 30)),
        Rate(GPU, "", D("3.00"), valid_from=at(12, 30)),
    ]
    result = report([rec(at(12))], rates, start=at(0), end=at(24), group_by=["team"])

    assert only(result).cost == D("20.00")
    assert only(result).allocated_hours == D("8.0000")


def test_it_splits_a_daily_bucket_clipped_and_across_a_rate_change():
    # 240 GPU-hours over the day; window 06:00-24:00 keeps 180; rate 2.00 until 12:00 (60 GPU-h)
    # and 3.00 from 12:00 (120 GPU-h): 120.00 + 360.00
    rates = [
        Rate(GPU, "", D("2.00"), valid_from=at(0), valid_to=at(12)),
        Rate(GPU, "", D("3.00"), valid_from=at(12)),
    ]
    record = rec(at(0), at(24), allocated_hours=D(240))
    assert only(report([record], rates, start=at(6), end=at(24), group_by=[])).cost == D("480.00")


@pytest.mark.parametrize(
    ("flavor", "cost"),
    [
        (H100, D("32.00")),  # 8 GPU-hours at the H100 rate 4.00
        (A100, D("16.00")),  # no A100 rate: the generic 2.00
        ("", D("16.00")),  # no flavor known: the generic rate
    ],
)
def test_a_flavor_rate_beats_the_generic_rate(flavor, cost):
    rates = [
        Rate(GPU, "", D("2.00"), valid_from=at(0)),
        Rate(GPU, H100, D("4.00"), valid_from=at(0)),
    ]
    result = report([rec(flavor=flavor)], rates, start=at(0), end=at(1), group_by=["flavor"])
    assert only(result).cost == cost


def test_the_generic_rate_covers_the_time_a_flavor_rate_does_not():
    # the H100 rate starts at 12:15: 2 GPU-hours at 2.00 and 6 at 4.00 = 4.00 + 24.00
    rates = [
        Rate(GPU, "", D("2.00"), valid_from=at(0)),
        Rate(GPU, H100, D("4.00"), valid_from=at(12, 15)),
    ]
    assert only(report([rec(at(12))], rates, start=at(0), end=at(24), group_by=[])).cost == D(
        "28.00"
    )


def test_it_bills_memory_per_gib_hour():
    # 64 GiB x 10 hours = 640 GiB-hours (given in byte-hours) x 0.005 = 3.20
    record = rec(
        at(0),
        at(10),
        resource="memory",
        flavor="",
        allocated_hours=D(64 * GIB * 10),
        used_hours=D(0),
        guarantee_hours=D(32 * GIB * 10),
    )
    line = only(report([record], [MEMORY_RATE], start=at(0), end=at(10), group_by=["resource"]))

    assert line.unit == "GiB-hour"
    assert line.allocated_hours == D("640.0000")
    assert line.guarantee_hours == D("320.0000")
    assert (line.used_hours, line.idle_hours) == (None, None)  # not measured for memory
    assert line.cost == D("3.20")


def test_idle_hours_are_floored_per_bucket():
    # hour 1: 8 allocated, 2 used -> 6 idle; hour 2: 8 allocated, 9 used (over) -> 0 idle, not -1
    records = [rec(at(0), used_hours=D(2)), rec(at(1), used_hours=D(9))]
    line = only(report(records, [GPU_RATE], start=at(0), end=at(2), group_by=["team"]))

    assert (line.allocated_hours, line.used_hours, line.idle_hours) == (D(16), D(11), D(6))


def test_unused_guarantee_is_reserved_but_not_allocated_per_bucket():
    # hour 1: guarantee 8, allocated 2 -> 6 unused; hour 2: guarantee 8, allocated 10 -> 0
    records = [
        rec(at(0), allocated_hours=D(2), used_hours=D(2), guarantee_hours=D(8)),
        rec(at(1), allocated_hours=D(10), used_hours=D(10), guarantee_hours=D(8)),
    ]
    line = only(report(records, [GPU_RATE], start=at(0), end=at(2), group_by=["team"]))

    assert (line.guarantee_hours, line.unused_guarantee_hours) == (D(16), D(6))


MIXED = [
    *hourly(2, team="team-a", cost_center="cc-100", flavor=H100),  # 16 GPU-h x 4.00 = 64.00
    *hourly(2, team="team-b", cost_center="cc-100", flavor=A100, namespace="b-1"),  # 32.00
    *hourly(1, team="team-c", cost_center="cc-200", flavor=A100, namespace="c-1"),  # 16.00
    # 32 cores x 2 hours x 0.04 = 2.56
    *hourly(2, team="team-b", cost_center="cc-100", resource="cpu", flavor="", namespace="b-1",
            allocated_hours=D(32), used_hours=D(0), guarantee_hours=D(0)),
]  # fmt: skip
MIXED_RATES = [
    Rate(GPU, "", D("2.00"), valid_from=at(0)),
    Rate(GPU, H100, D("4.00"), valid_from=at(0)),
    CPU_RATE,
]


@pytest.mark.parametrize(
    ("group_by", "lines"),
    [
        (["team"], [(("team-a",), "64.00"), (("team-b",), "34.56"), (("team-c",), "16.00")]),
        (["cost_center"], [(("cc-100",), "98.56"), (("cc-200",), "16.00")]),
        (
            ["resource", "flavor"],
            [(("cpu", ""), "2.56"), ((GPU, A100), "48.00"), ((GPU, H100), "64.00")],
        ),
        ([], [((), "114.56")]),
    ],
)
def test_every_grouping_gives_the_same_grand_total(group_by, lines):
    result = report(MIXED, MIXED_RATES, start=at(0), end=at(24), group_by=group_by)

    assert [(tuple(v for _, v in line.key), str(line.cost)) for line in result.lines] == lines
    assert result.total.cost == D("114.56")


def test_a_line_mixing_resources_reports_cost_but_no_hours():
    result = report(MIXED, MIXED_RATES, start=at(0), end=at(24), group_by=["team"])
    team_b = result.lines[1]

    assert team_b.unit == ""
    assert team_b.allocated_hours is None
    assert team_b.cost == D("34.56")


@pytest.mark.parametrize(
    ("budget", "group_by", "pct"),
    [
        (JUNE, ["team"], D("24.00")),  # 24 of 100 GPU-hours
        (JUNE, ["team", "resource"], D("24.00")),
        (replace(JUNE, start=at(1)), ["team"], D("16.00")),  # the first hour is before the budget
        (replace(JUNE, limit_hours=D(72)), ["team"], D("33.33")),  # 24/72 = 33.333...
        (JUNE, ["cost_center"], None),  # a cost-centre line is not one team's
        (replace(JUNE, team="team-b"), ["team"], None),
        (replace(JUNE, start=at(5)), ["team"], None),  # the budget starts after the report
    ],
)
def test_it_shows_how_much_of_a_team_budget_a_line_used(budget, group_by, pct):
    result = report(
        hourly(3), [GPU_RATE], start=at(0), end=at(3), group_by=group_by, budgets=[budget]
    )
    assert only(result).budget_used_pct == pct


def test_a_gpu_budget_does_not_apply_to_the_teams_cpu_line():
    records = [*hourly(3), *hourly(3, resource="cpu", flavor="", allocated_hours=D(16))]
    result = report(
        records,
        [GPU_RATE, CPU_RATE],
        start=at(0),
        end=at(3),
        group_by=["team", "resource"],
        budgets=[JUNE],
    )
    assert [(line.value("resource"), line.budget_used_pct) for line in result.lines] == [
        ("cpu", None),
        (GPU, D("24.00")),
    ]


def test_it_reports_records_without_a_rate_instead_of_dropping_them():
    # rdma has no rate at all; the GPU rate ends at 00:30, so half of that bucket is unpriced too
    rdma = rec(resource="rdma/hca", flavor="", allocated_hours=D(2), used_hours=D(0))
    gpu_rate = replace(GPU_RATE, valid_to=at(0, 30))
    result = report([rdma, rec()], [gpu_rate], start=at(0), end=at(1), group_by=["resource"])

    assert [(u.record.resource, u.start, u.end, u.allocated_hours) for u in result.unpriced] == [
        ("rdma/hca", at(0), at(1), D("2.0000")),
        (GPU, at(0, 30), at(1), D("4.0000")),
    ]
    by_resource = {line.value("resource"): line for line in result.lines}
    assert by_resource["rdma/hca"].allocated_hours == D(2)  # the hours still count
    assert by_resource["rdma/hca"].cost == D("0.00")
    assert by_resource["rdma/hca"].unpriced_records == 1
    assert by_resource[GPU].cost == D("10.00")  # 4 GPU-hours priced at 2.50
    assert result.total.unpriced_records == 2


@pytest.mark.parametrize(
    ("price", "cost"),
    [(D("0.125"), D("0.12")), (D("0.135"), D("0.14")), (D("0.005"), D("0.00"))],
)
def test_it_rounds_the_line_cost_half_to_even(price, cost):
    record = rec(allocated_hours=D(1))
    rate = replace(GPU_RATE, price_per_unit_hour=price)
    assert only(report([record], [rate], start=at(0), end=at(1), group_by=[])).cost == cost


def test_it_keeps_cost_exact_until_the_line_total():
    # three buckets costing 0.001 GPU-hours x 3.00 = 0.003 each would round to 0.00 each;
    # the exact sum 0.009 is rounded once, to 0.01
    records = [rec(at(i), allocated_hours=D("0.001")) for i in range(3)]
    rate = replace(GPU_RATE, price_per_unit_hour=D(3))
    line = only(report(records, [rate], start=at(0), end=at(3), group_by=["team"]))
    assert line.cost == D("0.01")
    assert line.exact_cost == Fraction(9, 1000)


@pytest.mark.parametrize(
    ("group_by", "message"),
    [
        (["tenant"], "invalid group_by field 'tenant'; allowed: team, cost_center, resource"),
        (["team", "team"], "repeats a field"),
        ("team", "not the string 'team'"),
    ],
)
def test_it_rejects_an_invalid_grouping(group_by, message):
    with pytest.raises(ChargebackError, match=message):
        report([], [], start=at(0), end=at(1), group_by=group_by)


@pytest.mark.parametrize(("start", "end"), [(at(1), at(1)), (at(2), at(1))])
def test_it_rejects_a_period_that_ends_before_it_starts(start, end):
    with pytest.raises(ChargebackError, match="end must be after start"):
        report([], [], start=start, end=end, group_by=["team"])


@pytest.mark.parametrize(
    ("records", "rates", "message"),
    [
        ([], [GPU_RATE, replace(GPU_RATE, valid_from=at(5))], "overlapping rates"),
        ([], [replace(GPU_RATE, valid_to=GPU_RATE.valid_from)], "valid_to must be after"),
        ([], [replace(GPU_RATE, price_per_unit_hour=D(-1))], "non-negative"),
        ([], [replace(GPU_RATE, price_per_unit_hour=2.5)], "non-negative Decimal"),
        ([rec(allocated_hours=D(-1))], [GPU_RATE], "allocated_hours must be"),
        ([rec(at(0).replace(tzinfo=None), at(1))], [GPU_RATE], "timezone-aware"),
    ],
)
def test_it_rejects_inconsistent_input(records, rates, message):
    with pytest.raises(ChargebackError, match=message):
        report(records, rates, start=at(0), end=at(1), group_by=["team"])


@pytest.mark.parametrize(
    "budget",
    [replace(JUNE, limit_hours=D(0)), replace(JUNE, end=JUNE.start), replace(JUNE, limit_hours=1)],
)
def test_it_rejects_an_inconsistent_budget(budget):
    with pytest.raises(ChargebackError, match="budget"):
        report([], [], start=at(0), end=at(1), group_by=["team"], budgets=[budget])


def test_a_chargeback_error_is_a_value_error():
    assert issubclass(ChargebackError, ValueError)


def test_rows_are_flat_strings_for_json_and_csv():
    records = [*hourly(3), *hourly(3, resource="cpu", flavor="", allocated_hours=D(32))]
    result = report(
        records,
        [GPU_RATE, CPU_RATE],
        start=at(0),
        end=at(3),
        group_by=["team", "resource"],
        budgets=[JUNE],
    )

    rows = to_rows(result)
    assert [list(row) for row in rows] == [list(CSV_COLUMNS)] * 2
    assert rows == [
        {
            "team": "team-a",
            "cost_center": "",
            "resource": "cpu",
            "flavor": "",
            "namespace": "",
            "unit": "core-hour",
            "allocated_hours": "96.0000",
            "used_hours": "",
            "idle_hours": "",
            "guarantee_hours": "12.0000",
            "unused_guarantee_hours": "0.0000",
            "cost": "3.84",
            "budget_used_pct": "",
            "unpriced_records": "0",
        },
        {
            "team": "team-a",
            "cost_center": "",
            "resource": GPU,
            "flavor": "",
            "namespace": "",
            "unit": "GPU-hour",
            "allocated_hours": "24.0000",
            "used_hours": "18.0000",
            "idle_hours": "6.0000",
            "guarantee_hours": "12.0000",
            "unused_guarantee_hours": "0.0000",
            "cost": "60.00",
            "budget_used_pct": "24.00",
            "unpriced_records": "0",
        },
    ]


def test_rows_never_use_exponent_notation():
    record = rec(allocated_hours=D(0), used_hours=D(0), guarantee_hours=D(0))
    (row,) = to_rows(report([record], [GPU_RATE], start=at(0), end=at(1), group_by=["team"]))
    assert (row["allocated_hours"], row["cost"]) == ("0.0000", "0.00")


def test_diff_reports_names_the_line_a_late_sample_changed():
    window = {"start": at(0), "end": at(3), "group_by": ["team"]}
    records = [*hourly(3), *hourly(3, team="team-b", namespace="b-1")]
    frozen = freeze(report(records, [GPU_RATE], **window))
    late = rec(at(2), team="team-b", namespace="b-2", allocated_hours=D(2), used_hours=D(2))
    current = report([*records, late], [GPU_RATE], **window)

    assert diff_reports(frozen, current) == [
        LineChange(
            key=(("team", "team-b"),),
            kind="changed",
            changes=(
                ("allocated_hours", "24.0000", "26.0000"),
                ("used_hours", "18.0000", "20.0000"),
                ("guarantee_hours", "12.0000", "16.0000"),
                ("unused_guarantee_hours", "0.0000", "2.0000"),  # guarantee 4, allocated 2
                ("cost", "60.00", "65.00"),
            ),
        )
    ]
    assert diff_reports(frozen, report(records, [GPU_RATE], **window)) == []


def test_diff_reports_names_added_and_removed_lines():
    window = {"start": at(0), "end": at(1), "group_by": ["team"]}
    frozen = freeze(report([rec()], [GPU_RATE], **window))
    current = report([rec(team="team-b")], [GPU_RATE], **window)

    assert [(change.key, change.kind) for change in diff_reports(frozen, current)] == [
        ((("team", "team-a"),), "removed"),
        ((("team", "team-b"),), "added"),
    ]


def test_diff_reports_refuses_statements_of_different_periods():
    frozen = freeze(report([rec()], [GPU_RATE], start=at(0), end=at(1), group_by=["team"]))
    other = report([rec()], [GPU_RATE], start=at(0), end=at(2), group_by=["team"])
    with pytest.raises(ChargebackError, match="different periods or groupings"):
        diff_reports(frozen, other)


def test_a_frozen_statement_round_trips_through_json_data():
    result = report(MIXED, MIXED_RATES, start=at(0), end=at(24), group_by=["team", "resource"])
    statement = freeze(result)

    data = statement.to_dict()
    assert data["total_cost"] == "114.56"
    assert data["start"] == "2025-06-01T00:00:00+00:00"
    assert FrozenStatement.from_dict(data) == statement
    assert diff_reports(FrozenStatement.from_dict(data), result) == []


@pytest.mark.parametrize(
    "data",
    [
        {"group_by": ["team"]},
        {"group_by": ["team"], "start": "yesterday", "end": "", "rows": [], "total_cost": "1"},
        {"group_by": [], "start": "2025-06-01T00:00:00+00:00", "end": "2025-06-02T00:00:00+00:00",
         "rows": [], "total_cost": "one", "unpriced_records": 0},
    ],
)  # fmt: skip
def test_a_malformed_frozen_statement_is_rejected(data):
    with pytest.raises(ChargebackError, match="malformed frozen statement"):
        FrozenStatement.from_dict(data)


def test_the_module_imports_nothing_from_django_or_kubernetes():
    code = (
        "import sys, monitoring.domain.chargeback; "
        "assert not [m for m in sys.modules "
        "if m.split('.')[0] in {'django', 'kubernetes', 'pynvml'}]"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


# ---------------------------------------------------------------- invariants

TEAMS = {"team-a": "cc-100", "team-b": "cc-100", "team-c": "cc-200"}
GROUPINGS = [
    ["team"],
    ["cost_center"],
    ["resource", "flavor"],
    ["namespace", "team"],
    ["team", "cost_center", "resource", "flavor", "namespace"],
    [],
]


@st.composite
def usage(draw: st.DrawFn) -> UsageRecord:
    team = draw(st.sampled_from(sorted(TEAMS)))
    resource, flavor = draw(
        st.sampled_from([(GPU, H100), (GPU, A100), (GPU, ""), ("cpu", ""), ("memory", "")])
    )
    start = at(0) + timedelta(minutes=15 * draw(st.integers(0, 4 * 48)))
    length = timedelta(minutes=draw(st.sampled_from([15, 40, 60, 60, 24 * 60])))
    hours = st.decimals(0, 10_000, places=3)
    return UsageRecord(
        start=start,
        end=start + length,
        team=team,
        cost_center=TEAMS[team],
        namespace=f"{team}-{draw(st.sampled_from('xy'))}",
        resource=resource,
        flavor=flavor,
        allocated_hours=draw(hours),
        used_hours=draw(hours),
        guarantee_hours=draw(hours),
    )


@st.composite
def rate_card(draw: st.DrawFn) -> list[Rate]:
    change = at(0) + timedelta(minutes=draw(st.integers(1, 72 * 60)))
    price = st.decimals(0, 100, places=4)
    rates = [
        Rate(GPU, "", draw(price), valid_from=at(0), valid_to=change),
        Rate(GPU, "", draw(price), valid_from=change),
        Rate(GPU, H100, draw(price), valid_from=change - timedelta(hours=3)),
        Rate("memory", "", draw(price), valid_from=at(0)),
    ]
    # Sometimes no CPU rate at all, so unpriced records take part too.
    return rates + [Rate("cpu", "", draw(price), valid_from=at(0))] * draw(st.integers(0, 1))


@st.composite
def window(draw: st.DrawFn) -> tuple[datetime, datetime]:
    start = at(0) + timedelta(minutes=draw(st.integers(-60, 48 * 60)))
    return start, start + timedelta(minutes=draw(st.integers(1, 48 * 60)))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(usage(), max_size=25), rate_card(), window())
def test_the_total_is_the_sum_of_the_lines_for_every_grouping(records, rates, period):
    start, end = period
    totals = set()
    for group_by in GROUPINGS:
        result = report(records, rates, start=start, end=end, group_by=group_by)
        assert sum(line.exact_cost for line in result.lines) == result.total.exact_cost
        rounded = sum((line.cost for line in result.lines), D(0))
        assert abs(rounded - result.total.cost) <= D("0.01") * max(len(result.lines), 1)
        totals.add((result.total.cost, result.total.exact_cost))
    assert len(totals) == 1


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(usage(), max_size=25), rate_card(), window(), st.data())
def test_splitting_the_period_splits_the_exact_cost(records, rates, period, data):
    start, end = period
    micros = (end - start) // timedelta(microseconds=1)
    middle = start + timedelta(microseconds=data.draw(st.integers(1, micros - 1)))
    whole = report(records, rates, start=start, end=end, group_by=["team"])
    first = report(records, rates, start=start, end=middle, group_by=["team"])
    second = report(records, rates, start=middle, end=end, group_by=["team"])
    assert first.total.exact_cost + second.total.exact_cost == whole.total.exact_cost


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(usage(), max_size=25), rate_card(), window())
def test_the_report_does_not_depend_on_record_order(records, rates, period):
    start, end = period
    forward = report(records, rates, start=start, end=end, group_by=["team", "resource"])
    backward = report(
        records[::-1], rates[::-1], start=start, end=end, group_by=["team", "resource"]
    )
    assert forward == backward
    assert to_rows(forward) == to_rows(backward)


# ---------------------------------------------------------------- the optimised report = the maths


def _reference(records, rates, *, start, end, group_by, budgets=()) -> list[dict[str, object]]:
    """The report's lines computed the straightforward way: per record, per piece, in Fraction.

    Follows the module docstring literally (no summing by weight, no Decimal shortcuts), so it
    checks the optimised ``report()``: same rounded figures, same exact cost, same budgets.
    """
    micro = timedelta(microseconds=1)

    def rate_at(resource: str, flavor: str, t: datetime) -> Rate | None:
        def valid(r: Rate) -> bool:
            return r.valid_from <= t and (r.valid_to is None or t < r.valid_to)

        for want in ([flavor] if flavor else []) + [""]:
            for r in rates:
                if (r.resource, r.flavor) == (resource, want) and valid(r):
                    return r
        return None

    lines: dict[tuple, dict] = {}
    for r in records:
        a, b = max(r.start, start), min(r.end, end)
        if a >= b:
            continue
        bucket = (r.end - r.start) // micro
        f = Fraction((b - a) // micro, bucket)
        k = Fraction(1, GIB) if is_byte_resource(r.resource) else Fraction(1)
        alloc, used, guar = (
            Fraction(v) for v in (r.allocated_hours, r.used_hours, r.guarantee_hours)
        )
        gpu = is_gpu_resource(r.resource)
        key = tuple((name, getattr(r, name)) for name in group_by)
        line = lines.setdefault(
            key, {"figures": {}, "cost": Fraction(0), "unpriced": 0, "budget": {}}
        )
        figures = line["figures"].setdefault(r.resource, [Fraction(0)] * 5)
        for i, value in enumerate(
            (
                alloc,
                used if gpu else 0,
                max(alloc - used, 0) if gpu else 0,
                guar,
                max(guar - alloc, 0),
            )
        ):
            figures[i] += k * value * f
        cuts = {a, b} | {
            t
            for rate in rates
            if rate.resource == r.resource
            for t in (rate.valid_from, rate.valid_to)
            if t is not None and a < t < b
        }
        unpriced = False
        for p, q in pairwise(sorted(cuts)):
            rate = rate_at(r.resource, r.flavor, p)
            if rate is None:
                unpriced = True
            else:
                weight = Fraction((q - p) // micro, bucket)
                line["cost"] += k * alloc * weight * Fraction(rate.price_per_unit_hour)
        line["unpriced"] += unpriced
        for i, budget in enumerate(budgets):
            p, q = max(a, budget.start), min(b, budget.end)
            if (
                "team" in group_by
                and (budget.team, budget.resource) == (r.team, r.resource)
                and p < q
            ):
                weight = Fraction((q - p) // micro, bucket)
                line["budget"][i] = line["budget"].get(i, Fraction(0)) + k * alloc * weight

    def rounded(value: Fraction, places: int) -> Decimal:
        return Decimal(round(value * 10**places)).scaleb(-places)

    out = []
    for key in sorted(lines, key=lambda key: tuple(v for _, v in key)):
        line, values = lines[key], dict(key)
        single = list(line["figures"].items()) if len(line["figures"]) == 1 else None
        hours = [rounded(v, 4) for v in single[0][1]] if single else [None] * 5
        gpu = bool(single) and is_gpu_resource(single[0][0])
        uses = []
        for i, b in enumerate(budgets):
            if (
                "team" in group_by
                and b.team == values["team"]
                and values.get("resource", b.resource) == b.resource
                and b.start < end
                and start < b.end
            ):
                used = line["budget"].get(i, Fraction(0))
                pct = used * 100 / Fraction(b.limit_hours)
                uses.append((b.resource, b.start, b.end, rounded(used, 4), rounded(pct, 2)))
        out.append(
            {
                "key": key,
                "allocated": hours[0],
                "used": hours[1] if gpu else None,
                "idle": hours[2] if gpu else None,
                "guarantee": hours[3],
                "unused_guarantee": hours[4],
                "cost": rounded(line["cost"], 2),
                "exact_cost": line["cost"],
                "unpriced": line["unpriced"],
                "budgets": tuple(uses),
            }
        )
    return out


def _as_reference(result: Report) -> list[dict[str, object]]:
    return [
        {
            "key": line.key,
            "allocated": line.allocated_hours,
            "used": line.used_hours,
            "idle": line.idle_hours,
            "guarantee": line.guarantee_hours,
            "unused_guarantee": line.unused_guarantee_hours,
            "cost": line.cost,
            "exact_cost": line.exact_cost,
            "unpriced": line.unpriced_records,
            "budgets": tuple(
                (use.resource, use.start, use.end, use.used_hours, use.used_pct)
                for use in line.budgets
            ),
        }
        for line in result.lines
    ]


@st.composite
def budget_list(draw: st.DrawFn) -> list[Budget]:
    out = []
    for team in draw(st.lists(st.sampled_from(sorted(TEAMS)), max_size=3, unique=True)):
        first = at(0) + timedelta(minutes=draw(st.integers(-120, 48 * 60)))
        out.append(
            Budget(
                team,
                draw(st.sampled_from([GPU, "memory", "cpu"])),
                start=first,
                end=first + timedelta(minutes=draw(st.integers(1, 48 * 60))),
                limit_hours=draw(st.decimals("0.001", 10_000, places=3)),
            )
        )
    return out


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    st.lists(usage(), max_size=30),
    rate_card(),
    window(),
    budget_list(),
    st.sampled_from([*GROUPINGS, ["team", "resource"]]),
)
def test_the_optimised_report_equals_the_straightforward_fraction_maths(
    records, rates, period, budgets, group_by
):
    start, end = period
    result = report(records, rates, start=start, end=end, group_by=group_by, budgets=budgets)
    expected = _reference(records, rates, start=start, end=end, group_by=group_by, budgets=budgets)

    assert _as_reference(result) == expected
    assert result.total.exact_cost == sum((line["exact_cost"] for line in expected), Fraction(0))


def test_the_optimised_report_equals_the_straightforward_maths_on_seeded_random_data():
    # Daily and hourly buckets, clipped at odd instants, several rate changes mid-bucket.
    rng = random.Random(20251101)
    teams = [f"team-{i}" for i in range(12)]
    kinds = [(GPU, H100), (GPU, A100), ("cpu", ""), ("memory", ""), ("rdma/hca", "")]
    records = []
    for team in teams:
        for resource, flavor in kinds:
            for d in range(6):
                start = at(0, day=1 + d)
                length = timedelta(days=1) if rng.random() < 0.5 else timedelta(hours=1)
                scale = GIB if resource == "memory" else 1
                records.append(
                    UsageRecord(
                        start=start,
                        end=start + length,
                        team=team,
                        cost_center=f"cc-{teams.index(team) % 3}",
                        namespace=f"{team}-{rng.choice('xy')}",
                        resource=resource,
                        flavor=flavor,
                        allocated_hours=D(rng.randrange(10**9)) / 10**6 * scale,
                        used_hours=D(rng.randrange(10**9)) / 10**6 * scale,
                        guarantee_hours=D(rng.randrange(10**9)) / 10**6 * scale,
                    )
                )
    rates = [
        Rate(GPU, "", D("2.50"), valid_from=at(0) - timedelta(days=9), valid_to=at(7, 13)),
        Rate(GPU, "", D("2.75"), valid_from=at(7, 13)),
        Rate(GPU, H100, D("3.10"), valid_from=at(0), valid_to=at(49, 7)),
        Rate(GPU, H100, D("3.333333"), valid_from=at(49, 7)),
        Rate("cpu", "", D("0.04"), valid_from=at(0) - timedelta(days=9)),
        Rate("memory", "", D("0.005"), valid_from=at(0) - timedelta(days=9)),
    ]
    budgets = [
        Budget(team, GPU, start=at(0), end=at(0, day=4), limit_hours=D(3000)) for team in teams
    ] + [Budget("team-3", "cpu", start=at(30), end=at(0, day=8), limit_hours=D("777.7"))]
    start, end = at(5, 17), at(19, 41, day=6)
    for group_by in (*GROUPINGS, ["team", "resource"]):
        result = report(records, rates, start=start, end=end, group_by=group_by, budgets=budgets)
        expected = _reference(
            records, rates, start=start, end=end, group_by=group_by, budgets=budgets
        )
        assert _as_reference(result) == expected
