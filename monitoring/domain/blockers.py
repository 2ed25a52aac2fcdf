"""What must change for a waiting workload to start (pure): blockers, remedies, estimates.

Given one waiting workload's :class:`Situation` — what it waits for per resource, its gang, the
team's limit and what the team holds, its departments' (ancestors') limits and holdings, the
team's fair allocation, the cluster's capacity and use (per GPU flavor too), the team's running
workloads, the quota requests awaiting a decision and the team's finished run lengths —
:func:`blockers` returns what stands in the way, in order, each with how much is missing (an
exact Decimal), the sentence people read, what would release it and an estimated start only
where there is a stated basis.

The checks, per resource the workload waits for (GPUs first, then the others by name), in
this order:

1. ``gang``: the gang cannot start as it is, whatever else ends: one member needs more than
   the largest node has, or the whole gang more than the cluster has;
2. ``team-limit``: the team's pods hold ``in use`` and ``in use + wanted > limit`` (Volcano
   ``capability``, the ResourceQuota the sync writes). When a namespace's ResourceQuota refused
   the pods (its part of the team's limit), the namespace's own numbers are used; a workload
   in no queue (the default scheduler) meets only that ResourceQuota, not checks 2-4;
3. ``department-limit``: the same for each ancestor with a limit, nearest first (its figures
   are its subtree's);
4. ``fair-share``: ``in use + wanted > fair allocation`` (what Fairshare writes into the queue's
   ``deserved``; Volcano does not admit past it while others wait);
5. ``cluster``: ``wanted > capacity − everything allocated``;
6. ``flavor``: the same within the GPU product the workload asks for (when known);
7. ``scheduler``: none of the above binds: the numbers that were checked, and the scheduler's
   words (a taint, a node selector, a PodGroup condition...).

**Remedies.** A limit or a share is released by the team's own running workloads: the smallest
set (by count; the largest holders first, ties by name) whose release makes room, named. Other
teams' workloads are never named — only what they hold together — so nobody learns another
team's workloads from a page of their own. A limit is also lifted by an approval: a request
awaiting a decision whose new limit fits (named with its id), else a new request, prefilled with
the limit that would fit (``in use + wanted``, whole devices rounded up). A fair share grows with
a guarantee: the request's guarantee that would fit. Capacity (``cluster``, ``flavor``) has no
request to file: it frees as running work ends.

**Estimates.** Only for a blocker the team's own running workloads hold, and only from the
team's finished runs of each holder's kind (at least :data:`MIN_RUNS` of them, the newest
:data:`RUNS_USED`): each holder is expected to end at ``its start + the median run length of
its kind``; room appears when enough of them have ended (expected ends in order, until what they
release covers the shortfall). The words state the basis ("median of the team's last 12
PyTorchJob runs: 5 h; the oldest holder started 2 h ago"). Without a basis the words say why
not ("no estimate: no finished runs of this kind recorded") and ``estimate_seconds`` is None.

Nothing here reads the clock, settings or the database; ``now`` comes in.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal

from quotas.domain.quantity import format_quantity, is_byte_resource

__all__ = [
    "MIN_RUNS",
    "RUNS_USED",
    "Blocker",
    "Bound",
    "Holder",
    "NamespaceQuota",
    "PendingGrant",
    "Remedy",
    "Situation",
    "blockers",
    "duration_words",
]

GPU = "nvidia.com/gpu"
MIN_RUNS = 3  # fewer finished runs than this are no basis for an estimate
RUNS_USED = 12  # the newest runs of a kind the median is taken over
ZERO = Decimal(0)

KINDS = ("gang", "team-limit", "department-limit", "fair-share", "cluster", "flavor", "scheduler")


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Bound:
    """A limit someone holds: a team's or a department's quota ceilings and what its pods (a
    department: its subtree's) hold now."""

    owner: str  # team slug
    limit: Mapping[str, Decimal] = field(default_factory=dict)
    in_use: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class Holder:
    """One of the team's running workloads: ``name`` is ``namespace/name``; ``started`` when it
    started (None: unknown)."""

    name: str
    kind: str
    amounts: Mapping[str, Decimal]
    started: datetime | None = None
    namespace: str = ""


@dataclass(frozen=True)
class PendingGrant:
    """A quota request awaiting a decision: its id, the team it is for and its new limits
    (and guarantees) per resource."""

    request_id: int
    team: str
    limits: Mapping[str, Decimal] = field(default_factory=dict)
    guarantees: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class NamespaceQuota:
    """A namespace's ResourceQuota that refused the workload's pods: its limit and use of one
    resource (from the refusal)."""

    namespace: str
    resource: str
    limit: Decimal
    used: Decimal


@dataclass(frozen=True)
class Situation:
    """Everything about one waiting workload that decides what stands in its way."""

    team: str
    wanted: Mapping[str, Decimal]  # what must still be admitted, per resource
    now: datetime
    gang_size: int = 0
    requested: Mapping[str, Decimal] = field(default_factory=dict)  # the whole gang's
    product: str = ""  # the GPU product it asks for ("" unknown / any)
    team_bound: Bound | None = None
    departments: Sequence[Bound] = ()  # nearest first
    fair: Mapping[str, Decimal] = field(default_factory=dict)
    capacity: Mapping[str, Decimal] = field(default_factory=dict)
    cluster_in_use: Mapping[str, Decimal] = field(default_factory=dict)
    flavor_capacity: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    flavor_in_use: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    largest_node: Mapping[str, Decimal] = field(default_factory=dict)
    holders: Sequence[Holder] = ()  # the team's running workloads
    pending: Sequence[PendingGrant] = ()
    run_lengths: Mapping[str, Sequence[timedelta]] = field(default_factory=dict)  # newest first
    namespace_quota: NamespaceQuota | None = None
    scheduler_words: str = ""
    # In a Volcano (or Kueue) queue: the queue's limits and fair share apply. Pods outside any
    # queue (the default scheduler) meet only their namespace's ResourceQuota and the nodes.
    in_queue: bool = True


# ---------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Remedy:
    """What would release a blocker.

    ``kind``: ``release`` (``workloads`` named), ``others`` (other teams' work holds it),
    ``approval`` (``request_id`` awaiting a decision fits), ``request`` (file one: ``team``,
    ``resource``, and the ``limit`` or ``guarantee`` that would fit; None: the smallest change
    is worked out by the request form), ``wait`` (capacity frees as work ends), ``change``
    (the workload itself must change: no release or quota fits it).
    """

    kind: str
    words: str
    workloads: tuple[str, ...] = ()
    request_id: int | None = None
    team: str = ""
    resource: str = ""
    limit: Decimal | None = None
    guarantee: Decimal | None = None


@dataclass(frozen=True)
class Blocker:
    kind: str  # one of KINDS
    resource: str
    short_by: Decimal
    words: str
    remedies: tuple[Remedy, ...] = ()
    estimate: str = ""
    estimate_seconds: int | None = None


# ---------------------------------------------------------------- words

_NAMES = {GPU: ("GPU", "GPUs"), "cpu": ("CPU core", "CPU cores")}


_GI = Decimal(2**30)
_MI = Decimal(2**20)


def _bare(amount: Decimal, resource: str) -> str:
    """The amount as a Kubernetes quantity; in words a byte amount that is no whole number of
    Gi (fair allocations, sums of odd requests) is rounded up to whole Gi (under 1Gi: Mi), so
    people read ``1986Gi``, not ``2032896Mi`` or ``946801679474``."""
    amount = max(amount, ZERO)
    if is_byte_resource(resource) and amount % _GI:
        step = _GI if amount >= _GI else _MI
        amount = (amount / step).to_integral_value(rounding=ROUND_CEILING) * step
    return format_quantity(amount, resource)


def _more(amount: Decimal, resource: str) -> str:
    """``8 more GPUs``, ``1 more GPU``, ``256Gi more memory``, ``2 more example.com/fpga``."""
    text = _bare(amount, resource)
    if resource in _NAMES:
        one, many = _NAMES[resource]
        return f"{text} more {one if amount == 1 else many}"
    return f"{text} more {resource}"


def _amount(amount: Decimal, resource: str) -> str:
    """``8 GPUs``, ``1 GPU``, ``16 CPU cores``, ``64Gi of memory``, ``2 example.com/fpga``."""
    text = _bare(amount, resource)
    if resource in _NAMES:
        one, many = _NAMES[resource]
        return f"{text} {one if amount == 1 else many}"
    if "/" not in resource:
        return f"{text} of {resource}"
    return f"{text} {resource}"


def _limit_words(owner: str, limit: Decimal, resource: str) -> str:
    if resource == GPU:
        return f"{owner}'s {_bare(limit, resource)}-GPU limit"
    return f"{owner}'s limit of {_amount(limit, resource)}"


def _integral(resource: str) -> bool:
    return "/" in resource


def _ceil(amount: Decimal, resource: str) -> Decimal:
    if _integral(resource):
        return amount.to_integral_value(rounding=ROUND_CEILING)
    return amount


def duration_words(span: timedelta) -> str:
    """``40 min``, ``3 h``, ``2.5 h``, ``4 d`` (rounded; under a minute: ``<1 min``)."""
    seconds = max(0, span.total_seconds())
    if seconds < 60:
        return "<1 min"
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min"
    if seconds < 10 * 3600:
        hours = round(seconds / 3600, 1)
        return f"{hours:g} h"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86400, 1):g} d"


