"""Walk the running demo in a real browser as every demo role; exit non-zero on any failure.

    .venv/bin/python scripts/walk_demo.py --url http://127.0.0.1:8000

For each demo login (``seed_demo``'s users: the admin, a department lead, team leads, a member
and a viewer) it signs in through the sign-in page and visits every page linked from the
navigation, then every page linked from those list pages (teams, requests, sync runs, reports,
the admin), Debian's Chromium driven by Playwright. It fails on:

* any response with status ≥ 500 (pages, fragments, scripts, styles, API calls);
* any console error (a failed resource load, a script error) and any CSP violation;
* a page whose main content is missing: the dashboard lists teams, last month's report has a
  non-zero total cost, the API docs list operations, a sync run shows drift (the admin starts a
  plan-only sync and waits for the worker to finish it).

It prints one line per page and a summary (pages per role, seconds).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urldefrag, urlparse

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# seed_demo's logins (portal/management/commands/seed_demo.py USERS): every role once at least.
LOGINS = [
    ("admin", "admin-demo-pass", "site admin"),
    ("dana", "dana-demo-pass", "department lead"),
    ("rita", "rita-demo-pass", "team lead"),
    ("mike", "mike-demo-pass", "member"),
    ("vera", "vera-demo-pass", "viewer"),
    ("paul", "paul-demo-pass", "team lead (production)"),
]
# Links not to follow: they change state, download, or leave the product's pages.
SKIP = re.compile(
    r"/logout/|/withdraw/|/decide/|/sync/start/|\.csv(\?|$)|/api/v1/|/api/schema/|/metrics"
    r"|/admin/logout/|/admin/password_change/|/delete/|/history/|/admin/r/|/add/"
)
INIT_SCRIPT = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline'));
});
"""


@dataclass
class Walk:
    base: str
    failures: list[str] = field(default_factory=list)
    pages: dict[str, int] = field(default_factory=dict)

    def fail(self, who: str, url: str, what: str) -> None:
        self.failures.append(f"{who}: {url}: {what}")
        print(f"  FAIL {url}: {what}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the demo's base URL")
    parser.add_argument("--max-pages", type=int, default=120, help="per role (default 120)")
    args = parser.parse_args(argv)
    walk = Walk(base=args.url.rstrip("/") + "/")
    started = time.monotonic()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for username, password, role in LOGINS:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.add_init_script(INIT_SCRIPT)
                try:
                    _walk_as(walk, context.new_page(), username, password, role, args.max_pages)
                finally:
                    context.close()
        finally:
            browser.close()
    seconds = time.monotonic() - started
    print("\nPages walked per role: " + ", ".join(f"{k} {v}" for k, v in walk.pages.items()))
    print(f"{sum(walk.pages.values())} pages in {seconds:.0f} s; {len(walk.failures)} failures")
    for failure in walk.failures:
        print(f"FAILED {failure}")
    return 1 if walk.failures else 0


def _watch(walk: Walk, page: Page, who: str, where: list[str]) -> None:
    """Record 5xx responses and console errors against the page being visited."""

    def on_response(response):
        if response.status >= 500:
            walk.fail(who, where[0], f"{response.status} from {response.url}")

    def on_console(message):
        if message.type == "error":
            walk.fail(who, where[0], f"console error: {message.text}")

    page.on("response", on_response)
    page.on("console", on_console)
    page.on("pageerror", lambda error: walk.fail(who, where[0], f"script error: {error}"))


def _visit(walk: Walk, page: Page, who: str, where: list[str], url: str) -> int | None:
    where[0] = url
    try:
        response = page.goto(url, wait_until="networkidle", timeout=30_000)
    except PlaywrightError as e:
        walk.fail(who, url, f"did not load: {e}")
        return None
    status = response.status if response is not None else 0
    violations = page.evaluate("window.__csp || []")
    for violation in violations:
        walk.fail(who, url, f"CSP violation: {violation}")
    return status


def _links(walk: Walk, page: Page) -> list[str]:
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    out = []
    per_changelist: dict[str, int] = {}
    for href in hrefs:
        href, _ = urldefrag(href)
        parts = urlparse(href)
        if not href.startswith(walk.base) or SKIP.search(parts.path + "?"):
            continue
        if re.search(r"(^|&)(sort|o|p|page)=", parts.query):
            continue  # the same page sorted or paged: its own link is enough
        change = re.match(r"(/admin/\w+/\w+/)[^/]+/change/$", parts.path)
        if change:  # a few objects of each admin list, not all of them
            per_changelist[change[1]] = per_changelist.get(change[1], 0) + 1
            if per_changelist[change[1]] > 2:
                continue
        out.append(href)
    return out


