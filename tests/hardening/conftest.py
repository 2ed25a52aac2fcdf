"""Shared pieces of the hardening suite: one row of every kind for team-a (the ``world``), and a
client per role of the security model (sessions for people, bearer headers for tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from monitoring import chargeback
from monitoring.models import (
    CapacitySnapshot,
    ChargebackStatement,
    GpuSample,
    RateCard,
    UsageRollup,
    UsageSample,
)
from quotas.decisions import submit_request
from quotas.lines import LineInput
from quotas.models import (
    ApiToken,
    AuditEvent,
    Budget,
    Membership,
    Namespace,
    QuotaRequest,
    TeamQuota,
)
from quotas.tokens import issue_token
from scheduling.models import ShareComputation, ShareSnapshot, SyncItem, SyncRun
from tests.base import GPU, Cast
from tests.monitoring.gpu_inventory import node_object, place, pod_object

# Every role of the security model, in the column order of the matrix.
ROLES = ("anon", "vic", "bob", "charlie", "alice", "dora", "root", "svc_cb", "svc_all", "agent")
PEOPLE = {"vic", "bob", "charlie", "alice", "dora", "root"}
TOKEN_SPECS = {
    "svc_cb": {"kind": ApiToken.Kind.SERVICE, "scopes": ["read:chargeback"]},
    "svc_all": {"kind": ApiToken.Kind.SERVICE, "scopes": ["read:all"]},
    "agent": {"kind": ApiToken.Kind.NODE_AGENT, "node": "gpu-001"},
}
# Requests come from a routable address, as they would through an ingress: /metrics then
# refuses them (it only trusts loopback without a token), like it refuses real outsiders.
REMOTE_ADDR = "203.0.113.7"


@dataclass
class World:
    """One object of each kind belonging to team-a (or global), with their ids for URLs."""

    cast: Cast
    request: QuotaRequest
    membership: Membership
    namespace: Namespace
    quota: TeamQuota
    budget: Budget
    audit_event: AuditEvent
    personal_token: ApiToken
    service_token: ApiToken
    snapshot: ShareSnapshot
    sync_run: SyncRun
    sync_item: SyncItem
    usage_sample: UsageSample
    rollup: UsageRollup
    gpu_sample: GpuSample
    capacity: CapacitySnapshot
    rate_card: RateCard
    statement: ChargebackStatement
    raw_tokens: dict[str, str] = field(default_factory=dict)


def build_world(cast: Cast) -> World:
    now = timezone.now()
    request = submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "24", "48")],
        justification="A bigger sweep.",
    )
    computation = ShareComputation.objects.create(computed_at=now, capacity={GPU: "100"})
    snapshot = ShareSnapshot.objects.create(
        computation=computation,
        computed_at=now,
        team=cast.team_a,
        usage={GPU: "4"},
        dominant_share=0.04,
        dominant_resource=GPU,
        fair_allocation={GPU: "25"},
    )
    sync_run = SyncRun.objects.create(status="succeeded", requested_by=cast.root)
    sync_item = SyncItem.objects.create(
        run=sync_run,
        kind="ResourceQuota",
        namespace="team-a-ml",
        name="fairshare",
        team_slug="team-a",
        action="update",
    )
    since = datetime(2025, 1, 1, tzinfo=UTC)
    rate_card = RateCard.objects.create(
        resource=GPU, price_per_unit_hour=Decimal("2.50"), valid_from=since
    )
    UsageRollup.objects.create(
        period="day",
        start=datetime(2025, 5, 1, tzinfo=UTC),
        team=cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        allocated_hours=Decimal(48),
    )
    world = World(
        cast=cast,
        request=request,
        membership=Membership.objects.get(user=cast.bob, team=cast.team_a),
        namespace=Namespace.objects.get(name="team-a-ml"),
        quota=TeamQuota.objects.get(team=cast.team_a, resource=GPU),
        budget=Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=Decimal(100)),
        audit_event=AuditEvent.objects.filter(team=cast.team_a).latest("id"),
        personal_token=issue_token(owner=cast.alice, name="laptop").token,
        service_token=issue_token(
            owner=cast.root, name="spare", kind=ApiToken.Kind.SERVICE, scopes=["read:all"]
        ).token,
        snapshot=snapshot,
        sync_run=sync_run,
        sync_item=sync_item,
        usage_sample=UsageSample.objects.create(
            taken_at=now, team=cast.team_a, namespace="team-a-ml", resource=GPU, allocated=4
        ),
        rollup=UsageRollup.objects.create(
            period="hour",
            start=now.replace(minute=0, second=0, microsecond=0),
            team=cast.team_a,
            namespace="team-a-ml",
            resource=GPU,
            allocated_hours=4,
        ),
        gpu_sample=GpuSample.objects.create(
            taken_at=now, node="gpu-001", uuid="GPU-A", util_gpu=50, team=cast.team_a
        ),
        capacity=cast.capacity,
        rate_card=rate_card,
        statement=chargeback.freeze_month(
            month=date(2025, 5, 1), group_by=("team",), actor=cast.root, now=now
        ),
    )
    # The latest collection places 8 H100s and team-a's train-0 on gpu-001 (the agent's node).
    place([node_object("gpu-001")], [pod_object("gpu-001", "team-a-ml", "train-0")], now=now)
    for role, spec in TOKEN_SPECS.items():
        world.raw_tokens[role] = issue_token(
            owner=cast.root, name=role, actor=cast.root, **spec
        ).raw
    return world


@pytest.fixture
def world(cast) -> World:
    cache.clear()
    return build_world(cast)


def client_for(world: World, role: str, **defaults) -> Client:
    """A fresh client acting as ``role``: a logged-in session for people, a bearer header for
    tokens, nothing for ``anon``."""
    defaults.setdefault("REMOTE_ADDR", REMOTE_ADDR)
    if role in TOKEN_SPECS:
        defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.raw_tokens[role]}"
    client = Client(**defaults)
    if role in PEOPLE:
        client.force_login(getattr(world.cast, role))
    return client


# ------------------------------------------------------------------ schema-driven runs

# The collection each path segment names → the seeded object its detail paths should open.
SEEDED = {
    "teams": lambda w, role: "team-a",
    "namespaces": lambda w, role: w.namespace.pk,
    "memberships": lambda w, role: w.membership.pk,
    "quotas": lambda w, role: w.quota.pk,
    "priority-tiers": lambda w, role: w.cast.tier.pk,
    "quota-requests": lambda w, role: w.request.pk,
    "budgets": lambda w, role: w.budget.pk,
    "audit-events": lambda w, role: w.audit_event.pk,
    "tokens": lambda w, role: w.role_tokens[role].pk,
    "service-tokens": lambda w, role: w.service_token.pk,
    "share-snapshots": lambda w, role: w.snapshot.pk,
    "sync-runs": lambda w, role: w.sync_run.pk,
    "sync-items": lambda w, role: w.sync_item.pk,
    "usage-samples": lambda w, role: w.usage_sample.pk,
    "usage-rollups": lambda w, role: w.rollup.pk,
    "gpu-samples": lambda w, role: w.gpu_sample.pk,
    "capacity": lambda w, role: w.capacity.pk,
    "rate-cards": lambda w, role: w.rate_card.pk,
    "statements": lambda w, role: w.statement.pk,
    "transitions": lambda w, role: w.transition.pk,
    "group-rules": lambda w, role: seeded_group_rule(w).pk,
    "cluster-groups": lambda w, role: seeded_cluster_group(w).pk,
}


def seeded_group_rule(world: World):
    """A group rule (single sign-on, issue 33), made again when a DELETE took it away."""
    from quotas.models import GroupRule

    rule, _ = GroupRule.objects.get_or_create(
        pattern="team-a-ml", team=world.cast.team_a, defaults={"role": "member"}
    )
    return rule


def seeded_cluster_group(world: World):
    """A group team-a's RoleBindings bind (single sign-on, issue 33)."""
    from quotas.models import TeamClusterGroup

    binding, _ = TeamClusterGroup.objects.get_or_create(
        team=world.cast.team_a, group="team-a-ml", defaults={"role": "member"}
    )
    return binding