# ---------------------------------------------------------------- remedies


def _release(holders: Sequence[Holder], resource: str, short: Decimal) -> list[Holder] | None:
    """The fewest holders whose release frees ``short`` of ``resource`` (largest first, ties by
    name); None if all of them together free too little."""
    holding = [h for h in holders if h.amounts.get(resource, ZERO) > 0]
    holding.sort(key=lambda h: (-h.amounts.get(resource, ZERO), h.name))
    chosen: list[Holder] = []
    freed = ZERO
    for holder in holding:
        if freed >= short:
            break
        chosen.append(holder)
        freed += holder.amounts[resource]
    return chosen if freed >= short else None


def _release_remedy(chosen: Sequence[Holder], resource: str) -> Remedy:
    freed = sum((h.amounts[resource] for h in chosen), ZERO)
    if len(chosen) == 1:
        words = (
            f"the team's running workload {chosen[0].name} holds {_amount(freed, resource)}; "
            "its end makes room"
        )
    else:
        names = ", ".join(f"{h.name} ({_bare(h.amounts[resource], resource)})" for h in chosen)
        words = (
            f"the team's running workloads {names} hold {_amount(freed, resource)}; "
            "their end makes room"
        )
    return Remedy(kind="release", words=words, workloads=tuple(h.name for h in chosen))


