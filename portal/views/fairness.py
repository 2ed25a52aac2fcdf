"""Fairness over time: the admin's half-life and strength of past use (scheduling.pastuse)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from portal.views.common import require_admin
from scheduling.pastuse import current_fairness, describe_half_life, set_fairness


class FairnessForm(forms.Form):
    half_life = forms.CharField(
        required=False,
        max_length=32,
        help_text="A duration such as 7d, 36h or 1d12h; 0 turns it off; empty: the environment's "
        "FAIRSHARE_USAGE_HALF_LIFE.",
    )
    strength = forms.CharField(
        required=False,
        max_length=8,
        help_text="0 to 0.9: each team's weight stays within ±strength of its own; empty: the "
        "environment's FAIRSHARE_USAGE_STRENGTH.",
    )


@login_required
@require_http_methods(["GET", "POST"])
def fairness(request):
    """Show and change the setting; every change recomputes the shares and syncs the Queues."""
    require_admin(request.user)
    current = current_fairness()
    if request.method == "POST":
        form = FairnessForm(request.POST)
        if form.is_valid():
            try:
                set_fairness(
                    actor=request.user,
                    half_life=form.cleaned_data["half_life"] or None,
                    strength=form.cleaned_data["strength"] or None,
                )
            except ValidationError as e:
                for field, errors in e.message_dict.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            else:
                messages.success(request, "Fairness over time saved; the shares are recomputed.")
                return redirect("portal:fairness")
    else:
        form = FairnessForm(
            initial={
                "half_life": describe_half_life(current.half_life_seconds)
                if current.half_life_source == "admin"
                else "",
                "strength": current.strength if current.strength_source == "admin" else "",
            }
        )
    return render(
        request,
        "portal/fairness.html",
        {
            "form": form,
            "current": current,
            "half_life_text": describe_half_life(current.half_life_seconds),
        },
    )
