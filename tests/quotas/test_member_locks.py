"""Two leads demoting each other at once (issue 27): the changes queue up on the team row
instead of deadlocking on each other's membership rows (real PostgreSQL, threads)."""

import contextlib
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from quotas import members
from quotas.choices import MembershipRole
from quotas.exceptions import PermissionDenied
from quotas.models import Membership
from tests.base import make_cast
from tests.quotas.test_concurrency import run_at_once


@pytest.mark.django_db(transaction=True)
def test_two_leads_demoting_each_other_at_once_do_not_deadlock(monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("the deadlock is PostgreSQL's row locks; needs PostgreSQL")
    cast = make_cast()
    bob = Membership.objects.get(user=cast.bob, team=cast.team_a)
    bob.role = MembershipRole.LEAD
    bob.save()
    alice = Membership.objects.get(user=cast.alice, team=cast.team_a)

    # Hold each thread after it locked the membership it changes, until the other has too
    # (or 2 s passed): the interleaving that deadlocked.
    both_locked = threading.Barrier(2, timeout=2)
    real_lock = members._lock_membership

    def lock_then_wait(team, membership_id):
        locked = real_lock(team, membership_id)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_locked.wait()
        return locked

    monkeypatch.setattr(members, "_lock_membership", lock_then_wait)
    results = run_at_once(
        lambda: members.change_role(
            cast.team_a, bob.pk, role=MembershipRole.MEMBER, actor=cast.alice
        ),
        lambda: members.change_role(
            cast.team_a, alice.pk, role=MembershipRole.MEMBER, actor=cast.bob
        ),
    )
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 1, results
    assert isinstance(refused[0], PermissionDenied | ValidationError), repr(refused[0])
    leads = Membership.objects.filter(team=cast.team_a, role=MembershipRole.LEAD)
    assert leads.count() == 1