def _grant_remedies(
    pending: Sequence[PendingGrant],
    owner: str,
    resource: str,
    need: Decimal,
    *,
    guarantee: bool = False,
) -> list[Remedy]:
    """A pending request of ``owner`` that fits (the first by id), else the largest that does
    not, with what it would still leave missing."""
    amounts = [
        (g, (g.guarantees if guarantee else g.limits).get(resource))
        for g in sorted(pending, key=lambda g: g.request_id)
        if g.team == owner
    ]
    amounts = [(g, a) for g, a in amounts if a is not None]
    what = "guarantee" if guarantee else "limit"
    for grant, amount in amounts:
        if amount >= need:
            return [
                Remedy(
                    kind="approval",
                    words=(
                        f"request #{grant.request_id} awaits a decision: it raises {owner}'s "
                        f"{what} to {_amount(amount, resource)}, enough for it"
                    ),
                    request_id=grant.request_id,
                    team=owner,
                    resource=resource,
                    limit=None if guarantee else amount,
                    guarantee=amount if guarantee else None,
                )
            ]
    if amounts:
        grant, amount = max(amounts, key=lambda ga: (ga[1], -ga[0].request_id))
        return [
            Remedy(
                kind="approval",
                words=(
                    f"request #{grant.request_id} awaits a decision but raises {owner}'s {what} "
                    f"only to {_amount(amount, resource)}, "
                    f"{_amount(need - amount, resource)} short of it"
                ),
                request_id=grant.request_id,
                team=owner,
                resource=resource,
                limit=None if guarantee else amount,
                guarantee=amount if guarantee else None,
            )
        ]
    return []


def _request_remedy(owner: str, resource: str, need: Decimal, *, guarantee: bool = False) -> Remedy:
    need = _ceil(need, resource)
    if guarantee:
        return Remedy(
            kind="request",
            words=(
                f"request a guarantee of {_amount(need, resource)} for {owner} "
                "(guarantees are granted before fair shares)"
            ),
            team=owner,
            resource=resource,
            guarantee=need,
        )
    return Remedy(
        kind="request",
        words=f"request a limit of {_amount(need, resource)} for {owner}",
        team=owner,
        resource=resource,
        limit=need,
    )


# ---------------------------------------------------------------- estimates


