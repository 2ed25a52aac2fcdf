"""Quota requests: the request form with its live preview, the list, one request, withdraw."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from monitoring.models import CapacitySnapshot
from portal.forms import NoteForm
from portal.previews import fresh_whatif, present_whatif, request_preview, with_overlaps
from quotas import decisions, grants
from quotas.access import get_team_for_user
from quotas.choices import QuotaRequestStatus
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
)
from quotas.forms import (
    DecisionForm,
    QuotaLineFormSet,
    QuotaRequestForm,
    add_service_errors,
)
from quotas.models import AuditEvent, QuotaRequest, Team
from quotas.overlaps import overlaps
from quotas.quantities import GPU, format_quantity
from quotas.querysets import is_site_admin
from scheduling.admitting import admitting_change
from scheduling.choices import SyncStatus
from scheduling.visibility import share_slugs

REQUESTS_PER_PAGE = 50


def _request_forms(request, team: Team):
    current = {q.resource: (q.guarantee, q.limit) for q in team.quotas.order_by("resource")}
    data = request.POST if request.method == "POST" else None
    form = QuotaRequestForm(data)
    formset = QuotaLineFormSet(data, current=current, prefix="lines")
    return form, formset


def resource_names(team: Team) -> list[str]:
    existing = set(team.quotas.values_list("resource", flat=True))
    names = set(CapacitySnapshot.latest_amounts()) | {GPU, "cpu", "memory"}
    return sorted(names - existing)


def _lead_team(request, slug: str) -> Team:
    team, can_write = get_team_for_user(request.user, slug)
    if not can_write:
        raise HttpForbidden("Only the team's leads and site admins may request quota.")
    return team


def invalid_fields(*forms) -> list[str]:
    """The HTML names of the fields with errors (the preview highlights them live)."""
    names = []
    for form in forms:
        for name in form.errors if form.is_bound else ():
            if name != "__all__" and name in form.fields:
                names.append(form.add_prefix(name))
    return names


def _line_preview(team: Team, lines, *, viewer) -> tuple[dict | None, str]:
    if not lines:
        return None, "Change an amount to see how the fair shares would move."
    change = {
        "guarantee": {line.resource: line.guarantee for line in lines},
        "limit": {line.resource: line.limit for line in lines},
    }
    return fresh_whatif({team.slug: change}, viewer=viewer, focus=team.slug), ""


@login_required
@require_http_methods(["GET", "POST"])
def quotarequest_create(request, slug: str):
    """Request quota for a team (leads and admins): amounts per resource, optional window.

    After a validation error the page keeps the preview of the posted amounts (or, when the
    amounts themselves are invalid, the hint and their live highlight)."""
    team = _lead_team(request, slug)
    form, formset = _request_forms(request, team)
    whatif, hint, lines = None, "", None
    if request.method == "GET" and request.GET.getlist("workload"):
        form, formset, whatif = _prefill_from_workloads(request, team)
    if request.method == "POST" and formset.is_valid():
        lines, line_forms = formset.lines()
        whatif, hint = _line_preview(team, lines, viewer=request.user)
    elif request.method == "POST":
        hint = "Fix the highlighted amounts to see the effect."
    if request.method == "POST" and form.is_valid() and lines is not None:
        if not lines:
            form.add_error(None, "Change at least one amount, or add a resource.")
        else:
            try:
                quota_request = decisions.submit_request(
                    team=team,
                    requester=request.user,
                    lines=lines,
                    justification=form.cleaned_data["justification"],
                    window_start=form.cleaned_data.get("window_start"),
                    window_end=form.cleaned_data.get("window_end"),
                )
            except ValidationError as e:
                add_service_errors(e, form, formset=formset, line_forms=line_forms)
            except PermissionDenied as e:
                raise HttpForbidden(str(e)) from e
            else:
                url = reverse("portal:quotarequest", args=[quota_request.pk])
                messages.success(request, f"Request #{quota_request.pk} sent to the approvers.")
                for overlap in overlaps([quota_request]).get(quota_request.pk, []):
                    messages.warning(request, overlap.message)
                return redirect(url)
    return render(
        request,
        "quotas/quotarequest_form.html",
        {
            "team": team,
            "form": form,
            "formset": formset,
            "resource_names": resource_names(team),
            "whatif": whatif,
            "hint": hint,
            "invalid_fields": invalid_fields(form, *formset.forms)
            if request.method == "POST"
            else [],
        },
    )


def _prefill_from_workloads(request, team: Team):
    """The request form bound to the smallest change admitting the selected waiting workloads
    (``scheduling.admitting.admitting_change``), with its live preview already computed."""
    ids = [int(v) for v in request.GET.getlist("workload") if v.isdigit()]
    change = admitting_change(team, ids)
    current = {q.resource: (q.guarantee, q.limit) for q in team.quotas.order_by("resource")}
    data = {
        "lines-TOTAL_FORMS": str(len(current) + 1),
        "lines-INITIAL_FORMS": str(len(current)),
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
        "justification": change.justification,
        "tz": request.GET.get("tz", "UTC"),
    }
    for i, (resource, (guarantee, limit)) in enumerate(sorted(current.items())):
        new_guarantee, new_limit = change.lines.get(resource, (guarantee, limit))
        data[f"lines-{i}-guarantee"] = format_quantity(new_guarantee, resource)
        data[f"lines-{i}-limit"] = "" if new_limit is None else format_quantity(new_limit, resource)
    form = QuotaRequestForm(data)
    formset = QuotaLineFormSet(data, current=current, prefix="lines")
    whatif = None
    if formset.is_valid():
        lines, _ = formset.lines()
        whatif, _hint = _line_preview(team, lines, viewer=request.user)
    if not change.workloads:
        messages.info(request, "None of the selected workloads waits any more.")
    elif not change.lines:
        messages.info(request, "The current quota already admits the selected workloads.")
    return form, formset, whatif


@login_required
@require_POST
def quotarequest_preview(request, slug: str):
    """The live what-if of the request form (htmx partial); never writes anything."""
    team = _lead_team(request, slug)
    _form, formset = _request_forms(request, team)
    whatif = None
    hint = ""
    if not formset.is_valid():
        hint = "Fix the highlighted amounts to see the effect."
    else:
        lines, _ = formset.lines()
        whatif, hint = _line_preview(team, lines, viewer=request.user)
    return render(
        request,
        "_partials/whatif.html",
        {
            "whatif": whatif,
            "hint": hint,
            "focus": team.slug,
            "invalid_fields": invalid_fields(*formset.forms),
        },
    )


@login_required
@require_GET
def quotarequest_list(request):
    """Requests the user may see, newest first; filter by ``status`` and ``team``."""
    qs = (
        QuotaRequest.objects.visible_to(request.user)
        .select_related("team", "requester", "decided_by")
        .prefetch_related("lines")
        .order_by("-created", "-id")
    )
    status = request.GET.get("status", "")
    if status in QuotaRequestStatus.values:
        qs = qs.filter(status=status)
    else:
        status = ""
    team = request.GET.get("team", "")
    if team:
        qs = qs.filter(team__slug=team)
    page = Paginator(qs, REQUESTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "quotas/quotarequest_list.html",
        {
            "page": page,
            "status": status,
            "team_filter": team,
            "statuses": QuotaRequestStatus.choices,
            "is_admin": is_site_admin(request.user),
        },
    )


def visible_request(user, pk: int) -> QuotaRequest:
    return get_object_or_404(
        QuotaRequest.objects.visible_to(user)
        .select_related("team", "requester", "decided_by")
        .prefetch_related("lines"),
        pk=pk,
    )


def _can_withdraw(user, quota_request: QuotaRequest) -> bool:
    return quota_request.status == QuotaRequestStatus.PENDING and (
        quota_request.requester_id == user.pk
        or Team.objects.led_by(user).filter(pk=quota_request.team_id).exists()
    )


def detail_context(request, quota_request: QuotaRequest, form: DecisionForm | None = None):
    admin = is_site_admin(request.user)
    pending = quota_request.status == QuotaRequestStatus.PENDING
    if pending and admin and form is None:
        form = DecisionForm(quota_request=quota_request)
    visible = share_slugs(request.user)
    return {
        "quota_request": quota_request,
        "is_admin": admin,
        "can_withdraw": _can_withdraw(request.user, quota_request),
        "can_end_early": can_end_early(request.user, quota_request),
        "end_form": NoteForm(prefix="end"),
        "decision_form": form if pending and admin else None,
        "stored_preview": present_whatif(
            quota_request.preview, focus=quota_request.team.slug, visible=visible
        ),
        "whatif": with_overlaps(
            present_whatif(
                request_preview(quota_request, viewer=request.user),
                focus=quota_request.team.slug,
                visible=visible,
            ),
            quota_request,
        )
        if pending
        else None,
        # The syncs started to apply it (a merged one shows the run that included it); sync
        # pages are open to every signed-in user, who sees there only their teams' objects.
        "sync_runs": list(
            quota_request.sync_runs.exclude(status=SyncStatus.MERGED).order_by("created", "pk")
        ),
        "audit_events": list(
            AuditEvent.objects.filter(
                object_type=QuotaRequest._meta.label, object_id=str(quota_request.pk)
            ).select_related("team")
        ),
        # The before/after (the team's whole quota) is for its leads and admins, as on the team
        # page and in the API; members and viewers see who did what, and when (issue 27).
        "audit_changes_hidden": not (
            admin or Team.objects.led_by(request.user).filter(pk=quota_request.team_id).exists()
        ),
    }


@login_required
@require_GET
def quotarequest_detail(request, pk: int):
    """One request: its lines, status, the preview it was decided on (or a live one while
    pending), withdraw for the requester/leads and the decision form for admins."""
    quota_request = visible_request(request.user, pk)
    return render(
        request, "quotas/quotarequest_detail.html", detail_context(request, quota_request)
    )


@login_required
@require_POST
def quotarequest_withdraw(request, pk: int):
    quota_request = visible_request(request.user, pk)
    try:
        quota_request = decisions.withdraw_request(quota_request.pk, actor=request.user)
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    except InvalidTransition as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Request #{quota_request.pk} withdrawn.")
    return redirect("portal:quotarequest", pk=quota_request.pk)


def can_end_early(user, quota_request: QuotaRequest) -> bool:
    """A running or scheduled temporary grant, and the user an admin or a lead of its team."""
    return (
        quota_request.is_temporary
        and quota_request.status in (QuotaRequestStatus.ACTIVE, QuotaRequestStatus.APPROVED)
        and Team.objects.led_by(user).filter(pk=quota_request.team_id).exists()
    )


@login_required
@require_POST
def quotarequest_end(request, pk: int):
    """End a temporary grant now (admins, the team's leads): its quota reverts at once."""
    quota_request = visible_request(request.user, pk)
    form = NoteForm(request.POST, prefix="end")
    note = form.cleaned_data["note"] if form.is_valid() else ""
    try:
        quota_request = grants.end_temporary_grant(quota_request.pk, actor=request.user, note=note)
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    except InvalidTransition as e:
        messages.error(request, str(e))
    else:
        messages.success(
            request,
            f"Temporary grant #{quota_request.pk} ended; the quota of "
            f"{quota_request.team.slug} is back and the cluster syncs in a moment.",
        )
    return redirect("portal:quotarequest", pk=quota_request.pk)
