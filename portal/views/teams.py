"""The team page (quotas against usage over time, alerts, budgets, requests, audit) and its
member management forms (leads and admins).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.db.models import Q, Subquery, Sum
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from monitoring.budgets import BudgetUse, budget_use
from monitoring.choices import AlertStatus, RollupPeriod
from monitoring.gpu_alerts import current_gpu_alerts
from monitoring.models import CapacitySnapshot, UsageRollup, UsageSample
from monitoring.usage import current_usage, gpus_by_product, product_rows, subtree_ids
from monitoring.workloads import team_workloads_context
from portal.history import share_history_chart
from quotas import members as member_services
from quotas import transitions as transition_services
from quotas.access import get_team_for_user
from quotas.choices import TransitionState
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
)
from quotas.forms import (
    MemberAddForm,
    MemberRoleForm,
)
from quotas.models import AuditEvent, Team, TeamQuota, Transition
from quotas.quantities import GPU
from quotas.querysets import is_site_admin
from scheduling.explanation import explanation_table
from scheduling.models import ShareComputation, ShareSnapshot

CHART_DAYS = 7
AUDIT_ROWS = 50
# Units the charts plot in (the tables show canonical quantities).
_CHART_SCALE = {"memory": (Decimal(2**30), "GiB"), "cpu": (Decimal(1), "cores")}


def _usage_chart(team: Team, quotas: dict[str, TeamQuota], *, now: datetime) -> dict:
    """Hourly allocated/pending/guarantee per resource for the last CHART_DAYS days, plus the
    current limit, in chart units (GiB, cores, devices). A department's: its subtree's."""
    start = now - timedelta(days=CHART_DAYS)
    series: dict[str, dict[datetime, dict[str, Decimal]]] = defaultdict(dict)
    for row in (
        UsageRollup.objects.filter(
            team_id__in=subtree_ids(team), period=RollupPeriod.HOUR, start__gte=start
        )
        .values("start", "resource")
        .annotate(
            allocated=Sum("allocated_hours"),
            pending=Sum("pending_hours"),
            # The team's own guarantee: a department's covers its teams', not adds to them.
            guarantee=Sum("guarantee_hours", filter=Q(team_id=team.pk)),
        )
        .order_by("resource", "start")
    ):
        series[row["resource"]][row["start"]] = row
    charts = []
    for resource in sorted(series, key=lambda r: (r != GPU, "/" not in r, r)):
        points = series[resource]
        scale, unit = _CHART_SCALE.get(resource, (Decimal(1), ""))
        hours = sorted(points)

        def values(key, points=points, hours=hours, scale=scale):
            return [float(round((points[h][key] or 0) / scale, 3)) for h in hours]

        datasets = [
            {"label": "Allocated", "data": values("allocated")},
            {"label": "Pending", "data": values("pending")},
            {"label": "Guarantee", "data": values("guarantee"), "dashed": True},
        ]
        quota = quotas.get(resource)
        if quota is not None and quota.limit is not None:
            datasets.append(
                {
                    "label": "Limit (now)",
                    "data": [float(round(quota.limit / scale, 3))] * len(hours),
                    "dashed": True,
                }
            )
        charts.append(
            {
                "type": "line",
                "resource": resource,
                "unit": unit,
                "labels": [h.isoformat() for h in hours],
                "datasets": datasets,
            }
        )
    return {"charts": charts}


def _budget_rows(team: Team, *, now: datetime) -> list[BudgetUse]:
    """The team's budget use this month: ``monitoring.budgets.budget_use``, as everywhere."""
    return budget_use(now=now, teams=[team])


@login_required
@require_GET
def team_detail(request, slug: str):
    """A team: quotas vs usage over time, current GPU alerts, namespaces, members, budgets, idle
    GPUs, requests, audit trail. Leads (and admins) also get the member management forms."""
    team, can_write = get_team_for_user(request.user, slug)
    return render(request, "quotas/team_detail.html", _team_context(request, team, can_write))


