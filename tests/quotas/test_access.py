import pytest
from django.http import Http404
from django.urls import reverse

from quotas.access import can_manage_team, get_team_for_user
from quotas.decisions import submit_request
from quotas.lines import LineInput
from quotas.models import AuditEvent, Membership, Namespace, QuotaRequest, Team, TeamQuota

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


def slugs(qs):
    return sorted(qs.values_list("slug", flat=True))


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("root", ["dept-x", "team-a", "team-b"]),
        ("dora", ["dept-x", "team-a", "team-b"]),  # department lead sees the children
        ("alice", ["team-a"]),
        ("bob", ["team-a"]),
        ("vic", ["team-a"]),
        ("charlie", ["team-b"]),
        ("nobody", []),
    ],
)
def test_visible_to_follows_the_security_model(cast, who, expected):
    assert slugs(Team.objects.visible_to(getattr(cast, who))) == expected


def test_anonymous_and_inactive_users_see_nothing(cast):
    from django.contrib.auth.models import AnonymousUser

    assert slugs(Team.objects.visible_to(AnonymousUser())) == []
    cast.alice.is_active = False
    cast.alice.save()
    assert slugs(Team.objects.visible_to(cast.alice)) == []


def test_scoped_models_follow_the_team(cast):
    submit_request(
        team=cast.team_b,
        requester=cast.charlie,
        lines=[LineInput(GPU, "31", "60")],
        justification="b",
    )
    for model in (Namespace, TeamQuota, Membership, QuotaRequest, AuditEvent):
        visible = model.objects.visible_to(cast.alice)
        assert not visible.filter(team=cast.team_b).exists(), model
    assert QuotaRequest.objects.visible_to(cast.charlie).count() == 1
    assert QuotaRequest.objects.visible_to(cast.root).count() == 1


def test_visible_to_is_one_query(cast, django_assert_num_queries):
    from quotas.querysets import is_site_admin

    assert not is_site_admin(cast.alice)  # cached on the user for the rest of the request
    with django_assert_num_queries(1):
        list(TeamQuota.objects.visible_to(cast.alice))


@pytest.mark.parametrize(
    ("who", "slug", "can_write"),
    [
        ("alice", "team-a", True),
        ("bob", "team-a", False),
        ("vic", "team-a", False),
        ("dora", "team-a", True),
        ("root", "team-b", True),
    ],
)
def test_get_team_for_user_returns_write_access(cast, who, slug, can_write):
    team, writable = get_team_for_user(getattr(cast, who), slug)
    assert team.slug == slug
    assert writable is can_write


@pytest.mark.parametrize(
    ("who", "slug"),
    [
        ("charlie", "team-a"),
        ("alice", "team-b"),
        ("alice", "dept-x"),
        ("nobody", "team-a"),
        ("root", "no-such-team"),
    ],
)
def test_get_team_for_user_hides_other_teams_behind_404(cast, who, slug):
    with pytest.raises(Http404):
        get_team_for_user(getattr(cast, who), slug)


def test_a_lead_cannot_manage_another_team(cast):
    assert can_manage_team(cast.alice, cast.team_a)
    assert not can_manage_team(cast.alice, cast.team_b)
    assert not can_manage_team(cast.charlie, cast.team_a)


# ----------------------------------------------------------------------------- pages


def test_the_landing_page_needs_a_login(client):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_login_page_renders_with_labelled_fields(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'for="id_username"' in response.content
    assert b"csrfmiddlewaretoken" in response.content


def test_a_lead_signs_in_and_sees_only_their_team(client, cast):
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302
    page = client.get(reverse("home")).content.decode()
    assert "team-a" in page
    assert "team-b" not in page
    assert "20 / 40" in page  # GPU guarantee / limit


def test_an_admin_sees_every_team(client, cast):
    client.force_login(cast.root)
    page = client.get(reverse("home")).content.decode()
    assert "team-a" in page and "team-b" in page and "dept-x" in page


def test_someone_without_teams_gets_an_empty_state(client, cast):
    client.force_login(cast.nobody)
    page = client.get(reverse("home")).content.decode()
    assert "not a member of any team" in page


def test_team_names_are_escaped(client, cast):
    cast.team_a.name = "<script>alert(1)</script>"
    cast.team_a.save()
    client.force_login(cast.alice)
    page = client.get(reverse("home")).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page


def test_the_landing_page_is_a_constant_number_of_queries(
    client, cast, django_assert_max_num_queries
):
    client.force_login(cast.root)
    client.get(reverse("home"))
    for i in range(10):
        team = Team.objects.create(slug=f"extra-{i}", name=f"Extra {i}")
        TeamQuota.objects.create(team=team, resource=GPU, guarantee=0, limit=1)
    # 13, plus share_health for the stale-shares banner (2) and the waiting work per team
    # (monitoring.workloads.waiting_by_team, 1).
    with django_assert_max_num_queries(16):
        client.get(reverse("home"))


@pytest.mark.parametrize("who", ["alice", "dora", "charlie"])
def test_the_django_admin_is_for_site_admins_only(client, cast, who):
    user = getattr(cast, who)
    user.is_staff = True  # even staff without the admins group get nothing
    user.save()
    client.force_login(user)
    assert client.get(reverse("admin:quotas_team_changelist")).status_code == 403


def test_a_site_admin_uses_the_django_admin(client, cast):
    client.force_login(cast.root)
    response = client.get(reverse("admin:quotas_team_changelist"))
    assert response.status_code == 200
    assert b"team-a" in response.content


def test_health_endpoints_answer(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok", "database": "ok"}


def test_every_model_has_an_admin_page_for_site_admins(client, cast):
    from django.apps import apps
    from django.contrib import admin as django_admin

    client.force_login(cast.root)
    for label in ("quotas", "scheduling", "monitoring"):
        for model in apps.get_app_config(label).get_models():
            assert model in django_admin.site._registry, model
            url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
            assert client.get(url).status_code == 200, url
