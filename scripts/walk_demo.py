"""Walk the running demo in a real browser as every demo role; exit non-zero on any failure.

    .venv/bin/python scripts/walk_demo.py --url http://127.0.0.1:8000

For each demo login (all of ``seed_demo``'s users: the admin, a department lead, team leads, a
member and a viewer) it signs in through the sign-in page and visits every page linked from the
navigation, then every page linked from those list pages (teams, requests, sync runs, reports,
the admin; a page only sorted, paged or, in the admin, filtered is not visited again), Debian's
Chromium driven by Playwright. It fails on:

* any response with status ≥ 500 (pages, fragments, scripts, styles, API calls);
* any console error (a failed resource load, a script error) and any CSP violation;
* a page whose main content is missing: the dashboard lists teams, last month's report has a
  non-zero total cost, the API docs list operations, a sync run shows drift (the admin starts a
  plan-only sync and waits for the worker to finish it);
* a page that scrolls sideways on a phone: every page visited (the sign-in page and a 404 page
  too) is measured again at a 390 px wide viewport, and the document may be no wider than the
  viewport (1 px of rounding allowed); the failure names the widest elements past the edge;
* a figure that differs between surfaces, for the teams the role can see: usage now (the
  dashboard's and each team page's ``data-allocated``/``data-pending`` against
  ``/api/v1/usage/current/``), budget use (the team pages' ``p.budget-use`` and this month's
  Reports ``tr.budget-use`` against ``/api/v1/budget-use/``) and chargeback (the Reports page's
  ``tr.report-line`` rows against its CSV download, ``/api/v1/chargeback/`` and the API's CSV,
  last month and this month, by team and resource and by team and namespace). The API calls
  carry the browser session's cookies, so each role gets exactly what it may see. The demo
  keeps collecting and rolling up while it is read, so a comparison is read again (up to three
  times) when the surfaces moved in between; a real difference stays.

It prints one line per page and a summary (pages, seconds and figures per role).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from urllib.parse import urldefrag, urlencode, urlparse

from kubernetes.utils import parse_quantity
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# seed_demo's logins (portal/management/commands/seed_demo.py USERS): every role once at least.
# The last three are leads like rita: fewer pages each (their pages are the same kinds), so the
# walk stays within CI's budget; their figures are checked in full.
LOGINS = [
    ("admin", "admin-demo-pass", "site admin", None),
    ("dana", "dana-demo-pass", "department lead", None),
    ("rita", "rita-demo-pass", "team lead", None),
    ("mike", "mike-demo-pass", "member", None),
    ("vera", "vera-demo-pass", "viewer", None),
    ("paul", "paul-demo-pass", "team lead (production)", None),
    ("carl", "carl-demo-pass", "team lead (cv)", 25),
    ("sam", "sam-demo-pass", "team lead (speech)", 25),
    ("pia", "pia-demo-pass", "team lead (platform)", 25),
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# Links not to follow: they change state, download, or leave the product's pages.
SKIP = re.compile(
    r"/logout/|/withdraw/|/decide/|/sync/start/|\.csv(\?|$)|/api/v1/|/api/schema/|/metrics"
    r"|/admin/logout/|/admin/password_change/|/delete/|/history/|/admin/r/|/add/"
)
MISSING = "teams/no-such-team/"  # the 404 page, measured at the phone width
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
    seconds: dict[str, float] = field(default_factory=dict)
    narrow: int = 0  # pages measured at the phone width
    figures: dict[str, int] = field(default_factory=dict)  # figures compared per role

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
            for username, password, role, most in LOGINS:
                context = browser.new_context(viewport=DESKTOP)
                context.add_init_script(INIT_SCRIPT)
                limit = min(args.max_pages, most or args.max_pages)
                began = time.monotonic()
                try:
                    _walk_as(walk, context.new_page(), username, password, role, limit)
                finally:
                    context.close()
                    walk.seconds[username] = time.monotonic() - began
        finally:
            browser.close()
    seconds = time.monotonic() - started
    print("\nPages walked per role: " + ", ".join(f"{k} {v}" for k, v in walk.pages.items()))
    print("Seconds per role: " + ", ".join(f"{k} {v:.0f}" for k, v in walk.seconds.items()))
    print("Figures compared per role: " + ", ".join(f"{k} {v}" for k, v in walk.figures.items()))
    print(
        f"{sum(walk.pages.values())} pages ({walk.narrow} also at {PHONE['width']} px) in "
        f"{seconds:.0f} s; {len(walk.failures)} failures"
    )
    for failure in walk.failures:
        print(f"FAILED {failure}")
    return 1 if walk.failures else 0


def _watch(walk: Walk, page: Page, who: str, where: list[str]) -> None:
    """Record 5xx responses and console errors against the page being visited."""

    def on_response(response):
        if response.status >= 500:
            walk.fail(who, where[0], f"{response.status} from {response.url}")

    def on_console(message):
        if message.type == "error" and not (where[0].endswith(MISSING) and "404" in message.text):
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
        if re.search(r"(^|&)(sort|wsort|o|p|page)=", parts.query):
            continue  # the same page sorted or paged: its own link is enough
        if parts.path.startswith("/admin/") and parts.query:
            continue  # an admin list filtered: the same page again
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
        _check_width(walk, page, who, url)
        if depth < 2 or _is_list_page(url):
            for link in _links(walk, page):
                if link not in seen:
                    queue.append((link, depth + 1))
    walk.pages[username] = len(seen)
    missing = walk.base + MISSING
    if _visit(walk, page, who, where, missing) == 404:
        _check_width(walk, page, who, missing)
    else:
        walk.fail(who, missing, "an unknown team's page did not answer 404")
    _check_reports(walk, page, who, where)
    compared = _check_usage_and_budgets(walk, page, who, where)
    compared += _check_chargeback(walk, page, who, where)
    walk.figures[username] = compared
    if not compared:
        walk.fail(who, walk.base, "no figure compared across surfaces")
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
    _check_width(walk, page, who, login)
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
    try:
        page.wait_for_url(re.compile(r"/sync/\d+/$"), timeout=15_000)
    except PlaywrightError:
        walk.fail(who, url, f"starting a sync did not reach the run's page (at {page.url})")
        return
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


# ------------------------------------------------------------------ no sideways scroll at 390 px

OVERFLOW_JS = """async () => {
  // Two frames: layout, resize observers (the charts) and media queries have caught up.
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const root = document.documentElement;
  const width = root.clientWidth;
  if (root.scrollWidth <= width + 1) return null;
  const name = (e) => {
    let s = e.tagName.toLowerCase();
    if (e.id) s += '#' + e.id;
    const cls = typeof e.className === 'string' ? e.className : '';
    const some = cls.trim().split(/\\s+/).filter(Boolean).slice(0, 3);
    return some.length ? s + '.' + some.join('.') : s;
  };
  const path = (e) => {
    const parts = [];
    for (let n = e; n && n !== document.body && parts.length < 4; n = n.parentElement) {
      parts.unshift(name(n));
    }
    return parts.join(' > ');
  };
  // Content inside a scrolling (or clipping) box does not widen the document, unless it is
  // positioned against a box outside it (a visually hidden label inside a scrolling table).
  const clipped = (e) => {
    for (let n = e; n && n !== document.body && n !== root;) {
      const position = getComputedStyle(n).position;
      const up = position === 'fixed' ? null
        : position === 'absolute' ? n.offsetParent : n.parentElement;
      if (!up || up === document.body || up === root) return false;
      if (getComputedStyle(up).overflowX !== 'visible') return true;
      n = up;
    }
    return false;
  };
  const over = [];
  for (const e of document.body.querySelectorAll('*')) {
    const box = e.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    // Its box, or the content spilling out of it (a long unbroken text in a narrow box).
    const spill = getComputedStyle(e).overflowX === 'visible' ? e.scrollWidth : 0;
    const right = Math.max(box.right, box.left + spill) + window.scrollX;
    if (right > width + 1 && !clipped(e)) over.push({e, right, width: box.width});
  }
  // The culprits: elements past the edge with no descendant reaching as far.
  const inner = over.filter((o) => !over.some(
    (d) => d.e !== o.e && o.e.contains(d.e) && d.right >= o.right));
  inner.sort((a, b) => b.right - a.right);
  return {
    scrollWidth: root.scrollWidth,
    clientWidth: width,
    offenders: inner.slice(0, 3).map((o) => ({
      path: path(o.e), right: Math.round(o.right), width: Math.round(o.width),
      text: (o.e.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 40),
    })),
  };
}"""


def _check_width(walk: Walk, page: Page, who: str, url: str) -> None:
    """Fail when the current page scrolls sideways at the phone width, naming the widest
    elements past the viewport's right edge."""
    walk.narrow += 1
    page.set_viewport_size(PHONE)
    try:
        found = page.evaluate(OVERFLOW_JS)
    except PlaywrightError as e:
        walk.fail(who, url, f"could not measure the width at {PHONE['width']} px: {e}")
        return
    finally:
        page.set_viewport_size(DESKTOP)
    if found:
        culprits = "; ".join(
            f"{o['path']} (right edge {o['right']} px, {o['width']} px wide, {o['text']!r})"
            for o in found["offenders"]
        )
        walk.fail(
            who,
            url,
            f"scrolls sideways at {PHONE['width']} px: the document is {found['scrollWidth']} px "
            f"wide for {found['clientWidth']} px; past the edge: {culprits or 'nothing found'}",
        )


