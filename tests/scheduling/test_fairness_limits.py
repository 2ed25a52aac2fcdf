"""H-DRF under department limits (issue 28): the literal cases that were wrong, both solver paths.

Each case is the minimal problem from the issue, solved by the default path (closed-form
crossings for the deepest groups) and by the reference path (the nested search everywhere).
"""

from __future__ import annotations

import pytest

from scheduling.domain import fairness
from scheduling.domain.fairness import Allocation

TOL = 1e-9


def _solve_both(problem: dict) -> list[dict[str, Allocation]]:
    capacity, tenants, integral = fairness.parse_problem(problem)
    return [
        fairness._solve(fairness._validate(capacity, tenants, integral)),
        fairness._solve_hierarchy_reference(fairness._validate(capacity, tenants, integral)),
    ]


def _amounts(result: dict[str, Allocation]) -> dict[str, dict[str, float]]:
    return {n: {r: round(v, 9) for r, v in a.resources.items() if v} for n, a in result.items()}


PATHS = ["fast", "reference"]


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_department_limit_binds_on_a_team_two_levels_below_it(path):
    # Issue 28, case 1: t03 is stopped by the CPUs; t04 alone then grows on memory, which d01
    # limits to 2. It used to get all 3 (its level leapt past d01's limit as the CPUs ran out).
    result = _solve_both(
        {
            "capacity": {"cpu": 1, "mem": 3},
            "tenants": [
                {"name": "d01", "demand": {}, "limit": {"mem": 2}},
                {"name": "d02", "demand": {}, "parent": "d01"},
                {"name": "t03", "demand": {"cpu": 2}, "weight": 2, "parent": "d02"},
                {"name": "t04", "demand": {"mem": 3}, "weight": 1, "parent": "d02"},
            ],
        }
    )[path]

    assert _amounts(result) == {
        "d01": {"cpu": 1, "mem": 2},
        "d02": {"cpu": 1, "mem": 2},
        "t03": {"cpu": 1},
        "t04": {"mem": 2},
    }
    assert result["d01"].reason == "limit"
    assert result["t04"].reason == "saturated:mem"


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_department_grows_up_to_its_limit_while_the_resource_is_free(path):
    # Issue 28, case 2: once t07 has its memory, t08 is the only one growing, on disk; d05's
    # limit of 10 disks must be reached (it used to stop at 6 with 18 disks free).
    result = _solve_both(
        {
            "capacity": {"disk": 24, "mem": 20},
            "tenants": [
                {"name": "d05", "demand": {}, "limit": {"disk": 10}},
                {"name": "t07", "demand": {"mem": 10}, "weight": 2, "parent": "d05"},
                {"name": "t08", "demand": {"disk": 100}, "weight": 1, "parent": "d05"},
            ],
        }
    )[path]

    assert _amounts(result) == {
        "d05": {"disk": 10, "mem": 10},
        "t07": {"mem": 10},
        "t08": {"disk": 10},
    }
    assert result["d05"].reason == "limit"
    assert result["t07"].reason == "demand-met"


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_two_departments_catching_up_at_once_split_the_scarce_resource_by_weight(path):
    # Issue 28, case 3: when memory and GPUs are full, d17 holds disk 1/3 and d21 disk 1/2;
    # ignoring the full resources, d17 catches up to 1/2 first and then both grow alike:
    # 0.5/0.5 by their equal weights (it used to be 0.43/0.57, by how far each had to go).
    result = _solve_both(
        {
            "capacity": {"mem": 1, "nvidia.com/gpu": 1, "disk": 1},
            "tenants": [
                {"name": "d17", "demand": {}},
                {"name": "t18", "demand": {"disk": 1}, "parent": "d17"},
                {"name": "t20", "demand": {"mem": 1}, "weight": 3, "parent": "d17"},
                {"name": "d21", "demand": {}},
                {"name": "t22", "demand": {"nvidia.com/gpu": 1}, "parent": "d21"},
                {"name": "t24", "demand": {"disk": 1}, "weight": 0.5, "parent": "d21"},
            ],
        }
    )[path]

    assert result["t18"].resources["disk"] == pytest.approx(0.5, abs=TOL)
    assert result["t24"].resources["disk"] == pytest.approx(0.5, abs=TOL)
    assert result["t20"].resources["mem"] == pytest.approx(1.0, abs=TOL)
    assert result["t22"].resources["nvidia.com/gpu"] == pytest.approx(1.0, abs=TOL)


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_departments_own_floor_is_what_its_childrens_floors_leave(path):
    # d1 guarantees 50 GPUs, 10 of them through its team c1: its own demand's floor is the 40
    # left, so d1 holds 50 in all and d2 (also 50 guaranteed) the other 50. Counting d1's own
    # floor in full (50 + 10) gave d1 60 and d2 40.
    result = _solve_both(
        {
            "capacity": {"nvidia.com/gpu": 100},
            "tenants": [
                {
                    "name": "d1",
                    "demand": {"nvidia.com/gpu": 100},
                    "guarantee": {"nvidia.com/gpu": 50},
                },
                {
                    "name": "c1",
                    "demand": {"nvidia.com/gpu": 100},
                    "guarantee": {"nvidia.com/gpu": 10},
                    "parent": "d1",
                    "weight": 0.001,
                },
                {
                    "name": "d2",
                    "demand": {"nvidia.com/gpu": 100},
                    "guarantee": {"nvidia.com/gpu": 50},
                },
            ],
            "integral": ["nvidia.com/gpu"],
        }
    )[path]

    assert result["d1"].resources["nvidia.com/gpu"] == 50
    assert result["d2"].resources["nvidia.com/gpu"] == 50
