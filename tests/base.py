"""The fixed cast every test uses (Healthchecks' hc/test.py, as pytest fixtures).

alice leads team-a, bob is a member of team-a, vic a viewer of team-a, charlie leads team-b (the
outsider for everything of team-a), root is a site admin (the approver). team-a and team-b sit in
department dept-x, led by dora. The cluster has 100 GPUs, 1,000 cores and 4 TiB, with the default
10 % reserve: 90 GPUs can be guaranteed.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import Group, User
from django.utils import timezone

from monitoring.models import CapacitySnapshot
from quotas.choices import MembershipRole
from quotas.models import Membership, Namespace, PriorityTier, Team, TeamQuota

GPU = "nvidia.com/gpu"
PASSWORD = "correct-horse-battery"


@dataclass
class Cast:
    root: User
    alice: User
    bob: User
    vic: User
    charlie: User
    dora: User
    nobody: User
    dept: Team
    team_a: Team
    team_b: Team
    tier: PriorityTier
    capacity: CapacitySnapshot


def make_user(username: str, *, admin: bool = False) -> User:
    user = User.objects.create_user(username, f"{username}@example.org", PASSWORD, is_staff=admin)
    if admin:
        user.groups.add(Group.objects.get_or_create(name="admins")[0])
    return user


def make_cast() -> Cast:
    tier = PriorityTier.objects.create(name="experiment", value=100000, preemption_policy="Never")
    dept = Team.objects.create(slug="dept-x", name="Department X", weight=2, tier=tier)
    team_a = Team.objects.create(
        slug="team-a", name="Team A", parent=dept, weight=1, tier=tier, cost_center="CC-A"
    )
    team_b = Team.objects.create(
        slug="team-b", name="Team B", parent=dept, weight=3, tier=tier, cost_center="CC-B"
    )
    Namespace.objects.create(name="team-a-ml", team=team_a)
    Namespace.objects.create(name="team-b-ml", team=team_b)
    TeamQuota.objects.create(team=team_a, resource=GPU, guarantee=Decimal(20), limit=Decimal(40))
    TeamQuota.objects.create(team=team_b, resource=GPU, guarantee=Decimal(30), limit=Decimal(60))
    cast = Cast(
        root=make_user("root", admin=True),
        alice=make_user("alice"),
        bob=make_user("bob"),
        vic=make_user("vic"),
        charlie=make_user("charlie"),
        dora=make_user("dora"),
        nobody=make_user("nobody"),
        dept=dept,
        team_a=team_a,
        team_b=team_b,
        tier=tier,
        capacity=CapacitySnapshot.objects.create(
            taken_at=timezone.now(),
            source="test",
            resources={GPU: "100", "cpu": "1000", "memory": str(4 * 2**40)},
            nodes=13,
        ),
    )
    Membership.objects.create(user=cast.alice, team=team_a, role=MembershipRole.LEAD)
    Membership.objects.create(user=cast.bob, team=team_a, role=MembershipRole.MEMBER)
    Membership.objects.create(user=cast.vic, team=team_a, role=MembershipRole.VIEWER)
    Membership.objects.create(user=cast.charlie, team=team_b, role=MembershipRole.LEAD)
    Membership.objects.create(user=cast.dora, team=dept, role=MembershipRole.LEAD)
    return cast
