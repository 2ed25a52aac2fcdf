"""The DRF problem as Fairshare sees it: quotas, weights, hierarchy and usage → solver input.

``load_inputs()`` reads the database in a constant number of queries (five, whatever the number of
teams) into :class:`Inputs`: exact Decimal amounts, kept for display. ``make_problem()`` then
turns them, with optional what-if ``overrides``, into a :class:`Problem` for
``scheduling.domain.fairness.solve`` (floats). ``build_problem()`` does both. Nothing here
writes; services.py is the transaction boundary.

How each tenant is built (docs/drf.md has a worked example):

* one tenant per active team, named by slug; weight from ``Team.weight``; ``parent`` is the parent
  team's slug when that parent is active too (otherwise the team is a root, as in
  ``quotas.capacity_rule.committed_guarantees``);
* guarantee and limit from ``TeamQuota``; a quota row without a limit means no ceiling for that
  resource, a team without any limited resource has ``limit=None``;
* usage is the latest collection (the most recent ``UsageSample.taken_at``): per team, the sum over
  its namespaces and GPU flavors of ``allocated``; demand is ``allocated + pending``;
* a team for which usage was never collected (no ``UsageSample`` row at all) demands what it could
  use: its limit for every resource it has a quota row for (no ceiling: the capacity), capped by
  the capacity. A team seen before but absent from the latest collection demands nothing: it is
  idle;
* a what-if override never changes a team's demand (issue 29): a measured team still wants what
  its workloads request (running + waiting), so a preview never allocates more than that; what a
  new limit buys when the team wants all of it is the preview's contention view
  (``scheduling.services.contention_problem``), not today's fair allocation;
* departments (teams with active children) get only their *own* usage as demand, never the limit
  fallback: the solver adds the children's demands itself (H-DRF: callers must not pre-aggregate);
* resources are those of the capacity, less DRA device-class counts (counted per claim, not
  shared fairly: their GPUs are ``nvidia.com/gpu`` GPU-equivalents already); integral
  resources are the extended ones (``/`` in the name: ``nvidia.com/gpu``);
* guarantees that no longer fit the capacity (the cluster shrank, or a what-if over-commits) are
  scaled down proportionally for the solver, and :attr:`Problem.notes` says so; the solver would
  otherwise refuse the problem.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal

from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, Sum

from monitoring.models import CapacitySnapshot, UsageSample
from quotas.domain.quantity import device_class_of, is_byte_resource
from quotas.models import Team, TeamQuota
from quotas.quantities import format_quantity, is_integral_resource, parse_quantity
from scheduling.domain import pastuse
from scheduling.domain.fairness import Tenant
from scheduling.exceptions import NoCapacity, ShareProblemError
from scheduling.models import ShareComputation, ShareSnapshot
from scheduling.pastuse import PastInputs, load_past

__all__ = [
    "DEMAND_CHILDREN",
    "DEMAND_LIMIT",
    "DEMAND_USAGE",
    "Amounts",
    "Inputs",
    "NoCapacity",
    "Problem",
    "ShareProblemError",
    "TeamInput",
    "amount_string",
    "amounts_json",
    "apply_overrides",
    "build_problem",
    "float_to_amount",
    "load_inputs",
    "make_problem",
    "plain_problem",
]

Amounts = dict[str, Decimal]

# Where a team's demand came from (shown next to it in the UI and docs).
DEMAND_USAGE = "usage"  # latest collection: allocated + pending
DEMAND_LIMIT = "limit"  # never measured: what its quota lets it use
DEMAND_CHILDREN = "children"  # a department: its own usage, the children's demands added by H-DRF

_MILLI = Decimal("0.001")
_OVERRIDE_KEYS = {"weight", "guarantee", "limit", "tier"}


@dataclass(frozen=True)
class TeamInput:
    """One team's inputs, exact (Decimal, base units)."""

    id: int
    slug: str
    parent: str | None
    weight: int
    tier_id: int | None
    guarantee: Amounts
    limit: dict[str, Decimal | None]  # resource → limit; None = no ceiling
    usage: Amounts  # allocated, latest collection
    pending: Amounts
    namespaces: dict[str, Amounts]  # namespace → allocated, latest collection
    measured: bool  # any usage ever collected for this team


