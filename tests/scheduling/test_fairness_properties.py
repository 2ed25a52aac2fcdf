"""Invariants of the DRF solver on random problems (hypothesis, bounded example counts)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.domain.fairness import Allocation, Tenant, solve

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
GPU = "nvidia.com/gpu"
TOL = 1e-7

amount = st.floats(min_value=0.0, max_value=100.0, allow_nan=False).map(lambda x: round(x, 3))
weight = st.sampled_from([0.5, 1.0, 2.0, 3.0, 7.5])


@st.composite
def problems(draw, *, guarantees=True, limits=True, hierarchy=True, whole_gpus=False):
    """Return (capacity, tenants): up to 7 tenants over 3 resources, GPUs whole when asked."""
    capacity = {r: float(draw(st.integers(min_value=1, max_value=40))) for r in RESOURCES}
    n = draw(st.integers(min_value=1, max_value=7))
    names = [f"t{i}" for i in range(n)]
    left = dict(capacity)
    tenants = []
    for i, name in enumerate(names):
        demand = {}
        for r in RESOURCES:
            if draw(st.booleans()):
                value = draw(amount)
                demand[r] = float(round(value)) if whole_gpus and r == GPU else value
        guarantee = {}
        if guarantees and draw(st.booleans()):
            for r in demand:
                g = round(draw(st.floats(0.0, 1.0)) * left[r] / 2, 3)
                guarantee[r] = g
                left[r] -= g
        limit = None
        if limits and draw(st.booleans()):
            limit = {r: max(guarantee.get(r, 0.0), draw(amount)) for r in demand}
        parent = None
        if hierarchy and i > 0 and draw(st.booleans()):
            parent = names[draw(st.integers(0, i - 1))]
        tenants.append(Tenant(name, demand, draw(weight), guarantee, limit, parent))
    # A parent's children's guarantees must fit its limit: drop limits that would not.
    return capacity, [_fit_limit(t, tenants) for t in tenants]


def _fit_limit(tenant: Tenant, tenants: list[Tenant]) -> Tenant:
    if tenant.limit is None:
        return tenant
    kids = _guarantee(tenant.name, tenants)
    if any(kids.get(r, 0.0) > v for r, v in tenant.limit.items()):
        return Tenant(tenant.name, tenant.demand, tenant.weight, tenant.guarantee, None, None)
    return tenant


def _guarantee(name: str, tenants: list[Tenant]) -> dict[str, float]:
    """Effective guarantee: max of own and the children's summed effective guarantees."""
    own = next(t for t in tenants if t.name == name).guarantee
    kids: dict[str, float] = {}
    for t in tenants:
        if t.parent == name:
            for r, v in _guarantee(t.name, tenants).items():
                kids[r] = kids.get(r, 0.0) + v
    return {r: max(own.get(r, 0.0), kids.get(r, 0.0)) for r in set(own) | set(kids)}


def _most(name: str, tenants: list[Tenant]) -> dict[str, float]:
    """The most a tenant can use: a team its demand cut to its limit along the demand vector
    (or its floor where larger); a department its own demand plus its children's, each
    resource within its limit (a department's limit on one resource stops only the members
    that need it)."""
    me = next(t for t in tenants if t.name == name)
    kids = [t for t in tenants if t.parent == name]
    limit = me.limit or {}
    if not kids:
        d = me.demand
        f = min([1.0] + [limit[r] / v for r, v in d.items() if r in limit and v > 0])
        return {
            r: max(d.get(r, 0.0) * f, min(d.get(r, 0.0), me.guarantee.get(r, 0.0)))
            for r in RESOURCES
        }
    total = {r: me.demand.get(r, 0.0) for r in RESOURCES}
    for kid in kids:
        for r, v in _most(kid.name, tenants).items():
            total[r] += v
    return {r: min(v, limit.get(r, math.inf)) for r, v in total.items()}


def _lower(name: str, tenants: list[Tenant]) -> dict[str, float]:
    """What a tenant is sure to get: its guarantee up to its demand (own members' for a parent)."""
    me = next(t for t in tenants if t.name == name)
    kids = [t for t in tenants if t.parent == name]
    if not kids:
        return {r: min(me.guarantee.get(r, 0.0), me.demand.get(r, 0.0)) for r in RESOURCES}
    total = dict.fromkeys(RESOURCES, 0.0)
    for kid in kids:
        for r, v in _lower(kid.name, tenants).items():
            total[r] += v
    for r in RESOURCES:
        extra = max(me.guarantee.get(r, 0.0) - total[r], 0.0)
        total[r] += min(extra, me.demand.get(r, 0.0))
    return total


def _effective_demand(name: str, tenants: list[Tenant]) -> dict[str, float]:
    """Own demand plus what each child can use: its effective demand within its limit, or floor."""
    own = next(t for t in tenants if t.name == name).demand
    total = {r: own.get(r, 0.0) for r in RESOURCES}
    for t in tenants:
        if t.parent == name:
            child = _effective_demand(t.name, tenants)
            limit = t.limit or {}
            f = min([1.0] + [limit[r] / v for r, v in child.items() if r in limit and v > 0])
            floor = _guarantee(t.name, tenants)
            for r, v in child.items():
                total[r] += max(v * f, min(v, floor.get(r, 0.0)))
    return total


def _used(result: dict[str, Allocation], names: list[str], resource: str) -> float:
    return math.fsum(result[n].resources[resource] for n in names)


