"""Adopt a namespace that exists in the cluster and that Fairshare did not create (site admins).

The page of ``scheduling.adoption`` (as ``manage.py adopt_namespace`` is its command): Preview
shows what the sync will write into the namespace and changes nothing; Adopt records it as the
team's, marked adopted (never deleted). A protected namespace or a bad name is a form error
naming the rule.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from portal.views.common import require_admin
from quotas.models import Team
from scheduling.adoption import adopt_namespace, adoption_preview


class AdoptForm(forms.Form):
    name = forms.CharField(max_length=63, label="Namespace")
    team = forms.ModelChoiceField(
        queryset=Team.objects.filter(active=True).order_by("slug"), to_field_name="slug"
    )


@login_required
@require_http_methods(["GET", "POST"])
def adopt(request):
    require_admin(request.user)
    form = AdoptForm(request.POST or None)
    preview: list[str] | None = None
    if request.method == "POST" and form.is_valid():
        name, team = form.cleaned_data["name"], form.cleaned_data["team"]
        try:
            if request.POST.get("action") == "adopt":
                adopt_namespace(name, team, actor=request.user)
                messages.success(
                    request, f"Adopted {name} for {team.slug}; the sync writes it next."
                )
                return redirect("portal:team", slug=team.slug)
            preview = adoption_preview(name, team)
        except ValidationError as e:
            for key, errors in getattr(e, "message_dict", {"__all__": e.messages}).items():
                form.add_error(key if key in form.fields else None, errors)
    return render(request, "portal/adopt.html", {"form": form, "preview": preview})
