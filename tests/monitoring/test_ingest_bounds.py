"""Ingest is bounded by samples, not requests (issue 27): no more samples per GPU than the
agent's interval allows, a per-batch cap, and a throttle in samples a minute per token."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.cache import cache

from monitoring.models import GpuSample, GpuSampleRejection
from tests.monitoring.test_ingest_trust import (  # noqa: F401 (cluster: autouse fixture)
    NOW,
    agent_client,
    cluster,
    ingest,
    sample,
)

pytestmark = pytest.mark.django_db


def at(seconds: float) -> str:
    return (NOW - timedelta(seconds=60) + timedelta(seconds=seconds)).isoformat()


def test_samples_of_one_gpu_closer_than_half_the_interval_are_refused(settings):
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 15
    flood = [sample(ts=at(i * 0.000001)) for i in range(50)]  # 1 µs apart
    result = ingest(*flood, sample(ts=at(8)), sample(ts=at(15)), sample(ts=at(20)))
    assert result.accepted == 3  # at 0, 8 and 15 s; 20 s is 5 s after 15
    assert result.rejected == 50
    assert "from another sample of GPU-0" in result.rejected_reasons[0]
    assert GpuSample.objects.count() == 3
    assert GpuSampleRejection.objects.get(reason="rate").count == 50


def test_the_spacing_holds_across_batches_and_a_retry_is_still_a_duplicate(settings):
    settings.FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = 15
    assert ingest(sample(ts=at(0)), sample("GPU-1", index=1, ts=at(0))).accepted == 2
    again = ingest(sample(ts=at(0)), sample(ts=at(3)), sample("GPU-1", index=1, ts=at(15)))
    assert (again.accepted, again.duplicates, again.rejected) == (1, 1, 1)
    assert GpuSample.objects.count() == 3


def test_a_batch_over_the_cap_is_refused_whole(cast, settings):
    settings.FAIRSHARE_GPU_INGEST_MAX_BATCH_SAMPLES = 4
    body = {"node": "gpu-1", "samples": [sample(ts=at(i * 15)) for i in range(5)]}
    response = agent_client(cast).post(
        "/api/v1/gpu-samples/ingest/", json.dumps(body), "application/json"
    )
    assert response.status_code == 400
    assert "at most 4 samples" in response.json()["errors"]["samples"][0]
    assert not GpuSample.objects.exists()


def test_the_api_throttles_in_samples_a_minute_with_retry_after(cast, settings, monkeypatch):
    from monitoring.api import views

    monkeypatch.setattr(views, "_clock", lambda: 1_000_000 * 60 + 15.5)  # one fixed minute
    settings.FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS = 10**9
    settings.FAIRSHARE_GPU_INGEST_SAMPLES_PER_MINUTE = 10
    cache.clear()
    client = agent_client(cast)

    def post(count, offset):
        body = {"node": "gpu-1", "samples": [sample(ts=at(offset + i * 15)) for i in range(count)]}
        return client.post("/api/v1/gpu-samples/ingest/", json.dumps(body), "application/json")

    assert post(6, 0).status_code == 200
    refused = post(6, 1000)  # 12 > 10 in this minute: refused whole, not counted
    assert refused.status_code == 429
    assert refused["Retry-After"] == "45"
    assert post(4, 2000).status_code == 200  # the refused batch took nothing
    assert GpuSample.objects.count() == 10
    cache.clear()


def test_a_gpu_keeps_its_index_while_it_is_reported():
    assert ingest(sample("GPU-0", index=0, ts=at(0))).accepted == 1
    moved = ingest(sample("GPU-0", index=1, ts=at(15)))
    assert (moved.accepted, moved.rejected) == (0, 1)
    assert "is index 0 of node gpu-1" in moved.rejected_reasons[0]
    taken = ingest(sample("GPU-9", index=0, ts=at(15)))
    assert (taken.accepted, taken.rejected) == (0, 1)
    assert "index 0 of node gpu-1 is GPU GPU-0" in taken.rejected_reasons[0]
    # Within one batch too: a new GPU claims an index once.
    both = ingest(sample("GPU-1", index=1, ts=at(15)), sample("GPU-2", index=1, ts=at(15)))
    assert (both.accepted, both.rejected) == (1, 1)
    assert GpuSampleRejection.objects.filter(reason="uuid-index").count() >= 1