def _estimate(situation: Situation, resource: str, short: Decimal) -> tuple[str, int | None]:
    """When the team's own holders are expected to have freed ``short`` (module docstring)."""
    holding = [h for h in situation.holders if h.amounts.get(resource, ZERO) > 0]
    if not holding:
        return "no estimate: none of the team's running workloads holds it", None
    medians: dict[str, timedelta] = {}
    counts: dict[str, int] = {}
    missing: list[str] = []
    for kind in sorted({h.kind for h in holding}):
        runs = list(situation.run_lengths.get(kind, ()))[:RUNS_USED]
        if len(runs) < MIN_RUNS:
            missing.append(f"{kind} ({len(runs)})" if runs else kind)
            continue
        medians[kind] = timedelta(seconds=statistics.median(r.total_seconds() for r in runs))
        counts[kind] = len(runs)
    based = [h for h in holding if h.kind in medians and h.started is not None]
    ends = sorted(
        ((h.started + medians[h.kind], h) for h in based if h.started is not None),
        key=lambda eh: (eh[0], eh[1].name),
    )
    freed = ZERO
    for end, holder in ends:
        freed += holder.amounts[resource]
        if freed >= short:
            left = end - situation.now
            basis = "; ".join(
                f"median of the team's last {counts[k]} {k} runs: {duration_words(medians[k])}"
                for k in sorted(medians)
            )
            ran = duration_words(situation.now - holder.started) if holder.started else "?"
            if left <= timedelta(0):
                return (
                    f"estimate: any time now ({basis}; {holder.name} has run {ran}, "
                    "past that median)",
                    0,
                )
            oldest = min(based, key=lambda h: (h.started or situation.now, h.name))
            who = "the oldest holder" if holder is oldest else holder.name
            return (
                f"estimate: about {duration_words(left)} ({basis}; {who} started {ran} ago)",
                int(left.total_seconds()),
            )
    if not missing:
        return "no estimate: when its holders started is not known", None
    few = [m for m in missing if "(" in m]
    if few:
        kinds = ", ".join(few)
        return f"no estimate: fewer than {MIN_RUNS} finished runs recorded of {kinds}", None
    kinds = ", ".join(missing)
    return f"no estimate: no finished runs of this kind recorded ({kinds})", None


# ---------------------------------------------------------------- checks


def _resources(wanted: Mapping[str, Decimal]) -> list[str]:
    # GPUs first: when GPUs bind, the words speak of GPUs.
    return sorted((r for r, a in wanted.items() if a > 0), key=lambda r: (r != GPU, r))


def _held_words(held: Decimal, want: Decimal, resource: str) -> str:
    return (
        f"{_bare(held, resource)} in use + {_bare(want, resource)} requested = "
        f"{_amount(held + want, resource)}"
    )


def _limit_blocker(
    situation: Situation,
    kind: str,
    owner: str,
    resource: str,
    held: Decimal,
    limit: Decimal,
    *,
    own: bool,
    where: str = "",
    holders: Sequence[Holder] | None = None,
) -> Blocker:
    want = situation.wanted[resource]
    short = held + want - limit
    subject = where or _limit_words(owner, limit, resource)
    words = f"needs {_more(short, resource)} than {subject} allows: " + _held_words(
        held, want, resource
    )
    remedies: list[Remedy] = []
    estimate, seconds = "", None
    if want > limit:
        words += "; it is larger than the limit itself, so nothing ending makes room"
        estimate = "no estimate: it cannot start under this limit"
    else:
        pool = situation.holders if holders is None else holders
        chosen = _release(pool, resource, short)
        if chosen is not None:
            remedies.append(_release_remedy(chosen, resource))
            estimate, seconds = _estimate(replace(situation, holders=tuple(pool)), resource, short)
        else:
            own_held = sum((h.amounts.get(resource, ZERO) for h in pool), ZERO)
            others = held - own_held
            if not own and others > 0:
                remedies.append(
                    Remedy(
                        kind="others",
                        words=(
                            f"other teams' running workloads under {owner} hold "
                            f"{_amount(others, resource)} of it"
                        ),
                    )
                )
            estimate = "no estimate: what holds it is not the team's own work"
            if own_held:
                estimate = "no estimate: the team's own running work frees too little of it"
    if where:  # a namespace's ResourceQuota: its part of the team's limit
        remedies.append(
            Remedy(
                kind="request",
                words=(
                    f"request a larger limit for {owner}; the request form works out the "
                    "smallest one whose namespace split admits it"
                ),
                team=owner,
                resource=resource,
            )
        )
    else:
        need = held + want
        grants = _grant_remedies(situation.pending, owner, resource, need)
        remedies.extend(grants)
        if not grants or grants[0].limit is None or grants[0].limit < need:
            remedies.append(_request_remedy(owner, resource, need))
    return Blocker(kind, resource, short, words, tuple(remedies), estimate, seconds)


