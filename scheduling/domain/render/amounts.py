"""The amounts on Volcano Queues: guarantee, capability and deserved, fitted to the hierarchy.

A department's Queue ``guarantee`` is **derived**: max(its own guarantee, Σ its children's Queue
guarantees), per resource, so Volcano's rule "Σ children's guarantee ≤ parent's guarantee" always
holds (the capacity check in ``quotas.capacity_rule.committed_guarantees`` counts a department
the same way). ``deserved`` is fitted so that guarantee ≤ deserved ≤ capability on every Queue
and Σ children's deserved ≤ the parent's deserved. What cannot be fitted — a child's limit over
its nearest ancestor's limit, or a department whose derived guarantee exceeds its limit — is
refused where changes enter (``quotas.hierarchy``) and raises ValueError here.

A department with managed namespaces of its own also gets a leaf Queue ``<department>.own`` (a
child of the department): its guarantee is what the department's own guarantee leaves after its
teams' guarantees, its capability the department's limit, its deserved the department's fair
allocation beyond its teams'.

Invariant: every Queue of :func:`queue_amounts` passes Volcano's admission rules; zero amounts
are left out; the result depends on the inputs only (children are visited in name order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from quotas.domain.quantity import (
    DEVICE_CLASS_SUFFIX,
    device_class_of,
    format_quantity,
    is_byte_resource,
)
from scheduling.domain.types import TeamSpec

from .labels import OWN_QUEUE_SUFFIX

# A DRA device count's quota name (quotas.domain.quantity.DEVICE_CLASS_SUFFIX) is carried by
# the queues too, under this name; each backend's encoder names it as its scheduler reads it
# (Volcano: ``deviceclass/<class>``, :func:`volcano_resource`; Kueue: the name itself, which its
# Configuration's ``deviceClassMappings`` must map the class to).
# volcano pkg/scheduler/plugins/capacity/capacity.go — DeviceClassCountPrefix: a Queue's
# ``capability``/``deserved``/``guarantee`` key ``deviceclass/<class>`` is the number of devices
# of that class (``parseDRAResourceList``: ``Count = quantity.Value()``).
VOLCANO_DEVICE_CLASS_PREFIX = "deviceclass/"


def volcano_resource(resource: str) -> str:
    """A resource's name on a Volcano Queue: a device class's count as ``deviceclass/<class>``
    (the key Volcano's capacity plugin reads, counting a claim shared by several pods once:
    ``resourceClaimRefs``), everything else as it is."""
    device_class = device_class_of(resource)
    return resource if device_class is None else VOLCANO_DEVICE_CLASS_PREFIX + device_class


def _queue_resources(amounts: Mapping[str, object]) -> dict[str, Decimal]:
    """``amounts`` as a queue carries them (None = no amount)."""
    return {r: Decimal(v) for r, v in amounts.items() if v is not None}


__all__ = [
    "DEVICE_CLASS_SUFFIX",
    "VOLCANO_DEVICE_CLASS_PREFIX",
    "QueueAmounts",
    "deserved_amounts",
    "device_class_of",
    "queue_amounts",
    "volcano_resource",
]

# Amounts per Queue name, per resource.
_ByQueue = dict[str, dict[str, Decimal]]


def deserved_amounts(team: TeamSpec) -> dict[str, Decimal]:
    """Return the deserved amounts of a team on its own (no hierarchy to fit into).

    For every resource that has a fair allocation or a guarantee:
    ``deserved = min(max(fair, guarantee), capability)``, capability only where the team has a
    limit for that resource. Invariants (given guarantee <= limit, checked by TeamSpec):
    every guaranteed resource appears; guarantee <= deserved <= capability.
    """
    return _clamp(team.deserved, team.guarantee, team.limit)


def _clamp(
    wanted: Mapping[str, Decimal], low: Mapping[str, Decimal], high: Mapping[str, Decimal]
) -> dict[str, Decimal]:
    amounts: dict[str, Decimal] = {}
    for resource in sorted(wanted.keys() | low.keys()):
        amount = max(Decimal(wanted.get(resource, 0)), Decimal(low.get(resource, 0)))
        if resource in high:
            amount = min(amount, Decimal(high[resource]))
        amounts[resource] = amount
    return amounts


def _grain(resource: str) -> Decimal:
    """The unit deserved amounts are cut in when they are scaled: devices, bytes, millicores."""
    if "/" in resource or is_byte_resource(resource):
        return Decimal(1)
    return Decimal("0.001")


def _positive(amounts: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {r: Decimal(v) for r, v in sorted(amounts.items()) if Decimal(v) > 0}


def _fmt(amount: Decimal, resource: str) -> str:
    return format_quantity(amount, resource)


def _sum(maps: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for amounts in maps:
        for resource, amount in amounts.items():
            total[resource] = total.get(resource, Decimal(0)) + Decimal(amount)
    return total


@dataclass(frozen=True)
class QueueAmounts:
    """What one rendered Queue carries: ``parent`` (None at the top), and the amounts."""

    name: str
    team: str
    parent: str | None
    guarantee: dict[str, Decimal] = field(default_factory=dict)
    capability: dict[str, Decimal] = field(default_factory=dict)
    deserved: dict[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class _Tree:
    """The Queues to render and how they hang together.

    ``children`` of each Queue (teams in name order, then the own leaf); ``parents`` (None at
    the top); ``own`` maps each own leaf ``<slug>.own`` to its department; ``roots`` are the
    top-level Queues in name order.
    """

    children: dict[str, list[str]]
    parents: dict[str, str | None]
    own: dict[str, str]
    roots: list[str]


def queue_amounts(
    teams: Mapping[str, TeamSpec], active: Iterable[str], own_leaves: Iterable[str] = ()
) -> dict[str, QueueAmounts]:
    """Compute every Queue's guarantee, capability and deserved so Volcano admits all of them.

    Volcano's validating webhook (``pkg/webhooks/admission/queues/validate/validate_queue.go``)
    requires, per resource: guarantee <= deserved <= capability; a child's capability <= its
    nearest ancestor's; Σ children's guarantee <= the parent's guarantee and Σ children's deserved
    <= the parent's deserved (a resource the children have and the parent lacks counts as 0 on the
    parent: ``Resource.LessPartly`` with ``Zero``).

    ``active`` are the team slugs that get a Queue; ``own_leaves`` the departments that also get
    an own-namespaces leaf ``<slug>.own``. Steps:

    1. guarantee, bottom-up: a leaf has its own guarantee; a department max(own, Σ children's);
       the own leaf takes what the department's own guarantee leaves after its teams';
    2. capability = the team's limit (the own leaf: the department's); check that no Queue's
       capability is over its nearest ancestor's and no guarantee over its capability, else
       raise ValueError naming the department and the numbers;
    3. wanted deserved, bottom-up: a leaf clamps its fair allocation between guarantee and
       capability; a department clamps max(its fair allocation, Σ children's wanted); the own
       leaf wants the department's fair allocation beyond its teams';
    4. deserved, top-down: a top-level Queue gets what it wants; children whose wanted amounts
       do not fit their parent's deserved keep their guarantees and share the rest in
       proportion to what they wanted above it, cut down to whole grains (devices, bytes,
       millicores), so the sum never exceeds the parent's.

    Zero amounts are left out. Deterministic: children are visited in name order.
    """
    tree = _queue_tree(teams, set(active), own_leaves)
    guarantee, capability, fair = _guarantees(teams, tree)
    names = sorted(guarantee)
    for name in names:
        _check_queue(name, tree.own.get(name, name), tree.parents, guarantee, capability)

    wanted: _ByQueue = {}
    deserved: _ByQueue = {}
    for root in tree.roots:
        _want(root, tree, fair, guarantee, capability, wanted)
        deserved[root] = dict(wanted[root])
        _fit(root, tree, wanted, guarantee, deserved)

    return {
        name: QueueAmounts(
            name=name,
            team=tree.own.get(name, name),
            parent=tree.parents[name],
            guarantee=guarantee[name],
            capability=capability[name],
            deserved=deserved[name],
        )
        for name in names
    }


def _queue_tree(
    teams: Mapping[str, TeamSpec], active: set[str], own_leaves: Iterable[str]
) -> _Tree:
    """The hierarchy of the Queues of ``active`` teams, with the own leaves of ``own_leaves``.

    A team whose parent is not active hangs at the top (the renderer never makes one active
    without its ancestors).
    """
    children: dict[str, list[str]] = {slug: [] for slug in active}
    parents: dict[str, str | None] = {}
    for slug in sorted(active):
        parent = teams[slug].parent
        parents[slug] = parent if parent in active else None
        if parents[slug] is not None:
            children[parents[slug]].append(slug)  # type: ignore[index]
    own: dict[str, str] = {}
    for slug in sorted(set(own_leaves) & active):
        leaf = f"{slug}{OWN_QUEUE_SUFFIX}"
        own[leaf] = slug
        parents[leaf] = slug
        children[leaf] = []
        children[slug].append(leaf)
    roots = sorted(name for name in active if parents[name] is None)
    return _Tree(children, parents, own, roots)


def _guarantees(teams: Mapping[str, TeamSpec], tree: _Tree) -> tuple[_ByQueue, _ByQueue, _ByQueue]:
    """Steps 1 and 2 of :func:`queue_amounts`, bottom-up: ``(guarantee, capability, fair)`` of
    every Queue, own leaves included (``fair`` is the fair allocation that step 3 starts from)."""
    children, own = tree.children, tree.own
    guarantee: _ByQueue = {}
    capability: _ByQueue = {}
    fair: _ByQueue = {}

    def down(name: str) -> None:  # post-order: children first
        for child in children[name]:
            if child not in own:
                down(child)
        if name in own:
            return
        team = teams[name]
        capability[name] = _queue_resources(team.limit)
        fair[name] = {r: Decimal(v) for r, v in team.deserved.items()}
        mine = _queue_resources(team.guarantee)
        teams_sum = _sum(guarantee[c] for c in children[name] if c not in own)
        derived = {
            r: max(mine.get(r, Decimal(0)), teams_sum.get(r, Decimal(0)))
            for r in mine.keys() | teams_sum.keys()
        }
        guarantee[name] = _positive(derived)
        for leaf in (c for c in children[name] if c in own):
            guarantee[leaf] = _positive({r: mine[r] - teams_sum.get(r, Decimal(0)) for r in mine})
            capability[leaf] = dict(capability[name])
            teams_fair = _sum(fair[c] for c in children[name] if c not in own)
            fair[leaf] = _positive(
                {r: v - teams_fair.get(r, Decimal(0)) for r, v in fair[name].items()}
            )

    for root in tree.roots:
        down(root)
    return guarantee, capability, fair


def _check_queue(
    name: str,
    team: str,
    parents: Mapping[str, str | None],
    guarantee: Mapping[str, Mapping[str, Decimal]],
    capability: Mapping[str, Mapping[str, Decimal]],
) -> None:
    """Raise ValueError when a Queue's amounts break a rule no fitting can repair."""
    for resource, amount in sorted(guarantee[name].items()):
        cap = capability[name].get(resource)
        if cap is not None and amount > cap:
            raise ValueError(
                f"team {team}: guarantees for {resource} total {_fmt(amount, resource)} "
                f"(its own and its teams'), over its {_fmt(cap, resource)} limit"
            )
    for resource, amount in sorted(capability[name].items()):
        ancestor = parents.get(name)
        # Volcano's findNearestAncestorCapability: the first ancestor with a positive amount.
        while ancestor is not None and not capability[ancestor].get(resource):
            ancestor = parents.get(ancestor)
        if ancestor is not None and amount > capability[ancestor][resource]:
            raise ValueError(
                f"team {team}: its {resource} limit {_fmt(amount, resource)} is over the "
                f"{_fmt(capability[ancestor][resource], resource)} limit of department "
                f"{ancestor}"
            )


def _want(
    name: str,
    tree: _Tree,
    fair: _ByQueue,
    guarantee: _ByQueue,
    capability: _ByQueue,
    wanted: _ByQueue,
) -> dict[str, Decimal]:
    """Step 3 of :func:`queue_amounts`, bottom-up: fill ``wanted`` for ``name``'s subtree and
    return what ``name`` wants (its fair allocation or its children's, clamped)."""
    below = _sum(
        _want(child, tree, fair, guarantee, capability, wanted) for child in tree.children[name]
    )
    mine = fair[name]
    merged = {
        r: max(mine.get(r, Decimal(0)), below.get(r, Decimal(0)))
        for r in mine.keys() | below.keys()
    }
    wanted[name] = _positive(_clamp(merged, guarantee[name], capability[name]))
    return wanted[name]


def _fit(name: str, tree: _Tree, wanted: _ByQueue, guarantee: _ByQueue, deserved: _ByQueue) -> None:
    """Step 4 of :func:`queue_amounts`, top-down: fit the deserved amounts of ``name``'s
    children (and below) into ``deserved[name]``, which must already be set."""
    budget = deserved[name]
    kids = tree.children[name]
    for child in kids:
        deserved[child] = dict(wanted[child])
    for resource in sorted({r for c in kids for r in wanted[c]}):
        _share(resource, budget.get(resource, Decimal(0)), kids, wanted, guarantee, deserved)
    for child in kids:
        deserved[child] = _positive(deserved[child])
        _fit(child, tree, wanted, guarantee, deserved)


def _share(
    resource: str,
    room: Decimal,
    kids: list[str],
    wanted: _ByQueue,
    guarantee: _ByQueue,
    deserved: _ByQueue,
) -> None:
    """Cut the siblings' deserved ``resource`` down to ``room`` when what they want is more:
    each keeps its guarantee and gets a share of the rest in proportion to what it wanted above
    it, in whole grains, so the sum never exceeds ``room``."""
    total = sum((wanted[c].get(resource, Decimal(0)) for c in kids), Decimal(0))
    if total <= room:
        return
    base = sum((guarantee[c].get(resource, Decimal(0)) for c in kids), Decimal(0))
    excess = total - base
    grain = _grain(resource)
    for child in kids:
        low = guarantee[child].get(resource, Decimal(0))
        extra = wanted[child].get(resource, Decimal(0)) - low
        share = (extra * (room - base) / excess / grain).to_integral_value(ROUND_FLOOR)
        deserved[child][resource] = low + share * grain
