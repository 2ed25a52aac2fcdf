"""Nothing the product accepts can break share computation (issue 14): requests the cluster can
never give are refused on submit, hierarchy rules refuse an approval (adjusted amounts included)
with a message naming the department and the numbers, and what was refused leaves the fair shares
computable."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import call_command

from quotas import decisions, lines
from quotas.models import QuotaRequest, Team, TeamQuota
from quotas.quantities import amount_words
from scheduling.services import compute_shares
from tests.base import GPU

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo():
    call_command("seed_demo", "--quiet")
    return {
        "admin": User.objects.get(username="admin"),
        "rita": User.objects.get(username="rita"),
        "research": Team.objects.get(slug="research-team"),
    }


def gpu_quota(team: Team) -> tuple[int, int]:
    q = TeamQuota.objects.get(team=team, resource=GPU)
    return int(q.guarantee), int(q.limit)


def test_an_over_limit_approval_is_refused_naming_the_department_and_the_numbers(demo):
    request = decisions.submit_request(
        team=demo["research"],
        requester=demo["rita"],
        lines=[lines.LineInput(GPU, "40", "64")],
        justification="a bit more",
    )

    with pytest.raises(ValidationError) as exc:
        decisions.approve_request(
            request.pk, approver=demo["admin"], adjustments={GPU: ("600", "700")}
        )

    # ai-research's teams: 600 + cv 48 + speech 16 = 664 guaranteed, under a 208 limit.
    # Each message is on the amount that breaks the rule.
    assert exc.value.message_dict == {
        "nvidia.com/gpu.guarantee": [
            "ai-research's limit is 208 GPUs; its teams would be guaranteed 664 GPUs."
        ],
        "nvidia.com/gpu.limit": [
            "ai-research's limit is 208 GPUs; research-team's limit would be 700 GPUs, over it."
        ],
    }
    request.refresh_from_db()
    assert request.status == "pending"
    assert gpu_quota(demo["research"]) == (32, 64)
    # The refusal kept the problem valid: shares still compute.
    assert compute_shares(trigger="test").teams == Team.objects.filter(active=True).count()


def test_a_request_over_the_clusters_capacity_is_refused_on_submit_per_field(demo):
    # The demo cluster has 1,000 GPUs, 900 of them guaranteeable (10 % reserve).
    with pytest.raises(ValidationError) as exc:
        decisions.submit_request(
            team=demo["research"],
            requester=demo["rita"],
            lines=[lines.LineInput(GPU, "950", "1200")],
            justification="everything",
        )

    assert exc.value.message_dict == {
        "lines[0].guarantee": [
            "At most 900 GPUs of the cluster's 1000 GPUs can be guaranteed (the rest is held "
            "in reserve); a guarantee of 950 GPUs could never be approved."
        ],
        "lines[0].limit": ["The cluster has 1000 GPUs; a limit of 1200 GPUs could never be used."],
    }
    assert not QuotaRequest.objects.filter(justification="everything").exists()


def test_the_whole_cluster_can_still_be_requested(demo):
    request = decisions.submit_request(
        team=demo["research"],
        requester=demo["rita"],
        lines=[lines.LineInput(GPU, "900", "1000")],
        justification="the whole usable cluster",
    )
    assert request.status == "pending"


def test_amounts_in_words():
    from decimal import Decimal

    assert amount_words(Decimal("906.977"), GPU) == "906 GPUs"
    assert amount_words(Decimal(1), GPU) == "1 GPU"
    assert amount_words(Decimal(16), "cpu") == "16 CPU cores"
    assert amount_words(Decimal(64 * 2**30), "memory") == "64Gi of memory"
    assert amount_words(Decimal(2), "example.com/fpga") == "2 example.com/fpga"
