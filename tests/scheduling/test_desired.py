"""build_cluster_spec(): the tenancy model read from the database as a ClusterSpec."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from quotas.choices import MembershipRole
from quotas.models import LimitPolicy, Membership, Namespace, PriorityTier, Team, TeamQuota
from scheduling.desired import build_cluster_spec, split_quota
from scheduling.domain.render import render
from scheduling.domain.types import LimitSpec, MemberSpec, TierSpec
from scheduling.models import ShareComputation, ShareSnapshot
from tests.base import GPU, make_user

D = Decimal
GIB = 2**30


def team(spec, slug):
    [found] = [t for t in spec.teams if t.slug == slug]
    return found


def namespace(spec, name):
    [found] = [n for n in spec.namespaces if n.name == name]
    return found


def test_it_reads_teams_quotas_members_and_tiers(cast):
    spec = build_cluster_spec()

    assert [t.slug for t in spec.teams] == ["dept-x", "team-a", "team-b"]
    assert spec.tiers == (TierSpec("experiment", 100000, "Never"),)
    a = team(spec, "team-a")
    assert (a.parent, a.weight, a.tier, a.reclaimable) == ("dept-x", 1, "experiment", True)
    assert a.guarantee == {GPU: D(20)}
    assert a.limit == {GPU: D(40)}
    assert a.deserved == {}
    assert a.members == (
        MemberSpec("alice", "lead"),
        MemberSpec("bob", "member"),
        MemberSpec("vic", "viewer"),
    )
    assert a.is_department is False
    assert team(spec, "dept-x").is_department is True
    assert team(spec, "dept-x").members == (MemberSpec("dora", "lead"),)
    ns = namespace(spec, "team-a-ml")
    assert (ns.team, ns.managed, ns.quota, ns.limits, ns.volcano_jobs) == (
        "team-a",
        True,
        {GPU: D(40)},
        None,
        True,
    )


def test_deserved_comes_from_the_latest_share_computation(cast):
    now = timezone.now()
    old = ShareComputation.objects.create(computed_at=now - timezone.timedelta(hours=1))
    new = ShareComputation.objects.create(computed_at=now)
    ShareSnapshot.objects.create(
        computation=old, computed_at=old.computed_at, team=cast.team_a, fair_allocation={GPU: "9"}
    )
    ShareSnapshot.objects.create(
        computation=new,
        computed_at=new.computed_at,
        team=cast.team_a,
        fair_allocation={GPU: "25", "cpu": "12.5", "memory": "0"},
    )

    spec = build_cluster_spec()

    assert team(spec, "team-a").deserved == {GPU: D(25), "cpu": D("12.5")}
    assert team(spec, "team-b").deserved == {}


def test_the_team_limit_is_split_by_namespace_share_with_largest_remainders(cast):
    Namespace.objects.create(name="team-a-aa", team=cast.team_a, share=1)
    Namespace.objects.create(name="team-a-zz", team=cast.team_a, share=1)
    Namespace.objects.create(name="team-a-off", team=cast.team_a, share=5, managed=False)
    TeamQuota.objects.create(team=cast.team_a, resource="cpu", guarantee=D(0), limit=D(10))
    TeamQuota.objects.create(team=cast.team_a, resource="memory", guarantee=D(0), limit=D(GIB))

    spec = build_cluster_spec()

    # 40 GPUs / 3: 13 each and one left over, which goes to the first name (ties by name).
    assert namespace(spec, "team-a-aa").quota[GPU] == 14
    assert namespace(spec, "team-a-ml").quota[GPU] == 13
    assert namespace(spec, "team-a-zz").quota[GPU] == 13
    assert [namespace(spec, n).quota["cpu"] for n in ("team-a-aa", "team-a-ml", "team-a-zz")] == [
        D("3.334"),
        D("3.333"),
        D("3.333"),
    ]
    memory = [namespace(spec, n).quota["memory"] for n in ("team-a-aa", "team-a-ml", "team-a-zz")]
    assert sum(memory) == GIB
    assert all(m == int(m) for m in memory)
    assert namespace(spec, "team-a-off").quota == {}


@pytest.mark.parametrize(
    ("total", "shares", "expected"),
    [
        ({GPU: D(10)}, {"a": 2, "b": 1}, {"a": {GPU: 7}, "b": {GPU: 3}}),
        ({GPU: D(1)}, {"b": 1, "a": 1}, {"a": {GPU: 1}, "b": {GPU: 0}}),
        (
            {"cpu": D(1)},
            {"a": 1, "b": 1, "c": 1},
            {"a": {"cpu": D("0.334")}, "b": {"cpu": D("0.333")}, "c": {"cpu": D("0.333")}},
        ),
        ({GPU: D(8)}, {"a": 3, "b": 1}, {"a": {GPU: 6}, "b": {GPU: 2}}),
        ({}, {"a": 1}, {"a": {}}),
    ],
)
def test_split_quota_adds_up_exactly(total, shares, expected):
    result = split_quota(total, shares)

    assert result == expected
    for resource, amount in total.items():
        assert sum(part[resource] for part in result.values()) == amount


def test_namespace_limit_policies_override_the_team_ones(cast):
    ns = Namespace.objects.get(name="team-a-ml")
    other = Namespace.objects.create(name="team-a-other", team=cast.team_a)
    LimitPolicy.objects.create(
        team=cast.team_a, resource=GPU, default_request=D(1), max_per_container=D(8)
    )
    LimitPolicy.objects.create(
        team=cast.team_a, resource="cpu", default_request=D(1), default_limit=D(2)
    )
    LimitPolicy.objects.create(
        team=cast.team_a, namespace=ns, resource=GPU, default_limit=D(2), max_per_container=D(4)
    )
    LimitPolicy.objects.create(
        team=cast.team_a,
        namespace=ns,
        resource="memory",
        default_limit=D(GIB),
        enforce_quota_limit=True,
    )

    spec = build_cluster_spec()

    assert namespace(spec, "team-a-ml").limits == LimitSpec(
        default_request={"cpu": D(1)},
        default_limit={"cpu": D(2), GPU: D(2), "memory": D(GIB)},
        max={GPU: D(4)},
        quota_limits=True,
    )
    # A GPU default request needs an equal default limit: it is derived.
    assert namespace(spec, other.name).limits == LimitSpec(
        default_request={"cpu": D(1), GPU: D(1)},
        default_limit={"cpu": D(2), GPU: D(1)},
        max={GPU: D(8)},
    )
    assert namespace(spec, "team-b-ml").limits is None
    render(spec)  # and the renderer accepts it


def test_an_inactive_department_takes_its_teams_with_it(cast):
    Team.objects.filter(pk=cast.dept.pk).update(active=False)
    solo = Team.objects.create(slug="solo", name="Solo")
    Namespace.objects.create(name="solo-ml", team=solo)

    spec = build_cluster_spec()

    assert [t.slug for t in spec.teams] == ["solo"]
    assert [n.name for n in spec.namespaces] == ["solo-ml"]
    render(spec)


def test_a_department_whose_children_are_all_inactive_is_a_plain_team(cast):
    Team.objects.filter(parent=cast.dept).update(active=False)

    spec = build_cluster_spec()

    assert [t.slug for t in spec.teams] == ["dept-x"]
    assert team(spec, "dept-x").is_department is False


def test_inactive_users_are_not_bound(cast):
    cast.bob.is_active = False
    cast.bob.save()

    spec = build_cluster_spec()

    assert [m.username for m in team(spec, "team-a").members] == ["alice", "vic"]


def test_it_reads_the_database_in_a_constant_number_of_queries(
    cast, django_assert_num_queries, django_assert_max_num_queries
):
    with django_assert_max_num_queries(10):  # 9 + the waiting transitions (issue 25)
        build_cluster_spec()

    tier = PriorityTier.objects.create(name="production", value=1000000)
    for i in range(20):
        t = Team.objects.create(slug=f"t-{i}", name=f"T {i}", parent=cast.dept, tier=tier)
        TeamQuota.objects.create(team=t, resource=GPU, guarantee=D(0), limit=D(4))
        Membership.objects.create(user=make_user(f"u{i}"), team=t, role=MembershipRole.MEMBER)
        for j in range(3):
            ns = Namespace.objects.create(name=f"t-{i}-{j}", team=t)
            LimitPolicy.objects.create(team=t, namespace=ns, resource=GPU, max_per_container=D(2))
    computation = ShareComputation.objects.create(computed_at=timezone.now())
    ShareSnapshot.objects.create(
        computation=computation,
        computed_at=computation.computed_at,
        team=cast.team_a,
        fair_allocation={GPU: "1"},
    )

    with django_assert_num_queries(10):  # + the GPU products (the Kueue backend's flavors)
        spec = build_cluster_spec()
    assert len(spec.namespaces) == 62
