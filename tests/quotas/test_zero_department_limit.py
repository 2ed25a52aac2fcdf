"""Issue 25, item 4: a department limit of 0 over a team's positive limit is refused, with the
reason, wherever quotas change (direct edits, approvals, the API, the Django admin).

Volcano's queue webhook lets the pair through (``findNearestAncestorCapability`` skips amounts
under 0.1), but its capacity plugin (``pkg/scheduler/plugins/capacity/capacity.go``) does not do
what either reading of a 0 means: for an extended resource the department's realCapability is
cut to 0 and every team below gets at most its guarantee (≤ the department's, so 0) — the
team's limit of 8 can never be used; for cpu and memory a capability ≤ 0 is taken as unset and
replaced by the parent's (``checkHierarchicalQueue``), so the 0 limits nothing.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from quotas import decisions, direct
from quotas.lines import LineInput
from quotas.models import QuotaRequest, TeamQuota
from tests.base import GPU

pytestmark = pytest.mark.django_db

MIG = "nvidia.com/mig-1g.10gb"


def _messages(error: ValidationError) -> str:
    return " ".join(m for ms in error.message_dict.values() for m in ms)


def test_a_zero_department_limit_over_a_teams_limit_is_refused_with_the_reason(cast):
    TeamQuota.objects.create(team=cast.team_a, resource=MIG, guarantee=0, limit=Decimal(8))
    with pytest.raises(ValidationError) as caught:
        direct.set_team_quotas(cast.dept, [LineInput(MIG, "0", "0")], actor=cast.root)
    assert list(caught.value.message_dict) == [f"{MIG}.limit"]
    text = _messages(caught.value)
    assert "dept-x's limit is 0 while team-a's limit would be 8" in text
    assert "capacity plugin" in text and "could never be used" in text
    assert not TeamQuota.objects.filter(team=cast.dept, resource=MIG).exists()


def test_a_teams_positive_limit_under_a_zero_department_limit_is_refused(cast):
    TeamQuota.objects.create(team=cast.dept, resource=MIG, guarantee=0, limit=Decimal(0))
    with pytest.raises(ValidationError) as caught:
        direct.set_team_quotas(cast.team_a, [LineInput(MIG, "0", "8")], actor=cast.root)
    assert "dept-x's limit is 0" in _messages(caught.value)


def test_a_zero_cpu_limit_is_refused_as_a_limit_that_limits_nothing(cast):
    TeamQuota.objects.create(team=cast.team_a, resource="cpu", guarantee=0, limit=Decimal(16))
    with pytest.raises(ValidationError) as caught:
        direct.set_team_quotas(cast.dept, [LineInput("cpu", "0", "0")], actor=cast.root)
    assert "no ceiling at all" in _messages(caught.value)


def test_zero_over_teams_without_a_limit_or_with_zero_stays_allowed(cast):
    TeamQuota.objects.create(team=cast.team_b, resource=MIG, guarantee=0, limit=Decimal(0))
    direct.set_team_quotas(cast.dept, [LineInput(MIG, "0", "0")], actor=cast.root)
    assert TeamQuota.objects.get(team=cast.dept, resource=MIG).limit == 0


def test_an_approval_that_would_break_it_is_refused(cast):
    TeamQuota.objects.create(team=cast.dept, resource=MIG, guarantee=0, limit=Decimal(0))
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[{"resource": MIG, "guarantee": "0", "limit": "8"}],
        justification="MIG slices",
    )
    with pytest.raises(ValidationError, match="capacity plugin"):
        decisions.approve_request(request.pk, approver=cast.root)
    assert QuotaRequest.objects.get(pk=request.pk).status == "pending"


def test_the_api_answers_400_naming_the_limit(cast):
    client = APIClient()
    client.force_authenticate(cast.root)
    answer = client.post(
        reverse("quotas-api:teamquota-list"),
        {"team": "dept-x", "resource": GPU, "guarantee": "0", "limit": "0"},
        format="json",
    )
    assert answer.status_code == 400
    errors = " ".join(m for ms in answer.json()["errors"].values() for m in ms)
    assert "capacity plugin" in errors
