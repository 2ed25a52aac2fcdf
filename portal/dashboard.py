"""The dashboard's figures, for one viewer: capacity, every visible team's quota, usage and fair
share, the share chart, idle GPUs and the last sync (``dashboard_context``; the view only renders
it). A constant number of queries whatever the number of teams.

Everything a viewer sees here is scoped by the tenancy rules: teams by
``Team.objects.visible_to``, shares by ``ShareSnapshot.objects.visible_to`` (or every active
team's where ``FAIRSHARE_SHARE_VISIBILITY=all``), idle GPUs by ``IdleGpuAlert.objects.visible_to``;
cluster-wide guarantee totals are for site admins only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, Q, Subquery

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

PAGE_SIZE = 50
CHART_TEAMS = 30
SORTS = {
    "team": lambda row: row["team"].slug,
    "weight": lambda row: (row["team"].weight, row["team"].slug),
    "share": lambda row: (row["share"].dominant_share if row["share"] else -1, row["team"].slug),
    "fair": lambda row: (row["share"].fair_share if row["share"] else -1, row["team"].slug),
    "gpus": lambda row: (row["gpu_allocated"], row["team"].slug),
    "requests": lambda row: (row["team"].pending_requests, row["team"].slug),
}


def dashboard_context(user, *, sort: str | None = None, page: str | None = None) -> dict[str, Any]:
    """The template context of the dashboard for ``user``: one page (``page``, 50 rows) of the
    visible teams sorted by ``sort`` (a key of ``SORTS``, ``-`` for descending; anything else
    is the team tree), with the capacity, the chart and the rest of the page."""
    admin = is_site_admin(user)
    teams = _visible_teams(user)
    latest = ShareComputation.objects.order_by("-computed_at", "-id").values("id")[:1]
    shares = _latest_shares(user, latest)
    now_usage = current_usage()
    rows = team_tree(team_rows(teams, shares, now_usage, admin=admin))
    sort = sort if sort and sort.lstrip("-") in SORTS else "team"
    if sort != "team":  # by team: the tree's order (departments, then their teams)
        rows.sort(key=SORTS[sort.lstrip("-")], reverse=sort.startswith("-"))
    paged = Paginator(rows, PAGE_SIZE).get_page(page)
    capacity = CapacitySnapshot.objects.order_by("-taken_at", "-id").first()
    chart, truncated = share_chart(_charted_shares(user, rows, latest, admin=admin))
    return {
        "is_admin": admin,
        "rows": paged.object_list,
        "page": paged,
        "sort": sort,
        "team_count": len(rows),
        "chart_truncated": truncated,
        "capacity": capacity,
        "capacity_rows": capacity_rows(capacity, admin=admin),
        "flavors": _flavors(capacity),
        "tree": sort == "team",
        "usage_taken_at": now_usage.taken_at,
        "shares_at": next(iter(shares.values())).computed_at if shares else None,
        "idle_alerts": list(
            IdleGpuAlert.objects.visible_to(user)
            .filter(status=AlertStatus.OPEN)
            .select_related("team")
            .order_by("-gpus", "team__slug")[:20]
        ),
        "last_sync": SyncRun.objects.order_by("-created", "-id").first(),
        "chart": {"charts": [chart]} if chart["labels"] else None,
        **dashboard_waiting_context(teams),
    }


def _visible_teams(user) -> list[Team]:
    """The active teams ``user`` may see, with the viewer's role and their pending requests."""
    my_role = Membership.objects.filter(team=OuterRef("pk"), user=user).values("role")[:1]
    return list(
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


def _latest_shares(user, latest) -> dict[int, ShareSnapshot]:
    """The latest computation's shares of the teams ``user`` may see, by team id."""
    return {
        s.team_id: s
        for s in ShareSnapshot.objects.visible_to(user)
        .filter(computation_id=Subquery(latest))
        .only(
            "team_id",
            "computed_at",
            "dominant_share",
            "dominant_resource",
            "fair_share",
            "fair_allocation",
        )
    }


def team_rows(
    teams: list[Team], shares: Mapping[int, ShareSnapshot], usage, *, admin: bool
) -> list[dict[str, Any]]:
    """One row per team: its quotas, what it uses now (departments: their subtree's) and its
    fair allocation, per resource, with the bar's scale and whether it is over its limit."""
    # Plain tuples, not model instances: at 1,000 teams building 3,000 TeamQuota objects was
    # half of the page's time.
    quotas_of: dict[int, dict[str, tuple[Decimal, Decimal | None]]] = defaultdict(dict)
    for team_id, resource, guarantee, limit in (
        TeamQuota.objects.filter(team__in=[team.pk for team in teams])
        .order_by()
        .values_list("team_id", "resource", "guarantee", "limit")
    ):
        quotas_of[team_id][resource] = (guarantee, limit)
    shown = {team.pk for team in teams}
    rows = []
    for team in teams:
        share = shares.get(team.pk)
        resources = _resource_cells(
            quotas_of.get(team.pk, {}), usage.of(team.pk), share.fair_allocation if share else {}
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
    return rows


def _resource_cells(
    quotas: Mapping[str, tuple[Decimal, Decimal | None]],
    usage: Mapping[str, Mapping[str, Decimal]],
    fair: Mapping[str, Any],
) -> list[dict[str, Any]]:
    cells = []
    for resource in displayed(quotas.keys() | usage.keys() | fair.keys()):
        guarantee, limit = quotas.get(resource, (None, None))
        used = usage.get(resource, {})
        allocated = used.get("allocated", Decimal(0))
        cells.append(
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
    return cells


def capacity_rows(capacity: CapacitySnapshot | None, *, admin: bool) -> list[dict[str, Any]]:
    """Capacity, usable capacity (after the reserve) and, for admins only, the cluster-wide
    guarantees committed, per shown resource."""
    if capacity is None:
        return []
    amounts = capacity.amounts()
    usable = capacity_rule.usable_capacity(amounts)
    committed = capacity_rule.committed_guarantees() if admin else {}  # three queries
    return [
        {
            "resource": resource,
            "capacity": amount,
            "usable": usable.get(resource),
            "guaranteed": committed.get(resource, Decimal(0)) if admin else None,
        }
        for resource, amount in shown_amounts(amounts)
    ]


def _flavors(capacity: CapacitySnapshot | None) -> list[tuple[str, list]]:
    if capacity is None:
        return []
    return [
        (flavor, shown_amounts(amounts))
        for flavor, amounts in sorted((capacity.flavors or {}).items())
        if shown_amounts(amounts)
    ]


def _charted_shares(user, rows, latest, *, admin: bool) -> list[tuple[str, ShareSnapshot]]:
    """The shares the chart may show: the viewer's teams' (those in the table), or with
    ``FAIRSHARE_SHARE_VISIBILITY=all`` every active team's."""
    if not admin and sees_every_share(user):
        return [
            (snapshot.team.slug, snapshot)
            for snapshot in ShareSnapshot.objects.filter(
                computation_id=Subquery(latest), team__active=True
            ).select_related("team")
        ]
    return [(row["team"].slug, row["share"]) for row in rows if row["share"]]


def share_chart(shared: Iterable[tuple[str, ShareSnapshot]]) -> tuple[dict[str, Any], bool]:
    """The bar chart of dominant share now against fair share (percent), highest dominant share
    first, at most ``CHART_TEAMS`` teams; and whether teams were left out."""
    ordered = sorted(shared, key=lambda pair: (-pair[1].dominant_share, pair[0]))
    charted = ordered[:CHART_TEAMS]
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
    return chart, len(charted) < len(ordered)
