"""What the people-facing tables show (issue 14): only the resources that matter, and teams as
a tree.

* ``display_resources`` / ``shown``: ``FAIRSHARE_DISPLAY_RESOURCES`` (default GPUs, CPU,
  memory), GPUs first; a listed resource with a zero amount is left out of capacity and flavor
  lists (no "0 hugepages", no ``pods``).
* ``team_tree``: dashboard rows in tree order (department, then its teams, depth-first) with
  ``depth``; the figures on the rows (department = subtree) come from the services.

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
    """Order dashboard rows as a tree: department, then its teams, depth-first.

    Each row needs ``slug`` and ``parent`` (slug or None); it gets ``depth`` and ``children``
    (count of direct teams shown). A row whose parent is not among ``rows`` (a department the
    viewer cannot see) is a root. The figures are not touched: a department's usage is already
    its subtree's (``monitoring.usage.current_usage``), its fair allocation too
    (``scheduling.services.team_shares``). Rows are copied, not changed.
    """
    by_slug = {row["slug"]: {**row} for row in rows}
    kids: dict[str | None, list[str]] = defaultdict(list)
    for slug, row in by_slug.items():
        parent = row.get("parent")
        kids[parent if parent in by_slug else None].append(slug)
    for names in kids.values():
        names.sort()

    ordered: list[dict] = []

    def walk(slug: str, depth: int, seen: frozenset[str]) -> None:
        row = by_slug[slug]
        row["depth"] = depth
        row["children"] = len(kids.get(slug, []))
        ordered.append(row)
        for child in kids.get(slug, []):
            if child not in seen:
                walk(child, depth + 1, seen | {child})

    for root in kids.get(None, []):
        walk(root, 0, frozenset({root}))
    return ordered
