"""Fair-share services: compute and record DRF shares, prune their history, preview changes.

``compute_shares`` is the one writer of ShareComputation/ShareSnapshot (one transaction per run;
each run is a new computation, history is the point). ``what_if`` and ``what_if_for_request``
solve the current problem and the proposed one and compare them; they never write.
How the DB becomes a DRF problem is in ``scheduling.shares`` (and docs/drf.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from monitoring.usage import gpus_by_product
from quotas.domain.quantity import is_byte_resource
from quotas.models import QuotaRequest
from quotas.quantities import is_integral_resource, parse_quantity
from scheduling.domain.fairness import Allocation, ProblemError, dominant_share, solve
from scheduling.explanation import diff_explanations, explanations
from scheduling.health import share_failed
from scheduling.models import ShareComputation, ShareFailure, ShareSnapshot
from scheduling.pastuse import fold as fold_past_use
from scheduling.preview_flags import (
    FLAG_ABOVE_DEMAND,
    FLAG_BELOW_USAGE,
    FLAG_DEVICE_CLASS,
    FLAG_GUARANTEES_OVER_CAPACITY,
    FLAG_GUARANTEES_SCALED,
    FLAG_HIERARCHY,
    Flag,
    above_demand_flags,
    below_usage_flags,
    capacity_flags,
    device_class_flags,
    hierarchy_flags,
)
from scheduling.reasons import problem_reasons
from scheduling.shares import (
    Amounts,
    Problem,
    ShareProblemError,
    amount_string,
    amounts_json,
    float_to_amount,
    load_inputs,
    make_problem,
    plain_problem,
)

__all__ = [
    "FLAG_ABOVE_DEMAND",
    "FLAG_BELOW_USAGE",
    "FLAG_DEVICE_CLASS",
    "FLAG_GUARANTEES_OVER_CAPACITY",
    "FLAG_GUARANTEES_SCALED",
    "FLAG_HIERARCHY",
    "Flag",
    "TeamOutcome",
    "TeamShare",
    "WhatIf",
    "compute_shares",
    "prune_share_history",
    "solve_problem",
    "team_shares",
    "what_if",
    "what_if_for_request",
]

logger = logging.getLogger(__name__)

_MILLI = Decimal("0.001")

# --------------------------------------------------------------------------- solving


@dataclass(frozen=True)
class TeamShare:
    """One team's solved share, exact amounts; departments count their whole subtree."""

    slug: str
    parent: str | None
    weight: int
    usage: Amounts  # allocated now (subtree)
    demand: Amounts  # allocated + pending, or the limit fallback (subtree)
    demand_source: str
    dominant_share: float  # of usage, against total capacity
    dominant_resource: str
    fair_allocation: Amounts
    fair_share: float  # dominant share of the fair allocation
    fair_resource: str
    reason: str

    @property
    def weighted_share(self) -> float:
        return self.dominant_share / self.weight


def solve_problem(problem: Problem) -> dict[str, Allocation]:
    """Run the solver; a ProblemError becomes ShareProblemError (a scheduling DomainError)."""
    try:
        return solve(problem.capacity, problem.tenants, integral=problem.integral)
    except ProblemError as e:
        raise ShareProblemError(str(e)) from e


def team_shares(problem: Problem, allocations: Mapping[str, Allocation]) -> dict[str, TeamShare]:
    """Turn solver floats into exact per-team results, by slug.

    Fair allocations keep every resource that is positive or that the team has a quota for.
    Amounts are those a person can act on (issue 29), decided once here for every surface:
    GPUs (integral resources) are whole devices, bytes whole bytes, and cores whole cores unless
    a fraction is real (the amount is the team's demand, guarantee or limit, which pod requests
    and quotas can make fractional): "255.873 cores" is solver round-off, not a figure.
    A department's amounts are the exact sum of its teams' amounts and its own part
    (``member_amounts``), so Volcano's rule (Σ children's deserved ≤ the parent's) and the
    preview's bookkeeping (who gives up what) hold exactly, not just up to rounding.
    """
    usage_by_team = {slug: team.usage for slug, team in problem.teams.items()}
    own = member_amounts(problem, allocations)
    totals: dict[str, Amounts] = {}
    for slug in _post_order(problem):
        total = dict(own[slug])
        for kid in problem.children.get(slug, ()):
            for resource, amount in totals[kid].items():
                total[resource] = total.get(resource, Decimal(0)) + amount
        totals[slug] = total
    result = {}
    for slug, team in problem.teams.items():
        usage = problem.subtree_sum(slug, usage_by_team)
        share, resource = dominant_share(
            {r: float(a) for r, a in usage.items() if r in problem.capacity}, problem.capacity
        )
        allocation = allocations[slug]
        fair = {
            r: a
            for r, a in sorted(totals[slug].items())
            if a > 0 or r in team.guarantee or r in team.limit
        }
        result[slug] = TeamShare(
            slug=slug,
            parent=team.parent,
            weight=team.weight,
            usage=usage,
            demand=problem.subtree_sum(slug, problem.demand),
            demand_source=problem.demand_source[slug],
            dominant_share=share,
            dominant_resource=resource,
            fair_allocation=fair,
            fair_share=allocation.dominant_share,
            fair_resource=allocation.dominant_resource,
            reason=allocation.reason,
        )
    return result


