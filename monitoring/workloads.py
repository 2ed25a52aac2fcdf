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

**Records.** Workload rows are pruned after a few collections, so ``store_workloads`` also keeps
one :class:`~monitoring.models.WorkloadRecord` per workload's life (``store_records``): first
seen, first seen waiting, started, last seen, finished, how long it waited; a constant number of
queries per collection (batched), idempotent for a collection stored twice, pruned
``FAIRSHARE_WORKLOAD_RECORD_DAYS`` (default 90) after they were last seen. From them come the
run lengths behind start estimates and the weekly waits (``team_waits``).

**What must change** (``workload_blockers``): per waiting workload, the blockers of
:mod:`monitoring.domain.blockers` from the team's quota, its departments', usage now, the
latest capacity, the fair allocation, pending requests, its running workloads and its records;
a constant number of queries for any number of workloads and teams.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import F, QuerySet, Sum
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from monitoring.domain import blockers as blocking
from monitoring.domain import waits as waiting
from monitoring.domain.aggregate import ClusterUsage
from monitoring.domain.workloads import QueueState, wait_reason
from monitoring.domain.workloads import Workload as SeenWorkload
from monitoring.models import (
    CapacitySnapshot,
    GpuInventoryNode,
    UsageSample,
    Workload,
    WorkloadRecord,
)
from quotas.choices import QuotaRequestStatus
from quotas.models import QuotaRequest, Team, TeamQuota
from quotas.quantities import format_quantity, parse_quantity

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
    store_records(usage.workloads, now=now, team_ids=team_ids)
    prune_records(now=now)
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


# --------------------------------------------------------------------------- records

_CHUNK = 1000


def _chunks(ids: list[int]):
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def store_records(
    workloads: Sequence[SeenWorkload], *, now: datetime, team_ids: Mapping[str, int]
) -> int:
    """Bring the workload records up to this collection; return the records it opened.

    1. A workload with no open record opens one (first seen now; waiting now: first waiting
       now; running with nothing waiting: started now). Its wait is known only if the previous
       collection could not have seen it (created after it): then it started without a
       collection seeing it wait, and counts as no wait.
    2. An open record seen again moves ``last_seen`` to now; the first time it waits sets
       ``first_waiting``, the first time it runs with nothing waiting sets ``started`` and
       ``waited_seconds`` (from its creation, else its first sighting).
    3. An open record this collection does not see is finished, at its ``last_seen`` (the last
       collection that saw it).

    A collection with no workloads at all closes nothing: it may come from a path that groups
    no workloads (the demo's history replay); the next collection that sees workloads closes
    them at the same moment, their ``last_seen``. Records already at or past ``now`` are left as
    they are, so storing a collection twice changes nothing. Queries: three, plus one per
    thousand records written.
    """
    if not workloads:
        return 0
    open_records = {
        (r.namespace, r.kind, r.name): r
        for r in WorkloadRecord.objects.filter(finished__isnull=True).only(
            "pk",
            "team_id",
            "namespace",
            "kind",
            "name",
            "gpus",
            "created",
            "first_seen",
            "first_waiting",
            "started",
            "last_seen",
        )
    }
    previous = (
        Workload.objects.filter(taken_at__lt=now)
        .order_by("-taken_at")
        .values_list("taken_at", flat=True)
        .first()
    )
    new: list[WorkloadRecord] = []
    changed: list[WorkloadRecord] = []
    seen: list[int] = []
    opened: set[tuple[str, str, str]] = set()
    for w in workloads:
        key = (w.namespace[:63], w.kind[:63], w.name[:253])
        runs = not w.waiting and w.running > 0
        record = open_records.pop(key, None)
        if record is None:
            if key in opened:  # the same name twice in one collection: keep the first
                continue
            opened.add(key)
            created = parse_datetime(w.created) if w.created else None
            record = WorkloadRecord(
                team_id=team_ids.get(w.namespace),
                namespace=key[0],
                kind=key[1],
                name=key[2],
                gpus=max(0, w.gpus),
                created=created,
                first_seen=now,
                last_seen=now,
                first_waiting=now if w.waiting else None,
                started=now if runs else None,
            )
            if runs and previous is not None and created is not None and created > previous:
                record.waited_seconds = 0
            new.append(record)
            continue
        if record.last_seen >= now:
            continue
        seen.append(record.pk)
        dirty = False
        if w.waiting and record.first_waiting is None and record.started is None:
            record.first_waiting = now
            dirty = True
        if runs and record.started is None:
            record.started = now
            since = record.created or record.first_seen
            record.waited_seconds = max(0, int((now - since).total_seconds()))
            dirty = True
        team_id = team_ids.get(w.namespace)
        if record.team_id != team_id or record.gpus != max(0, w.gpus):
            record.team_id, record.gpus = team_id, max(0, w.gpus)
            dirty = True
        if dirty:
            changed.append(record)
    gone = [r.pk for r in open_records.values() if r.last_seen < now]
    for ids in _chunks(gone):
        WorkloadRecord.objects.filter(pk__in=ids).update(finished=F("last_seen"))
    for ids in _chunks(seen):
        WorkloadRecord.objects.filter(pk__in=ids).update(last_seen=now)
    WorkloadRecord.objects.bulk_update(
        changed, ["team", "gpus", "first_waiting", "started", "waited_seconds"], batch_size=500
    )
    WorkloadRecord.objects.bulk_create(new, batch_size=2000)
    return len(new)


