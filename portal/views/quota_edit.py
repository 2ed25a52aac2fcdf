"""Setting a team's guarantees and limits directly (site admins), with the request form's live
preview and the rules of an approval (``quotas.direct.set_team_quotas``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from portal.forms import NoteForm
from portal.previews import fresh_whatif
from portal.views.common import require_admin
from portal.views.requests import resource_names
from quotas import direct
from quotas.exceptions import PermissionDenied, QuotaExceeded
from quotas.forms import QuotaLineFormSet, add_service_errors
from quotas.models import Team


def _forms(request, team: Team):
    current = {q.resource: (q.guarantee, q.limit) for q in team.quotas.order_by("resource")}
    data = request.POST if request.method == "POST" else None
    return NoteForm(data), QuotaLineFormSet(data, current=current, prefix="lines")


def _add_errors(error: ValidationError, form, formset, lines, line_forms) -> None:
    """Service keys ``lines[i].field`` go to their row (``add_service_errors``); hierarchy keys
    ``<resource>.guarantee``/``.limit`` to the row of that resource."""
    rows = {line.resource: index for line, index in zip(lines, line_forms, strict=True)}
    rest = {}
    for key, messages_ in (
        error.message_dict.items() if hasattr(error, "error_dict") else [(None, error.messages)]
    ):
        resource, _, part = (key or "").rpartition(".")
        if part in ("guarantee", "limit") and resource in rows:
            formset.forms[rows[resource]].add_error(part, messages_)
        else:
            rest[key] = messages_
    if rest:
        add_service_errors(
            ValidationError({k or "__all__": v for k, v in rest.items()}),
            form,
            formset=formset,
            line_forms=line_forms,
        )


@login_required
@require_http_methods(["GET", "POST"])
def quota_edit(request, slug: str):
    """Set the team's guarantees and limits now; checked like an approval, one audit entry."""
    require_admin(request.user)
    team = get_object_or_404(Team, slug=slug)
    form, formset = _forms(request, team)
    if request.method == "POST" and form.is_valid() and formset.is_valid():
        lines, line_forms = formset.lines()
        if not lines:
            form.add_error(None, "Change at least one amount, or add a resource.")
        else:
            try:
                direct.set_team_quotas(
                    team, lines, actor=request.user, note=form.cleaned_data["note"]
                )
            except QuotaExceeded as e:
                row = next(
                    (
                        i
                        for line, i in zip(lines, line_forms, strict=True)
                        if line.resource == e.resource
                    ),
                    None,
                )
                if row is None:
                    form.add_error(None, str(e))
                else:
                    formset.forms[row].add_error("guarantee", str(e))
            except ValidationError as e:
                _add_errors(e, form, formset, lines, line_forms)
            except PermissionDenied as e:
                raise HttpForbidden(str(e)) from e
            else:
                messages.success(
                    request,
                    f"Quota of {team.slug} set. Shares are recomputed and the cluster syncs in a "
                    "moment.",
                )
                return redirect("portal:team", slug=team.slug)
    return render(
        request,
        "portal/quota_edit.html",
        {
            "team": team,
            "form": form,
            "formset": formset,
            "resource_names": resource_names(team),
        },
    )


@login_required
@require_POST
def quota_edit_preview(request, slug: str):
    """The live what-if of the direct edit (htmx partial); never writes anything."""
    require_admin(request.user)
    team = get_object_or_404(Team, slug=slug)
    _form, formset = _forms(request, team)
    whatif, hint = None, ""
    if not formset.is_valid():
        hint = "Fix the highlighted amounts to see the effect."
    else:
        lines, _ = formset.lines()
        if not lines:
            hint = "Change an amount to see how the fair shares would move."
        else:
            change = {
                "guarantee": {line.resource: line.guarantee for line in lines},
                "limit": {line.resource: line.limit for line in lines},
            }
            whatif = fresh_whatif({team.slug: change}, viewer=request.user, focus=team.slug)
    return render(
        request, "_partials/whatif.html", {"whatif": whatif, "hint": hint, "focus": team.slug}
    )