# ------------------------------------------------------------------ the same figure everywhere

USAGE_JS = """() => [...document.querySelectorAll('[data-resource][data-allocated]')].map((e) => {
  const row = e.closest('tr[data-team]');
  return {team: e.dataset.team || (row ? row.dataset.team : ''), resource: e.dataset.resource,
          allocated: e.dataset.allocated || '', pending: e.dataset.pending || ''};
})"""
DATA_JS = """(selector) => [...document.querySelectorAll(selector)].map((e) => Object.fromEntries(
  [...e.attributes].filter((a) => a.name.startsWith('data-'))
    .map((a) => [a.name.slice(5).replaceAll('-', '_'), a.value])))"""
BUDGET_FIGURES = ("allocated_hours", "budget_hours", "percent")
ATTEMPTS = 3  # the demo keeps collecting and rolling up: read again when it moved meanwhile


def _get(walk: Walk, page: Page, who: str, url: str):
    """GET with the browser session's cookies; None (and a failure) unless 200."""
    try:
        response = page.request.get(url)
    except PlaywrightError as e:
        walk.fail(who, url, f"did not answer: {e}")
        return None
    if response.status != 200:
        walk.fail(who, url, f"answered {response.status}")
        return None
    return response


def _api_json(walk: Walk, page: Page, who: str, url: str) -> dict | None:
    response = _get(walk, page, who, url)
    return None if response is None else response.json()