@dataclass(frozen=True)
class Inputs:
    """What ``load_inputs`` read from the database (before overrides)."""

    capacity: Amounts
    teams: dict[str, TeamInput]  # by slug, sorted
    usage_taken_at: datetime | None
    past: PastInputs | None = None  # fairness over time; None when it is off


@dataclass(frozen=True)
class PastUse:
    """One team's past use as the problem used it (subtree), and the weight it gave."""

    mean: Amounts  # decayed mean allocation, base units
    share: float  # dominant decayed share of the capacity
    resource: str  # its dominant resource
    weight: int  # as configured
    effective_weight: float
    multiplier: float
    group_share: float  # normalised weight among its siblings
    group_past: float  # the siblings' past use
    clamped: bool


@dataclass(frozen=True)
class Problem:
    """A DRF problem ready for ``fairness.solve`` plus the exact inputs it came from.

    ``capacity``/``tenants``/``integral`` are the solver's arguments (floats). The Decimal fields
    keep the inputs for display: ``demand`` is each team's *own* demand as given to the solver
    (departments: own usage only), ``demand_source`` says where it came from.
    """

    capacity: dict[str, float]
    tenants: list[Tenant]
    integral: frozenset[str]
    capacity_amounts: Amounts
    teams: dict[str, TeamInput]
    demand: dict[str, Amounts]
    demand_source: dict[str, str]
    children: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)
    usage_taken_at: datetime | None = None
    # Fairness over time: per team its past use and adjusted weight (empty when off), and the
    # setting: half-life (s) and strength.
    past: dict[str, PastUse] = field(default_factory=dict)
    past_setting: tuple[int, float] | None = None

    def subtree(self, slug: str) -> list[str]:
        """``slug`` and all its descendants (depth first, sorted)."""
        result, stack = [], [slug]
        while stack:
            name = stack.pop()
            result.append(name)
            stack.extend(reversed(self.children.get(name, [])))
        return result

    def subtree_sum(self, slug: str, amounts: Mapping[str, Mapping[str, Decimal]]) -> Amounts:
        """Sum ``amounts[team]`` over the subtree of ``slug`` (a leaf: its own amounts)."""
        total: Amounts = defaultdict(Decimal)
        for name in self.subtree(slug):
            for resource, amount in amounts.get(name, {}).items():
                total[resource] += amount
        return dict(sorted(total.items()))


# --------------------------------------------------------------------------- conversions


def float_to_amount(value: float, resource: str) -> Decimal:
    """A solver float as an exact base-unit amount: whole devices for integral resources, whole
    bytes for byte resources, milli-units otherwise (never negative)."""
    value = max(0.0, value)
    if is_integral_resource(resource) or is_byte_resource(resource):
        return Decimal(round(value))
    amount = Decimal(repr(value)).quantize(_MILLI, rounding=ROUND_HALF_EVEN)
    return amount.normalize() if amount else Decimal(0)


