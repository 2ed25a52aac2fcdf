"""The admin and lead tools in Chromium: the API tokens page (created, shown once, revoked), a
direct limit edit with its live preview (and a refusal naming the department), and a lead
ending a temporary grant early."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from quotas import decisions, lines
from quotas.choices import QuotaRequestStatus
from quotas.models import ApiToken, TeamQuota
from quotas.tokens import authenticate_token
from scheduling.services import compute_shares
from tests.base import GPU, PASSWORD, make_cast
from tests.browser.conftest import assert_clean, publish, screenshot, sign_in
from tests.browser.test_scenario import settle, type_like_a_person

pytestmark = pytest.mark.browser


def gpu_quota(team) -> tuple[Decimal, Decimal | None]:
    quota = TeamQuota.objects.get(team=team, resource=GPU)
    return quota.guarantee, quota.limit


def test_a_lead_creates_a_token_sees_it_once_and_revokes_it(page, app):
    cast = make_cast()
    sign_in(page, app, "alice", PASSWORD)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("ci-reports")
    expires = (timezone.now() + timedelta(days=30)).date()
    page.get_by_label("Expires on").fill(expires.isoformat())
    page.get_by_role("button", name="Create token").click()

    secret = page.locator("[data-token]")
    secret.wait_for()
    raw = secret.inner_text().strip()
    token = authenticate_token(raw)
    assert token is not None and token.user == cast.alice
    assert token.expires_at.date() == expires
    assert "shown only this once" in page.locator("section.issued").inner_text()
    screenshot(page, "tokens")
    assert_clean(page)

    # Shown once: the list names it by its prefix, never the secret again.
    page.goto(app("/tokens/"))
    row = page.locator("tr", has_text="ci-reports")
    assert token.prefix in row.inner_text() and "live" in row.inner_text()
    assert raw not in page.content()

    row.get_by_role("button", name="Revoke").click()  # the confirm dialog is accepted
    page.get_by_text("Token ci-reports").wait_for()
    assert "revoked" in page.locator("tr", has_text="ci-reports").inner_text()
    assert authenticate_token(raw) is None
    assert ApiToken.objects.get().revoked_at is not None
    assert_clean(page)


def test_an_admin_sets_a_limit_directly_with_the_preview(page, app):
    cast = make_cast()
    compute_shares(trigger="test")
    TeamQuota.objects.create(team=cast.dept, resource=GPU, guarantee=Decimal(0), limit=Decimal(70))
    sign_in(page, app, "root", PASSWORD)
    page.goto(app("/teams/team-a/"))
    page.get_by_role("link", name="Set quota").click()
    preview = page.locator("#whatif")

    # Over the department's limit: refused, with dept-x and the numbers next to the row.
    type_like_a_person(page, "#id_lines-0-guarantee", "45")
    type_like_a_person(page, "#id_lines-0-limit", "60")
    page.get_by_role("button", name="Set quota").click()
    page.locator(".field-error", has_text="dept-x").first.wait_for()
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))

    # A limit within the rules: the preview shows the effect, then it is applied.
    page.goto(app("/teams/team-a/quota/"))
    type_like_a_person(page, "#id_lines-0-limit", "64")
    type_like_a_person(page, "#id_note", "Capacity review: room for the sweep.")
    preview.get_by_text("What team-a gets").wait_for()
    settle(page)
    screenshot(page, "quota-edit")
    assert_clean(page)
    page.get_by_role("button", name="Set quota").click()
    page.get_by_text("Quota of team-a set.").wait_for()
    assert page.url == app("/teams/team-a/")
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(64))
    assert "Capacity review" in page.content()  # the audit trail on the team page
    assert_clean(page)
    publish("tokens", "quota-edit")


def test_a_lead_ends_a_temporary_grant_early(page, app):
    cast = make_cast()
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "30", "50")],
        justification="A week of sweeps.",
        window_end=timezone.now() + timedelta(days=7),
    )
    request = decisions.approve_request(request.pk, approver=cast.root)
    assert request.status == QuotaRequestStatus.ACTIVE
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))

    sign_in(page, app, "alice", PASSWORD)
    page.goto(app(f"/requests/{request.pk}/"))
    page.get_by_label("Note").fill("The sweep finished two days early.")
    page.get_by_role("button", name="End grant now").click()  # the confirm dialog is accepted
    page.get_by_text(f"Temporary grant #{request.pk} ended").wait_for()
    assert page.locator("main .badge.expired").first.inner_text() == "Expired"
    assert page.get_by_role("button", name="End grant now").count() == 0
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.EXPIRED
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    assert_clean(page)