def prune_records(*, now: datetime) -> int:
    """Delete records last seen more than ``FAIRSHARE_WORKLOAD_RECORD_DAYS`` days before now."""
    days = getattr(settings, "FAIRSHARE_WORKLOAD_RECORD_DAYS", 90)
    return WorkloadRecord.objects.filter(last_seen__lt=now - timedelta(days=days)).delete()[0]


def team_waits(teams: Iterable[Team], *, now: datetime, weeks: int = 8) -> list[waiting.WeekWaits]:
    """Per team of ``teams`` and week (newest first, the last ``weeks`` weeks up to ``now``):
    how many workloads started and how long they had waited (``monitoring.domain.waits``).
    One query."""
    by_id = {team.pk: team.slug for team in teams}
    since = datetime.combine(
        waiting.week_start(now) - timedelta(weeks=max(1, weeks) - 1),
        datetime.min.time(),
        tzinfo=UTC,
    )
    rows = WorkloadRecord.objects.filter(
        team_id__in=list(by_id), started__gte=since, waited_seconds__isnull=False
    ).values_list("team_id", "started", "waited_seconds")
    return waiting.weekly_waits(
        waiting.StartedWait(by_id[team_id], started, waited) for team_id, started, waited in rows
    )


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


# --------------------------------------------------------------------------- what must change

# monitoring.domain.workloads._quota_words: "... ResourceQuota allows 48 GPUs, 38 are in use"
_QUOTA_WORDS = re.compile(
    r"namespace (?P<namespace>\S+)'s ResourceQuota allows (?P<limit>\S+) (?P<what>.+?), "
    r"(?P<used>\S+) are in use"
)
_WORD_RESOURCES = {"GPUs": GPU, "CPUs": "cpu"}


def _namespace_quota(w: Workload) -> blocking.NamespaceQuota | None:
    """The refusing ResourceQuota's numbers, read back from the wait reason's words."""
    if w.wait_code != "quota":
        return None
    match = _QUOTA_WORDS.search(w.wait_reason)
    if match is None:
        return None
    what = match["what"]
    resource = _WORD_RESOURCES.get(what, what)
    try:
        limit = parse_quantity(match["limit"])
        used = parse_quantity(match["used"])
    except ValidationError:
        return None
    return blocking.NamespaceQuota(match["namespace"], resource, limit, used)


def _amounts(raw: Mapping[str, object]) -> dict[str, Decimal]:
    return {name: Decimal(str(value)) for name, value in (raw or {}).items()}


