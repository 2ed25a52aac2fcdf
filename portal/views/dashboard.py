"""The dashboard: capacity, every visible team's quota, usage and fair share, idle GPUs, sync.

A constant number of queries whatever the number of teams.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, Q, Subquery
from django.shortcuts import render
from django.views.decorators.http import require_GET

from monitoring.choices import AlertStatus
from monitoring.models import CapacitySnapshot, IdleGpuAlert
from monitoring.usage import current_usage
from monitoring.workloads import dashboard_waiting_context
from portal.previews import decimal_or_zero
from quotas import capacity_rule
from quotas.choices import QuotaRequestStatus
from quotas.display import shown as displayed
from quotas.display import shown_amounts, team_tree
from quotas.models import Membership, Team, TeamQuota
from quotas.quantities import GPU
from quotas.querysets import is_site_admin
from scheduling.models import ShareComputation, ShareSnapshot, SyncRun
from scheduling.visibility import sees_every_share

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
    # The latest collection (departments summed over their subtree) and share computation.
    now_usage = current_usage()
    usage = {team.pk: now_usage.of(team.pk) for team in teams}
    taken_at = now_usage.taken_at
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
        for resource in displayed(quotas.keys() | team_usage.keys() | fair.keys()):
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
                    "scale": limit or decimal_or_zero(fair.get(resource)) or allocated or 1,
                    "over": limit is not None and allocated > limit,
                }
            )
        gpu = next((r for r in resources if r["resource"] == GPU), None)
        rows.append(
            {
                "slug": team.slug,
                "parent": team.parent.slug if team.parent_id is not None else None,
                "team": team,
                "role": team.my_role or ("admin" if admin else "lead (department)"),
                # The department's slug only for those who can see it.
                "parent_visible": team.parent_id is not None and (admin or team.parent_id in shown),
                "share": share,
                "resources": resources,
                "gpu_allocated": gpu["allocated"] if gpu else Decimal(0),
            }
        )

    # Departments as a tree (their figures are already their subtree's). A department the
    # viewer cannot see leaves its teams as roots.
    rows = team_tree(rows)

    capacity_rows = []
    if capacity is not None:
        amounts = capacity.amounts()
        usable = capacity_rule.usable_capacity(amounts)
        # Cluster-wide guarantee totals are for the approvers (three queries).
        committed = capacity_rule.committed_guarantees() if admin else {}
        for resource, amount in shown_amounts(amounts):
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
    if sort != "team":  # by team: the tree's order (departments, then their teams)
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
            "flavors": [
                (flavor, shown_amounts(amounts))
                for flavor, amounts in sorted((capacity.flavors or {}).items())
                if shown_amounts(amounts)
            ]
            if capacity
            else [],
            "tree": sort == "team",
            "usage_taken_at": taken_at,
            "shares_at": shares_at,
            "idle_alerts": idle_alerts,
            "last_sync": SyncRun.objects.order_by("-created", "-id").first(),
            "chart": {"charts": [chart]} if chart["labels"] else None,
            **dashboard_waiting_context(teams),
        },
    )
