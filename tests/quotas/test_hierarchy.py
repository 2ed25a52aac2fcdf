"""Hierarchy rules where changes enter (issue "What Fairshare writes must work on a real
cluster"): a team's limit within its department's, a department's teams' guarantees within the
department's limit (its Queue guarantee is derived from them). Services, approval with
adjustments, rebalance, the API and the Django admin all refuse the same changes, with messages
that name the department and the numbers."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from quotas import capacity_rule, decisions, direct, grants, hierarchy, lines
from quotas.admin import TeamForm, TeamQuotaForm
from quotas.models import QuotaRequest, Team, TeamQuota
from quotas.rebalance import rebalance
from tests.base import GPU, PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def dept_limited(cast):
    """dept-x gets a 70-GPU limit; its teams hold 20 + 30 guaranteed, limits 40 and 60."""
    direct.set_team_quota(cast.dept, GPU, guarantee="0", limit="70", actor=cast.root)
    return cast


def quota(team) -> tuple[Decimal, Decimal | None]:
    row = TeamQuota.objects.get(team=team, resource=GPU)
    return row.guarantee, row.limit


# --------------------------------------------------------------------------- services


def test_a_team_limit_over_its_departments_limit_is_refused(dept_limited):
    cast = dept_limited
    with pytest.raises(ValidationError) as exc:
        direct.set_team_quota(cast.team_b, GPU, guarantee="30", limit="80", actor=cast.root)

    assert exc.value.message_dict == {
        "limit": ["dept-x's limit is 70 GPUs; team-b's limit would be 80 GPUs, over it."]
    }
    assert quota(cast.team_b) == (30, 60)


def test_guarantees_over_the_departments_limit_are_refused(dept_limited):
    cast = dept_limited
    # 40 + 30 = 70 fits the department's limit exactly ...
    direct.set_team_quota(cast.team_a, GPU, guarantee="40", limit="40", actor=cast.root)
    # ... one more does not.
    with pytest.raises(ValidationError) as exc:
        direct.set_team_quota(cast.team_b, GPU, guarantee="31", limit="60", actor=cast.root)

    assert exc.value.message_dict == {
        "guarantee": ["dept-x's limit is 70 GPUs; its teams would be guaranteed 71 GPUs."]
    }
    assert quota(cast.team_b) == (30, 60)


def test_a_department_limit_below_what_its_teams_hold_is_refused(dept_limited):
    cast = dept_limited
    with pytest.raises(ValidationError) as exc:
        direct.set_team_quota(cast.dept, GPU, guarantee="0", limit="45", actor=cast.root)

    assert exc.value.message_dict == {
        "limit": [
            "dept-x's limit is 45 GPUs; its teams would be guaranteed 50 GPUs.",
            "dept-x's limit is 45 GPUs; team-b's limit would be 60 GPUs, over it.",
        ]
    }
    assert quota(cast.dept) == (0, 70)


def test_a_department_without_a_limit_lets_its_guarantee_follow_its_teams(cast):
    # dept-x has no quota at all: its Queue's guarantee is the sum of its teams' (derived).
    direct.set_team_quota(cast.team_a, GPU, guarantee="40", limit="40", actor=cast.root)

    assert quota(cast.team_a) == (40, 40)
    assert capacity_rule.committed_guarantees()[GPU] == 70


def test_the_demo_accepts_a_derived_guarantee_and_refuses_a_limit_over_the_department():
    call_command("seed_demo", "--quiet")
    admin = User.objects.get(username="admin")
    cv, speech = Team.objects.get(slug="cv-team"), Team.objects.get(slug="speech-team")

    # cv-team to 64/96 under ai-research's own 96-GPU guarantee: the department's Queue
    # guarantee becomes 32 + 64 + 16 = 112, within its 208 limit.
    direct.set_team_quota(cv, GPU, guarantee="64", limit="96", actor=admin)
    with pytest.raises(ValidationError) as exc:
        direct.set_team_quota(speech, GPU, guarantee="16", limit="256", actor=admin)

    assert quota(cv) == (64, 96)
    assert exc.value.message_dict["limit"] == [
        "ai-research's limit is 208 GPUs; speech-team's limit would be 256 GPUs, over it."
    ]


# --------------------------------------------------------------------------- approval


def test_approval_with_adjustments_obeys_the_rules(dept_limited):
    cast = dept_limited
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "25", "40")],
        justification="more",
    )
    with pytest.raises(ValidationError) as exc:
        decisions.approve_request(request.pk, approver=cast.root, adjustments={GPU: ("25", "75")})

    assert exc.value.message_dict == {
        "nvidia.com/gpu.limit": [
            "dept-x's limit is 70 GPUs; team-a's limit would be 75 GPUs, over it."
        ]
    }
    request.refresh_from_db()
    assert request.status == "pending"
    assert quota(cast.team_a) == (20, 40)
    decisions.approve_request(request.pk, approver=cast.root)
    assert quota(cast.team_a) == (25, 40)


def test_a_temporary_grant_that_no_longer_fits_does_not_start(dept_limited):
    cast = dept_limited
    now = timezone.now()
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "35", "40")],
        justification="burst",
        window_start=now + timedelta(hours=1),
        window_end=now + timedelta(days=1),
        now=now,
    )
    decisions.approve_request(request.pk, approver=cast.root, now=now)
    # Meanwhile team-b took the room: 35 + 36 would be over the department's 70.
    direct.set_team_quota(cast.team_b, GPU, guarantee="36", limit="60", actor=cast.root)

    result = grants.expire_temporary_quota(now=now + timedelta(hours=2))

    assert result.activated == []
    assert "dept-x's limit is 70 GPUs; its teams would be guaranteed" in result.failed[request.pk]
    assert QuotaRequest.objects.get(pk=request.pk).status == "approved"
    assert quota(cast.team_a) == (20, 40)


def test_a_departments_expiring_grant_never_drops_its_limit_below_its_teams(dept_limited):
    cast = dept_limited
    now = timezone.now()
    request = decisions.submit_request(
        team=cast.dept,
        requester=cast.dora,
        lines=[lines.LineInput(GPU, "0", "90")],
        justification="a week of room",
        window_end=now + timedelta(days=7),
        now=now,
    )
    decisions.approve_request(request.pk, approver=cast.root, now=now)
    direct.set_team_quota(cast.team_b, GPU, guarantee="30", limit="85", actor=cast.root)

    grants.expire_temporary_quota(now=now + timedelta(days=8))

    # The grant added 20 (70 → 90); reverting to 70 would leave team-b's 85 over it.
    assert quota(cast.dept) == (0, 85)
    assert hierarchy.hierarchy_problems() == []


# --------------------------------------------------------------------------- rebalance


def test_rebalance_checks_all_new_guarantees_together(dept_limited):
    cast = dept_limited
    with pytest.raises(ValidationError) as exc:
        rebalance(
            {"team-a": {"guarantee": {GPU: "30"}}, "team-b": {"guarantee": {GPU: "45"}}},
            actor=cast.root,
        )

    message = "dept-x's limit is 70 GPUs; its teams would be guaranteed 75 GPUs."
    assert exc.value.message_dict == {
        "team-a.guarantee.nvidia.com/gpu": [message],
        "team-b.guarantee.nvidia.com/gpu": [message],
    }
    assert quota(cast.team_a) == (20, 40) and quota(cast.team_b) == (30, 60)
    # Moving guarantee between siblings within the limit is fine.
    rebalance(
        {"team-a": {"guarantee": {GPU: "10"}}, "team-b": {"guarantee": {GPU: "60"}}},
        actor=cast.root,
    )
    assert quota(cast.team_a) == (10, 40) and quota(cast.team_b) == (60, 60)


# --------------------------------------------------------------------------- API and admin


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_answers_400_naming_the_department_and_the_numbers(dept_limited):
    cast = dept_limited
    row = TeamQuota.objects.get(team=cast.team_b, resource=GPU)

    response = api(cast.root).patch(f"/api/v1/quotas/{row.pk}/", {"limit": "256"}, format="json")

    assert response.status_code == 400, response.content
    body = response.json()
    text = str(body)
    assert "dept-x's limit is 70 GPUs; team-b's limit would be 256 GPUs" in text
    assert quota(cast.team_b) == (30, 60)


def test_moving_a_team_under_a_department_it_does_not_fit_is_a_400(dept_limited):
    cast = dept_limited
    big = Team.objects.create(slug="big", name="Big")
    TeamQuota.objects.create(team=big, resource=GPU, guarantee=Decimal(30), limit=Decimal(80))

    response = api(cast.root).patch("/api/v1/teams/big/", {"parent": "dept-x"}, format="json")

    assert response.status_code == 400, response.content
    assert "parent" in str(response.json())
    assert "dept-x's limit is 70 GPUs; big's limit would be 80 GPUs" in str(response.json())
    big.refresh_from_db()
    assert big.parent is None


def test_the_admin_forms_show_the_same_errors(dept_limited):
    cast = dept_limited
    row = TeamQuota.objects.get(team=cast.team_b, resource=GPU)
    form = TeamQuotaForm(
        {"team": cast.team_b.pk, "resource": GPU, "guarantee": "30", "limit": "90"},
        instance=row,
    )
    assert not form.is_valid()
    assert form.errors["limit"] == [
        "dept-x's limit is 70 GPUs; team-b's limit would be 90 GPUs, over it."
    ]

    big = Team.objects.create(slug="big", name="Big")
    TeamQuota.objects.create(team=big, resource=GPU, guarantee=Decimal(30), limit=Decimal(50))
    data = {"slug": "big", "name": "Big", "parent": cast.dept.pk, "weight": 1, "active": True}
    team_form = TeamForm(data, instance=big)
    assert not team_form.is_valid()
    assert (
        "dept-x's limit is 70 GPUs; its teams would be guaranteed" in team_form.errors["parent"][0]
    )


def test_the_admin_change_page_refuses_an_invalid_quota(dept_limited):
    cast = dept_limited
    row = TeamQuota.objects.get(team=cast.team_b, resource=GPU)
    browser = Client()
    assert browser.login(username="root", password=PASSWORD)

    response = browser.post(
        f"/admin/quotas/teamquota/{row.pk}/change/",
        {"team": cast.team_b.pk, "resource": GPU, "guarantee": "30", "limit": "90"},
    )

    assert response.status_code == 200  # the form again, with the error
    assert "dept-x&#x27;s limit is 70 GPUs" in response.content.decode()
    assert quota(cast.team_b) == (30, 60)
