"""Idle GPU detection: alerts, their edges, notifications."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from monitoring import idle
from monitoring.models import GpuSample, IdleGpuAlert
from quotas.webhook import post_webhook

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)


@pytest.fixture(autouse=True)
def _window(settings):
    settings.FAIRSHARE_IDLE_GPU_THRESHOLD = 10
    settings.FAIRSHARE_IDLE_GPU_WINDOW_MINUTES = 30
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 300  # a gap over 10 min is missing data
    settings.FAIRSHARE_WEBHOOK_URL = ""


def readings(team, utils, *, uuid="GPU-1", end=NOW, pod="train-0", namespace="team-a-ml"):
    """One sample per 5 minutes, the last one at ``end``; None in ``utils`` leaves a gap."""
    start = end - STEP * (len(utils) - 1)
    for i, util in enumerate(utils):
        if util is None:
            continue
        GpuSample.objects.create(
            taken_at=start + STEP * i,
            node="gpu-1",
            uuid=uuid,
            model="NVIDIA H100 80GB HBM3",
            util_gpu=util,
            namespace=namespace,
            pod=pod,
            team=team,
        )


def test_it_opens_an_alert_for_gpus_idle_all_window_and_emails_the_leads_once(cast):
    readings(cast.team_a, [3, 0, 5, 2, 9, 1, 0])  # 12:00 − 30 min … 12:00
    readings(cast.team_a, [0] * 7, uuid="GPU-2")

    result = idle.detect_idle_gpus(now=NOW)

    alert = IdleGpuAlert.objects.get()
    assert (result.idle_gpus, result.opened, result.extended) == (2, [alert.pk], [])
    assert (alert.team, alert.namespace, alert.pod, alert.node) == (
        cast.team_a,
        "team-a-ml",
        "train-0",
        "gpu-1",
    )
    assert (alert.gpus, alert.status, alert.avg_utilization) == (2, "open", 1.43)
    assert alert.started_at == NOW - timedelta(minutes=30)
    assert alert.notified_at == NOW
    assert "2 GPU(s) on node gpu-1 allocated to pod team-a-ml/train-0" in alert.suggestion
    assert "kubectl -n team-a-ml delete pod train-0" in alert.suggestion
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.org"]
    assert mail.outbox[0].subject == "[Fairshare] 2 idle GPU(s) in team-a-ml"


def test_a_later_run_extends_the_alert_without_a_second_email(cast):
    readings(cast.team_a, [0] * 8, end=NOW + STEP)
    idle.detect_idle_gpus(now=NOW)

    result = idle.detect_idle_gpus(now=NOW + STEP)

    alert = IdleGpuAlert.objects.get()
    assert result.extended == [alert.pk]
    assert result.opened == []
    assert alert.last_seen_at == NOW + STEP
    assert alert.started_at == NOW - timedelta(minutes=30)
    assert len(mail.outbox) == 1


@pytest.mark.parametrize(
    ("utils", "why"),
    [
        ([0, 0, 0, 10, 0, 0, 0], "exactly at the threshold is not idle"),
        ([0, 0, 0, 50, 0, 0, 0], "one busy reading"),
        ([0, None, None, None, 0, 0, 0], "a 20-minute gap is missing data, not idleness"),
        ([0, 0, 0, 0, 0], "the window is not full yet (20 minutes observed)"),
        ([0, 0, 0, 0, 0, 0, 0, None, None, None], "stopped reporting 15 minutes ago"),
    ],
)
def test_it_does_not_call_a_gpu_idle_when(cast, utils, why):
    readings(cast.team_a, utils)

    result = idle.detect_idle_gpus(now=NOW)

    assert result.idle_gpus == 0, why
    assert not IdleGpuAlert.objects.exists()
    assert mail.outbox == []


def test_just_under_the_threshold_is_idle(cast):
    readings(cast.team_a, [9.9] * 7)

    assert idle.detect_idle_gpus(now=NOW).idle_gpus == 1


def test_gpus_without_a_pod_or_team_are_not_judged(cast):
    readings(None, [0] * 7, uuid="GPU-unknown-ns", namespace="sandbox")
    readings(cast.team_a, [0] * 7, uuid="GPU-no-pod", pod="", namespace="")

    assert idle.detect_idle_gpus(now=NOW).idle_gpus == 0


def test_it_resolves_the_alert_when_utilization_recovers(cast):
    readings(cast.team_a, [0] * 7)
    idle.detect_idle_gpus(now=NOW)
    readings(cast.team_a, [85], end=NOW + STEP)

    result = idle.detect_idle_gpus(now=NOW + STEP)

    alert = IdleGpuAlert.objects.get()
    assert result.resolved == [alert.pk]
    assert alert.status == "resolved"
    assert alert.last_seen_at == NOW
    assert len(mail.outbox) == 1


def test_an_idle_gpu_after_a_resolved_alert_opens_a_new_one(cast):
    readings(cast.team_a, [0] * 7)
    idle.detect_idle_gpus(now=NOW)
    IdleGpuAlert.objects.update(status="resolved")

    result = idle.detect_idle_gpus(now=NOW)

    assert len(result.opened) == 1
    assert IdleGpuAlert.objects.filter(status="open").count() == 1
    assert len(mail.outbox) == 2


# ---------------------------------------------------------------- webhook


class _Hook(BaseHTTPRequestHandler):
    received: list = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook(settings):
    _Hook.received = []
    _Hook.status = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.FAIRSHARE_WEBHOOK_URL = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield _Hook
    server.shutdown()
    server.server_close()


def test_it_posts_slack_compatible_json_to_the_webhook(cast, webhook):
    readings(cast.team_a, [0] * 7)

    idle.detect_idle_gpus(now=NOW)

    assert len(webhook.received) == 1
    content_type, body = webhook.received[0]
    assert content_type == "application/json"
    assert list(body) == ["text"]
    assert body["text"].startswith("*1 idle GPU(s) in team-a-ml* (team team-a)\n1 GPU(s) on node")


def test_a_failing_webhook_is_logged_not_raised(cast, webhook, caplog):
    webhook.status = 500
    readings(cast.team_a, [0] * 7)

    result = idle.detect_idle_gpus(now=NOW)

    assert len(result.opened) == 1
    assert len(mail.outbox) == 1
    assert "webhook answered HTTP 500" in caplog.text


def test_an_unreachable_webhook_returns_false():
    assert post_webhook("hello", url="http://127.0.0.1:9/nothing-listens") is False
    assert post_webhook("hello", url="ftp://example.org/") is False
