"""Browser fixtures: Debian's Chromium driven by Playwright against pytest-django's live server.

* ``browser`` (one Chromium per module) is launched from ``/usr/bin/chromium`` (never
  ``playwright install``); Playwright's sync API keeps an event loop running in the test
  thread, so Django's async-safety check is switched off while it runs (the ORM calls in the
  tests are ordinary synchronous ones).
* ``app`` prepares the live server: plain-HTTP cookies, the fake Kubernetes API server as the
  cluster, no Celery messages (``sync_cluster.delay`` is recorded, the quota-change receiver is
  off: the tests run shares and syncs themselves, synchronously).
* ``page`` is a fresh 1280×800 context in UTC that records console errors, page errors and CSP
  violations (an init script listens for ``securitypolicyviolation``); ``assert_clean(page)``
  fails on any of them.
Screenshots go to ``test-artifacts/screenshots/`` (gitignored).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
TIMEOUT_MS = 10_000

CSP_LISTENER = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline"));
});
"""


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@dataclass
class App:
    url: str
    kubeapi: object
    enqueued: list[int] = field(default_factory=list)

    def __call__(self, path: str) -> str:
        return self.url + path


@pytest.fixture
def app(live_server, transactional_db, settings, kubeapi) -> Iterator[App]:
    from quotas.signals import quota_changed
    from scheduling import receivers

    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    app = App(url=live_server.url, kubeapi=kubeapi)
    uid = "scheduling.sync_on_quota"
    quota_changed.disconnect(dispatch_uid=uid)
    with mock.patch(
        "scheduling.tasks.sync_cluster.delay",
        side_effect=lambda run_id=None, **kw: app.enqueued.append(run_id),
    ):
        try:
            yield app
        finally:
            quota_changed.connect(receivers.on_quota_changed, dispatch_uid=uid)


@dataclass
class Problems:
    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def page(browser, app):
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, timezone_id="UTC", locale="en-US"
    )
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    problems = Problems()
    page.on(
        "console",
        lambda m: problems.console.append(f"{m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: problems.errors.append(str(e)))
    page.on("dialog", lambda d: d.accept())  # data-confirm questions
    page.problems = problems
    try:
        yield page
    finally:
        context.close()


def assert_clean(page) -> None:
    """No console error, no uncaught exception and no CSP violation on the current page."""
    violations = page.evaluate("window.__csp || []")
    assert page.problems.console == [], page.problems.console
    assert page.problems.errors == [], page.problems.errors
    assert violations == [], violations


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def publish(*names: str) -> None:
    """Copy the chosen screenshots to docs/screenshots/ (when FAIRSHARE_UPDATE_SCREENSHOTS=1)."""
    if os.environ.get("FAIRSHARE_UPDATE_SCREENSHOTS") != "1":
        return
    target = ROOT / "docs" / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (SHOTS / f"{name}.png").exists():
            shutil.copyfile(SHOTS / f"{name}.png", target / f"{name}.png")


def sign_in(page, app: App, username: str, password: str) -> None:
    page.goto(app("/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(app("/"))


def sign_out(page) -> None:
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/login/")
