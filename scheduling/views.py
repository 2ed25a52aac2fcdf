"""Server-rendered pages of the scheduling app: cluster sync runs, their items and live progress.

Who sees what (decided here, tested in tests/scheduling/test_views.py):

* Site admins see every run with its counters, log and error, every item, and start syncs
  (``Sync now``, ``Dry run``: POST, calling ``scheduling.sync.start_sync``).
* Everyone else who is signed in sees the list of runs (status and times: when the cluster was
  last made to agree) but only the *items of the teams they can see* (``SyncItem.team_slug`` in
  ``Team.objects.visible_to``), and counters computed from those items only. A run's own log
  and error are admin-only: they may name other teams' objects. Cluster-scoped objects without a
  team (PriorityClasses) are admin-only too. This lets a lead check that an approved quota
  reached the cluster, without showing other teams' namespaces. Likewise the quota requests
  a run applied (``SyncRun.quota_requests``): each links to its page for those who may see
  it (``QuotaRequest.objects.visible_to``); the others are a count. (The REST API's sync endpoints
  stay admin-only; the UI shows non-admins strictly less than the API shows admins.)
* A run's trigger, requester and scope follow the share-visibility setting
  (``scheduling.visibility``, issue 27): non-admins see the kind of trigger only
  (``quota-change``, not ``quota-change:approve``), who started a run only when it was
  themselves, and a targeted run's teams only where they may see those teams' numbers (the
  others as a count).

Progress: while a run is queued or running, the detail page polls the progress partial every
2 s (htmx); the partial of a finished run carries no trigger, so polling stops, and the poll
that sees the run finish asks htmx to reload the page (``HX-Refresh``) so the items appear.
Every page runs a constant number of queries whatever the number of runs or items.
"""

from __future__ import annotations

from collections import defaultdict

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from quotas.models import Team
from quotas.quantities import parse_quantity, validate_resource_name
from quotas.querysets import is_site_admin
from quotas.templatetags.fairshare import quantity
from scheduling.choices import SyncAction, SyncStatus
from scheduling.models import SyncItem, SyncRun
from scheduling.visibility import share_slugs

RUNS_PER_PAGE = 50
ITEMS_PER_PAGE = 100
ACTIONS = (
    SyncAction.CREATE,
    SyncAction.UPDATE,
    SyncAction.PRUNE,
    SyncAction.FAILED,
    SyncAction.UNCHANGED,
)
COLUMNS = [{"action": action, "label": SyncAction(action).label} for action in ACTIONS]
# Item filters of the run page: name → (label, condition). "changes" is the default: a steady
# run of thousands of objects is almost all "unchanged", which nobody needs to scroll through.
ITEM_FILTERS = {
    "changes": ("Changes", ~Q(action=SyncAction.UNCHANGED)),
    "drift": ("Drift", Q(drift=True)),
    "failed": ("Failed", Q(action=SyncAction.FAILED)),
    "all": ("All objects", Q()),
}
_COUNTER = {
    SyncAction.CREATE: "created_count",
    SyncAction.UPDATE: "updated_count",
    SyncAction.UNCHANGED: "unchanged_count",
    SyncAction.PRUNE: "pruned_count",
    SyncAction.FAILED: "failed_count",
}
DRIFT_HEADER = "drift ("


def _facts(run: SyncRun, user, *, admin: bool, slugs) -> dict:
    """What the pages say about a run's trigger, requester and scope (module docstring)."""
    if admin:
        return {
            "trigger": run.trigger,
            "requested_by": run.requested_by,
            "scope_teams": run.scope_teams,
            "other_teams": 0,
        }
    shown = [slug for slug in run.scope_teams if slugs is None or slug in slugs]
    requester = run.requested_by if run.requested_by_id == user.pk else None
    return {
        "trigger": run.trigger.partition(":")[0],
        "requested_by": requester,
        "scope_teams": shown,
        "other_teams": len(run.scope_teams) - len(shown),
    }


def _visible_slugs(user):
    """A subquery of the cluster names (what ``SyncItem.team_slug`` records: the objects'
    ``fairshare.io/team`` label) of the teams ``user`` sees (for non-admins only)."""
    return Team.objects.visible_to(user).values("cluster_name")


def _visible_items(run: SyncRun, user, *, admin: bool):
    items = SyncItem.objects.filter(run=run)
    return items if admin else items.filter(team_slug__in=_visible_slugs(user))


