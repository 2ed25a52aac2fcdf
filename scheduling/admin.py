from django.contrib import admin

from quotas.admin import SiteAdminOnly
from scheduling.models import (
    FairnessSetting,
    PastUsageState,
    ShareComputation,
    ShareFailure,
    ShareSnapshot,
    SyncItem,
    SyncRun,
)


class ReadOnlyHistory(SiteAdminOnly):
    """History rows are written by jobs; the admin may inspect and delete them, not edit."""

    def has_add_permission(self, request, *args):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ShareSnapshotInline(admin.TabularInline):
    model = ShareSnapshot
    extra = 0
    fields = ["team", "dominant_share", "dominant_resource", "weighted_share", "reason"]
    readonly_fields = fields


@admin.register(ShareComputation)
class ShareComputationAdmin(ReadOnlyHistory, admin.ModelAdmin):
    list_display = ["computed_at", "trigger", "teams", "duration_ms"]
    inlines = [ShareSnapshotInline]


@admin.register(ShareFailure)
class ShareFailureAdmin(ReadOnlyHistory, admin.ModelAdmin):
    list_display = ["failed_at", "trigger", "error", "notified"]


@admin.register(ShareSnapshot)
class ShareSnapshotAdmin(ReadOnlyHistory, admin.ModelAdmin):
    list_display = ["computed_at", "team", "dominant_share", "dominant_resource", "reason"]
    list_filter = ["team"]


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyHistory, admin.ModelAdmin):
    list_display = [
        "id",
        "status",
        "dry_run",
        "trigger",
        "created",
        "finished_at",
        "created_count",
        "updated_count",
        "pruned_count",
        "failed_count",
        "drift_count",
    ]
    list_filter = ["status", "dry_run"]


@admin.register(SyncItem)
class SyncItemAdmin(ReadOnlyHistory, admin.ModelAdmin):
    list_display = ["run", "action", "kind", "namespace", "name", "drift"]
    list_filter = ["action", "kind", "drift"]
    search_fields = ["name", "namespace", "team_slug"]


@admin.register(FairnessSetting)
class FairnessSettingAdmin(ReadOnlyHistory, admin.ModelAdmin):
    """Shown, not edited here: a change goes through ``scheduling.pastuse.set_fairness`` (the
    Fairness page, /fairness/), which validates, audits and recomputes the shares."""

    list_display = ["half_life_seconds", "strength", "updated_by", "updated_at"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PastUsageState)
class PastUsageStateAdmin(ReadOnlyHistory, admin.ModelAdmin):
    """Folded past use (a cache of the hourly rollups): deleting a row makes the next share
    computation fold the whole history again, as ``manage.py past_usage --rebuild`` does."""

    list_display = ["half_life_seconds", "first", "through", "folded_hours", "updated_at"]
    exclude = ["usage", "capacity"]
