"""End to end in Chromium: a lead asks for 16 more GPUs for a week, an admin approves, a sync
puts the new quota into the (fake) cluster, the dashboard shows it, and when the week is over
the grant reverts — in the database, the cluster and the UI. Plus: every main page loads
without console errors or CSP violations, and the screenshots for docs/."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from monitoring.models import RateCard, UsageRollup, UsageSample
from quotas.choices import QuotaRequestStatus
from quotas.grants import expire_temporary_quota
from quotas.models import QuotaRequest, TeamQuota
from scheduling.choices import SyncStatus
from scheduling.models import SyncRun
from scheduling.services import compute_shares
from scheduling.sync import create_run, run_sync
from tests.base import GPU, PASSWORD, make_cast
from tests.browser.conftest import assert_clean, publish, screenshot, sign_in, sign_out

pytestmark = pytest.mark.browser

RQ_GPU = f"requests.{GPU}"


def cluster_gpus(kubeapi) -> tuple[str, dict, dict]:
    """team-a's ResourceQuota hard GPUs and its Volcano Queue's guarantee and capability."""
    quota = kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    queue = kubeapi.get("Queue", "team-a")
    return quota["spec"]["hard"][RQ_GPU], queue["spec"]["guarantee"], queue["spec"]["capability"]


def team_a_row(page) -> str:
    return page.locator("#teams-table tbody tr", has_text="team-a").first.inner_text()


def settle(page) -> None:
    """Wait out the preview's 400 ms debounce, then until htmx has no request in flight."""
    page.wait_for_timeout(450)
    page.locator(".htmx-request").first.wait_for(state="detached")


def type_like_a_person(page, selector: str, text: str, *, keys: bool = True) -> None:
    """Replace a field's value and let the live preview answer before moving on.

    The request form previews on ``keyup changed delay:400ms, change`` with
    ``hx-sync="this:replace"``: a change while a preview is in flight aborts it, and htmx 2
    logs every aborted request with console.error (``htmx:sendAbort``). A person takes longer
    than 400 ms between fields; a script must wait for the same, or the console fills with
    aborts that are not errors of the page.
    """
    field = page.locator(selector)
    field.click()  # leaving the previous field fires its "change" → a preview
    settle(page)
    if keys:
        field.press("Control+A")
        field.press_sequentially(text, delay=30)
    else:
        field.fill(text)
    settle(page)


