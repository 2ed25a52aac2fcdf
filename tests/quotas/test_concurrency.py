"""Two admins approving at once must never over-commit guarantees (real PostgreSQL, threads)."""

import threading
from decimal import Decimal

import pytest
from django.db import connection, connections

from quotas import decisions
from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.exceptions import InvalidTransition, QuotaExceeded
from quotas.lines import LineInput
from quotas.models import AuditEvent, QuotaRequest, TeamQuota
from tests.base import make_cast

GPU = "nvidia.com/gpu"


def run_at_once(*calls):
    """Run the callables in threads released together; return their results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def worker(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except Exception as e:  # the test inspects what each thread raised
            results[index] = e
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_approvals_that_together_over_commit_let_only_one_through():
    if connection.vendor != "postgresql":
        pytest.skip("row and advisory locks are what this test proves; needs PostgreSQL")
    cast = make_cast()
    # 90 GPUs can be guaranteed; team-a holds 20 and team-b 30. Each request alone fits
    # (+35 → 85), both together (+70 → 120) do not.
    first = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "55", "60")],
        justification="a",
    )
    second = decisions.submit_request(
        team=cast.team_b,
        requester=cast.charlie,
        lines=[LineInput(GPU, "65", "70")],
        justification="b",
    )
    results = run_at_once(
        lambda: decisions.approve_request(first.pk, approver=cast.root),
        lambda: decisions.approve_request(second.pk, approver=cast.root),
    )
    successes = [r for r in results if isinstance(r, QuotaRequest)]
    refusals = [r for r in results if isinstance(r, QuotaExceeded)]
    assert len(successes) == 1 and len(refusals) == 1, results
    total = sum(TeamQuota.objects.filter(resource=GPU).values_list("guarantee", flat=True))
    assert total <= Decimal(90)
    statuses = sorted(QuotaRequest.objects.values_list("status", flat=True))
    assert statuses == [QuotaRequestStatus.APPROVED, QuotaRequestStatus.PENDING]
    assert AuditEvent.objects.filter(verb=AuditVerb.APPROVE).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_double_click_approves_once():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    cast = make_cast()
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "25", "45")],
        justification="a",
    )
    results = run_at_once(
        *[lambda: decisions.approve_request(request.pk, approver=cast.root) for _ in range(4)]
    )
    assert sum(isinstance(r, QuotaRequest) for r in results) == 1
    assert sum(isinstance(r, InvalidTransition) for r in results) == 3
    assert TeamQuota.objects.get(team=cast.team_a, resource=GPU).guarantee == Decimal(25)
    assert AuditEvent.objects.filter(verb=AuditVerb.APPROVE).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_withdraw_racing_an_approve_ends_in_exactly_one_state():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    cast = make_cast()
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "25", "45")],
        justification="a",
    )
    results = run_at_once(
        lambda: decisions.approve_request(request.pk, approver=cast.root),
        lambda: decisions.withdraw_request(request.pk, actor=cast.alice),
    )
    assert sum(isinstance(r, QuotaRequest) for r in results) == 1
    assert sum(isinstance(r, InvalidTransition) for r in results) == 1
    request.refresh_from_db()
    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU).guarantee
    if request.status == QuotaRequestStatus.APPROVED:
        assert quota == Decimal(25)
        assert AuditEvent.objects.filter(verb=AuditVerb.WITHDRAW).count() == 0
    else:
        assert request.status == QuotaRequestStatus.WITHDRAWN
        assert quota == Decimal(20)
        assert AuditEvent.objects.filter(verb=AuditVerb.APPROVE).count() == 0
