from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from quotas import capacity_rule, changes, decisions, direct, grants
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import InvalidTransition, PermissionDenied, QuotaExceeded
from quotas.lines import LineInput
from quotas.models import AuditEvent, QuotaRequest, Team, TeamQuota

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


def gpu_quota(team: Team) -> tuple[Decimal, Decimal | None]:
    quota = TeamQuota.objects.get(team=team, resource=GPU)
    return quota.guarantee, quota.limit


def submit(cast, guarantee="30", limit="50", **kwargs):
    kwargs.setdefault("team", cast.team_a)
    kwargs.setdefault("requester", cast.alice)
    kwargs.setdefault("justification", "Bigger model")
    return decisions.submit_request(lines=[LineInput(GPU, guarantee, limit)], **kwargs)


# ----------------------------------------------------------------------------- submit


def test_a_lead_submits_a_pending_request_and_it_is_audited(cast):
    request = submit(cast)
    assert request.status == QuotaRequestStatus.PENDING
    line = request.lines.get()
    assert (line.resource, line.guarantee, line.limit) == (GPU, Decimal(30), Decimal(50))
    assert (line.previous_guarantee, line.previous_limit) == (Decimal(20), Decimal(40))
    event = AuditEvent.objects.get(verb=AuditVerb.SUBMIT)
    assert event.actor == cast.alice
    assert event.team == cast.team_a
    assert event.after["lines"][GPU] == {
        "guarantee": "30",
        "limit": "50",
        "previous_guarantee": "20",
        "previous_limit": "40",
        "approved_guarantee": None,
        "approved_limit": None,
    }
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))  # nothing applied yet


def test_a_department_lead_may_request_for_a_child_team(cast):
    request = submit(cast, requester=cast.dora)
    assert request.team == cast.team_a


@pytest.mark.parametrize("who", ["bob", "vic", "charlie", "nobody"])
def test_only_leads_and_admins_may_submit(cast, who):
    with pytest.raises(PermissionDenied):
        submit(cast, requester=getattr(cast, who))
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (LineInput(GPU, "50", "40"), "lines[0].guarantee"),
        (LineInput(GPU, "lots", "40"), "lines[0].guarantee"),
        (LineInput(GPU, "1", "-4"), "lines[0].limit"),
        (LineInput(GPU, "1", None), "lines[0].limit"),
        (LineInput(GPU, "1.5", "4"), "lines[0].guarantee"),
        (LineInput("gpus", "1", "4"), "lines[0].resource"),
        (LineInput(GPU, "1e400", "1e401"), "lines[0].guarantee"),
    ],
)
def test_bad_lines_are_refused_with_field_keyed_errors_and_nothing_saved(cast, line, field):
    with pytest.raises(ValidationError) as info:
        decisions.submit_request(
            team=cast.team_a, requester=cast.alice, lines=[line], justification="x"
        )
    assert field in info.value.message_dict
    assert not QuotaRequest.objects.exists()
    assert not AuditEvent.objects.exists()


def test_a_request_needs_a_justification(cast):
    with pytest.raises(ValidationError) as info:
        submit(cast, justification="  ")
    assert "justification" in info.value.message_dict
    assert not QuotaRequest.objects.exists()


def test_a_request_that_changes_nothing_is_refused(cast):
    with pytest.raises(ValidationError) as info:
        submit(cast, guarantee="20", limit="40")
    assert "equal the current quota" in info.value.message_dict["lines"][0]


def test_a_window_must_end_in_the_future(cast):
    with pytest.raises(ValidationError) as info:
        submit(cast, window_end=timezone.now() - timedelta(minutes=1))
    assert "window_end" in info.value.message_dict


# ----------------------------------------------------------------------------- approve


def test_approval_raises_the_quota_and_records_before_and_after(cast):
    request = submit(cast)
    decisions.approve_request(request.pk, approver=cast.root, note="ok")
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.APPROVED
    assert request.decided_by == cast.root
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))
    event = AuditEvent.objects.get(verb=AuditVerb.APPROVE)
    assert event.before[GPU] == {"guarantee": "20", "limit": "40"}
    assert event.after[GPU] == {"guarantee": "30", "limit": "50"}


def test_approval_can_adjust_the_amounts(cast):
    request = submit(cast)
    decisions.approve_request(request.pk, approver=cast.root, adjustments={GPU: ("25", "45")})
    assert gpu_quota(cast.team_a) == (Decimal(25), Decimal(45))
    line = request.lines.get()
    assert (line.approved_guarantee, line.approved_limit) == (Decimal(25), Decimal(45))


