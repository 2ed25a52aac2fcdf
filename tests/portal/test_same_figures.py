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
