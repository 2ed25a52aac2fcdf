"""The demo snapshot's workloads: running and waiting gangs, each with its reason in words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from monitoring.collection import collect_usage
from monitoring.models import Workload
from scheduling.services import compute_shares

DEMO = Path(__file__).resolve().parents[2] / "monitoring" / "fixtures" / "demo_cluster.json"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def demo(db, settings):
    call_command("seed_demo", "--quiet")
    settings.FAIRSHARE_CLUSTER = f"snapshot:{DEMO}"
    collect_usage(now=NOW - timedelta(minutes=1))
    compute_shares(trigger="demo", now=NOW - timedelta(seconds=30))
    collect_usage(now=NOW)
    return {(w.namespace, w.name): w for w in Workload.objects.filter(taken_at=NOW)}


def test_the_demo_has_running_and_waiting_gangs(demo):
    gangs = [w for w in demo.values() if w.kind == "VolcanoJob"]
    assert {w.waiting for w in gangs} == {True, False}
    running = demo[("prod-training", "foundation-70b")]
    assert (running.phase, running.gang_size, running.running, running.gpus) == (
        "Running",
        10,
        10,
        80,
    )
    assert running.queue == "production-team"


def test_a_demo_gang_waits_for_its_fair_share(demo):
    video = demo[("cv-vision", "video-pretrain")]
    assert (video.phase, video.gpus, video.wait_code) == ("Pending", 16, "fair-share")
    assert video.wait_reason == "waiting: cv-team's queue is at its fair allocation, 64 of 64 GPUs"


def test_a_demo_job_waits_for_its_namespace_quota(demo):
    refused = demo[("speech-asr", "asr-batch-eval")]
    assert (refused.kind, refused.pods, refused.wait_code) == ("Job", 0, "quota")
    assert refused.wait_reason == (
        "waiting: namespace speech-asr's ResourceQuota allows 48 GPUs, 38 are in use"
    )


def test_a_demo_gang_waits_for_its_queues_capability(demo):
    moe = demo[("research-ml", "moe-scale")]
    assert moe.wait_code == "capability"
    assert moe.wait_reason == (
        "waiting: research-team's queue would pass its capability, 56 of 64 GPUs in use, "
        "this needs 16"
    )


def test_unassigned_work_waits_with_the_schedulers_words(demo):
    reindex = demo[("shared-batch", "reindex")]
    assert reindex.team is None
    assert reindex.wait_code == "unschedulable"
    assert "1/1 tasks in gang unschedulable" in reindex.wait_reason


def test_demo_workload_ages_are_relative_to_the_demo_clock(demo):
    """The snapshot stands for the cluster at the collection's time (issue 29: the demo's
    workloads once read as created 13 months before the demo's clock)."""
    ages = sorted(NOW - w.created for w in demo.values() if w.created is not None)
    assert ages, "no workload has a creation time"
    assert timedelta(0) < ages[0] < timedelta(hours=1)  # a gang submitted minutes ago
    assert ages[-1] <= timedelta(days=30)  # the oldest: a month-long deployment
