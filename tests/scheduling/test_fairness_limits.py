"""H-DRF under department limits (issue 28): the literal cases that were wrong, both solver paths.

Each case is the minimal problem from the issue, solved by the default path (closed-form
crossings for the deepest groups) and by the reference path (the nested search everywhere).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.fairness import make_problem as make_bench_problem
from bench.fairness_limits import limit_violations, make_problem, pareto_violations
from scheduling.domain import fairness
from scheduling.domain.fairness import Allocation, Tenant

TOL = 1e-9
GPU = "nvidia.com/gpu"


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


# ---------------------------------------------------------------- properties

SOLVERS = [fairness._solve, fairness._solve_hierarchy_reference]


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(0, 2**32), st.booleans())
def test_no_tenant_or_department_exceeds_its_limit(seed, guarantees):
    # Random 2-3-level hierarchies with limits at every level (bench/fairness_limits.py runs the
    # same checks on 10,000 of them): no tenant or department over its limit or the capacity.
    capacity, tenants = make_problem(random.Random(seed), guarantees=guarantees)
    result = fairness._solve(fairness._validate(capacity, tenants, ()))

    assert limit_violations(capacity, tenants, result) == []


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(0, 2**32))
def test_nothing_idles_that_a_short_team_could_use_below_limited_departments(seed):
    # Two levels (departments and teams), limits at both: no team short of its demand and its
    # limit could be raised with the leftovers that every limit on its path still allows
    # (Pareto efficiency under limits). Three levels: the soak (bench/fairness_limits.py).
    capacity, tenants = make_problem(random.Random(seed), depths=(2,))
    result = fairness._solve(fairness._validate(capacity, tenants, ()))

    assert pareto_violations(capacity, tenants, result) == []


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 2**32))
def test_the_reference_path_holds_the_limits_and_wastes_nothing_too(seed):
    capacity, tenants = make_problem(random.Random(seed), depths=(2,))
    result = fairness._solve_hierarchy_reference(fairness._validate(capacity, tenants, ()))

    assert limit_violations(capacity, tenants, result) == []
    assert pareto_violations(capacity, tenants, result) == []


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_team_below_a_waiting_middle_department_is_not_left_short(path):
    # Three levels (make_problem(Random(0))): d20 holds CPU that its teams no longer grow on,
    # above what its level in d17 allows, so it waits for that level to pass it; its sibling
    # d18 is frozen (disk full) and d17's box stops at its GPU limit, so the level never got
    # there, and t21 kept 1.94 GPUs of the 7 that d17's limit leaves (the old solver too).
    # Now the wait ends where the level can rise no more: d20 leaps part of the way, to d17's
    # limit.
    capacity, tenants = make_problem(random.Random(0))
    result = SOLVERS[path](fairness._validate(capacity, tenants, ()))

    assert pareto_violations(capacity, tenants, result) == []


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_team_leaping_where_its_root_stops_is_not_left_short(path):
    # Soak (seed 28), minimised. The GPUs run out first; d05 then grows on cpu (t07) and mem
    # (t13) until d11 reaches its mem limit. d05's mem stops at 0.218 of 2 (share 0.109), and
    # that is its dominant share where its box 0.5 t passes it: its water level's end. Just
    # past that level, t07 leaps on cpu from 0.06 to d05's limit 0.1; at the end itself it
    # had not, and t07 stayed at 0.06 marked as if its demand were met (the old solver too).
    result = _solve_both(
        {
            "capacity": {"mem": 2, "cpu": 1, GPU: 24},
            "tenants": [
                {"name": "d05", "demand": {}, "weight": 0.5, "limit": {"cpu": 0.1}},
                {"name": "d06", "demand": {}, "parent": "d05"},
                {"name": "t07", "demand": {"cpu": 0.2}, "parent": "d06"},
                {"name": "t08", "demand": {"mem": 2.9, GPU: 13}, "parent": "d06"},
                {"name": "d11", "demand": {}, "parent": "d05", "limit": {"mem": 0.12}},
                {"name": "t13", "demand": {"mem": 1}, "parent": "d11"},
                {"name": "t03", "demand": {GPU: 35}},
                {"name": "t22", "demand": {GPU: 19}, "weight": 4},
            ],
        }
    )[path]

    assert result["t07"].resources["cpu"] == pytest.approx(0.1, rel=TOL)
    assert result["t07"].reason == "saturated:cpu"
    assert result["d05"].resources["cpu"] == pytest.approx(0.1, rel=TOL)
    assert result["t13"].resources["mem"] == pytest.approx(0.12, rel=TOL)
    # The rest is unchanged by the leap: the GPUs were shared before it.
    assert result["t08"].resources["mem"] == pytest.approx(0.098166, abs=1e-6)
    assert result["t22"].resources[GPU] == pytest.approx(18.847955, abs=1e-6)


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_full_resource_no_longer_holds_a_middle_department_back(path):
    # Soak (seed 28), minimised. When the CPUs run out, d09 holds cpu (t10) equal to its box
    # and grows on memory alone (t11). A resource full in the cluster bounds no group any more
    # (H-DRF ignores it), so t11 grows up to d08's mem limit, or until memory fills. It used
    # to wait for d09's box to pass the cpu it holds, which d08's end never reached: t11 kept
    # 0.67 of the 2 left to it, marked as if its demand were met (the old solver too).
    result = _solve_both(
        {
            "capacity": {"cpu": 2, GPU: 24, "mem": 10},
            "tenants": [
                {"name": "d01", "demand": {}, "weight": 4},
                {"name": "d02", "demand": {}, "limit": {GPU: 4}, "parent": "d01"},
                {"name": "t03", "demand": {"mem": 6.4, GPU: 26.8}, "parent": "d02"},
                {"name": "t04", "demand": {"mem": 7.05}, "parent": "d02"},
                {"name": "d05", "demand": {}, "weight": 0.5, "parent": "d01"},
                {"name": "t07", "demand": {"cpu": 3}, "parent": "d05"},
                {"name": "d08", "demand": {}, "limit": {"mem": 2}},
                {"name": "d09", "demand": {}, "parent": "d08"},
                {"name": "t10", "demand": {"cpu": 2}, "weight": 3, "parent": "d09"},
                {"name": "t11", "demand": {"mem": 2.5}, "parent": "d09"},
            ],
        }
    )[path]

    # Memory fills first: d01 holds 8.005, so 1.995 are left, under d08's limit of 2.
    assert result["t11"].resources["mem"] == pytest.approx(10 - 8.005224, abs=1e-6)
    assert result["t11"].reason == "saturated:mem"
    assert result["d01"].resources["mem"] + result["d08"].resources["mem"] == pytest.approx(10)
    assert result["t10"].resources["cpu"] == pytest.approx(0.400261, abs=1e-6)


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_team_below_a_group_bound_where_its_resource_stops_is_not_left_short(path):
    """Soak (seed 28), minimised.

    The CPUs run out at t = 0.25, and d01's GPU limit (12) binds at once: t05 freezes at 3
    GPUs, t09 at 9. d01's children's group (d02, d04, d08) then stands exactly where its GPU
    sum meets d01's box (the limit, 0.5 of the GPUs): t05 sits a few ulps below its end
    there, so the GPU still counts as *rising* (its right derivative is t05's slope), the
    crossing is on the GPU, and the group is neither pinned nor waiting. Just above, the GPU
    stops and the group would leap on memory (t07) up to d01's mem limit 36; the water level
    ends at d01's end (0.25 (1 + 1e-9)) without looking there. t07 keeps 6.25 of its 90 while
    d01 holds 35.73 of its 36 (short by 0.3 % of its demand), marked as if its demand were met.
    The fix: a member frozen at an event keeps its amount as a floor, so it no longer rises
    a few ulps below its end (the closed form then sees the GPU stop and d04's group leap);
    in the search, d04's group is pinned below that jump, and d01's children's group, with
    nothing rising and over just above, counts as pinned below the jump too, so the leap is
    taken part of the way, to d01's mem limit.
    """
    result = _solve_both(
        {
            "capacity": {"mem": 100, GPU: 24, "cpu": 100},
            "tenants": [
                {"name": "d01", "demand": {}, "weight": 2, "limit": {GPU: 12, "mem": 36}},
                {"name": "d02", "demand": {}, "weight": 4, "parent": "d01"},
                {"name": "t03", "demand": {"cpu": 106, "mem": 58}, "parent": "d02"},
                {"name": "d04", "demand": {}, "parent": "d01"},
                {"name": "t05", "demand": {GPU: 27}, "parent": "d04"},
                {"name": "t07", "demand": {"mem": 90}, "weight": 0.5, "parent": "d04"},
                {"name": "d08", "demand": {"cpu": 97}, "weight": 3, "parent": "d01"},
                {"name": "t09", "demand": {GPU: 26, "mem": 40}, "parent": "d08"},
                {"name": "d10", "demand": {"cpu": 67}, "weight": 2},
            ],
        }
    )[path]

    assert result["d01"].resources["mem"] == pytest.approx(36, rel=TOL)
    assert result["t07"].resources["mem"] == pytest.approx(6.25 + 36 - 35.729577, abs=1e-5)


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_leap_to_a_departments_limit_is_kept_after_its_event(path):
    """Soak (seed 28), minimised.

    When the CPUs run out, d08's children's group is pinned below a jump (t11 grows on
    memory alone) and d08's box stops at its mem limit 1.9: the water level can rise no
    more, so the group leaps part of the way, to the limit (``pinned_past_limit``), and the
    event freezes t11 at the level it leapt to. But the state after the event is found again
    from the water level: d09 holds GPUs (t10's, frozen by the CPUs) above its box and waits
    for it, so d08's group stands below the jump again and t11 below its new end. t11 keeps
    0.43 of memory where d08's limit leaves it 0.6 (d08 holds 1.73 of 1.9), marked as
    saturated on memory that is not full. The fix: the members that a leap's event freezes
    keep what the leap gave them (it becomes their floor), wherever their group's level is
    found again.
    """
    result = _solve_both(
        {
            "capacity": {"cpu": 2, GPU: 24, "mem": 10},
            "tenants": [
                {"name": "d01", "demand": {}, "weight": 4},
                {"name": "d02", "demand": {}, "limit": {GPU: 4}, "parent": "d01"},
                {"name": "t03", "demand": {"mem": 6.4, GPU: 26.8}, "parent": "d02"},
                {"name": "t04", "demand": {"mem": 7.05}, "parent": "d02"},
                {"name": "d05", "demand": {}, "weight": 0.5, "parent": "d01"},
                {"name": "t07", "demand": {"cpu": 3}, "parent": "d05"},
                {"name": "d08", "demand": {}, "limit": {"mem": 1.9}},
                {"name": "d09", "demand": {}, "parent": "d08"},
                {"name": "t10", "demand": {GPU: 34, "cpu": 2}, "weight": 3, "parent": "d09"},
                {"name": "t11", "demand": {"mem": 2}, "parent": "d09"},
                {"name": "d16", "demand": {}, "parent": "d08"},
                {"name": "t19", "demand": {"cpu": 1, "mem": 6}, "parent": "d16"},
            ],
        }
    )[path]

    assert result["d08"].resources["mem"] == pytest.approx(1.9, rel=TOL)


@st.composite
def catching_up(draw):
    """Departments, each with a team on a resource of its own and a disk team, whose own teams
    meet their demands at one water level; each department then leaps on the disk, and the
    leaps pass the disk's capacity: ``(capacity, tenants, weights, held)``, ``held`` the disk
    each department holds when the leaps start."""
    n = draw(st.integers(2, 4))
    weights = [draw(st.sampled_from((0.5, 1.0, 2.0, 3.0))) for _ in range(n)]
    top = max(weights)
    capacity = {"disk": 1.0}
    tenants = []
    held = []
    for i, w in enumerate(weights):
        a = draw(st.sampled_from((1.0, 2.0, 3.0, 4.0)))  # the own team's weight
        b = draw(st.sampled_from((0.1, 0.25, 0.5, 1.0))) * a  # the disk team's, at most that
        capacity[f"x{i}"] = 1.0
        # The own team's demand is met at water level 1 / top, where the department's dominant
        # share (on x{i}) is w / top; the disk team then holds b / a of that.
        tenants += [
            Tenant(f"d{i}", demand={}, weight=w),
            Tenant(f"d{i}-own", demand={f"x{i}": w / top}, weight=a, parent=f"d{i}"),
            Tenant(f"d{i}-disk", demand={"disk": 10.0}, weight=b, parent=f"d{i}"),
        ]
        held.append(b / a * w / top)
    return capacity, tenants, weights, held


def _water_fill(weights: list[float], held: list[float], capacity: float) -> list[float]:
    """Each keeps what it holds; the rest goes to the lowest ``amount / weight`` first."""
    lo, hi = 0.0, capacity / min(weights) + max(held)
    for _ in range(200):
        u = 0.5 * (lo + hi)
        if sum(max(h, w * u) for w, h in zip(weights, held, strict=True)) > capacity:
            hi = u
        else:
            lo = u
    return [max(h, w * lo) for w, h in zip(weights, held, strict=True)]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(catching_up(), st.sampled_from(range(2)))
def test_departments_catching_up_at_once_split_by_weight(problem, path):
    capacity, tenants, weights, held = problem
    if sum(held) >= 1.0 - 1e-9:
        return  # the disk ran out first: nothing to catch up
    result = SOLVERS[path](fairness._validate(capacity, tenants, ()))

    want = _water_fill(weights, held, 1.0)
    got = [result[f"d{i}"].resources["disk"] for i in range(len(weights))]
    assert got == pytest.approx(want, abs=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(catching_up(), st.data())
def test_over_reporting_does_not_pay_when_departments_catch_up(problem, data):
    # Strategy-proofness spot check (no guarantees): a team that asks for more of what it
    # wants, or for something it does not need, never ends up with more of what it needs.
    capacity, tenants, _, _ = problem
    liar = data.draw(st.sampled_from([t for t in tenants if t.parent]))
    extra = data.draw(st.sampled_from(sorted(capacity)))
    factor = data.draw(st.sampled_from((1.1, 2.0, 10.0)))
    lie = dict(liar.demand)
    lie[extra] = lie.get(extra, 0.5) * factor
    honest = fairness._solve(fairness._validate(capacity, tenants, ()))
    lying = fairness._solve(
        fairness._validate(
            capacity, [replace(t, demand=lie) if t is liar else t for t in tenants], ()
        )
    )

    def progress(result):
        got = result[liar.name].resources
        return min(min(got[r], v) / v for r, v in liar.demand.items())

    assert progress(lying) <= progress(honest) * (1 + 1e-9) + 1e-12


def test_the_benchs_ten_thousand_tenant_three_level_problem_leaves_no_team_short():
    """``bench/fairness.py``'s 3-level problem at 10,000 tenants (guarantees and limits,
    continuous): no team that the leftovers within every limit on its path could raise.
    Before the members frozen at a leap's event kept their amounts as floors, 243 teams were
    short here (their groups' levels found again below the leaps; 1.35 units of memory idle)."""
    capacity, tenants = make_bench_problem(10_000, hierarchy=True)
    result = fairness.solve(capacity, tenants)

    assert limit_violations(capacity, tenants, result) == []
    assert pareto_violations(capacity, tenants, result) == []


@pytest.mark.parametrize("path", range(2), ids=PATHS)
def test_a_cpu_team_with_no_limit_on_its_path_gets_the_cpu_left(path):
    """Soak with ``--reference --problems 2000`` (seed 28): 1 of 2000, minimised; the
    nested-search (reference) path alone failed it, before this branch too.

    No limit lies on t12's path (d10, d11) and it wants only cpu; the CPUs left by d01 (at
    its cpu limit) and d23 are 1.067314. When the GPUs run out, the roots leap and catch up,
    and stop where d01's cpu limit is reached: 9.3e-13 (in shares) short of it, which the
    catch-up's excess counts as reached (its tolerance is absolute, 1e-12) but the test of
    which limits were reached did not (relative, 1.8e-13 for a limit of 0.176). With
    nothing found there, every resource moving was marked full: the CPUs, 0.38 of them idle,
    and t12 stopped at 0.684568. Both tests now use the same absolute tolerance.
    """
    result = _solve_both(
        {
            "capacity": {"cpu": 2.0, "disk": 2.0, "nvidia.com/gpu": 100.0},
            "tenants": [
                {"name": "d01", "demand": {GPU: 85.267}, "weight": 2, "limit": {"cpu": 0.352}},
                {"name": "d02", "demand": {}, "weight": 3, "parent": "d01"},
                {
                    "name": "t03",
                    "demand": {"cpu": 1.32, "disk": 0.422},
                    "weight": 0.5,
                    "parent": "d02",
                },
                {
                    "name": "t04",
                    "demand": {GPU: 112.682, "disk": 2.751},
                    "weight": 1,
                    "parent": "d02",
                },
                {"name": "t05", "demand": {GPU: 21.036}, "weight": 1, "parent": "d02"},
                {"name": "d08", "demand": {}, "weight": 3, "parent": "d01"},
                {
                    "name": "t09",
                    "demand": {"disk": 1.261, "cpu": 0.993, GPU: 78.308},
                    "weight": 1,
                    "parent": "d08",
                },
                {"name": "d10", "demand": {}, "weight": 3},
                {"name": "d11", "demand": {}, "weight": 1, "parent": "d10"},
                {"name": "t12", "demand": {"cpu": 1.712}, "weight": 4, "parent": "d11"},
                {"name": "t13", "demand": {GPU: 9.233}, "weight": 3, "parent": "d11"},
                {
                    "name": "d14",
                    "demand": {},
                    "weight": 4,
                    "limit": {"disk": 0.198},
                    "parent": "d10",
                },
                {"name": "t15", "demand": {GPU: 108.332}, "weight": 1, "parent": "d14"},
                {"name": "t16", "demand": {"disk": 1.065}, "weight": 2, "parent": "d14"},
                {"name": "d23", "demand": {}, "weight": 2},
                {"name": "d24", "demand": {}, "weight": 4, "parent": "d23"},
                {
                    "name": "t25",
                    "demand": {"cpu": 2.053, "disk": 1.013},
                    "weight": 2,
                    "parent": "d24",
                },
                {"name": "t26", "demand": {"disk": 0.548}, "weight": 1, "parent": "d24"},
                {
                    "name": "t27",
                    "demand": {"cpu": 2.074, "disk": 1.608},
                    "weight": 3,
                    "parent": "d24",
                },
                {"name": "d28", "demand": {}, "weight": 3, "parent": "d23"},
                {
                    "name": "t29",
                    "demand": {"disk": 1.014, GPU: 70.271},
                    "weight": 1,
                    "parent": "d28",
                },
                {"name": "t30", "demand": {"disk": 0.666}, "weight": 0.5, "parent": "d28"},
                {"name": "d31", "demand": {}, "weight": 2, "parent": "d23"},
                {
                    "name": "t32",
                    "demand": {"disk": 0.298, GPU: 13.455, "cpu": 2.433},
                    "weight": 2,
                    "parent": "d31",
                },
                {"name": "t33", "demand": {"disk": 0.298}, "weight": 0.5, "parent": "d31"},
            ],
        }
    )[path]

    assert result["t12"].resources["cpu"] == pytest.approx(2 - 0.352 - 0.580686, abs=1e-5)