def workload_blockers(
    workloads: Iterable[Workload], *, now: datetime
) -> dict[int, list[blocking.Blocker]]:
    """Per waiting workload id: what stands in its way
    (:func:`monitoring.domain.blockers.blockers`). Running workloads get nothing; a workload of
    no team (a namespace Fairshare does not know) meets only the cluster's checks.

    Only the workload's own team's running workloads and pending requests are ever named;
    other teams' work counts as amounts, and a department's requests are left out (the team's
    members may not see them). About a dozen queries whatever the number of workloads and teams.
    """
    from monitoring.usage import current_usage

    waits = [w for w in workloads if w.waiting]
    if not waits:
        return {}
    teams = {
        pk: (slug, parent)
        for pk, slug, parent in Team.objects.values_list("pk", "slug", "parent_id")
    }
    team_ids = sorted({w.team_id for w in waits if w.team_id is not None})

    def ancestors(team_id: int) -> list[int]:
        chain, parent, seen = [], teams.get(team_id, ("", None))[1], {team_id}
        while parent is not None and parent not in seen:
            chain.append(parent)
            seen.add(parent)
            parent = teams.get(parent, ("", None))[1]
        return chain

    chains = {team_id: ancestors(team_id) for team_id in team_ids}
    involved = set(team_ids) | {a for chain in chains.values() for a in chain}
    limits: dict[int, dict[str, Decimal]] = defaultdict(dict)
    for team_id, resource, limit in TeamQuota.objects.filter(
        team_id__in=involved, limit__isnull=False
    ).values_list("team_id", "resource", "limit"):
        limits[team_id][resource] = limit
    usage = current_usage()
    fair = _provider["fair_allocations"]([teams[t][0] for t in team_ids])
    snapshot = CapacitySnapshot.objects.order_by("-taken_at", "-id").first()
    capacity = snapshot.amounts() if snapshot else {}
    flavor_capacity = {
        product: _amounts(amounts)
        for product, amounts in (snapshot.flavors if snapshot else {}).items()
    }
    cluster_in_use: dict[str, Decimal] = defaultdict(Decimal)
    flavor_in_use: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    if usage.taken_at is not None:
        for resource, flavor, allocated in (
            UsageSample.objects.filter(taken_at=usage.taken_at)
            .values("resource", "flavor")
            .annotate(a=Sum("allocated"))
            .order_by()
            .values_list("resource", "flavor", "a")
        ):
            cluster_in_use[resource] += allocated or 0
            if flavor:
                flavor_in_use[flavor][resource] += allocated or 0
    largest = GpuInventoryNode.objects.order_by("-gpus").values_list("gpus", flat=True).first()
    pending: dict[int, list[blocking.PendingGrant]] = defaultdict(list)
    for request in QuotaRequest.objects.filter(
        team_id__in=team_ids, status=QuotaRequestStatus.PENDING
    ).prefetch_related("lines"):
        lines = list(request.lines.all())
        pending[request.team_id].append(
            blocking.PendingGrant(
                request_id=request.pk,
                team=teams[request.team_id][0],
                limits={line.resource: line.limit for line in lines if line.limit is not None},
                guarantees={line.resource: line.guarantee for line in lines},
            )
        )
    records = {
        (r["namespace"], r["kind"], r["name"]): r
        for r in WorkloadRecord.objects.filter(team_id__in=team_ids, finished__isnull=True).values(
            "namespace", "kind", "name", "started", "waited_seconds"
        )
    }
    runs: dict[int, dict[str, list[timedelta]]] = defaultdict(lambda: defaultdict(list))
    for team_id, kind, started, finished in (
        WorkloadRecord.objects.filter(
            team_id__in=team_ids,
            finished__isnull=False,
            started__isnull=False,
            waited_seconds__isnull=False,
        )
        .order_by("-finished", "-id")
        .values_list("team_id", "kind", "started", "finished")[:20000]
    ):
        if len(runs[team_id][kind]) < blocking.RUNS_USED and finished >= started:
            runs[team_id][kind].append(finished - started)
    taken = waits[0].taken_at
    holders: dict[int, list[tuple[int, blocking.Holder]]] = defaultdict(list)
    for h in Workload.objects.filter(taken_at=taken, team_id__in=team_ids, running__gt=0).only(
        "pk", "team_id", "namespace", "name", "kind", "requested", "waiting_for", "created"
    ):
        held = {r: a - h.waiting_amounts().get(r, Decimal(0)) for r, a in h.amounts().items()}
        record = records.get((h.namespace, h.kind, h.name))
        started = h.created
        if record is not None and record["waited_seconds"] is not None:
            started = record["started"]
        holders[h.team_id].append(
            (
                h.pk,
                blocking.Holder(
                    name=f"{h.namespace}/{h.name}",
                    kind=h.kind,
                    amounts={r: a for r, a in held.items() if a > 0},
                    started=started,
                    namespace=h.namespace,
                ),
            )
        )
    out = {}
    for w in waits:
        team_id = w.team_id
        slug = teams[team_id][0] if team_id is not None else ""
        chain = chains.get(team_id, []) if team_id is not None else []
        situation = blocking.Situation(
            team=slug or f"namespace {w.namespace}",
            wanted=w.waiting_amounts() or w.amounts(),
            now=now,
            gang_size=w.gang_size,
            requested=w.amounts(),
            team_bound=None
            if team_id is None
            else blocking.Bound(slug, limits.get(team_id, {}), usage.allocated.get(team_id, {})),
            departments=tuple(
                blocking.Bound(teams[a][0], limits[a], usage.allocated.get(a, {}))
                for a in chain
                if limits.get(a)
            ),
            fair=dict(fair.get(slug, {})),
            capacity=capacity,
            cluster_in_use=dict(cluster_in_use),
            flavor_capacity=flavor_capacity,
            flavor_in_use={p: dict(a) for p, a in flavor_in_use.items()},
            largest_node={GPU: Decimal(largest)} if largest else {},
            holders=tuple(holder for pk, holder in holders.get(team_id, ()) if pk != w.pk),
            # Only the team's own requests: its members may not see a department's.
            pending=tuple(pending.get(team_id, ())),
            run_lengths={kind: tuple(spans) for kind, spans in runs.get(team_id, {}).items()},
            in_queue=bool(w.queue),
            namespace_quota=_namespace_quota(w),
            scheduler_words=w.wait_reason
            if w.wait_code not in ("quota", "capability", "fair-share")
            else "",
        )
        out[w.pk] = blocking.blockers(situation)
    return out


