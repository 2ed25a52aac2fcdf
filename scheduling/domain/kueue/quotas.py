"""The amounts on Kueue's ClusterQueues and Cohorts: the Volcano Queues' numbers, re-expressed.

Both backends start from the same :func:`scheduling.domain.render.queue_amounts` (guarantee,
capability and deserved per queue, fitted to the hierarchy); this module turns each queue's three
numbers into Kueue's ``nominalQuota`` / ``lendingLimit`` / ``borrowingLimit`` per flavor, so the
same tenancy means the same numbers on both backends.

How Kueue counts (sigs.k8s.io/kueue ``pkg/cache/scheduler/resource_node.go``):

* ``localQuota(n) = max(0, SubtreeQuota(n) − lendingLimit(n))`` when a lending limit is set, else
  0 — the part of a node's quota it never lends;
* ``SubtreeQuota(cq) = nominalQuota(cq)``; ``SubtreeQuota(cohort) = nominalQuota(cohort) +
  Σ_children (SubtreeQuota(child) − localQuota(child))`` (``updateCohortResourceNode``,
  ``accumulateFromChild``);
* ``potentialAvailable(n) = min(SubtreeQuota(n) + borrowingLimit(n), localQuota(n) +
  potentialAvailable(parent))`` — a borrowing limit caps what a node may reach.

The mapping, per resource and flavor (``D`` deserved, ``G`` guarantee, ``C`` capability of the
queue; children ``c``):

* ClusterQueue: ``nominalQuota = D``, ``lendingLimit = D − G`` (rendered when ``G > 0``),
  ``borrowingLimit = C − D`` (rendered when the team has a limit);
* Cohort (a department): ``nominalQuota = D − Σ_c D_c`` (what the department holds beyond its
  children's fair allocations), ``lendingLimit = D − G``, ``borrowingLimit = C − D``.

Proof that these are the same numbers (by induction from the leaves): ``SubtreeQuota(n) = D_n −
Σ_c G_c`` and ``localQuota(n) = G_n − Σ_c G_c`` for every node (for a ClusterQueue the sums are
empty: ``SubtreeQuota = D``, ``localQuota = G``). For a Cohort: ``SubtreeQuota = (D − Σ D_c) +
Σ_c (D_c − G_c) = D − Σ G_c``, and ``localQuota = max(0, (D − Σ G_c) − (D − G)) = G − Σ G_c``
(≥ 0: a department's guarantee covers its children's). Hence

* **guarantee** — what a subtree never lends is ``localQuota(n) + Σ of its descendants' local
  quotas = G_n`` (the sums telescope): the team's guarantee is never lent;
* **fair allocation** — the quota inside a subtree, ``SubtreeQuota(n) + Σ descendants' local
  quotas = D_n``: the deserved amount Volcano's Queue carries;
* **ceiling** — ``potentialAvailable(n) ≤ SubtreeQuota(n) + borrowingLimit(n) = C − Σ_c G_c``,
  plus the children's local quotas ``Σ_c G_c``: at most ``C``, Volcano's ``capability``.

Kueue's webhook accepts every value (``pkg/webhooks/clusterqueue_webhook.go``): limits are only
set on nodes that have a parent (every ClusterQueue and Cohort hangs from the root Cohort);
``lendingLimit ≤ nominalQuota`` on a ClusterQueue (``D − G ≤ D``); nothing is negative
(``G ≤ D ≤ C`` and ``Σ_c D_c ≤ D`` by the fitting of ``queue_amounts``).

Flavors: each resource is covered by one or more ResourceFlavors (``nvidia.com/gpu`` by one per
GPU product, everything else by the default flavor). A resource with several flavors has each of
``D``, ``G`` and ``C`` split across them in proportion to the flavors' capacities (:func:`split`),
bounded so the per-flavor values keep ``Σ_c G_c ≤ G ≤ D``, ``Σ_c D_c ≤ D ≤ C`` — the proof then
holds flavor by flavor, and the per-flavor values add up to the queue's.

Invariant: pure; deterministic (flavors in name order); for every queue and resource,
Σ_flavors of each rendered amount equals the amount above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

from scheduling.domain.render import QueueAmounts

__all__ = ["FlavorQuota", "NodeQuotas", "node_quotas", "split"]

# Per flavor, per resource: an amount.
_ByFlavor = dict[str, Decimal]


def split(
    total: Decimal,
    weights: Mapping[str, Decimal],
    *,
    low: Mapping[str, Decimal] | None = None,
    high: Mapping[str, Decimal] | None = None,
) -> _ByFlavor:
    """Split ``total`` whole units across ``weights``' flavors in proportion to the weights,
    each within ``low[f] ≤ x[f] ≤ high[f]`` (missing = 0 / unbounded); a single flavor takes all.

    Largest remainder (ties by flavor name), then — only when the bounds moved something — the
    difference is put where there is room, largest shortfall from the proportional share first.
    Raises ValueError when the bounds cannot be met (Σ low > total or Σ high < total).
    """
    flavors = sorted(weights)
    low = {f: Decimal((low or {}).get(f, 0)) for f in flavors}
    bounds = high or {}
    if sum(low.values(), Decimal(0)) > total or (
        len(bounds) == len(flavors) and sum(bounds.values(), Decimal(0)) < total
    ):
        raise ValueError(f"cannot split {total} between {low} and {dict(bounds)}")

    def room(f: str, x: Decimal) -> Decimal | None:
        return None if f not in bounds else Decimal(bounds[f]) - x

    if len(flavors) == 1:
        return {flavors[0]: total}
    weight = sum((Decimal(weights[f]) for f in flavors), Decimal(0))
    target = {f: total * Decimal(weights[f]) / weight for f in flavors}
    x = {f: target[f].to_integral_value(ROUND_FLOOR) for f in flavors}
    by_remainder = sorted(flavors, key=lambda f: (-(target[f] - x[f]), f))
    for f in by_remainder[: int(total - sum(x.values(), Decimal(0)))]:
        x[f] += 1
    for f in flavors:  # bounds
        x[f] = max(x[f], low[f])
        if f in bounds:
            x[f] = min(x[f], Decimal(bounds[f]))
    diff = total - sum(x.values(), Decimal(0))
    while diff != 0:
        if diff > 0:
            open_ = [f for f in flavors if (r := room(f, x[f])) is None or r > 0]
            f = min(open_, key=lambda f: (x[f] - target[f], f))
            r = room(f, x[f])
            step = diff if r is None else min(diff, r)
        else:
            open_ = [f for f in flavors if x[f] > low[f]]
            f = max(open_, key=lambda f: (x[f] - target[f], f))
            step = -min(-diff, x[f] - low[f])
        x[f] += step
        diff -= step
    return x


@dataclass(frozen=True)
class FlavorQuota:
    """One resource on one flavor: ``nominal``, and the limits (None = not rendered)."""

    nominal: Decimal
    lending: Decimal | None = None
    borrowing: Decimal | None = None


@dataclass(frozen=True)
class NodeQuotas:
    """The Kueue amounts of one queue: ``quotas[resource][flavor]``; ``cohort`` for a
    department (rendered as a Cohort), else a ClusterQueue."""

    name: str
    cohort: bool
    quotas: dict[str, dict[str, FlavorQuota]]


def node_quotas(
    amounts: Mapping[str, QueueAmounts],
    resources: Sequence[str],
    flavors_of: Mapping[str, Mapping[str, Decimal]],
) -> dict[str, NodeQuotas]:
    """Every queue's Kueue amounts, for every resource of ``resources`` (0 where it has none).

    ``amounts``: :func:`~scheduling.domain.render.queue_amounts`' result; ``flavors_of[r]``: the
    flavors covering ``r`` and their weights. A queue with children becomes a Cohort. Walks the
    hierarchy bottom-up (a department's split is bounded by its children's).
    """
    children: dict[str, list[str]] = {name: [] for name in amounts}
    for name, q in amounts.items():
        if q.parent is not None and q.parent in children:
            children[q.parent].append(name)
    deserved: dict[str, dict[str, _ByFlavor]] = {}
    guarantee: dict[str, dict[str, _ByFlavor]] = {}
    ceiling: dict[str, dict[str, _ByFlavor | None]] = {}

    def down(name: str) -> None:
        for child in sorted(children[name]):
            down(child)
        q = amounts[name]
        deserved[name], guarantee[name], ceiling[name] = {}, {}, {}
        for r in resources:
            weights = flavors_of[r]
            kids = children[name]
            d = split(
                Decimal(q.deserved.get(r, 0)),
                weights,
                low=_sum(deserved[c][r] for c in kids),
            )
            g = split(
                Decimal(q.guarantee.get(r, 0)),
                weights,
                low=_sum(guarantee[c][r] for c in kids),
                high=d,
            )
            cap = q.capability.get(r)
            deserved[name][r], guarantee[name][r] = d, g
            ceiling[name][r] = None if cap is None else split(Decimal(cap), weights, low=d)

    for name in sorted(
        n for n, q in amounts.items() if q.parent is None or q.parent not in amounts
    ):
        down(name)

    result: dict[str, NodeQuotas] = {}
    for name in sorted(amounts):
        q = amounts[name]
        quotas: dict[str, dict[str, FlavorQuota]] = {}
        for r in resources:
            below = _sum(deserved[c][r] for c in children[name])
            per_flavor: dict[str, FlavorQuota] = {}
            for f in sorted(flavors_of[r]):
                d, g = deserved[name][r][f], guarantee[name][r][f]
                cap = ceiling[name][r]
                per_flavor[f] = FlavorQuota(
                    nominal=d - below.get(f, Decimal(0)),
                    lending=d - g if Decimal(q.guarantee.get(r, 0)) > 0 else None,
                    borrowing=None if cap is None else cap[f] - d,
                )
            quotas[r] = per_flavor
        result[name] = NodeQuotas(name, bool(children[name]), quotas)
    return result


def _sum(maps) -> _ByFlavor:
    total: _ByFlavor = {}
    for amounts in maps:
        for f, v in amounts.items():
            total[f] = total.get(f, Decimal(0)) + v
    return total
