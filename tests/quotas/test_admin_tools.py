"""Admin and lead tools in the services: setting a team's quota directly (with an approval's
rules) and ending a temporary grant early."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone

from quotas import decisions, direct, grants
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import InvalidTransition, PermissionDenied, QuotaExceeded
from quotas.lines import LineInput
from quotas.models import AuditEvent, TeamQuota
from tests.base import GPU

pytestmark = pytest.mark.django_db


def gpu_quota(team) -> tuple[Decimal, Decimal | None]:
    quota = TeamQuota.objects.get(team=team, resource=GPU)
    return quota.guarantee, quota.limit


def temporary_grant(cast, *, start=None, days=3, guarantee="30", limit="50"):
    now = timezone.now()
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, guarantee, limit)],
        justification="A week of sweeps.",
        window_start=start,
        window_end=now + timedelta(days=days),
    )
    return decisions.approve_request(request.pk, approver=cast.root)


# --------------------------------------------------------------------------- direct quota


def test_an_admin_sets_several_quotas_at_once_with_one_audit_entry(
    cast, django_capture_on_commit_callbacks
):
    from quotas.signals import quota_changed

    sent = []

    def receiver(sender, team_ids=None, reason="", **kwargs):
        sent.append((team_ids, reason))

    quota_changed.connect(receiver, dispatch_uid="test-direct-quota")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            direct.set_team_quotas(
                cast.team_a,
                [LineInput(GPU, "25", "45"), LineInput("cpu", "100", "200")],
                actor=cast.root,
                note="Planning review.",
            )
    finally:
        quota_changed.disconnect(dispatch_uid="test-direct-quota")

    assert gpu_quota(cast.team_a) == (Decimal(25), Decimal(45))
    cpu = TeamQuota.objects.get(team=cast.team_a, resource="cpu")
    assert (cpu.guarantee, cpu.limit) == (Decimal(100), Decimal(200))
    event = AuditEvent.objects.get(team=cast.team_a, verb=AuditVerb.UPDATE)
    assert event.note == "Planning review."
    assert event.before[GPU] == {"guarantee": "20", "limit": "40"}
    assert event.after[GPU] == {"guarantee": "25", "limit": "45"}
    assert event.after["cpu"] == {"guarantee": "100", "limit": "200"}
    assert sent == [([cast.team_a.pk], "set-quota")]


@pytest.mark.parametrize("who", ["alice", "dora", "charlie", "bob"])
def test_only_site_admins_set_quotas_directly(cast, who):
    with pytest.raises(PermissionDenied):
        direct.set_team_quotas(cast.team_a, [LineInput(GPU, "25", "45")], actor=getattr(cast, who))
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_a_direct_edit_over_capacity_is_refused_and_changes_nothing(cast):
    # 90 GPUs may be guaranteed; team-b holds 30.
    with pytest.raises(QuotaExceeded) as caught:
        direct.set_team_quotas(cast.team_a, [LineInput(GPU, "61", "80")], actor=cast.root)
    assert caught.value.resource == GPU
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    assert not AuditEvent.objects.filter(verb=AuditVerb.UPDATE).exists()


def test_a_direct_edit_breaking_the_department_limit_is_refused_by_name(cast):
    TeamQuota.objects.create(team=cast.dept, resource=GPU, guarantee=Decimal(0), limit=Decimal(70))
    with pytest.raises(ValidationError) as caught:
        # team-a 45 + team-b 30 = 75 guaranteed in dept-x, over its 70 limit.
        direct.set_team_quotas(cast.team_a, [LineInput(GPU, "45", "60")], actor=cast.root)
    text = " ".join(m for ms in caught.value.message_dict.values() for m in ms)
    assert "dept-x" in text and "70" in text
    assert set(caught.value.message_dict) <= {f"{GPU}.guarantee", f"{GPU}.limit"}
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_bad_amounts_name_the_line_and_field(cast):
    with pytest.raises(ValidationError) as caught:
        direct.set_team_quotas(
            cast.team_a,
            [
                LineInput(GPU, "50", "40"),
                LineInput("cpu", "lots", "2"),
                LineInput("bad name", "1", "1"),
            ],
            actor=cast.root,
        )
    errors = caught.value.message_dict
    assert errors["lines[0].guarantee"] == ["The guarantee cannot be over the limit."]
    assert "lines[1].guarantee" in errors
    assert "lines[2].resource" in errors
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


# --------------------------------------------------------------------------- ending early


def test_ending_an_active_grant_early_reverts_it_audits_and_tells_the_team(
    cast, django_capture_on_commit_callbacks
):
    grant = temporary_grant(cast)
    assert grant.status == QuotaRequestStatus.ACTIVE
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        ended = grants.end_temporary_grant(grant.pk, actor=cast.alice, note="Sweep finished.")

    assert ended.status == QuotaRequestStatus.EXPIRED
    assert ended.expired_at is not None and ended.expired_at < ended.window_end
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    event = AuditEvent.objects.get(verb=AuditVerb.EXPIRE, object_id=str(grant.pk))
    assert event.actor == cast.alice
    assert event.note == "Ended early by alice. Sweep finished."
    assert event.before[GPU] == {"guarantee": "30", "limit": "50"}
    assert event.after[GPU] == {"guarantee": "20", "limit": "40"}
    [message] = mail.outbox
    assert "ended early" in message.subject
    assert "alice@example.org" in message.to
    # The beat job later finds nothing left to revert.
    later = grants.expire_temporary_quota(now=grant.window_end + timedelta(seconds=1))
    assert later.expired == []
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_a_scheduled_grant_ended_early_is_never_applied(cast):
    now = timezone.now()
    grant = temporary_grant(cast, start=now + timedelta(days=1), days=2)
    assert grant.status == QuotaRequestStatus.APPROVED

    grants.end_temporary_grant(grant.pk, actor=cast.root)

    result = grants.expire_temporary_quota(now=now + timedelta(days=1, seconds=1))
    assert result.activated == []
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


@pytest.mark.parametrize("who", ["charlie", "bob", "vic"])
def test_no_one_but_admins_and_the_teams_leads_ends_a_grant(cast, who):
    grant = temporary_grant(cast)
    with pytest.raises(PermissionDenied):
        grants.end_temporary_grant(grant.pk, actor=getattr(cast, who))
    grant.refresh_from_db()
    assert grant.status == QuotaRequestStatus.ACTIVE
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))


def test_the_department_lead_may_end_a_grant_of_its_team(cast):
    grant = temporary_grant(cast)
    assert grants.end_temporary_grant(grant.pk, actor=cast.dora).status == "expired"


def test_only_running_or_scheduled_temporary_grants_can_be_ended(cast):
    pending = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "25", "45")],
        justification="x",
    )
    with pytest.raises(InvalidTransition):
        grants.end_temporary_grant(pending.pk, actor=cast.root)
    permanent = decisions.approve_request(pending.pk, approver=cast.root)
    with pytest.raises(InvalidTransition):
        grants.end_temporary_grant(permanent.pk, actor=cast.root)
    assert gpu_quota(cast.team_a) == (Decimal(25), Decimal(45))
