"""Server-rendered pages of the quotas app."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Prefetch, Q
from django.shortcuts import render

from quotas.choices import QuotaRequestStatus
from quotas.models import Membership, Team, TeamQuota
from quotas.querysets import is_site_admin


@login_required
def home(request):
    """Landing page: the teams the user can see, with their quotas and open requests."""
    user = request.user
    teams = (
        Team.objects.visible_to(user)
        .select_related("parent", "tier")
        .prefetch_related(Prefetch("quotas", queryset=TeamQuota.objects.order_by("resource")))
        .annotate(
            pending_requests=Count(
                "quota_requests", filter=Q(quota_requests__status=QuotaRequestStatus.PENDING)
            )
        )
    )
    roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
    rows = [
        (team, roles.get(team.pk, "admin" if is_site_admin(user) else "lead (department)"))
        for team in teams
    ]
    return render(
        request,
        "quotas/home.html",
        {"rows": rows, "is_admin": is_site_admin(user)},
    )
