"""GPU sample ingest: node binding, validation, team attribution, idempotent retries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from monitoring.ingest import ingest_gpu_batch
from monitoring.models import GpuSample
from tests.monitoring.gpu_inventory import node_object, place, pod_object

NOW = datetime(2025, 5, 1, 12, 0, 30, tzinfo=UTC)
TS = "2025-05-01T12:00:00+00:00"


def sample(uuid="GPU-0", *, ts=TS, index=0, util=87, processes=None, **extra):
    return {
        "ts": ts,
        "uuid": uuid,
        "index": index,
        "model": "NVIDIA H100 80GB HBM3",
        "util_gpu": util,
        "util_mem": 40,
        "mem_used": 53687091200,
        "mem_total": 85899345920,
        "power_w": 612.5,
        "temp_c": 64,
        "processes": processes if processes is not None else [],
        **extra,
    }


def batch(*samples, node="gpu-node-1", dropped=0, skipped=0):
    return {
        "node": node,
        "agent": {"version": "0.1.0", "dropped_samples": dropped, "skipped_samples": skipped},
        "samples": list(samples),
    }


def proc(namespace, pod, mem, pid=4242):
    return {
        "pid": pid,
        "pod_uid": f"uid-{pod}",
        "namespace": namespace,
        "pod": pod,
        "mem_used": mem,
    }


@pytest.fixture(autouse=True)
def inventory(db):
    """gpu-node-1 has 8 H100s and runs train-0, x and notebook (the collection says so)."""
    place(
        [node_object("gpu-node-1")],
        [
            pod_object("gpu-node-1", "team-a-ml", "train-0"),
            pod_object("gpu-node-1", "team-b-ml", "x"),
            pod_object("gpu-node-1", "sandbox", "notebook"),
        ],
        now=NOW,
    )


def test_it_stores_samples_and_attributes_them_to_the_pods_team(cast):
    result = ingest_gpu_batch(
        token_node="gpu-node-1",
        batch=batch(
            sample(
                "GPU-0", processes=[proc("team-a-ml", "train-0", 50), proc("team-b-ml", "x", 10)]
            ),
            sample("GPU-1", index=1, util=None, processes=[proc("sandbox", "notebook", 1)]),
            sample("GPU-2", index=2, util=0),
        ),
        now=NOW,
    )

    assert (result.accepted, result.duplicates, result.rejected_reasons) == (3, 0, [])
    rows = list(
        GpuSample.objects.order_by("index").values_list(
            "node",
            "uuid",
            "index",
            "util_gpu",
            "mem_used",
            "power_w",
            "namespace",
            "pod",
            "team__slug",
        )
    )
    assert rows == [
        ("gpu-node-1", "GPU-0", 0, 87.0, 53687091200, 612.5, "team-a-ml", "train-0", "team-a"),
        ("gpu-node-1", "GPU-1", 1, None, 53687091200, 612.5, "sandbox", "notebook", None),
        ("gpu-node-1", "GPU-2", 2, 0.0, 53687091200, 612.5, "", "", None),
    ]
    assert GpuSample.objects.get(uuid="GPU-0").taken_at == datetime(2025, 5, 1, 12, tzinfo=UTC)


def test_it_rejects_a_batch_for_another_node(cast):
    with pytest.raises(ValidationError) as info:
        ingest_gpu_batch(token_node="gpu-node-1", batch=batch(sample(), node="gpu-node-2"), now=NOW)

    assert list(info.value.message_dict) == ["node"]
    assert "gpu-node-2" in info.value.message_dict["node"][0]
    assert not GpuSample.objects.exists()


def test_it_rejects_a_sample_that_names_another_node(cast):
    with pytest.raises(ValidationError) as info:
        ingest_gpu_batch(
            token_node="gpu-node-1",
            batch=batch(sample("GPU-0"), sample("GPU-9", node="gpu-node-2")),
            now=NOW,
        )

    assert list(info.value.message_dict) == ["node"]
    assert "samples[1]" in info.value.message_dict["node"][0]
    assert not GpuSample.objects.exists()


def test_a_retried_batch_is_stored_once(cast):
    payload = batch(sample("GPU-0"), sample("GPU-1", index=1))
    ingest_gpu_batch(token_node="gpu-node-1", batch=payload, now=NOW)

    again = ingest_gpu_batch(token_node="gpu-node-1", batch=payload, now=NOW)

    assert (again.accepted, again.duplicates) == (0, 2)
    assert GpuSample.objects.count() == 2


def test_a_sample_repeated_inside_a_batch_counts_as_a_duplicate(cast):
    result = ingest_gpu_batch(
        token_node="gpu-node-1", batch=batch(sample("GPU-0"), sample("GPU-0")), now=NOW
    )

    assert (result.accepted, result.duplicates) == (1, 1)
    assert GpuSample.objects.count() == 1


def test_it_skips_invalid_samples_and_says_why(cast):
    result = ingest_gpu_batch(
        token_node="gpu-node-1",
        batch=batch(
            sample("GPU-0"),
            sample("GPU-1", ts="yesterday"),
            sample("GPU-2", ts="2025-05-01T12:00:00"),
            sample("GPU-3", util=140),
            sample("", index=4),
            sample("GPU-5", ts="2025-05-01T13:00:00+00:00"),
            "not an object",
        ),
        now=NOW,
    )

    assert result.accepted == 1
    assert result.rejected_reasons == [
        "samples[1]: ts must be an ISO 8601 time",
        "samples[2]: ts must carry a time zone",
        "samples[3]: util_gpu must be between 0 and 100",
        "samples[4]: uuid must be a non-empty string of at most 64 characters",
        "samples[5]: ts is in the future",
        "samples[6]: must be an object",
    ]
    assert list(GpuSample.objects.values_list("uuid", flat=True)) == ["GPU-0"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "batch"),
        ({"samples": []}, "node"),
        ({"node": "gpu-node-1", "samples": {}}, "samples"),
        ({"node": "gpu-node-1", "samples": [], "agent": []}, "agent"),
    ],
)
def test_a_malformed_batch_names_the_field(cast, payload, field):
    with pytest.raises(ValidationError) as info:
        ingest_gpu_batch(token_node="gpu-node-1", batch=payload, now=NOW)

    assert list(info.value.message_dict) == [field]


def test_it_reports_and_logs_the_agents_loss_counters(cast, caplog):
    result = ingest_gpu_batch(token_node="gpu-node-1", batch=batch(dropped=12, skipped=3), now=NOW)

    assert (result.accepted, result.agent_dropped, result.agent_skipped) == (0, 12, 3)
    assert result.agent_version == "0.1.0"
    assert "gpu agent on gpu-node-1 reports 12 dropped and 3 skipped samples" in caplog.text


def test_a_heartbeat_without_samples_is_accepted(cast):
    result = ingest_gpu_batch(token_node="gpu-node-1", batch=batch(), now=NOW)

    assert (result.node, result.accepted, result.duplicates, result.rejected_reasons) == (
        "gpu-node-1",
        0,
        0,
        [],
    )
