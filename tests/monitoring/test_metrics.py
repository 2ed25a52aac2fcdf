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

from monitoring.models import GpuSample, IdleGpuAlert, UsageRollup, UsageSample
from portal.metrics import build_registry
from quotas.models import Budget, Membership, Namespace, Team, TeamQuota
from scheduling.models import ShareComputation, ShareSnapshot, SyncRun
from tests.base import make_user

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
        GpuSample.objects.create(
            taken_at=world - timedelta(seconds=10),
            node=f"node-{i}",
            uuid=f"GPU-extra-{i}",
            util_gpu=50,
            temp_c=60,
            namespace=f"extra-{i}-ml",
            pod="p",
            team=team,
        )
        Membership.objects.create(user=make_user(f"lead-{i}"), team=team, role="lead")

    with CaptureQueriesContext(connection) as after:
        list(build_registry().collect())

    # 17, plus budget use read through the chargeback report (budget_use: cut-off, budgets, and
    # the report's constant number of queries, which depends only on the clock: whether the month
    # so far has whole days, whole hours, and which database).
    assert len(after.captured_queries) == len(before.captured_queries) <= 24


# ---------------------------------------------------------------- per GPU

GIB = 2**30


def gpu_labels(**labels):
    return {"node": "", "gpu": "0", "uuid": "", "model": "", "namespace": "", "team": "", **labels}


def gpu_key(name, **labels):
    return (name, tuple(sorted(gpu_labels(**labels).items())))


@pytest.fixture
def gpus(cast):
    """Six GPUs: one used by team-a, one free, one in a namespace no team owns, a MIG device,
    one that stopped reporting three minutes ago, one whose newest sample is in the future."""
    now = timezone.now()
    h100 = "NVIDIA H100 80GB HBM3"

    def sample(uuid, ago, *, index=0, node="gpu-1", team=None, namespace="", **values):
        GpuSample.objects.create(
            taken_at=now - ago,
            node=node,
            uuid=uuid,
            index=index,
            model=h100,
            namespace=namespace,
            pod="train-0" if namespace else "",
            team=team,
            **values,
        )

    a = {"team": cast.team_a, "namespace": "team-a-ml"}
    sample(
        "GPU-a",
        timedelta(seconds=80),
        util_gpu=10,
        mem_used=8 * GIB,
        mem_total=80 * GIB,
        temp_c=40,
        **a,
    )
    sample(
        "GPU-a",
        timedelta(seconds=20),
        util_gpu=37,
        mem_used=60 * GIB,
        mem_total=80 * GIB,
        temp_c=71.5,
        **a,
    )
    sample(
        "GPU-free",
        timedelta(seconds=30),
        index=1,
        util_gpu=0,
        mem_used=0,
        mem_total=80 * GIB,
        temp_c=30,
    )
    sample("GPU-sandbox", timedelta(seconds=15), index=2, util_gpu=80, namespace="sandbox")
    sample(
        "MIG-1",
        timedelta(seconds=25),
        index=3,
        mem_used=5 * GIB,
        mem_total=10 * GIB,
        temp_c=50,
        **a,
    )
    sample("GPU-gone", timedelta(minutes=3), node="gpu-2", util_gpu=99, temp_c=99, **a)
    sample("GPU-later", timedelta(seconds=40), node="gpu-2", index=1, util_gpu=63, temp_c=60, **a)
    sample("GPU-later", -timedelta(seconds=30), node="gpu-2", index=1, util_gpu=1, temp_c=99, **a)
    return now


