"""Helpers shared by the HTTP benchmarks (api, web): scratch database, gunicorn, percentiles."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def create_database(name: str) -> None:
    """Create the scratch PostgreSQL database ``name`` (already there is fine)."""
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-c", f"CREATE DATABASE {name}"],
        capture_output=True,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(port: int, *, workers: int = 2) -> subprocess.Popen:
    """Start ``gunicorn config.wsgi`` on 127.0.0.1:``port`` (own session, so the caller can kill
    the process group) and wait until /healthz answers."""
    env = dict(os.environ, ALLOWED_HOSTS="127.0.0.1,localhost", FAIRSHARE_LOG_LEVEL="WARNING")
    process = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "config.wsgi",
            "--workers",
            str(workers),
            "--bind",
            f"127.0.0.1:{port}",
            "--timeout",
            "120",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return process
        except OSError:
            time.sleep(0.2)
    raise SystemExit("gunicorn did not start")


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
