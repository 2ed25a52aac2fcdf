"""Node-agent ingest trusts only the cluster's own data (issue 15, findings 3 and 4): GPUs and
pods must be where the latest collection places them, the namespace comes from the pod, times
fall in a bounded window, and every refused sample is counted with its reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from monitoring.collection import store_usage
from monitoring.ingest import ingest_gpu_batch
from monitoring.models import GpuSample, GpuSampleRejection
from quotas.tokens import issue_token
from tests.monitoring.gpu_inventory import H100, node_object, place, pod_object

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 5, 1, 12, 0, 30, tzinfo=UTC)
TS = "2025-05-01T12:00:00+00:00"
MODEL = "NVIDIA H100 80GB HBM3"


def sample(uuid="GPU-0", *, index=0, ts=TS, model=MODEL, processes=(), util=50):
    return {
        "ts": ts,
        "uuid": uuid,
        "index": index,
        "model": model,
        "util_gpu": util,
        "processes": list(processes),
    }


def proc(namespace=None, pod=None, *, uid=None, mem=100):
    return {"pid": 1, "pod_uid": uid, "namespace": namespace, "pod": pod, "mem_used": mem}


def ingest(*samples, node="gpu-1", now=NOW):
    return ingest_gpu_batch(
        token_node=node, batch={"node": node, "samples": list(samples)}, now=now
    )


@pytest.fixture(autouse=True)
def cluster(cast):
    """gpu-1: 2 H100s running team-a's train-0; gpu-2: 8 H100s running team-b's eval-0;
    cpu-1 has no GPUs."""
    place(
        [node_object("gpu-1", gpus=2), node_object("gpu-2"), node_object("cpu-1", gpus=0)],
        [
            pod_object("gpu-1", "team-a-ml", "train-0"),
            pod_object("gpu-2", "team-b-ml", "eval-0"),
        ],
        now=NOW,
    )


def stored():
    return list(GpuSample.objects.order_by("uuid").values_list("uuid", "namespace", "pod", "team"))


# ------------------------------------------------------------------ the pod decides the namespace


def test_the_namespace_and_team_come_from_the_pod_not_the_agent(cast):
    claim = proc("team-b-ml", "train-0", uid="uid-train-0")  # team-b would pay for team-a's pod
    result = ingest(sample(processes=[claim]))
    assert result.rejected_reasons == []
    assert stored() == [("GPU-0", "team-a-ml", "train-0", cast.team_a.pk)]


@pytest.mark.parametrize(
    "claim",
    [
        proc("team-b-ml", "train-0"),  # a namespace that bills another team
        proc("team-b-ml", "eval-0"),  # team-b's pod, but on another node
        proc(uid="uid-eval-0"),  # the same, by UID
        proc("no-such-namespace", "p"),  # an unknown namespace
        proc(uid="0b6c-made-up"),
    ],
)
def test_a_sample_naming_a_pod_the_collection_does_not_place_on_the_node_is_refused(claim):
    result = ingest(sample(processes=[proc(uid="uid-train-0"), claim]))
    assert result.accepted == 0
    assert "is not a GPU pod on node gpu-1 in the latest collection" in result.rejected_reasons[0]
    assert not GpuSample.objects.exists()


def test_processes_outside_pods_leave_the_gpu_unattributed():
    result = ingest(sample(processes=[proc()]))
    assert result.accepted == 1
    assert stored() == [("GPU-0", "", "", None)]


# ------------------------------------------------------------------ only the node's own GPUs


def test_a_node_the_collection_gives_no_gpus_reports_none():
    for node in ("cpu-1", "unknown-node"):
        result = ingest(sample(), node=node)
        assert result.accepted == 0
        assert result.rejected_reasons == [
            f"samples[0]: node {node} has no GPUs in the latest collection"
        ]


def test_an_index_beyond_the_nodes_gpus_is_refused():
    result = ingest(sample("GPU-0", index=0), sample("GPU-1", index=1), sample("GPU-9", index=2))
    assert result.accepted == 2
    assert result.rejected_reasons == [
        "samples[2]: index 2 is not a GPU of node gpu-1 (the latest collection counts 2)"
    ]


def test_a_gpu_uuid_another_node_reports_is_refused():
    assert ingest(sample("GPU-B0"), node="gpu-2").accepted == 1
    result = ingest(sample("GPU-B0", ts="2025-05-01T12:00:15+00:00"))
    assert result.rejected_reasons == ["samples[0]: GPU GPU-B0 is reported by node gpu-2"]
    assert GpuSample.objects.filter(uuid="GPU-B0").count() == 1


def test_a_node_reports_no_more_distinct_gpus_than_it_has():
    ingest(sample("GPU-0", index=0), sample("GPU-1", index=1))
    result = ingest(sample("GPU-X", index=1, ts="2025-05-01T12:00:15+00:00"))
    assert result.rejected_reasons == [
        "samples[0]: node gpu-1 already reports 2 GPUs; GPU-X would be one more"
    ]
    # A GPU that stopped reporting a sample window ago may be replaced.
    later = NOW + timedelta(hours=2)
    result = ingest(sample("GPU-X", index=1, ts=later.isoformat()), now=later)
    assert result.accepted == 1


@pytest.mark.parametrize("model", ["NVIDIA A100-SXM4-40GB", "", "<script>", "x" * 5000])
def test_a_model_that_is_not_the_nodes_gpu_product_is_refused(model):
    result = ingest(sample(model=model))
    assert result.accepted == 0
    assert f"is not node gpu-1's GPU ({H100})" in result.rejected_reasons[0]


def test_on_a_node_without_a_product_label_the_sample_carries_no_flavor():
    place([node_object("plain-1", gpus=1, product=None)], [], now=NOW)
    result = ingest(sample(model="Anything The Agent Likes"), node="plain-1")
    assert result.accepted == 1
    assert GpuSample.objects.get().model == ""


# ------------------------------------------------------------------ times in a bounded window


@pytest.mark.parametrize(
    ("ts", "reason"),
    [
        ("0001-01-01T00:00:00+14:00", "ts is out of range"),
        ("0001-01-01T00:00:00+00:00", "ts is older than 3600 seconds"),
        ("2025-05-01T11:00:29+00:00", "ts is older than 3600 seconds"),
        ("2025-05-01T12:00:00+23:59", "ts is older than 3600 seconds"),
        ("9999-12-31T23:59:59-23:59", "ts is out of range"),
        ("2025-05-01T12:06:00+00:00", "ts is in the future"),
        ("2025-13-01T00:00:00+00:00", "ts must be an ISO 8601 time"),
    ],
)
def test_a_time_outside_the_window_is_refused_not_stored(ts, reason):
    result = ingest(sample(ts=ts))
    assert result.rejected_reasons == [f"samples[0]: {reason}"]
    assert not GpuSample.objects.exists()


def test_the_window_is_a_setting(settings):
    settings.FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS = 7200
    assert ingest(sample(ts="2025-05-01T10:30:00+00:00")).accepted == 1


@pytest.mark.parametrize("field", ["uuid", "model"])
def test_a_nul_byte_in_a_sample_is_refused_not_a_500(field):
    result = ingest(sample(**{field: "GPU\x00-0"}))
    assert result.accepted == 0
    assert len(result.rejected_reasons) == 1


# ------------------------------------------------------------------ refused samples are counted


def test_refused_samples_are_counted_per_node_hour_and_reason():
    ingest(sample(index=7), sample(ts="1999-01-01T00:00:00Z"), sample(model="fake"))
    ingest(sample(index=9), now=NOW + timedelta(minutes=1))
    rows = {
        (r.node, r.hour, r.reason): (r.count, r.example) for r in GpuSampleRejection.objects.all()
    }
    hour = datetime(2025, 5, 1, 12, tzinfo=UTC)
    assert rows == {
        ("gpu-1", hour, "index"): (
            2,
            "index 9 is not a GPU of node gpu-1 (the latest collection counts 2)",
        ),
        ("gpu-1", hour, "ts"): (1, "ts is older than 3600 seconds"),
        ("gpu-1", hour, "model"): (1, f"model 'fake' is not node gpu-1's GPU ({H100})"),
    }


# ------------------------------------------------------------------ the collection keeps it current


def test_each_collection_replaces_the_inventory(cast):
    from kubernetes.utils import parse_quantity

    from monitoring.domain.aggregate import aggregate

    usage = aggregate(
        [node_object("gpu-1", gpus=2)],
        [pod_object("gpu-1", "team-a-ml", "train-1")],  # train-0 ended, train-1 started
        {"team-a-ml": "team-a"},
        parse_quantity=parse_quantity,
    )
    store_usage(usage, now=NOW - timedelta(days=1), source="test")
    assert ingest(sample(processes=[proc(uid="uid-train-1")])).accepted == 1
    result = ingest(sample("GPU-1", index=1, processes=[proc(uid="uid-train-0")]))
    assert "not a GPU pod on node gpu-1" in result.rejected_reasons[0]
    assert ingest(sample("GPU-B"), node="gpu-2").rejected_reasons == [
        "samples[0]: node gpu-2 has no GPUs in the latest collection"
    ]


# ------------------------------------------------------------------ through the API


def agent_client(cast, node="gpu-1"):
    token = issue_token(
        owner=cast.root, name=node, kind="node-agent", node=node, actor=cast.root
    ).raw
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_api_answers_with_the_count_and_reasons_and_the_list_keeps_working(cast, settings):
    settings.FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS = 10**9  # NOW is in the past of the test run
    client = agent_client(cast)
    body = {
        "node": "gpu-1",
        "samples": [
            sample(),
            sample("GPU-1", index=1, ts="0001-01-01T00:00:00+14:00"),
            sample("GPU-1", index=1, model="Forged 9000"),
        ],
    }
    response = client.post("/api/v1/gpu-samples/ingest/", json.dumps(body), "application/json")
    assert response.status_code == 200, response.content
    assert (response.json()["accepted"], response.json()["rejected"]) == (1, 2)
    listed = Client()
    listed.force_login(cast.root)
    assert listed.get("/api/v1/gpu-samples/").status_code == 200


@pytest.mark.parametrize("field", ["uuid", "model"])
def test_through_the_api_a_nul_byte_is_a_400_naming_the_field(cast, field):
    body = {"node": "gpu-1", "samples": [sample(**{field: "GPU\x00"})]}
    response = agent_client(cast).post(
        "/api/v1/gpu-samples/ingest/", json.dumps(body), "application/json"
    )
    assert response.status_code == 400
    assert f"samples[0].{field}" in response.json()["errors"]


def test_the_migration_drops_samples_stored_before_1970():
    import importlib

    from django.apps import apps

    migration = importlib.import_module(
        "monitoring.migrations.0004_gpu_inventory_and_ingest_rejections"
    )
    for year in (1, 1969, 2025):
        GpuSample.objects.create(
            taken_at=datetime(year, 6, 1, tzinfo=UTC), node="gpu-1", uuid=f"GPU-{year}"
        )
    migration.drop_samples_before_1970(apps, None)
    assert list(GpuSample.objects.values_list("uuid", flat=True)) == ["GPU-2025"]
