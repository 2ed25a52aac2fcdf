"""django-filter FilterSets of the monitoring API."""

from __future__ import annotations

from monitoring.models import (
    CapacitySnapshot,
    ChargebackStatement,
    GpuSample,
    RateCard,
    UsageRollup,
    UsageSample,
    Workload,
)
from quotas.api.filtersets import FilterSet, TeamSlugFilter, UtcDateTimeFilter


class UsageSampleFilterSet(FilterSet):
    team = TeamSlugFilter()
    taken_after = UtcDateTimeFilter(field_name="taken_at", lookup_expr="gte")
    taken_before = UtcDateTimeFilter(field_name="taken_at", lookup_expr="lt")

    class Meta:
        model = UsageSample
        fields = ["namespace", "resource", "flavor"]


class UsageRollupFilterSet(FilterSet):
    team = TeamSlugFilter()
    start_after = UtcDateTimeFilter(field_name="start", lookup_expr="gte")
    start_before = UtcDateTimeFilter(field_name="start", lookup_expr="lt")

    class Meta:
        model = UsageRollup
        fields = ["period", "namespace", "resource", "flavor"]


class GpuSampleFilterSet(FilterSet):
    team = TeamSlugFilter()
    taken_after = UtcDateTimeFilter(field_name="taken_at", lookup_expr="gte")
    taken_before = UtcDateTimeFilter(field_name="taken_at", lookup_expr="lt")
    received_after = UtcDateTimeFilter(field_name="received_at", lookup_expr="gt")

    class Meta:
        model = GpuSample
        fields = ["node", "uuid", "namespace", "pod", "model"]


class CapacitySnapshotFilterSet(FilterSet):
    taken_after = UtcDateTimeFilter(field_name="taken_at", lookup_expr="gte")
    taken_before = UtcDateTimeFilter(field_name="taken_at", lookup_expr="lt")

    class Meta:
        model = CapacitySnapshot
        fields = ["source"]


class RateCardFilterSet(FilterSet):
    valid_at = UtcDateTimeFilter(method="filter_valid_at", help_text="Rates valid then.")

    class Meta:
        model = RateCard
        fields = ["resource", "flavor", "currency"]

    def filter_valid_at(self, queryset, name, value):
        from django.db.models import Q

        return queryset.filter(
            Q(valid_to__isnull=True) | Q(valid_to__gt=value), valid_from__lte=value
        )


class ChargebackStatementFilterSet(FilterSet):
    start_after = UtcDateTimeFilter(field_name="start", lookup_expr="gte")
    start_before = UtcDateTimeFilter(field_name="start", lookup_expr="lt")

    class Meta:
        model = ChargebackStatement
        fields = ["group_by"]


class WorkloadFilterSet(FilterSet):
    team = TeamSlugFilter()

    class Meta:
        model = Workload
        fields = ["namespace", "phase", "queue", "kind", "waiting", "wait_code"]
