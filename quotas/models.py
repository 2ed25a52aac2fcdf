"""Tenancy model: teams (optionally nested in departments), members, namespaces, quotas,
limit policies, priority tiers, quota requests, budgets and the audit trail."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from quotas.choices import (
    AuditVerb,
    MembershipRole,
    PreemptionPolicy,
    QuotaRequestStatus,
    TransitionKind,
    TransitionState,
)
from quotas.domain.names import dns1123_label_errors, team_slug_errors, tier_name_errors
from quotas.fields import QuantityField, dns1123_label, label_key_errors, label_value_errors
from quotas.protection import namespace_refusal
from quotas.quantities import format_quantity, is_integral_resource, validate_resource_name
from quotas.querysets import TeamQuerySet, TeamScopedQuerySet
from quotas.signals import team_saved

MAX_HIERARCHY_DEPTH = 4


class TimestampedModel(models.Model):
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def _num(value) -> Decimal | None:
    """The value if it parsed (clean() also runs after a field failed to parse), else None."""
    return value if isinstance(value, Decimal) else None


def _check_integral(resource: str, field: str, value: Decimal | None) -> dict[str, str]:
    value = _num(value)
    if value is not None and is_integral_resource(resource) and value != value.to_integral_value():
        return {field: f"{resource} is counted in whole devices; {value} is not a whole number."}
    return {}


EARLIEST_YEAR, LATEST_YEAR = 1970, 9000


def moment_errors(field: str, value) -> dict[str, str]:
    """A time must be a real instant in UTC between 1970 and 9000: a local time such as
    9999-12-31T23:59 at UTC-12 is year 10000 in UTC, which PostgreSQL stores and Python cannot
    read back (every page listing the row would fail), and date arithmetic near year 9999
    overflows."""
    if value is None or not hasattr(value, "astimezone"):
        return {}
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        utc = None
    if utc is None or not EARLIEST_YEAR <= utc.year <= LATEST_YEAR:
        return {field: f"Give a time between {EARLIEST_YEAR} and {LATEST_YEAR} (UTC)."}
    return {}


class PriorityTier(TimestampedModel):
    """A scheduling tier; rendered as a PriorityClass."""

    name = models.CharField(
        max_length=63,
        unique=True,
        validators=[dns1123_label],
        help_text="PriorityClass name, e.g. training-production.",
    )
    value = models.IntegerField(
        validators=[MinValueValidator(-2147483648), MaxValueValidator(1000000000)],
        help_text="PriorityClass value; user-defined classes may not exceed 1,000,000,000.",
    )
    preemption_policy = models.CharField(
        max_length=32,
        choices=PreemptionPolicy.choices,
        default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    )
    reclaimable = models.BooleanField(
        default=True,
        help_text="Default for teams in this tier: may others reclaim their idle guarantee.",
    )
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        # The PriorityClass name rules (quotas.domain.names); DNS-1123 is the field's own.
        if self.name and not dns1123_label_errors(self.name):
            problems = tier_name_errors(self.name)
            if problems:
                raise ValidationError({"name": [f"Tier name: {why}." for why in problems]})


class Team(TimestampedModel):
    """A tenant. A team with children acts as a department (Volcano parent queue)."""

    slug = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    # What the cluster sees (Queue name, ``fairshare.io/team`` label, ``<x>.own`` leaf, ...):
    # the slug the team was created with, fixed for good. Volcano fixes a PodGroup's queue at
    # creation, so a Queue renamed under running and pending PodGroups strands them; renaming
    # the slug or the display name changes URLs and pages only. See docs/upstream.md
    # "Stable names and transitions".
    cluster_name = models.CharField(
        max_length=63,
        unique=True,
        blank=True,
        editable=False,
        validators=[dns1123_label],
        help_text="Name in the cluster (Queue, labels): the slug at creation, fixed for good.",
    )
    name = models.CharField(max_length=100)
    parent = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="children",
        help_text="Department this team belongs to.",
    )
    weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
        help_text="Fair-share weight, 1–65535 (Volcano's range).",
    )
    tier = models.ForeignKey(
        PriorityTier,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="teams",
    )
    cost_center = models.CharField(max_length=64, blank=True)
    reclaimable = models.BooleanField(
        default=True, help_text="May other teams reclaim this team's idle guarantee."
    )
    active = models.BooleanField(default=True)
    description = models.TextField(blank=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(weight__gte=1) & Q(weight__lte=65535),
                name="%(app_label)s_%(class)s_weight_range",
                violation_error_message="Weight must be an integer from 1 to 65535.",
            ),
            models.CheckConstraint(
                condition=~Q(parent=F("id")),
                name="%(app_label)s_%(class)s_not_own_parent",
                violation_error_message="A team cannot be its own department.",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    def save(self, *args, **kwargs) -> None:
        """Save; a new team's cluster name is its slug. A change that would strand workloads
        in the cluster (deactivation, a leaf team's first child, a department's last team
        leaving) starts a transition in the same transaction (``quotas.transitions``, through the
        ``team_saved`` signal)."""
        from django.db import transaction

        if not self.cluster_name:
            self.cluster_name = self.slug
        before = (
            None
            if self._state.adding or self.pk is None
            else Team.objects.filter(pk=self.pk).values("parent_id", "active").first()
        )
        with transaction.atomic():
            super().save(*args, **kwargs)
            if not getattr(self, "_skip_transitions", False):
                team_saved.send(
                    sender=Team,
                    team=self,
                    before=before,
                    actor=getattr(self, "_changed_by", None),
                )
        self._skip_transitions = False

    def clean(self) -> None:
        super().clean()
        # The Queue name rules (quotas.domain.names); DNS-1123 is the field's own.
        if self.slug and not dns1123_label_errors(self.slug):
            problems = team_slug_errors(self.slug)
            if problems:
                raise ValidationError({"slug": [f"Team slug: {why}." for why in problems]})
        if (
            not self.cluster_name
            and self.slug
            and Team.objects.filter(cluster_name=self.slug).exclude(pk=self.pk).exists()
        ):
            raise ValidationError(
                {
                    "slug": f"{self.slug!r} is the fixed cluster name of another team (a team "
                    "keeps the name it was created with in the cluster, whatever its slug "
                    "becomes); choose another slug."
                }
            )
        if self.parent_id is None:
            return
        seen = {self.pk} if self.pk else set()
        node = self.parent
        depth = 1
        while node is not None:
            if node.pk in seen:
                raise ValidationError({"parent": "This department choice would create a cycle."})
            seen.add(node.pk)
            depth += 1
            if depth > MAX_HIERARCHY_DEPTH:
                raise ValidationError(
                    {"parent": f"Departments nest at most {MAX_HIERARCHY_DEPTH} levels deep."}
                )
            node = node.parent

    def ancestors(self) -> list[Team]:
        result, node = [], self.parent
        while node is not None and len(result) < MAX_HIERARCHY_DEPTH:
            result.append(node)
            node = node.parent
        return result


class Membership(TimestampedModel):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(
        max_length=16, choices=MembershipRole.choices, default=MembershipRole.MEMBER
    )

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["team__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "team"],
                name="%(app_label)s_%(class)s_unique_user_team",
                violation_error_message="This user is already a member of this team.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) in {self.team}"


class Namespace(TimestampedModel):
    """A Kubernetes namespace owned by a team."""

    name = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="namespaces")
    managed = models.BooleanField(
        default=True, help_text="Fairshare renders and syncs this namespace's objects."
    )
    labels = models.JSONField(default=dict, blank=True)
    share = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Relative share of the team quota this namespace's ResourceQuota gets.",
    )
    volcano_jobs = models.BooleanField(
        default=True, help_text="Grant members a Role for Volcano Jobs and PodGroups."
    )
    adopted = models.BooleanField(
        default=False,
        help_text="The namespace existed before Fairshare managed it (adopted by a site admin): "
        "Fairshare writes its objects into it and never deletes it.",
    )

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            raise ValidationError({"labels": "Labels must be a mapping of strings to strings."})
        refusal = namespace_refusal(self.name) if self.name else None
        if refusal:
            raise ValidationError({"name": refusal})
        problems = []
        for key, value in sorted(self.labels.items()):
            if key.startswith(("app.kubernetes.io/managed-by", "fairshare.io/")):
                problems.append(f"Label {key!r} is reserved for Fairshare.")
            elif key == "kubernetes.io/metadata.name":
                problems.append(f"Label {key!r} is set by Kubernetes to the namespace's name.")
            # Kubernetes would refuse these at apply time; say so now, naming the label.
            shown_key, shown_value = key[:80], value[:80]  # the whole text if it is short
            problems += [f"Label key {shown_key!r}: {why}." for why in label_key_errors(key)]
            problems += [
                f"Label {shown_key!r} value {shown_value!r}: {why}."
                for why in label_value_errors(value)
            ]
        if problems:
            raise ValidationError({"labels": problems})


class TeamQuota(TimestampedModel):
    """A team's guarantee (reserved minimum) and limit (ceiling) for one resource."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quotas")
    resource = models.CharField(max_length=253, validators=[validate_resource_name])
    guarantee = QuantityField(default=Decimal(0))
    limit = QuantityField(null=True, blank=True, help_text="Empty means no ceiling.")

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["team__slug", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "resource"],
                name="%(app_label)s_%(class)s_unique_team_resource",
                violation_error_message="This team already has a quota for this resource.",
            ),
            models.CheckConstraint(
                condition=Q(guarantee__gte=0),
                name="%(app_label)s_%(class)s_guarantee_non_negative",
                violation_error_message="Guarantee cannot be negative.",
            ),
            models.CheckConstraint(
                condition=Q(limit__isnull=True) | Q(limit__gte=F("guarantee")),
                name="%(app_label)s_%(class)s_guarantee_within_limit",
                violation_error_message="Guarantee cannot exceed the limit.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.resource} {self.guarantee_display}/{self.limit_display}"

    @property
    def guarantee_display(self) -> str:
        return format_quantity(self.guarantee, self.resource)

    @property
    def limit_display(self) -> str:
        return "∞" if self.limit is None else format_quantity(self.limit, self.resource)

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        if self.resource:
            errors |= _check_integral(self.resource, "guarantee", self.guarantee)
            errors |= _check_integral(self.resource, "limit", self.limit)
        guarantee, limit = _num(self.guarantee), _num(self.limit)
        if guarantee is not None and limit is not None and guarantee > limit:
            errors["guarantee"] = "Guarantee cannot exceed the limit."
        if errors:
            raise ValidationError(errors)


class LimitPolicy(TimestampedModel):
    """Container defaults and maxima for a team (or one of its namespaces): a LimitRange."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="limit_policies")
    namespace = models.ForeignKey(
        Namespace,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="limit_policies",
        help_text="Only this namespace; empty means every namespace of the team.",
    )
    resource = models.CharField(max_length=253, validators=[validate_resource_name])
    default_request = QuantityField(null=True, blank=True)
    default_limit = QuantityField(null=True, blank=True)
    max_per_container = QuantityField(null=True, blank=True)
    enforce_quota_limit = models.BooleanField(
        default=False,
        help_text="Also cap limits.<resource> in the ResourceQuota (cpu and memory only).",
    )

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["team__slug", "resource"]
        verbose_name_plural = "limit policies"
        constraints = [
            models.UniqueConstraint(
                fields=["team", "resource"],
                condition=Q(namespace__isnull=True),
                name="%(app_label)s_%(class)s_unique_team_resource",
                violation_error_message="The team already has a policy for this resource.",
            ),
            models.UniqueConstraint(
                fields=["namespace", "resource"],
                condition=Q(namespace__isnull=False),
                name="%(app_label)s_%(class)s_unique_namespace_resource",
                violation_error_message="This namespace already has a policy for this resource.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.namespace or '*'}: {self.resource}"

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        if self.namespace_id and self.team_id and self.namespace.team_id != self.team_id:
            errors["namespace"] = "The namespace must belong to the same team."
        for name in ("default_request", "default_limit", "max_per_container"):
            errors |= _check_integral(self.resource or "", name, getattr(self, name))
        request, limit, maximum = (
            _num(self.default_request),
            _num(self.default_limit),
            _num(self.max_per_container),
        )
        if request is not None and limit is not None and request > limit:
            errors["default_request"] = "The default request cannot exceed the default limit."
        if maximum is not None and limit is not None and limit > maximum:
            errors["default_limit"] = "The default limit cannot exceed the per-container maximum."
        if self.enforce_quota_limit and self.resource not in ("cpu", "memory"):
            errors["enforce_quota_limit"] = (
                "Kubernetes only enforces limits.* quotas for cpu and memory; "
                "extended resources are capped through requests.*."
            )
        if errors:
            raise ValidationError(errors)


class QuotaRequest(TimestampedModel):
    """A lead's request to change the team's quota, possibly temporary (a time window)."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quota_requests")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    justification = models.TextField(max_length=5000)
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16,
        choices=QuotaRequestStatus.choices,
        default=QuotaRequestStatus.PENDING,
        db_index=True,
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="decided_quota_requests",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, max_length=5000)
    preview = models.JSONField(
        default=dict, blank=True, help_text="The what-if result the decision was made on."
    )
    activated_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    # When the "your temporary grant ends soon" reminder went out (one per grant).
    reminder_sent_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.CheckConstraint(
                condition=Q(window_end__isnull=True)
                | Q(window_start__isnull=True)
                | Q(window_end__gt=F("window_start")),
                name="%(app_label)s_%(class)s_window_ordered",
                violation_error_message="The window must end after it starts.",
            ),
        ]

    def __str__(self) -> str:
        return f"Request #{self.pk} for {self.team} ({self.status})"

    @property
    def is_temporary(self) -> bool:
        return self.window_end is not None

    def clean(self) -> None:
        super().clean()
        errors = moment_errors("window_start", self.window_start)
        errors |= moment_errors("window_end", self.window_end)
        if errors:
            raise ValidationError(errors)
        if self.window_start and not self.window_end:
            raise ValidationError({"window_end": "A temporary request needs an end."})
        if self.window_start and self.window_end and self.window_end <= self.window_start:
            raise ValidationError({"window_end": "The window must end after it starts."})


