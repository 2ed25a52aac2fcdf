"""The same figure on every surface, for the demo data, as every demo role (issue 29).

Usage now (allocated and pending) and the DRF fair allocation each come from one service
(``monitoring.usage.current_usage``; the latest ``ShareComputation``). The dashboard, the team
page, the API and /metrics only present them, so for every team a role can see, every surface
must show the very same number. A surface that computes its own copy (the team page once summed
a department differently from the dashboard) fails here.

/metrics is per team's *own* namespaces (Prometheus sums a subtree itself); a leaf team's own
figure is its subtree's, so leaves are compared there, departments on the pages and the API.
"""

from __future__ import annotations

import re
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from kubernetes.utils import parse_quantity
from prometheus_client.parser import text_string_to_metric_families

from monitoring.usage import current_usage
from quotas.models import Team
from scheduling.models import ShareComputation
from scheduling.services import compute_shares

pytestmark = pytest.mark.django_db

WANTED_METRICS = {"fairshare_allocated", "fairshare_pending", "fairshare_fair_allocation"}
ROLES = ["admin", "dana", "rita", "mike", "vera", "carl", "sam", "paul", "pia"]


@pytest.fixture
def demo(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    call_command("seed_demo", "--quiet")
    snapshot = Path(settings.BASE_DIR) / "monitoring" / "fixtures" / "demo_cluster.json"
    call_command("collect_usage", snapshot=str(snapshot), verbosity=0)
    compute_shares(trigger="demo")
    assert ShareComputation.objects.exists()


class _Figures(HTMLParser):
    """Collect ``{(team, resource): {allocated, pending, fair}}`` from the elements carrying
    the data attributes; an element without its own data-team takes the nearest enclosing
    ``tr[data-team]`` (the dashboard's ``.res`` divs sit inside their team's row)."""

    def __init__(self):
        super().__init__()
        self.team: str | None = None
        self.figures: dict[tuple[str, str], dict[str, str]] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and attrs.get("data-team"):
            self.team = attrs["data-team"]
        if "data-resource" in attrs and "data-allocated" in attrs:
            team = attrs.get("data-team") or self.team
            assert team, f"figures outside a team: {attrs}"
            key = (team, attrs["data-resource"])
            found = {k: attrs.get(f"data-{k}") or "" for k in ("allocated", "pending", "fair")}
            assert self.figures.setdefault(key, found) == found, f"{key} shown twice, differently"


def _page_figures(client: Client, url: str) -> dict[tuple[str, str], dict[str, str]]:
    response = client.get(url)
    assert response.status_code == 200, url
    parser = _Figures()
    parser.feed(response.content.decode())
    return parser.figures


def _number(value: str | None) -> Decimal | None:
    return None if value in (None, "") else Decimal(str(parse_quantity(value)))


def _metrics() -> dict[tuple[str, str, str], Decimal]:
    client = Client()
    response = client.get("/metrics")
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name in WANTED_METRICS:
                key = (sample.name, sample.labels["team"], sample.labels["resource"])
                found[key] = Decimal(str(sample.value))
    return found


@pytest.mark.parametrize("username", ROLES)
def test_usage_and_fair_allocation_agree_on_dashboard_team_page_api_and_metrics(
    demo, username, settings
):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=username)
    client = Client()
    client.force_login(user)
    usage = current_usage()
    computation = ShareComputation.objects.order_by("-computed_at", "-id").first()
    fair = {s.team.slug: s.fair_allocation for s in computation.snapshots.select_related("team")}
    visible = list(Team.objects.visible_to(user).filter(active=True).order_by("slug"))
    assert visible, f"{username} sees no team"

    dashboard = _page_figures(client, reverse("home"))
    api_usage = client.get("/api/v1/usage/current/").json()["results"]
    api_usage = {row["team"]: row for row in api_usage}
    api_fair = client.get("/api/v1/share-snapshots/current/").json()["results"]
    api_fair = {row["team"]: row["fair_allocation"] for row in api_fair}
    checked = 0
    for team in visible:
        page = _page_figures(client, reverse("portal:team", args=[team.slug]))
        own = {key: value for key, value in page.items() if key[0] == team.slug}
        service = usage.of(team.pk)
        assert set(api_usage) >= {team.slug}
        for resource, amounts in service.items():
            want_allocated, want_pending = amounts["allocated"], amounts["pending"]
            if not want_allocated and not want_pending:
                continue
            for surface, figures in (("dashboard", dashboard), ("team page", own)):
                shown = figures.get((team.slug, resource))
                assert shown is not None, f"{surface} of {username} lacks {team.slug} {resource}"
                assert _number(shown["allocated"]) == want_allocated, (surface, team, resource)
                assert (_number(shown["pending"]) or 0) == want_pending, (surface, team, resource)
            api_row = api_usage[team.slug]
            assert _number(api_row["allocated"].get(resource, "0")) == want_allocated
            assert _number(api_row["pending"].get(resource, "0")) == want_pending
            checked += 1
        for resource, amount in (fair.get(team.slug) or {}).items():
            want = _number(str(amount))
            for surface, figures in (("dashboard", dashboard), ("team page", own)):
                shown = figures.get((team.slug, resource))
                if shown is None:  # a resource the team neither uses nor has quota for
                    continue
                assert _number(shown["fair"]) == want, (surface, team.slug, resource)
            if team.slug in api_fair:
                assert _number(api_fair[team.slug].get(resource)) == want
            checked += 1
    assert checked, f"nothing compared for {username}"