def test_an_adjustment_for_a_resource_not_requested_is_refused(cast):
    request = submit(cast)
    with pytest.raises(ValidationError) as info:
        decisions.approve_request(request.pk, approver=cast.root, adjustments={"cpu": ("1", "2")})
    assert "adjustments" in info.value.message_dict
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


@pytest.mark.parametrize("who", ["alice", "dora", "charlie"])
def test_only_site_admins_approve(cast, who):
    request = submit(cast)
    with pytest.raises(PermissionDenied):
        decisions.approve_request(request.pk, approver=getattr(cast, who))
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.PENDING


def test_approval_over_capacity_is_refused_naming_the_resource_and_changes_nothing(cast):
    # 100 GPUs less the 10 % reserve = 90; team-b holds 30, so team-a may reach 60, not 61.
    request = submit(cast, guarantee="61", limit="70")
    with pytest.raises(QuotaExceeded) as info:
        decisions.approve_request(request.pk, approver=cast.root)
    assert info.value.resource == GPU
    assert info.value.available == "90"
    assert "91" in str(info.value)
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.PENDING
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    assert not AuditEvent.objects.filter(verb=AuditVerb.APPROVE).exists()


def test_approval_exactly_at_capacity_is_allowed(cast):
    request = submit(cast, guarantee="60", limit="70")
    decisions.approve_request(request.pk, approver=cast.root)
    assert gpu_quota(cast.team_a) == (Decimal(60), Decimal(70))


def test_a_department_guarantee_covers_its_children(cast):
    # dept-x guarantees 60 itself: max(60, 20 + 30) = 60, so the children can grow to 60 total
    # without counting twice; beyond that the department's total grows.
    TeamQuota.objects.create(team=cast.dept, resource=GPU, guarantee=60, limit=90)
    assert capacity_rule.committed_guarantees()[GPU] == Decimal(60)
    request = submit(cast, guarantee="30", limit="50")
    decisions.approve_request(request.pk, approver=cast.root)
    assert capacity_rule.committed_guarantees()[GPU] == Decimal(60)


def test_a_decrease_is_allowed_even_over_capacity(cast):
    cast.capacity.resources = {GPU: "10"}
    cast.capacity.save()
    request = submit(cast, guarantee="10", limit="20")
    decisions.approve_request(request.pk, approver=cast.root)
    assert gpu_quota(cast.team_a) == (Decimal(10), Decimal(20))


def test_approving_twice_approves_once(cast):
    request = submit(cast)
    decisions.approve_request(request.pk, approver=cast.root)
    with pytest.raises(InvalidTransition):
        decisions.approve_request(request.pk, approver=cast.root)
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))
    assert AuditEvent.objects.filter(verb=AuditVerb.APPROVE).count() == 1


def test_approval_notifies_listeners_after_commit(cast, django_capture_on_commit_callbacks):
    from quotas.signals import quota_changed

    seen = []

    def listener(sender, team_ids, reason, **kwargs):
        seen.append((team_ids, reason))

    quota_changed.connect(listener)
    try:
        request = submit(cast)
        with django_capture_on_commit_callbacks(execute=True):
            decisions.approve_request(request.pk, approver=cast.root)
    finally:
        quota_changed.disconnect(listener)
    assert seen == [([cast.team_a.pk], "approve")]


# ----------------------------------------------------------------------------- reject/withdraw


def test_rejection_needs_a_reason_and_keeps_the_quota(cast):
    request = submit(cast)
    with pytest.raises(ValidationError) as info:
        decisions.reject_request(request.pk, approver=cast.root, note="")
    assert "note" in info.value.message_dict
    decisions.reject_request(request.pk, approver=cast.root, note="Not now")
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.REJECTED
    assert request.decision_note == "Not now"
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    with pytest.raises(InvalidTransition):
        decisions.approve_request(request.pk, approver=cast.root)


def test_requester_withdraws_a_pending_request(cast):
    request = submit(cast)
    decisions.withdraw_request(request.pk, actor=cast.alice)
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.WITHDRAWN
    assert AuditEvent.objects.filter(verb=AuditVerb.WITHDRAW, actor=cast.alice).count() == 1
    with pytest.raises(InvalidTransition):
        decisions.withdraw_request(request.pk, actor=cast.alice)


@pytest.mark.parametrize("who", ["bob", "charlie"])
def test_others_cannot_withdraw(cast, who):
    request = submit(cast)
    with pytest.raises(PermissionDenied):
        decisions.withdraw_request(request.pk, actor=getattr(cast, who))


