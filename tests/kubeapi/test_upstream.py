"""The fake API server imitates upstream behaviour that changes what Fairshare sees: Kubernetes
defaulting and validation, Volcano's webhooks and queue controller, per-key server-side-apply
ownership, JSON patch and OpenAPI. One test per behaviour, through the real kubernetes client."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi, SchedulingV1Api
from kubernetes.client.exceptions import ApiException

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"
GPU = "nvidia.com/gpu"


@pytest.fixture
def core(kubeapi):
    return CoreV1Api(kubeapi.api_client())


@pytest.fixture
def custom(kubeapi):
    return CustomObjectsApi(kubeapi.api_client())


def apply(api_client, path, body, manager="fairshare", force=True):
    query = [("fieldManager", manager)] + ([("force", "true")] if force else [])
    params = api_client.param_serialize(
        method="PATCH",
        resource_path=path,
        query_params=query,
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "*/*"},
        body=body,
    )
    response = api_client.call_api(*params)
    data = response.read()
    if response.status >= 400:
        error = ApiException(status=response.status, reason="")
        error.body = data.decode()
        raise error
    return json.loads(data)


def queue(name, **spec):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_queue(custom, name, **spec):
    return custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue(name, **spec))


def denied(call) -> str:
    with pytest.raises(ApiException) as exc:
        call()
    assert exc.value.status == 400, exc.value.body
    body = json.loads(exc.value.body)
    assert body["message"].startswith('admission webhook "validatequeue.volcano.sh" denied')
    return body["message"]


# --------------------------------------------------------------------------- Kubernetes defaults


def test_namespaces_get_the_metadata_name_label(kubeapi, core):
    core.create_namespace({"metadata": {"name": "team-a"}})

    assert kubeapi.get("Namespace", "team-a")["metadata"]["labels"] == {
        "kubernetes.io/metadata.name": "team-a"
    }


def test_a_container_max_alone_becomes_the_default_and_the_default_request(kubeapi, core):
    core.create_namespace({"metadata": {"name": "team-a"}})
    item = {
        "type": "Container",
        "max": {GPU: "8"},
        "default": {"cpu": "2"},
        "min": {"memory": "1Gi"},
    }
    core.create_namespaced_limit_range(
        "team-a", {"metadata": {"name": "lr"}, "spec": {"limits": [item]}}
    )

    stored = kubeapi.get("LimitRange", "lr", "team-a")["spec"]["limits"][0]
    # SetDefaults_LimitRangeItem: max → default, default → defaultRequest, min → defaultRequest
    assert stored["default"] == {"cpu": "2", GPU: "8"}
    assert stored["defaultRequest"] == {"cpu": "2", GPU: "8", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("limits", "field", "text"),
    [
        ([{"type": "Container"}, {"type": "Container"}], "spec.limits[1].type", "Duplicate"),
        ([{"type": "Pod", "default": {"cpu": "1"}}], "spec.limits[0].default", "Forbidden"),
        (
            [{"type": "Container", "default": {GPU: "2"}, "defaultRequest": {GPU: "1"}}],
            f"spec.limits[0].defaultRequest[{GPU}]",
            "must equal to defaultRequest",
        ),
    ],
)
def test_limit_ranges_are_validated_like_validate_limit_range(kubeapi, core, limits, field, text):
    core.create_namespace({"metadata": {"name": "team-a"}})
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_limit_range(
            "team-a", {"metadata": {"name": "lr"}, "spec": {"limits": limits}}
        )
    causes = json.loads(exc.value.body)["details"]["causes"]
    assert exc.value.status == 422
    assert [c["field"] for c in causes] == [field]
    assert text in causes[0]["message"]


def test_priority_class_value_and_preemption_policy_are_immutable(kubeapi):
    api = SchedulingV1Api(kubeapi.api_client())
    api.create_priority_class({"metadata": {"name": "p"}, "value": 10})
    assert kubeapi.get("PriorityClass", "p")["preemptionPolicy"] == "PreemptLowerPriority"

    with pytest.raises(ApiException) as exc:
        api.patch_priority_class("p", {"preemptionPolicy": "Never"})

    assert exc.value.status == 422
    assert json.loads(exc.value.body)["details"]["causes"][0]["field"] == "preemptionPolicy"


def test_only_one_priority_class_may_be_the_global_default(kubeapi):
    api = SchedulingV1Api(kubeapi.api_client())
    api.create_priority_class({"metadata": {"name": "a"}, "value": 1, "globalDefault": True})

    with pytest.raises(ApiException) as exc:
        api.create_priority_class({"metadata": {"name": "b"}, "value": 2, "globalDefault": True})

    assert exc.value.status == 403
    assert "PriorityClass a is already marked as default" in exc.value.body


# --------------------------------------------------------------------------- Volcano


def test_a_new_queue_is_defaulted_then_given_root_as_parent_and_opened(kubeapi, custom):
    kubeapi.auto_controller = False
    make_queue(custom, "q")
    # Until the queue controller has run, the queue has neither a parent nor a state.
    before = kubeapi.get("Queue", "q")
    assert "parent" not in before["spec"] and "status" not in before
    assert kubeapi.pending_controller_actions() == ["q"]

    assert kubeapi.controller_step() == ["q"]

    stored = kubeapi.get("Queue", "q")
    assert stored["spec"] == {
        "reclaimable": True,  # mutate_queue.go
        "weight": 1,  # mutate_queue.go
        "dequeueStrategy": "traverse",  # the CRD default
        "parent": "root",  # queue_controller_action.go updateQueueParent
    }
    assert stored["status"]["state"] == "Open"
    managers = {e["manager"]: e["fieldsV1"] for e in stored["metadata"]["managedFields"]}
    assert managers["queue-controller"] == {"f:spec": {"f:parent": {}}}


def test_guarantee_deserved_and_capability_must_nest(custom):
    message = denied(
        lambda: make_queue(custom, "q", guarantee={"resource": {GPU: "4"}}, capability={GPU: "8"})
    )
    assert "deserved[nvidia.com/gpu] must be >= guarantee[nvidia.com/gpu]=4" in message
    message = denied(lambda: make_queue(custom, "q", deserved={GPU: "9"}, capability={GPU: "8"}))
    assert "must be <= capability[nvidia.com/gpu]=8" in message


def test_the_parent_must_exist(custom):
    assert "not found" in denied(lambda: make_queue(custom, "child", parent="nope"))


def test_a_child_capability_may_not_exceed_its_nearest_ancestors(custom):
    make_queue(custom, "dept", capability={GPU: "8"})
    make_queue(custom, "mid", parent="dept")  # no capability: the check looks further up
    message = denied(lambda: make_queue(custom, "team", parent="mid", capability={GPU: "16"}))
    assert "exceeds its ancestor's capability" in message


def test_childrens_guarantees_and_deserved_may_not_exceed_the_parents(custom):
    make_queue(custom, "dept", guarantee={"resource": {GPU: "8"}}, deserved={GPU: "10"})
    make_queue(custom, "a", parent="dept", guarantee={"resource": {GPU: "6"}}, deserved={GPU: "6"})

    message = denied(
        lambda: make_queue(
            custom, "b", parent="dept", guarantee={"resource": {GPU: "3"}}, deserved={GPU: "3"}
        )
    )
    assert "sum of children's guarantee" in message
    # and the parent cannot shrink below its children either
    message = denied(
        lambda: custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "queues",
            "dept",
            {"spec": {"guarantee": {"resource": {GPU: "5"}}, "deserved": {GPU: "5"}}},
        )
    )
    assert "queue dept validation failed: sum of children's guarantee" in message


def test_a_resource_the_parent_lacks_counts_as_zero(custom):
    make_queue(custom, "dept")
    message = denied(
        lambda: make_queue(
            custom, "a", parent="dept", guarantee={"resource": {GPU: "1"}}, deserved={GPU: "1"}
        )
    )
    assert "exceeds parent's guarantee limit" in message


def test_queues_with_children_and_volcanos_own_queues_cannot_be_deleted(custom):
    make_queue(custom, "dept")
    make_queue(custom, "a", parent="dept")

    assert "has 1 child queues: a" in denied(
        lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "dept")
    )
    assert "`root` queue can not be deleted" in denied(
        lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "root")
    )
    custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "a")
    custom.delete_cluster_custom_object(GROUP, VERSION, "queues", "dept")


def test_a_podgroup_on_the_default_queue_moves_to_its_namespaces_queue(kubeapi, core, custom):
    core.create_namespace(
        {"metadata": {"name": "ml", "annotations": {"scheduling.volcano.sh/queue-name": "team"}}}
    )
    make_queue(custom, "team")
    kubeapi.controller_step()  # the queue controller opens it
    for name, spec in (
        ("routed", {}),
        ("explicit", {"queue": "default"}),
        ("chosen", {"queue": "root"}),
    ):
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            "ml",
            "podgroups",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {"minMember": 1, **spec},
            },
        )

    queues = {
        n: kubeapi.get("PodGroup", n, "ml")["spec"]["queue"]
        for n in ("routed", "explicit", "chosen")
    }
    assert queues == {"routed": "team", "explicit": "team", "chosen": "root"}


def test_a_podgroup_needs_an_open_queue_that_exists(core, custom):
    core.create_namespace({"metadata": {"name": "ml"}})
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            "ml",
            "podgroups",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": 1, "queue": "missing"},
            },
        )
    assert "unable to find queue" in exc.value.body


# --------------------------------------------------------------------------- server-side apply


def test_ownership_is_per_map_key_and_other_managers_keys_stay(kubeapi, core):
    core.create_namespace({"metadata": {"name": "ml"}})
    client = kubeapi.api_client()
    path = "/api/v1/namespaces/ml/resourcequotas/fairshare"
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "fairshare", "namespace": "ml"},
        "spec": {"hard": {"requests.cpu": "8", "requests.memory": "1Gi"}},
    }
    apply(client, path, quota)
    core.patch_namespaced_resource_quota(
        "fairshare",
        "ml",
        {"spec": {"hard": {"count/pods": "10"}}},
        _content_type="application/merge-patch+json",
    )
    quota["spec"]["hard"] = {"requests.cpu": "8"}  # we stop setting memory

    stored = apply(client, path, quota)

    assert stored["spec"]["hard"] == {"requests.cpu": "8", "count/pods": "10"}
    fields = {e["manager"]: e["fieldsV1"] for e in stored["metadata"]["managedFields"]}
    assert fields.pop("fairshare") == {"f:spec": {"f:hard": {"f:requests.cpu": {}}}}
    assert list(fields.values()) == [{"f:spec": {"f:hard": {"f:count/pods": {}}}}]


def test_conflicts_are_per_key(kubeapi, core):
    core.create_namespace({"metadata": {"name": "ml"}})
    client = kubeapi.api_client()
    path = "/api/v1/namespaces/ml/resourcequotas/q"
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "ml"},
        "spec": {"hard": {"requests.cpu": "1"}},
    }
    apply(client, path, body, manager="other")
    # a different key of the same map: no conflict
    mine = {**body, "spec": {"hard": {"requests.memory": "1Gi"}}}
    apply(client, path, mine, force=False)
    # the same key with another value: a conflict naming it
    with pytest.raises(ApiException) as exc:
        apply(client, path, {**body, "spec": {"hard": {"requests.cpu": "2"}}}, force=False)
    assert exc.value.status == 409
    assert "conflict" in exc.value.body and ".spec.hard.requests.cpu" in exc.value.body


def test_json_patch(kubeapi, core):
    core.create_namespace({"metadata": {"name": "ml", "labels": {"a": "1"}}})
    core.patch_namespace(
        "ml",
        [
            {"op": "add", "path": "/metadata/annotations", "value": {"x/y": "z"}},
            {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
            {"op": "test", "path": "/metadata/name", "value": "ml"},
        ],
        _content_type="application/json-patch+json",
    )
    stored = kubeapi.get("Namespace", "ml")["metadata"]
    assert stored["annotations"] == {"x/y": "z"}
    assert stored["labels"]["a"] == "2"
    with pytest.raises(ApiException) as exc:
        core.patch_namespace(
            "ml",
            [{"op": "remove", "path": "/metadata/labels/missing"}],
            _content_type="application/json-patch+json",
        )
    assert exc.value.status == 422


# --------------------------------------------------------------------------- OpenAPI


def test_openapi_v3_lists_patch_with_field_validation_for_every_kind(kubeapi):
    client = kubeapi.api_client()

    def get(path):
        params = client.param_serialize(method="GET", resource_path=path)
        return json.loads(client.call_api(*params).read())

    root = get("/openapi/v3")["paths"]
    assert {
        "api/v1",
        "apis/scheduling.volcano.sh/v1beta1",
        "apis/rbac.authorization.k8s.io/v1",
        "apis/scheduling.k8s.io/v1",
    } <= set(root)
    doc = get(root["apis/scheduling.volcano.sh/v1beta1"]["serverRelativeURL"].split("?")[0])
    patch = doc["paths"]["/apis/scheduling.volcano.sh/v1beta1/queues/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": GROUP,
        "version": VERSION,
        "kind": "Queue",
    }
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "spec" in doc["components"]["schemas"][f"{GROUP}.{VERSION}.Queue"]["properties"]
    core = get(root["api/v1"]["serverRelativeURL"].split("?")[0])
    limit_range = core["components"]["schemas"]["io.k8s.api.core.v1.LimitRangeSpec"]
    assert limit_range["properties"]["limits"]["x-kubernetes-list-type"] == "atomic"
    assert get("/openapi/v2")["swagger"] == "2.0"
