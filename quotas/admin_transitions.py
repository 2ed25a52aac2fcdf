"""Django admin for transitions (imported by quotas/admin.py): read-only, with a bulk action
that cancels waiting ones through the service (site admins; audited; the team is restored)."""

from __future__ import annotations

from django.contrib import admin, messages

from quotas.exceptions import DomainError
from quotas.models import Transition
from quotas.transitions import cancel_transition


@admin.register(Transition)
class TransitionAdmin(admin.ModelAdmin):
    list_display = ["team", "kind", "state", "blocking", "waiting_for", "since", "completed_at"]
    list_filter = ["state", "kind"]
    search_fields = ["team__slug", "team__cluster_name"]
    readonly_fields = [f.name for f in Transition._meta.fields]
    actions = ["cancel"]

    def has_module_permission(self, request):
        from quotas.querysets import is_site_admin

        return is_site_admin(request.user)

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_add_permission(self, request, *args):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Cancel the selected waiting transitions (restore the teams)")
    def cancel(self, request, queryset):
        for transition in queryset:
            try:
                cancel_transition(transition.pk, actor=request.user)
            except DomainError as e:
                self.message_user(request, f"{transition}: {e}", messages.ERROR)
            else:
                self.message_user(request, f"{transition}: cancelled.", messages.SUCCESS)