# ---------------------------------------------------------------- all problems


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problems(), st.booleans())
def test_it_never_exceeds_capacity_nor_a_parents_allocation(problem, integral):
    capacity, tenants = problem
    result = solve(capacity, tenants, integral={GPU} if integral else set())

    for parent in [None, *(t.name for t in tenants)]:
        kids = [t.name for t in tenants if t.parent == parent]
        for r in RESOURCES:
            room = capacity[r] if parent is None else result[parent].resources[r]
            assert _used(result, kids, r) <= room * (1 + 1e-12)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problems(), st.booleans())
def test_it_honours_limits_demands_and_guarantees(problem, integral):
    capacity, tenants = problem
    result = solve(capacity, tenants, integral={GPU} if integral else set())

    for t in tenants:
        got = result[t.name].resources
        demand = _most(t.name, tenants)
        # A department holds what its members can use (its allocation is their sum): its own
        # guarantee beyond its children's is held for its own demand, not stranded.
        guarantee = _lower(t.name, tenants)
        for r in RESOURCES:
            assert got[r] <= demand[r] * (1 + TOL) + TOL
            if t.limit is not None and r in t.limit:
                assert got[r] <= t.limit[r] * (1 + TOL) + TOL
            # One unit of rounding for a fractional guarantee on an integral resource.
            slack = 1.0 if integral and r == GPU else TOL
            assert got[r] >= min(guarantee.get(r, 0.0), demand[r]) - slack


@settings(max_examples=100, deadline=None, derandomize=True)
@given(problems(), st.booleans(), st.randoms(use_true_random=False))
def test_it_is_deterministic_and_independent_of_tenant_order(problem, integral, rnd):
    capacity, tenants = problem
    shuffled = list(tenants)
    rnd.shuffle(shuffled)
    kinds = {GPU} if integral else set()

    first = solve(capacity, tenants, integral=kinds)

    assert solve(capacity, shuffled, integral=kinds) == first
    assert solve(capacity, tenants, integral=kinds) == first
    assert list(first) == sorted(t.name for t in tenants)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(problems(whole_gpus=True))
def test_it_gives_whole_numbers_of_integral_resources(problem):
    capacity, tenants = problem
    result = solve(capacity, tenants, integral={GPU})

    assert all(a.resources[GPU] == int(a.resources[GPU]) for a in result.values())


# ---------------------------------------------------------------- flat, without guarantees


def _flat(integral: bool):
    # Whole GPU demands and no limits with integral GPUs, so that rounding is the only slack.
    return st.tuples(
        problems(guarantees=False, limits=not integral, hierarchy=False, whole_gpus=integral),
        st.just(integral),
    )


flat_problems = st.booleans().flatmap(_flat)


def _slack(integral: bool, r: str) -> float:
    return 1.0 if integral and r == GPU else TOL


def _met(t: Tenant, got: dict[str, float], integral: bool) -> bool:
    """True if the tenant reached its demand or its limit (up to rounding)."""
    if all(got[r] >= v - _slack(integral, r) for r, v in t.demand.items()):
        return True
    return t.limit is not None and any(
        got[r] >= v * (1 - TOL) - TOL for r, v in t.limit.items() if t.demand.get(r, 0) > 0
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(flat_problems)
def test_it_is_pareto_efficient(problem_and_integral):
    (capacity, tenants), integral = problem_and_integral
    result = solve(capacity, tenants, integral={GPU} if integral else set())
    names = [t.name for t in tenants]

    for t in tenants:
        got = result[t.name].resources
        if _met(t, got, integral):
            continue
        blocked = [
            r
            for r, v in t.demand.items()
            if v > 0 and _used(result, names, r) >= capacity[r] * (1 - TOL) - _slack(integral, r)
        ]
        assert blocked, f"{t.name} is short of its demand but nothing it needs is saturated"


@settings(max_examples=150, deadline=None, derandomize=True)
@given(flat_problems)
def test_it_gives_each_tenant_its_weighted_share_unless_satisfied(problem_and_integral):
    (capacity, tenants), integral = problem_and_integral
    result = solve(capacity, tenants, integral={GPU} if integral else set())
    total_weight = math.fsum(t.weight for t in tenants)

    for t in tenants:
        allocation = result[t.name]
        if _met(t, allocation.resources, integral):
            continue
        # Rounding may take one GPU away from the dominant resource.
        slack = 1 / capacity[GPU] if integral else TOL
        assert allocation.dominant_share >= t.weight / total_weight - slack


def _tasks(demand: dict[str, float], bundle: dict[str, float]) -> float:
    """How much of its demand (as a fraction, capped at 1) a tenant can run with ``bundle``."""
    return min([1.0] + [bundle[r] / v for r, v in demand.items() if v > 0])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(flat_problems)
def test_it_is_envy_free_under_weights(problem_and_integral):
    (capacity, tenants), integral = problem_and_integral
    result = solve(capacity, tenants, integral={GPU} if integral else set())

    for t in tenants:
        own = result[t.name].resources
        if _met(t, own, integral):
            continue
        # Give t the benefit of one rounded unit, and take it from the other.
        mine = {r: v + _slack(integral, r) for r, v in own.items()}
        for other in tenants:
            if other.name == t.name:
                continue
            scale = t.weight / other.weight
            theirs = {
                r: max(0.0, v - _slack(integral, r)) * scale
                for r, v in result[other.name].resources.items()
            }
            assert _tasks(t.demand, mine) >= _tasks(t.demand, theirs) - TOL, other.name
