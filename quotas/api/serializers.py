"""Serializers of the quotas API: shape only; rules live in models' clean() and the services."""

from __future__ import annotations

from rest_framework import serializers

from config.api import StrictCharField, StrictModelSerializer
from quotas.api.fields import DepartmentField, QuantityField, VisibleTeamField
from quotas.hierarchy import check_hierarchy
from quotas.models import (
    ApiToken,
    AuditEvent,
    Budget,
    Membership,
    Namespace,
    PriorityTier,
    QuotaRequest,
    QuotaRequestLine,
    Team,
    TeamQuota,
    Transition,
)
from quotas.tiers import KEEP
from quotas.tokens import SCOPES


class PriorityTierSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="quotas-api:prioritytier-detail")

    class Meta:
        model = PriorityTier
        fields = [
            "id",
            "url",
            "name",
            "value",
            "preemption_policy",
            "reclaimable",
            "description",
            "created",
            "updated",
        ]
        extra_kwargs = {
            "value": {
                "help_text": "PriorityClass value (user classes at most 1,000,000,000). Changing "
                "it or the preemption policy re-creates the PriorityClass, delete and create "
                f"back to back. {KEEP} The answer carries a Warning header."
            }
        }


class TeamSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(
        view_name="quotas-api:team-detail", lookup_field="slug"
    )
    parent = DepartmentField(queryset=Team.objects.all(), allow_null=True, required=False)
    tier = serializers.SlugRelatedField(
        slug_field="name",
        queryset=PriorityTier.objects.all(),
        allow_null=True,
        required=False,
        help_text=f"The tier's name. Changing it: {KEEP} The answer carries a Warning header.",
    )

    def validate(self, attrs):
        """Moving or reactivating a team obeys the hierarchy rules (400 naming the department
        and the numbers, under ``parent`` or ``active``)."""
        attrs = super().validate(attrs)
        team = self.instance
        if team is not None and ("parent" in attrs or "active" in attrs):
            parent = attrs.get("parent", team.parent)
            moved = "parent" in attrs and parent != team.parent
            check_hierarchy(
                parents={team.pk: parent.pk if parent else None},
                active={team.pk: attrs.get("active", team.active)},
                field="parent" if moved else "active",
            )
        return attrs

    class Meta:
        model = Team
        fields = [
            "id",
            "url",
            "slug",
            "cluster_name",
            "name",
            "parent",
            "weight",
            "tier",
            "cost_center",
            "reclaimable",
            "active",
            "description",
            "created",
            "updated",
        ]


class NamespaceSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="quotas-api:namespace-detail")
    team = VisibleTeamField()

    class Meta:
        model = Namespace
        fields = [
            "id",
            "url",
            "name",
            "team",
            "managed",
            "labels",
            "share",
            "volcano_jobs",
            "adopted",
            "created",
            "updated",
        ]


