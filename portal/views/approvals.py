"""The approval queue, the approver's live preview and the decision."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.previews import present_whatif, request_preview, with_overlaps
from portal.views.common import require_admin, safe_next
from portal.views.requests import detail_context, invalid_fields, visible_request
from quotas import services as quota_services
from quotas.choices import QuotaRequestStatus
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
    QuotaExceeded,
    SelfDecisionRefused,
)
from quotas.forms import DecisionForm
from quotas.models import QuotaRequest
from quotas.overlaps import overlaps

QUEUE_PER_PAGE = 25


@login_required
@require_GET
def approval_queue(request):
    """Pending requests, oldest first, each with a decision form; previews load lazily (htmx)
    so the page itself runs a constant number of queries."""
    require_admin(request.user)
    qs = (
        QuotaRequest.objects.filter(status=QuotaRequestStatus.PENDING)
        .select_related("team", "requester")
        .prefetch_related("lines")
        .order_by("created", "id")
    )
    page = Paginator(qs, QUEUE_PER_PAGE).get_page(request.GET.get("page"))
    found = overlaps(page.object_list)  # two queries for the page
    items = [
        {"request": r, "form": DecisionForm(quota_request=r), "overlaps": found.get(r.pk, [])}
        for r in page
    ]
    return render(request, "quotas/approval_queue.html", {"page": page, "items": items})


@login_required
@require_http_methods(["GET", "POST"])
def approval_preview(request, pk: int):
    """The what-if of a pending request recomputed now (GET), or with the approver's adjusted
    amounts from the decision form (POST). An htmx partial; never writes."""
    require_admin(request.user)
    quota_request = get_object_or_404(
        QuotaRequest.objects.select_related("team").prefetch_related("lines"), pk=pk
    )
    adjustments = None
    hint = ""
    invalid: list[str] = []
    if request.method == "POST":
        form = DecisionForm(request.POST, quota_request=quota_request)
        if form.is_valid():
            adjustments = form.adjustments()
        else:
            hint = "Fix the highlighted amounts to see the effect."
            invalid = invalid_fields(form)
    whatif = None
    if not hint:
        whatif = with_overlaps(
            present_whatif(
                request_preview(quota_request, adjustments), focus=quota_request.team.slug
            ),
            quota_request,
        )
    return render(
        request,
        "_partials/whatif.html",
        {
            "whatif": whatif,
            "hint": hint,
            "focus": quota_request.team.slug,
            "invalid_fields": invalid,
        },
    )


@login_required
@require_POST
def quotarequest_decide(request, pk: int):
    """Approve (with optional adjustments, storing the preview) or reject (reason required).

    Errors — over capacity, bad amounts, a missing reason — are shown on the request page next to
    the fields they concern.
    """
    require_admin(request.user)
    quota_request = visible_request(request.user, pk)
    form = DecisionForm(request.POST, quota_request=quota_request)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        form.add_error(None, "Choose approve or reject.")
    elif form.is_valid():
        note = form.cleaned_data["note"]
        try:
            if decision == "approve":
                adjustments = form.adjustments()
                decided = quota_services.approve_request(
                    quota_request.pk,
                    approver=request.user,
                    note=note,
                    adjustments=adjustments,
                    preview=request_preview(quota_request, adjustments),
                )
            else:
                decided = quota_services.reject_request(
                    quota_request.pk, approver=request.user, note=note
                )
        except QuotaExceeded as e:
            form.add_error(form.field_for(e.resource), str(e))
        except ValidationError as e:
            _add_decision_errors(form, e)
        except InvalidTransition as e:
            messages.error(request, str(e))
            return redirect("portal:quotarequest", pk=quota_request.pk)
        except SelfDecisionRefused as e:
            form.add_error(None, str(e))
        except PermissionDenied as e:
            raise HttpForbidden(str(e)) from e
        else:
            verb = "approved" if decision == "approve" else "rejected"
            messages.success(request, f"Request #{decided.pk} for {decided.team.slug} {verb}.")
            return redirect(safe_next(request, reverse("portal:approval_queue")))
    quota_request.refresh_from_db()
    return render(
        request,
        "quotas/quotarequest_detail.html",
        detail_context(request, quota_request, form=form),
    )


def _add_decision_errors(form: DecisionForm, error: ValidationError) -> None:
    """Service keys: ``note``, ``adjustments``, ``<resource>.guarantee``/``.limit``."""
    for key, messages_ in (
        error.message_dict.items() if hasattr(error, "error_dict") else [(None, error.messages)]
    ):
        resource, _, part = (key or "").rpartition(".")
        field = form.field_for(resource, part) if part in ("guarantee", "limit") else None
        if key == "note":
            field = "note"
        form.add_error(field, messages_)