def _team_context(request, team: Team, can_write: bool, **extra) -> dict:
    now = timezone.now()
    quotas = {q.resource: q for q in team.quotas.order_by("resource")}
    # The team's figures (a department's: its subtree's) from the one source of usage now.
    now_usage = current_usage()
    latest = now_usage.taken_at
    usage = now_usage.of(team.pk)
    by_namespace: dict[str, dict[str, Decimal]] = defaultdict(dict)
    if latest is not None:
        for sample in UsageSample.objects.filter(team=team, taken_at=latest, allocated__gt=0):
            by_namespace[sample.namespace][sample.resource] = (
                by_namespace[sample.namespace].get(sample.resource, Decimal(0)) + sample.allocated
            )
    # The latest computation's, as on the dashboard (not an older one the team was last in).
    latest_computation = ShareComputation.objects.order_by("-computed_at", "-id").values("id")[:1]
    share = ShareSnapshot.objects.filter(
        team=team, computation_id=Subquery(latest_computation)
    ).first()
    fair = share.fair_allocation if share else {}
    quota_rows = []
    for resource in sorted(quotas.keys() | usage.keys()):
        quota = quotas.get(resource)
        allocated = usage[resource]["allocated"] if resource in usage else Decimal(0)
        limit = quota.limit if quota else None
        quota_rows.append(
            {
                "resource": resource,
                "guarantee": quota.guarantee if quota else None,
                "limit": limit,
                "allocated": allocated,
                "pending": usage[resource]["pending"] if resource in usage else Decimal(0),
                "fair": fair.get(resource),
                "scale": limit or allocated or 1,
                "over": limit is not None and allocated > limit,
            }
        )
    namespaces = [
        {"namespace": ns, "allocated": sorted(by_namespace.get(ns.name, {}).items())}
        for ns in team.namespaces.order_by("name")
    ]
    memberships = list(team.memberships.select_related("user").order_by("role", "user__username"))
    member_rows = [
        {
            "membership": m,
            "form": MemberRoleForm(initial={"role": m.role}, prefix=f"m{m.pk}"),
        }
        for m in memberships
    ]
    requests_qs = (
        team.quota_requests.select_related("requester", "decided_by")
        .prefetch_related("lines")
        .order_by("-created", "-id")[:20]
    )
    context = {
        "team": team,
        "can_write": can_write,
        "is_admin": is_site_admin(request.user),
        "quota_rows": quota_rows,
        "usage_taken_at": latest,
        "share": share,
        "namespaces": namespaces,
        "member_rows": member_rows,
        "member_add_form": MemberAddForm(prefix="add"),
        "budgets": _budget_rows(team, now=now),
        "idle_alerts": list(
            team.idle_gpu_alerts.filter(status=AlertStatus.OPEN).order_by("-gpus", "namespace")
        ),
        "gpu_alerts": current_gpu_alerts(team=team, now=now),
        "quota_requests": list(requests_qs),
        # The audit trail (with before/after) is for the team's leads and admins, as in the API.
        "audit_events": (
            list(AuditEvent.objects.filter(team=team).select_related("team")[:AUDIT_ROWS])
            if can_write
            else []
        ),
        "chart": _usage_chart(team, quotas, now=now),
        "chart_days": CHART_DAYS,
        # Name only what the viewer may open: a department's member sees the department, not
        # necessarily its teams; a team's member not necessarily its department.
        "children": list(
            Team.objects.visible_to(request.user).filter(parent=team, active=True).order_by("slug")
        ),
        "parent_visible": team.parent_id is not None
        and Team.objects.visible_to(request.user).filter(pk=team.parent_id).exists(),
    }
    # What waits before the cluster takes on a change of this team (quotas.transitions).
    context["transitions"] = list(
        Transition.objects.filter(team=team, state=TransitionState.WAITING).select_related(
            "started_by"
        )
    )
    context["kueue_queues"] = _kueue_queues(team)
    # GPU-equivalents in use per GPU product (issue 34: DRA claims' GPUs with the pods').
    context["gpu_products"] = (
        product_rows(gpus_by_product(latest).get(team.pk, {})) if latest is not None else []
    )
    context["explanation"] = explanation_table(share.explanation, fair) if share else None
    context["share_history"] = share_history_chart(team, scale=_CHART_SCALE, now=now)
    context.update(team_workloads_context(team, sort=request.GET.get("wsort")))
    context.update(extra)
    return context


