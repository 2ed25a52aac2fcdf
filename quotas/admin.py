"""Django admin for superuser repair work (not the product UI): site admins only, and every
queryset goes through ``visible_to`` like the rest of the app.

Every save and delete is audited (``AuditedAdmin``, or the service the admin calls: quotas go
through ``services.set_team_quota``, members through ``quotas.members``, token revocation
through ``tokens.revoke_token``). What is history or a decision stays read-only (issue 27): the
audit trail, a token's owner, kind, scopes, node and lifetime, quota requests and their
decisions (those go through the approval pages and the API).
"""

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.forms.models import model_to_dict

from quotas import capacity_rule, changes, direct
from quotas import members as member_services
from quotas.changes import notify_quota_changed
from quotas.choices import AuditVerb
from quotas.exceptions import QuotaExceeded
from quotas.hierarchy import check_hierarchy
from quotas.models import (
    ApiToken,
    AuditEvent,
    Budget,
    DerivedMembership,
    ExternalIdentity,
    GroupRule,
    LimitPolicy,
    Membership,
    Namespace,
    PriorityTier,
    QuotaRequest,
    QuotaRequestLine,
    Team,
    TeamClusterGroup,
    TeamQuota,
)
from quotas.querysets import is_site_admin
from quotas.signals import quota_changed
from quotas.tiers import KEEP, team_tier_notice, tier_value_notice


class SiteAdminOnly:
    """Only site admins (superusers or the admins group) may use the admin at all."""

    def has_module_permission(self, request):
        return is_site_admin(request.user)

    def has_view_permission(self, request, obj=None):
        return is_site_admin(request.user)

    def has_add_permission(self, request, *args):
        return is_site_admin(request.user)

    def has_change_permission(self, request, obj=None):
        return is_site_admin(request.user)

    def has_delete_permission(self, request, obj=None):
        return is_site_admin(request.user)

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.visible_to(request.user) if hasattr(qs, "visible_to") else qs


def _state(obj) -> dict:
    """An object's editable fields, JSON-ready (the audit's before/after)."""
    return {
        name: value if value is None or isinstance(value, bool | int | list | dict) else str(value)
        for name, value in sorted(model_to_dict(obj).items())
    }


def _team_of(obj):
    from quotas.models import Team as TeamModel

    if isinstance(obj, TeamModel):
        return obj
    return getattr(obj, "team", None)


class AuditedAdmin:
    """Every admin add, change and delete leaves an AuditEvent, as the product's own writes do
    (``services.audit``: actor, verb, before and after), in the save's transaction."""

    def save_model(self, request, obj, form, change):
        current = type(obj).objects.filter(pk=obj.pk).first() if change and obj.pk else None
        before = _state(current) if current is not None else None
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            changes.audit(
                actor=request.user,
                verb=AuditVerb.UPDATE if change else AuditVerb.CREATE,
                obj=obj,
                team=_team_of(obj),
                before=before,
                after=_state(obj),
                note="Django admin",
            )

    def delete_model(self, request, obj):
        with transaction.atomic():
            changes.audit(
                actor=request.user,
                verb=AuditVerb.DELETE,
                obj=obj,
                team=_team_of(obj),
                before=_state(obj),
                note="Django admin",
            )
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset:
                changes.audit(
                    actor=request.user,
                    verb=AuditVerb.DELETE,
                    obj=obj,
                    team=_team_of(obj),
                    before=_state(obj),
                    note="Django admin",
                )
            super().delete_queryset(request, queryset)


class ViewOnly:
    """Inspected here, never changed: history, decisions, or rows other code owns."""

    def has_add_permission(self, request, *args):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MembershipInline(admin.TabularInline):
    """Read-only here: members change on the Membership pages, which go through the service."""

    model = Membership
    extra = 0
    can_delete = False
    fields = ["user", "role"]
    readonly_fields = ["user", "role"]
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class SyncsTheCluster:
    """Admin edits reach the cluster as the product's own changes do: after commit, a targeted
    sync of every team the edit touched, before and after it (a team moved to another department
    brings both departments' Queues along), or a full sync where ``teams_of`` says None (an edit
    of cluster-wide objects, a renamed team). Without this they would wait for the scheduled
    full sync."""

    def teams_of(self, obj) -> set[int] | None:
        return {obj.team_id}

    def _current(self, obj):
        return type(obj).objects.filter(pk=obj.pk).first() if obj.pk else None

    def _notify(self, *groups: set[int] | None) -> None:
        if any(group is None for group in groups):
            transaction.on_commit(
                lambda: quota_changed.send(sender=type(self), team_ids=None, reason="admin")
            )
            return
        ids = {i for group in groups for i in group if i}  # type: ignore[union-attr]
        if ids:
            notify_quota_changed(ids, "admin")

    def save_model(self, request, obj, form, change):
        before = self._current(obj) if change else None
        super().save_model(request, obj, form, change)
        self._notify(set() if before is None else self.teams_of(before), self.teams_of(obj))

    def delete_model(self, request, obj):
        before = self.teams_of(obj)
        super().delete_model(request, obj)
        self._notify(before)

    def delete_queryset(self, request, queryset):
        before = [self.teams_of(obj) for obj in queryset]
        super().delete_queryset(request, queryset)
        self._notify(*before)