def _check_gang(situation: Situation, resource: str) -> Blocker | None:
    want = situation.wanted[resource]
    capacity = situation.capacity.get(resource)
    whole = situation.requested.get(resource, want)
    if capacity is not None and whole > capacity:
        return Blocker(
            "gang",
            resource,
            whole - capacity,
            (
                f"the gang starts whole or not at all and needs {_amount(whole, resource)}; "
                f"the whole cluster has {_amount(capacity, resource)}"
            ),
            (Remedy(kind="change", words="make the gang smaller: no quota change can fit it"),),
            "no estimate: it cannot start on this cluster",
        )
    largest = situation.largest_node.get(resource)
    if largest is not None and situation.gang_size > 0:
        each = whole / situation.gang_size
        if each > largest:
            return Blocker(
                "gang",
                resource,
                each - largest,
                (
                    f"each of its {situation.gang_size} pods needs {_amount(each, resource)} "
                    f"on one node; the largest node has {_amount(largest, resource)}"
                ),
                (
                    Remedy(
                        kind="change",
                        words="split it into more, smaller pods: no node fits one of these",
                    ),
                ),
                "no estimate: no node can run one of its pods",
            )
    return None


def _check_team(situation: Situation, resource: str) -> Blocker | None:
    quota = situation.namespace_quota
    want = situation.wanted[resource]
    if quota is not None and quota.resource == resource and quota.used + want > quota.limit:
        same_ns = [h for h in situation.holders if h.namespace == quota.namespace]
        return _limit_blocker(
            situation,
            "team-limit",
            situation.team,
            resource,
            quota.used,
            quota.limit,
            own=True,
            where=(
                f"namespace {quota.namespace}'s ResourceQuota of {_amount(quota.limit, resource)} "
                f"(its part of {situation.team}'s limit)"
            ),
            holders=same_ns,
        )
    bound = situation.team_bound
    if bound is None or resource not in bound.limit or not situation.in_queue:
        return None
    held = bound.in_use.get(resource, ZERO)
    if held + want <= bound.limit[resource]:
        return None
    return _limit_blocker(
        situation, "team-limit", bound.owner, resource, held, bound.limit[resource], own=True
    )


def _check_departments(situation: Situation, resource: str) -> list[Blocker]:
    out = []
    want = situation.wanted[resource]
    for bound in situation.departments:
        if resource not in bound.limit:
            continue
        held = bound.in_use.get(resource, ZERO)
        if held + want > bound.limit[resource]:
            out.append(
                _limit_blocker(
                    situation,
                    "department-limit",
                    bound.owner,
                    resource,
                    held,
                    bound.limit[resource],
                    own=False,
                )
            )
    return out


def _check_fair(situation: Situation, resource: str) -> Blocker | None:
    if resource not in situation.fair:
        return None
    want = situation.wanted[resource]
    fair = situation.fair[resource]
    held = situation.team_bound.in_use.get(resource, ZERO) if situation.team_bound else ZERO
    if held + want <= fair:
        return None
    short = held + want - fair
    words = (
        f"needs {_more(short, resource)} than {situation.team}'s fair allocation of "
        f"{_amount(fair, resource)} allows: {_held_words(held, want, resource)}"
    )
    remedies: list[Remedy] = []
    estimate, seconds = "no estimate: none of the team's running workloads holds it", None
    chosen = _release(situation.holders, resource, short) if want <= fair else None
    if chosen is not None:
        remedies.append(_release_remedy(chosen, resource))
        estimate, seconds = _estimate(situation, resource, short)
    elif want > fair:
        estimate = "no estimate: it is larger than the fair allocation itself"
    need = held + want
    grants = _grant_remedies(situation.pending, situation.team, resource, need, guarantee=True)
    remedies.extend(grants)
    if not grants or grants[0].guarantee is None or grants[0].guarantee < need:
        remedies.append(_request_remedy(situation.team, resource, need, guarantee=True))
    remedies.append(
        Remedy(
            kind="wait",
            words="the fair allocation also grows as other teams' demand falls",
        )
    )
    return Blocker("fair-share", resource, short, words, tuple(remedies), estimate, seconds)


