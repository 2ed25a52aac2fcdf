"""The fake API server has time in it, as a Volcano cluster does (issue 25): the queue webhooks
validate against an informer cache that lags the writes (``webhook_cache_lag``), and the queue
controller parents and opens a new Queue after the write, not inside it (``controller_step``).
Through the real kubernetes client."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from .test_workload_kinds import vcjob

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"
BATCH, BATCH_VERSION = "batch.volcano.sh", "v1alpha1"
GPU = "nvidia.com/gpu"


@pytest.fixture
def custom(kubeapi):
    return CustomObjectsApi(kubeapi.api_client())


@pytest.fixture
def core(kubeapi):
    api = CoreV1Api(kubeapi.api_client())
    api.create_namespace({"metadata": {"name": "ml"}})
    return api


def queue(name, **spec):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_queue(custom, name, **spec):
    return custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue(name, **spec))


def podgroup(name, queue_name):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 1, "queue": queue_name},
    }


def message(exc: pytest.ExceptionInfo[ApiException]) -> str:
    return json.loads(exc.value.body)["message"]


# --------------------------------------------------------------------------- webhook cache lag


def test_without_lag_a_child_right_after_its_parent_is_admitted(kubeapi, custom):
    make_queue(custom, "dept", capability={GPU: "8"})
    make_queue(custom, "team", parent="dept", capability={GPU: "4"})

    assert kubeapi.get("Queue", "team")["spec"]["parent"] == "dept"
    assert kubeapi.stale_denials == 0


def test_with_one_write_of_lag_the_webhook_does_not_see_the_parent_yet(kubeapi, custom):
    kubeapi.webhook_cache_lag = 1
    kubeapi.webhook_cache_delay = 30.0
    make_queue(custom, "dept", capability={GPU: "8"})

    with pytest.raises(ApiException) as exc:
        make_queue(custom, "team", parent="dept", capability={GPU: "4"})

    assert exc.value.status == 400
    assert message(exc) == (
        'admission webhook "validatequeue.volcano.sh" denied the request: failed to get parent '
        'queue dept of queue team: queue.scheduling.volcano.sh "dept" not found'
    )
    assert kubeapi.stale_denials == 1
    assert "dept" not in kubeapi.webhook_view()
    assert kubeapi.get("Queue", "team") is None


def test_the_lag_hides_only_the_last_n_writes(kubeapi, custom):
    kubeapi.webhook_cache_lag = 1
    kubeapi.webhook_cache_delay = 30.0
    make_queue(custom, "dept", capability={GPU: "8"})
    make_queue(custom, "other")  # a second write: dept is now two writes back

    make_queue(custom, "team", parent="dept", capability={GPU: "4"})

    view = kubeapi.webhook_view()
    assert "dept" in view and "team" not in view
    assert kubeapi.stale_denials == 0


def test_a_lagged_view_catches_up_and_a_retry_with_backoff_converges(kubeapi, custom):
    kubeapi.webhook_cache_lag = 1
    kubeapi.webhook_cache_delay = 0.2
    make_queue(custom, "dept", capability={GPU: "8"})
    started = time.monotonic()
    attempts, delay = 0, 0.05
    while True:
        attempts += 1
        try:
            make_queue(custom, "team", parent="dept", capability={GPU: "4"})
            break
        except ApiException as e:
            assert e.status == 400 and attempts < 10
            time.sleep(delay)
            delay *= 2

    assert attempts > 1
    assert time.monotonic() - started < 1.0
    assert kubeapi.stale_denials == attempts - 1


def test_a_lagged_delete_of_a_parent_still_sees_the_child_just_deleted(kubeapi, custom):
    make_queue(custom, "dept", capability={GPU: "8"})
    make_queue(custom, "team", parent="dept", capability={GPU: "4"})
    kubeapi.webhook_cache_lag = 1
    kubeapi.webhook_cache_delay = 30.0
    custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "team")

    with pytest.raises(ApiException) as exc:
        custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "dept")

    assert "queue dept can not be deleted because it has 1 child queues: team" in message(exc)
    assert kubeapi.stale_denials == 1
    assert kubeapi.get("Queue", "dept") is not None


def test_a_lagged_update_is_checked_against_the_siblings_as_they_were(kubeapi, custom):
    # A department grows, then its child grows into the new room: with lag the webhook still
    # sees the department's old deserved amount.
    kubeapi.controller_delay = 0
    make_queue(custom, "dept", deserved={GPU: "4"}, capability={GPU: "8"})
    make_queue(custom, "team", parent="dept", deserved={GPU: "4"})
    kubeapi.webhook_cache_lag = 1
    kubeapi.webhook_cache_delay = 30.0
    custom.patch_cluster_custom_object(
        GROUP, VERSION, "queues", "dept", {"spec": {"deserved": {GPU: "8"}}}
    )

    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object(
            GROUP, VERSION, "queues", "team", {"spec": {"deserved": {GPU: "8"}}}
        )

    assert "sum of children's deserved" in message(exc)
    assert kubeapi.webhook_view()["dept"]["spec"]["deserved"] == {GPU: "4"}


# --------------------------------------------------------------------------- queue controller


def test_a_podgroup_is_refused_a_queue_the_controller_has_not_opened(kubeapi, core, custom):
    kubeapi.auto_controller = False
    make_queue(custom, "team")

    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "ml", "podgroups", podgroup("pg", "team")
        )
    assert message(exc) == (
        'admission webhook "validatepodgroup.volcano.sh" denied the request: can only submit '
        "PodGroup to queue with state `Open`, queue `team` status is ``. "
    )
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            BATCH, BATCH_VERSION, "ml", "jobs", vcjob(queue="team")
        )
    assert "can only submit job to queue with state `Open`, queue `team` status is ``" in (
        message(exc)
    )

    kubeapi.controller_step()
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "podgroups", podgroup("pg", "team")
    )
    custom.create_namespaced_custom_object(BATCH, BATCH_VERSION, "ml", "jobs", vcjob(queue="team"))

    assert kubeapi.get("Queue", "team")["status"]["state"] == "Open"


def test_the_background_controller_opens_a_queue_after_its_delay(kubeapi, custom):
    kubeapi.controller_delay = 0.1
    make_queue(custom, "team")
    assert "status" not in kubeapi.get("Queue", "team")

    deadline = time.monotonic() + 2.0
    while (kubeapi.get("Queue", "team").get("status") or {}).get("state") != "Open":
        assert time.monotonic() < deadline, "the controller never opened the queue"
        time.sleep(0.02)

    stored = kubeapi.get("Queue", "team")
    assert stored["spec"]["parent"] == "root"
    assert kubeapi.pending_controller_actions() == []


def test_with_no_controller_delay_the_controller_runs_inside_the_write(kubeapi, custom):
    kubeapi.controller_delay = 0
    created = make_queue(custom, "team")

    assert "status" not in created  # the response is the write's, before the controller
    assert kubeapi.get("Queue", "team")["status"]["state"] == "Open"