def test_withdrawing_an_approved_request_is_an_invalid_transition(cast):
    request = submit(cast)
    decisions.approve_request(request.pk, approver=cast.root)
    with pytest.raises(InvalidTransition):
        decisions.withdraw_request(request.pk, actor=cast.alice)


# ----------------------------------------------------------------------------- temporary grants


def test_a_temporary_grant_is_active_at_once_and_reverts_at_its_end(cast):
    now = timezone.now()
    request = submit(cast, window_end=now + timedelta(days=7), now=now)
    decisions.approve_request(request.pk, approver=cast.root, now=now)
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.ACTIVE
    assert gpu_quota(cast.team_a) == (Decimal(30), Decimal(50))

    result = grants.expire_temporary_quota(now=now + timedelta(days=6))
    assert result.expired == []
    result = grants.expire_temporary_quota(now=now + timedelta(days=7, seconds=1))
    assert result.expired == [request.pk]
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.EXPIRED
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    assert AuditEvent.objects.filter(verb=AuditVerb.EXPIRE).count() == 1
    # idempotent
    assert grants.expire_temporary_quota(now=now + timedelta(days=8)).expired == []
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_a_future_window_opens_later_and_reserves_capacity_meanwhile(cast):
    now = timezone.now()
    request = submit(
        cast,
        guarantee="50",
        limit="60",
        window_start=now + timedelta(days=1),
        window_end=now + timedelta(days=2),
    )
    decisions.approve_request(request.pk, approver=cast.root, now=now)
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.APPROVED
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))
    # The reserved 50 leaves team-b at most 40 (90 - 50), not 70.
    other = decisions.submit_request(
        team=cast.team_b,
        requester=cast.charlie,
        lines=[LineInput(GPU, "41", "60")],
        justification="x",
    )
    with pytest.raises(QuotaExceeded):
        decisions.approve_request(other.pk, approver=cast.root, now=now)

    result = grants.expire_temporary_quota(now=now + timedelta(days=1, seconds=1))
    assert result.activated == [request.pk]
    assert gpu_quota(cast.team_a) == (Decimal(50), Decimal(60))
    grants.expire_temporary_quota(now=now + timedelta(days=2, seconds=1))
    assert gpu_quota(cast.team_a) == (Decimal(20), Decimal(40))


def test_a_revert_composes_with_a_change_made_during_the_window(cast):
    now = timezone.now()
    request = submit(cast, window_end=now + timedelta(days=7), now=now)  # +10 and +10
    decisions.approve_request(request.pk, approver=cast.root, now=now)
    direct.set_team_quota(cast.team_a, GPU, guarantee="35", limit="60", actor=cast.root)
    grants.expire_temporary_quota(now=now + timedelta(days=8))
    assert gpu_quota(cast.team_a) == (Decimal(25), Decimal(50))


def test_a_pending_request_whose_window_passed_cannot_be_approved(cast):
    now = timezone.now()
    request = submit(cast, window_end=now + timedelta(hours=1), now=now)
    with pytest.raises(InvalidTransition):
        decisions.approve_request(request.pk, approver=cast.root, now=now + timedelta(hours=2))


def test_set_team_quota_is_admin_only_and_checks_capacity(cast):
    with pytest.raises(PermissionDenied):
        direct.set_team_quota(cast.team_a, GPU, guarantee="1", limit="2", actor=cast.alice)
    with pytest.raises(QuotaExceeded):
        direct.set_team_quota(cast.team_a, GPU, guarantee="61", limit="80", actor=cast.root)
    quota = direct.set_team_quota(cast.team_a, "cpu", guarantee="500m", limit="2", actor=cast.root)
    assert quota.guarantee == Decimal("0.5")


def test_changes_in_a_coalesced_block_notify_once_after_commit(
    cast, django_capture_on_commit_callbacks
):
    from django.db import transaction

    from quotas.signals import quota_changed

    seen = []

    def listener(sender, team_ids, reason, **kwargs):
        seen.append((team_ids, reason))

    quota_changed.connect(listener)
    try:
        with (
            django_capture_on_commit_callbacks(execute=True),
            transaction.atomic(),
            changes.coalesced_quota_changes("rebalance"),
        ):
            direct.set_team_quota(cast.team_a, GPU, guarantee="10", limit="40", actor=cast.root)
            direct.set_team_quota(cast.team_b, GPU, guarantee="20", limit="60", actor=cast.root)
            direct.set_team_quota(cast.team_b, "cpu", guarantee="4", limit="8", actor=cast.root)
    finally:
        quota_changed.disconnect(listener)
    assert seen == [(sorted([cast.team_a.pk, cast.team_b.pk]), "rebalance")]