def sync_from_the_ui(page, app) -> SyncRun:
    """Click "Sync now" as an admin, run the queued run here (the worker's job), and wait
    until the run page — polling its progress — shows it finished."""
    page.goto(app("/sync/"))
    page.get_by_role("button", name="Sync now").click()
    page.wait_for_url(re.compile(r"/sync/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert app.enqueued[-1] == run_id
    progress = page.locator(f"#sync-progress-{run_id}")
    assert progress.get_attribute("hx-trigger") == "every 2s"
    run = run_sync(run_id)
    assert run.status == SyncStatus.SUCCEEDED, run.error
    # The next poll sees the run finished and reloads the page; polling stops.
    page.locator(f'#sync-progress-{run_id}[data-active="false"]').wait_for()
    assert page.locator(".sync-progress .badge").inner_text() == "Succeeded"
    return run


def test_a_temporary_grant_reaches_the_cluster_and_reverts_when_it_ends(page, app):
    cast = make_cast()
    kubeapi = app.kubeapi
    run_sync(create_run(trigger="test").pk)
    compute_shares(trigger="test")
    assert cluster_gpus(kubeapi) == ("40", {"resource": {GPU: "20"}}, {GPU: "40"})

    # A lead asks for 16 more GPUs (guarantee 20 → 36, limit 40 → 56) for one week.
    sign_in(page, app, "alice", PASSWORD)
    page.get_by_role("link", name="Team A").first.click()
    page.get_by_role("link", name="Request quota").click()
    preview = page.locator("#whatif")
    before = preview.inner_text()
    type_like_a_person(page, "#id_lines-0-guarantee", "36")
    preview.get_by_text("What team-a gets").wait_for()
    first = preview.inner_text()
    type_like_a_person(page, "#id_lines-0-limit", "56")
    assert first != before
    assert preview.inner_text() != before
    type_like_a_person(
        page, "#id_justification", "One-week sweep of the 70B model before the deadline."
    )
    end = (timezone.now() + timedelta(days=7)).astimezone(UTC)
    type_like_a_person(page, "#id_window_end", end.strftime("%Y-%m-%dT%H:%M"), keys=False)
    screenshot(page, "request-form")
    assert_clean(page)
    page.get_by_role("button", name="Send request").click()
    page.get_by_text("sent to the approvers").wait_for()
    request = QuotaRequest.objects.get()
    assert request.status == QuotaRequestStatus.PENDING
    assert request.window_end is not None
    sign_out(page)

    # An admin sees it in the queue and approves it.
    sign_in(page, app, "root", PASSWORD)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
    item = page.locator("article.queue-item", has_text=f"#{request.pk}")
    item.locator(".preview .whatif").wait_for()
    screenshot(page, "approval-queue")
    assert_clean(page)
    item.get_by_role("button", name="Approve").click()
    page.get_by_text(f"Request #{request.pk} for team-a approved.").wait_for()
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.ACTIVE
    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU)
    assert (quota.guarantee, quota.limit) == (Decimal(36), Decimal(56))
    compute_shares(trigger="test")  # what the quota-change receiver would run

    # A sync puts the new quota into the cluster.
    run = sync_from_the_ui(page, app)
    assert cluster_gpus(app.kubeapi) == ("56", {"resource": {GPU: "36"}}, {GPU: "56"})
    assert run.updated_count >= 2
    page.locator("table.sync-items").get_by_text(RQ_GPU).first.wait_for()
    screenshot(page, "sync-run")
    assert_clean(page)

    # The dashboard shows the new allocation.
    page.goto(app("/"))
    assert re.search(r"/ 36 / 56", team_a_row(page))
    screenshot(page, "dashboard")
    assert_clean(page)

    # The clock passes the end of the window: the grant reverts, and the next sync with it.
    expired = expire_temporary_quota(now=request.window_end + timedelta(seconds=1))
    assert request.pk in expired.expired
    quota.refresh_from_db()
    assert (quota.guarantee, quota.limit) == (Decimal(20), Decimal(40))
    compute_shares(trigger="test")
    sync_from_the_ui(page, app)
    assert cluster_gpus(app.kubeapi) == ("40", {"resource": {GPU: "20"}}, {GPU: "40"})
    page.goto(app("/"))
    assert re.search(r"/ 20 / 40", team_a_row(page))
    page.goto(app(f"/requests/{request.pk}/"))
    assert page.locator("main .badge.expired").first.inner_text() == "Expired"
    assert_clean(page)
    publish("request-form", "approval-queue")


def seed_usage(cast) -> None:
    """A little usage and a May-like month of rollups so charts and reports have data."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    since = datetime(2025, 1, 1, tzinfo=UTC)
    RateCard.objects.create(resource=GPU, price_per_unit_hour=Decimal("2.50"), valid_from=since)
    RateCard.objects.create(resource="cpu", price_per_unit_hour=Decimal("0.04"), valid_from=since)
    first = now.replace(day=1, hour=0)
    for team, gpus in ((cast.team_a, 12), (cast.team_b, 20)):
        UsageSample.objects.create(
            taken_at=now, team=team, namespace=f"{team.slug}-ml", resource=GPU, allocated=gpus
        )
        for hours_ago in range(0, 48, 3):
            UsageRollup.objects.create(
                period="hour",
                start=now - timedelta(hours=hours_ago + 1),
                team=team,
                namespace=f"{team.slug}-ml",
                resource=GPU,
                flavor="NVIDIA-H100-80GB-HBM3",
                allocated_hours=Decimal(gpus - hours_ago % 5),
                used_hours=Decimal(gpus // 2),
                guarantee_hours=Decimal(gpus // 2),
            )
        UsageRollup.objects.create(
            period="day",
            start=first,
            team=team,
            namespace=f"{team.slug}-ml",
            resource="cpu",
            flavor="",
            allocated_hours=Decimal(gpus * 100),
        )


MAIN_PAGES = {
    "root": [
        ("dashboard", "/"),
        ("team", "/teams/team-a/"),
        ("requests", "/requests/"),
        ("approvals", "/approvals/"),
        ("rebalance", "/rebalance/"),
        ("sync", "/sync/"),
        ("reports", "/reports/?group_by=team&group_by=flavor"),
    ],
    "alice": [
        ("dashboard-lead", "/"),
        ("team-lead", "/teams/team-a/"),
        ("request-new", "/teams/team-a/requests/new/"),
        ("sync-lead", "/sync/"),
        ("reports-lead", "/reports/"),
    ],
}


def test_main_pages_load_without_console_errors_or_csp_violations(page, app):
    cast = make_cast()
    seed_usage(cast)
    compute_shares(trigger="test")
    run_sync(create_run(trigger="test").pk)
    edited = app.kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    edited["spec"]["hard"][RQ_GPU] = "99"  # someone edits the quota behind Fairshare's back
    app.kubeapi.put_object(edited)
    run = run_sync(create_run(trigger="schedule").pk)
    assert run.drift_count == 1
    pages_seen = 0
    for username, pages in MAIN_PAGES.items():
        sign_in(page, app, username, PASSWORD)
        run_page = ("sync-run-drift", f"/sync/{run.pk}/")
        if username != "root":
            run_page = (f"sync-run-{username}", f"/sync/{run.pk}/?show=all")
        for name, path in [*pages, run_page]:
            response = page.goto(app(path))
            assert response.status == 200, path
            page.wait_for_load_state("networkidle")
            screenshot(page, name)
            assert_clean(page)
            pages_seen += 1
        # The drifted quota is highlighted for admins and team-a's lead alike.
        page.goto(app(f"/sync/{run.pk}/?show=drift"))
        drifted = page.locator("table.sync-items > tbody > tr.drift-row")
        assert drifted.count() == 1
        assert "team-a-ml/fairshare" in drifted.inner_text()
        assert "(changed in the cluster)" in drifted.inner_text()
        sign_out(page)

    # Charts are drawn from json_script data by fairshare.js (no inline script needed).
    sign_in(page, app, "root", PASSWORD)
    page.goto(app("/reports/"))
    assert page.locator("canvas[data-chart-src='report-chart'][data-drawn='1']").count() == 1
    assert page.locator("#report-table tbody tr").count() == 2
    assert_clean(page)
    assert pages_seen == sum(len(p) + 1 for p in MAIN_PAGES.values())
    publish("dashboard", "team", "sync-run-drift", "reports")