def _walk_as(walk, page: Page, username, password, role, max_pages) -> None:
    who = f"{username} ({role})"
    print(f"\n== {who}", flush=True)
    where = [walk.base]
    _watch(walk, page, who, where)
    _sign_in(walk, page, who, where, username, password)

    nav = page.eval_on_selector_all('nav[aria-label="Main"] a[href]', "els => els.map(e => e.href)")
    seen: set[str] = set()
    queue = deque((url, 1) for url in [walk.base, *nav, walk.base + "api/docs/"])
    if username == "admin":
        queue.append((walk.base + "admin/", 1))
    while queue and len(seen) < max_pages:
        url, depth = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        status = _visit(walk, page, who, where, url)
        print(f"  {status} {url}", flush=True)
        if status is None:
            continue
        if status >= 400:
            walk.fail(who, url, f"linked page answered {status}")
            continue
        _check_content(walk, page, who, url)
        if depth < 2 or _is_list_page(url):
            for link in _links(walk, page):
                if link not in seen:
                    queue.append((link, depth + 1))
    walk.pages[username] = len(seen)
    _check_reports(walk, page, who, where)
    if username == "admin":
        _check_sync_drift(walk, page, who, where)


def _is_list_page(url: str) -> bool:
    path = urlparse(url).path
    if path in ("/", "/requests/", "/sync/", "/reports/", "/approvals/", "/admin/"):
        return True
    if re.fullmatch(r"/teams/[\w-]+/", path):  # members, requests, the request form
        return True
    return path.startswith("/admin/") and path.count("/") == 4  # /admin/app/model/


def _sign_in(walk, page, who, where, username, password) -> None:
    login = walk.base + "login/"
    _visit(walk, page, who, where, login)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    if not page.query_selector('nav[aria-label="Main"]'):
        walk.fail(who, login, "signing in did not reach a page with the navigation")


def _check_content(walk, page, who, url) -> None:
    path = urlparse(url).path
    if path == "/":
        teams = page.eval_on_selector_all('a[href^="/teams/"]', "els => els.length")
        if teams < 1:
            walk.fail(who, url, "the dashboard lists no team")
    elif path == "/api/docs/":
        try:
            page.wait_for_selector(".opblock", timeout=15_000)
        except PlaywrightError:
            walk.fail(who, url, "the API docs list no operation")
    elif path.startswith("/teams/") and not page.query_selector("h1"):
        walk.fail(who, url, "the team page has no heading")


def _check_reports(walk, page, who, where) -> None:
    today = datetime.now(UTC).date()
    last = (today.replace(day=1) - timedelta(days=1)).replace(day=1)
    url = f"{walk.base}reports/?month={last:%Y-%m}"
    status = _visit(walk, page, who, where, url)
    if status != 200:
        walk.fail(who, url, f"last month's report answered {status}")
        return
    total = _total_cost(page)
    print(f"  last month ({last:%Y-%m}) total cost: {total}", flush=True)
    if total is None or total <= 0:
        walk.fail(who, url, f"last month's report shows no cost (total {total})")


def _total_cost(page: Page) -> float | None:
    headers = page.eval_on_selector_all(
        "#report-table thead th", "els => els.map(e => e.textContent.trim())"
    )
    cells = page.eval_on_selector_all(
        "#report-table tfoot th, #report-table tfoot td",
        "els => els.map(e => [e.textContent.trim(), e.colSpan || 1])",
    )
    column = next((i for i, h in enumerate(headers) if h.startswith("Cost")), None)
    if column is None:
        return None
    position = 0
    for text, span in cells:
        if position == column:
            try:
                return float(text.replace(",", ""))
            except ValueError:
                return None
        position += span
    return None


def _check_sync_drift(walk, page, who, where) -> None:
    url = walk.base + "sync/"
    _visit(walk, page, who, where, url)
    button = page.query_selector('form.sync-actions button[value="dry-run"]')
    if button is None:
        walk.fail(who, url, "no button starts a sync")
        return
    page.once("dialog", lambda dialog: dialog.accept())
    button.click()
    page.wait_for_url(re.compile(r"/sync/\d+/$"), timeout=15_000)
    run_url = page.url
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = _visit(walk, page, who, where, run_url)
        if status == 200 and page.query_selector('.sync-progress[data-active="false"]'):
            break
        time.sleep(2)
    else:
        walk.fail(who, run_url, "the sync run did not finish within 2 minutes")
    counts = page.evaluate(
        """() => {
          const table = document.querySelector('section[aria-labelledby="counts-h"] table');
          if (!table) return {};
          const heads = [...table.querySelectorAll('thead th')].map(e => e.textContent.trim());
          const cells = [...table.querySelectorAll('tbody td')].map(e => e.textContent.trim());
          return Object.fromEntries(heads.map((h, i) => [h, parseInt(cells[i] || '0', 10)]));
        }"""
    )
    print(f"  sync run {run_url}: {counts}", flush=True)
    if counts.get("Drift", 0) < 1:
        walk.fail(who, run_url, f"the sync run shows no drift ({counts})")
    if counts.get("Updated", 0) < 1:
        walk.fail(who, run_url, f"the sync run shows no update ({counts})")
    if "Plan only — no cluster connected" not in page.inner_text("main"):
        walk.fail(who, run_url, "the run page does not say it only planned")


if __name__ == "__main__":
    sys.exit(main())
