"""Server-rendered pages of the quotas app: dashboard, team page, quota requests, approvals,
membership and rebalance.

Each view parses, authorizes (``visible_to``/``led_by`` through ``access``), calls a service and
renders (STYLE §2). Pages that list teams run a constant number of queries whatever the number
of teams. Previews (what-if) come from ``scheduling.services`` and are rendered by
``_partials/whatif.html`` from the JSON shape ``WhatIf.to_dict()`` returns, so a stored preview
(``QuotaRequest.preview``) and a fresh one look the same.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Max, OuterRef, Q, Subquery, Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from monitoring.choices import AlertStatus, RollupPeriod
from monitoring.models import CapacitySnapshot, IdleGpuAlert, UsageRollup, UsageSample
from monitoring.workloads import (
    admitting_change,
    dashboard_waiting_context,
    team_workloads_context,
)
from quotas import members as member_services
from quotas import services as quota_services
from quotas.access import get_team_for_user
from quotas.choices import QuotaRequestStatus
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
    QuotaExceeded,
    SelfDecisionRefused,
)
from quotas.forms import (
    DecisionForm,
    MemberAddForm,
    MemberRoleForm,
    QuotaLineFormSet,
    QuotaRequestForm,
    RebalanceFormSet,
    add_rebalance_errors,
    add_service_errors,
    rebalance_initial,
)
from quotas.models import AuditEvent, Membership, PriorityTier, QuotaRequest, Team, TeamQuota
from quotas.quantities import GPU, format_quantity
from quotas.querysets import is_site_admin
from quotas.rebalance import rebalance as rebalance_service
from scheduling.exceptions import DomainError as SchedulingError
from scheduling.models import ShareComputation, ShareSnapshot, SyncRun
from scheduling.visibility import sees_every_share, share_slugs

logger = logging.getLogger(__name__)

CHART_DAYS = 7
REQUESTS_PER_PAGE = 50
QUEUE_PER_PAGE = 25
AUDIT_ROWS = 50
PREVIEW_FAILED = "The preview could not be computed; the error has been logged for the admins."
# Units the charts plot in (the tables show canonical quantities).
_CHART_SCALE = {"memory": (Decimal(2**30), "GiB"), "cpu": (Decimal(1), "cores")}


def _require_admin(user) -> None:
    if not is_site_admin(user):
        raise HttpForbidden("Only site admins may open this page.")


def _decimal(value) -> Decimal:
    return Decimal(str(value)) if value not in (None, "") else Decimal(0)


def _safe_next(request, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


# --------------------------------------------------------------------------- what-if display


def present_whatif(
    data: dict | None, *, focus: str | None = None, visible: frozenset[str] | None = None
) -> dict | None:
    """Turn ``WhatIf.to_dict()`` (fresh or stored) into rows the partial displays.

    ``focus`` is the team the change is for: its rows come first. Other teams are listed only
    when their fair allocation changes. ``visible`` (``scheduling.visibility.share_slugs``) are
    the teams the viewer may see by name; the others' changes are summed into one anonymous
    ``others`` line (None: every team by name). Returns None for an empty (never computed)
    preview.
    """
    if not data:
        return None
    if data.get("error"):
        return {"error": data["error"]}
    teams = []
    for team in data.get("teams", []):
        before, after = team.get("before", {}), team.get("after", {})
        fair_before, fair_after = (
            before.get("fair_allocation", {}),
            after.get("fair_allocation", {}),
        )
        delta = team.get("delta", {})
        rows = [
            {
                "resource": resource,
                "before": fair_before.get(resource),
                "after": fair_after.get(resource),
                "delta": delta.get(resource, "0"),
                "lost": _decimal(delta.get(resource)) < 0,
                "moved": _decimal(delta.get(resource)) != 0,
            }
            for resource in sorted(fair_before.keys() | fair_after.keys() | delta.keys())
        ]
        teams.append(
            {
                "slug": team.get("team"),
                "weight_before": before.get("weight"),
                "weight_after": after.get("weight"),
                "share_before": before.get("fair_share"),
                "share_after": after.get("fair_share"),
                "rows": rows,
                "changed": any(_decimal(v) != 0 for v in delta.values())
                or before.get("weight") != after.get("weight"),
            }
        )

    def named(slug) -> bool:
        return visible is None or slug == focus or slug in visible

    losers = [
        {
            "slug": slug,
            "amounts": [
                {"resource": r, "amount": a} for r, a in sorted(amounts.items()) if _decimal(a) > 0
            ],
        }
        for slug, amounts in sorted(data.get("losers", {}).items())
        if slug != focus and named(slug)
    ]
    hidden_losses: dict[str, Decimal] = defaultdict(Decimal)
    for slug, amounts in data.get("losers", {}).items():
        if slug != focus and not named(slug):
            for resource, amount in amounts.items():
                hidden_losses[resource] += _decimal(amount)
    if any(amount > 0 for amount in hidden_losses.values()):
        losers.append(
            {
                "slug": None,  # "other teams", together
                "amounts": [
                    {"resource": r, "amount": str(a)}
                    for r, a in sorted(hidden_losses.items())
                    if a > 0
                ],
            }
        )
    focused = next((t for t in teams if t["slug"] == focus), None)
    hidden = [t for t in teams if t["changed"] and not named(t["slug"])]
    return {
        "computed_at": _parse_time(data.get("computed_at")),
        "usage_taken_at": _parse_time(data.get("usage_taken_at")),
        "focus": focused,
        "changed_teams": [
            t for t in teams if t["changed"] and t["slug"] != focus and named(t["slug"])
        ],
        "others": _sum_rows(hidden) if hidden else None,
        "losers": [loser for loser in losers if loser["amounts"]],
        "flags": data.get("flags", []),
        "blocking": any(f.get("kind") == "guarantees-over-capacity" for f in data.get("flags", [])),
    }


def _sum_rows(teams: list[dict]) -> dict:
    """The per-resource before/after/change of several teams' preview rows, summed."""
    totals: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    for team in teams:
        for row in team["rows"]:
            total = totals[row["resource"]]
            total[0] += _decimal(row["before"])
            total[1] += _decimal(row["after"])
            total[2] += _decimal(row["delta"])
    return {
        "rows": [
            {
                "resource": resource,
                "before": str(before),
                "after": str(after),
                "delta": str(delta),
                "lost": delta < 0,
                "moved": delta != 0,
            }
            for resource, (before, after, delta) in sorted(totals.items())
        ]
    }


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _whatif(changes: dict, *, viewer, focus: str | None = None) -> dict:
    """Run ``what_if``; a problem becomes ``{"error": ...}`` (shown instead of the preview)."""
    from scheduling.services import what_if

    try:
        return present_whatif(what_if(changes).to_dict(), focus=focus, visible=share_slugs(viewer))
    except ValidationError as e:
        return {"error": " ".join(e.messages)}
    except SchedulingError as e:
        return {"error": str(e)}
    except Exception:
        # A preview is advice next to a form: a bug in the solver must not take the form (or
        # the approval) down with it. It is logged with its traceback, not swallowed.
        logger.exception("what-if preview failed for %s", sorted(changes))
        return {"error": PREVIEW_FAILED}