def _api_csv(walk: Walk, page: Page, who: str, url: str) -> list[dict] | None:
    response = _get(walk, page, who, url)
    return None if response is None else list(csv.DictReader(io.StringIO(response.text())))


def _quantity(value: str | None) -> Decimal | None:
    if value in (None, ""):
        return Decimal(0)
    try:
        return Decimal(str(parse_quantity(value)))
    except (ValueError, InvalidOperation):
        return None


def _decimal(value: str | None) -> Decimal | None:
    try:
        return Decimal(value or "")
    except InvalidOperation:
        return None


def _instant(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value or "")
    except ValueError:
        return None


def _check_usage_and_budgets(walk: Walk, page: Page, who: str, where: list[str]) -> int:
    """Usage now on the dashboard and every visible team page against /api/v1/usage/current/;
    budget use on the team pages and this month's Reports against /api/v1/budget-use/.
    Return how many figures were compared."""
    usage_url = walk.base + "api/v1/usage/current/"
    budget_url = walk.base + "api/v1/budget-use/"
    for attempt in range(1, ATTEMPTS + 1):
        usage = _api_json(walk, page, who, usage_url)
        budget = _api_json(walk, page, who, budget_url)
        if usage is None or budget is None:
            return 0
        teams = [row["team"] for row in usage["results"]]
        if _visit(walk, page, who, where, walk.base) != 200:
            walk.fail(who, walk.base, "the dashboard did not load for the figures")
            return 0
        listed = set(
            page.eval_on_selector_all("tr[data-team]", "els => els.map(e => e.dataset.team)")
        )
        shown = {"dashboard": page.evaluate(USAGE_JS)}
        urls = {"dashboard": walk.base, "reports": walk.base + "reports/"}
        budgets: dict[str, list[dict]] = {}
        for slug in teams:
            url = f"{walk.base}teams/{slug}/"
            if _visit(walk, page, who, where, url) != 200:
                walk.fail(who, url, "a team the API lists has no team page")
                continue
            urls[f"team page of {slug}"] = url
            shown[f"team page of {slug}"] = [
                f for f in page.evaluate(USAGE_JS) if f["team"] == slug
            ]
            budgets[f"team page of {slug}"] = page.evaluate(DATA_JS, "p.budget-use")
        reports = walk.base + "reports/"
        if _visit(walk, page, who, where, reports) == 200:
            budgets["reports"] = page.evaluate(DATA_JS, "tr.budget-use")
        else:
            walk.fail(who, reports, "this month's report did not load for the budgets")
        again = (_api_json(walk, page, who, usage_url), _api_json(walk, page, who, budget_url))
        if again == (usage, budget):
            break
        if attempt < ATTEMPTS:
            print("  the demo's figures moved while they were read; reading them again", flush=True)

    compared = budget_compared = 0
    api = {row["team"]: row for row in usage["results"]}
    if listed != set(api):
        walk.fail(
            who,
            walk.base,
            f"the dashboard lists teams {sorted(listed)}, /api/v1/usage/current/ {sorted(api)}",
        )
    for surface, figures in shown.items():
        seen = set()
        for f in figures:
            team, resource = f["team"], f["resource"]
            seen.add((team, resource))
            if team not in api:
                walk.fail(who, urls[surface], f"the {surface} shows usage of {team}, the API not")
                continue
            for figure in ("allocated", "pending"):
                page_value = _quantity(f[figure])
                api_value = _quantity(api[team][figure].get(resource))
                compared += 1
                if page_value != api_value:
                    walk.fail(
                        who,
                        urls[surface],
                        f"usage differs: team {team}, {resource} {figure}: the {surface} shows "
                        f"{f[figure] or '0'!r}, /api/v1/usage/current/ "
                        f"{api[team][figure].get(resource)!r}",
                    )
        for team, row in api.items():
            if surface != "dashboard" and surface != f"team page of {team}":
                continue
            for resource in set(row["allocated"]) | set(row["pending"]):
                amounts = (row["allocated"].get(resource), row["pending"].get(resource))
                if any(_quantity(a) for a in amounts) and (team, resource) not in seen:
                    walk.fail(
                        who,
                        urls[surface],
                        f"the {surface} lacks the usage of team {team}, {resource} "
                        f"(the API: allocated {amounts[0]}, pending {amounts[1]})",
                    )

    want = {(row["team"], row["resource"]): row for row in budget["results"]}
    cutoff = _instant(budget["cutoff"])
    for surface, rows in budgets.items():
        seen = set()
        for row in rows:
            key = (row.get("team"), row.get("resource"))
            seen.add(key)
            if key not in want:
                walk.fail(
                    who, urls[surface], f"the {surface} shows a budget use of {key}, the API not"
                )
                continue
            expected = want[key]
            pairs = [(f, _decimal(row.get(f)), _decimal(expected[f])) for f in BUDGET_FIGURES]
            pairs.append(("cutoff", _instant(row.get("cutoff")), cutoff))
            if surface == "reports":
                pairs.append(("month", row.get("month"), expected["month"]))
            for figure, page_value, api_value in pairs:
                budget_compared += 1
                if page_value is None or page_value != api_value:
                    walk.fail(
                        who,
                        urls[surface],
                        f"budget use differs: team {key[0]}, {key[1]} {figure}: the {surface} "
                        f"shows {row.get(figure)!r}, /api/v1/budget-use/ "
                        f"{budget['cutoff'] if figure == 'cutoff' else expected[figure]!r}",
                    )
        for key in want:
            if (surface == "reports" or surface == f"team page of {key[0]}") and key not in seen:
                walk.fail(who, urls[surface], f"the {surface} lacks the budget use of {key}")
    print(
        f"  figures compared: usage {compared} (dashboard, {len(shown) - 1} team pages, API), "
        f"budget use {budget_compared} ({len(want)} budgets; team pages, Reports, API)",
        flush=True,
    )
    return compared + budget_compared