def _post_order(problem: Problem) -> list[str]:
    """Every team, children before their parent (ties by slug)."""
    order: list[str] = []

    def visit(slug: str) -> None:
        for kid in problem.children.get(slug, ()):
            visit(kid)
        order.append(slug)

    for slug in sorted(s for s, t in problem.teams.items() if t.parent is None):
        visit(slug)
    return order


def member_amounts(problem: Problem, allocations: Mapping[str, Allocation]) -> dict[str, Amounts]:
    """What each team holds itself, exact: a team without teams of its own its allocation, a
    department its allocation less its teams' (its own workloads, H-DRF's implicit member).

    Rounding (see ``team_shares``): integral resources are whole (the solver's); bytes whole
    bytes and other resources whole units, unless within the rounding (a byte, a milli-unit) of
    the team's own demand, guarantee or limit, never above its demand or limit and never below
    its guaranteed floor ``min(guarantee, demand)``. Whatever the rounding leaves over the
    capacity (a byte or a milli-unit per team) is taken back from the largest holders, so the
    amounts never add up to more than the cluster has.
    """
    result: dict[str, Amounts] = {}
    for slug, team in problem.teams.items():
        resources = allocations[slug].resources
        kids = problem.children.get(slug, ())
        demand = problem.demand.get(slug, {})
        amounts: Amounts = {}
        for resource, value in resources.items():
            value -= sum(allocations[k].resources.get(resource, 0.0) for k in kids)
            amount = float_to_amount(value, resource)
            if not is_integral_resource(resource):
                amount = _whole_unless_real(
                    amount,
                    demand.get(resource, Decimal(0)),
                    None if kids else team.guarantee.get(resource),
                    None if kids else team.limit.get(resource),
                    unit=Decimal(1) if is_byte_resource(resource) else _MILLI,
                    whole=not is_byte_resource(resource),
                )
            amounts[resource] = amount
        result[slug] = amounts
    for resource, capacity in problem.capacity_amounts.items():
        excess = sum((a.get(resource, Decimal(0)) for a in result.values()), Decimal(0)) - capacity
        for slug in sorted(result, key=lambda s: (-result[s].get(resource, Decimal(0)), s)):
            if excess <= 0:
                break
            held = result[slug].get(resource, Decimal(0))
            taken = min(held, excess)
            result[slug][resource] = held - taken
            excess -= taken
    return result


def _whole_unless_real(
    amount: Decimal,
    demand: Decimal,
    guarantee: Decimal | None,
    limit: Decimal | None,
    *,
    unit: Decimal,
    whole: bool,
) -> Decimal:
    most = demand if limit is None else min(demand, limit)
    for real in (demand, guarantee, limit):
        if real is not None and real <= most and abs(amount - real) <= unit:
            return real
    floor = amount.to_integral_value(rounding=ROUND_FLOOR) if whole else amount
    if guarantee is not None:
        floor = max(floor, min(guarantee, demand, amount))
    return min(floor, most)


def compute_shares(*, trigger: str = "schedule", now: datetime | None = None) -> ShareComputation:
    """Solve the cluster's DRF problem and record one snapshot per active team.

    Steps:
    1. build the problem from the latest capacity, quotas and usage (constant query count);
    2. solve it (pure);
    3. write one ShareComputation and one ShareSnapshot per active team, in one transaction,
       with the wall time of the whole run in ``duration_ms``.

    Every call records a new computation. Raises NoCapacity when no capacity was ever collected,
    ShareProblemError when the quotas make an invalid problem: then only a ShareFailure is
    written (the shares are stale, see ``scheduling.health.share_health``).
    """
    now = now or timezone.now()
    started = time.perf_counter()
    try:
        return _compute_shares(trigger=trigger, now=now, started=started)
    except ShareProblemError as e:
        # Recorded outside the rolled-back transaction: shares are now stale, and
        # scheduling.health.share_health() says since when and why.
        failure = ShareFailure.objects.create(failed_at=now, trigger=trigger[:64], error=str(e))
        share_failed(failure)  # admins hear of it once per episode
        raise


