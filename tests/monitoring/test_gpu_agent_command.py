"""``manage.py gpu_agent``: a thin wrapper (exit codes, SIGTERM) and its DaemonSet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError

from monitoring.management.commands.gpu_agent import Command, run_agent
from tests.fakes import FakeDevice, FakeNvml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("fs_abcd_secret\n")
    return path


def args(token, *extra):
    return [
        "--api",
        "http://fairshare.test/api/v1/gpu-samples/",
        "--token-file",
        str(token),
        "--node",
        "gpu-node-1",
        *extra,
    ]


def test_it_runs_one_cycle_and_posts_the_batch(token):
    batches = []
    nvml = FakeNvml([FakeDevice(uuid="GPU-0", util_gpu=42)])

    code = run_agent(args(token, "--once"), nvml=nvml, post=batches.append)

    assert code == 0
    assert [(b["node"], [s["uuid"] for s in b["samples"]]) for b in batches] == [
        ("gpu-node-1", ["GPU-0"])
    ]
    assert batches[0]["samples"][0]["util_gpu"] == 42


def test_sigterm_stops_the_loop_cleanly(token):
    nvml = FakeNvml([FakeDevice(uuid="GPU-0")])
    previous = signal.getsignal(signal.SIGTERM)
    posted = []

    def post(batch):
        posted.append(batch)
        os.kill(os.getpid(), signal.SIGTERM)  # the kubelet stopping the pod

    code = run_agent(args(token, "--interval", "3600"), nvml=nvml, post=post)

    assert code == 0
    assert len(posted) == 1
    assert nvml.shutdowns == 1
    assert signal.getsignal(signal.SIGTERM) is previous


def test_the_command_object_raises_with_the_agents_exit_code(tmp_path):
    with pytest.raises(CommandError) as info:
        Command().handle(agent_args=args(tmp_path / "missing", "--once"))

    assert info.value.returncode == 2


def manage(*argv):
    return subprocess.run(
        [sys.executable, "manage.py", "gpu_agent", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line_passes_the_exit_code_through(tmp_path, token):
    missing = manage(*args(tmp_path / "missing", "--once"))
    bad = manage("--interval", "0")

    assert missing.returncode == 2
    assert "cannot read token file" in missing.stderr
    assert bad.returncode == 2
    assert "must be a positive number" in bad.stderr


def test_without_nvml_it_says_so_and_exits_non_zero(token):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")

    result = manage(*args(token, "--once"))

    assert result.returncode == 2
    assert "NVML is unavailable" in result.stderr


def test_help_lists_the_agents_options():
    result = manage("--help")

    assert result.returncode == 0
    assert "--token-file" in result.stdout


def test_the_daemonset_runs_the_agent_on_gpu_nodes_with_its_token():
    doc = yaml.safe_load((ROOT / "deploy" / "monitoring" / "gpu-agent-daemonset.yaml").read_text())
    pod = doc["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}

    assert (doc["apiVersion"], doc["kind"]) == ("apps/v1", "DaemonSet")
    assert pod["hostPID"] is True
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "manage.py gpu_agent" in container["args"][0]
    assert '--token-file "/var/run/fairshare/tokens/$NODE_NAME"' in container["args"][0]
    secret_volumes = [v for v in pod["volumes"] if "secret" in v]
    assert secret_volumes[0]["secret"]["secretName"] == "fairshare-gpu-agent-tokens"
    assert pod["automountServiceAccountToken"] is False
    assert (
        doc["spec"]["selector"]["matchLabels"].items()
        <= doc["spec"]["template"]["metadata"]["labels"].items()
    )
