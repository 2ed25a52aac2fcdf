"""Quota from demand: the smallest quota change that would admit a team's waiting workloads.

It composes usage (``monitoring``: the newest collection's workloads and usage samples) with
shares (the what-if preview, ``scheduling.services.what_if``) and the namespace split the sync
writes (``scheduling.desired.split_quota``), so it lives here, above monitoring. The request
page ("request what these need") starts from :func:`admitting_change`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from monitoring.models import UsageSample, Workload
from monitoring.workloads import latest_workloads
from quotas.models import Namespace, Team
from scheduling.desired import split_quota
from scheduling.services import what_if


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
