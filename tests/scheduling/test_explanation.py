""" "Why is my share X": the explanation's parts add up to the fair allocation exactly, for random
tenancies (with and without fairness over time), and mean what their names say."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduling.domain.explain import total
from scheduling.exceptions import ShareProblemError
from scheduling.pastuse import PastInputs
from scheduling.services import explain_problem, solve_problem, team_shares
from scheduling.shares import Inputs, TeamInput, make_problem

GPU = "nvidia.com/gpu"
CAPACITY = {GPU: Decimal(64), "cpu": Decimal(512), "memory": Decimal(2**41)}


@st.composite
def tenancies(draw):
    n = draw(st.integers(1, 7))
    teams = {}
    for i in range(n):
        slug = f"t{i}"
        parent = draw(st.sampled_from([None] + [f"t{j}" for j in range(i)])) if i else None
        guarantee, limit = {}, {}
        for r, cap in CAPACITY.items():
            if draw(st.booleans()):
                g = Decimal(draw(st.integers(0, int(cap) // (2 * n))))
                guarantee[r] = g
                limit[r] = (
                    None if draw(st.booleans()) else g + Decimal(draw(st.integers(0, int(cap))))
                )
        usage = {r: Decimal(draw(st.integers(0, int(cap) // n))) for r, cap in CAPACITY.items()}
        pending = {r: Decimal(draw(st.integers(0, int(cap) // 2))) for r, cap in CAPACITY.items()}
        teams[slug] = TeamInput(
            id=i + 1,
            slug=slug,
            parent=parent,
            weight=draw(st.integers(1, 5)),
            tier_id=None,
            guarantee=guarantee,
            limit=limit,
            usage=usage,
            pending=pending,
            namespaces={},
            measured=draw(st.booleans()),
        )
    past = None
    if draw(st.booleans()):
        past = PastInputs(
            half_life_seconds=7 * 86400,
            strength=draw(st.floats(0.05, 0.9)),
            through=None,
            usage={
                t.id: {GPU: draw(st.floats(0, 64 * 100)), "cpu": draw(st.floats(0, 512 * 100))}
                for t in teams.values()
            },
            capacity={GPU: 64 * 200.0, "cpu": 512 * 200.0, "memory": 2.0**41 * 200},
        )
    return Inputs(capacity=dict(CAPACITY), teams=teams, usage_taken_at=None, past=past)


@settings(max_examples=150, deadline=None)
@given(tenancies())
def test_the_parts_add_up_to_the_allocation_exactly(inputs):
    problem = make_problem(inputs)
    try:
        allocations = solve_problem(problem)
    except ShareProblemError:  # children's guarantees above a department's limit: refused
        assume(False)
    shares = team_shares(problem, allocations)
    explained = explain_problem(problem, allocations, shares)
    for slug, share in shares.items():
        parts = explained[slug]
        summed = total([_part(p) for p in parts])
        for r in set(share.fair_allocation) | set(summed):
            assert summed.get(r, Decimal(0)) == share.fair_allocation.get(r, Decimal(0)), (
                slug,
                r,
                parts,
            )
        names = [p["part"] for p in parts]
        assert ("past-use" in names) <= (inputs.past is not None)
        for p in parts:
            assert p["words"] and p["label"]


def _part(entry):
    from scheduling.domain.explain import Part

    return Part(entry["part"], {r: Decimal(a) for r, a in entry["amounts"].items()})


def test_two_teams_wanting_everything_get_their_weighted_share_and_a_capped_team_its_demand():
    def team(i, slug, weight, pending):
        return TeamInput(
            id=i,
            slug=slug,
            parent=None,
            weight=weight,
            tier_id=None,
            guarantee={GPU: Decimal(4)},
            limit={GPU: None},
            usage={},
            pending={GPU: Decimal(pending)},
            namespaces={},
            measured=True,
        )

    inputs = Inputs(
        capacity={GPU: Decimal(64)},
        teams={"a": team(1, "a", 3, 64), "b": team(2, "b", 1, 64), "c": team(3, "c", 4, 6)},
        usage_taken_at=None,
    )
    problem = make_problem(inputs)
    allocations = solve_problem(problem)
    shares = team_shares(problem, allocations)
    explained = explain_problem(problem, allocations, shares)
    parts = {
        slug: {p["part"]: Decimal(p["amounts"][GPU]) for p in e} for slug, e in explained.items()
    }
    # Beyond the 12 guaranteed GPUs, 52 are contended: a has 3/8, b 1/8, c 4/8 of them.
    assert parts["a"]["guarantee"] == 4 and parts["a"]["weighted-share"] == Decimal("19.5")
    assert parts["b"]["weighted-share"] == Decimal("6.5")
    # c wants 6: capped at 6, and what it leaves (4 + 26 − 6 = 24) goes to a and b by weight.
    assert parts["c"]["capped"] == 6 - (4 + 26)
    assert shares["c"].fair_allocation[GPU] == 6
    assert parts["a"]["passed-on"] + parts["b"]["passed-on"] == 24
    assert shares["a"].fair_allocation[GPU] == 4 + Decimal("19.5") + parts["a"]["passed-on"]


@pytest.mark.django_db
def test_a_previews_change_is_explained_by_the_same_parts_and_they_add_up_to_the_change():
    from django.template.loader import render_to_string

    from monitoring.models import CapacitySnapshot, UsageSample
    from portal.previews import present_whatif
    from quotas.models import Team
    from scheduling.services import what_if

    now = timezone.now()
    CapacitySnapshot.objects.create(taken_at=now, source="t", resources={GPU: "64", "cpu": "512"})
    for slug in ("a", "b"):
        team = Team.objects.create(slug=slug, name=slug.upper())
        for resource, amount in ((GPU, 64), ("cpu", 512)):
            UsageSample.objects.create(
                taken_at=now,
                team=team,
                namespace=slug,
                resource=resource,
                allocated=Decimal(0),
                pending=Decimal(amount),
            )
    data = what_if({"a": {"weight": 3}}).to_dict()
    team = next(t for t in data["teams"] if t["team"] == "a")
    change = team["explanation"]["change"]
    assert [p["part"] for p in change] == ["weighted-share"]
    for r, delta in team["delta"].items():
        assert sum(Decimal(p["amounts"].get(r, "0")) for p in change) == Decimal(delta)
    assert Decimal(team["delta"][GPU]) == 16  # 32 → 48: weight 3 of 4
    shown = present_whatif(data, focus="a")
    html = render_to_string("_partials/whatif.html", {"whatif": shown})
    assert "What moves it, part by part" in html and 'data-part="weighted-share"' in html
    assert "+16" in html