def seeded_path(operation, world, role) -> dict:
    """Path parameters naming the world's objects, so detail operations answer 200."""
    parts = [p for p in operation.path.split("/") if p]
    out = {}
    for i, part in enumerate(parts):
        if part.startswith("{") and i > 0 and parts[i - 1] in SEEDED:
            out[part.strip("{}")] = SEEDED[parts[i - 1]](world, role)
    return out


@pytest.fixture
def schema_world(world):
    """The hardening world plus a personal token per role (bearer auth: no CSRF, and the
    checks that re-send a request without its credentials can do so)."""
    from django.utils import timezone

    from monitoring.models import GpuSample, UsageRollup, UsageSample
    from quotas.tokens import issue_token
    from scheduling.models import SyncRun

    # Rows whose optional references are empty, so the lists show nulls where the schema must
    # allow them: an unassigned namespace's usage, a scheduled sync nobody asked for.
    now = timezone.now()
    SyncRun.objects.create(status="succeeded", trigger="schedule", requested_by=None)
    UsageSample.objects.create(
        taken_at=now, team=None, namespace="sandbox", resource="cpu", allocated=1
    )
    UsageRollup.objects.create(
        period="hour",
        start=now.replace(minute=0, second=0, microsecond=0),
        team=None,
        namespace="sandbox",
        resource="cpu",
        allocated_hours=1,
    )
    GpuSample.objects.create(taken_at=now, node="gpu-001", uuid="GPU-FREE", util_gpu=0)
    # A finished transition of team-a (issue 25): its detail answers 200, a cancel 409 or 403.
    from quotas.models import Transition

    world.transition = Transition.objects.create(
        team=world.cast.team_a,
        kind="deactivate",
        state="completed",
        params={"queues": ["team-a"], "previous_parent": None, "new": False},
        since=now,
        completed_at=now,
    )
    world.role_tokens, world.role_raw = {}, {}
    for role in ("root", "alice"):
        issued = issue_token(owner=getattr(world.cast, role), name=f"schemathesis-{role}")
        world.role_tokens[role], world.role_raw[role] = issued.token, issued.raw
    return world
