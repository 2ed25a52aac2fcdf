"""what_if and what_if_for_request: before/after fair shares, losers and flags, never a write."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from monitoring.models import UsageSample
from quotas import decisions, lines
from quotas.models import AuditEvent, Namespace, QuotaRequest, TeamQuota
from scheduling.models import ShareComputation, ShareSnapshot
from scheduling.services import what_if, what_if_for_request
from tests.base import GPU

NOW = timezone.now().replace(microsecond=0)


def usage(team, namespace: str, allocated, pending=0):
    return UsageSample.objects.create(
        taken_at=NOW,
        team=team,
        namespace=namespace,
        resource=GPU,
        allocated=Decimal(allocated),
        pending=Decimal(pending),
    )


def request_gpus(cast, guarantee: str, limit: str) -> QuotaRequest:
    return decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, guarantee, limit)],
        justification="Bigger sweep.",
    )


def writes(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().split()[0].upper() in {"INSERT", "UPDATE", "DELETE"}
    ]


@pytest.mark.django_db
def test_it_returns_before_and_after_and_writes_nothing(cast):
    changes = {"team-a": {"guarantee": {GPU: "50"}, "limit": {GPU: "60"}}}

    with CaptureQueriesContext(connection) as ctx:
        result = what_if(changes, now=NOW)

    assert writes(ctx.captured_queries) == []
    assert ShareComputation.objects.count() == 0
    assert ShareSnapshot.objects.count() == 0
    assert TeamQuota.objects.get(team=cast.team_a, resource=GPU).limit == Decimal(40)
    outcomes = result.teams
    assert sorted(outcomes) == ["dept-x", "team-a", "team-b"]
    assert outcomes["team-a"].before.fair_allocation == {GPU: Decimal(40)}
    assert outcomes["team-a"].after.fair_allocation == {GPU: Decimal(50)}
    assert outcomes["team-a"].delta == {GPU: Decimal(10)}
    assert (outcomes["team-a"].before.fair_share, outcomes["team-a"].after.fair_share) == (
        0.4,
        0.5,
    )
    assert outcomes["dept-x"].delta == {GPU: Decimal(0)}
    assert result.losers == {"team-b": {GPU: Decimal(10)}}
    assert result.flags == []


@pytest.mark.django_db
def test_a_request_increasing_team_a_gpus_shows_team_b_losing(cast):
    usage(cast.team_a, "team-a-ml", 40, pending=20)
    usage(cast.team_b, "team-b-ml", 60, pending=20)
    request = request_gpus(cast, "50", "60")

    result = what_if_for_request(request, now=NOW)

    assert result.teams["team-a"].before.fair_allocation == {GPU: Decimal(40)}
    assert result.teams["team-b"].before.fair_allocation == {GPU: Decimal(60)}
    assert result.teams["team-a"].after.fair_allocation == {GPU: Decimal(50)}
    assert result.losers == {"team-b": {GPU: Decimal(10)}}
    assert result.changes == {"team-a": {"guarantee": {GPU: "50"}, "limit": {GPU: "60"}}}


@pytest.mark.django_db
def test_an_approver_adjustment_is_previewed_instead_of_the_requested_amounts(cast):
    request = request_gpus(cast, "50", "60")

    result = what_if_for_request(request, {GPU: ("45", "60")}, now=NOW)

    assert result.teams["team-a"].after.fair_allocation == {GPU: Decimal(45)}
    assert result.losers == {"team-b": {GPU: Decimal(5)}}


@pytest.mark.django_db
def test_an_adjustment_outside_the_request_is_rejected(cast):
    request = request_gpus(cast, "50", "60")

    with pytest.raises(ValidationError) as e:
        what_if_for_request(request, {"cpu": ("1", "2")}, now=NOW)

    assert e.value.message_dict == {"adjustments": ["Not in the request: cpu."]}


@pytest.mark.django_db
def test_a_decrease_below_usage_lists_the_namespaces_running_over_quota(cast):
    Namespace.objects.create(name="team-a-dev", team=cast.team_a)
    usage(cast.team_a, "team-a-ml", 30, pending=10)
    usage(cast.team_a, "team-a-dev", 5)
    usage(cast.team_b, "team-b-ml", 10)

    result = what_if({"team-a": {"limit": {GPU: "20"}}}, now=NOW)

    [flag] = result.flags
    assert flag.kind == "below-usage"
    assert (flag.team, flag.resource) == ("team-a", GPU)
    assert flag.namespaces == (("team-a-ml", Decimal(30)), ("team-a-dev", Decimal(5)))
    assert flag.message == (
        "team-a uses 35 nvidia.com/gpu, above the new limit of 20: workloads keep running over "
        "quota in team-a-ml, team-a-dev (Kubernetes does not evict running pods for a quota "
        "change)."
    )
    assert result.teams["team-a"].after.fair_allocation == {GPU: Decimal(20)}


@pytest.mark.django_db
def test_a_limit_still_above_usage_is_not_flagged_below_usage_but_above_demand(cast):
    usage(cast.team_a, "team-a-ml", 15)

    flags = what_if({"team-a": {"limit": {GPU: "20"}}}, now=NOW).flags
    assert [(f.kind, f.team, f.resource) for f in flags] == [("above-demand", "team-a", GPU)]
    assert flags[0].message.startswith(
        "team-a's workloads want 15 nvidia.com/gpu now (running and waiting), so a limit of 20 "
        "changes today's fair allocation only up to that."
    )


@pytest.mark.django_db
def test_guarantees_over_usable_capacity_are_flagged(cast):
    result = what_if({"team-a": {"guarantee": {GPU: "70"}, "limit": {GPU: "70"}}}, now=NOW)

    assert [f.to_dict() for f in result.flags] == [
        {
            "kind": "guarantees-over-capacity",
            "message": (
                "Guarantees for nvidia.com/gpu would total 100, over the 90 that may be "
                "guaranteed (the 100 schedulable less the 10 % reserve): approval would be "
                "refused."
            ),
            "team": None,
            "resource": GPU,
            "namespaces": [],
        }
    ]
    assert result.teams["team-a"].after.fair_allocation == {GPU: Decimal(70)}
    assert result.losers == {"team-b": {GPU: Decimal(30)}}


@pytest.mark.django_db
def test_guarantees_over_raw_capacity_are_scaled_and_flagged(cast):
    result = what_if({"team-a": {"guarantee": {GPU: "80"}, "limit": {GPU: "80"}}}, now=NOW)

    assert [f.kind for f in result.flags] == ["guarantees-over-capacity", "guarantees-scaled"]
    assert result.teams["team-a"].after.fair_allocation == {GPU: Decimal(73)}


@pytest.mark.django_db
def test_a_weight_change_moves_the_split(cast):
    TeamQuota.objects.filter(resource=GPU).update(limit=Decimal(100))
    usage(cast.team_a, "team-a-ml", 40, pending=60)
    usage(cast.team_b, "team-b-ml", 60, pending=40)

    result = what_if({"team-b": {"weight": 1}}, now=NOW)

    a, b = result.teams["team-a"], result.teams["team-b"]
    assert (b.before.weight, b.after.weight) == (3, 1)
    assert (a.before.fair_allocation, b.before.fair_allocation) == ({GPU: 25}, {GPU: 75})
    assert (a.after.fair_allocation, b.after.fair_allocation) == ({GPU: 50}, {GPU: 50})
    assert result.losers == {"team-b": {GPU: Decimal(25)}}
    assert result.changes == {"team-b": {"weight": 1}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "errors"),
    [
        ({"nope": {"weight": 2}}, {"nope": ["No active team 'nope'."]}),
        (
            {"team-a": {"weight": 0}},
            {"team-a.weight": ["Weight must be an integer from 1 to 65535."]},
        ),
        ({"team-a": {"colour": "red"}}, {"team-a.colour": ["Unknown field."]}),
        (
            {"team-a": {"guarantee": {GPU: "50"}}},
            {f"team-a.guarantee.{GPU}": ["Guarantee cannot exceed the limit."]},
        ),
        (
            {"team-a": {"limit": {GPU: "lots"}}},
            {
                f"team-a.limit.{GPU}": [
                    "'lots' is not a Kubernetes quantity such as 500m, 64Gi or 8."
                ]
            },
        ),
    ],
)
def test_malformed_changes_are_validation_errors(cast, changes, errors):
    with pytest.raises(ValidationError) as e:
        what_if(changes, now=NOW)

    assert e.value.message_dict == errors


@pytest.mark.django_db
def test_to_dict_is_json_ready_and_can_be_stored_as_the_request_preview(cast):
    request = request_gpus(cast, "50", "60")
    result = what_if_for_request(request, now=NOW)

    preview = json.loads(json.dumps(result.to_dict()))
    decisions.approve_request(request.pk, approver=cast.root, preview=preview, now=NOW)

    request.refresh_from_db()
    assert request.preview["losers"] == {"team-b": {GPU: "10"}}
    assert request.preview["capacity"] == {GPU: "100", "cpu": "1000", "memory": str(4 * 2**40)}
    assert request.preview["computed_at"] == NOW.isoformat()
    team_b = next(t for t in request.preview["teams"] if t["team"] == "team-b")
    # "Why is my share X" before and after, and the change part by part (test_explanation.py).
    explanation = team_b.pop("explanation")
    for side, total in (("before", 60), ("after", 50), ("change", -10)):
        assert sum(Decimal(p["amounts"].get(GPU, "0")) for p in explanation[side]) == total
    assert team_b == {
        "team": "team-b",
        "parent": "dept-x",
        "usage": {},
        "dominant_share": 0.0,
        "before": {
            "weight": 3,
            "fair_allocation": {GPU: "60"},
            "fair_share": 0.6,
            "fair_resource": GPU,
            "reason": "demand-met",
            "demand": {GPU: "60"},
            "why": "the cluster has spare GPUs: you get your whole demand",
        },
        "after": {
            "weight": 3,
            "fair_allocation": {GPU: "50"},
            "fair_share": 0.5,
            "fair_resource": GPU,
            "reason": "saturated:nvidia.com/gpu",
            "demand": {GPU: "60"},
            "why": "every one of the cluster's GPUs is wanted: you get your share by weight",
        },
        "delta": {GPU: "-10"},
        # Never measured: it already demands its limit, so contention changes nothing for it.
        "contention": {"before": {GPU: "60"}, "after": {GPU: "50"}},
    }
    assert AuditEvent.objects.filter(verb="approve").count() == 1


def test_raising_a_measured_teams_limit_never_previews_more_than_it_wants(cast):
    from django.utils import timezone

    from monitoring.models import UsageSample
    from scheduling.services import what_if

    now = timezone.now()
    for team, ns, used in ((cast.team_a, "team-a-ml", 40), (cast.team_b, "team-b-ml", 30)):
        UsageSample.objects.create(
            taken_at=now, team=team, namespace=ns, resource=GPU, allocated=Decimal(used)
        )
    result = what_if({"team-a": {"limit": {GPU: "56"}, "guarantee": {GPU: "36"}}}).to_dict()
    teams = {row["team"]: row for row in result["teams"]}
    assert teams["team-a"]["before"]["fair_allocation"][GPU] == "40"
    # It asks for a limit of 56, but its workloads want 40 (issue 29: a preview that promised
    # 56 promised GPUs it does not need); the contention columns show what 56 buys.
    assert teams["team-a"]["after"]["fair_allocation"][GPU] == "40"
    assert teams["team-a"]["after"]["demand"][GPU] == "40"
    assert teams["team-b"]["after"]["fair_allocation"][GPU] == "30"
    [note] = [f for f in result["flags"] if f["kind"] == "above-demand"]
    assert note["team"] == "team-a"
    assert note["resource"] == GPU
    assert "want 40 nvidia.com/gpu" in note["message"]
    assert "limit of 56" in note["message"]


MIG_DEVICES = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"


@pytest.mark.django_db
def test_a_device_class_line_is_named_with_what_enforces_it_and_what_the_team_holds(cast):
    """Issue 34: a DRA device count is not in the solve; the preview says what the limit does
    and what the team's claims hold now (from the latest collection), per namespace."""
    UsageSample.objects.create(
        taken_at=NOW,
        team=cast.team_a,
        namespace="team-a-ml",
        resource=MIG_DEVICES,
        allocated=Decimal(5),
        pending=Decimal(1),
    )
    usage(cast.team_a, "team-a-ml", "0.625")  # the five 1g.10gb slices' GPU-equivalents
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(MIG_DEVICES, "0", "4")],
        justification="Slices for notebooks.",
    )

    result = what_if_for_request(request, now=NOW)

    [flag] = [f for f in result.flags if f.kind == "device-class"]
    assert (flag.team, flag.resource) == ("team-a", MIG_DEVICES)
    assert flag.namespaces == (("team-a-ml", Decimal(5)),)
    assert flag.message == (
        "mig.nvidia.com devices (Dynamic Resource Allocation) are counted per claim, not shared "
        "fairly: a limit of 4 devices caps team-a's ResourceClaims of that class in its "
        "namespaces' ResourceQuota (a claim beyond it is refused when it is created) and its "
        "queue (Volcano deviceclass/mig.nvidia.com). Its claims hold 5 now — above the new "
        "limit: existing claims keep their devices, new ones are refused. The GPUs they hold "
        "count in nvidia.com/gpu as GPU-equivalents (a 1g.10gb MIG slice is 0.125)."
    )
    # The fair shares are untouched by the line; the team's usage shows the fraction.
    outcome = result.teams["team-a"]
    assert outcome.before.fair_allocation == outcome.after.fair_allocation
    assert outcome.after.usage == {GPU: Decimal("0.625"), MIG_DEVICES: Decimal(5)}
    assert MIG_DEVICES not in outcome.after.fair_allocation


@pytest.mark.django_db
def test_a_gpu_only_request_has_no_device_class_flag(cast):
    result = what_if_for_request(request_gpus(cast, "20", "44"), now=NOW)
    assert not [f for f in result.flags if f.kind == "device-class"]