class QuotaRequestLine(models.Model):
    """One resource of a quota request: the requested (and, once decided, approved) amounts."""

    request = models.ForeignKey(QuotaRequest, on_delete=models.CASCADE, related_name="lines")
    resource = models.CharField(max_length=253, validators=[validate_resource_name])
    guarantee = QuantityField()
    limit = QuantityField(null=True, blank=True)
    previous_guarantee = QuantityField(default=Decimal(0))
    previous_limit = QuantityField(null=True, blank=True)
    approved_guarantee = QuantityField(null=True, blank=True)
    approved_limit = QuantityField(null=True, blank=True)
    # What approval actually added, so a temporary grant reverts by subtraction and composes
    # with other changes made during its window.
    applied_guarantee_delta = QuantityField(null=True, blank=True)
    applied_limit_delta = QuantityField(null=True, blank=True)

    class Meta:
        ordering = ["resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "resource"],
                name="%(app_label)s_%(class)s_unique_request_resource",
                violation_error_message="Each resource may appear only once in a request.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource}: {self.guarantee}/{self.limit}"

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        for name in ("guarantee", "limit", "approved_guarantee", "approved_limit"):
            errors |= _check_integral(self.resource or "", name, getattr(self, name))
        guarantee, limit = _num(self.guarantee), _num(self.limit)
        if guarantee is not None and limit is not None and guarantee > limit:
            errors["guarantee"] = "Guarantee cannot exceed the limit."
        if errors:
            raise ValidationError(errors)


class Budget(TimestampedModel):
    """Resource-hours (usually GPU-hours) a team may consume per calendar month."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    resource = models.CharField(
        max_length=253, default="nvidia.com/gpu", validators=[validate_resource_name]
    )
    monthly_hours = models.DecimalField(
        max_digits=20, decimal_places=3, validators=[MinValueValidator(Decimal("0.001"))]
    )

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["team__slug", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "resource"],
                name="%(app_label)s_%(class)s_unique_team_resource",
                violation_error_message="This team already has a budget for this resource.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.monthly_hours} {self.resource}-hours/month"


class AuditEvent(models.Model):
    """Who changed what, when, with before/after JSON. Written by every service."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_events",
    )
    actor_name = models.CharField(max_length=150, blank=True)
    verb = models.CharField(max_length=16, choices=AuditVerb.choices)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit_events"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.verb} {self.object_type} {self.object_repr}"


