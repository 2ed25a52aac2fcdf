"""The dashboard page: the figures come from ``portal.dashboard.dashboard_context``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from portal.dashboard import dashboard_context


@login_required
@require_GET
def home(request):
    """Dashboard: capacity, every visible team's quota, usage and fair share, idle GPUs, sync."""
    context = dashboard_context(
        request.user, sort=request.GET.get("sort"), page=request.GET.get("page")
    )
    return render(request, "quotas/dashboard.html", context)
