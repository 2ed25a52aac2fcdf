"""Volcano Jobs, PodGroups and core/v1 Events on the fake API server (what the workload
collector reads), through the real kubernetes client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

BATCH, BATCH_VERSION = "batch.volcano.sh", "v1alpha1"
SCHED, SCHED_VERSION = "scheduling.volcano.sh", "v1beta1"


@pytest.fixture
def core(kubeapi):
    api = client.CoreV1Api(kubeapi.api_client())
    api.create_namespace({"metadata": {"name": "ml"}})
    return api


@pytest.fixture
def custom(kubeapi):
    return client.CustomObjectsApi(kubeapi.api_client())


def vcjob(name="train", **spec):
    task = {
        "name": "worker",
        "replicas": 4,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "trainer:1",
                        "resources": {"requests": {"nvidia.com/gpu": "8"}},
                    }
                ]
            }
        },
    }
    return {
        "apiVersion": f"{BATCH}/{BATCH_VERSION}",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"minAvailable": 4, "schedulerName": "volcano", "tasks": [task], **spec},
    }


def error_body(exc: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(exc.value.body)


def test_a_volcano_job_is_validated_against_its_crd_schema(kubeapi, core, custom):
    created = custom.create_namespaced_custom_object(BATCH, BATCH_VERSION, "ml", "jobs", vcjob())
    assert created["spec"]["queue"] == "default"  # mutate_job.go patchDefaultQueue

    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            BATCH, BATCH_VERSION, "ml", "jobs", vcjob("bad", minAvailable="four")
        )
    assert exc.value.status == 422
    causes = error_body(exc)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.minAvailable"]

    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            BATCH, BATCH_VERSION, "ml", "jobs", vcjob("typo", minAvaliable=4)
        )
    assert exc.value.status == 422
    assert "spec.minAvaliable" in {c["field"] for c in error_body(exc)["details"]["causes"]}


def test_a_podgroup_with_a_wrong_type_is_refused(core, custom):
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            SCHED,
            SCHED_VERSION,
            "ml",
            "podgroups",
            {
                "apiVersion": f"{SCHED}/{SCHED_VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": "all", "queue": "default"},
            },
        )
    assert exc.value.status == 422


def quota_event(name="train.1", namespace="ml", involved_ns="ml", **extra):
    return {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "namespace": involved_ns,
        },
        "reason": "FailedCreate",
        "type": "Warning",
        "message": 'Error creating: pods "train-x" is forbidden: exceeded quota: fairshare',
        **extra,
    }


def test_events_are_served_and_filtered_by_field(core):
    core.create_namespaced_event("ml", quota_event())
    core.create_namespaced_event(
        "ml", quota_event("train.2", type="Normal", reason="SuccessfulCreate", message="ok")
    )

    warnings = core.list_event_for_all_namespaces(field_selector="type=Warning").items

    assert [e.metadata.name for e in warnings] == ["train.1"]
    assert warnings[0].involved_object.kind == "Job"


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (quota_event(involved_ns="other"), "involvedObject.namespace"),
        (quota_event(type="Error"), "type"),
    ],
)
def test_an_event_is_validated_like_legacy_validate_event(core, event, field):
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_event("ml", event)
    assert exc.value.status == 422
    assert [c["field"] for c in error_body(exc)["details"]["causes"]] == [field]


def test_uninstalled_crds_answer_404(kubeapi, core, custom):
    kubeapi.uninstall(BATCH)

    with pytest.raises(ApiException) as exc:
        custom.list_cluster_custom_object(BATCH, BATCH_VERSION, "jobs")
    assert exc.value.status == 404
    assert custom.list_cluster_custom_object(SCHED, SCHED_VERSION, "podgroups")["items"] == []
