"""Quota requests and their decisions: submit, approve, reject, withdraw. Each function is one
transaction and writes an AuditEvent.

Lifecycle: pending → approved | rejected | withdrawn. A permanent approval applies at once
(status approved). A temporary one (with a window) is approved → active when its window opens →
expired when it closes (``quotas.grants``); if the window is already open at approval it goes
straight to active. Approval re-checks the capacity rule (``quotas.capacity_rule``) and the
hierarchy rules (``quotas.hierarchy``) under the cluster-wide lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from quotas import notify
from quotas.capacity_rule import capacity_lock, check_capacity, check_request_fits_cluster
from quotas.changes import (
    audit,
    notify_quota_changed,
    quantity_text,
    quota_state,
)
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
    SelfDecisionRefused,
)
from quotas.hierarchy import check_hierarchy
from quotas.lines import LineInput, parse_lines
from quotas.models import QuotaRequest, QuotaRequestLine, Team, TeamQuota
from quotas.quantities import (
    parse_quantity,
)
from quotas.querysets import is_site_admin

# --------------------------------------------------------------------------- services


def submit_request(
    *,
    team: Team,
    requester,
    lines: Iterable[LineInput | Mapping],
    justification: str,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    now: datetime | None = None,
) -> QuotaRequest:
    """Create a pending request. Only leads of the team (or its department) and admins may.

    Raises PermissionDenied, or ValidationError keyed by field (``lines[0].limit``,
    ``window_end``, ``justification``) with nothing saved.
    """
    now = now or timezone.now()
    if not Team.objects.led_by(requester).filter(pk=team.pk).exists():
        raise PermissionDenied("Only the team's leads and site admins may request quota.")
    if not team.active:
        raise ValidationError({"team": "This team is inactive."})
    parsed = parse_lines(lines)
    if window_end is not None and window_start is None:
        window_start = now
    if window_end is not None and window_end <= now:
        raise ValidationError({"window_end": "The window must end in the future."})
    current = {q.resource: q for q in team.quotas.all()}
    check_request_fits_cluster(parsed, {r: (q.guarantee, q.limit) for r, q in current.items()})
    if all(
        line.resource in current
        and current[line.resource].guarantee == line.guarantee
        and current[line.resource].limit == line.limit
        for line in parsed
    ):
        raise ValidationError({"lines": "The requested amounts equal the current quota."})

    with transaction.atomic():
        request = QuotaRequest(
            team=team,
            requester=requester,
            justification=(justification or "").strip(),
            window_start=window_start,
            window_end=window_end,
        )
        request.full_clean()
        request.save()
        for line in parsed:
            existing = current.get(line.resource)
            row = QuotaRequestLine(
                request=request,
                resource=line.resource,
                guarantee=line.guarantee,
                limit=line.limit,
                previous_guarantee=existing.guarantee if existing else Decimal(0),
                previous_limit=existing.limit if existing else None,
            )
            row.full_clean(exclude=["request"])
            row.save()
        audit(
            actor=requester,
            verb=AuditVerb.SUBMIT,
            obj=request,
            team=team,
            after=request_state(request),
            note=request.justification[:500],
        )
        notify.request_submitted(request)
    return request


def request_state(request: QuotaRequest) -> dict:
    return {
        "status": request.status,
        "window_start": request.window_start.isoformat() if request.window_start else None,
        "window_end": request.window_end.isoformat() if request.window_end else None,
        "lines": {
            line.resource: {
                "guarantee": quantity_text(line.guarantee, line.resource),
                "limit": quantity_text(line.limit, line.resource),
                "previous_guarantee": quantity_text(line.previous_guarantee, line.resource),
                "previous_limit": quantity_text(line.previous_limit, line.resource),
                "approved_guarantee": quantity_text(line.approved_guarantee, line.resource),
                "approved_limit": quantity_text(line.approved_limit, line.resource),
            }
            for line in request.lines.all()
        },
    }


def lock_request(request_id: int) -> QuotaRequest:
    try:
        return QuotaRequest.objects.select_for_update().select_related("team").get(pk=request_id)
    except QuotaRequest.DoesNotExist:
        raise InvalidTransition(f"Quota request {request_id} does not exist.") from None


def apply_lines(request: QuotaRequest, *, now: datetime) -> None:
    """Raise the team's quotas to the approved amounts and remember the deltas."""
    team = request.team
    overrides = {(team.pk, line.resource): line.approved_guarantee for line in request.lines.all()}
    check_capacity(overrides, now=now, exclude_request=request.pk)
    check_hierarchy(
        {
            (team.pk, line.resource): (line.approved_guarantee, line.approved_limit)
            for line in request.lines.all()
        },
        field="resource",
    )
    for line in request.lines.all():
        quota, _ = TeamQuota.objects.select_for_update().get_or_create(
            team=team, resource=line.resource, defaults={"guarantee": Decimal(0), "limit": None}
        )
        line.applied_guarantee_delta = line.approved_guarantee - quota.guarantee
        line.applied_limit_delta = (
            None if quota.limit is None else line.approved_limit - quota.limit
        )
        line.previous_guarantee, line.previous_limit = quota.guarantee, quota.limit
        quota.guarantee, quota.limit = line.approved_guarantee, line.approved_limit
        quota.full_clean()
        quota.save()
        line.save()


