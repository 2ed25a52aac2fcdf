"""The PrometheusRule's GPU alerts, checked and unit-tested by Prometheus's own promtool.

Each alert fires on input series over its threshold for its ``for:``, and does not fire just
under the threshold, exactly at it, or before ``for:`` has passed; for both sources the
recording rules map (Fairshare's node agent, NVIDIA's DCGM exporter). The thresholds are the
source documents' as written, and the same as :mod:`monitoring.domain.gpu_alerts`.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

import portal.views.metrics
from monitoring.domain import gpu_alerts
from monitoring.gpu_alerts import current_gpu_alerts
from monitoring.ingest import ingest_gpu_batch
from portal.metrics import build_registry
from tests.monitoring.gpu_inventory import node_object, place, pod_object
from tests.monitoring.promtool import (
    alert_test,
    requires_promtool,
    rule_groups,
    run,
    series,
    without_annotations,
    write_rules,
)

pytestmark = requires_promtool

UTIL = "fairshare_gpu_device_utilization_percent"
MEM = "fairshare_gpu_device_memory_used_percent"
TEMP = "fairshare_gpu_device_temperature_celsius"
GPU0 = {
    "node": "gpu-node-1",
    "gpu": "0",
    "uuid": "GPU-0aa1",
    "model": "NVIDIA H100 80GB HBM3",
    "namespace": "team-a-ml",
    "team": "team-a",
}
SCRAPE = {"instance": "10.0.0.7:8000", "job": "fairshare"}
ALERT = {"LowGPUUtilization", "HighGPUMemoryUsage", "HighGPUTemperature"}


def steady(value: float, minutes: int) -> str:
    """``value`` every minute from 0 to ``minutes`` (promtool's expanding notation)."""
    return f"{value}+0x{minutes}"


def fired(alert: str, labels: dict, *, source: str = "fairshare") -> dict:
    rule = gpu_alerts.RULES_BY_NAME[alert]
    return {"exp_labels": {**labels, "severity": rule.severity, "source": source}}


def check(tmp_path, input_series, alertname, eval_time, expected):
    result = alert_test(
        tmp_path,
        groups=without_annotations(rule_groups()),
        input_series=input_series,
        alerts=[{"eval_time": eval_time, "alertname": alertname, "exp_alerts": expected}],
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- the rule file


def test_promtool_accepts_the_rule_groups(tmp_path):
    path = write_rules(tmp_path, rule_groups())

    result = run("check", "rules", str(path), cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rejects_a_broken_rule(tmp_path):
    # The check above can fail: a rule with a syntax error is refused.
    groups = rule_groups()
    groups[0]["rules"][0]["expr"] = "max by (node (fairshare_gpu_device_utilization_percent)"
    path = write_rules(tmp_path, groups)

    result = run("check", "rules", str(path), cwd=tmp_path)

    assert result.returncode != 0


def _alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


def test_the_documents_thresholds_appear_as_written():
    alerts = _alerts()

    assert alerts["LowGPUUtilization"]["expr"].strip().endswith("< 50")
    assert alerts["LowGPUUtilization"]["for"] == "10m"
    assert alerts["LowGPUUtilization"]["labels"]["severity"] == "warning"
    assert alerts["HighGPUMemoryUsage"]["expr"].strip().endswith("> 95")
    assert alerts["HighGPUMemoryUsage"]["labels"]["severity"] == "warning"
    assert alerts["HighGPUTemperature"]["expr"].strip().endswith("> 85")
    assert alerts["HighGPUTemperature"]["labels"]["severity"] == "critical"
    assert "FairshareIdleGpus" in alerts  # the idle-GPU alert stays


@pytest.mark.parametrize("rule", gpu_alerts.GPU_ALERT_RULES, ids=lambda r: r.alert)
def test_the_team_page_uses_the_rule_files_thresholds(rule):
    alert = _alerts()[rule.alert]
    op, threshold = re.search(r"([<>])\s*([\d.]+)\s*$", alert["expr"].strip()).groups()
    minutes = int(alert["for"].removesuffix("m"))

    assert (op, float(threshold)) == (rule.op, rule.threshold)
    assert minutes * 60 == rule.for_.total_seconds()
    assert alert["labels"]["severity"] == rule.severity


# ---------------------------------------------------------------- Fairshare's node agent


@pytest.mark.parametrize(
    ("values", "eval_time", "fires"),
    [
        (steady(49, 11), "11m", True),  # 49 % for 11 minutes
        (steady(49, 11), "10m", True),  # for: 10m is met at 10 minutes
        (steady(49, 9), "9m", False),  # 49 % for 9 minutes: still pending
        (steady(51, 60), "60m", False),  # 51 % for an hour
        (steady(50, 60), "60m", False),  # exactly 50 % is not under 50
        ("49+0x4 60 49+0x10", "15m", False),  # one reading at 60 % restarts the 10 minutes
        ("49+0x4 60 49+0x10", "16m", True),
    ],
)
def test_low_utilization_fires_under_50_for_10_minutes(tmp_path, values, eval_time, fires):
    expected = [fired("LowGPUUtilization", GPU0)] if fires else []

    check(
        tmp_path,
        [series(UTIL, {**GPU0, **SCRAPE}, values)],
        "LowGPUUtilization",
        eval_time,
        expected,
    )


@pytest.mark.parametrize(
    "labels",
    [
        {**GPU0, "team": "unassigned"},  # a pod in a namespace no team owns
        {k: v for k, v in GPU0.items() if k not in ("namespace", "team")},  # no pod at all
    ],
    ids=["unassigned-namespace", "free-gpu"],
)
def test_low_utilization_ignores_gpus_no_teams_pod_uses(tmp_path, labels):
    check(
        tmp_path,
        [series(UTIL, {**labels, **SCRAPE}, steady(3, 30))],
        "LowGPUUtilization",
        "30m",
        [],
    )


def test_a_new_namespace_on_the_gpu_is_a_new_series(tmp_path):
    # The GPU moved to another team's pod at minute 5: its 10 minutes start again.
    other = {**GPU0, "namespace": "team-b-ml", "team": "team-b"}
    input_series = [
        series(UTIL, {**GPU0, **SCRAPE}, "49+0x4 stale"),
        series(UTIL, {**other, **SCRAPE}, "_x5 49+0x11"),
    ]

    check(tmp_path, input_series, "LowGPUUtilization", "14m", [])
    check(tmp_path, input_series, "LowGPUUtilization", "15m", [fired("LowGPUUtilization", other)])


def test_two_web_replicas_serving_the_same_gpu_alert_once(tmp_path):
    input_series = [
        series(UTIL, {**GPU0, "instance": "10.0.0.7:8000", "job": "fairshare"}, steady(20, 12)),
        series(UTIL, {**GPU0, "instance": "10.0.0.8:8000", "job": "fairshare"}, steady(20, 12)),
    ]

    check(tmp_path, input_series, "LowGPUUtilization", "12m", [fired("LowGPUUtilization", GPU0)])


@pytest.mark.parametrize(
    ("values", "eval_time", "fires"),
    [
        (steady(96, 6), "6m", True),
        (steady(96, 4), "4m", False),  # before for: 5m
        (steady(95, 60), "60m", False),  # exactly 95 % is not over 95
        (steady(94.9, 60), "60m", False),
    ],
)
def test_memory_fires_over_95_percent(tmp_path, values, eval_time, fires):
    expected = [fired("HighGPUMemoryUsage", GPU0)] if fires else []

    check(
        tmp_path,
        [series(MEM, {**GPU0, **SCRAPE}, values)],
        "HighGPUMemoryUsage",
        eval_time,
        expected,
    )


@pytest.mark.parametrize(
    ("values", "eval_time", "fires"),
    [
        (steady(86, 3), "3m", True),
        (steady(86, 1), "1m", False),  # before for: 2m
        (steady(85, 60), "60m", False),  # exactly 85 °C is not over 85
    ],
)
def test_temperature_fires_over_85_degrees(tmp_path, values, eval_time, fires):
    expected = [fired("HighGPUTemperature", GPU0)] if fires else []

    check(
        tmp_path,
        [series(TEMP, {**GPU0, **SCRAPE}, values)],
        "HighGPUTemperature",
        eval_time,
        expected,
    )


def test_memory_and_temperature_alert_on_free_gpus_too(tmp_path):
    free = {k: v for k, v in GPU0.items() if k not in ("namespace", "team")}

    check(
        tmp_path,
        [series(TEMP, {**free, **SCRAPE}, steady(90, 5))],
        "HighGPUTemperature",
        "5m",
        [fired("HighGPUTemperature", free)],
    )


# ---------------------------------------------------------------- NVIDIA DCGM exporter

DCGM = {
    "gpu": "0",
    "UUID": "GPU-0aa1",
    "device": "nvidia0",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "gpu-node-1",
    "pci_bus_id": "00000000:31:00.0",
    "namespace": "team-a-ml",
    "pod": "train-0",
    "container": "trainer",
    "instance": "10.0.3.4:9400",
    "job": "dcgm-exporter",
}
NAMESPACES = [
    series(
        "fairshare_namespace_info",
        {"namespace": "team-a-ml", "team": "team-a", **SCRAPE},
        steady(1, 60),
    ),
    series(
        "fairshare_namespace_info",
        {"namespace": "team-b-ml", "team": "team-b", **SCRAPE},
        steady(1, 60),
    ),
]


def test_dcgm_utilization_fires_with_the_namespaces_team(tmp_path):
    input_series = [series("DCGM_FI_DEV_GPU_UTIL", DCGM, steady(49, 11)), *NAMESPACES]

    check(tmp_path, input_series, "LowGPUUtilization", "9m", [])
    check(
        tmp_path,
        input_series,
        "LowGPUUtilization",
        "11m",
        [fired("LowGPUUtilization", GPU0, source="dcgm")],
    )


def test_dcgm_labels_renamed_by_the_scrape_are_mapped(tmp_path):
    # Without honorLabels the workload's namespace is exported_namespace; kubernetes_node (a
    # relabeling of the pod's node name) wins over the exporter's Hostname (its pod name).
    labels = {
        **DCGM,
        "Hostname": "nvidia-dcgm-exporter-x7k2p",
        "kubernetes_node": "gpu-node-1",
        "namespace": "gpu-operator",
        "exported_namespace": "team-a-ml",
    }

    check(
        tmp_path,
        [series("DCGM_FI_DEV_GPU_UTIL", labels, steady(20, 12)), *NAMESPACES],
        "LowGPUUtilization",
        "12m",
        [fired("LowGPUUtilization", GPU0, source="dcgm")],
    )


def test_dcgm_gpus_outside_fairshares_namespaces_get_no_team(tmp_path):
    labels = {**DCGM, "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p"}
    no_team = {**GPU0, "namespace": "gpu-operator"}
    del no_team["team"]
    input_series = [
        series("DCGM_FI_DEV_GPU_UTIL", labels, steady(0, 30)),
        series("DCGM_FI_DEV_GPU_TEMP", labels, steady(88, 30)),
        *NAMESPACES,
    ]

    check(tmp_path, input_series, "LowGPUUtilization", "30m", [])
    check(
        tmp_path,
        input_series,
        "HighGPUTemperature",
        "30m",
        [fired("HighGPUTemperature", no_team, source="dcgm")],
    )


@pytest.mark.parametrize(
    ("used", "free", "fires"),
    [(77_660, 2_020, True), (75_696, 3_984, False)],  # 97.5 % and exactly 95 % of 79,680 MiB
)
def test_dcgm_memory_is_used_over_used_plus_free(tmp_path, used, free, fires):
    input_series = [
        series("DCGM_FI_DEV_FB_USED", DCGM, steady(used, 10)),
        series("DCGM_FI_DEV_FB_FREE", DCGM, steady(free, 10)),
        *NAMESPACES,
    ]
    expected = [fired("HighGPUMemoryUsage", GPU0, source="dcgm")] if fires else []

    check(tmp_path, input_series, "HighGPUMemoryUsage", "10m", expected)


def test_a_gpu_both_sources_report_alerts_once_from_the_agent(tmp_path):
    input_series = [
        series("DCGM_FI_DEV_GPU_TEMP", DCGM, steady(90, 5)),
        series(TEMP, {**GPU0, **SCRAPE}, steady(90, 5)),
        *NAMESPACES,
    ]

    check(tmp_path, input_series, "HighGPUTemperature", "5m", [fired("HighGPUTemperature", GPU0)])


# ---------------------------------------------------------------- annotations


def test_the_alerts_carry_the_team_and_how_to_reach_its_leads(tmp_path):
    team = {
        "team": "team-a",
        "name": "Team A",
        "leads": "alice@example.org, rita@example.org",
        "url": "https://fairshare.example.com/teams/team-a/",
    }
    result = alert_test(
        tmp_path,
        groups=rule_groups(),
        input_series=[
            series(UTIL, {**GPU0, **SCRAPE}, steady(42, 12)),
            series("fairshare_team_info", {**team, **SCRAPE}, steady(1, 12)),
        ],
        alerts=[
            {
                "eval_time": "12m",
                "alertname": "LowGPUUtilization",
                "exp_alerts": [
                    {
                        **fired("LowGPUUtilization", GPU0),
                        "exp_annotations": {
                            "summary": "GPU utilization under 50 % for 10 minutes: team-a, "
                            "gpu-node-1 GPU 0",
                            "description": "GPU 0 (NVIDIA H100 80GB HBM3, GPU-0aa1) on node "
                            "gpu-node-1, used in namespace team-a-ml, has been under 50 % "
                            "utilization for 10 minutes (now 42 %). The workload may be starved "
                            "for input or use too small a batch; ask the team whether it needs "
                            "this many GPUs. (Under 10 % for 30 minutes is FairshareIdleGpus, a "
                            "reclaim suggestion.)",
                            "team": "team-a",
                            "team_name": "Team A",
                            "leads": "alice@example.org, rita@example.org",
                            "team_url": "https://fairshare.example.com/teams/team-a/",
                        },
                    }
                ],
            }
        ],
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_every_gpu_alert_names_the_team_its_leads_and_page():
    for name in ALERT:
        annotations = _alerts()[name]["annotations"]
        assert {"summary", "description", "team", "team_name", "leads", "team_url"} <= set(
            annotations
        ), name
        assert "fairshare_team_info" in annotations["leads"]


# ---------------------------------------------------------------- /metrics → promtool


def _agent_batches(now) -> dict[str, dict]:
    """What the node agents post: five GPUs on gpu-1, one per alert, one healthy and one free."""
    plan = [  # index, alert, used by a pod of team-a-ml
        (0, "LowGPUUtilization", True),
        (1, "HighGPUMemoryUsage", True),
        (2, "HighGPUTemperature", True),
        (3, None, True),
        (4, None, False),
    ]
    samples = []
    for index, alert, used in plan:
        for row in gpu_alerts.tripping_readings(alert, now=now):
            processes = (
                [{"pid": 4242, "namespace": "team-a-ml", "pod": f"train-{index}", "mem_used": 1}]
                if used
                else []
            )
            samples.append(
                {
                    "ts": row["taken_at"].isoformat(),
                    "uuid": f"GPU-{index}",
                    "index": index,
                    "model": "NVIDIA H100 80GB HBM3",
                    "util_gpu": row["util_gpu"],
                    "util_mem": 10,
                    "mem_used": row["mem_used"],
                    "mem_total": row["mem_total"],
                    "power_w": 300.0,
                    "temp_c": row["temp_c"],
                    "processes": processes,
                }
            )
    return {"gpu-1": {"node": "gpu-1", "agent": {"version": "0.1.0"}, "samples": samples}}


def _scrape_every_minute(client, monkeypatch, *, start, minutes: int) -> dict:
    """GET /metrics once a minute from ``start``; return {(name, labels): [value or None]}."""
    scraped: dict = {}
    for k in range(minutes + 1):
        moment = start + timedelta(minutes=k)
        monkeypatch.setattr(
            portal.views.metrics, "build_registry", lambda m=moment: build_registry(now=lambda: m)
        )
        response = client.get("/metrics")
        assert response.status_code == 200
        for family in text_string_to_metric_families(response.content.decode()):
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                scraped.setdefault(key, [None] * (minutes + 1))[k] = s.value
    return scraped


def test_the_scraped_metrics_fire_each_alert(client, cast, tmp_path, monkeypatch):
    """Agent samples → ingest → /metrics scraped every minute → promtool input series: the
    rules read the names and labels the app exports, and fire as the team page says."""
    now = timezone.now().replace(microsecond=0)
    # The collection that places the GPUs and their pods (ingest trusts only the cluster).
    place(
        [node_object("gpu-1", gpus=5)],
        [pod_object("gpu-1", "team-a-ml", f"train-{i}") for i in range(4)],
        now=now - timedelta(minutes=13),
    )
    for node, batch in _agent_batches(now).items():
        result = ingest_gpu_batch(token_node=node, batch=batch, now=now)
        assert result.accepted == len(batch["samples"]) and not result.rejected_reasons
    scraped = _scrape_every_minute(
        client, monkeypatch, start=now - timedelta(minutes=12), minutes=12
    )
    input_series = [
        series(
            name,
            {**dict(labels), **SCRAPE},
            " ".join("_" if v is None else repr(float(v)) for v in values),
        )
        for (name, labels), values in sorted(scraped.items())
    ]
    assert {s["series"].split("{")[0] for s in input_series} >= {UTIL, MEM, TEMP}
    # Keep the annotations that come from /metrics (fairshare_team_info); the texts are tested
    # above.
    groups = rule_groups()
    for group in groups:
        for rule in group["rules"]:
            for text in ("summary", "description"):
                rule.get("annotations", {}).pop(text, None)
    team = {
        "team": "team-a",
        "team_name": "Team A",
        "leads": "alice@example.org",
        # fairshare_team_info{url}: the team page under FAIRSHARE_BASE_URL (absolute).
        "team_url": settings.FAIRSHARE_BASE_URL.rstrip("/") + "/teams/team-a/",
    }

    def on(index: int, alert: str) -> dict:
        labels = {
            **GPU0,
            "node": "gpu-1",
            "gpu": str(index),
            "uuid": f"GPU-{index}",
            "severity": gpu_alerts.RULES_BY_NAME[alert].severity,
            "source": "fairshare",
        }
        return {"exp_labels": labels, "exp_annotations": team}

    expected = {"LowGPUUtilization": 0, "HighGPUMemoryUsage": 1, "HighGPUTemperature": 2}
    result = alert_test(
        tmp_path,
        groups=groups,
        input_series=input_series,
        alerts=[
            {"eval_time": "12m", "alertname": name, "exp_alerts": [on(index, name)]}
            for name, index in expected.items()
        ]
        # A minute or more before each for: has passed, nothing fires.
        + [{"eval_time": "10m", "alertname": name, "exp_alerts": []} for name in expected],
    )

    assert result.returncode == 0, result.stdout + result.stderr
    page = current_gpu_alerts(team=cast.team_a, now=now)
    assert sorted((a.alert, a.uuid) for a in page) == sorted(
        (name, f"GPU-{index}") for name, index in expected.items()
    )