def _own_counts(runs: list[SyncRun], user, *, unchanged: bool = True) -> dict[int, dict]:
    """Per run, counters over the items of the user's teams only (one query for the page).

    Without ``unchanged`` only changed items are counted (``unchanged`` is None): the (run,
    action) index then reads a handful of rows per run instead of every object of every run —
    the list of 50 runs of 16,000 objects each stays fast. Drift is always an update.
    """
    actions = ACTIONS if unchanged else [a for a in ACTIONS if a != SyncAction.UNCHANGED]
    counts: dict[int, dict] = defaultdict(
        lambda: dict.fromkeys([*actions, "drift"], 0) | ({} if unchanged else {"unchanged": None})
    )
    rows = (
        SyncItem.objects.filter(
            run__in=[r.pk for r in runs],
            action__in=actions,
            team_slug__in=_visible_slugs(user),
        )
        .values("run_id", "action")
        .annotate(n=Count("id"), drifted=Count("id", filter=Q(drift=True)))
        .order_by()
    )
    for row in rows:
        counts[row["run_id"]][row["action"]] += row["n"]
        counts[row["run_id"]]["drift"] += row["drifted"]
    return counts


def _cells(counts: dict[str, int]) -> list[dict]:
    """The counters in column order (ACTIONS), for the tables."""
    return [{"action": action, "n": counts[action]} for action in ACTIONS]


def _run_counts(run: SyncRun) -> dict[str, int]:
    return {action: getattr(run, _COUNTER[action]) for action in ACTIONS} | {
        "drift": run.drift_count
    }


# The map keys under which a manifest lists amounts per resource: ResourceQuota
# ``spec.hard[.requests|.limits]``, Queue ``spec.capability`` / ``deserved`` /
# ``guarantee.resource``, LimitRange ``max`` / ``min`` / ``default`` / ``defaultRequest``.
_AMOUNT_MAPS = {"hard", "capability", "deserved", "resource", "max", "min", "default"}
_AMOUNT_MAPS |= {"defaultRequest", "requests", "limits"}


def _resource_of(path: str) -> str | None:
    """The resource a diff path's amount is of (``spec.hard.requests.nvidia.com/gpu`` →
    ``nvidia.com/gpu``, ``spec.capability.memory`` → ``memory``), or None for a field that is
    not an amount (``spec.weight``)."""
    parts = path.split(".")
    start = next((i for i, part in enumerate(parts) if part in _AMOUNT_MAPS), None)
    if start is None:
        return None
    while start < len(parts) and parts[start] in _AMOUNT_MAPS:
        start += 1
    resource = ".".join(parts[start:])
    try:
        validate_resource_name(resource)
    except ValidationError:
        return None
    return resource


def _amount(value: str, resource: str):
    if value == "(none)":
        return None
    try:
        return parse_quantity(value, field=resource)
    except ValidationError:
        return None


def _shown(path: str, old: str, new: str) -> tuple[str, str]:
    """How the page shows a changed amount: in human units (``5.4Ti`` for ``5702912Mi``,
    ``quotas.templatetags.fairshare.quantity``), each side exact where it is not an amount, and
    both exact where the human forms would read the same (``5.4Ti → 5.4Ti``)."""
    resource = _resource_of(path)
    if resource is None:
        return old, new
    amounts = [_amount(value, resource) for value in (old, new)]
    shown = [
        value if amount is None else quantity(amount, resource)
        for value, amount in zip((old, new), amounts, strict=True)
    ]
    if shown[0] == shown[1] and old != new:
        return old, new
    return shown[0], shown[1]


def diff_rows(text: str) -> list[dict]:
    """Split a SyncItem diff (``render_diff`` text, plus an optional drift section) into rows.

    Each row is ``{"path", "old", "new", "old_shown", "new_shown", "drift"}``: ``old``/``new``
    exactly as the diff has them, ``*_shown`` amounts in human units (``_shown``); a line that
    is not ``path: old -> new`` becomes ``{"text": line}``. The header line (``update
    ResourceQuota ns/name``) is dropped: the page shows kind and name in their own columns.
    """
    rows: list[dict] = []
    drift = False
    for index, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if not stripped or (index == 0 and not line.startswith(" ")):
            continue
        if stripped.startswith(DRIFT_HEADER):
            drift = True
            continue
        path, colon, rest = stripped.partition(": ")
        old, arrow, new = rest.partition(" -> ")
        if colon and arrow:
            old_shown, new_shown = _shown(path, old, new)
            rows.append(
                {
                    "path": path,
                    "old": old,
                    "new": new,
                    "old_shown": old_shown,
                    "new_shown": new_shown,
                    "drift": drift,
                }
            )
        else:
            rows.append({"text": stripped, "drift": drift})
    return rows


def _progress_context(run: SyncRun) -> dict:
    total, done = run.total, min(run.done, run.total)
    duration = None
    if run.started_at and run.finished_at:
        duration = (run.finished_at - run.started_at).total_seconds()
    return {
        "run": run,
        "duration": duration,
        "active": run.status in (SyncStatus.QUEUED, SyncStatus.RUNNING),
        "percent": round(100 * done / total) if total else None,
    }