def _compute_shares(*, trigger: str, now: datetime, started: float) -> ShareComputation:
    # Fairness over time: fold the hours settled since the last computation (one row).
    fold_past_use(now=now)
    with transaction.atomic():
        problem = make_problem(load_inputs())
        allocations = solve_problem(problem)
        shares = team_shares(problem, allocations)
        explained = explain_problem(problem, allocations, shares)
        for note in problem.notes:
            logger.warning("compute_shares: %s", note)
        computation = ShareComputation.objects.create(
            computed_at=now,
            trigger=trigger[:64],
            capacity=amounts_json(problem.capacity_amounts),
            teams=len(shares),
        )
        ShareSnapshot.objects.bulk_create(
            ShareSnapshot(
                computation=computation,
                computed_at=now,
                team_id=problem.teams[slug].id,
                usage=amounts_json(share.usage),
                demand=amounts_json(share.demand),
                dominant_share=share.dominant_share,
                dominant_resource=share.dominant_resource,
                weighted_share=share.weighted_share,
                fair_allocation=amounts_json(share.fair_allocation),
                fair_share=share.fair_share,
                reason=share.reason[:300],
                past_usage=(amounts_json(problem.past[slug].mean) if slug in problem.past else {}),
                past_share=problem.past[slug].share if slug in problem.past else None,
                effective_weight=(
                    problem.past[slug].effective_weight if slug in problem.past else None
                ),
                explanation=explained[slug],
            )
            for slug, share in shares.items()
        )
        computation.duration_ms = round((time.perf_counter() - started) * 1000)
        computation.save(update_fields=["duration_ms"])
    return computation


def explain_problem(
    problem: Problem,
    allocations: Mapping[str, Allocation],
    shares: Mapping[str, TeamShare] | None = None,
) -> dict[str, list[dict]]:
    """Every team's "why is my share X" (``scheduling.explanation``): with fairness over time
    on, the problem is solved a second time with the configured weights, and the difference is
    the past-use part."""
    shares = shares if shares is not None else team_shares(problem, allocations)
    if problem.past:
        plain = plain_problem(problem)
        plain_allocations = solve_problem(plain)
        plain_shares = team_shares(plain, plain_allocations)
        plain_own = member_amounts(plain, plain_allocations)
    else:
        plain_shares, plain_own = shares, member_amounts(problem, allocations)
    return explanations(problem, shares, plain_shares, plain_own)


def prune_share_history(*, keep_days: int = 30, now: datetime | None = None) -> int:
    """Delete computations (and their snapshots) older than ``keep_days``; return how many.

    The latest computation is always kept, however old, so the UI always has current shares.
    """
    if keep_days < 0:
        raise ValueError("keep_days must be >= 0")
    cutoff = (now or timezone.now()) - timedelta(days=keep_days)
    latest = ShareComputation.objects.order_by("-computed_at", "-id").values("id")[:1]
    old = ShareComputation.objects.filter(computed_at__lt=cutoff).exclude(id__in=latest)
    with transaction.atomic():
        _, per_model = old.delete()
    return per_model.get(ShareComputation._meta.label, 0)


# --------------------------------------------------------------------------- what-if


