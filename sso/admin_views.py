"""Site admins' page for identity-provider groups: the rules mapping groups to team roles or
site admin (with a preview of who each matches, from the groups people brought at their last
sign-in), and the groups each team's RoleBindings bind in the cluster."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from quotas.choices import MembershipRole
from quotas.groups import (
    add_cluster_group,
    create_rule,
    delete_rule,
    preview_rule,
    remove_cluster_group,
)
from quotas.models import GroupRule, Team, TeamClusterGroup
from quotas.querysets import is_site_admin


def require_admin(user) -> None:
    if not is_site_admin(user):
        raise PermissionDenied("Only site admins may open this page.")


class GroupRuleForm(forms.Form):
    pattern = forms.CharField(
        max_length=255,
        label="Group or pattern",
        help_text="An identity-provider group name, or a pattern with * and ? (case-sensitive).",
    )
    team = forms.ModelChoiceField(
        queryset=Team.objects.filter(active=True).order_by("slug"),
        to_field_name="slug",
        required=False,
    )
    role = forms.ChoiceField(choices=[("", "—"), *MembershipRole.choices], required=False)
    site_admin = forms.BooleanField(
        required=False, label="Members are site admins (exact group names only)"
    )


class ClusterGroupForm(forms.Form):
    group = forms.CharField(max_length=200, label="Group")
    team = forms.ModelChoiceField(
        queryset=Team.objects.filter(active=True).order_by("slug"), to_field_name="slug"
    )
    role = forms.ChoiceField(choices=MembershipRole.choices, initial=MembershipRole.MEMBER)


def _errors_into(form: forms.Form, e: ValidationError) -> None:
    for key, errors in getattr(e, "message_dict", {"__all__": e.messages}).items():
        form.add_error(key if key in form.fields else None, errors)


@login_required
@require_http_methods(["GET", "POST"])
def group_rules(request):
    require_admin(request.user)
    action = request.POST.get("action", "")
    rule_form = GroupRuleForm(request.POST if action in {"preview", "add"} else None)
    bind_form = ClusterGroupForm(request.POST if action == "bind" else None, prefix="bind")
    preview = None
    if action in {"preview", "add"} and rule_form.is_valid():
        data = rule_form.cleaned_data
        try:
            if action == "add":
                create_rule(
                    pattern=data["pattern"],
                    team=data["team"],
                    role=data["role"],
                    site_admin=data["site_admin"],
                    actor=request.user,
                )
                messages.success(
                    request, f"Rule for {data['pattern']} added; it applies at each sign-in."
                )
                return redirect("sso:group_rules")
            preview = preview_rule(data["pattern"])
        except ValidationError as e:
            _errors_into(rule_form, e)
    if action == "bind" and bind_form.is_valid():
        data = bind_form.cleaned_data
        try:
            add_cluster_group(
                data["team"], group=data["group"], role=data["role"], actor=request.user
            )
            messages.success(
                request, f"{data['team'].slug} binds {data['group']}; the next sync writes it."
            )
            return redirect("sso:group_rules")
        except ValidationError as e:
            _errors_into(bind_form, e)
    rules = list(GroupRule.objects.select_related("team"))
    for rule in rules:
        rule.matched = preview_rule(rule.pattern)
    context = {
        "rules": rules,
        "rule_form": rule_form,
        "bind_form": bind_form,
        "preview": preview,
        "cluster_groups": TeamClusterGroup.objects.select_related("team"),
        "group_prefix": settings.FAIRSHARE_OIDC_GROUP_PREFIX,
        "admin_groups": settings.FAIRSHARE_OIDC_ADMIN_GROUPS,
        "groups_claim": settings.FAIRSHARE_OIDC_GROUPS_CLAIM,
    }
    return render(request, "sso/grouprule_list.html", context)


@login_required
@require_POST
def group_rule_delete(request, pk: int):
    require_admin(request.user)
    try:
        delete_rule(pk, actor=request.user)
        messages.success(request, "Rule removed; its memberships end at each next sign-in.")
    except ValidationError as e:
        messages.error(request, " ".join(e.messages))
    return redirect("sso:group_rules")


@login_required
@require_POST
def cluster_group_delete(request, pk: int):
    require_admin(request.user)
    try:
        remove_cluster_group(pk, actor=request.user)
        messages.success(request, "Group binding removed; the next sync takes it away.")
    except ValidationError as e:
        messages.error(request, " ".join(e.messages))
    return redirect("sso:group_rules")
