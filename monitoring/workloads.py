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


# --------------------------------------------------------------------------- quota from demand


@dataclass(frozen=True)
class AdmittingChange:
    """The smallest quota change that would admit ``workloads`` (a request's lines).

    ``lines`` maps resource → (new guarantee, new limit), only for resources that change;
    ``needed`` is what the team must be able to hold, per resource (in use + what waits).
    """

    workloads: list[Workload]
    lines: dict[str, tuple[Decimal, Decimal]]
    needed: dict[str, Decimal]
    justification: str


def _integral(resource: str) -> bool:
    return "/" in resource


def _ceil(amount: Decimal, resource: str) -> Decimal:
    if _integral(resource):
        return amount.to_integral_value(rounding="ROUND_CEILING")
    return amount


def _limit_for_namespace(
    resource: str, need: Decimal, namespace: str, shares: Mapping[str, int]
) -> Decimal:
    """The smallest team limit whose per-namespace split (``scheduling.desired.split_quota``,
    the ResourceQuota the sync writes) gives ``namespace`` at least ``need``."""
    from scheduling.desired import split_quota

    total = sum(max(0, s) for s in shares.values())
    share = max(0, shares.get(namespace, 0))
    if share == 0 or total == 0:
        return need
    limit = _ceil(need * total / share, resource)
    for _ in range(64):  # rounding to grains may leave it a grain short
        if split_quota({resource: limit}, shares)[namespace].get(resource, 0) >= need:
            break
        limit += 1 if _integral(resource) else Decimal("0.001")
    return limit


def admitting_change(team: Team, workload_ids: Iterable[int]) -> AdmittingChange:
    """Work out the smallest change to ``team``'s quota that admits the selected waiting
    workloads of the newest collection (ids of other teams, or of running workloads, are
    ignored).

    Per resource the selected workloads wait for (``Workload.waiting_for``):
    1. needed = what the team's pods hold now + Σ what the selection waits for;
    2. new limit = max(current limit, needed, and for a workload a namespace's ResourceQuota
       refused: the team limit whose namespace split gives that namespace its current use +
       what it waits for);
    3. the what-if preview of that limit (``scheduling.services.what_if``) gives the team a fair
       allocation; where it is still short of ``needed``, the guarantee rises to ``needed``
       (guarantees are granted first), capped by the new limit.
    A constant number of queries plus one or two what-if computations.
    """
    from monitoring.models import UsageSample
    from quotas.models import Namespace
    from scheduling.services import what_if

    selected = list(
        latest_workloads()
        .filter(team=team, waiting=True, pk__in=list(workload_ids))
        .order_by("namespace", "name")
    )
    current = {q.resource: (q.guarantee, q.limit) for q in team.quotas.all()}
    taken_at = (
        UsageSample.objects.filter(team=team)
        .order_by("-taken_at")
        .values_list("taken_at", flat=True)[:1]
    )
    in_use: dict[str, Decimal] = defaultdict(Decimal)
    ns_counted: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for namespace, resource, allocated, pending in UsageSample.objects.filter(
        team=team, taken_at__in=taken_at
    ).values_list("namespace", "resource", "allocated", "pending"):
        in_use[resource] += allocated
        # A ResourceQuota counts every live pod of the namespace, bound or not.
        ns_counted[(namespace, resource)] += allocated + pending
    shares = dict(Namespace.objects.filter(team=team).values_list("name", "share"))
    # Pending also counts what refused owners (no pod of theirs exists) wait for; their
    # namespace's ResourceQuota does not count it until their pods exist.
    for w in latest_workloads().filter(team=team, waiting=True):
        if w.wait_code == "quota" and w.pods == 0:
            for resource, amount in w.waiting_amounts().items():
                ns_counted[(w.namespace, resource)] -= amount

    waiting: dict[str, Decimal] = defaultdict(Decimal)
    quota_need: dict[str, Decimal] = {}
    refused_extra: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for w in selected:
        for resource, amount in w.waiting_amounts().items():
            waiting[resource] += amount
            if w.wait_code == "quota" and w.pods == 0:
                # Its pods were refused, so the namespace's use does not count them yet.
                refused_extra[(w.namespace, resource)] += amount
    for w in selected:
        if w.wait_code != "quota":
            continue
        for resource in w.waiting_amounts():
            need = ns_counted[(w.namespace, resource)] + refused_extra[(w.namespace, resource)]
            limit = _limit_for_namespace(resource, need, w.namespace, shares)
            quota_need[resource] = max(quota_need.get(resource, Decimal(0)), limit)

    needed = {r: _ceil(in_use[r] + amount, r) for r, amount in sorted(waiting.items())}
    lines: dict[str, tuple[Decimal, Decimal]] = {}
    for resource, need in needed.items():
        guarantee, limit = current.get(resource, (Decimal(0), None))
        wanted = max(need, quota_need.get(resource, Decimal(0)))
        if limit is None or limit >= wanted:
            continue
        lines[resource] = (guarantee, wanted)
    if lines:
        fair = _fair_after(what_if, team, lines)
        for resource, (guarantee, limit) in list(lines.items()):
            if fair.get(resource, Decimal(0)) < needed[resource]:
                lines[resource] = (min(max(guarantee, needed[resource]), limit), limit)
    # A limit that already admits may still leave the fair allocation short.
    short = [r for r in needed if r not in lines and current.get(r, (0, None))[1] is not None]
    if short:
        fair = _fair_after(what_if, team, lines)
        for resource in short:
            guarantee, limit = current[resource]
            if fair.get(resource, Decimal(0)) < needed[resource] and guarantee < needed[resource]:
                lines[resource] = (min(needed[resource], limit), limit)
    names = ", ".join(f"{w.namespace}/{w.name}" for w in selected)
    return AdmittingChange(
        workloads=selected,
        lines=dict(sorted(lines.items())),
        needed=needed,
        justification=f"Admit the waiting workloads {names}." if selected else "",
    )


def _fair_after(what_if, team: Team, lines: Mapping[str, tuple[Decimal, Decimal]]):
    change = {
        "guarantee": {r: g for r, (g, _) in lines.items()},
        "limit": {r: lim for r, (_, lim) in lines.items()},
    }
    result = what_if({team.slug: change}).to_dict()
    for row in result.get("teams", []):
        if row.get("team") == team.slug:
            return {
                r: Decimal(str(a))
                for r, a in row.get("after", {}).get("fair_allocation", {}).items()
            }
    return {}


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