SOD_EXCEPTION_NOTE = (
    "Decided by its own requester, the only active site admin "
    "(separation-of-duties exception, FAIRSHARE_SEPARATION_OF_DUTIES=sole-admin)."
)


def active_site_admin_count() -> int:
    from django.contrib.auth import get_user_model
    from django.db.models import Q

    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name=settings.ADMINS_GROUP))
        .distinct()
        .count()
    )


def check_separation_of_duties(request: QuotaRequest, decider) -> bool:
    """May ``decider`` (a site admin) decide ``request``? Return True when they may only by
    the sole-admin exception (the caller audits it), False when no exception was needed.

    ``FAIRSHARE_SEPARATION_OF_DUTIES``: ``strict`` (nobody decides their own request),
    ``sole-admin`` (the default: unless they are the only active site admin) or ``off``.
    Raises SelfDecisionRefused otherwise.
    """
    mode = getattr(settings, "FAIRSHARE_SEPARATION_OF_DUTIES", "sole-admin")
    if mode == "off" or request.requester_id != decider.pk:
        return False
    if mode == "sole-admin" and active_site_admin_count() == 1:
        return True
    raise SelfDecisionRefused(
        f"You requested #{request.pk} yourself; another site admin must decide it "
        "(separation of duties)."
    )


def approve_request(
    request_id: int,
    *,
    approver,
    note: str = "",
    adjustments: Mapping[str, tuple[Decimal | str, Decimal | str]] | None = None,
    preview: dict | None = None,
    now: datetime | None = None,
) -> QuotaRequest:
    """Approve a pending request, optionally with adjusted amounts {resource: (g, l)}.

    Raises PermissionDenied (not an admin), InvalidTransition (not pending: approving twice
    approves once), QuotaExceeded (over capacity; nothing changes), ValidationError (bad
    adjustment). Notifies ``quota_changed`` after commit.
    """
    now = now or timezone.now()
    if not is_site_admin(approver):
        raise PermissionDenied("Only site admins may approve quota requests.")
    with transaction.atomic():
        capacity_lock()
        request = lock_request(request_id)
        self_decided = check_separation_of_duties(request, approver)
        if request.status != QuotaRequestStatus.PENDING:
            raise InvalidTransition(f"Request #{request.pk} is {request.status}, not pending.")
        if request.window_end is not None and request.window_end <= now:
            raise InvalidTransition(f"Request #{request.pk}'s window has already ended.")
        before = quota_state(request.team)
        lines = list(request.lines.all())
        adjustments = dict(adjustments or {})
        unknown = set(adjustments) - {line.resource for line in lines}
        if unknown:
            raise ValidationError(
                {"adjustments": f"Not in the request: {', '.join(sorted(unknown))}."}
            )
        for line in lines:
            guarantee, limit = line.guarantee, line.limit
            if line.resource in adjustments:
                g, lim = adjustments[line.resource]
                guarantee = parse_quantity(g, field=f"{line.resource}.guarantee")
                limit = parse_quantity(lim, field=f"{line.resource}.limit")
            line.approved_guarantee, line.approved_limit = guarantee, limit
            line.full_clean(exclude=["request"])
            line.save()
        request.decided_by = approver
        request.decided_at = now
        request.decision_note = note
        request.preview = preview or {}
        # A grant whose window has not opened changes nothing yet: it is applied (and the sync
        # that applies it recorded) when it activates.
        applied: list[int] = []
        if request.window_start is not None and request.window_start > now:
            request.status = QuotaRequestStatus.APPROVED
            overrides = {}
            current = {q.resource: q.guarantee for q in request.team.quotas.all()}
            for line in lines:
                overrides[(request.team_id, line.resource)] = max(
                    line.approved_guarantee, current.get(line.resource, Decimal(0))
                )
            check_capacity(overrides, now=now, exclude_request=request.pk)
            # As the grant will be when its window opens (checked again then).
            check_hierarchy(
                {
                    (request.team_id, line.resource): (
                        line.approved_guarantee,
                        line.approved_limit,
                    )
                    for line in lines
                },
                field="resource",
            )
        else:
            apply_lines(request, now=now)
            applied = [request.pk]
            request.status = (
                QuotaRequestStatus.ACTIVE if request.is_temporary else QuotaRequestStatus.APPROVED
            )
            request.activated_at = now
        request.save()
        audit(
            actor=approver,
            verb=AuditVerb.APPROVE,
            obj=request,
            team=request.team,
            before=before,
            after=quota_state(request.team) | {"request": request_state(request)},
            note=f"{SOD_EXCEPTION_NOTE} {note}".strip() if self_decided else note,
        )
        notify_quota_changed([request.team_id], "approve", request_ids=applied)
        notify.request_decided(request, actor=approver)
    return request


