"""The capacity rule (DESIGN.md): per resource, Σ guarantees ≤ schedulable capacity × (1 − reserve).

The sum is hierarchical: a department counts max(own guarantee, Σ of its children's), and only
root teams are added up, so a department's guarantee already covers its children. Approved
temporary grants whose window has not opened yet are counted as reserved. The check runs under a
cluster-wide lock (``capacity_lock``) inside the approving transaction, so two admins approving
at once can never over-commit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from quotas.capacity import latest_capacity
from quotas.choices import QuotaRequestStatus
from quotas.exceptions import (
    QuotaExceeded,
)
from quotas.lines import LineInput
from quotas.models import QuotaRequestLine, Team, TeamQuota
from quotas.quantities import (
    amount_words,
    format_quantity,
)

_LOCK_KEY = 0x0FA1_25A5  # advisory lock id for "guarantees of the whole cluster"


def capacity_lock() -> None:
    """Serialize capacity checks across transactions (call inside ``transaction.atomic``).

    PostgreSQL: a transaction-scoped advisory lock. SQLite: writes are already serialized
    (settings use BEGIN IMMEDIATE). Other backends: lock one fixed row (the first team), which
    every capacity check locks in turn.
    """
    vendor = connection.vendor
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
    elif vendor != "sqlite":
        list(Team.objects.select_for_update().order_by("pk").values_list("pk", flat=True)[:1])


def usable_capacity(capacity: Mapping[str, Decimal] | None = None) -> dict[str, Decimal]:
    """Schedulable capacity × (1 − reserve), per resource, from the latest capacity record."""
    amounts = latest_capacity() if capacity is None else capacity
    keep = Decimal(1) - settings.FAIRSHARE_CAPACITY_RESERVE
    result = {}
    for resource, amount in amounts.items():
        usable = amount * keep
        # Whole devices: a 10 % reserve of 1,000 GPUs leaves 900, of 7 leaves 6.
        if "/" in resource:
            usable = usable.to_integral_value(rounding="ROUND_FLOOR")
        result[resource] = usable
    return result


def committed_guarantees(
    overrides: Mapping[tuple[int, str], Decimal] | None = None,
    *,
    now: datetime | None = None,
    exclude_request: int | None = None,
) -> dict[str, Decimal]:
    """Σ guarantees per resource over the hierarchy, with ``overrides`` {(team_id, resource): g}.

    Counts active teams only, adds approved temporary grants not yet active (reserved), and
    folds departments as max(own, Σ children).
    """
    now = now or timezone.now()
    teams = dict(Team.objects.filter(active=True).values_list("id", "parent_id"))
    own: dict[tuple[int, str], Decimal] = {}
    for team_id, resource, guarantee in TeamQuota.objects.filter(team__active=True).values_list(
        "team_id", "resource", "guarantee"
    ):
        own[(team_id, resource)] = guarantee
    scheduled = QuotaRequestLine.objects.filter(
        request__status=QuotaRequestStatus.APPROVED,
        request__window_start__gt=now,
        request__team__active=True,
    ).exclude(request_id=exclude_request)
    for team_id, resource, approved in scheduled.values_list(
        "request__team_id", "resource", "approved_guarantee"
    ):
        current = own.get((team_id, resource), Decimal(0))
        if approved is not None and approved > current:
            own[(team_id, resource)] = approved
    for key, value in (overrides or {}).items():
        own[key] = value

    children: dict[int | None, list[int]] = defaultdict(list)
    for team_id, parent_id in teams.items():
        children[parent_id if parent_id in teams else None].append(team_id)
    resources = {resource for _, resource in own}

    def effective(team_id: int, resource: str, depth: int = 0) -> Decimal:
        mine = own.get((team_id, resource), Decimal(0))
        if depth > 8:
            return mine
        below = sum(
            (effective(child, resource, depth + 1) for child in children.get(team_id, ())),
            Decimal(0),
        )
        return max(mine, below)

    return {
        resource: sum((effective(root, resource) for root in children[None]), Decimal(0))
        for resource in sorted(resources)
    }


def check_capacity(
    overrides: Mapping[tuple[int, str], Decimal],
    *,
    now: datetime | None = None,
    exclude_request: int | None = None,
) -> None:
    """Raise QuotaExceeded if the guarantees with ``overrides`` exceed usable capacity.

    Only resources whose guarantee grows are checked: lowering or keeping a guarantee is always
    allowed, even on a cluster that shrank.
    """
    grown = {
        resource
        for (team_id, resource), value in overrides.items()
        if value
        > (
            TeamQuota.objects.filter(team_id=team_id, resource=resource)
            .values_list("guarantee", flat=True)
            .first()
            or Decimal(0)
        )
    }
    if not grown:
        return
    totals = committed_guarantees(overrides, now=now, exclude_request=exclude_request)
    usable = usable_capacity()
    reserve_pct = settings.FAIRSHARE_CAPACITY_RESERVE * 100
    for resource in sorted(grown):
        total = totals.get(resource, Decimal(0))
        available = usable.get(resource, Decimal(0))
        if total > available:
            raise QuotaExceeded(
                f"Guarantees for {resource} would total {format_quantity(total, resource)}, "
                f"over the {format_quantity(available, resource)} schedulable "
                f"(capacity less the {reserve_pct:g} % reserve).",
                resource=resource,
                requested=format_quantity(total, resource),
                available=format_quantity(available, resource),
            )


def check_request_fits_cluster(
    lines: Iterable[LineInput],
    current: Mapping[str, tuple[Decimal, Decimal | None]] | None = None,
    capacity: Mapping[str, Decimal] | None = None,
) -> None:
    """Refuse raises the cluster can never give: a guarantee over the usable capacity
    (capacity × (1 − reserve)) or a limit over the whole capacity. ``current`` {resource:
    (guarantee, limit)} is what the team has: lowering an amount is always allowed, even when
    the cluster shrank under it (None limit: no ceiling, so any limit lowers it). Resources the
    cluster does not report (no capacity collected yet, or a resource it lacks) are not checked
    here; approval checks guarantees against the capacity again. Errors are keyed
    ``lines[i].guarantee`` / ``lines[i].limit``, as ``parse_lines``'s."""
    capacity = latest_capacity() if capacity is None else capacity
    usable = usable_capacity(capacity)
    errors: dict[str, list[str]] = {}
    for index, line in enumerate(lines):
        total = capacity.get(line.resource)
        if total is None:
            continue
        had_guarantee, had_limit = (current or {}).get(line.resource, (Decimal(0), Decimal(0)))
        raises_limit = had_limit is not None and line.limit is not None and line.limit > had_limit
        if raises_limit and line.limit > total:
            errors[f"lines[{index}].limit"] = [
                f"The cluster has {amount_words(total, line.resource)}; a limit of "
                f"{amount_words(line.limit, line.resource)} could never be used."
            ]
        if line.guarantee > had_guarantee and line.guarantee > usable[line.resource]:
            errors[f"lines[{index}].guarantee"] = [
                f"At most {amount_words(usable[line.resource], line.resource)} of the "
                f"cluster's {amount_words(total, line.resource)} can be guaranteed (the rest "
                f"is held in reserve); a guarantee of "
                f"{amount_words(line.guarantee, line.resource)} could never be approved."
            ]
    if errors:
        raise ValidationError(errors)
