"""Temporary grants over time: windows opened and closed (``expire_temporary_quota``, the beat's
job), reminders before a grant ends, and ending one early. A grant is reverted by its recorded
deltas, so changes made to the team's quota meanwhile compose with it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from quotas import notify
from quotas.capacity_rule import capacity_lock
from quotas.changes import (
    audit,
    notify_quota_changed,
    quota_state,
)
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.decisions import apply_lines, lock_request
from quotas.exceptions import (
    InvalidTransition,
    PermissionDenied,
    QuotaExceeded,
)
from quotas.hierarchy import hierarchy_floor
from quotas.models import QuotaRequest, Team, TeamQuota
from quotas.quantities import (
    format_quantity,
)
from quotas.querysets import is_site_admin

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpiryResult:
    activated: list[int]
    expired: list[int]
    failed: dict[int, str]


def expire_temporary_quota(*, now: datetime | None = None) -> ExpiryResult:
    """Open and close the windows of temporary grants.

    1. Approved requests whose window has opened are applied (capacity re-checked) → active.
    2. Active requests whose window has closed are reverted by their recorded deltas → expired.
       A revert composes with changes made meanwhile: it subtracts what the grant added,
       never below zero, and keeps guarantee ≤ limit.
    Each request is its own transaction, so one failure doesn't block the others; a failure is
    logged and retried on the next run. Idempotent.
    """
    now = now or timezone.now()
    activated, expired, failed = [], [], {}
    due = QuotaRequest.objects.filter(
        status=QuotaRequestStatus.APPROVED, window_start__lte=now, window_end__gt=now
    ).values_list("pk", flat=True)
    for pk in list(due):
        try:
            with transaction.atomic():
                capacity_lock()
                request = lock_request(pk)
                if request.status != QuotaRequestStatus.APPROVED:
                    continue
                before = quota_state(request.team)
                apply_lines(request, now=now)
                request.status, request.activated_at = QuotaRequestStatus.ACTIVE, now
                request.save()
                audit(
                    actor=None,
                    verb=AuditVerb.ACTIVATE,
                    obj=request,
                    team=request.team,
                    before=before,
                    after=quota_state(request.team),
                )
                notify_quota_changed([request.team_id], "activate", request_ids=[request.pk])
            activated.append(pk)
        except QuotaExceeded as e:
            logger.warning("Temporary grant #%s cannot start yet: %s", pk, e)
            failed[pk] = str(e)
        except ValidationError as e:
            # A hierarchy rule (the department's limit changed since the approval).
            message = " ".join(m for messages in e.message_dict.values() for m in messages)
            logger.warning("Temporary grant #%s cannot start yet: %s", pk, message)
            failed[pk] = message
    ended = QuotaRequest.objects.filter(
        status__in=[QuotaRequestStatus.ACTIVE, QuotaRequestStatus.APPROVED],
        window_end__lte=now,
    ).values_list("pk", flat=True)
    for pk in list(ended):
        with transaction.atomic():
            request = lock_request(pk)
            if request.window_end is None or request.window_end > now:
                continue
            before = quota_state(request.team)
            if request.status == QuotaRequestStatus.ACTIVE:
                _revert_lines(request)
            elif request.status != QuotaRequestStatus.APPROVED:
                continue
            request.status, request.expired_at = QuotaRequestStatus.EXPIRED, now
            request.save()
            audit(
                actor=None,
                verb=AuditVerb.EXPIRE,
                obj=request,
                team=request.team,
                before=before,
                after=quota_state(request.team),
            )
            notify_quota_changed([request.team_id], "expire")
            notify.request_expired(request)
        expired.append(pk)
    return ExpiryResult(activated, expired, failed)


def remind_ending_grants(*, now: datetime | None = None, days: int | None = None) -> list[int]:
    """Tell the teams whose active temporary grant ends within ``days``
    (``FAIRSHARE_GRANT_REMINDER_DAYS``; 0 turns reminders off) that it will end.

    Idempotent, also across concurrent runs: a grant's ``reminder_sent_at`` is claimed by one
    conditional UPDATE before its notification is queued (after commit), so each grant gets
    one reminder. Returns the ids reminded by this run.
    """
    now = now or timezone.now()
    days = settings.FAIRSHARE_GRANT_REMINDER_DAYS if days is None else days
    if days <= 0:
        return []
    due = QuotaRequest.objects.filter(
        status=QuotaRequestStatus.ACTIVE,
        reminder_sent_at__isnull=True,
        window_end__gt=now,
        window_end__lte=now + timedelta(days=days),
    ).values_list("pk", flat=True)
    reminded = []
    for pk in list(due):
        with transaction.atomic():
            claimed = QuotaRequest.objects.filter(
                pk=pk, reminder_sent_at__isnull=True, status=QuotaRequestStatus.ACTIVE
            ).update(reminder_sent_at=now)
            if not claimed:
                continue
            request = QuotaRequest.objects.select_related("team", "requester").get(pk=pk)
            notify.grant_ending_soon(request)
        reminded.append(pk)
    return reminded


def _revert_lines(request: QuotaRequest) -> None:
    for line in request.lines.all():
        quota = (
            TeamQuota.objects.select_for_update()
            .filter(team=request.team, resource=line.resource)
            .first()
        )
        if quota is None:
            continue
        if line.applied_guarantee_delta is not None:
            quota.guarantee = max(Decimal(0), quota.guarantee - line.applied_guarantee_delta)
        if line.applied_limit_delta is not None and quota.limit is not None:
            quota.limit = max(Decimal(0), quota.limit - line.applied_limit_delta)
        elif line.applied_limit_delta is None and quota.limit == line.approved_limit:
            quota.limit = line.previous_limit  # the grant set a ceiling where there was none
        if quota.limit is not None:
            # A department's limit never drops below what its teams hold (hierarchy rules).
            floor = hierarchy_floor(request.team, line.resource)
            if quota.limit < floor:
                logger.warning(
                    "Temporary grant #%s: %s limit of %s kept at %s for its teams",
                    request.pk,
                    line.resource,
                    request.team.slug,
                    format_quantity(floor, line.resource),
                )
                quota.limit = floor
        if quota.limit is not None and quota.guarantee > quota.limit:
            quota.guarantee = quota.limit
        quota.full_clean()
        quota.save()


def end_temporary_grant(
    request_id: int, *, actor, note: str = "", now: datetime | None = None
) -> QuotaRequest:
    """End a temporary grant before its window closes: admins, or a lead of its team.

    An active grant is reverted by its recorded deltas exactly as on expiry (composing with
    changes made meanwhile); an approved one whose window has not opened is simply not applied.
    Status becomes expired, with ``expired_at`` now; audited, the team told after commit.
    Raises PermissionDenied, InvalidTransition (not a running or scheduled temporary grant).
    """
    now = now or timezone.now()
    with transaction.atomic():
        request = lock_request(request_id)
        if not (
            is_site_admin(actor) or Team.objects.led_by(actor).filter(pk=request.team_id).exists()
        ):
            raise PermissionDenied("Only site admins and the team's leads may end its grants.")
        temporary_states = (QuotaRequestStatus.ACTIVE, QuotaRequestStatus.APPROVED)
        if not request.is_temporary or request.status not in temporary_states:
            raise InvalidTransition(
                f"Request #{request.pk} is not a running or scheduled temporary grant "
                f"(it is {request.get_status_display().lower()})."
            )
        before = quota_state(request.team)
        if request.status == QuotaRequestStatus.ACTIVE:
            _revert_lines(request)
        request.status, request.expired_at = QuotaRequestStatus.EXPIRED, now
        request.save()
        who = getattr(actor, "username", "") or "system"
        audit(
            actor=actor,
            verb=AuditVerb.EXPIRE,
            obj=request,
            team=request.team,
            before=before,
            after=quota_state(request.team),
            note=(f"Ended early by {who}." + (f" {note.strip()}" if note.strip() else ""))[:500],
        )
        notify_quota_changed([request.team_id], "end-early")
        notify.request_ended_early(request, actor=actor)
    return request
