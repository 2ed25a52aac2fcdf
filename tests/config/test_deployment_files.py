import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_runs_web_worker_beat_postgres_and_redis_with_healthchecks():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"web", "worker", "beat", "postgres", "redis"} <= set(services)
    for name in ("web", "worker", "postgres", "redis"):
        assert "healthcheck" in services[name], name
    assert "gunicorn" in services["web"]["command"]


def test_compose_file_validates():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (.ci/run installs it)")
    result = subprocess.run(
        [binary, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_readme_gives_exactly_two_setup_commands():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/demo.sh" in readme
    assert "scripts/test.sh" in readme
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