class ApiToken(models.Model):
    """A bearer token for the REST API, stored hashed (SHA-256) and shown once at creation.

    Personal tokens act as their user. Service tokens (created by admins) carry scopes such as
    ``read:chargeback``, ``read:all`` or ``ingest:gpu`` and are read-only apart from ingest.
    Node-agent tokens may only post GPU samples for their ``node``.
    """

    class Kind(models.TextChoices):
        PERSONAL = "personal", "Personal"
        SERVICE = "service", "Service"
        NODE_AGENT = "node-agent", "Node agent"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PERSONAL)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    scopes = models.JSONField(default=list, blank=True)
    node = models.CharField(max_length=253, blank=True, help_text="Node-agent tokens only.")
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}, {self.prefix}…)"


class Transition(models.Model):
    """A change of a team that the cluster takes on only when nothing there would be stranded
    by it (issue 25): the model change is recorded at once, and the renderer keeps rendering the
    team as before while the transition waits.

    Volcano fixes a PodGroup's queue when the PodGroup is created, so a Queue that PodGroups
    name must stay a leaf and exist until they finish: a deactivated team keeps its Queue and
    its namespaces' quota; a leaf team's Queue becomes a department only once it holds no
    PodGroups (``first_child``: the new child stays where it was, or out of the cluster, until
    then); a department losing its last team keeps ``<x>.own`` while that holds PodGroups
    (``move``). ``params``: ``queues`` (the Queues that must be empty), ``previous_parent`` (a
    team id or None: where the team is rendered meanwhile), ``new`` (a new team: not rendered
    meanwhile), ``parent`` (the department asked for). ``waiting_for`` says it in words.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="transitions")
    kind = models.CharField(max_length=16, choices=TransitionKind.choices)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=16, choices=TransitionState.choices, default=TransitionState.WAITING
    )
    waiting_for = models.CharField(max_length=500, blank=True)
    blocking = models.PositiveIntegerField(default=0)
    since = models.DateTimeField()
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    completed_at = models.DateTimeField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-since", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team"],
                condition=Q(state="waiting"),
                name="%(app_label)s_%(class)s_one_waiting_per_team",
                violation_error_message="This team already has a transition waiting.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.team} ({self.state})"

    @property
    def queues(self) -> list[str]:
        return [str(q) for q in (self.params or {}).get("queues") or []]


# ----------------------------------------------------------------------------- Single sign-on
# Identity-provider groups (issue 33): rules mapping groups to team roles or site admin, the
# identities people signed in with (and the groups they last brought), the marker on
# memberships the groups made, and the groups a team's RoleBindings bind (quotas/groups.py).


def _group_name_errors(value: str) -> list[str]:
    if not value or value != value.strip():
        return ["A group name cannot be empty or start or end with spaces."]
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return ["A group name cannot contain control characters."]
    return []


def validate_group_name(value: str) -> None:
    errors = _group_name_errors(value)
    if errors:
        raise ValidationError(errors)


class GroupRule(TimestampedModel):
    """Members of the identity-provider groups matching ``pattern`` get ``role`` in ``team``,
    or are site admins (``site_admin``; exact group names only)."""

    pattern = models.CharField(
        max_length=255,
        validators=[validate_group_name],
        help_text="A group name, or a pattern with * and ? (fnmatch, case-sensitive).",
    )
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="group_rules",
    )
    role = models.CharField(max_length=16, choices=MembershipRole.choices, blank=True)
    site_admin = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["pattern", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(site_admin=False) & Q(team__isnull=False) & ~Q(role=""))
                | (Q(site_admin=True) & Q(team__isnull=True) & Q(role="")),
                name="%(app_label)s_%(class)s_team_role_or_site_admin",
                violation_error_message="A rule gives either a team and a role, or site admin.",
            ),
            models.UniqueConstraint(
                fields=["pattern", "team"],
                condition=Q(team__isnull=False),
                name="%(app_label)s_%(class)s_unique_pattern_team",
                violation_error_message="A rule for this group and team exists already.",
            ),
            models.UniqueConstraint(
                fields=["pattern"],
                condition=Q(site_admin=True),
                name="%(app_label)s_%(class)s_unique_pattern_admin",
                violation_error_message="This group already makes its members site admins.",
            ),
        ]

    def __str__(self) -> str:
        if self.site_admin:
            return f"{self.pattern} → site admin"
        return f"{self.pattern} → {self.role} of {self.team}"

    @property
    def is_pattern(self) -> bool:
        return any(c in self.pattern for c in "*?[")

    def clean(self) -> None:
        super().clean()
        if self.site_admin and self.is_pattern:
            raise ValidationError(
                {"pattern": "Site admin comes from exact group names only, never a pattern."}
            )
        if self.site_admin and (self.team_id or self.role):
            raise ValidationError({"team": "A site-admin rule names no team and no role."})
        if not self.site_admin and not self.team_id:
            raise ValidationError({"team": "Choose the team this group's members join."})
        if not self.site_admin and not self.role:
            raise ValidationError({"role": "Choose the role this group's members get."})


class ExternalIdentity(TimestampedModel):
    """The identity-provider account (issuer + subject) a user signs in with, and the groups it
    brought at the last sign-in (for the rules' previews)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True)
    admin_from_groups = models.BooleanField(
        default=False, help_text="Site admin because of the groups (removed when they say not)."
    )
    last_sign_in = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["issuer", "subject"]
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="%(app_label)s_%(class)s_unique_issuer_subject",
                violation_error_message="This identity is linked to another user already.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class DerivedMembership(TimestampedModel):
    """Marks a membership the identity-provider groups made: updated at every sign-in and
    removed when the groups no longer give it. Hand-made memberships have no marker."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="derived")
    groups = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"{self.membership} (from {', '.join(self.groups)})"


class TeamClusterGroup(TimestampedModel):
    """An identity-provider group the team's RoleBindings bind with ``role`` (kind Group, the
    name prefixed with FAIRSHARE_OIDC_GROUP_PREFIX), next to its members."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="cluster_groups")
    group = models.CharField(max_length=200, validators=[validate_group_name])
    role = models.CharField(
        max_length=16, choices=MembershipRole.choices, default=MembershipRole.MEMBER
    )

    class Meta:
        ordering = ["team__slug", "group"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "group"],
                name="%(app_label)s_%(class)s_unique_team_group",
                violation_error_message="The team binds this group already.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} ({self.role}) in {self.team}"

    def clean(self) -> None:
        super().clean()
        if self.group.startswith("system:"):
            raise ValidationError(
                {"group": "Groups starting with system: are Kubernetes' own; bind another."}
            )
