"""Serializers of the scheduling API (read-only apart from the sync trigger)."""

from __future__ import annotations

from rest_framework import serializers

from config.api import StrictModelSerializer
from quotas.api.fields import AmountMapField
from scheduling.explanation import LABELS
from scheduling.models import ShareSnapshot, SyncItem, SyncRun


class ExplanationPartSerializer(serializers.Serializer):
    """One named part of "why is my share X" (scheduling.explanation); the parts of a snapshot
    add up to its fair_allocation, resource by resource."""

    part = serializers.ChoiceField(choices=list(LABELS), read_only=True)
    label = serializers.CharField(read_only=True)
    words = serializers.CharField(read_only=True)
    amounts = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Signed decimal amounts per resource, base units (the parts add up).",
    )
    past_usage = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        required=False,
        help_text="past-use only: the decayed mean allocation (base units) that caused it.",
    )
    past_share = serializers.FloatField(required=False, read_only=True)
    weight = serializers.IntegerField(required=False, read_only=True)
    effective_weight = serializers.FloatField(required=False, read_only=True)


class ShareSnapshotSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    usage = AmountMapField()
    demand = AmountMapField()
    fair_allocation = AmountMapField()
    past_usage = AmountMapField(
        help_text="Fairness over time: the decayed mean allocation (empty when off)."
    )
    explanation = ExplanationPartSerializer(many=True, read_only=True)

    class Meta:
        model = ShareSnapshot
        fields = [
            "id",
            "computation",
            "computed_at",
            "team",
            "usage",
            "demand",
            "dominant_share",
            "dominant_resource",
            "weighted_share",
            "fair_allocation",
            "fair_share",
            "reason",
            "past_usage",
            "past_share",
            "effective_weight",
            "explanation",
        ]


class SyncRunSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="scheduling-api:syncrun-detail")
    requested_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    quota_requests = serializers.PrimaryKeyRelatedField(
        many=True,
        read_only=True,
        help_text="Ids of the approved quota requests this run applied.",
    )

    class Meta:
        model = SyncRun
        fields = [
            "id",
            "url",
            "status",
            "dry_run",
            "trigger",
            "requested_by",
            "created",
            "started_at",
            "finished_at",
            "heartbeat_at",
            "total",
            "done",
            "created_count",
            "updated_count",
            "unchanged_count",
            "pruned_count",
            "failed_count",
            "drift_count",
            "scope",
            "merged_into",
            "quota_requests",
            "share_computation",
            "shares_stale",
            "log",
            "error",
        ]
        read_only_fields = [name for name in fields if name != "dry_run"]


class SyncRunCreateSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField(default=False, help_text="Plan only, apply nothing.")


class SyncRunAcceptedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.URLField()


class SyncItemSerializer(StrictModelSerializer):
    class Meta:
        model = SyncItem
        fields = [
            "id",
            "run",
            "kind",
            "namespace",
            "name",
            "team_slug",
            "action",
            "planned_action",
            "drift",
            "diff",
            "error",
            "attempts",
        ]