def blocker_dicts(
    blockers: Iterable[blocking.Blocker], *, workload: Workload, team_slug: str
) -> list[dict]:
    """Blockers as plain data for the page and the API: amounts as canonical quantities, each
    remedy with a link where there is one (the prefilled request form, a pending request)."""
    out = []
    for blocker in blockers:
        remedies = []
        for remedy in blocker.remedies:
            url = ""
            if remedy.kind == "approval" and remedy.request_id is not None:
                url = reverse("portal:quotarequest", args=[remedy.request_id])
            elif remedy.kind == "request" and remedy.team == team_slug and remedy.team:
                # The form pre-fills the smallest change that admits this workload
                # (scheduling.admitting), namespace splits and guarantees included.
                url = reverse("portal:quotarequest_create", args=[team_slug])
                url += f"?workload={workload.pk}"
            remedies.append(
                {
                    "kind": remedy.kind,
                    "words": remedy.words,
                    "workloads": list(remedy.workloads),
                    "request": remedy.request_id,
                    "team": remedy.team or None,
                    "resource": remedy.resource or None,
                    "limit": None
                    if remedy.limit is None
                    else format_quantity(remedy.limit, remedy.resource),
                    "guarantee": None
                    if remedy.guarantee is None
                    else format_quantity(remedy.guarantee, remedy.resource),
                    "url": url or None,
                }
            )
        out.append(
            {
                "kind": blocker.kind,
                "resource": blocker.resource,
                "short_by": format_quantity(blocker.short_by, blocker.resource),
                "words": blocker.words,
                "remedies": remedies,
                "estimate": blocker.estimate,
                "estimate_seconds": blocker.estimate_seconds,
            }
        )
    return out


# --------------------------------------------------------------------------- page contexts


def team_workloads_context(
    team: Team, *, sort: str | None = None, now: datetime | None = None
) -> dict:
    """What ``monitoring/_team_workloads.html`` shows: the workloads, what must change for each
    waiting one (``w.blockers``) and the team's weekly waits; a constant number of queries
    whatever the count."""
    from django.utils import timezone

    now = now or timezone.now()
    rows = team_workloads(team, sort=sort or "phase")
    found = workload_blockers(rows, now=now)
    for w in rows:
        w.blockers = blocker_dicts(found.get(w.pk, ()), workload=w, team_slug=team.slug)
    return {
        "workloads": rows,
        "workloads_waiting": sum(1 for w in rows if w.waiting),
        "workloads_taken_at": rows[0].taken_at if rows else None,
        "workload_waits": [
            {
                "week": row.week,
                "started": row.started,
                "median": blocking.duration_words(timedelta(seconds=row.median_seconds)),
                "p90": blocking.duration_words(timedelta(seconds=row.p90_seconds)),
                "longest": blocking.duration_words(timedelta(seconds=row.longest_seconds)),
            }
            for row in team_waits([team], now=now)
        ],
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
