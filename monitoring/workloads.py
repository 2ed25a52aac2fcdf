"""Workload records: store each collection's gangs with why they wait, and read them back.

``store_workloads`` runs inside the collection's transaction (``collection.store_usage``). It says
why each waiting workload waits with :func:`monitoring.domain.workloads.wait_reason`, giving it the
team's queue as this collection and the latest fair-share computation see it: what the team's
pods hold now, its DRF fair allocation (what Fairshare writes into the queue's ``deserved``) and
its quota limit (``TeamQuota.limit``, the queue's ``capability``). The fair allocations are
scheduling's, an app above this one: they come from a provider scheduling sets at start-up
(:func:`provide_fair_allocations`; ``scheduling.shares.latest_fair_allocations``, the latest
``ShareSnapshot.fair_allocation``) or from the caller. Only the newest
``FAIRSHARE_WORKLOAD_COLLECTIONS`` collections are kept.

The read side (``latest_workloads``, ``team_workloads``, ``waiting_by_team``) is what the pages,
the API and ``/metrics`` use; each is a constant number of queries. The smallest quota change
that would admit waiting workloads needs what-if shares: ``scheduling.admitting``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
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


FairAllocations = Callable[[Iterable[str]], Mapping[str, Mapping[str, Decimal]]]
"""Per team slug of those asked for: its DRF fair allocation {resource: amount} (teams without
one may be left out)."""


def no_fair_allocations(team_slugs: Iterable[str]) -> dict[str, dict[str, Decimal]]:
    """The provider until one is set: no shares known, so no workload waits "over its fair
    share" (monitoring computes no shares)."""
    return {}


_provider: dict[str, FairAllocations] = {"fair_allocations": no_fair_allocations}


def provide_fair_allocations(provider: FairAllocations) -> None:
    """Set where :func:`queue_states` reads the teams' fair allocations by default.

    Shares are scheduling's, which builds on this app: ``SchedulingConfig.ready`` sets
    ``scheduling.shares.latest_fair_allocations`` here, so monitoring never imports it.
    """
    _provider["fair_allocations"] = provider


def queue_states(
    usage: ClusterUsage,
    team_slugs: Iterable[str],
    *,
    fair_allocations: FairAllocations | None = None,
) -> dict[str, QueueState]:
    """Per team slug: what its pods hold in this collection, its fair allocation, its limits.

    ``fair_allocations`` (default: the provider set with :func:`provide_fair_allocations`)
    reads the fair allocations: two queries for scheduling's; then one for the quota limits,
    whatever the team count.
    """
    slugs = sorted(set(team_slugs))
    read_fair = fair_allocations or _provider["fair_allocations"]
    fair = {slug: dict(amounts) for slug, amounts in read_fair(slugs).items()}
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


def store_workloads(
    usage: ClusterUsage,
    *,
    now: datetime,
    team_ids: Mapping[str, int],
    fair_allocations: FairAllocations | None = None,
) -> int:
    """Write this collection's workload rows and prune old collections; return rows written.

    ``team_ids`` maps namespace → team id (unknown namespaces: no team); ``fair_allocations``
    as for :func:`queue_states`. Call inside the collection's transaction.
    """
    states = queue_states(
        usage,
        {w.team for w in usage.workloads if w.team in usage.teams},
        fair_allocations=fair_allocations,
    )
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
    """The newest collection's workloads (visible to ``user`` when given), lazily; the newest
    collection is a subquery, so reading them is one query."""
    newest = Workload.objects.order_by("-taken_at").values("taken_at")[:1]
    qs = Workload.objects.all() if user is None else Workload.objects.visible_to(user)
    return qs.filter(taken_at=newest)


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


# --------------------------------------------------------------------------- page contexts


def team_workloads_context(team: Team, *, sort: str | None = None) -> dict:
    """What ``monitoring/_team_workloads.html`` shows; two queries whatever the count."""
    rows = team_workloads(team, sort=sort or "phase")
    return {
        "workloads": rows,
        "workloads_waiting": sum(1 for w in rows if w.waiting),
        "workloads_taken_at": rows[0].taken_at if rows else None,
    }


def dashboard_waiting_context(teams: Iterable[Team]) -> dict:
    """What ``monitoring/_dashboard_waiting.html`` shows for ``teams`` (the visible ones), most
    waiting GPUs first; two queries."""
    by_id = {team.pk: team.slug for team in teams}
    rows = [
        {
            "slug": by_id[w.team_id],
            "workloads": w.workloads,
            "gpus": w.gpus,
            "since": w.longest_since,
        }
        for w in waiting_by_team().values()
        if w.team_id in by_id
    ]
    rows.sort(key=lambda r: (-r["gpus"], r["slug"]))
    return {"waiting_rows": rows}
