"""Broker and database faults: the web app keeps serving and loses nothing.

Redis down: the Celery app the ``quota_changed`` receiver publishes through points at a dead
port (``redis://127.0.0.1:1/0``: connection refused, as when Redis is down). Approvals through
the UI and the API still succeed and are audited; the receiver logs that it could not enqueue;
once Redis is back, the next scheduled share computation and sync (called in-process, as the
beat-triggered task would run) bring the cluster — the fake API server ``kubeapi`` — to the
approved quota.

PostgreSQL restart: *simulated*, not performed (the server is shared): the backend serving the
app's connection is killed with ``pg_terminate_backend`` from a second connection, which is what
the app sees when PostgreSQL restarts under it. For "during the outage" the connection settings
also point at a closed port, so reconnecting fails too. Requests go through Django's real
WSGIHandler (the test Client switches off the request-start connection check), so
``CONN_MAX_AGE``/``CONN_HEALTH_CHECKS`` behave as under gunicorn.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from contextlib import contextmanager
from decimal import Decimal

import psycopg
import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.test import Client
from django.urls import reverse

from quotas.choices import AuditVerb, QuotaRequestStatus
from quotas.decisions import submit_request
from quotas.lines import LineInput
from quotas.models import AuditEvent, QuotaRequest, TeamQuota
from quotas.tokens import issue_token
from scheduling import tasks
from scheduling.choices import SyncStatus
from scheduling.sync import create_run, start_sync
from tests.base import GPU, make_cast

DEAD_BROKER = "redis://127.0.0.1:1/0"
ORIGINAL_BROKER = os.environ.get("CELERY_BROKER_URL", "")
BEARER = "Bearer fs_00000000_not-a-real-token"


# ------------------------------------------------------------------ Redis down


def _reset_broker_pools(app) -> None:
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def dead_broker(settings, monkeypatch):
    """The receivers' Celery app (and settings) point at a port where nothing listens.

    Celery reads the ``CELERY_BROKER_URL`` environment variable before its configuration, so
    that is patched too; the cached connection and producer pools are dropped.
    """
    app = tasks.compute_shares.app
    settings.CELERY_BROKER_URL = DEAD_BROKER
    monkeypatch.setenv("CELERY_BROKER_URL", DEAD_BROKER)
    app.conf.broker_url = DEAD_BROKER
    _reset_broker_pools(app)
    assert app.connection_for_write().as_uri().startswith("redis://127.0.0.1:1/")
    yield app
    _reset_broker_pools(app)


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    return kubeapi


def _request(cast, guarantee="24", limit="48"):
    return submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, guarantee, limit)],
        justification="Bigger sweep.",
    )


def _redis_returns(app, settings, monkeypatch, original: str) -> None:
    settings.CELERY_BROKER_URL = original
    monkeypatch.setenv("CELERY_BROKER_URL", original)
    app.conf.broker_url = original
    _reset_broker_pools(app)


def _scheduled_sync() -> None:
    """What beat triggers every few minutes, run in-process: shares, then a sync run."""
    tasks.compute_shares.apply(kwargs={"trigger": "schedule"}).get()
    run = create_run(trigger="schedule")
    result = tasks.sync_cluster.apply(kwargs={"run_id": run.pk}).get()
    assert result["status"] == SyncStatus.SUCCEEDED, result


def _assert_cluster_has(cluster, guarantee: str, limit: str) -> None:
    quota = cluster.get("ResourceQuota", "fairshare", "team-a-ml")
    assert quota["spec"]["hard"] == {f"requests.{GPU}": limit}
    queue = cluster.get("Queue", "team-a")
    assert queue["spec"]["capability"] == {GPU: limit}
    assert queue["spec"]["guarantee"] == {"resource": {GPU: guarantee}}


@pytest.mark.django_db
def test_an_ui_approval_succeeds_with_redis_down_and_the_next_sync_applies_it(
    dead_broker, cluster, settings, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    original = ORIGINAL_BROKER
    cast = make_cast()
    req = _request(cast)
    client = Client()
    client.force_login(cast.root)

    started = time.monotonic()
    with (
        caplog.at_level(logging.ERROR, logger="scheduling.receivers"),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        response = client.post(
            reverse("portal:quotarequest_decide", args=[req.pk]),
            {
                "decision": "approve",
                f"r{req.pk}-line0_guarantee": "24",
                f"r{req.pk}-line0_limit": "48",
                f"r{req.pk}-note": "Go.",
            },
        )
    elapsed = time.monotonic() - started

    assert response.status_code == 302, response.content[:500]
    assert callbacks, "the approval announces the quota change after commit"
    assert elapsed < 15, f"the broker outage held the request for {elapsed:.1f}s"
    req.refresh_from_db()
    assert req.status in (QuotaRequestStatus.APPROVED, QuotaRequestStatus.ACTIVE)
    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU)
    assert (quota.guarantee, quota.limit) == (Decimal(24), Decimal(48))
    assert AuditEvent.objects.filter(object_id=str(req.pk), verb=AuditVerb.APPROVE).exists()
    [record] = [r for r in caplog.records if r.name == "scheduling.receivers"]
    assert "could not enqueue" in record.getMessage() and record.exc_info
    # The site keeps serving meanwhile.
    assert client.get(reverse("home")).status_code == 200
    assert client.get(reverse("portal:team", args=["team-a"])).status_code == 200

    # Redis returns; nothing was queued, but the next scheduled run picks the approval up.
    _redis_returns(dead_broker, settings, monkeypatch, original)
    _scheduled_sync()
    _assert_cluster_has(cluster, "24", "48")


@pytest.mark.django_db
def test_an_api_approval_succeeds_with_redis_down_and_the_next_sync_applies_it(
    dead_broker, cluster, settings, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    original = ORIGINAL_BROKER
    cast = make_cast()
    req = _request(cast, "26", "50")
    raw = issue_token(owner=cast.root, name="ci").raw
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

    with (
        caplog.at_level(logging.ERROR, logger="scheduling.receivers"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = client.post(
            reverse("quotas-api:quotarequest-approve", args=[req.pk]),
            json.dumps({"note": "ok"}),
            content_type="application/json",
        )
        # ...and a lead's new request is accepted too.
        alice = issue_token(owner=cast.alice, name="cli").raw
        created = Client(HTTP_AUTHORIZATION=f"Bearer {alice}").post(
            reverse("quotas-api:quotarequest-list"),
            json.dumps(
                {
                    "team": "team-a",
                    "justification": "more",
                    "lines": [{"resource": GPU, "guarantee": "28", "limit": "50"}],
                }
            ),
            content_type="application/json",
        )

    assert response.status_code == 200, response.content
    assert response.json()["status"] in ("approved", "active")
    assert created.status_code == 201, created.content
    assert any("could not enqueue" in r.getMessage() for r in caplog.records)
    assert QuotaRequest.objects.filter(status=QuotaRequestStatus.PENDING).count() == 1

    _redis_returns(dead_broker, settings, monkeypatch, original)
    _scheduled_sync()
    _assert_cluster_has(cluster, "26", "50")


@pytest.mark.django_db
def test_a_sync_started_while_redis_is_down_fails_visibly_instead_of_queueing_forever(
    dead_broker, django_capture_on_commit_callbacks
):
    cast = make_cast()
    client = Client()
    client.force_login(cast.root)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("scheduling:sync_start"), {"mode": "sync"})
        run = start_sync(trigger="api")

    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    assert "broker" in run.error.lower()


# ------------------------------------------------------------------ PostgreSQL restart


def _wsgi_get(path: str, **headers: str) -> tuple[int, bytes, float]:
    """GET ``path`` through Django's WSGIHandler, signals and all; (status, body, seconds)."""
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        **headers,
    }
    status: list[str] = []
    started = time.monotonic()
    result = WSGIHandler()(environ, lambda s, headers, exc_info=None: status.append(s))
    try:
        body = b"".join(result)
    finally:
        result.close()  # request_finished: where Django drops unusable connections
    return int(status[0].split()[0]), body, time.monotonic() - started


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _terminate(pid: int) -> None:
    """Kill the app's server process from a second connection (what a restart does to it)."""
    params = connection.settings_dict
    with psycopg.connect(
        host=params["HOST"] or "127.0.0.1",
        port=params["PORT"] or 5432,
        user=params["USER"],
        password=params["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
        connect_timeout=5,
    ) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]


