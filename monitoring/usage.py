"""Usage now, per team: the one source of the "allocated" and "pending" figures that the
dashboard, the team page, the API (``/api/v1/usage/current/``) and the team charts show.

The figures are those of the latest collection (``UsageSample`` rows of one ``taken_at``); a
department's are the sums over its subtree (its own namespaces plus every team below it, at any
depth, the rule of :mod:`monitoring.domain.subtree`), whoever looks: a viewer who may see a
department sees the department's figure, not the sum of the teams they happen to see.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Max, Sum

from monitoring.domain.subtree import descendants, subtree_totals
from monitoring.models import UsageSample
from quotas.models import Team
from quotas.quantities import GPU

__all__ = ["CurrentUsage", "current_usage", "gpus_by_product", "product_rows", "subtree_ids"]


@dataclass(frozen=True)
class CurrentUsage:
    """The latest collection: when, and per team id and resource the allocated and pending
    amounts (canonical units), departments summed over their subtree."""

    taken_at: datetime | None
    allocated: dict[int, dict[str, Decimal]] = field(default_factory=dict)
    pending: dict[int, dict[str, Decimal]] = field(default_factory=dict)

    def of(self, team_id: int) -> dict[str, dict[str, Decimal]]:
        """resource → {"allocated", "pending"} for one team (resources it uses or waits for)."""
        allocated = self.allocated.get(team_id, {})
        pending = self.pending.get(team_id, {})
        return {
            resource: {
                "allocated": allocated.get(resource, Decimal(0)),
                "pending": pending.get(resource, Decimal(0)),
            }
            for resource in sorted(allocated.keys() | pending.keys())
        }


def _parents() -> dict[int, int | None]:
    return dict(Team.objects.order_by().values_list("pk", "parent_id"))


def subtree_ids(team: Team) -> list[int]:
    """The team's id and every descendant's (the teams whose usage makes up its figures)."""
    return descendants(_parents(), team.pk)


def current_usage() -> CurrentUsage:
    """The latest collection's usage of every team (two queries plus one for the tree)."""
    taken_at = UsageSample.objects.aggregate(t=Max("taken_at"))["t"]
    if taken_at is None:
        return CurrentUsage(taken_at=None)
    own_allocated: dict[int, dict[str, Decimal]] = defaultdict(dict)
    own_pending: dict[int, dict[str, Decimal]] = defaultdict(dict)
    for row in (
        UsageSample.objects.filter(taken_at=taken_at, team__isnull=False)
        .values("team_id", "resource")
        .annotate(a=Sum("allocated"), p=Sum("pending"))
        .order_by()
    ):
        own_allocated[row["team_id"]][row["resource"]] = row["a"] or Decimal(0)
        own_pending[row["team_id"]][row["resource"]] = row["p"] or Decimal(0)
    parents = _parents()
    return CurrentUsage(
        taken_at=taken_at,
        allocated=subtree_totals(parents, own_allocated),
        pending=subtree_totals(parents, own_pending),
    )


def gpus_by_product(taken_at: datetime | None = None) -> dict[int, dict[str, Decimal]]:
    """GPU-equivalents allocated now per team id and GPU product (the latest collection's
    ``nvidia.com/gpu`` rows by flavor: device-plugin GPUs and DRA claims' GPUs together, a MIG
    slice as its fraction, issue 34); ``""`` is GPUs on nodes without a product label.
    Departments summed over their subtree, as :func:`current_usage`. One query (two without
    ``taken_at``) plus one for the tree."""
    if taken_at is None:
        taken_at = UsageSample.objects.aggregate(t=Max("taken_at"))["t"]
        if taken_at is None:
            return {}
    own: dict[int, dict[str, Decimal]] = defaultdict(dict)
    for row in (
        UsageSample.objects.filter(
            taken_at=taken_at, team__isnull=False, resource=GPU, allocated__gt=0
        )
        .values("team_id", "flavor")
        .annotate(a=Sum("allocated"))
        .order_by()
    ):
        own[row["team_id"]][row["flavor"]] = row["a"] or Decimal(0)
    totals = subtree_totals(_parents(), own)
    return {
        team: {str(f): a for f, a in sorted(amounts.items(), key=lambda item: str(item[0]))}
        for team, amounts in totals.items()
        if any(amounts.values())
    }


def product_rows(amounts: Mapping[str, Any]) -> list[tuple[str, Decimal]]:
    """``{product: GPU-equivalents}`` as display rows: products by name, GPUs on nodes without a
    product label (``""``) last."""
    return sorted(
        ((str(product), Decimal(str(amount))) for product, amount in amounts.items()),
        key=lambda row: (row[0] == "", row[0]),
    )
