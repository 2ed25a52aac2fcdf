"""The single sign-on journey in Chromium through the test provider: an admin arrives by SSO
(FAIRSHARE_OIDC_ADMIN_GROUPS) and writes a group rule on the page, a lead and a member land in
their team with their roles, the member's group changes at the provider and the next sign-in
shows it; signing out ends the provider's session too (RP-initiated logout)."""

from __future__ import annotations

import pytest

from quotas.groups import create_rule
from quotas.models import ExternalIdentity, Membership, Team
from quotas.querysets import is_site_admin
from tests.browser.conftest import assert_clean, screenshot
from tests.sso.conftest import register

pytestmark = pytest.mark.browser


def sso_sign_in(page, app, username: str) -> None:
    page.goto(app("/login/"))
    page.get_by_role("link", name="Sign in with single sign-on").click()
    page.get_by_label("Provider username").fill(username)
    page.get_by_label("Provider password").fill("provider-pw")
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(app("/"))


def sign_out(page) -> None:
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/login/**")


def role_of(username: str, team: str) -> str | None:
    identity = ExternalIdentity.objects.select_related("user").get(user__username=username)
    membership = Membership.objects.filter(user=identity.user, team__slug=team).first()
    return membership.role if membership else None


def test_people_sign_in_through_the_provider_into_their_teams(
    page, app, sso_settings, oidc_provider
):
    register(oidc_provider, "fairshare", name="fairshare", base=app.url)
    team = Team.objects.create(slug="vision", name="Vision")
    oidc_provider.user("ada", groups=["fairshare-admins"])
    oidc_provider.user("lena", groups=["vision-leads", "vision-all"])
    oidc_provider.user("mo", groups=["vision-all"])

    # The first admin arrives by single sign-on and writes the rules on the page.
    sso_sign_in(page, app, "ada")
    assert page.locator(".user .badge").inner_text() == "admin"
    assert is_site_admin(ExternalIdentity.objects.get(user__username="ada").user)
    page.goto(app("/sso/groups/"))
    form = page.locator("form", has=page.get_by_role("button", name="Add rule"))
    form.get_by_label("Group or pattern").fill("vision-*")
    form.get_by_label("Team").select_option("vision")
    form.get_by_label("Role").select_option("member")
    form.get_by_role("button", name="Add rule").click()
    page.get_by_text("Rule for vision-* added").wait_for()
    ada = ExternalIdentity.objects.get(user__username="ada").user
    create_rule(pattern="vision-leads", team=team, role="lead", site_admin=False, actor=ada)
    screenshot(page, "sso-group-rules")
    assert_clean(page)
    sign_out(page)

    # The lead lands in the team as its lead: the team page offers the lead's tools.
    sso_sign_in(page, app, "lena")
    assert role_of("lena", "vision") == "lead"
    page.goto(app("/teams/vision/"))
    assert page.get_by_role("link", name="Request quota").first.is_visible()
    sign_out(page)

    # The member lands as a member: the team page without the lead's tools.
    sso_sign_in(page, app, "mo")
    assert role_of("mo", "vision") == "member"
    page.goto(app("/teams/vision/"))
    assert page.get_by_role("link", name="Request quota").count() == 0
    sign_out(page)

    # The admin's rule page previews who matched.
    sso_sign_in(page, app, "ada")
    page.goto(app("/sso/groups/"))
    row = page.locator("tr", has_text="vision-*")
    assert "lena" in row.inner_text() and "mo" in row.inner_text()
    sign_out(page)

    # mo's group changes at the provider: the next sign-in makes mo a lead.
    oidc_provider.user("mo", groups=["vision-leads"])
    sso_sign_in(page, app, "mo")
    assert role_of("mo", "vision") == "lead"
    page.goto(app("/teams/vision/"))
    assert page.get_by_role("link", name="Request quota").first.is_visible()
    assert_clean(page)
    sign_out(page)

    # Signing out ended the provider's session too: the next sign-in asks for the password.
    page.goto(app("/login/"))
    page.get_by_role("link", name="Sign in with single sign-on").click()
    assert page.get_by_label("Provider username").is_visible()


def test_a_refused_sign_in_says_why_in_the_browser(page, app, sso_settings, oidc_provider):
    register(oidc_provider, "fairshare", name="fairshare", base=app.url)
    sso_settings.FAIRSHARE_OIDC_SCOPES = ["openid", "profile"]
    oidc_provider.user("nick", groups=["vision-all"])
    page.goto(app("/login/"))
    page.get_by_role("link", name="Sign in with single sign-on").click()
    page.get_by_label("Provider username").fill("nick")
    page.get_by_label("Provider password").fill("provider-pw")
    page.get_by_role("button", name="Continue").click()
    page.get_by_role("alert").wait_for()
    assert "sent no 'groups' claim" in page.get_by_role("alert").inner_text()
    assert not ExternalIdentity.objects.exists()
