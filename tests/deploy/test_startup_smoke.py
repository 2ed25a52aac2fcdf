"""Start-up smoke from the manifests themselves: the rendered web (its init container first),
worker, beat and watcher containers' command, args and environment (the generated ConfigMap
plus a test Secret with the keys deploy/README.md documents) run as local processes against
PostgreSQL and Redis. Then the probes answer as the kubelet calls them, /metrics answers a
scrape as Prometheus makes it (Host: the pod IP, the ServiceMonitor's bearer token), the
worker answers its liveness command, beat and the watcher stay up, and the GPU node agent's
own code delivers a batch to its ingest URL from the DaemonSet (Host: the Service's name).

What differs from a pod, and only that: gunicorn binds 127.0.0.1 on a free port (and runs one
worker process), and FAIRSHARE_CLUSTER points at the fake API server (``in-cluster`` needs a
pod's service-account files); the GPU agent reads a fake NVML. No container runtime is needed.
"""

from __future__ import annotations

import http.client
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from monitoring.collectors import agent
from tests.fakes import FakeDevice, FakeNvml

from .manifests import ROOT, config_map, kustomize, monitoring
from .test_wiring import documented_keys

pytestmark = pytest.mark.slow
POD_IP = "10.244.3.17"
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smoke_database():
    """A database of its own (``<the test run's database>_smoke``), dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("the start-up smoke runs on PostgreSQL (DATABASE_URL)")
    parts = urlsplit(url)
    name = (parts.path.lstrip("/") or "postgres") + "_smoke"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def containers_by_workload(docs: list[dict]) -> dict[str, dict]:
    found = {}
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []):
            found[f"{doc['metadata']['name']}/init/{container['name']}"] = container
        for container in spec["containers"]:
            found[f"{doc['metadata']['name']}/{container['name']}"] = container
    return found


def executable(argv: list[str]) -> list[str]:
    """The image's PATH has the project's console scripts and python; here they are in .venv."""
    head = argv[0]
    if head == "python":
        return [sys.executable, *argv[1:]]
    if (VENV_BIN / head).exists():
        return [str(VENV_BIN / head), *argv[1:]]
    return argv


class Processes:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.logs / f"{name.replace('/', '_')}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            executable(argv), env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
        self.running[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name.replace('/', '_')}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.running.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def get(port: int, path: str, host: str, headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host, **(headers or {})})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s ({last})")


def test_the_rendered_containers_start_and_answer(smoke_database, kubeapi, tmp_path, monkeypatch):
    docs = kustomize(ROOT / "deploy")
    containers = containers_by_workload(docs)
    secret = {
        "SECRET_KEY": "smoke-test-secret-key-" + "x" * 40,
        "DATABASE_URL": smoke_database,
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"),
        "REDIS_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"),
        "FAIRSHARE_METRICS_TOKEN": "smoke-scrape-token",
    }
    assert set(secret) <= documented_keys()
    env = {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        **config_map(docs)["data"],
        **secret,
        "FAIRSHARE_CLUSTER": f"kubeconfig:{kubeapi.kubeconfig_path}",
    }
    for container in containers.values():
        assert [next(iter(ref)) for ref in container["envFrom"]] == ["configMapRef", "secretRef"]

    # 1. The web pods' init container: migrations, before anything else. Every replica runs
    # it, all at once on a first install: they must not trip over each other.
    migrate = containers["fairshare-web/init/migrate"]
    [web_deployment] = [
        d for d in docs if (d["kind"], d["metadata"]["name"]) == ("Deployment", "fairshare-web")
    ]
    replicas = web_deployment["spec"]["replicas"]
    assert replicas >= 2
    runs = [
        subprocess.Popen(
            executable(migrate["command"]),
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(replicas)
    ]
    for run in runs:
        output, _ = run.communicate(timeout=600)
        assert run.returncode == 0, output.decode()[-3000:]

    processes = Processes(tmp_path)
    try:
        port = free_port()
        web = containers["fairshare-web/web"]
        argv = [
            f"--bind=127.0.0.1:{port}"
            if a.startswith("--bind=")
            else ("--workers=1" if a.startswith("--workers=") else a)
            for a in web["command"]
        ]
        assert argv != web["command"]
        processes.start("web", argv, env)
        for name in ("worker", "beat", "watcher"):
            container = containers[f"fairshare-{name}/{name}"]
            processes.start(name, container["command"] + container.get("args", []), env)

        # 2. The probes, as the kubelet calls them (Host: the pod IP and the container port).
        container_port = web["ports"][0]["containerPort"]
        host = f"{POD_IP}:{container_port}"
        for probe in ("readinessProbe", "livenessProbe"):
            path = web[probe]["httpGet"]["path"]
            wait_for(
                lambda path=path: get(port, path, host)[0] == 200,
                120,
                f"web {probe} {path} (log: {processes.log('web')[-2000:]})",
            )

        # 3. /metrics as Prometheus scrapes it: Host the pod IP, the ServiceMonitor's token.
        status, body = get(port, "/metrics", host, {"Authorization": "Bearer smoke-scrape-token"})
        assert status == 200 and b"fairshare_" in body
        assert get(port, "/metrics", host)[0] == 401
        assert get(port, "/", host)[0] == 400  # the site itself: only its own names

        # 4. The worker's liveness command, in the pod's environment (HOSTNAME: the pod's).
        probe = containers["fairshare-worker/worker"]["livenessProbe"]["exec"]["command"]
        probe_env = {**env, "HOSTNAME": socket.gethostname()}
        wait_for(
            lambda: (
                subprocess.run(
                    probe, env=probe_env, cwd=ROOT, capture_output=True, timeout=60
                ).returncode
                == 0
            ),
            180,
            f"worker liveness (log: {processes.log('worker')[-2000:]})",
        )

        # 5. The GPU node agent's own code posts one batch to its DaemonSet's ingest URL. The
        # request goes to this gunicorn through an HTTP proxy setting, so its Host header is
        # the in-cluster name, as in the cluster.
        [daemonset] = [d for d in monitoring() if d["kind"] == "DaemonSet"]
        [agent_container] = daemonset["spec"]["template"]["spec"]["containers"]
        agent_env = {e["name"]: e.get("value", "") for e in agent_container["env"]}
        agent_env["NODE_NAME"] = "gpu-node-1"
        token_file = tmp_path / "tokens" / "gpu-node-1"
        token_file.parent.mkdir()
        made = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "shell",
                "-c",
                "from django.contrib.auth import get_user_model; "
                "from quotas.tokens import issue_token; "
                "u = get_user_model().objects.create_superuser('smoke', 's@example.com', 'x'); "
                "print(issue_token(owner=u, name='gpu-node-1', kind='node-agent', "
                "node='gpu-node-1', actor=u).raw)",
            ],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr[-2000:]
        token_file.write_text(made.stdout.strip().splitlines()[-1])
        words = shlex.split(agent_container["args"][0])
        words = [_expand(w, agent_env) for w in words]
        argv = words[words.index("gpu_agent") + 1 :]
        argv[argv.index("--token-file") + 1] = str(token_file)
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("no_proxy", "")
        monkeypatch.setattr(urllib.request, "_opener", None)
        code = agent.main(
            [*argv, "--once", "--proc-root", str(tmp_path)],
            nvml=FakeNvml([FakeDevice(uuid="GPU-1", util_gpu=40)]),
        )
        assert code == 0, processes.log("web")[-3000:]
        # gunicorn writes its access-log line after the response has gone out: wait for it.
        deadline = time.monotonic() + 10
        while "/api/v1/gpu-samples/ingest/" not in processes.log("web"):
            assert time.monotonic() < deadline, processes.log("web")[-3000:]
            time.sleep(0.1)

        # 6. Everything is still up.
        for name, proc in processes.running.items():
            assert proc.poll() is None, f"{name} exited: {processes.log(name)[-3000:]}"
        assert "beat: Starting" in processes.log("beat")
    finally:
        processes.stop()


def _expand(word: str, env: dict[str, str]) -> str:
    """The shell's ``$NAME`` expansion of the DaemonSet's ``sh -c`` line, from its env."""
    for key, value in sorted(env.items(), key=lambda kv: -len(kv[0])):
        word = word.replace(f"${key}", value)
    return word
