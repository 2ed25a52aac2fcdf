"""Serializers of the monitoring API: samples, rollups, capacity, rate cards and chargeback."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.api import StrictCharField, StrictModelSerializer
from monitoring.chargeback import MAX_PERIOD
from monitoring.domain.chargeback import CSV_COLUMNS, DEFAULT_GROUP_BY, GROUP_FIELDS
from monitoring.models import (
    CapacitySnapshot,
    ChargebackStatement,
    GpuSample,
    RateCard,
    UsageRollup,
    UsageSample,
    Workload,
)
from quotas.api.fields import AmountMapField, QuantityField, canonical_amounts


class UsageSampleSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    allocated = QuantityField(read_only=True)
    pending = QuantityField(read_only=True)

    class Meta:
        model = UsageSample
        fields = [
            "id",
            "taken_at",
            "team",
            "namespace",
            "resource",
            "flavor",
            "allocated",
            "pending",
        ]


class UsageRollupSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = UsageRollup
        fields = [
            "id",
            "period",
            "start",
            "team",
            "namespace",
            "resource",
            "flavor",
            "allocated_hours",
            "pending_hours",
            "used_hours",
            "guarantee_hours",
            "avg_utilization",
            "samples",
        ]


class GpuSampleSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = GpuSample
        fields = [
            "id",
            "taken_at",
            "received_at",
            "node",
            "uuid",
            "index",
            "model",
            "util_gpu",
            "util_mem",
            "mem_used",
            "mem_total",
            "power_w",
            "temp_c",
            "namespace",
            "pod",
            "team",
        ]


class IngestBatchSerializer(serializers.Serializer):
    """The node agent's batch (monitoring.collectors.agent); the service validates the samples."""

    node = StrictCharField()
    agent = serializers.DictField(required=False)
    samples = serializers.ListField(child=serializers.DictField(), required=False)


class IngestResultSerializer(serializers.Serializer):
    node = serializers.CharField()
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    rejected_reasons = serializers.ListField(child=serializers.CharField())
    agent_version = serializers.CharField()
    agent_dropped = serializers.IntegerField()
    agent_skipped = serializers.IntegerField()
    rejected = serializers.IntegerField(help_text="Samples refused (reasons above).")


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
    }
)
class FlavorMapField(serializers.ReadOnlyField):
    def to_representation(self, value):
        return {flavor: canonical_amounts(amounts) for flavor, amounts in (value or {}).items()}


class CapacitySnapshotSerializer(StrictModelSerializer):
    resources = AmountMapField()
    flavors = FlavorMapField()

    class Meta:
        model = CapacitySnapshot
        fields = ["id", "taken_at", "source", "resources", "flavors", "nodes"]


class RateCardSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="monitoring-api:ratecard-detail")

    class Meta:
        model = RateCard
        fields = [
            "id",
            "url",
            "resource",
            "flavor",
            "price_per_unit_hour",
            "currency",
            "valid_from",
            "valid_to",
            "created",
        ]


# ---------------------------------------------------------------- chargeback


class MomentField(serializers.Field):
    """A date (midnight UTC) or an ISO 8601 datetime (naive means UTC)."""

    default_error_messages = {
        "invalid": "Give a date (2025-05-01) or an ISO 8601 time (2025-05-01T12:00:00Z)."
    }

    def to_internal_value(self, data) -> datetime:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            moment = parse_datetime(data)
            day = None if moment else parse_date(data)
        except ValueError:
            self.fail("invalid")
        if moment is None and day is None:
            self.fail("invalid")
        if moment is None:
            moment = datetime.combine(day, time(), tzinfo=UTC)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        if not 1970 <= moment.year <= 9000:
            self.fail("invalid")
        return moment.astimezone(UTC)

    def to_representation(self, value):
        return value.isoformat()


