"""Rebalance: weights, tiers and guarantees of many teams; preview, then apply at once."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from portal.previews import PREVIEW_FAILED, present_whatif
from portal.views.common import require_admin
from quotas.exceptions import (
    PermissionDenied,
    QuotaExceeded,
)
from quotas.forms import (
    RebalanceFormSet,
    add_rebalance_errors,
    rebalance_initial,
)
from quotas.models import PriorityTier, Team
from quotas.rebalance import rebalance as rebalance_service
from scheduling.exceptions import DomainError as SchedulingError
from scheduling.services import what_if

logger = logging.getLogger(__name__)


def _rebalance_formset(request):
    teams = list(
        Team.objects.filter(active=True)
        .select_related("parent", "tier")
        .prefetch_related("quotas")
        .order_by("slug")
    )
    initial = [
        rebalance_initial(team, {q.resource: q.guarantee for q in team.quotas.all()})
        for team in teams
    ]
    tiers = [(str(t.pk), t.name) for t in PriorityTier.objects.order_by("-value", "name")]
    data = request.POST if request.method == "POST" else None
    formset = RebalanceFormSet(
        data, initial=initial, prefix="teams", form_kwargs={"tier_choices": tiers}
    )
    rows = [
        {"team": team, "form": form, "quotas": {q.resource: q for q in team.quotas.all()}}
        for team, form in zip(teams, formset.forms, strict=False)
    ]
    return formset, rows


def _rebalance_preview(changes: dict, formset, errors: list[str]) -> dict | None:
    """what_if for the rebalance (tiers do not move fair shares); errors go onto the rows."""
    shares = {slug: {k: v for k, v in c.items() if k != "tier"} for slug, c in changes.items()}
    try:
        return present_whatif(what_if({s: c for s, c in shares.items() if c}).to_dict())
    except ValidationError as e:
        errors.extend(add_rebalance_errors(e, formset))
    except SchedulingError as e:
        errors.append(str(e))
    except Exception:  # see whatif: logged with its traceback
        logger.exception("rebalance preview failed for %s", sorted(changes))
        errors.append(PREVIEW_FAILED)
    return None


@login_required
@require_http_methods(["GET", "POST"])
def rebalance(request):
    """Edit weights, tiers and guarantees of many teams; Preview shows the plan, Apply commits
    every change in one transaction (or none) and the cluster syncs after commit."""
    require_admin(request.user)
    formset, rows = _rebalance_formset(request)
    whatif = None
    errors: list[str] = []
    note = (request.POST.get("note") or "").strip()[:500]
    if request.method == "POST":
        action = request.POST.get("action", "preview")
        if formset.is_valid():
            changes = formset.changes()
            if not changes:
                errors.append("Nothing changed: edit a weight, tier or guarantee first.")
            elif action == "apply":
                try:
                    result = rebalance_service(changes, actor=request.user, note=note)
                except ValidationError as e:
                    errors.extend(add_rebalance_errors(e, formset))
                except QuotaExceeded as e:
                    errors.append(str(e))
                except PermissionDenied as e:
                    raise HttpForbidden(str(e)) from e
                else:
                    messages.success(
                        request,
                        f"Rebalanced {len(set(result.teams) | {s for s, _ in result.quotas})} "
                        "team(s). Shares are recomputed and the cluster syncs in a moment.",
                    )
                    return redirect("portal:rebalance")
            else:
                whatif = _rebalance_preview(changes, formset, errors)
    return render(
        request,
        "quotas/rebalance.html",
        {
            "formset": formset,
            "rows": rows,
            "whatif": whatif,
            "errors": errors,
            "note": note,
        },
    )