@login_required
@require_GET
def syncrun_list(request):
    """Sync runs, newest first, with their counters (own-team counters for non-admins)."""
    admin = is_site_admin(request.user)
    qs = SyncRun.objects.select_related("requested_by").order_by("-created", "-id")
    page = Paginator(qs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    runs = list(page.object_list)
    own = {} if admin else _own_counts(runs, request.user, unchanged=False)
    slugs = None if admin else share_slugs(request.user)
    rows = [
        {
            "run": run,
            "facts": _facts(run, request.user, admin=admin, slugs=slugs),
            "counts": (counts := _run_counts(run) if admin else own[run.pk]),
            "cells": _cells(counts),
            "active": run.status in (SyncStatus.QUEUED, SyncStatus.RUNNING),
        }
        for run in runs
    ]
    return render(
        request,
        "scheduling/syncrun_list.html",
        {"page": page, "rows": rows, "is_admin": admin, "columns": COLUMNS},
    )


@login_required
@require_GET
def syncrun_detail(request, pk: int):
    """One run: facts, live progress while it runs, and its items (filtered, paginated)."""
    admin = is_site_admin(request.user)
    run = get_object_or_404(SyncRun.objects.select_related("requested_by"), pk=pk)
    show = request.GET.get("show", "changes")
    if show not in ITEM_FILTERS:
        show = "changes"
    items = _visible_items(run, request.user, admin=admin)
    counts = _run_counts(run) if admin else _own_counts([run], request.user)[run.pk]
    page = Paginator(items.filter(ITEM_FILTERS[show][1]).order_by("id"), ITEMS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    rows = [
        {"item": item, "diff": diff_rows(item.diff), "raw_diff": item.diff}
        for item in page.object_list
    ]
    filters = [
        {
            "name": name,
            "label": label,
            "count": {
                "changes": sum(counts[a] for a in ACTIONS if a != SyncAction.UNCHANGED),
                "drift": counts["drift"],
                "failed": counts[SyncAction.FAILED],
                "all": sum(counts[a] for a in ACTIONS),
            }[name],
        }
        for name, (label, _) in ITEM_FILTERS.items()
    ]
    applied = run.quota_requests.visible_to(request.user).select_related("team").order_by("pk")
    applied = list(applied)
    return render(
        request,
        "scheduling/syncrun_detail.html",
        {
            **_progress_context(run),
            "is_admin": admin,
            "quota_requests": applied,
            "other_quota_requests": 0 if admin else run.quota_requests.count() - len(applied),
            "facts": _facts(
                run, request.user, admin=admin, slugs=None if admin else share_slugs(request.user)
            ),
            "counts": counts,
            "cells": _cells(counts),
            "columns": COLUMNS,
            "page": page,
            "rows": rows,
            "show": show,
            "filters": filters,
        },
    )


@login_required
@require_GET
def syncrun_progress(request, pk: int):
    """The progress partial of one run (htmx polls it every 2 s while the run is active).

    When the poll (``?poll=1``) sees the run finished, ``HX-Refresh`` reloads the page so the
    items and final counters appear; the partial it returns has no trigger, so polling stops.
    """
    run = get_object_or_404(SyncRun, pk=pk)
    context = _progress_context(run) | {"is_admin": is_site_admin(request.user)}
    response = render(request, "_partials/sync_progress.html", context)
    if request.GET.get("poll") and not context["active"] and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def sync_start(request):
    """Start a sync (``mode=sync``) or a dry run (``mode=dry-run``); admins only."""
    if not is_site_admin(request.user):
        raise HttpForbidden("Only site admins may start a sync.")
    mode = request.POST.get("mode")
    if mode not in ("sync", "dry-run"):
        messages.error(request, "Choose Sync now or Dry run.")
        return redirect("scheduling:syncrun_list")
    from scheduling.sync import PLAN_ONLY, is_plan_only, start_sync

    plan_only = is_plan_only()
    dry_run = mode == "dry-run" or plan_only
    run = start_sync(dry_run=dry_run, trigger="ui", requested_by=request.user)
    busy = (
        SyncRun.objects.filter(status=SyncStatus.RUNNING)
        .exclude(pk=run.pk)
        .values_list("pk", flat=True)
        .first()
    )
    kind = "Plan" if plan_only else "Dry run" if dry_run else "Sync"
    if busy is not None:
        messages.warning(
            request,
            f"{kind} #{run.pk} queued; sync #{busy} is still running, so #{run.pk} runs (or is "
            f"included in the follow-up run) as soon as #{busy} has finished.",
        )
    else:
        note = f" {PLAN_ONLY}: nothing is applied." if plan_only else ""
        messages.success(request, f"{kind} #{run.pk} queued.{note}")
    return redirect("scheduling:syncrun", pk=run.pk)