def _kueue_queues(team: Team) -> list[dict]:
    """What Kueue reported at the latest collection for the team's ClusterQueue (a department's:
    its Cohort and its ``<slug>.own``): empty unless the cluster runs Kueue."""
    latest = CapacitySnapshot.objects.order_by("-taken_at", "-id").values("kueue_queues").first()
    rows = []
    for name, status in sorted(((latest or {}).get("kueue_queues") or {}).items()):
        if status.get("team") != team.cluster_name:
            continue
        resources = sorted(set(status.get("in_use") or {}) | set(status.get("borrowed") or {}))
        rows.append(
            {
                "name": name,
                "kind": status.get("kind") or "ClusterQueue",
                "weighted_share": status.get("weighted_share"),
                "pending": status.get("pending", 0),
                "admitted": status.get("admitted", 0),
                "resources": [
                    {
                        "resource": r,
                        "in_use": Decimal(str((status.get("in_use") or {}).get(r, "0"))),
                        "borrowed": Decimal(str((status.get("borrowed") or {}).get(r, "0"))),
                    }
                    for r in resources
                ],
            }
        )
    return rows


# --------------------------------------------------------------------------- members


def _team_for_lead(request, slug: str) -> Team:
    team, can_write = get_team_for_user(request.user, slug)
    if not can_write:
        raise HttpForbidden("Only the team's leads and site admins may manage members.")
    return team


def _members_url(team: Team) -> str:
    return reverse("portal:team", args=[team.slug]) + "#members"


@login_required
@require_POST
def member_add(request, slug: str):
    team = _team_for_lead(request, slug)
    form = MemberAddForm(request.POST, prefix="add")
    if form.is_valid():
        try:
            membership = member_services.add_member(
                team,
                username=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
                actor=request.user,
            )
        except ValidationError as e:
            messages.error(request, " ".join(e.messages))
        except PermissionDenied as e:
            raise HttpForbidden(str(e)) from e
        else:
            messages.success(
                request,
                f"{membership.user.get_username()} joined {team.slug} as "
                f"{membership.get_role_display().lower()}.",
            )
    else:
        messages.error(request, "Give a username and a role.")
    return redirect(_members_url(team))


@login_required
@require_POST
def member_update(request, slug: str, membership_id: int):
    team = _team_for_lead(request, slug)
    form = MemberRoleForm(request.POST, prefix=f"m{membership_id}")
    if not form.is_valid():
        messages.error(request, "Choose lead, member or viewer.")
        return redirect(_members_url(team))
    try:
        membership = member_services.change_role(
            team, membership_id, role=form.cleaned_data["role"], actor=request.user
        )
    except (ValidationError, InvalidTransition) as e:
        messages.error(request, " ".join(getattr(e, "messages", [str(e)])))
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    else:
        messages.success(
            request,
            f"{membership.user.get_username()} is now {membership.get_role_display().lower()}.",
        )
    return redirect(_members_url(team))


@login_required
@require_POST
def member_remove(request, slug: str, membership_id: int):
    team = _team_for_lead(request, slug)
    try:
        member_services.remove_member(team, membership_id, actor=request.user)
    except (ValidationError, InvalidTransition) as e:
        messages.error(request, " ".join(getattr(e, "messages", [str(e)])))
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    else:
        messages.success(request, "Member removed.")
    return redirect(_members_url(team))


# --------------------------------------------------------------------------- transitions


@login_required
@require_POST
def transition_cancel(request, slug: str, transition_id: int):
    """Cancel a waiting transition of the team (site admins): the team is back as it was."""
    team, _ = get_team_for_user(request.user, slug)
    if not Transition.objects.filter(pk=transition_id, team=team).exists():
        raise Http404("No such transition.")
    try:
        transition_services.cancel_transition(transition_id, actor=request.user)
    except InvalidTransition as e:
        messages.error(request, str(e))
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    else:
        messages.success(request, "Transition cancelled: the team is back as it was.")
    return redirect("portal:team", slug=team.slug)