def _request_preview(quota_request: QuotaRequest, adjustments=None) -> dict:
    """``what_if_for_request`` as JSON (stored on approval); errors as ``{"error": ...}``."""
    from scheduling.services import what_if_for_request

    try:
        return what_if_for_request(quota_request, adjustments).to_dict()
    except ValidationError as e:
        return {"error": " ".join(e.messages)}
    except SchedulingError as e:
        return {"error": str(e)}
    except Exception:  # see _whatif: logged with its traceback
        logger.exception("what-if preview failed for request #%s", quota_request.pk)
        return {"error": PREVIEW_FAILED}


# --------------------------------------------------------------------------- dashboard


DASHBOARD_PAGE_SIZE = 50
DASHBOARD_CHART_TEAMS = 30
DASHBOARD_SORTS = {
    "team": lambda row: row["team"].slug,
    "weight": lambda row: (row["team"].weight, row["team"].slug),
    "share": lambda row: (row["share"].dominant_share if row["share"] else -1, row["team"].slug),
    "fair": lambda row: (row["share"].fair_share if row["share"] else -1, row["team"].slug),
    "gpus": lambda row: (row["gpu_allocated"], row["team"].slug),
    "requests": lambda row: (row["team"].pending_requests, row["team"].slug),
}


@login_required
@require_GET
def home(request):
    """Dashboard: capacity, every visible team's quota, usage and fair share, idle GPUs, sync.

    A constant number of queries whatever the number of teams.
    """
    user = request.user
    admin = is_site_admin(user)
    my_role = Membership.objects.filter(team=OuterRef("pk"), user=user).values("role")[:1]
    teams = list(
        Team.objects.visible_to(user)
        .filter(active=True)
        .select_related("parent", "tier")
        .annotate(
            my_role=Subquery(my_role),
            pending_requests=Count(
                "quota_requests", filter=Q(quota_requests__status=QuotaRequestStatus.PENDING)
            ),
        )
        .order_by("slug")
    )

    # Plain tuples, not model instances: at 1,000 teams building 3,000 TeamQuota objects was
    # half of the page's time.
    team_quotas: dict[int, dict[str, tuple[Decimal, Decimal | None]]] = defaultdict(dict)
    for team_id, resource, guarantee, limit in (
        TeamQuota.objects.filter(team__in=[team.pk for team in teams])
        .order_by()
        .values_list("team_id", "resource", "guarantee", "limit")
    ):
        team_quotas[team_id][resource] = (guarantee, limit)

    capacity = CapacitySnapshot.objects.order_by("-taken_at", "-id").first()
    # The latest collection and the latest share computation, each in one query.
    latest_usage = UsageSample.objects.order_by("-taken_at").values("taken_at")[:1]
    usage: dict[int, dict[str, dict[str, Decimal]]] = defaultdict(dict)
    taken_at = None
    for row in (
        UsageSample.objects.visible_to(user)
        .filter(taken_at=Subquery(latest_usage), team__isnull=False)
        .values("team_id", "resource", "taken_at")
        .annotate(allocated_sum=Sum("allocated"), pending_sum=Sum("pending"))
        .order_by()
    ):
        taken_at = row["taken_at"]
        usage[row["team_id"]][row["resource"]] = {
            "allocated": row["allocated_sum"],
            "pending": row["pending_sum"],
        }
    latest_computation = ShareComputation.objects.order_by("-computed_at", "-id").values("id")[:1]
    shares = {
        s.team_id: s
        for s in ShareSnapshot.objects.visible_to(user)
        .filter(computation_id=Subquery(latest_computation))
        .only(
            "team_id",
            "computed_at",
            "dominant_share",
            "dominant_resource",
            "fair_share",
            "fair_allocation",
        )
    }
    shares_at = next(iter(shares.values())).computed_at if shares else None

    rows = []
    shown = {team.pk for team in teams}
    for team in teams:
        share = shares.get(team.pk)
        fair = share.fair_allocation if share else {}
        team_usage = usage.get(team.pk, {})
        quotas = team_quotas.get(team.pk, {})
        resources = []
        for resource in sorted(quotas.keys() | team_usage.keys() | fair.keys()):
            guarantee, limit = quotas.get(resource, (None, None))
            used = team_usage.get(resource, {})
            allocated = used.get("allocated", Decimal(0))
            resources.append(
                {
                    "resource": resource,
                    "guarantee": guarantee,
                    "limit": limit,
                    "allocated": allocated,
                    "pending": used.get("pending", Decimal(0)),
                    "fair": fair.get(resource),
                    # The bar's scale: the limit, else the fair allocation, else what is used.
                    "scale": limit or _decimal(fair.get(resource)) or allocated or 1,
                    "over": limit is not None and allocated > limit,
                }
            )
        gpu = next((r for r in resources if r["resource"] == GPU), None)
        rows.append(
            {
                "team": team,
                "role": team.my_role or ("admin" if admin else "lead (department)"),
                # The department's slug only for those who can see it.
                "parent_visible": team.parent_id is not None and (admin or team.parent_id in shown),
                "share": share,
                "resources": resources,
                "gpu_allocated": gpu["allocated"] if gpu else Decimal(0),
            }
        )

    capacity_rows = []
    if capacity is not None:
        amounts = capacity.amounts()
        usable = quota_services.usable_capacity(amounts)
        # Cluster-wide guarantee totals are for the approvers (three queries).
        committed = quota_services.committed_guarantees() if admin else {}
        for resource, amount in sorted(amounts.items()):
            capacity_rows.append(
                {
                    "resource": resource,
                    "capacity": amount,
                    "usable": usable.get(resource),
                    "guaranteed": committed.get(resource, Decimal(0)) if admin else None,
                }
            )
    # Sort every visible team server-side, then render one page: at 1,000 teams rendering the
    # rows, not the queries, is what costs.
    sort = request.GET.get("sort", "team")
    if sort.lstrip("-") not in DASHBOARD_SORTS:
        sort = "team"
    rows.sort(key=DASHBOARD_SORTS[sort.lstrip("-")], reverse=sort.startswith("-"))
    page = Paginator(rows, DASHBOARD_PAGE_SIZE).get_page(request.GET.get("page"))
    # The chart shows the fair-share numbers the user may see: their teams' (in the table), or
    # with FAIRSHARE_SHARE_VISIBILITY=all every active team's.
    shared = [(row["team"].slug, row["share"]) for row in rows if row["share"]]
    if not admin and sees_every_share(user):
        shared = [
            (snapshot.team.slug, snapshot)
            for snapshot in ShareSnapshot.objects.filter(
                computation_id=Subquery(latest_computation), team__active=True
            ).select_related("team")
        ]
    ordered = sorted(shared, key=lambda pair: (-pair[1].dominant_share, pair[0]))
    charted = ordered[:DASHBOARD_CHART_TEAMS]
    idle_alerts = list(
        IdleGpuAlert.objects.visible_to(user)
        .filter(status=AlertStatus.OPEN)
        .select_related("team")
        .order_by("-gpus", "team__slug")[:20]
    )
    chart = {
        "type": "bar",
        "unit": "%",
        "labels": [slug for slug, _ in charted],
        "datasets": [
            {
                "label": "Dominant share now",
                "data": [round(share.dominant_share * 100, 2) for _, share in charted],
            },
            {
                "label": "Fair share (DRF)",
                "data": [round(share.fair_share * 100, 2) for _, share in charted],
            },
        ],
    }
    return render(
        request,
        "quotas/dashboard.html",
        {
            "is_admin": admin,
            "rows": page.object_list,
            "page": page,
            "sort": sort,
            "team_count": len(rows),
            "chart_truncated": len(charted) < len(ordered),
            "capacity": capacity,
            "capacity_rows": capacity_rows,
            "flavors": sorted((capacity.flavors or {}).items()) if capacity else [],
            "usage_taken_at": taken_at,
            "shares_at": shares_at,
            "idle_alerts": idle_alerts,
            "last_sync": SyncRun.objects.order_by("-created", "-id").first(),
            "chart": {"charts": [chart]} if chart["labels"] else None,
            **dashboard_waiting_context(teams),
        },
    )


