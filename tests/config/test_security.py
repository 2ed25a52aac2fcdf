import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache
from django.urls import reverse

from config.logging import JsonFormatter, RedactSecretsFilter

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "SECRET_KEY": "Zq3v8x1-production-grade-secret-key-with-plenty-of-entropy-0123456789",
    "FAIRSHARE_DEBUG": "false",
    "FAIRSHARE_SSL_REDIRECT": "true",
    "FAIRSHARE_HSTS_SECONDS": "31536000",
    "FAIRSHARE_HSTS_PRELOAD": "true",
    "ALLOWED_HOSTS": "fairshare.example.com",
    "DATABASE_URL": "sqlite:////tmp/fairshare-deploy-check.sqlite3",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/14",
    "REDIS_URL": "redis://127.0.0.1:6379/14",
    "FAIRSHARE_CLUSTER": "in-cluster",
}


def test_check_deploy_is_clean_with_production_settings():
    env = {"PATH": os.environ.get("PATH", ""), **PRODUCTION_ENV}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy_without_inline_scripts(client):
    response = client.get(reverse("login"))
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in policy


@pytest.mark.django_db
def test_login_is_throttled_after_repeated_failures(client, cast):
    cache.clear()
    for _ in range(5):
        response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
        assert response.status_code == 200
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
    cache.clear()
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302


def test_json_logs_are_one_object_per_line():
    record = logging.LogRecord(
        "fairshare.test", logging.WARNING, __file__, 1, "sync %s", ("ok",), None
    )
    record.run_id = 7
    line = JsonFormatter().format(record)
    payload = json.loads(line)
    assert payload["message"] == "sync ok"
    assert payload["level"] == "WARNING"
    assert payload["run_id"] == 7


def test_tokens_never_reach_the_logs():
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "auth %s", ("Bearer fs_abcd1234_secretsecretsecret",), None
    )
    RedactSecretsFilter().filter(record)
    message = record.getMessage()
    assert "secretsecret" not in message
    assert "[redacted]" in message


def test_production_redirects_to_https_and_sends_hsts_by_default():
    """Issue 27: the shipped configuration (secure cookies, no DEBUG) had neither; the probes
    and the metrics scrape stay on plain HTTP."""
    env = {"PATH": os.environ.get("PATH", ""), **PRODUCTION_ENV}
    for name in ("FAIRSHARE_SSL_REDIRECT", "FAIRSHARE_HSTS_SECONDS", "FAIRSHARE_HSTS_PRELOAD"):
        env.pop(name)
    env.pop("FAIRSHARE_METRICS_LOOPBACK", None)
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, "
        "s.SECURE_REDIRECT_EXEMPT, s.FAIRSHARE_METRICS_LOOPBACK]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    redirect, hsts, exempt, loopback = json.loads(result.stdout.strip().splitlines()[-1])
    assert redirect is True and hsts == 31_536_000
    assert loopback is False  # /metrics needs its token in production
    assert {"^healthz$", "^readyz$", "^metrics$"} <= set(exempt)
    # Where cookies are not secure (the demo, docker compose without TLS): plain HTTP.
    env["FAIRSHARE_SECURE_COOKIES"] = "false"
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1])[:2] == [False, 0]
