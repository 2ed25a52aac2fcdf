"""Workload records: store each collection's gangs with why they wait, and read them back.

``store_workloads`` runs inside the collection's transaction (``services.store_usage``). It says
why each waiting workload waits with :func:`monitoring.domain.workloads.wait_reason`, giving it the
team's queue as this collection and the latest fair-share computation see it: what the team's
pods hold now, its DRF fair allocation (latest ``ShareSnapshot.fair_allocation``, what Fairshare
writes into the queue's ``deserved``) and its quota limit (``TeamQuota.limit``, the queue's
``capability``). Only the newest ``FAIRSHARE_WORKLOAD_COLLECTIONS`` collections are kept.

The read side (``latest_workloads``, ``team_workloads``, ``waiting_by_team``,
``smallest_admitting_change``) is what the pages, the API and ``/metrics`` use; each is a
constant number of queries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from monitoring.domain.aggregate import ClusterUsage
from monitoring.domain.workloads import QueueState, wait_reason
from monitoring.models import Workload
from quotas.models import Team, TeamQuota

GPU = "nvidia.com/gpu"


def _decimal_string(amount: Decimal) -> str:
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


def queue_states(usage: ClusterUsage, team_slugs: Iterable[str]) -> dict[str, QueueState]:
    """Per team slug: what its pods hold in this collection, its fair allocation, its limits.

    Two queries (latest share computation's snapshots, quota limits), whatever the team count.
    """
    from scheduling.models import ShareComputation, ShareSnapshot

    slugs = sorted(set(team_slugs))
    fair: dict[str, dict[str, Decimal]] = {}
    latest = ShareComputation.objects.order_by("-computed_at", "-id").first()
    if latest is not None:
        for slug, allocation in ShareSnapshot.objects.filter(
            computation=latest, team__slug__in=slugs
        ).values_list("team__slug", "fair_allocation"):
            fair[slug] = {r: Decimal(str(a)) for r, a in (allocation or {}).items()}
    limits: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for slug, resource, limit in TeamQuota.objects.filter(
        team__slug__in=slugs, limit__isnull=False
    ).values_list("team__slug", "resource", "limit"):
        limits[slug][resource] = limit
    states = {}
    for slug in slugs:
        team_usage = usage.teams.get(slug)
        states[slug] = QueueState(
            team=slug,
            in_use=dict(team_usage.allocated) if team_usage else {},
            fair=fair.get(slug, {}),
            limit=dict(limits.get(slug, {})),
        )
    return states


def store_workloads(usage: ClusterUsage, *, now: datetime, team_ids: Mapping[str, int]) -> int:
    """Write this collection's workload rows and prune old collections; return rows written.

    ``team_ids`` maps namespace → team id (unknown namespaces: no team). Call inside the
    collection's transaction.
    """
    states = queue_states(usage, {w.team for w in usage.workloads if w.team in usage.teams})
    rows = []
    for w in usage.workloads:
        reason = wait_reason(w, queue=states.get(w.team))
        rows.append(
            Workload(
                taken_at=now,
                team_id=team_ids.get(w.namespace),
                namespace=w.namespace[:63],
                name=w.name[:253],
                kind=w.kind[:63],
                queue=w.queue[:253],
                priority_class=w.priority_class[:253],
                gang_size=w.gang_size,
                pods=w.pods,
                running=w.running,
                requested={r: _decimal_string(a) for r, a in w.requested.items()},
                gpus=max(0, w.gpus),
                waiting_for={r: _decimal_string(a) for r, a in w.waiting_for.items()},
                waiting_gpus=int(w.waiting_for.get(GPU, 0)),
                phase=w.phase[:32],
                waiting=w.waiting,
                created=parse_datetime(w.created) if w.created else None,
                wait_code=reason.code if reason else "",
                wait_reason=(reason.words if reason else "")[:500],
            )
        )
    Workload.objects.bulk_create(rows, batch_size=2000)
    prune_workloads()
    return len(rows)


def prune_workloads() -> int:
    """Delete workload rows of all but the newest ``FAIRSHARE_WORKLOAD_COLLECTIONS`` collections."""
    keep = settings.FAIRSHARE_WORKLOAD_COLLECTIONS
    times = (
        Workload.objects.order_by("-taken_at")
        .values_list("taken_at", flat=True)
        .distinct()[keep - 1 : keep]
    )
    oldest_kept = next(iter(times), None)
    if oldest_kept is None:
        return 0
    return Workload.objects.filter(taken_at__lt=oldest_kept).delete()[0]


# --------------------------------------------------------------------------- reading


def latest_taken_at() -> datetime | None:
    return Workload.objects.order_by("-taken_at").values_list("taken_at", flat=True).first()


def latest_workloads(user=None) -> QuerySet[Workload]:
    """The newest collection's workloads (visible to ``user`` when given); one query to find
    the collection, evaluated lazily."""
    taken_at = latest_taken_at()
    qs = Workload.objects.all() if user is None else Workload.objects.visible_to(user)
    if taken_at is None:
        return qs.none()
    return qs.filter(taken_at=taken_at)


SORTS = {
    "name": ("namespace", "name"),
    "gpus": ("-gpus", "namespace", "name"),
    "age": ("created", "namespace", "name"),
    "phase": ("-waiting", "phase", "namespace", "name"),
}


def team_workloads(team: Team, *, sort: str = "phase") -> list[Workload]:
    """The team's workloads in the newest collection, waiting first by default."""
    order = SORTS.get(sort, SORTS["phase"])
    return list(latest_workloads().filter(team=team).order_by(*order))


@dataclass(frozen=True)
class TeamWaiting:
    team_id: int
    workloads: int
    gpus: int
    longest_since: datetime | None


def waiting_by_team() -> dict[int, TeamWaiting]:
    """Per team id: waiting workloads, their GPUs, and the oldest waiting workload's creation."""
    from django.db.models import Count, Min, Sum

    out = {}
    rows = (
        latest_workloads()
        .filter(waiting=True, team__isnull=False)
        .values("team_id")
        .annotate(n=Count("id"), gpus=Sum("waiting_gpus"), since=Min("created"))
        .order_by("team_id")
    )
    for row in rows:
        out[row["team_id"]] = TeamWaiting(
            row["team_id"], row["n"], int(row["gpus"] or 0), row["since"]
        )
    return out