def test_metrics_show_the_same_usage_and_fair_allocation_for_every_leaf_team(demo, settings):
    usage = current_usage()
    computation = ShareComputation.objects.order_by("-computed_at", "-id").first()
    metrics = _metrics()
    leaves = Team.objects.filter(active=True, children__isnull=True)
    compared = 0
    for team in leaves:
        for resource, amounts in usage.of(team.pk).items():
            got = metrics.get(("fairshare_allocated", team.slug, resource), Decimal(0))
            assert got == amounts["allocated"], (team.slug, resource)
            got = metrics.get(("fairshare_pending", team.slug, resource), Decimal(0))
            assert got == amounts["pending"], (team.slug, resource)
            compared += 1
    for snapshot in computation.snapshots.select_related("team"):
        for resource, amount in (snapshot.fair_allocation or {}).items():
            got = metrics[("fairshare_fair_allocation", snapshot.team.slug, resource)]
            assert got == Decimal(str(parse_quantity(str(amount)))), (snapshot.team.slug, resource)
            compared += 1
    assert compared > 10


class _FocusRows(HTMLParser):
    """The focus table of a preview: ``{resource: [before, after, change, contention before,
    contention after]}`` as the cells read."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.resource: str | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "contention" in (attrs.get("class") or ""):
            self.resource = ""
        elif tag == "tr" and self.resource is not None and attrs.get("data-resource"):
            self.resource = attrs["data-resource"]
            self.rows[self.resource] = []
        elif tag == "td" and self.resource:
            self.cell = []

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None and self.resource:
            self.rows[self.resource].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "table":
            self.resource = None


def _focus_rows(html: str) -> dict[str, list[str]]:
    parser = _FocusRows()
    parser.feed(html)
    return parser.rows


def test_the_requesters_preview_and_the_approvers_show_the_same_figures(demo):
    """research-team's pending demo request (GPUs 48 guaranteed, 80 limit): its lead's live
    preview of those amounts and the admin's approval preview of the request agree cell by
    cell (the approver once saw other numbers than the requester)."""
    from django.contrib.auth import get_user_model

    from quotas.models import QuotaRequest

    users = get_user_model().objects
    pending = QuotaRequest.objects.get(team__slug="research-team", status="pending")
    lines = {line.resource: line for line in pending.lines.all()}
    assert set(lines) == {"nvidia.com/gpu"}

    lead = Client()
    lead.force_login(users.get(username="rita"))
    form = lead.get(reverse("portal:quotarequest_create", args=["research-team"]))
    assert form.status_code == 200
    data = {"justification": "same figures", "tz": "UTC"}
    data |= {
        name: value
        for name, value in re.findall(
            r'name="(lines-[^"]+)"[^>]*value="([^"]*)"', form.content.decode()
        )
    }
    resources = form.context["formset"].forms
    for i, line_form in enumerate(resources):
        if line_form.initial.get("resource") == "nvidia.com/gpu":
            data[f"lines-{i}-guarantee"] = f"{lines['nvidia.com/gpu'].guarantee.normalize():f}"
            data[f"lines-{i}-limit"] = f"{lines['nvidia.com/gpu'].limit.normalize():f}"
    asked = lead.post(reverse("portal:quotarequest_preview", args=["research-team"]), data)
    assert asked.status_code == 200

    admin = Client()
    admin.force_login(users.get(username="admin"))
    approving = admin.get(reverse("portal:approval_preview", args=[pending.pk]))
    assert approving.status_code == 200

    requester, approver = (
        _focus_rows(asked.content.decode()),
        _focus_rows(approving.content.decode()),
    )
    assert requester and len(requester["nvidia.com/gpu"]) == 5
    assert requester == approver