class TeamQuotaForm(forms.ModelForm):
    """Admin edits of a quota obey the hierarchy rules (``services.check_hierarchy``): a
    refusal is a form error naming the department and the numbers."""

    class Meta:
        model = TeamQuota
        fields = ["team", "resource", "guarantee", "limit"]

    def clean(self):
        data = super().clean()
        team, resource = (
            data.get("team") or getattr(self.instance, "team", None),
            data.get("resource") or self.instance.resource,
        )
        if team is not None and team.pk and resource and "guarantee" in data:
            check_hierarchy({(team.pk, resource): (data["guarantee"], data.get("limit"))})
            try:
                capacity_rule.check_capacity({(team.pk, resource): data["guarantee"]})
            except QuotaExceeded as e:
                raise forms.ValidationError({"guarantee": str(e)}) from None
        return data


class TeamForm(forms.ModelForm):
    """Moving a team under another department, or reactivating it, obeys the hierarchy rules."""

    class Meta:
        model = Team
        fields = [
            "slug",
            "name",
            "parent",
            "weight",
            "tier",
            "cost_center",
            "reclaimable",
            "active",
            "description",
        ]
        help_texts = {"tier": f"Changing it: {KEEP}"}

    def clean(self):
        data = super().clean()
        if self.instance.pk and ("parent" in data or "active" in data):
            parent = data.get("parent")
            check_hierarchy(
                parents={self.instance.pk: parent.pk if parent else None},
                active={self.instance.pk: data.get("active", self.instance.active)},
                field="parent" if "parent" in self.changed_data else "active",
            )
        return data


class TeamQuotaInline(ViewOnly, admin.TabularInline):
    """Read-only here: quotas change on the TeamQuota pages, which go through the service."""

    model = TeamQuota
    extra = 0
    fields = ["resource", "guarantee", "limit"]
    readonly_fields = fields
    show_change_link = True


@admin.register(Team)
class TeamAdmin(SiteAdminOnly, SyncsTheCluster, AuditedAdmin, admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "parent",
        "weight",
        "tier",
        "cost_center",
        "reclaimable",
        "active",
    ]
    list_filter = ["active", "tier", "reclaimable"]
    search_fields = ["slug", "name", "cost_center"]
    inlines = [MembershipInline, TeamQuotaInline]
    form = TeamForm

    def teams_of(self, obj) -> set[int] | None:
        return {obj.pk, obj.parent_id}

    def save_model(self, request, obj, form, change):
        before = self._current(obj) if change else None
        if before is not None and before.tier_id != obj.tier_id:
            old, new = before.tier, obj.tier
            notice = team_tier_notice(obj.slug, old and old.name, new and new.name)
            messages.warning(request, notice, fail_silently=True)
        # A rename changes nothing in the cluster (its objects carry the fixed cluster name).
        obj._changed_by = request.user  # recorded on any transition the change starts
        super().save_model(request, obj, form, change)


class PriorityTierForm(forms.ModelForm):
    class Meta:
        model = PriorityTier
        fields = ["name", "value", "preemption_policy", "reclaimable", "description"]
        help_texts = {
            "value": "Changing the value or the preemption policy re-creates the PriorityClass "
            f"(delete and create back to back). {KEEP}",
        }


@admin.register(PriorityTier)
class PriorityTierAdmin(SiteAdminOnly, SyncsTheCluster, AuditedAdmin, admin.ModelAdmin):
    form = PriorityTierForm

    def teams_of(self, obj) -> set[int] | None:
        return None  # a PriorityClass: cluster-wide

    list_display = ["name", "value", "preemption_policy", "reclaimable"]

    def save_model(self, request, obj, form, change):
        before = self._current(obj) if change else None
        super().save_model(request, obj, form, change)
        if before is not None:
            was = {"value": before.value, "preemption_policy": before.preemption_policy}
            notice = tier_value_notice(was, obj.name, obj.value, obj.preemption_policy)
            if notice:
                messages.warning(request, notice, fail_silently=True)


class MembershipAdminForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["user", "team", "role"]

    def clean_user(self):
        user = self.cleaned_data["user"]
        if user is not None and not user.is_active:
            raise forms.ValidationError("Only active users can be added to a team.")
        return user


