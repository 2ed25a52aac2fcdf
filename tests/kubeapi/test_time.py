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
    # The lag is 0.2 s and the backoff's bound is the attempt count above; this only catches
    # a view that never catches up (a busy machine may stretch the sleeps).
    assert time.monotonic() - started < 30
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


# --------------------------------------------------------------------------- podgroups and queues


def annotate(core, queue_name):
    core.patch_namespace(
        "ml", {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": queue_name}}}
    )


def test_a_podgroups_queue_is_fixed_when_it_is_created(kubeapi, core, custom):
    kubeapi.controller_delay = 0
    make_queue(custom, "old")
    make_queue(custom, "new")
    annotate(core, "old")
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "podgroups", podgroup("running", "default")
    )

    annotate(core, "new")  # e.g. a team renamed: its namespace routes to another queue
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", "podgroups", "running", {"metadata": {"labels": {"x": "y"}}}
    )
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "podgroups", podgroup("later", "default")
    )

    assert kubeapi.get("PodGroup", "running", "ml")["spec"]["queue"] == "old"  # not re-routed
    assert kubeapi.get("PodGroup", "later", "ml")["spec"]["queue"] == "new"


def test_a_job_in_a_queue_that_became_a_parent_blocks_the_whole_scheduler(kubeapi, core, custom):
    kubeapi.controller_delay = 0
    make_queue(custom, "team")
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "podgroups", podgroup("pg", "team")
    )
    assert kubeapi.scheduler_blocked() is None
    assert kubeapi.stranded_podgroups() == []

    make_queue(custom, "team-own", parent="team")  # the leaf team gets its first child

    assert kubeapi.scheduler_blocked() == "The Queue <team> of Job <ml/pg> is not leaf queue"
    assert kubeapi.stranded_podgroups() == [("ml", "pg", "team", "queue team is not a leaf queue")]
    kubeapi.scheduler_hierarchy = False
    assert kubeapi.scheduler_blocked() is None  # buildQueueAttrs has no such check


def test_a_podgroup_whose_queue_was_deleted_is_stranded_but_blocks_nothing(kubeapi, core, custom):
    kubeapi.controller_delay = 0
    make_queue(custom, "team")
    for name in ("pending", "done"):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "ml", "podgroups", podgroup(name, "team")
        )
    done = kubeapi.get("PodGroup", "done", "ml")
    kubeapi.put_object({**done, "status": {"phase": "Completed"}})

    custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "team")

    assert kubeapi.stranded_podgroups() == [("ml", "pending", "team", "queue team does not exist")]
    assert kubeapi.scheduler_blocked() is None  # Snapshot skips the job


def test_a_queue_whose_parent_is_gone_blocks_the_scheduler(kubeapi):
    kubeapi.put_object(queue("orphan", parent="gone"))

    assert kubeapi.scheduler_blocked() == "the queue orphan has invalid parent queue gone"


# --------------------------------------------------------------------------- queue quantities


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            {"capability": {GPU: "-1"}},
            'requestBody.spec.capability.nvidia.com/gpu: Invalid value: "-1": must be greater '
            "than or equal to 0",
        ),
        (
            {"deserved": {GPU: "1.5"}},
            'requestBody.spec.deserved.nvidia.com/gpu: Invalid value: "1.5": must be an integer',
        ),
        (
            {"guarantee": {"resource": {GPU: "500m"}}, "deserved": {GPU: "1"}},
            'requestBody.spec.guarantee.resource.nvidia.com/gpu: Invalid value: "500m": must be '
            "an integer",
        ),
    ],
)
def test_queue_amounts_are_non_negative_and_whole_for_integer_resources(custom, spec, problem):
    with pytest.raises(ApiException) as exc:
        make_queue(custom, "q", **spec)

    assert exc.value.status == 400
    assert message(exc) == (
        f'admission webhook "validatequeue.volcano.sh" denied the request: {problem}'
    )


def test_fractional_cpu_and_memory_are_fine_in_a_queue(kubeapi, custom):
    make_queue(custom, "q", capability={"cpu": "500m", "memory": "1.5Gi", GPU: "2"})

    assert kubeapi.get("Queue", "q")["spec"]["capability"]["cpu"] == "500m"


# --------------------------------------------------------------------------- deletes


def test_the_immortal_namespaces_cannot_be_deleted(kubeapi, core):
    for name in ("default", "kube-system", "kube-public"):
        with pytest.raises(ApiException) as exc:
            core.delete_namespace(name)
        assert exc.value.status == 403
        assert (
            message(exc) == f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        )
        assert kubeapi.get("Namespace", name) is not None

    core.delete_namespace("kube-node-lease")  # not immortal upstream
    assert kubeapi.get("Namespace", "kube-node-lease") is None


def test_a_dry_run_in_the_delete_options_body_deletes_nothing(kubeapi, custom):
    make_queue(custom, "q")

    custom.delete_cluster_custom_object(
        GROUP, VERSION, "queues", "q", body={"kind": "DeleteOptions", "dryRun": ["All"]}
    )

    assert kubeapi.get("Queue", "q") is not None
    assert kubeapi.writes("Queue") == 1  # the create; the dry-run delete is not a write


def test_delete_preconditions_are_checked(kubeapi, custom):
    made = make_queue(custom, "q")
    uid, rv = made["metadata"]["uid"], made["metadata"]["resourceVersion"]
    kubeapi.controller_step()  # the controller writes: the resourceVersion moves on

    with pytest.raises(ApiException) as exc:
        custom.delete_cluster_custom_object(
            GROUP, VERSION, "queues", "q", body={"preconditions": {"uid": "not-" + uid}}
        )
    assert exc.value.status == 409
    assert message(exc) == (
        'Operation cannot be fulfilled on queues.scheduling.volcano.sh "q": Precondition failed: '
        f"UID in precondition: not-{uid}, UID in object meta: {uid}"
    )
    with pytest.raises(ApiException) as exc:
        custom.delete_cluster_custom_object(
            GROUP, VERSION, "queues", "q", body={"preconditions": {"resourceVersion": rv}}
        )
    assert exc.value.status == 409
    assert "Precondition failed: ResourceVersion in precondition" in message(exc)
    assert kubeapi.get("Queue", "q") is not None

    current = kubeapi.get("Queue", "q")["metadata"]["resourceVersion"]
    custom.delete_cluster_custom_object(
        GROUP,
        VERSION,
        "queues",
        "q",
        body={"preconditions": {"uid": uid, "resourceVersion": current}},
    )
    assert kubeapi.get("Queue", "q") is None


def test_delete_options_are_validated(kubeapi, custom):
    make_queue(custom, "q")

    with pytest.raises(ApiException) as exc:
        custom.delete_cluster_custom_object(
            GROUP, VERSION, "queues", "q", body={"propagationPolicy": "Sometimes"}
        )

    assert exc.value.status == 422
    assert "propagationPolicy: Unsupported value" in message(exc)
    assert kubeapi.get("Queue", "q") is not None