@contextmanager
def _postgres_unreachable():
    """New connections are refused (port 1) until the block ends: PostgreSQL is down."""
    params = connection.settings_dict
    port = params["PORT"]
    params["PORT"] = "1"
    try:
        yield
    finally:
        params["PORT"] = port


@pytest.fixture
def persistent_connections(settings):
    """The production connection policy (settings.py: CONN_MAX_AGE 60, health checks on)."""
    params = connection.settings_dict
    saved = (params["CONN_MAX_AGE"], params["CONN_HEALTH_CHECKS"])
    params["CONN_MAX_AGE"], params["CONN_HEALTH_CHECKS"] = 60, True
    try:
        yield params
    finally:
        params["CONN_MAX_AGE"], params["CONN_HEALTH_CHECKS"] = saved
        connection.close()


needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="PostgreSQL connection policy: terminates and restarts its backends",
)


@needs_postgres
def test_the_settings_keep_connections_and_check_their_health():
    from django.conf import settings

    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0


@pytest.mark.django_db(transaction=True)
@needs_postgres
def test_a_request_during_a_database_outage_fails_fast_and_the_next_one_recovers(
    persistent_connections,
):
    assert _wsgi_get("/readyz")[0] == 200
    pid = _backend_pid()

    _terminate(pid)
    with _postgres_unreachable():
        ready, body, seconds = _wsgi_get("/readyz")
        # An API read: the bearer token is looked up in the database.
        page, _, page_seconds = _wsgi_get("/api/v1/teams/", HTTP_AUTHORIZATION=BEARER)
        alive, _, _ = _wsgi_get("/healthz")

    assert ready == 503 and json.loads(body)["status"] == "unavailable"
    assert seconds < 10, f"/readyz took {seconds:.1f}s during the outage"
    assert page in (500, 503) and page_seconds < 10
    assert alive == 200  # liveness does not depend on the database: no restart loop
    # PostgreSQL is back: the very next request reconnects, no app restart needed.
    assert _wsgi_get("/readyz")[0] == 200
    assert _wsgi_get("/api/v1/teams/", HTTP_AUTHORIZATION=BEARER)[0] == 401  # answered, no 500
    assert _backend_pid() != pid


@pytest.mark.django_db(transaction=True)
@needs_postgres
def test_after_a_restart_between_requests_the_health_check_reconnects_at_once(
    persistent_connections,
):
    assert _wsgi_get("/readyz")[0] == 200
    pid = _backend_pid()

    _terminate(pid)  # the server restarted while the connection sat idle in the app

    status, body, _ = _wsgi_get("/readyz")
    assert (status, json.loads(body)["status"]) == (200, "ok")
    assert _backend_pid() != pid


@pytest.mark.django_db(transaction=True)
@needs_postgres
def test_without_health_checks_one_request_fails_after_a_restart(persistent_connections):
    """The control experiment: what CONN_HEALTH_CHECKS saves (one failed request per worker)."""
    persistent_connections["CONN_HEALTH_CHECKS"] = False
    assert _wsgi_get("/readyz")[0] == 200
    _terminate(_backend_pid())

    assert _wsgi_get("/readyz")[0] == 503
    assert _wsgi_get("/readyz")[0] == 200  # the broken connection was dropped after the error
