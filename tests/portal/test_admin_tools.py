"""The admin and lead tools' pages: the direct quota edit (with its live preview), ending a
temporary grant early, and the API tokens page — each with who may and may not use it."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from quotas import decisions
from quotas.choices import QuotaRequestStatus
from quotas.lines import LineInput
from quotas.models import ApiToken, TeamQuota
from quotas.tokens import authenticate_token
from tests.base import GPU

pytestmark = pytest.mark.django_db


def edit_form(guarantee="30", limit="50", **extra) -> dict:
    return {
        "lines-TOTAL_FORMS": "2",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
        "lines-0-guarantee": guarantee,
        "lines-0-limit": limit,
        "lines-1-resource": "",
        "lines-1-guarantee": "",
        "lines-1-limit": "",
        "note": "Capacity review.",
    } | extra


def gpu_quota(team):
    quota = TeamQuota.objects.get(team=team, resource=GPU)
    return quota.guarantee, quota.limit


# --------------------------------------------------------------------------- direct quota edit


def test_an_admin_sets_a_limit_from_the_team_page(client, cast):
    client.force_login(cast.root)
    team_page = client.get(reverse("portal:team", args=["team-a"])).content.decode()
    url = reverse("portal:quota_edit", args=["team-a"])
    assert f'href="{url}"' in team_page

    page = client.get(url)
    assert page.status_code == 200
    assert 'name="lines-0-limit"' in page.content.decode()

    response = client.post(url, edit_form(guarantee="20", limit="64"))
    assert response.status_code == 302
    assert response["Location"] == reverse("portal:team", args=["team-a"])
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(64))


def test_the_edit_preview_shows_the_effect_and_writes_nothing(client, cast):
    client.force_login(cast.root)
    response = client.post(
        reverse("portal:quota_edit_preview", args=["team-a"]), edit_form(guarantee="40", limit="60")
    )
    assert response.status_code == 200
    assert "What team-a gets" in response.content.decode()
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_a_refused_edit_names_the_department_next_to_the_row(client, cast):
    TeamQuota.objects.create(team=cast.dept, resource=GPU, guarantee=Decimal(0), limit=Decimal(70))
    client.force_login(cast.root)
    response = client.post(
        reverse("portal:quota_edit", args=["team-a"]), edit_form(guarantee="45", limit="60")
    )
    assert response.status_code == 200
    row = response.context["formset"].forms[0]
    text = " ".join(str(e) for errors in row.errors.values() for e in errors)
    assert "dept-x" in text
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_an_edit_over_capacity_is_shown_on_the_guarantee(client, cast):
    client.force_login(cast.root)
    response = client.post(
        reverse("portal:quota_edit", args=["team-a"]), edit_form(guarantee="61", limit="80")
    )
    assert response.status_code == 200
    assert "schedulable" in " ".join(response.context["formset"].forms[0].errors["guarantee"])
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


@pytest.mark.parametrize("who", ["alice", "dora", "charlie"])
def test_leads_cannot_set_a_quota_directly(client, cast, who):
    client.force_login(getattr(cast, who))
    url = reverse("portal:quota_edit", args=["team-a"])
    assert client.get(url).status_code == 403
    assert client.post(url, edit_form(guarantee="25", limit="45")).status_code == 403
    preview = reverse("portal:quota_edit_preview", args=["team-a"])
    assert client.post(preview, edit_form()).status_code == 403
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    team_page = client.get(reverse("portal:team", args=["team-a"]))
    assert url not in team_page.content.decode()


# --------------------------------------------------------------------------- ending early


def active_grant(cast, team=None, requester=None):
    request = decisions.submit_request(
        team=team or cast.team_a,
        requester=requester or cast.alice,
        lines=[LineInput(GPU, "30", "50")],
        justification="Sweeps.",
        window_end=timezone.now() + timedelta(days=3),
    )
    return decisions.approve_request(request.pk, approver=cast.root)


def test_the_lead_ends_the_teams_grant_from_its_page(client, cast):
    grant = active_grant(cast)
    client.force_login(cast.alice)
    detail = reverse("portal:quotarequest", args=[grant.pk])
    end = reverse("portal:quotarequest_end", args=[grant.pk])
    assert f'action="{end}"' in client.get(detail).content.decode()

    response = client.post(end, {"end-note": "Done early."})

    assert response.status_code == 302 and response["Location"] == detail
    grant.refresh_from_db()
    assert grant.status == QuotaRequestStatus.EXPIRED
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    assert f'action="{end}"' not in client.get(detail).content.decode()


def test_members_see_no_end_button_and_are_refused(client, cast):
    grant = active_grant(cast)
    client.force_login(cast.bob)
    end = reverse("portal:quotarequest_end", args=[grant.pk])
    assert end not in client.get(reverse("portal:quotarequest", args=[grant.pk])).content.decode()
    assert client.post(end).status_code == 403
    grant.refresh_from_db()
    assert grant.status == QuotaRequestStatus.ACTIVE


def test_another_teams_lead_cannot_end_or_see_the_grant(client, cast):
    grant = active_grant(cast)
    client.force_login(cast.charlie)
    assert client.post(reverse("portal:quotarequest_end", args=[grant.pk])).status_code == 404
    grant.refresh_from_db()
    assert grant.status == QuotaRequestStatus.ACTIVE
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))


# --------------------------------------------------------------------------- tokens


def token_form(**overrides) -> dict:
    expires = (timezone.now() + timedelta(days=30)).date().isoformat()
    return {"name": "ci-reports", "kind": "personal", "expires_on": expires} | overrides


def test_a_token_is_created_shown_once_and_works(client, cast):
    client.force_login(cast.alice)
    response = client.post(reverse("portal:tokens"), token_form())

    # POST/redirect/GET: the POST answers with a redirect to the page that shows the secret.
    assert response.status_code == 302 and response["Location"] == reverse("portal:tokens")
    shown = client.get(reverse("portal:tokens"))
    assert shown.status_code == 200
    assert "no-store" in shown["Cache-Control"]
    raw = shown.context["issued"]["raw"]
    assert raw in shown.content.decode()
    token = authenticate_token(raw)
    assert token is not None and token.user == cast.alice and token.kind == "personal"
    expected = (timezone.now() + timedelta(days=30)).date()
    assert token.expires_at.date() == expected
    again = client.get(reverse("portal:tokens"))
    assert again.context["issued"] is None
    text = again.content.decode()
    assert raw not in text and "ci-reports" in text and token.prefix in text


def test_reloading_after_creating_a_token_creates_nothing_and_shows_no_secret(client, cast):
    client.force_login(cast.alice)
    shown = client.post(reverse("portal:tokens"), token_form(), follow=True)
    raw = shown.context["issued"]["raw"]
    assert ApiToken.objects.count() == 1

    # What a browser's reload of the page after the redirect sends: a second GET.
    reloaded = client.get(reverse("portal:tokens"))

    assert reloaded.status_code == 200
    assert raw not in reloaded.content.decode()
    assert "shown only this once" not in reloaded.content.decode()
    assert ApiToken.objects.count() == 1
    assert "fairshare:issued-token" not in client.session


def test_a_secret_left_in_the_session_is_not_shown_once_its_token_is_revoked(client, cast):
    from quotas.tokens import revoke_token

    client.force_login(cast.alice)
    client.post(reverse("portal:tokens"), token_form())
    revoke_token(ApiToken.objects.get().pk, actor=cast.alice)

    page = client.get(reverse("portal:tokens"))

    assert page.context["issued"] is None
    assert "shown only this once" not in page.content.decode()


def test_the_expiry_is_required_and_bounded(client, cast):
    client.force_login(cast.alice)
    missing = client.post(reverse("portal:tokens"), token_form(expires_on=""))
    assert missing.status_code == 200 and "expires_on" in missing.context["form"].errors
    too_far = (timezone.now() + timedelta(days=400)).date().isoformat()
    far = client.post(reverse("portal:tokens"), token_form(expires_on=too_far))
    assert "365 days" in " ".join(far.context["form"].errors["expires_on"])
    past = client.post(reverse("portal:tokens"), token_form(expires_on="2020-01-01"))
    assert "future" in " ".join(past.context["form"].errors["expires_on"])
    assert not ApiToken.objects.exists()


def test_people_cannot_create_service_tokens_but_admins_can_with_scopes(client, cast):
    client.force_login(cast.alice)
    refused = client.post(reverse("portal:tokens"), token_form(kind="service", scopes=["read:all"]))
    assert "kind" in refused.context["form"].errors
    assert not ApiToken.objects.exists()

    client.force_login(cast.root)
    made = client.post(
        reverse("portal:tokens"), token_form(kind="service", scopes=["read:chargeback"])
    )
    assert made.status_code == 302
    token = ApiToken.objects.get()
    assert (token.kind, token.scopes) == ("service", ["read:chargeback"])


def test_a_token_cannot_reach_the_tokens_page(client, cast):
    from quotas.tokens import issue_token

    raw = issue_token(owner=cast.alice, name="laptop").raw
    response = client.post(
        reverse("portal:tokens"), token_form(), HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert ApiToken.objects.count() == 1


def test_revoke_own_token_and_not_anothers(client, cast):
    from quotas.tokens import issue_token

    alices = issue_token(owner=cast.alice, name="laptop")
    client.force_login(cast.bob)
    assert "laptop" not in client.get(reverse("portal:tokens")).content.decode()
    assert client.post(reverse("portal:token_revoke", args=[alices.token.pk])).status_code == 404
    assert authenticate_token(alices.raw) is not None

    client.force_login(cast.alice)
    response = client.post(reverse("portal:token_revoke", args=[alices.token.pk]))
    assert response.status_code == 302
    assert authenticate_token(alices.raw) is None
    assert "revoked" in client.get(reverse("portal:tokens")).content.decode()


def test_an_admin_sees_and_revokes_everyones_tokens(client, cast):
    from quotas.tokens import issue_token

    alices = issue_token(owner=cast.alice, name="leaked-laptop")
    client.force_login(cast.root)
    assert "leaked-laptop" in client.get(reverse("portal:tokens")).content.decode()
    assert client.post(reverse("portal:token_revoke", args=[alices.token.pk])).status_code == 302
    assert authenticate_token(alices.raw) is None