class UsernameField(StrictCharField):
    """A user by username. Written as plain text, which the membership service looks up only
    after it has checked that the caller manages the team, so the answer never tells someone
    who may not add members whether a username exists."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 150)
        super().__init__(**kwargs)

    def to_representation(self, value):
        return value.get_username()


class MembershipSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="quotas-api:membership-detail")
    team = VisibleTeamField()
    user = UsernameField()

    class Meta:
        model = Membership
        fields = ["id", "url", "team", "user", "role", "created", "updated"]
        # Uniqueness is the service's to check, after it checked the caller may see members.
        validators = []
        # The model's default is for forms; a new membership names its role (issue 27).
        extra_kwargs = {"role": {"required": True}}


class MembershipUpdateSerializer(MembershipSerializer):
    """Only the role changes; moving a membership to another team or user is delete + create."""

    class Meta(MembershipSerializer.Meta):
        read_only_fields = ["team", "user"]


class TeamQuotaSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="quotas-api:teamquota-detail")
    team = VisibleTeamField()
    guarantee = QuantityField()
    limit = QuantityField(allow_null=True, required=False)
    note = StrictCharField(
        write_only=True, required=False, allow_blank=True, max_length=5000, help_text="Audit note."
    )

    class Meta:
        model = TeamQuota
        fields = [
            "id",
            "url",
            "team",
            "resource",
            "guarantee",
            "limit",
            "note",
            "created",
            "updated",
        ]


class TeamQuotaUpdateSerializer(TeamQuotaSerializer):
    class Meta(TeamQuotaSerializer.Meta):
        read_only_fields = ["team", "resource"]


class QuotaRequestLineSerializer(StrictModelSerializer):
    guarantee = QuantityField()
    limit = QuantityField()
    previous_guarantee = QuantityField(read_only=True)
    previous_limit = QuantityField(read_only=True, allow_null=True)
    approved_guarantee = QuantityField(read_only=True, allow_null=True)
    approved_limit = QuantityField(read_only=True, allow_null=True)

    class Meta:
        model = QuotaRequestLine
        fields = [
            "resource",
            "guarantee",
            "limit",
            "previous_guarantee",
            "previous_limit",
            "approved_guarantee",
            "approved_limit",
        ]
        extra_kwargs = {"resource": {"validators": []}}


class QuotaRequestSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="quotas-api:quotarequest-detail")
    team = VisibleTeamField()
    requester = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    lines = QuotaRequestLineSerializer(many=True)

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "url",
            "team",
            "requester",
            "status",
            "justification",
            "window_start",
            "window_end",
            "lines",
            "decided_by",
            "decided_at",
            "decision_note",
            "activated_at",
            "expired_at",
            "created",
            "updated",
        ]
        read_only_fields = [
            "status",
            "decided_at",
            "decision_note",
            "activated_at",
            "expired_at",
        ]


class AdjustmentSerializer(serializers.Serializer):
    guarantee = QuantityField()
    limit = QuantityField()


class ApproveSerializer(serializers.Serializer):
    note = StrictCharField(required=False, allow_blank=True, max_length=5000, default="")
    adjustments = serializers.DictField(
        child=AdjustmentSerializer(),
        required=False,
        default=dict,
        help_text="Approve different amounts: {resource: {guarantee, limit}}.",
    )


class RejectSerializer(serializers.Serializer):
    note = StrictCharField(allow_blank=True, max_length=5000, help_text="The reason.")


class BudgetSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="quotas-api:budget-detail")
    team = VisibleTeamField()

    class Meta:
        model = Budget
        fields = ["id", "url", "team", "resource", "monthly_hours", "created", "updated"]


class AuditEventSerializer(StrictModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "actor",
            "verb",
            "object_type",
            "object_id",
            "object_repr",
            "team",
            "before",
            "after",
            "note",
            "created",
        ]


class ApiTokenSerializer(StrictModelSerializer):
    """A token as listed: never the secret, only its prefix."""

    user = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "kind",
            "user",
            "scopes",
            "node",
            "prefix",
            "created",
            "last_used_at",
            "expires_at",
            "revoked_at",
        ]
        read_only_fields = fields


class PersonalTokenCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ServiceTokenCreateSerializer(PersonalTokenCreateSerializer):
    kind = serializers.ChoiceField(
        choices=[ApiToken.Kind.SERVICE, ApiToken.Kind.NODE_AGENT], default=ApiToken.Kind.SERVICE
    )
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=SCOPES), required=False, default=list
    )
    node = StrictCharField(max_length=253, required=False, allow_blank=True, default="")


class IssuedTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The secret, shown this once; only its hash is stored."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class TransitionSerializer(serializers.ModelSerializer):
    """A team change the cluster takes on once nothing there would be stranded (read-only;
    site admins cancel a waiting one with ``POST .../cancel/``)."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team_cluster_name = serializers.CharField(source="team.cluster_name", read_only=True)
    started_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    queues = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Transition
        fields = [
            "id",
            "team",
            "team_cluster_name",
            "kind",
            "state",
            "waiting_for",
            "blocking",
            "queues",
            "since",
            "started_by",
            "completed_at",
        ]
        read_only_fields = fields