def _check_chargeback(walk: Walk, page: Page, who: str, where: list[str]) -> int:
    """The Reports page's lines, its CSV, /api/v1/chargeback/ and the API's CSV for last month
    and this month, by team and resource (the default) and by team and namespace: the same
    lines with the same figures. Return how many figures were compared."""
    this = datetime.now(UTC).date().replace(day=1)
    last = (this - timedelta(days=1)).replace(day=1)
    compared = 0
    for month in (last, this):
        for group_by in (("team", "resource"), ("team", "namespace")):
            for attempt in range(1, ATTEMPTS + 1):
                read = _chargeback_surfaces(walk, page, who, where, month, group_by)
                if read is None:
                    break
                differences, count = _chargeback_differences(read, group_by)
                if not differences:
                    break
                if attempt < ATTEMPTS:
                    print(f"  chargeback {month:%Y-%m} moved while read; again", flush=True)
            if read is None:
                continue
            compared += count
            for difference in differences:
                walk.fail(
                    who,
                    read["url"],
                    f"chargeback {month:%Y-%m} by {','.join(group_by)}: {difference}",
                )
    print(f"  chargeback: {compared} figures compared", flush=True)
    return compared


def _chargeback_surfaces(walk, page, who, where, month: date, group_by) -> dict | None:
    next_month = (month + timedelta(days=32)).replace(day=1)
    page_query = urlencode([("month", f"{month:%Y-%m}"), *(("group_by", g) for g in group_by)])
    api_query = urlencode(
        {
            "start": f"{month:%Y-%m-%d}",
            "end": f"{next_month:%Y-%m-%d}",
            "group_by": ",".join(group_by),
        }
    )
    url = f"{walk.base}reports/?{page_query}"
    if _visit(walk, page, who, where, url) != 200:
        walk.fail(who, url, "the report did not load")
        return None
    lines = page.evaluate(DATA_JS, "tr.report-line")
    total = _total_cost(page) if lines else None
    api = _api_json(walk, page, who, f"{walk.base}api/v1/chargeback/?{api_query}")
    page_csv = _api_csv(walk, page, who, f"{walk.base}reports/chargeback.csv?{page_query}")
    api_csv = _api_csv(walk, page, who, f"{walk.base}api/v1/chargeback/?{api_query}&format=csv")
    if api is None or page_csv is None or api_csv is None:
        return None
    return {
        "url": url,
        "columns": api["columns"],
        "api": api["rows"],
        "api_total": api["total"].get("cost"),
        "surfaces": {"Reports page": lines, "Reports CSV": page_csv, "API CSV": api_csv},
        "page_total": total,
    }


