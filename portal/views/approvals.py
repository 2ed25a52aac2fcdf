"""The approval queue, the approver's live preview and the decision."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.forms import BulkRejectForm, QueueFilterForm
from portal.previews import present_whatif, request_preview, with_overlaps
from portal.views.common import require_admin, safe_next
from portal.views.requests import detail_context, invalid_fields, visible_request
from quotas import decisions
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
from scheduling.visibility import share_slugs

QUEUE_PER_PAGE = 25


def _pending():
    return QuotaRequest.objects.filter(status=QuotaRequestStatus.PENDING)


@login_required
@require_GET
def approval_queue(request):
    """Pending requests, oldest first unless sorted otherwise, filtered by team, department,
    resource, age and temporariness; each with a decision form, the old ones highlighted.
    Previews load lazily (htmx) so the page itself runs a constant number of queries."""
    require_admin(request.user)
    now = timezone.now()
    filters = QueueFilterForm(request.GET)
    qs = filters.apply(
        _pending().select_related("team", "team__parent", "requester").prefetch_related("lines"),
        now=now,
    )
    page = Paginator(qs, QUEUE_PER_PAGE).get_page(request.GET.get("page"))
    warn = timedelta(days=settings.FAIRSHARE_APPROVAL_AGE_WARN_DAYS)
    found = overlaps(page.object_list)  # two queries for the page
    items = [
        {
            "request": r,
            "form": DecisionForm(quota_request=r),
            "age_days": (now - r.created).days,
            "old": now - r.created >= warn,
            "overlaps": found.get(r.pk, []),
        }
        for r in page
    ]
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "quotas/approval_queue.html",
        {
            "page": page,
            "items": items,
            "filters": filters,
            "filter_query": query.urlencode(),
            "filtered": any(v for k, v in request.GET.items() if k not in ("page", "sort")),
            "total_pending": _pending().count(),
            "bulk_form": BulkRejectForm(prefix="bulk"),
            "warn_days": settings.FAIRSHARE_APPROVAL_AGE_WARN_DAYS,
        },
    )


@login_required
@require_POST
def approval_bulk_reject(request):
    """Reject the ticked requests with one reason, in one transaction (all or none)."""
    require_admin(request.user)
    form = BulkRejectForm(
        request.POST, prefix="bulk", pending_ids=_pending().values_list("pk", flat=True)
    )
    back = safe_next(request, reverse("portal:approval_queue"))
    if not form.is_valid():
        for field, errors in form.errors.items():
            label = "Choose requests" if field == "requests" else "Reason"
            messages.error(request, f"{label}: {' '.join(errors)}")
        return redirect(back)
    try:
        rejected = decisions.reject_requests(
            form.cleaned_data["requests"], approver=request.user, note=form.cleaned_data["note"]
        )
    except (InvalidTransition, SelfDecisionRefused) as e:
        messages.error(request, f"Nothing was rejected: {e}")
    except ValidationError as e:
        messages.error(request, "Nothing was rejected: " + " ".join(e.messages))
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    else:
        names = ", ".join(f"#{r.pk}" for r in rejected)
        messages.success(request, f"Rejected {len(rejected)} request(s): {names}.")
    return redirect(back)


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
                request_preview(quota_request, adjustments, viewer=request.user),
                focus=quota_request.team.slug,
                visible=share_slugs(request.user),
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
                decided = decisions.approve_request(
                    quota_request.pk,
                    approver=request.user,
                    note=note,
                    adjustments=adjustments,
                    preview=request_preview(quota_request, adjustments),
                )
            else:
                decided = decisions.reject_request(
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