@admin.register(Membership)
class MembershipAdmin(SiteAdminOnly, admin.ModelAdmin):
    """Adds, role changes and removals go through ``quotas.members`` like the team page and the
    API: audited, and a cluster sync follows (memberships are RoleBindings)."""

    form = MembershipAdminForm
    list_display = ["user", "team", "role"]
    list_filter = ["role"]
    search_fields = ["user__username", "team__slug"]
    autocomplete_fields = ["user"]

    def get_readonly_fields(self, request, obj=None):
        # Moving a membership to another user or team is a removal and an addition.
        return ["user", "team"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        if change:
            member_services.change_role(obj.team, obj.pk, role=obj.role, actor=request.user)
        else:
            saved = member_services.add_member(
                obj.team, username=obj.user.get_username(), role=obj.role, actor=request.user
            )
            obj.pk = saved.pk

    def delete_model(self, request, obj):
        member_services.remove_member(obj.team, obj.pk, actor=request.user)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("team"):
            self.delete_model(request, membership)


@admin.register(Namespace)
class NamespaceAdmin(SiteAdminOnly, SyncsTheCluster, AuditedAdmin, admin.ModelAdmin):
    list_display = ["name", "team", "managed", "share", "volcano_jobs"]
    list_filter = ["managed"]
    search_fields = ["name", "team__slug"]


@admin.register(TeamQuota)
class TeamQuotaAdmin(SiteAdminOnly, SyncsTheCluster, AuditedAdmin, admin.ModelAdmin):
    """Saves go through ``services.set_team_quota``, as the API's: capacity and hierarchy
    checked under the capacity lock, audited, a sync after commit. Deletes are audited."""

    form = TeamQuotaForm
    list_display = ["team", "resource", "guarantee_display", "limit_display"]
    search_fields = ["team__slug", "resource"]

    def get_readonly_fields(self, request, obj=None):
        return ["team", "resource"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        saved = direct.set_team_quota(
            obj.team, obj.resource, guarantee=obj.guarantee, limit=obj.limit, actor=request.user
        )
        obj.pk = saved.pk


@admin.register(LimitPolicy)
class LimitPolicyAdmin(SiteAdminOnly, SyncsTheCluster, AuditedAdmin, admin.ModelAdmin):
    list_display = [
        "team",
        "namespace",
        "resource",
        "default_request",
        "default_limit",
        "max_per_container",
        "enforce_quota_limit",
    ]


class QuotaRequestLineInline(ViewOnly, admin.TabularInline):
    model = QuotaRequestLine
    extra = 0


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    """Requests and their decisions change only through the approval pages and the API."""

    list_display = ["id", "team", "requester", "status", "window_start", "window_end", "created"]
    list_filter = ["status"]
    inlines = [QuotaRequestLineInline]


@admin.register(Budget)
class BudgetAdmin(SiteAdminOnly, AuditedAdmin, admin.ModelAdmin):
    list_display = ["team", "resource", "monthly_hours"]


@admin.register(AuditEvent)
class AuditEventAdmin(SiteAdminOnly, admin.ModelAdmin):
    list_display = ["created", "actor_name", "verb", "object_type", "object_repr", "team"]
    list_filter = ["verb", "object_type"]
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request, *args):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # the audit trail is append-only


@admin.register(ApiToken)
class ApiTokenAdmin(SiteAdminOnly, AuditedAdmin, admin.ModelAdmin):
    """Only a token's name changes here; who owns it, what it may do and how long it lives do
    not (revoke it with the action, through ``tokens.revoke_token``, and issue a new one)."""

    list_display = [
        "name",
        "kind",
        "user",
        "prefix",
        "node",
        "created",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["kind"]
    readonly_fields = [
        "kind",
        "user",
        "scopes",
        "node",
        "prefix",
        "key_hash",
        "created",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    search_fields = ["name", "user__username", "node"]
    actions = ["revoke"]

    def has_add_permission(self, request, *args):
        return False  # tokens are issued through the API so the secret is shown exactly once

    def has_delete_permission(self, request, obj=None):
        return False  # revoked, not deleted: the audit trail names them

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        from quotas.tokens import revoke_token

        for token in queryset:
            revoke_token(token.pk, actor=request.user)
        messages.success(request, f"{queryset.count()} token(s) revoked.")


@admin.register(QuotaRequestLine)
class QuotaRequestLineAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    list_display = [
        "request",
        "resource",
        "guarantee",
        "limit",
        "approved_guarantee",
        "approved_limit",
    ]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .filter(request__in=QuotaRequest.objects.visible_to(request.user))
        )


# Single sign-on rows (issue 33): inspected here; rules and cluster groups are written on the
# product's /sso/groups/ page (audited, validated), identities by signing in.
@admin.register(GroupRule)
class GroupRuleAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    list_display = ["pattern", "team", "role", "site_admin", "created_by", "created"]


@admin.register(TeamClusterGroup)
class TeamClusterGroupAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    list_display = ["team", "group", "role", "created"]


@admin.register(DerivedMembership)
class DerivedMembershipAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    list_display = ["membership", "groups", "updated"]


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(ViewOnly, SiteAdminOnly, admin.ModelAdmin):
    list_display = ["user", "issuer", "subject", "admin_from_groups", "last_sign_in"]
    search_fields = ["user__username", "subject"]

    def has_delete_permission(self, request, obj=None):
        return is_site_admin(request.user)  # unlink: the next sign-in creates a new user


from quotas import admin_transitions  # noqa: E402, F401  (registers TransitionAdmin)