def _chargeback_differences(read: dict, group_by) -> tuple[list[str], int]:
    columns = read["columns"]

    def keyed(rows):
        return {tuple(row.get(g) or "" for g in group_by): row for row in rows}

    api = keyed(read["api"])
    differences, count = [], 0
    for surface, rows in read["surfaces"].items():
        if len(rows) != len(read["api"]):
            differences.append(f"the {surface} has {len(rows)} lines, the API {len(read['api'])}")
        mine = keyed(rows)
        for key in sorted(set(api) | set(mine)):
            if key not in mine or key not in api:
                where = "the API" if key not in mine else f"the {surface}"
                differences.append(f"line {key} only in {where}")
                continue
            for column in columns:
                ours, theirs = mine[key].get(column), api[key].get(column)
                count += 1
                if (ours or "") != ("" if theirs is None else str(theirs)):
                    differences.append(
                        f"line {key} {column}: the {surface} shows {ours!r}, the API {theirs!r}"
                    )
    if read["page_total"] is not None and read["api_total"] not in (None, ""):
        count += 1
        if abs(read["page_total"] - float(read["api_total"])) > 0.005:
            differences.append(
                f"total cost: the Reports page shows {read['page_total']}, "
                f"the API {read['api_total']}"
            )
    return differences, count


if __name__ == "__main__":
    sys.exit(main())
