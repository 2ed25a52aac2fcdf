"""The standard checks, run for every team-scoped endpoint (NetBox's APIViewTestCases, small).

Each endpoint declares how to make one row for team-a and one for team-b, how to read the team
of a listed item, and (if writable) who may create and with what payload. The checks: list
scoped to the caller's teams, detail 404 for outsiders, create 403 without permission, create
201 and round-trip with it, and the answer of every role (anonymous, tokens...) to a list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from monitoring.models import GpuSample, UsageRollup, UsageSample
from quotas.decisions import submit_request
from quotas.models import Budget, Membership, Namespace, QuotaRequest, Team, TeamQuota
from scheduling.models import ShareComputation, ShareSnapshot
from tests.base import GPU

pytestmark = pytest.mark.django_db


def _team(item: dict) -> str:
    return item["team"]


def _requests(cast) -> tuple[Any, Any]:
    lines = [{"resource": GPU, "guarantee": "24", "limit": "48"}]
    a = submit_request(team=cast.team_a, requester=cast.alice, lines=lines, justification="a")
    b = submit_request(team=cast.team_b, requester=cast.charlie, lines=lines, justification="b")
    return a, b


def _usage(cast) -> tuple[Any, Any]:
    now = timezone.now()
    return tuple(
        UsageSample.objects.create(
            taken_at=now, team=team, namespace=f"{team.slug}-ml", resource=GPU, allocated=4
        )
        for team in (cast.team_a, cast.team_b)
    )


def _rollups(cast) -> tuple[Any, Any]:
    start = timezone.now().replace(minute=0, second=0, microsecond=0)
    return tuple(
        UsageRollup.objects.create(
            period="hour",
            start=start,
            team=team,
            namespace=f"{team.slug}-ml",
            resource=GPU,
            allocated_hours=4,
        )
        for team in (cast.team_a, cast.team_b)
    )


def _gpu_samples(cast) -> tuple[Any, Any]:
    now = timezone.now()
    return tuple(
        GpuSample.objects.create(
            taken_at=now, node=f"gpu-{i}", uuid=f"GPU-{i}", util_gpu=50, team=team
        )
        for i, team in enumerate((cast.team_a, cast.team_b))
    )


def _snapshots(cast) -> tuple[Any, Any]:
    now = timezone.now()
    computation = ShareComputation.objects.create(computed_at=now)
    return tuple(
        ShareSnapshot.objects.create(
            computation=computation,
            computed_at=now,
            team=team,
            usage={GPU: "4"},
            dominant_share=0.04,
            dominant_resource=GPU,
        )
        for team in (cast.team_a, cast.team_b)
    )


@dataclass(frozen=True)
class Endpoint:
    basename: str  # "quotas-api:team"
    rows: Any  # cast -> (row of team-a, row of team-b)
    team_of: Any = _team
    lookup: str = "pk"
    create: Any = None  # cast -> payload
    writer: str = "admin"
    checked: tuple[str, ...] = ()  # payload keys that must come back as sent
    read_scopes: tuple[str, ...] = ("read:all",)
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.basename.split(":")[1]

    def list_url(self) -> str:
        return reverse(f"{self.basename}-list")

    def detail_url(self, row) -> str:
        return reverse(f"{self.basename}-detail", kwargs={self.lookup: getattr(row, self.lookup)})


ENDPOINTS = [
    Endpoint(
        "quotas-api:team",
        rows=lambda c: (c.team_a, c.team_b),
        team_of=lambda item: item["slug"],
        lookup="slug",
        create=lambda c: {
            "slug": "team-c",
            "name": "Team C",
            "parent": "dept-x",
            "weight": 2,
            "tier": "experiment",
            "cost_center": "CC-C",
        },
        checked=("slug", "parent", "weight", "tier", "cost_center"),
    ),
    Endpoint(
        "quotas-api:namespace",
        rows=lambda c: (
            Namespace.objects.get(name="team-a-ml"),
            Namespace.objects.get(name="team-b-ml"),
        ),
        create=lambda c: {"name": "team-a-dev", "team": "team-a", "labels": {"env": "dev"}},
        checked=("name", "team", "labels"),
    ),
    Endpoint(
        "quotas-api:membership",
        rows=lambda c: (
            Membership.objects.get(user=c.bob),
            Membership.objects.get(user=c.charlie),
        ),
        create=lambda c: {"team": "team-a", "user": "nobody", "role": "viewer"},
        writer="lead",
        checked=("team", "user", "role"),
    ),
    Endpoint(
        "quotas-api:teamquota",
        rows=lambda c: (TeamQuota.objects.get(team=c.team_a), TeamQuota.objects.get(team=c.team_b)),
        create=lambda c: {"team": "team-a", "resource": "cpu", "guarantee": "500m", "limit": "2"},
        checked=("team", "resource", "guarantee", "limit"),
    ),
    Endpoint(
        "quotas-api:quotarequest",
        rows=_requests,
        create=lambda c: {
            "team": "team-a",
            "justification": "A new model needs more.",
            "lines": [{"resource": GPU, "guarantee": "24", "limit": "48"}],
        },
        writer="lead",
        checked=("team", "justification"),
    ),
    Endpoint(
        "quotas-api:budget",
        rows=lambda c: tuple(
            Budget.objects.create(team=t, monthly_hours=Decimal(100)) for t in (c.team_a, c.team_b)
        ),
        create=lambda c: {"team": "team-a", "resource": GPU, "monthly_hours": "1000.000"},
        checked=("team", "resource", "monthly_hours"),
        read_scopes=("read:all", "read:chargeback"),
    ),
    Endpoint("monitoring-api:usagesample", rows=_usage),
    Endpoint(
        "monitoring-api:usagerollup", rows=_rollups, read_scopes=("read:all", "read:chargeback")
    ),
    Endpoint("monitoring-api:gpusample", rows=_gpu_samples),
    Endpoint("scheduling-api:sharesnapshot", rows=_snapshots),
]
WRITABLE = [e for e in ENDPOINTS if e.create]


def _ids(endpoints):
    return [str(e) for e in endpoints]


def _listed(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_ids(ENDPOINTS))
@pytest.mark.parametrize("role", ["member", "viewer", "lead", "personal-lead"])
def test_list_shows_only_the_callers_teams(endpoint, role, cast, client_as):
    endpoint.rows(cast)
    teams = {endpoint.team_of(item) for item in _listed(client_as(role).get(endpoint.list_url()))}
    assert "team-a" in teams
    assert "team-b" not in teams


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_ids(ENDPOINTS))
def test_admins_and_department_leads_see_both_teams(endpoint, cast, client_as):
    endpoint.rows(cast)
    for role in ("admin", "dept-lead"):
        teams = {endpoint.team_of(i) for i in _listed(client_as(role).get(endpoint.list_url()))}
        assert {"team-a", "team-b"} <= teams, role


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_ids(ENDPOINTS))
def test_outsiders_get_404_for_another_teams_row(endpoint, cast, client_as):
    row_a, row_b = endpoint.rows(cast)
    response = client_as("other-lead").get(endpoint.detail_url(row_a))
    assert response.status_code == 404
    assert list(response.json()["errors"]) == ["detail"]
    assert client_as("other-lead").get(endpoint.detail_url(row_b)).status_code == 200
    assert client_as("nobody").get(endpoint.detail_url(row_b)).status_code == 404


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_ids(ENDPOINTS))
@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", 401),
        ("node-agent", 403),
        ("service-all", 200),
        ("service-chargeback", None),  # 200 only where the endpoint serves read:chargeback
    ],
)
def test_each_kind_of_caller_gets_the_documented_answer(endpoint, role, expected, cast, client_as):
    endpoint.rows(cast)
    response = client_as(role).get(endpoint.list_url())
    if expected is None:
        expected = 200 if "read:chargeback" in endpoint.read_scopes else 403
    assert response.status_code == expected, response.content
    if expected != 200:
        assert list(response.json()) == ["errors"]
        assert response.json()["errors"]["detail"]
    if role == "anonymous":
        assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("endpoint", WRITABLE, ids=_ids(WRITABLE))
@pytest.mark.parametrize("role", ["member", "viewer", "service-all", "node-agent"])
def test_create_without_permission_is_403(endpoint, role, cast, client_as):
    response = client_as(role).post(endpoint.list_url(), endpoint.create(cast), format="json")
    assert response.status_code == 403, response.content
    assert response.json()["errors"]["detail"]


@pytest.mark.parametrize("endpoint", WRITABLE, ids=_ids(WRITABLE))
def test_create_with_permission_is_201_and_round_trips(endpoint, cast, client_as):
    client = client_as(endpoint.writer)
    payload = endpoint.create(cast)
    response = client.post(endpoint.list_url(), payload, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    for key in endpoint.checked:
        assert created[key] == payload[key], key
    lookup = created["slug"] if endpoint.lookup == "slug" else created["id"]
    url = reverse(f"{endpoint.basename}-detail", kwargs={endpoint.lookup: lookup})
    assert client.get(url).json() == created


LEAD_WRITABLE = [e for e in WRITABLE if e.writer == "lead"]


@pytest.mark.parametrize("endpoint", LEAD_WRITABLE, ids=_ids(LEAD_WRITABLE))
def test_creating_for_an_invisible_team_reads_like_a_typo(endpoint, cast, client_as):
    payload = endpoint.create(cast)
    client = client_as("other-lead")
    response = client.post(endpoint.list_url(), payload, format="json")
    typo = client.post(endpoint.list_url(), payload | {"team": "team-zz"}, format="json")
    assert response.status_code == typo.status_code == 400
    assert response.json() == {"errors": {"team": ["No such team: team-a."]}}
    assert typo.json() == {"errors": {"team": ["No such team: team-zz."]}}


def test_writes_are_audited_with_before_and_after(cast, client_as):
    client = client_as("admin")
    response = client.patch(
        reverse("quotas-api:team-detail", args=["team-a"]), {"weight": 7}, format="json"
    )
    assert response.status_code == 200
    event = cast.team_a.audit_events.get(verb="update")
    assert (event.actor, event.before["weight"], event.after["weight"]) == (cast.root, 1, 7)


def test_a_lead_manages_members_of_their_team_only(cast, client_as):
    lead = client_as("lead")
    membership = Membership.objects.get(user=cast.vic)
    url = reverse("quotas-api:membership-detail", args=[membership.pk])
    assert lead.patch(url, {"role": "member"}, format="json").json()["role"] == "member"
    charlie_row = Membership.objects.get(user=cast.charlie)
    other = reverse("quotas-api:membership-detail", args=[charlie_row.pk])
    assert lead.delete(other).status_code == 404
    assert client_as("member").delete(url).status_code == 403
    assert lead.delete(url).status_code == 204
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_model_rules_come_back_as_field_errors(cast, client_as):
    response = client_as("admin").patch(
        reverse("quotas-api:team-detail", args=["dept-x"]), {"parent": "team-a"}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["parent"]


def test_quantities_are_accepted_as_kubernetes_strings_and_rendered_canonically(cast, client_as):
    client = client_as("admin")
    response = client.post(
        reverse("quotas-api:teamquota-list"),
        {"team": "team-a", "resource": "memory", "guarantee": "68719476736", "limit": "128Gi"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert (response.json()["guarantee"], response.json()["limit"]) == ("64Gi", "128Gi")
    bad = client.post(
        reverse("quotas-api:teamquota-list"),
        {"team": "team-a", "resource": "cpu", "guarantee": "lots", "limit": "2"},
        format="json",
    )
    assert bad.status_code == 400
    assert list(bad.json()["errors"]) == ["guarantee"]


def test_lists_can_be_polled_with_updated_after(cast, client_as):
    client = client_as("admin")
    url = reverse("quotas-api:team-list")
    everything = _listed(client.get(url))
    newest = max(item["updated"] for item in everything)
    assert _listed(client.get(url, {"updated_after": newest})) == []
    Team.objects.filter(pk=cast.team_b.pk).update(updated=timezone.now() + timedelta(seconds=1))
    assert [i["slug"] for i in _listed(client.get(url, {"updated_after": newest}))] == ["team-b"]


def test_detail_answers_304_to_a_matching_etag(cast, client_as):
    client = client_as("lead")
    url = reverse("quotas-api:team-detail", args=["team-a"])
    first = client.get(url)
    assert client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    cast.team_a.weight = 5
    cast.team_a.save()
    assert client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200


def test_lists_are_paginated_filtered_and_ordered(cast, client_as):
    client = client_as("admin")
    url = reverse("quotas-api:team-list")
    page = client.get(url, {"page_size": 1, "ordering": "-slug"}).json()
    assert (page["count"], len(page["results"]), page["results"][0]["slug"]) == (3, 1, "team-b")
    assert page["next"]
    filtered = _listed(client.get(url, {"parent": "dept-x", "cost_center": "CC-A"}))
    assert [team["slug"] for team in filtered] == ["team-a"]


def test_list_query_count_does_not_grow_with_rows(cast, client_as, django_assert_max_num_queries):
    client = client_as("lead")
    url = reverse("quotas-api:quotarequest-list")
    _requests(cast)
    with django_assert_max_num_queries(6) as few:
        client.get(url)
    for _ in range(5):
        _requests(cast)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert len(_listed(client.get(url))) == 6
    assert QuotaRequest.objects.count() == 12
