from django.contrib import admin

from monitoring.models import CapacitySnapshot
from quotas.admin import SiteAdminOnly


@admin.register(CapacitySnapshot)
class CapacitySnapshotAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["taken_at", "source", "nodes"]
