"""django-filter FilterSets of the scheduling API."""

from __future__ import annotations

import django_filters as filters

from quotas.api.filtersets import FilterSet, TeamSlugFilter, UtcDateTimeFilter
from scheduling.models import ShareSnapshot, SyncItem, SyncRun


class ShareSnapshotFilterSet(FilterSet):
    team = TeamSlugFilter()
    computed_after = UtcDateTimeFilter(field_name="computed_at", lookup_expr="gte")
    computed_before = UtcDateTimeFilter(field_name="computed_at", lookup_expr="lt")

    class Meta:
        model = ShareSnapshot
        fields = ["computation", "dominant_resource"]


class SyncRunFilterSet(FilterSet):
    created_after = UtcDateTimeFilter(field_name="created", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created", lookup_expr="lt")

    class Meta:
        model = SyncRun
        fields = ["status", "dry_run", "trigger"]


class SyncItemFilterSet(FilterSet):
    team = filters.CharFilter(field_name="team_slug")

    class Meta:
        model = SyncItem
        fields = ["run", "kind", "namespace", "action", "drift"]
