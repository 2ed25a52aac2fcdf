"""/metrics: content, constant query count, access rule; the Prometheus deploy files."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from monitoring.metrics import build_registry
from monitoring.models import GpuSample, IdleGpuAlert, UsageRollup, UsageSample
from quotas.models import Budget, Namespace, Team, TeamQuota
from scheduling.models import ShareComputation, ShareSnapshot, SyncRun

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "monitoring"
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


def scrape(client, **extra) -> dict:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return parse(response.content.decode())


def parse(text: str) -> dict:
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def key(name, **labels):
    return (name, tuple(sorted(labels.items())))


@pytest.fixture
def world(cast):
    now = timezone.now()
    taken = now - timedelta(seconds=40)
    for team, ns, resource, flavor, allocated, pending in (
        (cast.team_a, "team-a-ml", GPU, H100, 12, 0),
        (cast.team_a, "team-a-ml", GPU, "", 0, 4),
        (cast.team_a, "team-a-ml", "cpu", "", Decimal("2.5"), 0),
        (None, "sandbox", GPU, H100, 1, 0),
    ):
        UsageSample.objects.create(
            taken_at=taken,
            team=team,
            namespace=ns,
            resource=resource,
            flavor=flavor,
            allocated=Decimal(allocated),
            pending=Decimal(pending),
        )
    UsageSample.objects.create(  # an older collection: not reported
        taken_at=taken - timedelta(minutes=1),
        team=cast.team_b,
        namespace="team-b-ml",
        resource=GPU,
        allocated=Decimal(50),
    )
    computation = ShareComputation.objects.create(computed_at=now - timedelta(minutes=3))
    old = ShareComputation.objects.create(computed_at=now - timedelta(hours=1))
    ShareSnapshot.objects.create(
        computation=computation,
        computed_at=computation.computed_at,
        team=cast.team_a,
        dominant_share=0.12,
        dominant_resource=GPU,
        fair_share=0.25,
        fair_allocation={GPU: "25", "cpu": "100"},
    )
    ShareSnapshot.objects.create(
        computation=old,
        computed_at=old.computed_at,
        team=cast.team_b,
        dominant_share=0.9,
    )
    for uuid, util, team in (("GPU-0", 80, cast.team_a), ("GPU-1", 20, cast.team_a)):
        GpuSample.objects.create(
            taken_at=now - timedelta(minutes=1), node="n", uuid=uuid, util_gpu=0, team=team
        )
        GpuSample.objects.create(
            taken_at=now - timedelta(seconds=30), node="n", uuid=uuid, util_gpu=util, team=team
        )
    IdleGpuAlert.objects.create(
        team=cast.team_b, gpus=3, started_at=now, last_seen_at=now, pod="p", namespace="team-b-ml"
    )
    IdleGpuAlert.objects.create(
        team=cast.team_b, gpus=5, started_at=now, last_seen_at=now, status="resolved"
    )
    Budget.objects.create(team=cast.team_a, resource=GPU, monthly_hours=Decimal(1000))
    UsageRollup.objects.create(
        period="hour",
        start=now.replace(day=1, hour=0, minute=0, second=0, microsecond=0),
        team=cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        flavor=H100,
        allocated_hours=Decimal("123.5"),
    )
    SyncRun.objects.create(
        status="succeeded", finished_at=now - timedelta(minutes=20), trigger="schedule"
    )
    SyncRun.objects.create(status="failed", finished_at=now - timedelta(minutes=10))
    SyncRun.objects.create(status="succeeded", dry_run=True, finished_at=now)
    return now


def test_it_exports_quota_usage_shares_gpus_budgets_and_sync(client, world):
    m = scrape(client)

    assert m[key("fairshare_quota_guarantee", team="team-a", resource=GPU)] == 20
    assert m[key("fairshare_quota_limit", team="team-b", resource=GPU)] == 60
    assert m[key("fairshare_allocated", team="team-a", resource=GPU)] == 12
    assert m[key("fairshare_pending", team="team-a", resource=GPU)] == 4
    assert m[key("fairshare_allocated", team="team-a", resource="cpu")] == 2.5
    assert m[key("fairshare_allocated", team="unassigned", resource=GPU)] == 1
    assert key("fairshare_allocated", team="team-b", resource=GPU) not in m
    assert m[key("fairshare_cluster_capacity", resource=GPU)] == 100
    assert m[key("fairshare_dominant_share", team="team-a", resource=GPU)] == 0.12
    assert m[key("fairshare_fair_share", team="team-a")] == 0.25
    assert m[key("fairshare_fair_allocation", team="team-a", resource=GPU)] == 25
    assert key("fairshare_dominant_share", team="team-b", resource="") not in m
    assert m[key("fairshare_gpu_utilization_percent", team="team-a")] == 50
    assert m[key("fairshare_gpus_reporting", team="team-a")] == 2
    assert m[key("fairshare_idle_gpus", team="team-b")] == 3
    assert m[key("fairshare_budget_hours", team="team-a", resource=GPU)] == 1000
    assert m[key("fairshare_budget_used_hours", team="team-a", resource=GPU)] == 123.5
    assert m[key("fairshare_sync_success")] == 0
    assert m[key("fairshare_sync_age_seconds")] == pytest.approx(600, abs=30)
    last_ok = m[key("fairshare_sync_last_success_timestamp_seconds")]
    assert last_ok == pytest.approx((world - timedelta(minutes=20)).timestamp(), abs=1)


def test_it_exports_empty_families_on_a_fresh_install(client, db):
    m = scrape(client)

    assert key("fairshare_sync_success") not in m
    assert not [k for k in m if k[0] == "fairshare_allocated"]


def test_a_scrape_runs_the_same_number_of_queries_for_more_teams(world, cast):
    with CaptureQueriesContext(connection) as before:
        list(build_registry().collect())
    for i in range(5):
        team = Team.objects.create(slug=f"extra-{i}", name=f"Extra {i}", tier=cast.tier)
        Namespace.objects.create(name=f"extra-{i}-ml", team=team)
        TeamQuota.objects.create(team=team, resource=GPU, guarantee=1, limit=2)
        Budget.objects.create(team=team, resource=GPU, monthly_hours=10)
        UsageSample.objects.create(
            taken_at=UsageSample.objects.latest("taken_at").taken_at,
            team=team,
            namespace=f"extra-{i}-ml",
            resource=GPU,
            allocated=1,
        )

    with CaptureQueriesContext(connection) as after:
        list(build_registry().collect())

    assert len(after.captured_queries) == len(before.captured_queries) == 13


# ---------------------------------------------------------------- access


def test_without_a_token_only_direct_loopback_requests_get_in(client, db, settings):
    settings.FAIRSHARE_METRICS_TOKEN = ""

    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    proxied = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert proxied.status_code == 403


def test_with_a_token_only_the_bearer_gets_in(client, db, settings):
    settings.FAIRSHARE_METRICS_TOKEN = "s3cret-token"

    ok = client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer s3cret-token")
    missing = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-tokeX")
    basic = client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-token")

    assert ok.status_code == 200
    assert b"fairshare_quota_guarantee" in ok.content
    assert [missing.status_code, wrong.status_code, basic.status_code] == [401, 401, 401]
    assert missing["WWW-Authenticate"] == 'Bearer realm="fairshare-metrics"'


def test_metrics_only_answers_get(client, db):
    assert client.post("/metrics").status_code == 405


# ---------------------------------------------------------------- deploy files


def exported_names(client) -> set[str]:
    text = client.get("/metrics").content.decode()
    return set(re.findall(r"^# TYPE (\w+) ", text, re.M))


def test_the_service_monitor_scrapes_metrics_with_the_token():
    doc = yaml.safe_load((DEPLOY / "servicemonitor.yaml").read_text())

    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    endpoint = doc["spec"]["endpoints"][0]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["type"] == "Bearer"


def test_the_prometheus_rules_use_only_exported_metrics(client, world):
    doc = yaml.safe_load((DEPLOY / "prometheusrule.yaml").read_text())
    rules = {r["alert"]: r["expr"] for g in doc["spec"]["groups"] for r in g["rules"]}
    exported = exported_names(client)

    assert doc["kind"] == "PrometheusRule"
    assert {
        "FairshareIdleGpus",
        "FairshareQuotaNearlyExhausted",
        "FairshareSyncFailing",
        "FairshareSyncStale",
    } <= set(rules)
    assert "fairshare_idle_gpus" in rules["FairshareIdleGpus"]
    assert "0.95" in rules["FairshareQuotaNearlyExhausted"]
    used = {n for expr in rules.values() for n in re.findall(r"\bfairshare_\w+", expr)}
    assert used <= exported, used - exported


def test_the_grafana_dashboard_uses_only_exported_metrics(client, world):
    doc = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    used = {n for expr in exprs for n in re.findall(r"\bfairshare_\w+", expr)}

    assert doc["uid"] == "fairshare-overview"
    assert len(doc["panels"]) >= 6
    assert used <= exported_names(client)