def test_it_exports_the_newest_sample_of_each_gpu_that_reported_recently(client, gpus):
    m = scrape(client)
    h100 = "NVIDIA H100 80GB HBM3"
    a = {"model": h100, "namespace": "team-a-ml", "team": "team-a"}
    gpu_a = {"node": "gpu-1", "gpu": "0", "uuid": "GPU-a", **a}
    later = {"node": "gpu-2", "gpu": "1", "uuid": "GPU-later", **a}
    mig = {"node": "gpu-1", "gpu": "3", "uuid": "MIG-1", **a}
    free = {"node": "gpu-1", "gpu": "1", "uuid": "GPU-free", "model": h100}
    sandbox = {"node": "gpu-1", "gpu": "2", "uuid": "GPU-sandbox", "model": h100}
    sandbox.update(namespace="sandbox", team="unassigned")
    util = "fairshare_gpu_device_utilization_percent"
    memory = "fairshare_gpu_device_memory_used_percent"
    temp = "fairshare_gpu_device_temperature_celsius"

    assert m[gpu_key(util, **gpu_a)] == 37
    assert m[gpu_key(memory, **gpu_a)] == 75
    assert m[gpu_key(temp, **gpu_a)] == 71.5
    assert m[gpu_key(util, **later)] == 63  # the sample after now is not read
    assert m[gpu_key(util, **free)] == 0
    assert m[gpu_key(memory, **free)] == 0
    assert m[gpu_key(util, **sandbox)] == 80
    assert gpu_key(temp, **sandbox) not in m  # not reported
    assert gpu_key(util, **mig) not in m  # MIG devices report no utilization
    assert m[gpu_key(memory, **mig)] == 50
    exported = {
        name: sorted(dict(labels)["uuid"] for n, labels in m if n == name)
        for name in (util, memory, temp)
    }
    assert exported == {
        util: ["GPU-a", "GPU-free", "GPU-later", "GPU-sandbox"],  # not GPU-gone
        memory: ["GPU-a", "GPU-free", "MIG-1"],
        temp: ["GPU-a", "GPU-free", "GPU-later", "MIG-1"],
    }


def test_it_exports_per_team_means_and_maxima(client, gpus):
    m = scrape(client)

    assert m[key("fairshare_gpus_reporting", team="team-a")] == 3
    assert m[key("fairshare_gpu_utilization_percent", team="team-a")] == 50  # (37 + 63) / 2
    assert m[key("fairshare_gpu_temperature_max_celsius", team="team-a")] == 71.5
    assert m[key("fairshare_gpu_memory_used_max_percent", team="team-a")] == 75
    assert m[key("fairshare_gpus_reporting", team="unassigned")] == 2  # free and sandbox
    assert m[key("fairshare_gpu_utilization_percent", team="unassigned")] == 40
    assert m[key("fairshare_gpu_temperature_max_celsius", team="unassigned")] == 30


def test_the_window_grows_with_a_long_agent_interval(client, gpus, settings):
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 120  # window: 2 × 2 minutes

    m = scrape(client)

    gone = {"node": "gpu-2", "uuid": "GPU-gone", "namespace": "team-a-ml", "team": "team-a"}
    assert (
        m[
            gpu_key(
                "fairshare_gpu_device_utilization_percent", model="NVIDIA H100 80GB HBM3", **gone
            )
        ]
        == 99
    )


def test_it_exports_each_teams_leads_and_page_and_each_namespaces_team(client, cast, settings):
    settings.FAIRSHARE_BASE_URL = "https://fairshare.example.com/"
    rita = make_user("rita")
    rita.email = ""
    rita.save()
    Membership.objects.create(user=rita, team=cast.team_a, role="lead")
    gone = make_user("gone")
    gone.is_active = False
    gone.save()
    Membership.objects.create(user=gone, team=cast.team_a, role="lead")
    Team.objects.create(slug="old", name="Old", tier=cast.tier, active=False)

    m = scrape(client)

    info = {dict(labels)["team"]: dict(labels) for n, labels in m if n == "fairshare_team_info"}
    assert info["team-a"] == {
        "team": "team-a",
        "name": "Team A",
        "leads": "alice@example.org, rita",
        "url": "https://fairshare.example.com/teams/team-a/",
    }
    assert info["team-b"]["leads"] == "charlie@example.org"
    assert info["dept-x"]["leads"] == "dora@example.org"
    assert "old" not in info
    assert m[key("fairshare_namespace_info", namespace="team-a-ml", team="team-a")] == 1
    assert m[key("fairshare_namespace_info", namespace="team-b-ml", team="team-b")] == 1


# ---------------------------------------------------------------- access


def test_without_a_token_only_direct_loopback_requests_get_in(client, db, settings):
    settings.FAIRSHARE_METRICS_TOKEN = ""

    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    proxied = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert proxied.status_code == 403


def test_in_production_loopback_alone_does_not_get_in(client, db, settings):
    """Issue 27: a sidecar proxy or any process of the pod is loopback; without
    FAIRSHARE_METRICS_LOOPBACK (off where cookies are secure) only the token gets in."""
    settings.FAIRSHARE_METRICS_TOKEN = ""
    settings.FAIRSHARE_METRICS_LOOPBACK = False
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 403


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
    # The GPU series' own namespace label survives the scrape.
    assert {"action": "labeldrop", "regex": "namespace"} in endpoint["relabelings"]


