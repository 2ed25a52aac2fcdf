"""What a guarantee buys (issue 14): the what-if's fair allocation under full contention (every
team demanding its limit) before and after; hierarchy rules as warnings in the preview."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from monitoring.models import UsageSample
from quotas import decisions, direct, lines
from scheduling.services import FLAG_HIERARCHY, what_if, what_if_for_request
from tests.base import GPU

NOW = timezone.now().replace(microsecond=0)

pytestmark = pytest.mark.django_db


@pytest.fixture
def contended(cast):
    """60 GPUs; team-a 20/40 (weight 1) and team-b 30/60 (weight 3) both measured at 10 GPUs:
    today the cluster has spare GPUs, under contention they want 40 + 60 = 100."""
    cast.capacity.resources = {GPU: "60"}
    cast.capacity.save()
    for team, ns in ((cast.team_a, "team-a-ml"), (cast.team_b, "team-b-ml")):
        UsageSample.objects.create(
            taken_at=NOW, team=team, namespace=ns, resource=GPU, allocated=Decimal(10)
        )
    return cast


def gpus(amounts: dict) -> Decimal:
    return Decimal(amounts.get(GPU, "0"))


def test_raising_a_guarantee_changes_nothing_today_but_buys_gpus_under_contention(contended):
    result = what_if({"team-a": {"guarantee": {GPU: "30"}}}, now=NOW).to_dict()
    team_a = next(t for t in result["teams"] if t["team"] == "team-a")
    team_b = next(t for t in result["teams"] if t["team"] == "team-b")

    # Today both teams get their whole demand: the guarantee changes nothing ...
    assert gpus(team_a["before"]["fair_allocation"]) == gpus(team_a["after"]["fair_allocation"])
    assert gpus(team_a["delta"]) == 0
    # ... under contention team-a's share rises to its new guarantee, taken from team-b.
    before, after = gpus(team_a["contention"]["before"]), gpus(team_a["contention"]["after"])
    assert before >= 20  # its old guarantee held
    assert before < 30
    assert after == 30
    assert gpus(team_b["contention"]["after"]) == 60 - 30
    assert gpus(team_a["contention"]["before"]) + gpus(team_b["contention"]["before"]) == 60


def test_the_contention_of_a_team_without_a_ceiling_is_its_demand(cast):
    result = what_if({"team-a": {"guarantee": {GPU: "25"}}}, now=NOW).to_dict()
    # 100 GPUs, limits 40 + 60: everyone's limit fits, so contention gives each its limit.
    by_team = {t["team"]: t for t in result["teams"]}
    assert gpus(by_team["team-a"]["contention"]["after"]) == 40
    assert gpus(by_team["team-b"]["contention"]["after"]) == 60


def test_a_request_over_the_departments_limit_is_a_warning_in_the_preview(cast):
    direct.set_team_quota(cast.dept, GPU, guarantee="0", limit="70", actor=cast.root)
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "45", "80")],
        justification="Bigger sweep.",
    )

    result = what_if_for_request(request, now=NOW).to_dict()

    hierarchy = [f for f in result["flags"] if f["kind"] == FLAG_HIERARCHY]
    assert sorted(f["message"] for f in hierarchy) == [
        "dept-x's limit is 70 GPUs; its teams would be guaranteed 75 GPUs.",
        "dept-x's limit is 70 GPUs; team-a's limit would be 80 GPUs, over it.",
    ]
    # The solver cannot solve the broken hierarchy: the preview keeps today's shares.
    team_a = next(t for t in result["teams"] if t["team"] == "team-a")
    assert team_a["after"] == team_a["before"]


def test_a_request_within_the_rules_has_no_hierarchy_warning(cast):
    direct.set_team_quota(cast.dept, GPU, guarantee="0", limit="70", actor=cast.root)
    result = what_if({"team-a": {"guarantee": {GPU: "25"}, "limit": {GPU: "40"}}}, now=NOW)
    assert [f for f in result.flags if f.kind == FLAG_HIERARCHY] == []
