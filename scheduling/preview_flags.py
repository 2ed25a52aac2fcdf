"""What an approver must know about a proposed change (the flags of ``what_if``): guarantees over
the usable capacity, limits under what a team uses now or over what it wants, hierarchy rules
the change would break, guarantees scaled down to fit. Each flag names the team, the resource and
the numbers in people's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from quotas.capacity_rule import committed_guarantees, usable_capacity
from quotas.hierarchy import new_hierarchy_problems
from quotas.quantities import format_quantity
from scheduling.domain.render.amounts import device_class_of
from scheduling.shares import DEMAND_USAGE, Problem, amount_string

FLAG_GUARANTEES_OVER_CAPACITY = "guarantees-over-capacity"
FLAG_BELOW_USAGE = "below-usage"
FLAG_GUARANTEES_SCALED = "guarantees-scaled"
FLAG_HIERARCHY = "hierarchy"
FLAG_ABOVE_DEMAND = "above-demand"
FLAG_DEVICE_CLASS = "device-class"


def _reserve_percent() -> str:
    from django.conf import settings

    return f"{(settings.FAIRSHARE_CAPACITY_RESERVE * 100).normalize():f} %"


@dataclass(frozen=True)
class Flag:
    """Something an approver must know about a change.

    ``kind``: ``guarantees-over-capacity`` (Σ guarantees over usable capacity: approval would be
    refused), ``below-usage`` (a new limit under current allocated usage: Kubernetes does not
    evict, ``namespaces`` lists where workloads keep running over quota, largest first),
    ``guarantees-scaled`` (guarantees over the raw capacity: scaled down to solve),
    ``hierarchy`` (a department's limit under its teams' guarantees or limits: approval would be
    refused, ``quotas.hierarchy.check_hierarchy``), ``above-demand`` (a new limit above what the
    team's workloads want now: today's allocation moves only up to that), ``device-class`` (a
    DRA device count the change sets: enforced per namespace and per queue, outside the fair
    shares; with what the team's claims hold now).
    """

    kind: str
    message: str
    team: str | None = None
    resource: str | None = None
    namespaces: tuple[tuple[str, Decimal], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "team": self.team,
            "resource": self.resource,
            "namespaces": [
                {"namespace": name, "allocated": amount_string(amount)}
                for name, amount in self.namespaces
            ],
        }


def capacity_flags(
    changes: Mapping[str, Mapping],
    after_problem: Problem,
    inputs,
    *,
    now: datetime,
    exclude_request: int | None,
) -> list[Flag]:
    """Guarantees the changes set that would total over the usable capacity, counted as approval
    counts them (``committed_guarantees``, without ``exclude_request``)."""
    flags: list[Flag] = []
    overrides = {
        (after_problem.teams[slug].id, resource): after_problem.teams[slug].guarantee[resource]
        for slug, change in changes.items()
        for resource in change.get("guarantee", {})
    }
    if not overrides:
        return flags
    totals = committed_guarantees(overrides, now=now, exclude_request=exclude_request)
    usable = usable_capacity(inputs.capacity)
    for resource in sorted({r for _, r in overrides}):
        total, available = totals.get(resource, Decimal(0)), usable.get(resource, Decimal(0))
        if total > available:
            flags.append(
                Flag(
                    kind=FLAG_GUARANTEES_OVER_CAPACITY,
                    resource=resource,
                    message=(
                        f"Guarantees for {resource} would total "
                        f"{format_quantity(total, resource)}, over the "
                        f"{format_quantity(available, resource)} that may be guaranteed (the "
                        f"{format_quantity(inputs.capacity.get(resource, 0), resource)}"
                        f" schedulable less the {_reserve_percent()} reserve): approval "
                        "would be refused."
                    ),
                )
            )
    return flags


def _holders(problem: Problem, slug: str, resource: str) -> list[tuple[str, Decimal]]:
    """The namespaces of ``slug``'s subtree holding ``resource`` now (latest collection), the
    largest first (ties by name)."""
    holders = [
        (ns, amounts[resource])
        for team in problem.subtree(slug)
        for ns, amounts in problem.teams[team].namespaces.items()
        if amounts.get(resource, 0) > 0
    ]
    return sorted(holders, key=lambda item: (-item[1], item[0]))


def below_usage_flags(
    changes: Mapping[str, Mapping], after_problem: Problem, after: Mapping[str, Any]
) -> list[Flag]:
    """New limits below what the team uses now, with the namespaces that hold it (running pods are
    not evicted for a quota change)."""
    flags: list[Flag] = []
    for slug, change in sorted(changes.items()):
        new_limits = after_problem.teams[slug].limit
        for resource in sorted(change.get("limit", {})):
            limit = new_limits.get(resource)
            used = after[slug].usage.get(resource, Decimal(0))
            if limit is None or used <= limit:
                continue
            holders = _holders(after_problem, slug, resource)
            flags.append(
                Flag(
                    kind=FLAG_BELOW_USAGE,
                    team=slug,
                    resource=resource,
                    namespaces=tuple(holders),
                    message=(
                        f"{slug} uses {format_quantity(used, resource)} {resource}, above the "
                        f"new limit of {format_quantity(limit, resource)}: workloads keep running "
                        f"over quota in {', '.join(ns for ns, _ in holders)} "
                        "(Kubernetes does not evict running pods for a quota change)."
                    ),
                )
            )
    return flags


def above_demand_flags(
    changes: Mapping[str, Mapping], after_problem: Problem, after: Mapping[str, Any], inputs
) -> list[Flag]:
    """Limits above what the team's workloads want now: today's allocation changes only up to that
    demand (issue 29: a preview never allocates more than a team wants)."""
    flags: list[Flag] = []
    for slug, change in sorted(changes.items()):
        # A limit above what the team wants changes today's allocation only up to its demand
        # (issue 29: a preview never allocates more than that); say so, with the numbers.
        team = after_problem.teams[slug]
        if after_problem.demand_source[slug] != DEMAND_USAGE:
            continue
        wanted = after[slug].demand
        for resource in sorted(change.get("limit", {})):
            limit = team.limit.get(resource)
            want = wanted.get(resource, Decimal(0))
            old_limit = inputs.teams[slug].limit.get(resource)
            if resource not in inputs.capacity or (limit is not None and limit <= want):
                continue
            if old_limit is None and limit is None:
                continue  # no ceiling before or after: nothing about the limit to explain
            new_limit = (
                "limit removed" if limit is None else f"limit of {format_quantity(limit, resource)}"
            )
            flags.append(
                Flag(
                    kind=FLAG_ABOVE_DEMAND,
                    team=slug,
                    resource=resource,
                    message=(
                        f"{slug}'s workloads want {format_quantity(want, resource)} {resource} "
                        f"now (running and waiting), so a {new_limit} changes today's fair "
                        "allocation only up to that. What the limit buys "
                        "when the team, and every other team, wants all of it is in the last "
                        "two columns."
                    ),
                )
            )
    return flags


def hierarchy_flags(changes: Mapping[str, Mapping], after: Problem) -> list[Flag]:
    """The hierarchy rules (``quotas.hierarchy.check_hierarchy``) the changes would break: a
    warning in the requester's preview, a refusal at approval. One query per call plus two."""
    quotas = {}
    for slug, change in changes.items():
        team = after.teams.get(slug)
        if team is None:
            continue
        for resource in set(change.get("guarantee", {})) | set(change.get("limit", {})):
            quotas[(team.id, resource)] = (
                team.guarantee.get(resource, Decimal(0)),
                team.limit.get(resource),
            )
    if not quotas:
        return []
    slugs = {team.id: slug for slug, team in after.teams.items()}
    return [
        Flag(
            kind=FLAG_HIERARCHY,
            team=slugs.get(problem.team_id),
            resource=problem.resource,
            message=problem.message,
        )
        for problem in new_hierarchy_problems(quotas)
    ]


def device_class_flags(changes: Mapping[str, Mapping], after_problem: Problem) -> list[Flag]:
    """What a DRA device-class line does (issue 34): a count of devices, not a fair-share
    resource (no capacity is collected for it, so it is not in the solve). Its limit is the
    namespaces' ResourceQuota ``<class>.deviceclass.resource.k8s.io/devices`` (claims beyond it
    are refused when they are created) and the Volcano Queue's ``deviceclass/<class>`` count or
    the Kueue ClusterQueue's quota of that name; the flag says so, with the devices the team's
    claims hold now, per namespace (latest collection)."""
    flags: list[Flag] = []
    for slug, change in sorted(changes.items()):
        team = after_problem.teams[slug]
        resources = set(change.get("limit", {})) | set(change.get("guarantee", {}))
        for resource in sorted(resources):
            device_class = device_class_of(resource)
            if device_class is None:
                continue
            holders = _holders(after_problem, slug, resource)
            held = sum((amount for _, amount in holders), Decimal(0))
            limit = team.limit.get(resource)
            ceiling = (
                "no limit"
                if limit is None
                else f"a limit of {format_quantity(limit, resource)} devices"
            )
            over = (
                " — above the new limit: existing claims keep their devices, new ones are refused"
                if limit is not None and held > limit
                else ""
            )
            flags.append(
                Flag(
                    kind=FLAG_DEVICE_CLASS,
                    team=slug,
                    resource=resource,
                    namespaces=tuple(holders),
                    message=(
                        f"{device_class} devices (Dynamic Resource Allocation) are counted per "
                        f"claim, not shared fairly: {ceiling} caps {slug}'s ResourceClaims of "
                        "that class in its namespaces' ResourceQuota (a claim beyond it is "
                        f"refused when it is created) and its queue (Volcano deviceclass/"
                        f"{device_class}). Its claims hold {format_quantity(held, resource)} "
                        f"now{over}. The GPUs they hold count in nvidia.com/gpu as "
                        "GPU-equivalents (a 1g.10gb MIG slice is 0.125)."
                    ),
                )
            )
    return flags
