"""What must change, on the demo and through the product: every waiting workload of the demo
says it in words with numbers, on the team page and in the workload API, and nobody is shown
another team's workloads."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from monitoring.collection import collect_usage
from monitoring.models import UsageSample, Workload
from monitoring.workloads import blocker_dicts, workload_blockers
from quotas.models import QuotaRequest, Team
from scheduling.services import compute_shares
from tests.base import GPU

DEMO = Path(__file__).resolve().parents[2] / "monitoring" / "fixtures" / "demo_cluster.json"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NUMBER = re.compile(r"\d")


@pytest.fixture
def demo(db, settings):
    call_command("seed_demo", "--quiet")
    settings.FAIRSHARE_CLUSTER = f"snapshot:{DEMO}"
    collect_usage(now=NOW - timedelta(minutes=1))
    compute_shares(trigger="demo", now=NOW - timedelta(seconds=30))
    collect_usage(now=NOW)
    rows = list(Workload.objects.filter(taken_at=NOW).select_related("team"))
    found = workload_blockers(rows, now=NOW)
    return {
        (w.namespace, w.name): (
            w,
            blocker_dicts(found.get(w.pk, ()), workload=w, team_slug=w.team.slug if w.team else ""),
        )
        for w in rows
    }


def test_every_waiting_demo_workload_says_what_must_change_with_numbers(demo):
    waiting = [(w, found) for w, found in demo.values() if w.waiting]
    assert len(waiting) >= 6
    for w, found in waiting:
        assert found, f"{w.namespace}/{w.name} has no explanation"
        for blocker in found:
            assert NUMBER.search(blocker["words"]), blocker["words"]
            assert blocker["remedies"], blocker
            assert blocker["estimate"], blocker
    running = [found for w, found in demo.values() if not w.waiting]
    assert running and not any(running)


def test_the_demo_gang_over_its_capability_is_eight_gpus_short(demo):
    _w, found = demo[("research-ml", "moe-scale")]
    first = found[0]
    assert (first["kind"], first["resource"], first["short_by"]) == ("team-limit", GPU, "8")
    assert first["words"] == (
        "needs 8 more GPUs than research-team's 64-GPU limit allows: "
        "56 in use + 16 requested = 72 GPUs"
    )
    release, approval = first["remedies"]
    assert release["workloads"] == ["research-ml/moe-ablation"]
    pending = QuotaRequest.objects.get(pk=approval["request"])
    assert (pending.team.slug, pending.status) == ("research-team", "pending")
    assert approval["url"] == f"/requests/{pending.pk}/"
    # No run of the demo has finished, so there is no basis for a number.
    assert first["estimate"].startswith("no estimate: no finished runs of this kind recorded")
    assert first["estimate_seconds"] is None


def test_the_demo_job_its_namespace_quota_refused_is_six_gpus_short(demo):
    w, found = demo[("speech-asr", "asr-batch-eval")]
    (blocker,) = found
    assert (blocker["kind"], blocker["short_by"]) == ("team-limit", "6")
    assert blocker["words"].startswith(
        "needs 6 more GPUs than namespace speech-asr's ResourceQuota of 48 GPUs"
    )
    request = blocker["remedies"][-1]
    assert request["url"] == f"/teams/speech-team/requests/new/?workload={w.pk}"


def test_the_team_page_shows_what_must_change_and_only_the_teams_own_work(demo):
    client = Client()
    client.force_login(
        Team.objects.get(slug="research-team").memberships.get(user__username="rita").user
    )

    page = client.get(reverse("portal:team", args=["research-team"])).content.decode()

    assert "needs 8 more GPUs than research-team&#x27;s 64-GPU limit allows" in page
    assert 'data-blocker="team-limit"' in page
    assert "Waits, per week" in page
    assert "cv-vision/" not in page and "video-pretrain" not in page


# ---------------------------------------------------------------- the workload API


@pytest.fixture
def contention(cast):
    """team-a holds 36 of its 40 GPUs, team-b 60 of 60; the cluster (100) has 4 free; each
    team has a gang of 8 waiting."""
    taken = timezone.now().replace(microsecond=0)
    for team, ns, held in ((cast.team_a, "team-a-ml", 36), (cast.team_b, "team-b-ml", 60)):
        UsageSample.objects.create(
            taken_at=taken, team=team, namespace=ns, resource=GPU, allocated=Decimal(held)
        )
        common = {"taken_at": taken, "team": team, "namespace": ns, "kind": "PyTorchJob"}
        common["queue"] = team.slug
        Workload.objects.create(
            **common,
            name=f"{team.slug}-run",
            gang_size=1,
            pods=1,
            running=1,
            requested={GPU: str(held)},
            gpus=held,
            phase="Running",
        )
        Workload.objects.create(
            **common,
            name=f"{team.slug}-gang",
            gang_size=1,
            pods=1,
            requested={GPU: "8"},
            gpus=8,
            waiting_for={GPU: "8"},
            waiting_gpus=8,
            phase="Pending",
            waiting=True,
            wait_code="capability",
        )
    return cast


def _workloads(user):
    client = Client()
    client.force_login(user)
    response = client.get("/api/v1/workloads/", {"waiting": "true"})
    assert response.status_code == 200
    return response.json()


def test_the_workload_api_says_what_must_change(contention):
    body = _workloads(contention.alice)
    (gang,) = body["results"]
    assert gang["name"] == "team-a-gang"
    assert [(b["kind"], b["short_by"]) for b in gang["blockers"]] == [
        ("team-limit", "4"),
        ("cluster", "4"),
    ]
    limit, cluster = gang["blockers"]
    assert limit["words"] == (
        "needs 4 more GPUs than team-a's 40-GPU limit allows: 36 in use + 8 requested = 44 GPUs"
    )
    assert limit["remedies"][0]["workloads"] == ["team-a-ml/team-a-run"]
    assert limit["remedies"][-1]["limit"] == "44"
    assert cluster["remedies"][-1]["words"].startswith(
        "other teams' running workloads hold 60 GPUs"
    )


def test_blockers_never_name_another_teams_workloads(contention):
    text = str(_workloads(contention.charlie))
    assert "team-b-gang" in text
    assert "team-a-run" not in text and "team-a-gang" not in text
    # team-b's cluster blocker counts team-a's 36 GPUs without naming them.
    assert "other teams' running workloads hold 36 GPUs" in text


def test_the_workload_api_costs_the_same_queries_for_more_workloads(contention):
    client = Client()
    client.force_login(contention.root)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/workloads/")
    taken = Workload.objects.values_list("taken_at", flat=True).first()
    for i in range(20):
        Workload.objects.create(
            taken_at=taken,
            team=contention.team_b,
            namespace="team-b-ml",
            kind="Job",
            name=f"more-{i}",
            queue="team-b",
            requested={GPU: "1"},
            gpus=1,
            waiting_for={GPU: "1"},
            waiting_gpus=1,
            phase="Pending",
            waiting=True,
        )
    with CaptureQueriesContext(connection) as many:
        client.get("/api/v1/workloads/")
    assert len(many.captured_queries) == len(few.captured_queries)


def test_only_those_who_may_file_a_request_get_the_prefilled_request_link(demo):
    """A lead gets the link to the prefilled request form; a member or viewer, who would get 403
    there (scripts/walk_demo.py found it), the words without the link."""
    team = Team.objects.get(slug="research-team")
    url = reverse("portal:team", args=["research-team"])
    pages = {}
    for username in ("rita", "mike", "vera"):
        client = Client()
        client.force_login(team.memberships.get(user__username=username).user)
        pages[username] = client.get(url).content.decode()
        assert 'data-blocker="team-limit"' in pages[username]
    assert "/teams/research-team/requests/new/?workload=" in pages["rita"]
    for username in ("mike", "vera"):
        assert "/teams/research-team/requests/new/?workload=" not in pages[username]
        assert "(a team lead can file it)" in pages[username]