def reject_request(request_id: int, *, approver, note: str, now: datetime | None = None):
    """Reject a pending request; a reason is required.

    Raises PermissionDenied, InvalidTransition, ValidationError (no reason).
    """
    now = now or timezone.now()
    if not is_site_admin(approver):
        raise PermissionDenied("Only site admins may reject quota requests.")
    if not (note or "").strip():
        raise ValidationError({"note": "Give the team a reason for the rejection."})
    with transaction.atomic():
        request = lock_request(request_id)
        self_decided = check_separation_of_duties(request, approver)
        if request.status != QuotaRequestStatus.PENDING:
            raise InvalidTransition(f"Request #{request.pk} is {request.status}, not pending.")
        request.status = QuotaRequestStatus.REJECTED
        request.decided_by, request.decided_at, request.decision_note = approver, now, note.strip()
        request.save()
        if self_decided:
            note = f"{SOD_EXCEPTION_NOTE} {note}"
        audit(actor=approver, verb=AuditVerb.REJECT, obj=request, team=request.team, note=note)
        notify.request_decided(request, actor=approver)
    return request


def reject_requests(
    request_ids: Iterable[int], *, approver, note: str, now: datetime | None = None
) -> list[QuotaRequest]:
    """Reject several pending requests with one reason, in one transaction: all or none.

    Each is rejected as by ``reject_request`` (audited, its team told after commit). Raises
    PermissionDenied, ValidationError (no reason: ``note``; no request: ``requests``),
    InvalidTransition naming the first request that is not pending (nothing is rejected).
    """
    ids = sorted(set(request_ids))
    if not is_site_admin(approver):
        raise PermissionDenied("Only site admins may reject quota requests.")
    if not ids:
        raise ValidationError({"requests": "Choose at least one request to reject."})
    if not (note or "").strip():
        raise ValidationError({"note": "Give the teams a reason for the rejection."})
    now = now or timezone.now()
    with transaction.atomic():
        return [reject_request(pk, approver=approver, note=note, now=now) for pk in ids]


def withdraw_request(request_id: int, *, actor, now: datetime | None = None) -> QuotaRequest:
    """Withdraw a pending request: its requester, a lead of the team, or an admin may."""
    with transaction.atomic():
        request = lock_request(request_id)
        allowed = (
            request.requester_id == actor.pk
            or Team.objects.led_by(actor).filter(pk=request.team_id).exists()
        )
        if not allowed:
            raise PermissionDenied("Only the requester, the team's leads or admins may withdraw.")
        if request.status != QuotaRequestStatus.PENDING:
            raise InvalidTransition(f"Request #{request.pk} is {request.status}, not pending.")
        request.status = QuotaRequestStatus.WITHDRAWN
        request.decided_at = now or timezone.now()
        request.save()
        audit(actor=actor, verb=AuditVerb.WITHDRAW, obj=request, team=request.team)
        notify.request_decided(request, actor=actor)
    return request
