"""Seed the demo scenario of the source documents (idempotent: a second run changes nothing).

A 1,000-GPU cluster (125 nodes × 8 H100 plus CPU nodes), two departments and five teams including
``research-team`` (weight 1, reclaimable, limit 512 CPU / 2048Gi / 64 GPUs) and ``production-team``
(weight 3, not reclaimable, limit 1024 CPU / 4096Gi / 128 GPUs), the tiers ``training-production``
and ``training-experiment``, namespaces, users for every role, and pending and decided requests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from monitoring.models import CapacitySnapshot, RateCard
from quotas import decisions, lines
from quotas.choices import MembershipRole, PreemptionPolicy
from quotas.models import (
    Budget,
    LimitPolicy,
    Membership,
    Namespace,
    PriorityTier,
    QuotaRequest,
    Team,
    TeamQuota,
)
from quotas.quantities import parse_quantity

GPU = "nvidia.com/gpu"
Gi = 2**30

TIERS = [
    (
        "training-production",
        1_000_000,
        PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
        False,
        "Production training and inference: may preempt lower tiers.",
    ),
    (
        "training-experiment",
        100_000,
        PreemptionPolicy.NEVER,
        True,
        "Experiments: never preempt others; idle guarantee may be reclaimed.",
    ),
]

# slug, name, parent, weight, tier, reclaimable, cost center, {resource: (guarantee, limit)}
TEAMS = [
    (
        "ai-research",
        "AI Research (department)",
        None,
        2,
        "training-experiment",
        True,
        "CC-1000",
        {"cpu": ("768", "1536"), "memory": ("3072Gi", "6144Gi"), GPU: ("96", "208")},
    ),
    (
        "ai-production",
        "AI Production (department)",
        None,
        3,
        "training-production",
        False,
        "CC-2000",
        {"cpu": ("1024", "1280"), "memory": ("4096Gi", "5120Gi"), GPU: ("104", "144")},
    ),
    (
        "research-team",
        "Research",
        "ai-research",
        1,
        "training-experiment",
        True,
        "CC-1100",
        {"cpu": ("256", "512"), "memory": ("1024Gi", "2048Gi"), GPU: ("32", "64")},
    ),
    (
        "cv-team",
        "Computer Vision",
        "ai-research",
        2,
        "training-experiment",
        True,
        "CC-1200",
        {"cpu": ("256", "512"), "memory": ("1024Gi", "2048Gi"), GPU: ("48", "96")},
    ),
    (
        "speech-team",
        "Speech",
        "ai-research",
        1,
        "training-experiment",
        True,
        "CC-1300",
        {"cpu": ("128", "256"), "memory": ("512Gi", "1024Gi"), GPU: ("16", "48")},
    ),
    (
        "production-team",
        "Production",
        "ai-production",
        3,
        "training-production",
        False,
        "CC-2100",
        {"cpu": ("768", "1024"), "memory": ("3072Gi", "4096Gi"), GPU: ("96", "128")},
    ),
    (
        "platform-team",
        "Platform",
        "ai-production",
        1,
        "training-production",
        False,
        "CC-2200",
        {"cpu": ("64", "128"), "memory": ("256Gi", "512Gi"), GPU: ("8", "16")},
    ),
]

NAMESPACES = [
    ("research-ml", "research-team", 2),
    ("research-nlp", "research-team", 1),
    ("cv-vision", "cv-team", 1),
    ("speech-asr", "speech-team", 1),
    ("prod-training", "production-team", 3),
    ("prod-inference", "production-team", 1),
    ("platform-tools", "platform-team", 1),
]

# username, password, site admin, memberships [(team, role)]
USERS = [
    ("admin", "admin-demo-pass", True, []),
    ("dana", "dana-demo-pass", False, [("ai-research", MembershipRole.LEAD)]),
    ("rita", "rita-demo-pass", False, [("research-team", MembershipRole.LEAD)]),
    ("mike", "mike-demo-pass", False, [("research-team", MembershipRole.MEMBER)]),
    ("vera", "vera-demo-pass", False, [("research-team", MembershipRole.VIEWER)]),
    ("carl", "carl-demo-pass", False, [("cv-team", MembershipRole.LEAD)]),
    ("sam", "sam-demo-pass", False, [("speech-team", MembershipRole.LEAD)]),
    ("paul", "paul-demo-pass", False, [("production-team", MembershipRole.LEAD)]),
    ("pia", "pia-demo-pass", False, [("platform-team", MembershipRole.LEAD)]),
]

# 125 GPU nodes × (192 cores, 2015Gi, 8 H100) + 16 CPU nodes × (64 cores, 256Gi): the schedulable
# part of monitoring/fixtures/demo_cluster.json (one more GPU node is NotReady, one cordoned).
DEMO_CAPACITY = {
    "cpu": 125 * 192 + 16 * 64,
    "memory": (125 * 2015 + 16 * 256) * Gi,
    GPU: 125 * 8,
    "pods": 141 * 110,
}
# Prices per unit-hour (GPU-hour, core-hour, GiB-hour), valid from the start of 2025: the H100
# flavor has its own GPU price, other GPUs (a flavor without a card) the generic one.
RATE_CARDS = [
    (GPU, "NVIDIA-H100-80GB-HBM3", "2.90"),
    (GPU, "", "2.10"),
    ("cpu", "", "0.035"),
    ("memory", "", "0.0045"),
]
RATES_VALID_FROM = (2025, 1, 1)

DEMO_FLAVORS = {"NVIDIA-H100-80GB-HBM3": {GPU: 1000, "cpu": 125 * 192, "memory": 125 * 2015 * Gi}}


class Command(BaseCommand):
    help = "Create the demo tenancy (idempotent) and print the demo logins."

    def add_arguments(self, parser):
        parser.add_argument("--quiet", action="store_true", help="Do not print the logins.")

    @transaction.atomic
    def handle(self, *args, quiet=False, **options):
        now = timezone.now()
        self._seed_capacity(now)
        teams = self._seed_teams(self._seed_tiers())
        self._seed_namespaces(teams)
        self._seed_budgets(teams)
        users = self._seed_users(teams)
        self._seed_rate_cards()
        self._seed_requests(teams, users, now)
        if not quiet:
            self.stdout.write(self.style.SUCCESS("Demo data ready. Demo logins:"))
            for username, password, _admin, memberships in USERS:
                roles = ", ".join(f"{role} of {slug}" for slug, role in memberships) or "site admin"
                self.stdout.write(f"  {username:<6} / {password:<16} {roles}")

    def _seed_capacity(self, now):
        """The demo cluster's capacity, unless a collection measured one already."""
        if not CapacitySnapshot.objects.exists():
            CapacitySnapshot.objects.create(
                taken_at=now,
                source="demo-seed",
                resources={k: str(v) for k, v in DEMO_CAPACITY.items()},
                flavors={f: {k: str(v) for k, v in r.items()} for f, r in DEMO_FLAVORS.items()},
                nodes=141,
            )

    def _seed_tiers(self) -> dict[str, PriorityTier]:
        """The priority tiers, by name."""
        tiers = {}
        for name, value, policy, reclaimable, description in TIERS:
            tiers[name], _ = PriorityTier.objects.get_or_create(
                name=name,
                defaults={
                    "value": value,
                    "preemption_policy": policy,
                    "reclaimable": reclaimable,
                    "description": description,
                },
            )
        return tiers

    def _seed_teams(self, tiers) -> dict[str, Team]:
        """The teams in their departments, their quotas, and a new team's default limit policy."""
        teams: dict[str, Team] = {}
        for slug, name, parent, weight, tier, reclaimable, cost_center, quotas in TEAMS:
            team, created = Team.objects.get_or_create(
                slug=slug,
                defaults={
                    "name": name,
                    "parent": teams.get(parent),
                    "weight": weight,
                    "tier": tiers[tier],
                    "reclaimable": reclaimable,
                    "cost_center": cost_center,
                },
            )
            teams[slug] = team
            for resource, (guarantee, limit) in quotas.items():
                TeamQuota.objects.get_or_create(
                    team=team,
                    resource=resource,
                    defaults={
                        "guarantee": parse_quantity(guarantee),
                        "limit": parse_quantity(limit),
                    },
                )
            if created:
                for resource, default_request, default_limit, maximum, enforce in (
                    ("cpu", "1", "4", None, False),
                    ("memory", "4Gi", "16Gi", None, False),
                    (GPU, None, None, "8", False),
                ):
                    LimitPolicy.objects.get_or_create(
                        team=team,
                        namespace=None,
                        resource=resource,
                        defaults={
                            "default_request": default_request and parse_quantity(default_request),
                            "default_limit": default_limit and parse_quantity(default_limit),
                            "max_per_container": maximum and parse_quantity(maximum),
                            "enforce_quota_limit": enforce,
                        },
                    )
        return teams

    def _seed_namespaces(self, teams):
        """The namespaces, each checked by the name rules and the protected patterns."""
        for name, slug, share in NAMESPACES:
            namespace, created = Namespace.objects.get_or_create(
                name=name,
                defaults={"team": teams[slug], "share": share, "labels": {"environment": "demo"}},
            )
            if created:
                # The name rules and the protected namespaces (FAIRSHARE_NAMESPACE could be one
                # of these) hold for the demo too; a refusal rolls the whole seed back.
                try:
                    namespace.full_clean()
                except ValidationError as e:
                    raise CommandError(f"Namespace {name}: {'; '.join(e.messages)}") from None

    def _seed_budgets(self, teams):
        """Two monthly GPU budgets."""
        Budget.objects.get_or_create(
            team=teams["research-team"], resource=GPU, defaults={"monthly_hours": Decimal(30000)}
        )
        Budget.objects.get_or_create(
            team=teams["production-team"], resource=GPU, defaults={"monthly_hours": Decimal(80000)}
        )

    def _seed_users(self, teams) -> dict:
        """The demo logins (one per role) and their memberships, by username."""
        User = get_user_model()
        users = {}
        admins, _ = Group.objects.get_or_create(name="admins")
        for username, password, is_admin, memberships in USERS:
            user, created = User.objects.get_or_create(
                username=username,
                defaults={
                    "email": f"{username}@example.com",
                    "is_staff": is_admin,
                    "is_superuser": False,
                },
            )
            if created:
                user.set_password(password)
                user.save()
            if is_admin:
                user.groups.add(admins)
            for slug, role in memberships:
                Membership.objects.get_or_create(
                    user=user, team=teams[slug], defaults={"role": role}
                )
            users[username] = user
        return users

    def _seed_rate_cards(self):
        """The rate cards chargeback prices with."""
        valid_from = datetime(*RATES_VALID_FROM, tzinfo=UTC)
        for resource, flavor, price in RATE_CARDS:
            RateCard.objects.get_or_create(
                resource=resource,
                flavor=flavor,
                valid_from=valid_from,
                defaults={"price_per_unit_hour": Decimal(price), "currency": "USD"},
            )

    def _seed_requests(self, teams, users, now):
        def once(team, marker, create):
            if not QuotaRequest.objects.filter(
                team=team, justification__startswith=marker
            ).exists():
                create()

        rita, carl, sam, paul, admin = (users[u] for u in ("rita", "carl", "sam", "paul", "admin"))
        once(
            teams["production-team"],
            "[demo] Inference launch",
            lambda: decisions.approve_request(
                decisions.submit_request(
                    team=teams["production-team"],
                    requester=paul,
                    lines=[lines.LineInput(GPU, "96", "136")],
                    justification="[demo] Inference launch needs headroom for autoscaling.",
                ).pk,
                approver=admin,
                note="Approved for the launch.",
            ),
        )
        once(
            teams["speech-team"],
            "[demo] Bigger ASR sweep",
            lambda: decisions.reject_request(
                decisions.submit_request(
                    team=teams["speech-team"],
                    requester=sam,
                    lines=[lines.LineInput(GPU, "64", "96")],
                    justification="[demo] Bigger ASR sweep.",
                ).pk,
                approver=admin,
                note="Not this quarter: use the experiment tier's idle GPUs.",
            ),
        )
        once(
            teams["research-team"],
            "[demo] Pre-training run",
            lambda: decisions.submit_request(
                team=teams["research-team"],
                requester=rita,
                lines=[lines.LineInput(GPU, "48", "80")],
                justification="[demo] Pre-training run for the 70B model, one week.",
                window_start=now,
                window_end=now + timedelta(days=7),
            ),
        )
        once(
            teams["cv-team"],
            "[demo] New labelled dataset",
            lambda: decisions.submit_request(
                team=teams["cv-team"],
                requester=carl,
                lines=[
                    lines.LineInput("cpu", "384", "640"),
                    lines.LineInput("memory", "1536Gi", "2560Gi"),
                ],
                justification="[demo] New labelled dataset needs more preprocessing CPUs.",
            ),
        )