@dataclass(frozen=True)
class TeamOutcome:
    """A team's fair share before and after the proposed changes."""

    slug: str
    parent: str | None
    before: TeamShare
    after: TeamShare
    # Fair allocation under full contention (every team demanding its limits), before and after:
    # what the guarantee buys when nobody leaves spare capacity (``contention_problem``).
    contention_before: Amounts = field(default_factory=dict)
    contention_after: Amounts = field(default_factory=dict)
    # The reason in words (``scheduling.reasons``), before and after.
    why_before: str = ""
    why_after: str = ""
    # "Why is my share X" before and after (scheduling.explanation); their difference, part by
    # part, explains the change.
    explanation_before: list = field(default_factory=list)
    explanation_after: list = field(default_factory=list)

    @property
    def delta(self) -> Amounts:
        """after − before per resource (every resource either side has), zeros included."""
        resources = sorted(self.before.fair_allocation.keys() | self.after.fair_allocation.keys())
        return {
            r: self.after.fair_allocation.get(r, Decimal(0))
            - self.before.fair_allocation.get(r, Decimal(0))
            for r in resources
        }

    @property
    def loses(self) -> Amounts:
        """What the team loses, as positive amounts (empty when it loses nothing)."""
        return {r: -d for r, d in self.delta.items() if d < 0}

    @property
    def changed(self) -> bool:
        return any(self.delta.values())

    def to_dict(self) -> dict[str, Any]:
        def side(share: TeamShare) -> dict[str, Any]:
            return {
                "weight": share.weight,
                "fair_allocation": amounts_json(share.fair_allocation),
                "fair_share": round(share.fair_share, 6),
                "fair_resource": share.fair_resource,
                "reason": share.reason,
                "demand": amounts_json(share.demand),
            }

        return {
            "team": self.slug,
            "parent": self.parent,
            "usage": amounts_json(self.before.usage),
            "dominant_share": round(self.before.dominant_share, 6),
            "before": side(self.before) | {"why": self.why_before},
            "after": side(self.after) | {"why": self.why_after},
            "delta": amounts_json(self.delta),
            "contention": {
                "before": amounts_json(self.contention_before),
                "after": amounts_json(self.contention_after),
            },
            "explanation": {
                "before": self.explanation_before,
                "after": self.explanation_after,
                "change": diff_explanations(self.explanation_before, self.explanation_after),
            },
        }


