"""No page scrolls sideways on a phone (issue 29): each main page type, loaded at 390 × 844 as
an admin and as a team lead, is no wider than the viewport. Wide tables scroll inside their
``.table-wrap``; the document itself never does.

The measurement is the demo walk's (``scripts/walk_demo.py`` ``OVERFLOW_JS``): on a failure it
names the elements past the right edge, so the fix is easy to find.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from quotas import decisions, lines
from quotas.models import QuotaRequest
from scheduling.services import compute_shares
from scheduling.sync import create_run, run_sync
from tests.base import GPU, PASSWORD, make_cast
from tests.browser.conftest import assert_clean, screenshot, sign_in
from tests.browser.test_scenario import RQ_GPU, seed_usage

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
# A justification with a long unbroken URL: long strings must wrap, not widen the page.
LINK = "https://wiki.example.org/gpu-capacity/2026/planning/team-a/" + "x" * 60


def _walk():
    path = Path(__file__).resolve().parents[2] / "scripts" / "walk_demo.py"
    spec = importlib.util.spec_from_file_location("walk_demo", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


OVERFLOW_JS = _walk().OVERFLOW_JS


@pytest.fixture
def world(app):
    """The cast, usage and rollups (reports), shares, a pending request with a long link, and
    a sync run that found drift (its diff on the run page)."""
    cast = make_cast()
    seed_usage(cast)
    compute_shares(trigger="test")
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "24", "40"), lines.LineInput("cpu", "64", "128")],
        justification=f"Training runs for the spring models, see {LINK}",
    )
    run_sync(create_run(trigger="test").pk)
    edited = app.kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    edited["spec"]["hard"][RQ_GPU] = "99"  # drift: someone edits the quota in the cluster
    app.kubeapi.put_object(edited)
    run = run_sync(create_run(trigger="schedule").pk)
    assert run.drift_count == 1
    return cast, request, run


def _overflows(page, paths: list[str], app) -> list[str]:
    """Load each path at the phone width; return one line per page that scrolls sideways."""
    page.set_viewport_size(PHONE)
    found = []
    for path in paths:
        response = page.goto(app(path))
        assert response.status in (200, 404), (path, response.status)
        page.wait_for_load_state("networkidle")
        overflow = page.evaluate(OVERFLOW_JS)
        if overflow:
            name = path.strip("/").replace("/", "-").split("?")[0] or "dashboard"
            screenshot(page, f"phone-{name}")
            culprits = "; ".join(
                f"{o['path']} (right edge {o['right']} px)" for o in overflow["offenders"]
            )
            found.append(f"{path}: {overflow['scrollWidth']} px wide; {culprits}")
        if response.status == 200:
            assert_clean(page)
    return found


def test_no_page_scrolls_sideways_at_390_px_for_an_admin(page, app, world):
    _, request, run = world
    page.set_viewport_size(PHONE)
    found = _overflows(page, ["/login/"], app)
    sign_in(page, app, "root", PASSWORD)
    paths = [
        "/",
        "/teams/team-a/",
        "/teams/dept-x/",
        "/teams/team-a/quota/",
        "/requests/",
        f"/requests/{request.pk}/",
        "/teams/team-a/requests/new/",
        "/approvals/",
        "/rebalance/",
        "/sync/",
        f"/sync/{run.pk}/",
        "/reports/?group_by=team&group_by=namespace&group_by=flavor",
        "/tokens/",
        "/namespaces/adopt/",
        "/teams/no-such-team/",  # last: its 404 is a console error, which assert_clean counts
    ]
    found += _overflows(page, paths, app)
    assert not found, "\n".join(found)
    assert QuotaRequest.objects.filter(pk=request.pk, status="pending").exists()


def test_no_page_scrolls_sideways_at_390_px_for_a_team_lead(page, app, world):
    _, request, run = world
    sign_in(page, app, "alice", PASSWORD)
    paths = [
        "/",
        "/teams/team-a/",
        "/requests/",
        f"/requests/{request.pk}/",
        "/teams/team-a/requests/new/",
        "/sync/",
        f"/sync/{run.pk}/?show=all",
        "/reports/",
        "/tokens/",
    ]
    found = _overflows(page, paths, app)
    assert not found, "\n".join(found)
