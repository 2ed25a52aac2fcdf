"""What the people-facing tables show (issue 14): only the resources that matter, and teams as
a tree whose department rows add up their teams.

* ``display_resources`` / ``shown``: ``FAIRSHARE_DISPLAY_RESOURCES`` (default GPUs, CPU,
  memory), GPUs first; a listed resource with a zero amount is left out of capacity and flavor
  lists (no "0 hugepages", no ``pods``).
* ``team_tree``: dashboard rows in tree order (department, then its teams, depth-first) with
  ``depth`` and, per resource, ``allocated``/``pending`` rolled up: a department row is the sum
  of its teams' rows plus its own namespaces' usage. Fair allocations are already per subtree
  (``scheduling.services.team_shares``), so they are not added again.

Pure functions over plain dicts, no queries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings

__all__ = ["display_resources", "shown", "shown_amounts", "team_tree"]

GPU = "nvidia.com/gpu"


def display_resources() -> list[str]:
    """The resources people see, in display order (GPUs first, then as listed)."""
    listed = list(dict.fromkeys(getattr(settings, "FAIRSHARE_DISPLAY_RESOURCES", [GPU])))
    return sorted(listed, key=lambda r: (r != GPU, listed.index(r)))


def shown(resources: Iterable[str]) -> list[str]:
    """``resources`` restricted to the displayed ones, in display order."""
    order = display_resources()
    present = set(resources)
    return [r for r in order if r in present]


def shown_amounts(amounts: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(resource, amount) pairs of the displayed resources with a non-zero amount."""
    return [
        (r, amounts[r])
        for r in shown(amounts)
        if amounts[r] not in (None, "") and Decimal(str(amounts[r])) != 0
    ]


def team_tree(rows: list[dict]) -> list[dict]:
    """Order dashboard rows as a tree and roll usage up to departments.

    Each row needs ``slug``, ``parent`` (slug or None) and ``resources`` (a list of dicts with
    ``resource``, ``allocated``, ``pending``); it gets ``depth``, ``children`` (count of direct
    teams shown) and, on department rows, its resources' ``allocated``/``pending`` replaced by
    the subtree's sums (``own_allocated`` keeps the department's own). A row whose parent is not
    among ``rows`` (a department the viewer cannot see) is a root. Rows are copied, not changed.
    """
    by_slug = {
        row["slug"]: {**row, "resources": [dict(r) for r in row["resources"]]} for row in rows
    }
    kids: dict[str | None, list[str]] = defaultdict(list)
    for slug, row in by_slug.items():
        parent = row.get("parent")
        kids[parent if parent in by_slug else None].append(slug)
    for names in kids.values():
        names.sort()

    def total(slug: str, seen: frozenset[str]) -> dict[str, dict[str, Decimal]]:
        sums: dict[str, dict[str, Decimal]] = defaultdict(
            lambda: {"allocated": Decimal(0), "pending": Decimal(0)}
        )
        for res in by_slug[slug]["resources"]:
            sums[res["resource"]]["allocated"] += Decimal(str(res.get("allocated") or 0))
            sums[res["resource"]]["pending"] += Decimal(str(res.get("pending") or 0))
        for child in kids.get(slug, []):
            if child in seen:
                continue
            for resource, amounts in total(child, seen | {child}).items():
                sums[resource]["allocated"] += amounts["allocated"]
                sums[resource]["pending"] += amounts["pending"]
        return sums

    ordered: list[dict] = []

    def walk(slug: str, depth: int, seen: frozenset[str]) -> None:
        row = by_slug[slug]
        row["depth"] = depth
        row["children"] = len(kids.get(slug, []))
        if row["children"]:
            sums = total(slug, seen)
            existing = {r["resource"] for r in row["resources"]}
            for res in row["resources"]:
                res["own_allocated"] = res.get("allocated")
                res["allocated"] = sums[res["resource"]]["allocated"]
                res["pending"] = sums[res["resource"]]["pending"]
            for resource in sorted(set(sums) - existing):
                row["resources"].append(
                    {
                        "resource": resource,
                        "guarantee": None,
                        "limit": None,
                        "fair": None,
                        "own_allocated": Decimal(0),
                        **sums[resource],
                    }
                )
        ordered.append(row)
        for child in kids.get(slug, []):
            if child not in seen:
                walk(child, depth + 1, seen | {child})

    for root in kids.get(None, []):
        walk(root, 0, frozenset({root}))
    return ordered
