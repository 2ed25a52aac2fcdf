"""Direct quota changes by site admins (the quota editor, the API, the Django admin, commands):
set one team's quotas in one transaction, under the capacity and hierarchy rules, audited.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from quotas import notify
from quotas.capacity_rule import capacity_lock, check_capacity
from quotas.changes import (
    audit,
    notify_quota_changed,
    quota_state,
)
from quotas.choices import AuditVerb
from quotas.exceptions import (
    PermissionDenied,
)
from quotas.hierarchy import check_hierarchy
from quotas.lines import LineInput
from quotas.models import Team, TeamQuota
from quotas.quantities import (
    parse_quantity,
    validate_resource_name,
)
from quotas.querysets import is_site_admin


def set_team_quota(
    team: Team,
    resource: str,
    *,
    guarantee: Decimal | str,
    limit: Decimal | str | None,
    actor,
    note: str = "",
    announce: bool = True,
) -> TeamQuota:
    """Set a team's quota directly (admins): capacity re-checked under the lock, audited; the
    team's leads are told after commit (``announce=False``: the caller tells them, as a
    rebalance does)."""
    if not is_site_admin(actor):
        raise PermissionDenied("Only site admins may set quotas directly.")
    g = parse_quantity(guarantee, field="guarantee")
    lim = None if limit in (None, "") else parse_quantity(limit, field="limit")
    return _set_quotas(team, {resource: (g, lim)}, actor=actor, note=note, announce=announce)[0]


def set_team_quotas(
    team: Team, lines: Iterable[LineInput], *, actor, note: str = ""
) -> list[TeamQuota]:
    """Set several of a team's quotas at once (admins), under the rules of an approval.

    The same checks as approving a request with these amounts: resource names, guarantee ≤
    limit, the capacity rule (only growing guarantees are checked) and the hierarchy rules
    (``check_hierarchy``), all in one transaction under the capacity lock, with one audit entry.
    Errors are keyed ``lines[i].<field>`` (bad amounts), ``<resource>.guarantee``/``.limit``
    (hierarchy) or ``lines``; QuotaExceeded names the resource over capacity.
    """
    if not is_site_admin(actor):
        raise PermissionDenied("Only site admins may set quotas directly.")
    amounts: dict[str, tuple[Decimal, Decimal | None]] = {}
    errors: dict[str, list[str]] = defaultdict(list)
    for index, line in enumerate(lines):
        key = f"lines[{index}]"
        try:
            validate_resource_name(line.resource)
        except ValidationError as e:
            errors[f"{key}.resource"].extend(e.messages)
            continue
        if line.resource in amounts:
            errors[f"{key}.resource"].append(f"{line.resource} is listed twice.")
            continue
        try:
            g = parse_quantity(line.guarantee, field=f"{key}.guarantee")
            lim = (
                None
                if line.limit in (None, "")
                else parse_quantity(line.limit, field=f"{key}.limit")
            )
        except ValidationError as e:
            for field, messages in e.message_dict.items():
                errors[field].extend(messages)
            continue
        if lim is not None and g > lim:
            errors[f"{key}.guarantee"].append("The guarantee cannot be over the limit.")
            continue
        amounts[line.resource] = (g, lim)
    if errors:
        raise ValidationError(dict(errors))
    if not amounts:
        raise ValidationError({"lines": "Change at least one amount."})
    note = (note or "").strip()[:500]
    return _set_quotas(team, amounts, actor=actor, note=note, hierarchy_field="resource")


def _set_quotas(
    team: Team,
    amounts: Mapping[str, tuple[Decimal, Decimal | None]],
    *,
    actor,
    note: str,
    hierarchy_field: str | None = None,
    announce: bool = True,
) -> list[TeamQuota]:
    with transaction.atomic():
        capacity_lock()
        before = quota_state(team)
        check_capacity({(team.pk, resource): g for resource, (g, _lim) in amounts.items()})
        check_hierarchy(
            {(team.pk, resource): pair for resource, pair in amounts.items()},
            field=hierarchy_field,
        )
        quotas = []
        changes: dict[str, tuple[tuple[Decimal, Decimal | None] | None, tuple]] = {}
        for resource, (g, lim) in sorted(amounts.items()):
            quota = (
                TeamQuota.objects.select_for_update().filter(team=team, resource=resource).first()
            )
            before_amounts = None if quota is None else (quota.guarantee, quota.limit)
            changes[resource] = (before_amounts, (g, lim))
            quota = quota or TeamQuota(team=team, resource=resource)
            quota.guarantee, quota.limit = g, lim
            quota.full_clean()
            quota.save()
            quotas.append(quota)
        audit(
            actor=actor,
            verb=AuditVerb.UPDATE,
            obj=quotas[0] if len(quotas) == 1 else team,
            team=team,
            before=before,
            after=quota_state(team),
            note=note,
        )
        notify_quota_changed([team.pk], "set-quota")
        if announce:
            notify.quota_set(team, changes, actor=actor, note=note, at=timezone.now())
    return quotas