class GroupByField(StrictCharField):
    """Comma-separated subset of team, cost_center, resource, flavor, namespace."""

    def to_internal_value(self, data) -> tuple[str, ...]:
        text = super().to_internal_value(data)
        fields = tuple(part.strip() for part in text.split(",") if part.strip())
        unknown = [name for name in fields if name not in GROUP_FIELDS]
        if unknown:
            raise serializers.ValidationError(
                f"Unknown grouping {', '.join(unknown)}; choose from {', '.join(GROUP_FIELDS)}."
            )
        if len(set(fields)) != len(fields):
            raise serializers.ValidationError("Each grouping may appear once.")
        return fields


class ChargebackQuerySerializer(serializers.Serializer):
    start = MomentField(help_text="Start (inclusive): a date or an ISO 8601 time.")
    end = MomentField(help_text="End (exclusive): a date or an ISO 8601 time.")
    group_by = GroupByField(
        required=False,
        help_text=f"Comma-separated, from: {', '.join(GROUP_FIELDS)}. Default: team,resource.",
    )

    def validate(self, attrs):
        attrs.setdefault("group_by", DEFAULT_GROUP_BY)
        start, end = attrs["start"], attrs["end"]
        if end <= start:
            raise serializers.ValidationError({"end": "end must be after start."})
        if end - start > MAX_PERIOD:
            raise serializers.ValidationError(
                {"end": f"A report covers at most {MAX_PERIOD.days} days."}
            )
        return attrs


_ROW = {name: serializers.CharField() for name in CSV_COLUMNS}
ChargebackRowSerializer = type("ChargebackRowSerializer", (serializers.Serializer,), _ROW)


class BudgetUseSerializer(serializers.Serializer):
    team = serializers.CharField(required=False)
    resource = serializers.CharField()
    start = serializers.CharField()
    end = serializers.CharField()
    limit_hours = serializers.CharField()
    allocated_hours = serializers.CharField(help_text="Allocated hours of the budget's resource.")
    used_hours = serializers.CharField(help_text="Deprecated: the same as allocated_hours.")
    used_pct = serializers.CharField(help_text="allocated_hours ÷ limit_hours × 100.")


class BudgetUseRowSerializer(serializers.Serializer):
    """One budget's use this month (``monitoring.budgets.budget_use``)."""

    team = serializers.CharField()
    resource = serializers.CharField()
    unit = serializers.CharField()
    month = serializers.CharField(help_text="YYYY-MM (UTC).")
    allocated_hours = serializers.CharField()
    budget_hours = serializers.CharField()
    percent = serializers.CharField()


class BudgetUseReportSerializer(serializers.Serializer):
    """Schema of ``GET /api/v1/budget-use/`` (the view builds the dict)."""

    month_start = serializers.DateTimeField()
    cutoff = serializers.DateTimeField(help_text="Hours are counted up to this instant.")
    results = BudgetUseRowSerializer(many=True)


class ChargebackReportSerializer(serializers.Serializer):
    """Schema of the report (the view builds the dict)."""

    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    group_by = serializers.ListField(child=serializers.CharField())
    currency = serializers.CharField()
    columns = serializers.ListField(child=serializers.CharField())
    rows = ChargebackRowSerializer(many=True)
    total = ChargebackRowSerializer()
    budgets = BudgetUseSerializer(many=True)
    unpriced_records = serializers.IntegerField()


class StatementCreateSerializer(serializers.Serializer):
    month = StrictCharField(help_text="The month to freeze, YYYY-MM (UTC).")
    group_by = GroupByField(required=False, help_text="Default: team.")

    def validate(self, attrs):
        attrs.setdefault("group_by", ("team",))
        return attrs

    def validate_month(self, value) -> date:
        try:
            month = datetime.strptime(value, "%Y-%m").date()
        except ValueError:
            raise serializers.ValidationError("Give the month as YYYY-MM.") from None
        if not 1970 <= month.year <= 9000:  # MomentField's years: the next month must exist
            raise serializers.ValidationError("Give a month from 1970 to 9000.")
        return month


class ChargebackStatementSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(
        view_name="monitoring-api:chargebackstatement-detail"
    )
    frozen_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    group_by = serializers.SerializerMethodField()

    class Meta:
        model = ChargebackStatement
        fields = ["id", "url", "start", "end", "group_by", "frozen_at", "frozen_by"]

    def get_group_by(self, obj) -> list[str]:
        return [name for name in obj.group_by.split(",") if name]


