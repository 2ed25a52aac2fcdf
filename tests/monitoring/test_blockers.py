"""What must change for a waiting workload to start (monitoring.domain.blockers, pure)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from monitoring.domain.blockers import (
    Bound,
    Holder,
    NamespaceQuota,
    PendingGrant,
    Situation,
    blockers,
    duration_words,
)
from monitoring.domain.waits import StartedWait, WeekWaits, percentile, week_start, weekly_waits

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
D = Decimal


def holder(name, gpus, *, kind="PyTorchJob", hours_ago=None, namespace="research-ml"):
    started = None if hours_ago is None else NOW - timedelta(hours=hours_ago)
    return Holder(f"{namespace}/{name}", kind, {GPU: D(gpus)}, started, namespace)


BASE = Situation(
    team="research-team",
    wanted={GPU: D(12)},
    requested={GPU: D(12)},
    gang_size=3,
    now=NOW,
    team_bound=Bound("research-team", {GPU: D(64)}, {GPU: D(60)}),
    capacity={GPU: D(512)},
    cluster_in_use={GPU: D(300)},
    holders=(holder("a", 4), holder("b", 8), holder("c", 2)),
)


def kinds(found):
    return [(b.kind, b.resource, b.short_by) for b in found]


# ---------------------------------------------------------------- team limit


def test_it_says_by_how_much_the_team_limit_is_passed_and_who_holds_it():
    (found,) = blockers(BASE)

    assert (found.kind, found.resource, found.short_by) == ("team-limit", GPU, D(8))
    assert found.words == (
        "needs 8 more GPUs than research-team's 64-GPU limit allows: "
        "60 in use + 12 requested = 72 GPUs"
    )
    release, request = found.remedies
    # The fewest workloads whose end frees 8: b alone (8), not a + c (6).
    assert (release.kind, release.workloads) == ("release", ("research-ml/b",))
    assert release.words == (
        "the team's running workload research-ml/b holds 8 GPUs; its end makes room"
    )
    assert (request.kind, request.team, request.resource, request.limit) == (
        "request",
        "research-team",
        GPU,
        D(72),
    )


def test_it_names_several_holders_when_no_one_frees_enough():
    situation = replace(BASE, holders=(holder("a", 4), holder("c", 2), holder("d", 3)))

    (found,) = blockers(situation)

    release = found.remedies[0]
    assert release.workloads == ("research-ml/a", "research-ml/d", "research-ml/c")
    assert release.words == (
        "the team's running workloads research-ml/a (4), research-ml/d (3), research-ml/c (2) "
        "hold 9 GPUs; their end makes room"
    )


def test_a_pending_request_that_fits_replaces_filing_a_new_one():
    situation = replace(
        BASE,
        pending=(
            PendingGrant(13, "research-team", {GPU: D(70)}),
            PendingGrant(12, "research-team", {GPU: D(80)}),
            PendingGrant(14, "other-team", {GPU: D(500)}),
        ),
    )

    (found,) = blockers(situation)

    assert [r.kind for r in found.remedies] == ["release", "approval"]
    approval = found.remedies[1]
    assert (approval.request_id, approval.limit) == (12, D(80))
    assert approval.words == (
        "request #12 awaits a decision: it raises research-team's limit to 80 GPUs, enough for it"
    )


def test_a_pending_request_too_small_says_what_it_leaves_missing():
    situation = replace(BASE, pending=(PendingGrant(13, "research-team", {GPU: D(70)}),))

    (found,) = blockers(situation)

    assert [r.kind for r in found.remedies] == ["release", "approval", "request"]
    assert found.remedies[1].words == (
        "request #13 awaits a decision but raises research-team's limit only to 70 GPUs, "
        "2 GPUs short of it"
    )
    assert found.remedies[2].limit == D(72)


def test_a_gang_larger_than_the_limit_itself_cannot_wait_its_way_in():
    situation = replace(BASE, wanted={GPU: D(80)}, requested={GPU: D(80)})

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("team-limit", D(76))
    assert found.words.endswith("it is larger than the limit itself, so nothing ending makes room")
    assert [r.kind for r in found.remedies] == ["request"]
    assert found.remedies[0].limit == D(140)
    assert (found.estimate, found.estimate_seconds) == (
        "no estimate: it cannot start under this limit",
        None,
    )


def test_a_refused_namespace_uses_its_resource_quota_numbers():
    situation = replace(
        BASE,
        in_queue=False,
        namespace_quota=NamespaceQuota("speech-asr", GPU, D(48), D(38)),
        holders=(holder("x", 24, namespace="speech-asr"), holder("y", 40, namespace="other-ns")),
    )

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("team-limit", D(2))
    assert found.words == (
        "needs 2 more GPUs than namespace speech-asr's ResourceQuota of 48 GPUs (its part of "
        "research-team's limit) allows: 38 in use + 12 requested = 50 GPUs"
    )
    release, request = found.remedies
    assert release.workloads == ("speech-asr/x",)  # only the namespace's own workloads count
    assert (request.kind, request.limit) == ("request", None)  # the form works the split out


def test_outside_any_queue_the_queue_limit_and_share_do_not_apply():
    situation = replace(BASE, in_queue=False, fair={GPU: D(10)})

    (found,) = blockers(situation)

    assert found.kind == "scheduler"


# ---------------------------------------------------------------- department, share, cluster


def test_a_department_limit_names_only_the_teams_own_workloads():
    situation = replace(
        BASE,
        team_bound=Bound("research-team", {GPU: D(64)}, {GPU: D(14)}),
        departments=(Bound("research-dept", {GPU: D(100)}, {GPU: D(95)}),),
        holders=(holder("a", 2),),
    )

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("department-limit", D(7))
    assert found.words == (
        "needs 7 more GPUs than research-dept's 100-GPU limit allows: "
        "95 in use + 12 requested = 107 GPUs"
    )
    others, request = found.remedies
    assert others.kind == "others"
    assert others.words == "other teams' running workloads under research-dept hold 93 GPUs of it"
    assert others.workloads == ()
    assert (request.team, request.limit) == ("research-dept", D(107))
    assert found.estimate == "no estimate: the team's own running work frees too little of it"


def test_the_fair_share_blocker_offers_a_guarantee():
    situation = replace(
        BASE, team_bound=Bound("research-team", {}, {GPU: D(60)}), fair={GPU: D(64)}
    )

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("fair-share", D(8))
    assert found.words == (
        "needs 8 more GPUs than research-team's fair allocation of 64 GPUs allows: "
        "60 in use + 12 requested = 72 GPUs"
    )
    assert [r.kind for r in found.remedies] == ["release", "request", "wait"]
    assert (found.remedies[1].guarantee, found.remedies[1].limit) == (D(72), None)


def test_the_cluster_blocker_counts_other_teams_without_naming_them():
    situation = replace(
        BASE,
        team_bound=Bound("research-team", {GPU: D(64)}, {GPU: D(14)}),
        cluster_in_use={GPU: D(508)},
    )

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("cluster", D(8))
    assert found.words == (
        "needs 8 more GPUs than the cluster has free: 508 of 512 GPUs allocated, 4 free, "
        "it needs 12"
    )
    release, others = found.remedies
    assert release.workloads == ("research-ml/b",)
    assert others.words == (
        "other teams' running workloads hold 494 GPUs; capacity frees as they end "
        "(no quota change adds hardware)"
    )


def test_a_flavor_counts_only_its_own_nodes():
    situation = replace(
        BASE,
        team_bound=None,
        holders=(),
        product="NVIDIA-H100-80GB-HBM3",
        flavor_capacity={"NVIDIA-H100-80GB-HBM3": {GPU: D(64)}},
        flavor_in_use={"NVIDIA-H100-80GB-HBM3": {GPU: D(60)}},
    )

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("flavor", D(8))
    assert found.words.startswith("needs 8 more GPUs than the NVIDIA-H100-80GB-HBM3 nodes")


@pytest.mark.parametrize(
    ("requested", "gang", "largest", "short", "words"),
    [
        (
            {GPU: D(48)},
            3,
            {GPU: D(8)},
            D(8),
            "each of its 3 pods needs 16 GPUs on one node; the largest node has 8 GPUs",
        ),
        (
            {GPU: D(600)},
            75,
            {},
            D(88),
            "the gang starts whole or not at all and needs 600 GPUs; the whole cluster has "
            "512 GPUs",
        ),
    ],
)
def test_a_gang_that_fits_no_node_or_no_cluster(requested, gang, largest, short, words):
    situation = replace(
        BASE,
        wanted=requested,
        requested=requested,
        gang_size=gang,
        largest_node=largest,
        team_bound=None,
        cluster_in_use={},
    )

    found = blockers(situation)

    assert (found[0].kind, found[0].short_by, found[0].words) == ("gang", short, words)
    assert found[0].remedies[0].kind == "change"


def test_when_nothing_counted_binds_it_shows_the_numbers_it_checked():
    situation = replace(
        BASE,
        team_bound=Bound("research-team", {GPU: D(64)}, {GPU: D(40)}),
        scheduler_words="waiting: 0/141 nodes are available: 141 Insufficient nvidia.com/gpu.",
    )

    (found,) = blockers(situation)

    assert (found.kind, found.short_by) == ("scheduler", D(0))
    assert found.words == (
        "no limit or capacity Fairshare counts stands in the way (it needs 12 GPUs, "
        "research-team holds 40 of its limit of 64 GPUs, the cluster has 212 free); the "
        "scheduler says: 0/141 nodes are available: 141 Insufficient nvidia.com/gpu."
    )
    assert found.remedies[0].words == (
        "each of its 3 pods needs 4 GPUs free on one node that its node selector, tolerations "
        "and affinity allow; the scheduler found none"
    )


def test_memory_in_words_reads_in_gi_and_the_shortfall_stays_exact():
    situation = replace(
        BASE,
        wanted={"memory": D(512 * 2**30)},
        requested={"memory": D(512 * 2**30)},
        team_bound=Bound("cv-team", {"memory": D(2 * 2**40)}, {"memory": D(2032896 * 2**20)}),
        capacity={},
        holders=(),
    )

    (found,) = blockers(situation)

    assert found.short_by == D(2032896 * 2**20 + 512 * 2**30 - 2 * 2**40)  # exact bytes
    assert found.words == (
        "needs 450Gi more memory than cv-team's limit of 2Ti of memory allows: "
        "1986Gi in use + 512Gi requested = 2498Gi of memory"
    )


def test_gpus_come_first_then_the_other_resources_by_name():
    situation = replace(
        BASE,
        wanted={"cpu": D(96), GPU: D(12)},
        team_bound=Bound("research-team", {GPU: D(64), "cpu": D(400)}, {GPU: D(60), "cpu": D(336)}),
        capacity={},
    )

    assert kinds(blockers(situation)) == [("team-limit", GPU, D(8)), ("team-limit", "cpu", D(32))]


# ---------------------------------------------------------------- estimates

FIVE_HOURS = [timedelta(hours=5)] * 12


def test_an_estimate_states_its_basis():
    situation = replace(
        BASE,
        holders=(holder("b", 8, hours_ago=2), holder("a", 4, hours_ago=1)),
        run_lengths={"PyTorchJob": FIVE_HOURS},
    )

    (found,) = blockers(situation)

    assert found.estimate == (
        "estimate: about 3 h (median of the team's last 12 PyTorchJob runs: 5 h; "
        "the oldest holder started 2 h ago)"
    )
    assert found.estimate_seconds == 3 * 3600


def test_the_estimate_waits_for_as_many_holders_as_make_room():
    situation = replace(
        BASE,
        holders=(holder("a", 4, hours_ago=4), holder("c", 6, hours_ago=1)),
        run_lengths={"PyTorchJob": [timedelta(hours=h) for h in (4, 5, 6, 5, 5)]},
    )

    (found,) = blockers(situation)

    # a ends in 1 h (4 GPUs, not enough), c in 4 h: room for 8 then.
    assert found.estimate == (
        "estimate: about 4 h (median of the team's last 5 PyTorchJob runs: 5 h; "
        "research-ml/c started 1 h ago)"
    )


def test_a_holder_past_the_median_may_end_any_time():
    situation = replace(
        BASE, holders=(holder("b", 8, hours_ago=7),), run_lengths={"PyTorchJob": FIVE_HOURS}
    )

    (found,) = blockers(situation)

    assert found.estimate == (
        "estimate: any time now (median of the team's last 12 PyTorchJob runs: 5 h; "
        "research-ml/b has run 7 h, past that median)"
    )
    assert found.estimate_seconds == 0


@pytest.mark.parametrize(
    ("runs", "words"),
    [
        ({}, "no estimate: no finished runs of this kind recorded (PyTorchJob)"),
        (
            {"PyTorchJob": FIVE_HOURS[:2]},
            "no estimate: fewer than 3 finished runs recorded of PyTorchJob (2)",
        ),
        ({"Job": FIVE_HOURS}, "no estimate: no finished runs of this kind recorded (PyTorchJob)"),
    ],
)
def test_there_is_no_number_without_a_basis(runs, words):
    situation = replace(BASE, holders=(holder("b", 8, hours_ago=2),), run_lengths=runs)

    (found,) = blockers(situation)

    assert (found.estimate, found.estimate_seconds) == (words, None)


def test_only_the_newest_runs_count():
    runs = [timedelta(hours=1)] * 12 + [timedelta(hours=50)] * 20  # newest first
    situation = replace(
        BASE, holders=(holder("b", 8, hours_ago=0.5),), run_lengths={"PyTorchJob": runs}
    )

    (found,) = blockers(situation)

    assert found.estimate.startswith("estimate: about 30 min (median of the team's last 12")


@pytest.mark.parametrize(
    ("span", "words"),
    [
        (timedelta(seconds=20), "<1 min"),
        (timedelta(minutes=40), "40 min"),
        (timedelta(hours=2.5), "2.5 h"),
        (timedelta(hours=30), "30 h"),
        (timedelta(days=4), "4 d"),
    ],
)
def test_durations_read_as_people_say_them(span, words):
    assert duration_words(span) == words


def test_it_is_deterministic_and_never_empty():
    situation = replace(BASE, fair={GPU: D(64)}, cluster_in_use={GPU: D(505)})
    first = blockers(situation)
    assert first == blockers(situation)
    assert [b.kind for b in first] == ["team-limit", "fair-share", "cluster"]
    assert all(b.short_by > 0 and b.words and b.estimate for b in first)
    assert blockers(replace(BASE, wanted={}, requested={}))[0].kind == "scheduler"


# ---------------------------------------------------------------- waits per week


def test_waits_are_grouped_per_team_and_week_of_the_start():
    monday = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    waits = [
        StartedWait("b-team", monday, 60),
        StartedWait("a-team", monday, 600),
        StartedWait("a-team", monday + timedelta(days=6, hours=14), 0),  # Sunday 23:00
        StartedWait("a-team", monday + timedelta(days=7), 7200),  # the next Monday
        *(StartedWait("a-team", monday + timedelta(days=1), s) for s in (100, 200, 300)),
    ]

    assert weekly_waits(waits) == [
        WeekWaits("a-team", datetime(2026, 11, 30).date(), 1, 7200, 7200, 7200),
        WeekWaits("a-team", monday.date(), 5, 200, 600, 600),
        WeekWaits("b-team", monday.date(), 1, 60, 60, 60),
    ]


def test_percentiles_are_nearest_rank():
    assert percentile(list(range(1, 11)), 0.9) == 9
    assert percentile([5], 0.9) == 5
    assert week_start(datetime(2026, 11, 29, 23, 59, tzinfo=UTC)).isoformat() == "2026-11-23"
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_the_blocker_and_wait_modules_import_only_the_standard_library():
    code = (
        "import sys, monitoring.domain.blockers, monitoring.domain.waits; "
        "bad = [m for m in sys.modules if m.split('.')[0] in {'django', 'kubernetes', 'pynvml'}]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_the_worked_example_of_docs_waiting_md():
    situation = replace(
        BASE,
        holders=(holder("a", 4, hours_ago=4), holder("b", 8, hours_ago=2), holder("c", 2)),
        run_lengths={"PyTorchJob": FIVE_HOURS},
        pending=(PendingGrant(12, "research-team", {GPU: D(80)}),),
    )

    (found,) = blockers(situation)

    assert found.words == (
        "needs 8 more GPUs than research-team's 64-GPU limit allows: "
        "60 in use + 12 requested = 72 GPUs"
    )
    assert [r.words for r in found.remedies] == [
        "the team's running workload research-ml/b holds 8 GPUs; its end makes room",
        "request #12 awaits a decision: it raises research-team's limit to 80 GPUs, enough for it",
    ]
    assert found.estimate == (
        "estimate: about 3 h (median of the team's last 12 PyTorchJob runs: 5 h; "
        "research-ml/b started 2 h ago)"
    )