def amount_string(amount: Decimal) -> str:
    """A Decimal as a plain decimal string without exponent or trailing zeros (``"1.5"``)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


def amounts_json(amounts: Mapping[str, Decimal | None]) -> dict[str, str | None]:
    """{resource: Decimal} → {resource: decimal string} (None stays None), sorted by resource."""
    return {
        resource: None if amount is None else amount_string(amount)
        for resource, amount in sorted(amounts.items())
    }


def _to_float(amounts: Mapping[str, Decimal], resources: Mapping[str, object]) -> dict[str, float]:
    return {r: float(a) for r, a in sorted(amounts.items()) if r in resources}


# --------------------------------------------------------------------------- loading


def load_inputs(*, capacity: Mapping[str, Decimal] | None = None) -> Inputs:
    """Read capacity, active teams, quotas and the latest usage (five queries at most), and the
    fairness-over-time setting with its past use (one query; two more when it is on).

    ``capacity`` replaces the latest ``CapacitySnapshot`` (what-if on another cluster size).
    Raises NoCapacity when there is neither.
    """
    if capacity is None:
        capacity = CapacitySnapshot.latest_amounts()
    if not capacity:
        raise NoCapacity("No cluster capacity has been collected yet.")
    capacity_amounts = {r: Decimal(a) for r, a in sorted(capacity.items())}

    rows = list(
        Team.objects.filter(active=True)
        .annotate(measured=Exists(UsageSample.objects.filter(team=OuterRef("pk"))))
        .values_list("id", "slug", "parent_id", "weight", "tier_id", "measured")
        .order_by("slug")
    )
    slug_of = {row[0]: row[1] for row in rows}

    guarantee: dict[int, Amounts] = defaultdict(dict)
    limit: dict[int, dict[str, Decimal | None]] = defaultdict(dict)
    for team_id, resource, g, lim in TeamQuota.objects.filter(team__active=True).values_list(
        "team_id", "resource", "guarantee", "limit"
    ):
        guarantee[team_id][resource] = g
        limit[team_id][resource] = lim

    taken_at = UsageSample.objects.order_by("-taken_at").values_list("taken_at", flat=True).first()
    usage: dict[int, Amounts] = defaultdict(lambda: defaultdict(Decimal))
    pending: dict[int, Amounts] = defaultdict(lambda: defaultdict(Decimal))
    namespaces: dict[int, dict[str, Amounts]] = defaultdict(lambda: defaultdict(dict))
    if taken_at is not None:
        latest = (
            UsageSample.objects.filter(taken_at=taken_at, team__isnull=False)
            .values("team_id", "namespace", "resource")
            .annotate(allocated_sum=Sum("allocated"), pending_sum=Sum("pending"))
            .order_by("team_id", "namespace", "resource")
        )
        for row in latest:
            team_id, allocated, waiting = row["team_id"], row["allocated_sum"], row["pending_sum"]
            if team_id not in slug_of:
                continue
            usage[team_id][row["resource"]] += allocated
            pending[team_id][row["resource"]] += waiting
            if allocated:
                namespaces[team_id][row["namespace"]][row["resource"]] = allocated

    teams = {}
    for team_id, slug, parent_id, weight, tier_id, measured in rows:
        teams[slug] = TeamInput(
            id=team_id,
            slug=slug,
            parent=slug_of.get(parent_id),
            weight=weight,
            tier_id=tier_id,
            guarantee=dict(sorted(guarantee[team_id].items())),
            limit=dict(sorted(limit[team_id].items())),
            usage=dict(sorted(usage[team_id].items())),
            pending=dict(sorted(pending[team_id].items())),
            namespaces={ns: dict(sorted(a.items())) for ns, a in namespaces[team_id].items()},
            measured=measured,
        )
    return Inputs(capacity=capacity_amounts, teams=teams, usage_taken_at=taken_at, past=load_past())


# --------------------------------------------------------------------------- overrides


def _parse_amounts(slug: str, key: str, raw: object, *, nullable: bool) -> dict:
    if not isinstance(raw, Mapping):
        raise ValidationError({f"{slug}.{key}": "Give a mapping of resource to amount."})
    result = {}
    for resource, value in raw.items():
        if value is None or value == "":
            if not nullable:
                raise ValidationError({f"{slug}.{key}.{resource}": "An amount is required."})
            result[resource] = None
            continue
        result[resource] = parse_quantity(value, field=f"{slug}.{key}.{resource}")
    return result


def apply_overrides(inputs: Inputs, overrides: Mapping[str, Mapping] | None) -> Inputs:
    """Return ``inputs`` with proposed changes applied (nothing is saved).

    ``overrides`` is ``{team_slug: {"weight": int, "guarantee": {res: amount}, "limit": {res:
    amount or None}, "tier": ...}}``; amounts are Decimals or Kubernetes quantity strings, a
    ``None`` limit removes the ceiling. ``tier`` does not change fair shares and is accepted for
    the record only. Raises ValidationError keyed ``<slug>.<field>`` for unknown teams, bad
    weights, malformed amounts or a guarantee above its limit.
    """
    if not overrides:
        return inputs
    teams = dict(inputs.teams)
    for slug, change in sorted(overrides.items()):
        if slug not in teams:
            raise ValidationError({slug: f"No active team {slug!r}."})
        unknown = sorted(set(change) - _OVERRIDE_KEYS)
        if unknown:
            raise ValidationError({f"{slug}.{unknown[0]}": "Unknown field."})
        team = teams[slug]
        weight = change.get("weight", team.weight)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 65535:
            raise ValidationError({f"{slug}.weight": "Weight must be an integer from 1 to 65535."})
        guarantee = dict(team.guarantee)
        limit = dict(team.limit)
        for resource, amount in _parse_amounts(
            slug, "guarantee", change.get("guarantee", {}), nullable=False
        ).items():
            guarantee[resource] = amount
            limit.setdefault(resource, None)
        for resource, amount in _parse_amounts(
            slug, "limit", change.get("limit", {}), nullable=True
        ).items():
            limit[resource] = amount
            guarantee.setdefault(resource, Decimal(0))
        for resource in sorted(guarantee):
            lim = limit.get(resource)
            if lim is not None and guarantee[resource] > lim:
                raise ValidationError(
                    {f"{slug}.guarantee.{resource}": "Guarantee cannot exceed the limit."}
                )
        teams[slug] = replace(
            team,
            weight=weight,
            guarantee=dict(sorted(guarantee.items())),
            limit=dict(sorted(limit.items())),
        )
    return replace(inputs, teams=teams)


# --------------------------------------------------------------------------- problem


def _effective_guarantee(
    slug: str, resource: str, own: Mapping[str, Amounts], children: Mapping[str, list[str]]
) -> Decimal:
    """max(own guarantee, Σ children's effective guarantees), as the solver folds them."""
    below = sum(
        (_effective_guarantee(kid, resource, own, children) for kid in children.get(slug, ())),
        Decimal(0),
    )
    return max(own[slug].get(resource, Decimal(0)), below)


def make_problem(inputs: Inputs, overrides: Mapping[str, Mapping] | None = None) -> Problem:
    """Turn ``inputs`` (with ``overrides``) into a solver problem; see the module docstring.

    Steps:
    1. apply the overrides;
    2. per team: demand from the latest usage, or its limits capped by capacity when never
       measured (departments: own usage only);
    3. scale guarantees of any resource whose root-level total exceeds capacity, with a note;
    4. build one Tenant per team, restricted to the capacity's resources.
    """
    inputs = apply_overrides(inputs, overrides)
    # DRA device counts (<class>.deviceclass.resource.k8s.io/devices) are counted per claim,
    # not shared fairly: their GPUs are in nvidia.com/gpu already, as GPU-equivalents, so a
    # solve with them would count those GPUs twice in the dominant shares (issue 34). Their
    # capacity still bounds their guarantees (quotas.capacity_rule; the preview's flags).
    capacity = {r: a for r, a in inputs.capacity.items() if device_class_of(r) is None}
    teams = inputs.teams
    children: dict[str, list[str]] = defaultdict(list)
    for slug, team in teams.items():
        if team.parent is not None:
            children[team.parent].append(slug)
    children = {slug: sorted(kids) for slug, kids in sorted(children.items())}

    demand: dict[str, Amounts] = {}
    source: dict[str, str] = {}
    for slug, team in teams.items():
        if slug in children or team.measured:
            own = dict(team.usage)
            for resource, amount in team.pending.items():
                own[resource] = own.get(resource, Decimal(0)) + amount
            demand[slug] = own
            source[slug] = DEMAND_CHILDREN if slug in children else DEMAND_USAGE
        else:
            demand[slug] = {
                resource: capacity[resource] if lim is None else min(lim, capacity[resource])
                for resource, lim in team.limit.items()
                if resource in capacity
            }
            source[slug] = DEMAND_LIMIT
        demand[slug] = {r: a for r, a in sorted(demand[slug].items()) if r in capacity and a > 0}

    guarantee = {slug: dict(team.guarantee) for slug, team in teams.items()}
    roots = [slug for slug, team in teams.items() if team.parent is None]
    notes = []
    scale: dict[str, float] = {}
    for resource in sorted({r for g in guarantee.values() for r in g if r in capacity}):
        total = sum(
            (_effective_guarantee(root, resource, guarantee, children) for root in roots),
            Decimal(0),
        )
        if total > capacity[resource]:
            # Exact ratio: the solver absorbs float round-off (relative 1e-9) in its check.
            scale[resource] = float(capacity[resource] / total)
            notes.append(
                f"Guarantees of {resource} total {format_quantity(total, resource)}, more than "
                f"the whole {format_quantity(capacity[resource], resource)} schedulable (reserve "
                f"included): to compute fair shares at all, every {resource} guarantee is "
                f"scaled down by the same factor, {float(capacity[resource] / total):.3f}."
            )

    tenants = []
    for slug, team in teams.items():
        floors = {
            r: float(a) * scale.get(r, 1.0)
            for r, a in sorted(team.guarantee.items())
            if r in capacity and a > 0
        }
        limits = {r: float(a) for r, a in team.limit.items() if r in capacity and a is not None}
        tenants.append(
            Tenant(
                name=slug,
                demand=_to_float(demand[slug], capacity),
                weight=float(team.weight),
                guarantee=floors,
                limit=limits or None,
                parent=team.parent,
            )
        )
    past: dict[str, PastUse] = {}
    if inputs.past is not None:
        tenants, past = _past_use(inputs.past, teams, children, tenants)
    return Problem(
        capacity={r: float(a) for r, a in capacity.items()},
        tenants=tenants,
        integral=frozenset(r for r in capacity if is_integral_resource(r)),
        capacity_amounts=capacity,
        teams=teams,
        demand=demand,
        demand_source=source,
        children=children,
        notes=notes,
        usage_taken_at=inputs.usage_taken_at,
        past=past,
        past_setting=(
            None if inputs.past is None else (inputs.past.half_life_seconds, inputs.past.strength)
        ),
    )


def _past_use(
    past: PastInputs,
    teams: Mapping[str, TeamInput],
    children: Mapping[str, list[str]],
    tenants: list[Tenant],
) -> tuple[list[Tenant], dict[str, PastUse]]:
    """Weights adjusted for past use (``scheduling.domain.pastuse``): each team is judged by its
    subtree's decayed use against its siblings'."""
    sums: dict[str, dict[str, float]] = {}

    def subtree_sums(slug: str) -> dict[str, float]:
        total = dict(past.usage.get(teams[slug].id, {}))
        for kid in children.get(slug, ()):
            for resource, value in subtree_sums(kid).items():
                total[resource] = total.get(resource, 0.0) + value
        sums[slug] = total
        return total

    for slug, team in teams.items():
        if team.parent is None:
            subtree_sums(slug)
    shares = {
        slug: pastuse.dominant_past_share(values, past.capacity) for slug, values in sums.items()
    }
    adjustments = pastuse.adjust_weights(
        [(t.name, t.parent, t.weight) for t in tenants],
        {slug: share for slug, (share, _) in shares.items()},
        past.strength,
    )
    result = {}
    for slug, adjustment in adjustments.items():
        mean = pastuse.mean_amounts(sums.get(slug, {}), past.half_life_seconds)
        result[slug] = PastUse(
            mean={r: float_to_amount(v, r) for r, v in mean.items() if r in past.capacity},
            share=adjustment.past_share,
            resource=shares.get(slug, (0.0, ""))[1],
            weight=teams[slug].weight,
            effective_weight=adjustment.effective_weight,
            multiplier=adjustment.multiplier,
            group_share=adjustment.group_share,
            group_past=adjustment.group_past,
            clamped=adjustment.clamped,
        )
    adjusted = [replace(t, weight=adjustments[t.name].effective_weight) for t in tenants]
    return adjusted, result


def plain_problem(problem: Problem) -> Problem:
    """``problem`` with the configured weights (no adjustment for past use)."""
    if not problem.past:
        return problem
    tenants = [replace(t, weight=float(problem.teams[t.name].weight)) for t in problem.tenants]
    return replace(problem, tenants=tenants)


def build_problem(
    *,
    capacity: Mapping[str, Decimal] | None = None,
    overrides: Mapping[str, Mapping] | None = None,
) -> Problem:
    """Read the database and build the DRF problem (constant query count); see module docstring.

    Raises NoCapacity when no capacity is known, ValidationError for malformed overrides.
    """
    return make_problem(load_inputs(capacity=capacity), overrides)


def latest_fair_allocations(team_slugs: Iterable[str]) -> dict[str, dict[str, Decimal]]:
    """Per team slug of ``team_slugs``: its fair allocation in the latest share computation
    (none computed yet: empty). Two queries, whatever the team count. The provider of fair
    allocations that ``monitoring.workloads`` judges waiting workloads by (set in
    ``SchedulingConfig.ready``)."""
    slugs = sorted(set(team_slugs))
    fair: dict[str, dict[str, Decimal]] = {}
    latest = ShareComputation.objects.order_by("-computed_at", "-id").first()
    if latest is not None:
        for slug, allocation in ShareSnapshot.objects.filter(
            computation=latest, team__slug__in=slugs
        ).values_list("team__slug", "fair_allocation"):
            fair[slug] = {r: Decimal(str(a)) for r, a in (allocation or {}).items()}
    return fair