class LateChangeSerializer(serializers.Serializer):
    key = serializers.DictField(child=serializers.CharField())
    kind = serializers.ChoiceField(choices=["added", "removed", "changed"])
    changes = serializers.ListField(child=serializers.DictField(child=serializers.CharField()))


class ChargebackStatementDetailSerializer(ChargebackStatementSerializer):
    """Schema of a statement with its frozen figures and the late changes since."""

    rows = ChargebackRowSerializer(many=True, read_only=True)
    total = ChargebackRowSerializer(read_only=True, allow_null=True)
    total_cost = serializers.CharField(read_only=True, allow_null=True)
    budgets = BudgetUseSerializer(many=True, read_only=True)
    currency = serializers.CharField(read_only=True)
    unpriced_records = serializers.IntegerField(read_only=True)
    late = LateChangeSerializer(many=True, read_only=True)

    class Meta(ChargebackStatementSerializer.Meta):
        fields = [
            *ChargebackStatementSerializer.Meta.fields,
            "rows",
            "total",
            "total_cost",
            "budgets",
            "currency",
            "unpriced_records",
            "late",
        ]


class BlockerRemedySerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="release | others | approval | request | wait | change")
    words = serializers.CharField()
    workloads = serializers.ListField(child=serializers.CharField())
    request = serializers.IntegerField(allow_null=True, help_text="A pending request that fits.")
    team = serializers.CharField(allow_null=True)
    resource = serializers.CharField(allow_null=True)
    limit = serializers.CharField(allow_null=True, help_text="The limit that would fit.")
    guarantee = serializers.CharField(allow_null=True, help_text="The guarantee that would fit.")
    url = serializers.CharField(allow_null=True, help_text="The page to act on, if any.")


class BlockerSerializer(serializers.Serializer):
    """One thing standing between a waiting workload and its start
    (``monitoring.domain.blockers``)."""

    kind = serializers.CharField(
        help_text="gang | team-limit | department-limit | fair-share | cluster | flavor | scheduler"
    )
    resource = serializers.CharField()
    short_by = serializers.CharField(help_text="How much is missing, a Kubernetes quantity.")
    words = serializers.CharField()
    remedies = BlockerRemedySerializer(many=True)
    estimate = serializers.CharField(help_text="An estimated start with its basis, or why none.")
    estimate_seconds = serializers.IntegerField(allow_null=True)


class WorkloadSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    requested = AmountMapField(help_text="The whole gang's requests, {resource: quantity}.")
    waiting_for = AmountMapField(help_text="What must still be admitted for it to run.")
    blockers = serializers.SerializerMethodField(
        help_text="What must change for a waiting workload to start; empty when it runs."
    )

    @extend_schema_field(BlockerSerializer(many=True))
    def get_blockers(self, workload) -> list[dict]:
        return self.context.get("blockers", {}).get(workload.pk, [])

    class Meta:
        model = Workload
        fields = [
            "id",
            "taken_at",
            "team",
            "namespace",
            "name",
            "kind",
            "queue",
            "priority_class",
            "gang_size",
            "pods",
            "running",
            "requested",
            "gpus",
            "waiting_for",
            "waiting_gpus",
            "phase",
            "waiting",
            "created",
            "wait_code",
            "wait_reason",
            "blockers",
        ]


class WeekWaitsSerializer(serializers.Serializer):
    team = serializers.CharField()
    week = serializers.DateField(help_text="The Monday (UTC) the week starts on.")
    started = serializers.IntegerField(help_text="Workloads that started that week.")
    median_wait_seconds = serializers.IntegerField()
    p90_wait_seconds = serializers.IntegerField()
    longest_wait_seconds = serializers.IntegerField()


class WorkloadWaitsSerializer(serializers.Serializer):
    weeks = serializers.IntegerField()
    results = WeekWaitsSerializer(many=True)
