"""Serializers of ``/api/v1/teams/{slug}/share-history/`` (``scheduling.history``): the query
(``days``) and the answer, amounts as canonical Kubernetes quantities like every amount of the
API (``/share-snapshots/`` renders the same snapshots the same way)."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from quotas.quantities import format_quantity
from scheduling.history import MAX_DAYS, ResourceHistory


def _quantity(value: Decimal | None, resource: str) -> str | None:
    if value is None:
        return None
    try:
        return format_quantity(value, resource)
    except ValueError:  # a negative amount the solver never writes: show it, don't fail
        return str(value)


class ShareHistoryQuerySerializer(serializers.Serializer):
    days = serializers.IntegerField(
        min_value=1,
        max_value=MAX_DAYS,
        default=MAX_DAYS,
        help_text=f"How many days back, 1 to {MAX_DAYS} (snapshots are kept {MAX_DAYS} days).",
    )


class ResourceHistorySerializer(serializers.Serializer):
    """One resource's series, each aligned with the answer's ``computed_at``."""

    resource = serializers.CharField()
    fair_allocation = serializers.ListField(
        child=serializers.CharField(), help_text="The DRF fair allocation at each point."
    )
    usage = serializers.ListField(
        child=serializers.CharField(), help_text="What the team had allocated at each point."
    )
    past_usage = serializers.ListField(
        child=serializers.CharField(allow_null=True),
        allow_null=True,
        help_text="The decayed mean allocation (fairness over time) at each point: null where "
        "that computation recorded no past use, and null instead of a list when none in the "
        "window did.",
    )

    def to_representation(self, instance: ResourceHistory) -> dict:
        def quantities(values):
            return [_quantity(v, instance.resource) for v in values]

        past = instance.past_usage
        return {
            "resource": instance.resource,
            "fair_allocation": quantities(instance.fair_allocation),
            "usage": quantities(instance.usage),
            "past_usage": None if past is None else quantities(past),
        }


class ShareHistorySerializer(serializers.Serializer):
    """A team's share history, one point an hour (the hour's last computation)."""

    team = serializers.CharField(help_text="The team's slug.")
    days = serializers.IntegerField()
    start = serializers.DateTimeField(help_text="The start of the window's first hour.")
    end = serializers.DateTimeField(help_text="The time of the answer.")
    computed_at = serializers.ListField(
        child=serializers.DateTimeField(), help_text="The computation of each point, oldest first."
    )
    resources = ResourceHistorySerializer(many=True, help_text="GPUs first.")
