"""Departments as sums of their subtree (pure): the one rule for every per-team usage figure.

A department's usage is its own namespaces' usage plus every descendant team's, at any depth;
a team's is its own. The same rule serves the dashboard, the team page, the API and the charts,
so a department's figure is the same everywhere (issue 29: its own page once said "No usage
collected" while the dashboard summed 154 GPUs).

``parents`` maps every team id to its parent's id (or None); ``own`` maps team id → key →
amount (any key: a resource, or a (resource, hour) pair). Ids absent from ``parents`` count as
roots. A cycle (which the model forbids) is cut rather than looped over.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from decimal import Decimal

__all__ = ["descendants", "subtree_totals"]


def _children(parents: Mapping[int, int | None]) -> dict[int | None, list[int]]:
    kids: dict[int | None, list[int]] = defaultdict(list)
    for team, parent in parents.items():
        kids[parent].append(team)
    return kids


def descendants(parents: Mapping[int, int | None], team: int) -> list[int]:
    """``team`` and every team below it, depth-first, each once."""
    kids = _children(parents)
    seen: list[int] = []
    stack = [team]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.append(current)
        stack.extend(sorted(kids.get(current, []), reverse=True))
    return seen


def subtree_totals(
    parents: Mapping[int, int | None], own: Mapping[int, Mapping[Hashable, Decimal]]
) -> dict[int, dict[Hashable, Decimal]]:
    """Per team: the sum of ``own`` over the team and its descendants (teams with nothing below
    them and nothing of their own are left out). One pass, children before parents."""
    kids = _children(parents)
    totals: dict[int, dict[Hashable, Decimal]] = {}
    done: set[int] = set()
    open_: set[int] = set()  # expanded, not yet summed: a cycle back to one is cut
    for root in sorted(set(parents) | set(own)):
        if root in done:
            continue
        # Iterative post-order: a team is summed once all its children are.
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            team, expanded = stack.pop()
            if team in done:
                continue
            if not expanded:
                if team in open_:
                    continue
                open_.add(team)
                stack.append((team, True))
                stack.extend((k, False) for k in kids.get(team, []) if k not in done | open_)
                continue
            done.add(team)
            sums: dict[Hashable, Decimal] = defaultdict(Decimal)
            for key, amount in own.get(team, {}).items():
                sums[key] += amount
            for child in kids.get(team, []):
                for key, amount in totals.get(child, {}).items():
                    sums[key] += amount
            if sums:
                totals[team] = dict(sums)
    return totals
