"""Groups → teams and roles at sign-in (quotas.groups through sso.services.sign_in), the rules'
preview, and the last-lead rule. The claims here are what a verified ID token carries; the
HTTP path with the real provider is in test_login.py and test_journey below."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.utils import timezone

from quotas.choices import MembershipRole
from quotas.groups import create_rule, preview_rule
from quotas.models import AuditEvent, DerivedMembership, ExternalIdentity, GroupRule, Membership
from quotas.querysets import is_site_admin
from sso.exceptions import SignInRefused
from sso.services import sign_in
from tests.sso.conftest import sign_in_over_http

ISS = "https://idp.example.test"


def login(sub: str, groups, *, username: str | None = None, **claims):
    claims = {"sub": sub, "preferred_username": username or sub, "groups": groups, **claims}
    user, _ = sign_in(issuer=ISS, claims=claims, now=timezone.now())
    user.refresh_from_db()
    return user


def roles(user) -> dict[str, tuple[str, bool]]:
    return {
        m.team.slug: (m.role, DerivedMembership.objects.filter(membership=m).exists())
        for m in Membership.objects.filter(user=user).select_related("team")
    }


@pytest.fixture
def rules(cast):
    r = cast.root
    create_rule(pattern="team-a-leads", team=cast.team_a, role="lead", site_admin=False, actor=r)
    create_rule(pattern="team-a-*", team=cast.team_a, role="member", site_admin=False, actor=r)
    create_rule(pattern="team-b-view", team=cast.team_b, role="viewer", site_admin=False, actor=r)
    create_rule(pattern="platform-admins", team=None, role="", site_admin=True, actor=r)
    return cast


def test_groups_give_teams_and_the_highest_matched_role(rules, settings):
    user = login("s-1", ["team-a-leads", "team-a-ml", "team-b-view", "unrelated"])
    assert roles(user) == {"team-a": ("lead", True), "team-b": ("viewer", True)}
    marker = Membership.objects.get(user=user, team=rules.team_a).derived
    assert marker.groups == ["team-a-leads", "team-a-ml"]
    assert AuditEvent.objects.filter(object_type="quotas.Membership", verb="create").count() == 2


def test_a_changed_group_changes_the_membership_at_the_next_sign_in(rules):
    user = login("s-1", ["team-a-leads", "team-b-view"])
    login("s-2", ["team-a-leads"])  # another lead, so s-1 may stop leading
    user = login("s-1", ["team-a-ml"])
    assert roles(user) == {"team-a": ("member", True)}
    user = login("s-1", [])
    assert roles(user) == {}


def test_hand_made_memberships_are_left_alone(rules):
    bob = rules.bob  # a hand-made member of team-a
    ExternalIdentity.objects.create(user=bob, issuer=ISS, subject="bob-sub")
    login("bob-sub", ["team-a-leads"])
    assert roles(bob) == {"team-a": ("member", False)}
    login("bob-sub", [])
    assert roles(bob) == {"team-a": ("member", False)}


def test_the_last_lead_keeps_the_role_until_another_lead_exists(rules, cast):
    Membership.objects.filter(team=cast.team_a, role="lead").delete()  # alice's, hand-made
    user = login("s-1", ["team-a-leads"])
    user = login("s-1", ["team-a-ml"])
    assert roles(user) == {"team-a": ("lead", True)}
    assert AuditEvent.objects.filter(note__contains="kept as the team's last lead").exists()
    user = login("s-1", [])
    assert roles(user) == {"team-a": ("lead", True)}
    login("s-2", ["team-a-leads"])
    user = login("s-1", [])
    assert roles(user) == {}


def test_admin_groups_make_site_admins_and_stop_doing_so(rules, settings):
    settings.FAIRSHARE_OIDC_ADMIN_GROUPS = ["first-admins"]
    first = login("s-1", ["first-admins"])
    assert is_site_admin(first)
    other = login("s-2", ["platform-admins"])
    assert is_site_admin(other)
    other = login("s-2", [])
    assert not is_site_admin(other)


def test_a_hand_made_site_admin_stays_one(rules):
    admins = Group.objects.get_or_create(name=settings.ADMINS_GROUP)[0]
    user = login("s-1", [])
    user.groups.add(admins)
    user = login("s-1", [])
    assert is_site_admin(user)


def test_rules_of_inactive_teams_give_nothing(rules, cast):
    user = login("s-1", ["team-b-view"])
    assert roles(user) == {"team-b": ("viewer", True)}
    cast.team_b.active = False
    cast.team_b.save(update_fields=["active"])
    user = login("s-1", ["team-b-view"])
    assert roles(user) == {}


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"groups": "missing"}, "sent no 'groups' claim"),
        ({"groups": [1, 2]}, "not a list of group names"),
        ({"groups": {"team-a-leads": True}}, "not a list of group names"),
        ({"sub": ""}, "names no subject"),
    ],
)
def test_a_refused_sign_in_leaves_nothing_behind(rules, claims, message):
    data = {"sub": "s-9", "preferred_username": "newcomer", "groups": ["team-a-leads"], **claims}
    if data["groups"] == "missing":
        del data["groups"]
    users = type(rules.root).objects.count()
    memberships = Membership.objects.count()
    with pytest.raises(SignInRefused, match=message):
        sign_in(issuer=ISS, claims=data, now=timezone.now())
    assert type(rules.root).objects.count() == users
    assert Membership.objects.count() == memberships
    assert not ExternalIdentity.objects.exists()


def test_a_deactivated_account_is_refused_and_unchanged(rules):
    user = login("s-1", ["team-a-ml"])
    user.is_active = False
    user.save()
    with pytest.raises(SignInRefused, match="deactivated"):
        login("s-1", ["team-a-leads"])
    assert roles(user) == {"team-a": ("member", True)}


def test_the_preview_lists_who_a_rule_matches(rules):
    login("s-1", ["team-a-ml", "x"])
    login("s-2", ["team-b-view"])
    assert preview_rule("team-a-*") == [{"username": "s-1", "groups": ["team-a-ml"]}]
    assert preview_rule("Team-A-*") == []  # case-sensitive, as identity providers are
    assert [m["username"] for m in preview_rule("*")] == ["s-1", "s-2"]


def test_rules_are_validated(cast):
    from django.core.exceptions import ValidationError

    from quotas.exceptions import PermissionDenied

    with pytest.raises(ValidationError, match="exact group names"):
        create_rule(pattern="admins-*", team=None, role="", site_admin=True, actor=cast.root)
    with pytest.raises(ValidationError, match="role"):
        create_rule(pattern="g", team=cast.team_a, role="", site_admin=False, actor=cast.root)
    with pytest.raises(ValidationError, match="team"):
        create_rule(pattern="g", team=None, role="lead", site_admin=False, actor=cast.root)
    with pytest.raises(PermissionDenied):
        create_rule(pattern="g", team=cast.team_a, role="lead", site_admin=False, actor=cast.alice)
    assert not GroupRule.objects.exists()


@pytest.mark.django_db
def test_a_group_change_at_the_provider_shows_at_the_next_sign_in(
    client, sso_settings, oidc_provider, rules
):
    oidc_provider.user("ivan", groups=["team-a-leads"])
    sign_in_over_http(client, "ivan")
    ivan = ExternalIdentity.objects.get(issuer=oidc_provider.issuer).user
    assert roles(ivan) == {"team-a": ("lead", True)}
    oidc_provider.user("ivan", groups=["team-b-view"])
    client.post("/logout/")
    sign_in_over_http(client, "ivan")
    assert roles(ivan) == {"team-b": ("viewer", True)}
    assert MembershipRole.LEAD not in {r for r, _ in roles(ivan).values()}