def _capacity_blocker(
    situation: Situation,
    kind: str,
    resource: str,
    capacity: Decimal,
    in_use: Decimal,
    where: str,
) -> Blocker | None:
    want = situation.wanted[resource]
    free = max(ZERO, capacity - in_use)
    if want <= free:
        return None
    short = want - free
    words = (
        f"needs {_more(short, resource)} than {where} has free: "
        f"{_bare(in_use, resource)} of {_amount(capacity, resource)} allocated, "
        f"{_bare(free, resource)} free, it needs {_bare(want, resource)}"
    )
    remedies: list[Remedy] = []
    estimate, seconds = "no estimate: other teams' work holds what it needs", None
    chosen = _release(situation.holders, resource, short)
    if chosen is not None:
        remedies.append(_release_remedy(chosen, resource))
        estimate, seconds = _estimate(situation, resource, short)
    own = sum((h.amounts.get(resource, ZERO) for h in situation.holders), ZERO)
    if in_use - own > 0:
        remedies.append(
            Remedy(
                kind="others",
                words=(
                    f"other teams' running workloads hold {_amount(in_use - own, resource)}; "
                    "capacity frees as they end (no quota change adds hardware)"
                ),
            )
        )
    return Blocker(kind, resource, short, words, tuple(remedies), estimate, seconds)


def _check_cluster(situation: Situation, resource: str) -> Blocker | None:
    if resource not in situation.capacity:
        return None
    return _capacity_blocker(
        situation,
        "cluster",
        resource,
        situation.capacity[resource],
        situation.cluster_in_use.get(resource, ZERO),
        "the cluster",
    )


def _check_flavor(situation: Situation, resource: str) -> Blocker | None:
    product = situation.product
    if not product or resource not in situation.flavor_capacity.get(product, {}):
        return None
    return _capacity_blocker(
        situation,
        "flavor",
        resource,
        situation.flavor_capacity[product][resource],
        situation.flavor_in_use.get(product, {}).get(resource, ZERO),
        f"the {product} nodes",
    )


def _scheduler_blocker(situation: Situation) -> Blocker:
    """Nothing Fairshare counts binds: say what was checked, with the numbers."""
    resources = _resources(situation.wanted)
    parts = []
    for resource in resources[:2]:
        want = situation.wanted[resource]
        bits = [f"it needs {_amount(want, resource)}"]
        bound = situation.team_bound
        if bound is not None and resource in bound.limit:
            held = bound.in_use.get(resource, ZERO)
            bits.append(
                f"{bound.owner} holds {_bare(held, resource)} of its limit of "
                f"{_amount(bound.limit[resource], resource)}"
            )
        if resource in situation.capacity:
            free = situation.capacity[resource] - situation.cluster_in_use.get(resource, ZERO)
            bits.append(f"the cluster has {_bare(max(free, ZERO), resource)} free")
        parts.append(", ".join(bits))
    checked = "; ".join(parts) or "it requests nothing Fairshare counts"
    words = f"no limit or capacity Fairshare counts stands in the way ({checked})"
    if situation.scheduler_words:
        words += f"; the scheduler says: {situation.scheduler_words.removeprefix('waiting: ')}"
    resource = resources[0] if resources else ""
    where = "check the pods' node selectors, tolerations and affinity against the nodes"
    if resource and situation.gang_size > 0:
        each = situation.requested.get(resource, situation.wanted[resource]) / situation.gang_size
        one = situation.gang_size == 1
        where = (
            f"{'its pod needs' if one else f'each of its {situation.gang_size} pods needs'} "
            f"{_amount(each, resource)} free on one node that its node selector, tolerations "
            "and affinity allow; the scheduler found none"
        )
    return Blocker(
        "scheduler",
        resource,
        ZERO,
        words,
        (Remedy(kind="wait", words=where),),
        "no estimate: the scheduler's reason has no recorded basis",
    )


def blockers(situation: Situation) -> list[Blocker]:
    """What stands between ``situation``'s workload and its start, in the module's order.

    Invariants: every blocker's ``short_by`` is exact and positive except ``scheduler``'s (0,
    returned alone when nothing else binds); never empty; the same input gives the same output.
    """
    out: list[Blocker] = []
    queued = situation.in_queue
    for resource in _resources(situation.wanted):
        found = [_check_gang(situation, resource), _check_team(situation, resource)]
        if queued:
            found.extend(_check_departments(situation, resource))
            found.append(_check_fair(situation, resource))
        found.extend((_check_cluster(situation, resource), _check_flavor(situation, resource)))
        out.extend(b for b in found if b is not None)
    return out or [_scheduler_blocker(situation)]
