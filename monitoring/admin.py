from django.contrib import admin

from monitoring.models import (
    BudgetAlert,
    CapacitySnapshot,
    ChargebackStatement,
    GpuDevice,
    GpuInventoryNode,
    GpuSample,
    GpuSampleRejection,
    IdleGpuAlert,
    RateCard,
    UsageRollup,
    UsageSample,
    Workload,
    WorkloadRecord,
)
from quotas.admin import AuditedAdmin, SiteAdminOnly, ViewOnly


@admin.register(CapacitySnapshot)
class CapacitySnapshotAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["taken_at", "source", "nodes"]


@admin.register(UsageSample)
class UsageSampleAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["taken_at", "namespace", "team", "resource", "flavor", "allocated", "pending"]
    list_filter = ["resource"]
    search_fields = ["namespace"]


@admin.register(GpuSample)
class GpuSampleAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["taken_at", "node", "index", "model", "util_gpu", "namespace", "pod", "team"]
    search_fields = ["node", "uuid", "pod", "namespace"]


class ReadOnly:
    """Written by the collector and ingest only."""

    def has_add_permission(self, request, *args):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(GpuSampleRejection)
class GpuSampleRejectionAdmin(ReadOnly, SiteAdminOnly, admin.ModelAdmin):
    """GPU samples node agents sent that ingest refused, per node, hour and reason."""

    list_display = ["hour", "node", "reason", "count", "example", "last_seen_at"]
    list_filter = ["reason"]
    search_fields = ["node"]


@admin.register(GpuInventoryNode)
class GpuInventoryNodeAdmin(ReadOnly, SiteAdminOnly, admin.ModelAdmin):
    list_display = ["name", "gpus", "product", "collected_at"]
    readonly_fields = ["name", "gpus", "product", "pods", "collected_at"]
    search_fields = ["name"]


@admin.register(GpuDevice)
class GpuDeviceAdmin(ReadOnly, SiteAdminOnly, admin.ModelAdmin):
    """GPU UUIDs and the node that reports them (delete a row to let another node claim it)."""

    list_display = ["uuid", "node", "index", "last_seen_at"]
    search_fields = ["uuid", "node"]


@admin.register(UsageRollup)
class UsageRollupAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    """Rollups are the chargeback's input: written by the rollup job only (issue 27)."""

    list_display = [
        "period",
        "start",
        "namespace",
        "team",
        "resource",
        "flavor",
        "allocated_hours",
        "used_hours",
    ]
    list_filter = ["period", "resource"]


@admin.register(RateCard)
class RateCardAdmin(SiteAdminOnly, AuditedAdmin, admin.ModelAdmin):
    list_display = [
        "resource",
        "flavor",
        "price_per_unit_hour",
        "currency",
        "valid_from",
        "valid_to",
    ]


@admin.register(ChargebackStatement)
class ChargebackStatementAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    """A frozen statement is what was billed: never edited or deleted (issue 27)."""

    list_display = ["start", "end", "group_by", "frozen_at", "frozen_by"]


@admin.register(IdleGpuAlert)
class IdleGpuAlertAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["team", "node", "pod", "gpus", "avg_utilization", "status", "last_seen_at"]
    list_filter = ["status"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["budget", "month", "threshold", "allocated_hours", "created"]


@admin.register(Workload)
class WorkloadAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ("taken_at", "team", "namespace", "kind", "name", "phase", "gpus", "wait_code")
    list_filter = ("waiting", "wait_code", "kind")
    search_fields = ("namespace", "name", "queue")
    date_hierarchy = "taken_at"


@admin.register(WorkloadRecord)
class WorkloadRecordAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    """One workload's life across collections (waits, run lengths): written by the collection."""

    list_display = ["namespace", "kind", "name", "team", "first_seen", "started", "finished"]
    list_filter = ["kind", "team"]
    search_fields = ["namespace", "name"]