def rule_texts() -> tuple[dict[str, str], set[str], list[str]]:
    """The PrometheusRule's alerts {name: expr}, recorded names, and every expression and
    annotation (what names metrics)."""
    doc = yaml.safe_load((DEPLOY / "prometheusrule.yaml").read_text())
    assert doc["kind"] == "PrometheusRule"
    rules = [r for g in doc["spec"]["groups"] for r in g["rules"]]
    alerts = {r["alert"]: r["expr"] for r in rules if "alert" in r}
    recorded = {r["record"] for r in rules if "record" in r}
    texts = [r["expr"] for r in rules] + [
        text for r in rules for text in (r.get("annotations") or {}).values()
    ]
    return alerts, recorded, texts


def test_the_prometheus_rules_use_only_exported_metrics(client, world):
    rules, recorded, texts = rule_texts()
    exported = exported_names(client)

    assert {
        "FairshareIdleGpus",
        "FairshareQuotaNearlyExhausted",
        "FairshareSyncFailing",
        "FairshareSyncStale",
        "LowGPUUtilization",
        "HighGPUMemoryUsage",
        "HighGPUTemperature",
    } <= set(rules)
    assert "fairshare_idle_gpus" in rules["FairshareIdleGpus"]
    assert "0.95" in rules["FairshareQuotaNearlyExhausted"]
    used = {n for text in texts for n in re.findall(r"\bfairshare_\w+", text)}
    assert used <= exported, used - exported
    assert {
        "fairshare_gpu_device_utilization_percent",
        "fairshare_gpu_device_memory_used_percent",
        "fairshare_gpu_device_temperature_celsius",
        "fairshare_namespace_info",
        "fairshare_team_info",
    } <= used
    # Recorded series (level:metric:operation) are read only where a rule records them.
    read = {n for text in texts for n in re.findall(r"\bfairshare:\w+:\w+", text)}
    assert read <= recorded, read - recorded


def test_the_grafana_dashboard_uses_only_exported_metrics(client, world):
    doc = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    used = {n for expr in exprs for n in re.findall(r"\bfairshare_\w+", expr)}
    read = {n for expr in exprs for n in re.findall(r"\bfairshare:\w+:\w+", expr)}
    titles = [p["title"] for p in doc["panels"]]

    assert doc["uid"] == "fairshare-overview"
    assert len(doc["panels"]) >= 6
    assert used <= exported_names(client)
    assert read <= rule_texts()[1], read - rule_texts()[1]
    assert {
        "fairshare:gpu_utilization:percent",
        "fairshare:gpu_memory_used:percent",
        "fairshare:gpu_temperature:celsius",
    } <= read
    assert {"GPU utilization per GPU", "GPU memory used per GPU", "GPU temperature per GPU"} <= set(
        titles
    )


# ---------------------------------------------------------------- workloads


def test_it_exports_pending_workloads_and_gpus_per_team_and_queue(cast, client):
    from monitoring.models import Workload

    now = timezone.now()
    old = now - timedelta(minutes=1)
    for taken_at, team, name, queue, gpus, waiting in (
        (old, cast.team_a, "stale", "team-a", 64, True),  # an older collection: not counted
        (now, cast.team_a, "big", "team-a", 32, True),
        (now, cast.team_a, "small", "team-a", 8, True),
        (now, cast.team_a, "running", "team-a", 16, False),
        (now, cast.team_b, "web", "", 2, True),
        (now, None, "stray", "", 1, True),
    ):
        Workload.objects.create(
            taken_at=taken_at,
            team=team,
            namespace="ns",
            name=name,
            kind="PodGroup",
            queue=queue,
            gpus=gpus,
            waiting_gpus=gpus if waiting else 0,
            phase="Pending" if waiting else "Running",
            waiting=waiting,
        )

    values = scrape(client, REMOTE_ADDR="127.0.0.1")

    count = {k[1]: v for k, v in values.items() if k[0] == "fairshare_pending_workloads"}
    gpus = {k[1]: v for k, v in values.items() if k[0] == "fairshare_pending_workload_gpus"}
    assert count == {
        key("x", queue="team-a", team="team-a")[1]: 2,
        key("x", queue="", team="team-b")[1]: 1,
        key("x", queue="", team="unassigned")[1]: 1,
    }
    assert gpus[key("x", queue="team-a", team="team-a")[1]] == 40
    assert gpus[key("x", queue="", team="team-b")[1]] == 2
