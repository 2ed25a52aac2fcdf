"""Run Prometheus's own ``promtool`` on the rule groups of deploy/monitoring/prometheusrule.yaml.

``promtool`` comes from Debian's ``prometheus`` package (``.ci/run`` installs it). Tests that need
it are skipped, with that reason, only where it is absent.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILE = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"
PROMTOOL = shutil.which("promtool")

requires_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian package 'prometheus'; .ci/run installs it)",
)


def rule_groups() -> list[dict]:
    """The ``spec.groups`` of the PrometheusRule: a Prometheus rule file's ``groups``."""
    doc = yaml.safe_load(RULE_FILE.read_text())
    assert doc["kind"] == "PrometheusRule"
    return doc["spec"]["groups"]


def without_annotations(groups: Sequence[dict]) -> list[dict]:
    """The groups with the alerts' annotations removed (promtool compares annotations exactly;
    the threshold tests look at labels only, and one test checks the annotations)."""
    groups = copy.deepcopy(list(groups))
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return groups


def write_rules(directory: Path, groups: Sequence[dict]) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": list(groups)}, sort_keys=False))
    return path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=60, check=False
    )


def series(name: str, labels: Mapping[str, str], values: str) -> dict:
    """One ``input_series`` entry: ``name{label="value",...}`` and promtool's value notation."""
    body = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values}


def alert_test(
    directory: Path,
    *,
    groups: Sequence[dict],
    input_series: Sequence[dict],
    alerts: Sequence[dict],
    interval: str = "1m",
) -> subprocess.CompletedProcess:
    """Write ``groups`` and one promtool unit test, run ``promtool test rules`` and return it.

    ``alerts`` are ``alert_rule_test`` entries (``eval_time``, ``alertname``, ``exp_alerts``).
    """
    write_rules(directory, groups)
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": list(input_series),
                "alert_rule_test": list(alerts),
            }
        ],
    }
    (directory / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    return run("test", "rules", "test.yaml", cwd=directory)
