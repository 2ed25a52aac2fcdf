"""Serializers of the scheduling API (read-only apart from the sync trigger)."""

from __future__ import annotations

from rest_framework import serializers

from config.api import StrictModelSerializer
from quotas.api.fields import AmountMapField
from scheduling.models import ShareSnapshot, SyncItem, SyncRun


class ShareSnapshotSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    usage = AmountMapField()
    demand = AmountMapField()
    fair_allocation = AmountMapField()

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