# --------------------------------------------------------------------------- team page


def _usage_chart(team: Team, quotas: dict[str, TeamQuota], *, now: datetime) -> dict:
    """Hourly allocated/pending/guarantee per resource for the last CHART_DAYS days, plus the
    current limit, in chart units (GiB, cores, devices)."""
    start = now - timedelta(days=CHART_DAYS)
    series: dict[str, dict[datetime, dict[str, Decimal]]] = defaultdict(dict)
    for row in (
        UsageRollup.objects.filter(team=team, period=RollupPeriod.HOUR, start__gte=start)
        .values("start", "resource")
        .annotate(
            allocated=Sum("allocated_hours"),
            pending=Sum("pending_hours"),
            guarantee=Sum("guarantee_hours"),
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
            return [float(round(points[h][key] / scale, 3)) for h in hours]

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


def _budget_rows(team: Team, *, now: datetime) -> list[dict]:
    budgets = list(team.budgets.all())
    if not budgets:
        return []
    from monitoring.services import month_to_date_hours

    used = month_to_date_hours(now=now)
    rows = []
    for budget in budgets:
        hours = used.get((team.pk, budget.resource), Decimal(0))
        rows.append(
            {
                "budget": budget,
                "used": hours,
                "fraction": hours / budget.monthly_hours if budget.monthly_hours else None,
                "over": hours >= budget.monthly_hours,
            }
        )
    return rows


@login_required
@require_GET
def team_detail(request, slug: str):
    """A team: quotas vs usage over time, current GPU alerts, namespaces, members, budgets, idle
    GPUs, requests, audit trail. Leads (and admins) also get the member management forms."""
    team, can_write = get_team_for_user(request.user, slug)
    return render(request, "quotas/team_detail.html", _team_context(request, team, can_write))


def _team_context(request, team: Team, can_write: bool, **extra) -> dict:
    from monitoring.services import current_gpu_alerts

    now = timezone.now()
    quotas = {q.resource: q for q in team.quotas.order_by("resource")}
    latest = UsageSample.objects.filter(team=team).aggregate(t=Max("taken_at"))["t"]
    usage: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    by_namespace: dict[str, dict[str, Decimal]] = defaultdict(dict)
    if latest is not None:
        for sample in UsageSample.objects.filter(team=team, taken_at=latest):
            usage[sample.resource]["allocated"] += sample.allocated
            usage[sample.resource]["pending"] += sample.pending
            if sample.allocated:
                by_namespace[sample.namespace][sample.resource] = (
                    by_namespace[sample.namespace].get(sample.resource, Decimal(0))
                    + sample.allocated
                )
    share = ShareSnapshot.objects.filter(team=team).order_by("-computed_at", "-id").first()
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
            list(AuditEvent.objects.filter(team=team)[:AUDIT_ROWS]) if can_write else []
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
    context.update(team_workloads_context(team, sort=request.GET.get("wsort")))
    context.update(extra)
    return context


# --------------------------------------------------------------------------- members


def _team_for_lead(request, slug: str) -> Team:
    team, can_write = get_team_for_user(request.user, slug)
    if not can_write:
        raise HttpForbidden("Only the team's leads and site admins may manage members.")
    return team


def _members_url(team: Team) -> str:
    return reverse("quotas:team", args=[team.slug]) + "#members"


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


# --------------------------------------------------------------------------- quota requests


def _request_forms(request, team: Team):
    current = {q.resource: (q.guarantee, q.limit) for q in team.quotas.order_by("resource")}
    data = request.POST if request.method == "POST" else None
    form = QuotaRequestForm(data)
    formset = QuotaLineFormSet(data, current=current, prefix="lines")
    return form, formset


def _resource_names(team: Team) -> list[str]:
    existing = set(team.quotas.values_list("resource", flat=True))
    names = set(CapacitySnapshot.latest_amounts()) | {GPU, "cpu", "memory"}
    return sorted(names - existing)


def _lead_team(request, slug: str) -> Team:
    team, can_write = get_team_for_user(request.user, slug)
    if not can_write:
        raise HttpForbidden("Only the team's leads and site admins may request quota.")
    return team


@login_required
@require_http_methods(["GET", "POST"])
def quotarequest_create(request, slug: str):
    """Request quota for a team (leads and admins): amounts per resource, optional window."""
    team = _lead_team(request, slug)
    form, formset = _request_forms(request, team)
    whatif = None
    if request.method == "GET" and request.GET.getlist("workload"):
        form, formset, whatif = _prefill_from_workloads(request, team)
    if request.method == "POST" and form.is_valid() and formset.is_valid():
        lines, line_forms = formset.lines()
        if not lines:
            form.add_error(None, "Change at least one amount, or add a resource.")
        else:
            try:
                quota_request = quota_services.submit_request(
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
                url = reverse("quotas:quotarequest", args=[quota_request.pk])
                messages.success(request, f"Request #{quota_request.pk} sent to the approvers.")
                return redirect(url)
    return render(
        request,
        "quotas/quotarequest_form.html",
        {
            "team": team,
            "form": form,
            "formset": formset,
            "resource_names": _resource_names(team),
            "whatif": whatif,
        },
    )


def _prefill_from_workloads(request, team: Team):
    """The request form bound to the smallest change admitting the selected waiting workloads
    (``monitoring.workloads.admitting_change``), with its live preview already computed."""
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
        if lines:
            whatif = _whatif(
                {
                    team.slug: {
                        "guarantee": {line.resource: line.guarantee for line in lines},
                        "limit": {line.resource: line.limit for line in lines},
                    }
                },
                viewer=request.user,
                focus=team.slug,
            )
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
        if not lines:
            hint = "Change an amount to see how the fair shares would move."
        else:
            change = {
                "guarantee": {line.resource: line.guarantee for line in lines},
                "limit": {line.resource: line.limit for line in lines},
            }
            whatif = _whatif({team.slug: change}, viewer=request.user, focus=team.slug)
    return render(
        request, "_partials/whatif.html", {"whatif": whatif, "hint": hint, "focus": team.slug}
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


def _visible_request(user, pk: int) -> QuotaRequest:
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


def _detail_context(request, quota_request: QuotaRequest, form: DecisionForm | None = None):
    admin = is_site_admin(request.user)
    pending = quota_request.status == QuotaRequestStatus.PENDING
    if pending and admin and form is None:
        form = DecisionForm(quota_request=quota_request)
    visible = share_slugs(request.user)
    return {
        "quota_request": quota_request,
        "is_admin": admin,
        "can_withdraw": _can_withdraw(request.user, quota_request),
        "decision_form": form if pending and admin else None,
        "stored_preview": present_whatif(
            quota_request.preview, focus=quota_request.team.slug, visible=visible
        ),
        "whatif": present_whatif(
            _request_preview(quota_request), focus=quota_request.team.slug, visible=visible
        )
        if pending
        else None,
        "audit_events": list(
            AuditEvent.objects.filter(
                object_type=QuotaRequest._meta.label, object_id=str(quota_request.pk)
            )
        ),
    }


@login_required
@require_GET
def quotarequest_detail(request, pk: int):
    """One request: its lines, status, the preview it was decided on (or a live one while
    pending), withdraw for the requester/leads and the decision form for admins."""
    quota_request = _visible_request(request.user, pk)
    return render(
        request, "quotas/quotarequest_detail.html", _detail_context(request, quota_request)
    )


@login_required
@require_POST
def quotarequest_withdraw(request, pk: int):
    quota_request = _visible_request(request.user, pk)
    try:
        quota_request = quota_services.withdraw_request(quota_request.pk, actor=request.user)
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    except InvalidTransition as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Request #{quota_request.pk} withdrawn.")
    return redirect("quotas:quotarequest", pk=quota_request.pk)


# --------------------------------------------------------------------------- approvals


@login_required
@require_GET
def approval_queue(request):
    """Pending requests, oldest first, each with a decision form; previews load lazily (htmx)
    so the page itself runs a constant number of queries."""
    _require_admin(request.user)
    qs = (
        QuotaRequest.objects.filter(status=QuotaRequestStatus.PENDING)
        .select_related("team", "requester")
        .prefetch_related("lines")
        .order_by("created", "id")
    )
    page = Paginator(qs, QUEUE_PER_PAGE).get_page(request.GET.get("page"))
    items = [{"request": r, "form": DecisionForm(quota_request=r)} for r in page]
    return render(request, "quotas/approval_queue.html", {"page": page, "items": items})


@login_required
@require_http_methods(["GET", "POST"])
def approval_preview(request, pk: int):
    """The what-if of a pending request recomputed now (GET), or with the approver's adjusted
    amounts from the decision form (POST). An htmx partial; never writes."""
    _require_admin(request.user)
    quota_request = get_object_or_404(
        QuotaRequest.objects.select_related("team").prefetch_related("lines"), pk=pk
    )
    adjustments = None
    hint = ""
    if request.method == "POST":
        form = DecisionForm(request.POST, quota_request=quota_request)
        if form.is_valid():
            adjustments = form.adjustments()
        else:
            hint = "Fix the highlighted amounts to see the effect."
    whatif = None
    if not hint:
        whatif = present_whatif(
            _request_preview(quota_request, adjustments), focus=quota_request.team.slug
        )
    return render(
        request,
        "_partials/whatif.html",
        {"whatif": whatif, "hint": hint, "focus": quota_request.team.slug},
    )


@login_required
@require_POST
def quotarequest_decide(request, pk: int):
    """Approve (with optional adjustments, storing the preview) or reject (reason required).

    Errors — over capacity, bad amounts, a missing reason — are shown on the request page next to
    the fields they concern.
    """
    _require_admin(request.user)
    quota_request = _visible_request(request.user, pk)
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
                    preview=_request_preview(quota_request, adjustments),
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
            return redirect("quotas:quotarequest", pk=quota_request.pk)
        except SelfDecisionRefused as e:
            form.add_error(None, str(e))
        except PermissionDenied as e:
            raise HttpForbidden(str(e)) from e
        else:
            verb = "approved" if decision == "approve" else "rejected"
            messages.success(request, f"Request #{decided.pk} for {decided.team.slug} {verb}.")
            return redirect(_safe_next(request, reverse("quotas:approval_queue")))
    quota_request.refresh_from_db()
    return render(
        request,
        "quotas/quotarequest_detail.html",
        _detail_context(request, quota_request, form=form),
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


# --------------------------------------------------------------------------- rebalance


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
    from scheduling.services import what_if

    shares = {slug: {k: v for k, v in c.items() if k != "tier"} for slug, c in changes.items()}
    try:
        return present_whatif(what_if({s: c for s, c in shares.items() if c}).to_dict())
    except ValidationError as e:
        errors.extend(add_rebalance_errors(e, formset))
    except SchedulingError as e:
        errors.append(str(e))
    except Exception:  # see _whatif: logged with its traceback
        logger.exception("rebalance preview failed for %s", sorted(changes))
        errors.append(PREVIEW_FAILED)
    return None


@login_required
@require_http_methods(["GET", "POST"])
def rebalance(request):
    """Edit weights, tiers and guarantees of many teams; Preview shows the plan, Apply commits
    every change in one transaction (or none) and the cluster syncs after commit."""
    _require_admin(request.user)
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
                    return redirect("quotas:rebalance")
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
