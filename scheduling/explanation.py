""" "Why is my share X" for a solved problem: the parts of ``scheduling.domain.explain`` per team,
in people's words with the numbers, as the team page, the preview and the API show them.

``explanations(problem, shares, plain_shares, plain_own)`` builds every team's list once per
computation (stored on ``ShareSnapshot.explanation``); each entry is
``{"part", "label", "words", "amounts": {resource: decimal string}}`` and the past-use entry
also carries the usage that caused it (``past_usage``, ``past_share``, ``weight``,
``effective_weight``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from quotas.domain.quantity import format_quantity, is_byte_resource
from scheduling.domain.explain import Part, TeamFacts, explain
from scheduling.pastuse import describe_half_life
from scheduling.shares import Amounts, Problem, amount_string

__all__ = [
    "LABELS",
    "diff_explanations",
    "explanation_table",
    "explanations",
    "signed_amount",
]

LABELS = {
    "guarantee": "Guarantee",
    "weighted-share": "Weighted share of what is contended",
    "department-keeps": "What the department keeps",
    "capped": "Capped by demand or limit",
    "passed-on": "Passed on or held back",
    "past-use": "Adjustment for past use",
}

_NAMES = {"nvidia.com/gpu": "GPUs", "cpu": "cores", "memory": "memory"}


_BINARY = ((Decimal(2**40), "Ti"), (Decimal(2**30), "Gi"), (Decimal(2**20), "Mi"))


def human_amount(amount: Decimal, resource: str) -> str:
    """A part's amount as people read it: ``17.5`` GPUs, ``9379.2`` cores, ``1.2Ti`` of memory
    (parts are shares, so fractions are real here; Kubernetes' ``17500m`` is not for people)."""
    amount = abs(amount)
    if is_byte_resource(resource):
        for size, unit in _BINARY:
            if amount >= size:
                text = f"{(amount / size).quantize(Decimal('0.1')).normalize():f}"
                return f"{text}{unit}"
        return f"{amount.quantize(Decimal(1))}"
    if "/" in resource or resource == "cpu":
        places = Decimal("0.01") if "/" in resource else Decimal("0.001")
        return f"{amount.quantize(places).normalize():f}"
    return format_quantity(amount, resource)


def signed_amount(amount: Decimal, resource: str) -> str:
    """``+8``, ``−2.5`` (a real minus), ``0``: a part's amount as the tables show it."""
    if amount == 0:
        return "0"
    text = human_amount(amount, resource)
    return f"+{text}" if amount > 0 else f"−{text}"


def _list(amounts: Mapping[str, Decimal]) -> str:
    """``8 GPUs, 12 cores`` for the non-zero amounts (GPU first)."""
    items = sorted(amounts.items(), key=lambda item: (item[0] != "nvidia.com/gpu", item[0]))
    return ", ".join(f"{human_amount(a, r)} {_NAMES.get(r, r)}" for r, a in items if a) or "nothing"


def _words(part: Part, slug: str, problem: Problem, facts: TeamFacts, parent: str | None) -> str:
    amounts = part.amounts
    if part.name == "guarantee":
        return f"{slug}'s guarantee, reserved whatever others want: {_list(amounts)}."
    if part.name == "weighted-share":
        where = "its department's allocation" if parent else "the cluster"
        return (
            f"weight {facts.weight:g} of {facts.siblings_weight:g} (its own and its siblings') "
            f"of what {where} has beyond everyone's guarantees: {_list(amounts)}."
        )
    if part.name == "department-keeps":
        return (
            "its department runs workloads of its own; the same weight's part of what it "
            f"keeps for them is not passed on: −{_list(amounts)}."
        )
    if part.name == "capped":
        return (
            f"{slug} does not need or may not have that much (its running and waiting "
            f"workloads, or its limit, stop there): −{_list(amounts)}."
        )
    if part.name == "passed-on":
        given = {r: a for r, a in amounts.items() if a > 0}
        held = {r: a for r, a in amounts.items() if a < 0}
        text = []
        if given:
            text.append(f"what other teams did not need, passed on by weight: +{_list(given)}")
        if held:
            text.append(
                "not there after all: DRF evens out dominant shares across resources"
                + (" and its department's limits bind" if parent else "")
                + f": −{_list(held)}"
            )
        return "; ".join(text) + "."
    # past-use
    past = problem.past.get(slug)
    half_life, strength = problem.past_setting or (0, 0.0)
    if past is None:
        return f"fairness over time: {_list(amounts)}."
    direction = "less" if past.multiplier < 1 else "more"
    mean = _list(past.mean)
    return (
        f"fairness over time (half-life {describe_half_life(half_life)}, strength "
        f"{strength:g}): {slug} held on average {mean} recently ({past.share:.1%} of the "
        f"cluster by its dominant resource; its group {past.group_past:.1%}, its weight's part "
        f"{past.group_share:.1%}), so its weight counts {past.multiplier:.2f}× "
        f"({past.weight} → {past.effective_weight:.2f}) and it gets {direction}: "
        + ", ".join(
            f"{signed_amount(a, r)} {_NAMES.get(r, r)}"
            for r, a in sorted(amounts.items(), key=lambda i: (i[0] != "nvidia.com/gpu", i[0]))
        )
        + "."
    )


def _effective_guarantees(problem: Problem) -> dict[str, Amounts]:
    """Per team the solver's floor: max(own guarantee as scaled, Σ children's), exact enough
    for display (from the tenants' floats)."""
    own = {t.name: {r: Decimal(repr(v)) for r, v in t.guarantee.items()} for t in problem.tenants}
    result: dict[str, Amounts] = {}

    def visit(slug: str) -> Amounts:
        below: Amounts = {}
        for kid in problem.children.get(slug, ()):
            for r, a in visit(kid).items():
                below[r] = below.get(r, Decimal(0)) + a
        mine = dict(own.get(slug, {}))
        for r, a in below.items():
            mine[r] = max(mine.get(r, Decimal(0)), a)
        result[slug] = mine
        return mine

    for slug, team in problem.teams.items():
        if team.parent is None:
            visit(slug)
    return result


def explanations(
    problem: Problem,
    shares: Mapping[str, object],
    plain_shares: Mapping[str, object],
    plain_own: Mapping[str, Amounts],
) -> dict[str, list[dict]]:
    """Every team's explanation (module docstring). ``shares``/``plain_shares`` are
    ``services.TeamShare`` by slug, with and without past use; ``plain_own`` what each team
    holds itself without past use (``services.member_amounts``)."""
    guarantees = _effective_guarantees(problem)
    groups: dict[str | None, list[str]] = {}
    for slug, team in problem.teams.items():
        groups.setdefault(team.parent, []).append(slug)
    # Per sibling group, once: Σ of its members' guarantee parts and of their weights.
    group_guarantee: dict[str | None, Amounts] = {}
    group_weight: dict[str | None, float] = {}
    for parent, members in groups.items():
        total: Amounts = {}
        for member in members:
            member_plain = plain_shares[member].fair_allocation
            for r, g in guarantees.get(member, {}).items():
                total[r] = total.get(r, Decimal(0)) + min(g, member_plain.get(r, Decimal(0)))
        group_guarantee[parent] = total
        group_weight[parent] = float(sum(problem.teams[m].weight for m in members))
    result = {}
    for slug, team in problem.teams.items():
        plain = plain_shares[slug].fair_allocation
        demand = problem.subtree_sum(slug, problem.demand)
        ceiling: dict[str, Decimal | None] = {}
        for r in problem.capacity_amounts:
            limit = team.limit.get(r)
            wanted = demand.get(r, Decimal(0))
            ceiling[r] = wanted if limit is None else min(wanted, limit)
        facts = TeamFacts(
            allocation=dict(shares[slug].fair_allocation),
            plain=dict(plain),
            guarantee=guarantees.get(slug, {}),
            ceiling=ceiling,
            weight=float(team.weight),
            siblings_weight=group_weight[team.parent],
            pool=(
                dict(problem.capacity_amounts)
                if team.parent is None
                else dict(plain_shares[team.parent].fair_allocation)
            ),
            siblings_guarantee=group_guarantee[team.parent],
            parent_keeps={} if team.parent is None else dict(plain_own.get(team.parent, {})),
        )
        entries = []
        for part in explain(facts):
            entry = {
                "part": part.name,
                "label": LABELS[part.name],
                "words": _words(part, slug, problem, facts, team.parent),
                "amounts": {r: amount_string(a) for r, a in sorted(part.amounts.items())},
            }
            past = problem.past.get(slug)
            if part.name == "past-use" and past is not None:
                entry.update(
                    past_usage={r: amount_string(a) for r, a in sorted(past.mean.items())},
                    past_share=round(past.share, 6),
                    weight=past.weight,
                    effective_weight=round(past.effective_weight, 6),
                )
            entries.append(entry)
        result[slug] = entries
    return result


def diff_explanations(before: list[dict], after: list[dict]) -> list[dict]:
    """A preview's change as the same parts: per part, ``after − before`` per resource (parts
    that did not move left out). ``Σ`` of the result = the change of the allocation."""
    index = {entry["part"]: entry for entry in before}
    names = [e["part"] for e in before] + [e["part"] for e in after if e["part"] not in index]
    later = {entry["part"]: entry for entry in after}
    result = []
    for name in sorted(set(names), key=list(LABELS).index):
        old = index.get(name, {}).get("amounts", {})
        new = later.get(name, {}).get("amounts", {})
        change = {}
        for r in sorted(set(old) | set(new)):
            delta = Decimal(new.get(r, "0")) - Decimal(old.get(r, "0"))
            if delta:
                change[r] = amount_string(delta)
        if change:
            result.append(
                {
                    "part": name,
                    "label": LABELS[name],
                    "words": (later.get(name) or index[name])["words"],
                    "amounts": change,
                }
            )
    return result


def explanation_table(
    entries: list[dict], allocation: Mapping[str, str], *, signed_total: bool = False
) -> dict | None:
    """The page's table of an explanation: a column per resource (GPU first), a row per part
    with signed amounts, and the total, which is the fair allocation (a preview's change:
    ``signed_total``, the change of the allocation). None when empty."""
    if not entries:
        return None
    resources = sorted(
        set(allocation) | {r for e in entries for r in e["amounts"]},
        key=lambda r: (r != "nvidia.com/gpu", "/" not in r, r),
    )
    rows = [
        {
            "part": e["part"],
            "label": e["label"],
            "words": e["words"],
            "cells": [
                signed_amount(Decimal(e["amounts"][r]), r) if r in e["amounts"] else ""
                for r in resources
            ],
        }
        for e in entries
    ]
    totals = [
        signed_amount(Decimal(allocation.get(r, "0")), r)
        if signed_total
        else format_quantity(Decimal(allocation.get(r, "0")), r)
        for r in resources
    ]
    return {"resources": resources, "rows": rows, "total": totals}