@dataclass(frozen=True)
class WhatIf:
    """The effect of proposed quota or weight changes on every team's fair share (unsaved)."""

    computed_at: datetime
    changes: dict[str, Any]  # JSON-ready echo of the proposed changes
    capacity: Amounts
    teams: dict[str, TeamOutcome]  # by slug
    flags: list[Flag] = field(default_factory=list)
    usage_taken_at: datetime | None = None
    # GPU-equivalents in use now per team and GPU product (issue 34), for the changed teams
    gpu_in_use: dict[str, dict[str, Decimal]] = field(default_factory=dict)

    @property
    def losers(self) -> dict[str, Amounts]:
        """Teams whose fair allocation shrinks: {slug: {resource: amount lost}}."""
        return {slug: t.loses for slug, t in self.teams.items() if t.loses}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (Decimal amounts as strings); stored as QuotaRequest.preview."""
        return {
            "computed_at": self.computed_at.isoformat(),
            "usage_taken_at": self.usage_taken_at.isoformat() if self.usage_taken_at else None,
            "capacity": amounts_json(self.capacity),
            "changes": self.changes,
            "teams": [outcome.to_dict() for _, outcome in sorted(self.teams.items())],
            "losers": {slug: amounts_json(lost) for slug, lost in sorted(self.losers.items())},
            "flags": [flag.to_dict() for flag in self.flags],
            "gpu_in_use": {
                slug: {product: amount_string(a) for product, a in sorted(by_product.items())}
                for slug, by_product in sorted(self.gpu_in_use.items())
            },
        }


def _changes_json(changes: Mapping[str, Mapping]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for slug, change in sorted(changes.items()):
        entry: dict[str, Any] = {}
        if "weight" in change:
            entry["weight"] = change["weight"]
        for key in ("guarantee", "limit"):
            if key in change:
                entry[key] = {
                    r: None if a in (None, "") else amount_string(parse_quantity(a, field=key))
                    for r, a in sorted(change[key].items())
                }
        if "tier" in change:
            tier = change["tier"]
            entry["tier"] = None if tier is None else str(getattr(tier, "name", tier))
        result[slug] = entry
    return result


def what_if(
    changes: Mapping[str, Mapping],
    *,
    now: datetime | None = None,
    exclude_request: int | None = None,
) -> WhatIf:
    """Compare fair shares now and with ``changes`` applied; nothing is saved.

    ``changes`` has the shape of ``build_problem``'s overrides: ``{team_slug: {"weight": int,
    "guarantee": {res: amount}, "limit": {res: amount or None}, "tier": ...}}``.

    Steps:
    1. read the inputs once; solve them as they are and with the changes;
    2. compare every team's fair allocation (delta per resource, who loses how much);
    3. flag guarantees over usable capacity (only resources whose guarantee the changes set,
       counted as approval counts them: ``quotas.capacity_rule.committed_guarantees``, excluding
       ``exclude_request``), new limits below current allocated usage (with the namespaces
       holding it), and guarantees scaled down to fit the raw capacity.

    Raises ValidationError for malformed changes, NoCapacity, ShareProblemError.
    """
    now = now or timezone.now()
    inputs = load_inputs()
    before_problem = make_problem(inputs)
    after_problem = make_problem(inputs, changes)
    hierarchy = hierarchy_flags(changes, after_problem)
    before_allocations = solve_problem(before_problem)
    before = team_shares(before_problem, before_allocations)
    contention_before = contention_shares(before_problem)
    why_before = problem_reasons(before_problem, before)
    explained_before = explain_problem(before_problem, before_allocations, before)
    try:
        after_allocations = solve_problem(after_problem)
        after = team_shares(after_problem, after_allocations)
        contention_after = contention_shares(after_problem)
        why_after = problem_reasons(after_problem, after)
        explained_after = explain_problem(after_problem, after_allocations, after)
    except ShareProblemError:
        # A change that breaks a hierarchy rule may make no valid problem: the preview shows
        # today's shares and the flags say why approval would be refused.
        if not hierarchy:
            raise
        after, contention_after, why_after = before, contention_before, why_before
        explained_after = explained_before
    outcomes = {
        slug: TeamOutcome(
            slug,
            inputs.teams[slug].parent,
            before[slug],
            after[slug],
            contention_before=contention_before[slug],
            contention_after=contention_after[slug],
            why_before=why_before[slug],
            why_after=why_after[slug],
            explanation_before=explained_before[slug],
            explanation_after=explained_after[slug],
        )
        for slug in sorted(inputs.teams)
    }

    flags: list[Flag] = list(hierarchy)
    flags += capacity_flags(
        changes, after_problem, inputs, now=now, exclude_request=exclude_request
    )
    flags += below_usage_flags(changes, after_problem, after)
    flags += above_demand_flags(changes, after_problem, after, inputs)
    flags += device_class_flags(changes, after_problem)
    flags.extend(
        Flag(kind=FLAG_GUARANTEES_SCALED, message=note)
        for note in after_problem.notes
        if note not in before_problem.notes
    )
    in_use = gpus_by_product(inputs.usage_taken_at) if inputs.usage_taken_at else {}
    return WhatIf(
        computed_at=now,
        changes=_changes_json(changes),
        capacity=inputs.capacity,
        teams=outcomes,
        flags=flags,
        usage_taken_at=inputs.usage_taken_at,
        gpu_in_use={
            slug: in_use[inputs.teams[slug].id]
            for slug in sorted(changes)
            if slug in inputs.teams and inputs.teams[slug].id in in_use
        },
    )


def contention_problem(problem: Problem) -> Problem:
    """``problem`` under full contention: every team without teams of its own demands its limit
    (capped by the capacity) for each resource it has a limit for; other demands, departments'
    own ones included, stay as they are. Its fair allocation is what the guarantee buys when no
    team leaves anything spare."""
    tenants = []
    for tenant in problem.tenants:
        if problem.children.get(tenant.name) or not tenant.limit:
            tenants.append(tenant)
            continue
        demand = dict(tenant.demand)
        for resource, limit in tenant.limit.items():
            if resource in problem.capacity:
                demand[resource] = min(limit, problem.capacity[resource])
        tenants.append(replace(tenant, demand=demand))
    return replace(problem, tenants=tenants)


def contention_shares(problem: Problem) -> dict[str, Amounts]:
    """Each team's fair allocation under full contention (``contention_problem``), by slug."""
    contended = contention_problem(problem)
    shares = team_shares(contended, solve_problem(contended))
    return {slug: share.fair_allocation for slug, share in shares.items()}


def what_if_for_request(
    request: QuotaRequest,
    adjustments: Mapping[str, tuple[Decimal | str, Decimal | str | None]] | None = None,
    *,
    now: datetime | None = None,
) -> WhatIf:
    """Preview a quota request's lines (with an approver's ``adjustments`` {res: (g, l)}).

    The request itself is not counted twice in the capacity check (it is excluded from the
    reserved temporary grants). Raises ValidationError for an adjustment outside the request.
    """
    lines = {line.resource: (line.guarantee, line.limit) for line in request.lines.all()}
    unknown = sorted(set(adjustments or {}) - set(lines))
    if unknown:
        raise ValidationError({"adjustments": f"Not in the request: {', '.join(unknown)}."})
    lines |= dict(adjustments or {})
    change = {
        "guarantee": {resource: g for resource, (g, _) in sorted(lines.items())},
        "limit": {resource: lim for resource, (_, lim) in sorted(lines.items())},
    }
    return what_if({request.team.slug: change}, now=now, exclude_request=request.pk)
