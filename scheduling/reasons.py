"""The solver's reasons (``demand-met``, ``limit``, ``saturated:<resource>``) in people's words,
said to the team's lead: "held at your department's 208-GPU limit", "the cluster has spare GPUs:
you get your whole demand".

``reason_words`` takes plain values (the dashboard has them from its own queries);
``problem_reasons`` reads them off a solved ``shares.Problem`` (the what-if preview).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from quotas.quantities import GPU, format_quantity, is_integral_resource

__all__ = ["problem_reasons", "reason_words"]

_NAMES = {GPU: "GPUs", "cpu": "CPUs", "memory": "memory"}


def _sized_limit(amount: Decimal, resource: str) -> str:
    """``208-GPU limit``, ``512-CPU limit``, ``2Ti memory limit``."""
    if is_integral_resource(resource):
        amount = amount.to_integral_value(rounding="ROUND_FLOOR")
    text = format_quantity(amount, resource)
    if resource == GPU:
        return f"{text}-GPU limit"
    if resource == "cpu":
        return f"{text}-CPU limit"
    return f"{text} {resource} limit"


def reason_words(
    reason: str,
    *,
    fair: Mapping[str, Decimal],
    limit: Mapping[str, Decimal | None],
    parent: str | None = None,
    parent_limit: Mapping[str, Decimal | None] | None = None,
    demand: Mapping[str, Decimal] | None = None,
) -> str:
    """One phrase for a team's fair allocation ``fair`` given the solver's ``reason``.

    ``limit`` is the team's own ceiling per resource (None: none), ``parent_limit`` its
    department's. For ``limit`` the binding ceiling is the team's own where the allocation
    reaches it, else the department's."""
    if reason == "demand-met":
        spare = "GPUs" if Decimal(str(fair.get(GPU) or 0)) > 0 else "capacity"
        beyond = Decimal(str((demand or {}).get(GPU) or 0)) - Decimal(str(fair.get(GPU) or 0))
        if 0 < beyond < 1:
            # A fraction of a GPU (MIG slices, a shared GPU: DRA GPU-equivalents, issue 34):
            # allocations of GPUs are whole GPUs, never rounded above the demand.
            more = f"{beyond.normalize():f}"
            return (
                f"the cluster has spare {spare}: you get your whole demand in whole GPUs (the "
                f"{more} GPU-equivalents more that your workloads want, parts of a GPU, are "
                "not rounded up to one)"
            )
        return f"the cluster has spare {spare}: you get your whole demand"
    if reason == "limit":
        for resource in sorted(fair, key=lambda r: (r != GPU, r)):
            own = limit.get(resource)
            if own is not None and Decimal(str(fair[resource])) >= own:
                return f"held at your {_sized_limit(own, resource)}"
        for resource in sorted(parent_limit or {}, key=lambda r: (r != GPU, r)):
            ceiling = (parent_limit or {}).get(resource)
            if ceiling is not None:
                whose = "your department's" if parent else "a"
                return f"held at {whose} {_sized_limit(ceiling, resource)}"
        return "held at a limit"
    if reason.startswith("saturated:"):
        resource = reason.partition(":")[2]
        name = _NAMES.get(resource, resource)
        return f"every one of the cluster's {name} is wanted: you get your share by weight"
    return reason


def problem_reasons(problem, shares) -> dict[str, str]:
    """``reason_words`` for every team of a solved problem ({slug: TeamShare})."""
    result = {}
    for slug, share in shares.items():
        team = problem.teams[slug]
        parent = problem.teams.get(team.parent) if team.parent else None
        result[slug] = reason_words(
            share.reason,
            fair=share.fair_allocation,
            limit=team.limit,
            parent=team.parent,
            parent_limit=parent.limit if parent is not None else None,
            demand=share.demand,
        )
    return result
