"""The fake API server, driven through the real kubernetes client."""

from __future__ import annotations

import json
import time

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi.server import FakeKubeApi

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"
MANAGED = {"app.kubernetes.io/managed-by": "fairshare"}


@pytest.fixture
def core(kubeapi):
    return client.CoreV1Api(kubeapi.api_client())


@pytest.fixture
def custom(kubeapi):
    return client.CustomObjectsApi(kubeapi.api_client())


def queue(name="team-a", **spec):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name, "labels": dict(MANAGED)},
        "spec": spec or {"weight": 2, "capability": {"nvidia.com/gpu": 8}},
    }


def namespace(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}}


def quota(name="fairshare", **hard):
    return {"metadata": {"name": name}, "spec": {"hard": hard or {"requests.cpu": "4"}}}


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


# ------------------------------------------------------------------ CRUD


def test_it_creates_objects_with_server_set_metadata(kubeapi, core):
    created = core.create_namespace(namespace("team-a"))

    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.status.phase == "Active"
    assert kubeapi.get("Namespace", "team-a")["metadata"]["uid"] == created.metadata.uid


def test_it_answers_409_already_exists_for_a_duplicate_create(core):
    core.create_namespace(namespace("team-a"))

    with pytest.raises(ApiException) as exc:
        core.create_namespace(namespace("team-a"))

    assert exc.value.status == 409
    assert status_of(exc.value)["reason"] == "AlreadyExists"


def test_it_answers_404_for_an_object_in_a_missing_namespace(core):
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_resource_quota("nowhere", quota())

    assert exc.value.status == 404
    assert status_of(exc.value)["message"] == 'namespaces "nowhere" not found'


def test_it_answers_404_status_for_a_missing_object(core):
    with pytest.raises(ApiException) as exc:
        core.read_namespace("ghost")

    body = status_of(exc.value)
    assert (exc.value.status, body["kind"], body["reason"]) == (404, "Status", "NotFound")


def test_it_rejects_an_update_with_a_stale_resource_version(core):
    core.create_namespace(namespace("team-a"))
    core.create_namespaced_resource_quota("team-a", quota())
    current = core.read_namespaced_resource_quota("fairshare", "team-a")
    current.spec.hard = {"requests.cpu": "8"}
    updated = core.replace_namespaced_resource_quota("fairshare", "team-a", current)

    current.spec.hard = {"requests.cpu": "16"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_resource_quota("fairshare", "team-a", current)

    assert exc.value.status == 409
    assert status_of(exc.value)["reason"] == "Conflict"
    assert updated.spec.hard == {"requests.cpu": "8"}
    assert updated.metadata.generation == 2


def test_it_does_not_bump_the_resource_version_for_a_no_op_update(core):
    created = core.create_namespace(namespace("team-a", {"a": "1"}))

    again = core.replace_namespace("team-a", created)

    assert again.metadata.resource_version == created.metadata.resource_version


def test_it_merge_patches_and_removes_keys_set_to_null(kubeapi, core):
    core.create_namespace(namespace("team-a", {"a": "1", "b": "2"}))

    core.patch_namespace(
        "team-a",
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        _content_type="application/merge-patch+json",
    )

    # kubernetes.io/metadata.name: SetDefaults_Namespace puts it back on every write.
    assert kubeapi.get("Namespace", "team-a")["metadata"]["labels"] == {
        "b": "2",
        "c": "3",
        "kubernetes.io/metadata.name": "team-a",
    }


def test_it_refuses_strategic_merge_patch_on_custom_resources(custom):
    custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue())

    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "queues",
            "team-a",
            {"spec": {"weight": 3}},
            _content_type="application/strategic-merge-patch+json",
        )

    assert exc.value.status == 415


def test_it_deletes_a_namespace_with_everything_in_it(kubeapi, core):
    core.create_namespace(namespace("team-a"))
    core.create_namespaced_resource_quota("team-a", quota())

    core.delete_namespace("team-a")

    assert kubeapi.get("Namespace", "team-a") is None
    assert kubeapi.objects("ResourceQuota") == []


def test_it_serves_rbac_and_priority_classes(kubeapi):
    rbac = client.RbacAuthorizationV1Api(kubeapi.api_client())
    sched = client.SchedulingV1Api(kubeapi.api_client())
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    rbac.create_namespaced_role_binding(
        "team-a",
        {
            "metadata": {"name": "fairshare-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
            ],
        },
    )
    rbac.create_cluster_role({"metadata": {"name": "system:reader"}, "rules": []})
    sched.create_priority_class({"metadata": {"name": "production"}, "value": 1000000})

    bindings = rbac.list_namespaced_role_binding("team-a").items
    assert [b.subjects[0].name for b in bindings] == ["alice"]
    assert sched.read_priority_class("production").preemption_policy == "PreemptLowerPriority"


def test_it_serves_discovery_and_version(kubeapi):
    api_client = kubeapi.api_client()

    assert client.VersionApi(api_client).get_code().major == "1"
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = client.ApisApi(api_client).get_api_versions().groups
    assert {g.name for g in groups} >= {GROUP, "rbac.authorization.k8s.io", "scheduling.k8s.io"}
    resources = client.CustomObjectsApi(api_client).get_api_resources(GROUP, VERSION).resources
    assert [r.name for r in resources] == ["queues", "podgroups"]


# ------------------------------------------------------------------ LIST


def test_it_paginates_with_opaque_continue_tokens(kubeapi, core):
    for i in range(7):
        kubeapi.put_object({"kind": "Namespace", "metadata": {"name": f"t-{i}", "labels": MANAGED}})
    kubeapi.reset_counts()
    selector = "app.kubernetes.io/managed-by=fairshare"

    names, token, pages = [], None, []
    while True:
        page = core.list_namespace(label_selector=selector, limit=3, _continue=token)
        names += [n.metadata.name for n in page.items]
        pages.append(len(page.items))
        token = page.metadata._continue
        if not token:
            break

    assert names == [f"t-{i}" for i in range(7)]
    assert pages == [3, 3, 1]
    assert kubeapi.counts[("list", "Namespace")] == 3


def test_it_reports_remaining_items_without_a_selector(kubeapi, core):
    page = core.list_namespace(limit=1)  # the four default namespaces

    assert page.metadata.remaining_item_count == 3


def test_it_answers_400_for_a_bad_continue_token(core):
    with pytest.raises(ApiException) as exc:
        core.list_namespace(limit=1, _continue="not-a-token!")

    assert exc.value.status == 400


def test_it_refuses_a_resource_version_with_continue_except_zero(core):
    token = core.list_namespace(limit=1).metadata._continue

    assert core.list_namespace(limit=1, _continue=token, resource_version="0").items
    with pytest.raises(ApiException) as exc:
        core.list_namespace(limit=1, _continue=token, resource_version="5")
    assert exc.value.status == 400


def test_it_accepts_resource_version_zero_on_list(core):
    assert len(core.list_namespace(resource_version="0").items) == 4


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gold", ["a"]),
        ("tier==gold", ["a"]),
        ("tier!=gold", ["b", "c"]),
        ("tier in (gold, silver)", ["a", "b"]),
        ("tier notin (gold)", ["b", "c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("tier,team=x", ["a"]),
    ],
)
def test_it_filters_by_label_selector(kubeapi, core, selector, expected):
    kubeapi.store.clear()
    for name, labels in {
        "a": {"tier": "gold", "team": "x"},
        "b": {"tier": "silver"},
        "c": {},
    }.items():
        kubeapi.put_object({"kind": "Namespace", "metadata": {"name": name, "labels": labels}})

    items = core.list_namespace(label_selector=selector).items

    assert [n.metadata.name for n in items] == expected


def test_it_filters_pods_by_field_selector(kubeapi, core):
    for name, phase in (("p1", "Running"), ("p2", "Succeeded"), ("p3", "Pending")):
        kubeapi.put_object(
            {
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": phase},
            }
        )

    pods = core.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed"
    )

    assert [p.metadata.name for p in pods.items] == ["p1", "p3"]


# ------------------------------------------------------------------ server-side apply


def apply(custom, body, **kwargs):
    return custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "queues",
        body["metadata"]["name"],
        body,
        _content_type="application/apply-patch+yaml",
        **kwargs,
    )


def read_queue(custom, name="team-a"):
    return custom.get_cluster_custom_object(GROUP, VERSION, "queues", name)


def raw(api_client, method, path, body=None, query=()):
    """One request without the typed client's own checks; returns (status, JSON body)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    request = api_client.param_serialize(method, path, None, list(query), headers, body)
    response = api_client.call_api(*request)
    return response.status, json.loads(response.read())


def test_it_creates_through_apply_and_records_the_field_manager(kubeapi, custom):
    apply(custom, queue(), field_manager="fairshare")
    created = read_queue(custom)

    entry = created["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"]) == ("fairshare", "Apply")
    assert set(entry["fieldsV1"]["f:spec"]) == {"f:weight", "f:capability"}
    assert created["spec"]["dequeueStrategy"] == "traverse"  # CRD default
    assert kubeapi.counts[("apply", "Queue")] == 1


def test_it_does_not_write_when_an_apply_changes_nothing(custom):
    apply(custom, queue(), field_manager="fairshare")
    first = read_queue(custom)

    second = apply(custom, queue(), field_manager="fairshare")

    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_it_removes_fields_the_manager_stops_applying(kubeapi, custom):
    apply(custom, queue(weight=2, reclaimable=False), field_manager="fairshare")
    before = kubeapi.get("Queue", "team-a")["metadata"]["generation"]

    applied = apply(custom, queue(weight=3), field_manager="fairshare")

    assert "reclaimable" not in applied["spec"]
    assert kubeapi.get("Queue", "team-a")["spec"]["weight"] == 3
    assert applied["metadata"]["generation"] == before + 1


def test_it_answers_409_when_another_manager_owns_the_field_unless_forced(kubeapi, custom):
    apply(custom, queue(weight=2), field_manager="someone-else")

    with pytest.raises(ApiException) as exc:
        apply(custom, queue(weight=5), field_manager="fairshare")
    forced = apply(custom, queue(weight=5), field_manager="fairshare", force=True)

    assert exc.value.status == 409
    assert status_of(exc.value)["details"]["causes"][0]["field"] == ".spec.weight"
    assert forced["spec"]["weight"] == 5
    managers = {e["manager"]: e for e in forced["metadata"]["managedFields"]}
    assert "f:weight" in managers["fairshare"]["fieldsV1"]["f:spec"]


def test_it_shares_a_field_when_managers_apply_the_same_value(kubeapi, custom):
    apply(custom, queue(weight=2), field_manager="someone-else")
    kubeapi.controller_step()

    shared = apply(custom, queue(weight=2), field_manager="fairshare")

    # (queue-controller owns the spec.parent: root it patched on.)
    assert {e["manager"] for e in shared["metadata"]["managedFields"]} == {
        "fairshare",
        "queue-controller",
        "someone-else",
    }


def test_it_requires_a_field_manager_for_apply(custom):
    with pytest.raises(ApiException) as exc:
        apply(custom, queue())

    assert exc.value.status == 400


# ------------------------------------------------------------------ dry run


def test_it_stores_nothing_on_dry_run_writes(kubeapi, core, custom):
    core.create_namespace(namespace("team-a"))
    kubeapi.reset_counts()

    apply(custom, queue(), field_manager="fairshare", dry_run="All")
    core.create_namespaced_resource_quota("team-a", quota(), dry_run="All")
    core.delete_namespace("team-a", dry_run="All")

    assert [q["metadata"]["name"] for q in kubeapi.objects("Queue")] == ["default", "root"]
    assert kubeapi.objects("ResourceQuota") == []
    assert kubeapi.get("Namespace", "team-a") is not None
    assert kubeapi.writes() == 0
    assert kubeapi.counts[("apply", "Queue")] == 1


def test_it_validates_on_dry_run(core):
    with pytest.raises(ApiException) as exc:
        core.create_namespace(namespace("Bad_Name"), dry_run="All")

    assert exc.value.status == 422


# ------------------------------------------------------------------ validation


def invalid_causes(fn) -> list[dict]:
    with pytest.raises(ApiException) as exc:
        fn()
    body = status_of(exc.value)
    assert (exc.value.status, body["kind"], body["reason"]) == (422, "Status", "Invalid")
    return body["details"]["causes"]


@pytest.mark.parametrize(
    ("name", "ok"),
    [("team-a", True), ("Team-A", False), ("team.a", False), ("a" * 64, False), ("-a", False)],
)
def test_it_validates_namespace_names_as_dns_labels(core, name, ok):
    create = lambda: core.create_namespace(namespace(name))  # noqa: E731
    if ok:
        assert create().metadata.name == name
    else:
        assert invalid_causes(create)[0]["field"] == "metadata.name"


@pytest.mark.parametrize(("name", "ok"), [("fair.share", True), ("fair_share", False)])
def test_it_validates_other_names_as_dns_subdomains(kubeapi, core, name, ok):
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    create = lambda: core.create_namespaced_resource_quota("team-a", quota(name))  # noqa: E731
    if ok:
        assert create().metadata.name == name
    else:
        assert invalid_causes(create)[0]["field"] == "metadata.name"


@pytest.mark.parametrize(
    ("hard", "field"),
    [
        ({"requests.cpu": "1.5.5"}, "spec.hard[requests.cpu]"),
        ({"requests.memory": "-1Gi"}, "spec.hard[requests.memory]"),
        ({"nvidia.com/gpu": "8"}, "spec.hard[nvidia.com/gpu]"),
        ({"gpus": "8"}, "spec.hard[gpus]"),
    ],
)
def test_it_rejects_invalid_resource_quotas(kubeapi, core, hard, field):
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})

    causes = invalid_causes(lambda: core.create_namespaced_resource_quota("team-a", quota(**hard)))

    assert [c["field"] for c in causes] == [field]


def test_it_accepts_requests_prefixed_extended_resources_in_quotas(kubeapi, core):
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    hard = {
        "requests.nvidia.com/gpu": "8",
        "limits.cpu": "64",
        "requests.memory": "256Gi",
        # accepted as upstream accepts it (ValidateResourceQuotaResourceName), never enforced
        "limits.nvidia.com/gpu": "8",
    }

    created = core.create_namespaced_resource_quota("team-a", quota(**hard))

    assert created.spec.hard == hard


def test_it_rejects_a_limit_range_default_above_its_max(kubeapi, core):
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    body = {
        "metadata": {"name": "fairshare"},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "max": {"nvidia.com/gpu": "8"},
                    "default": {"nvidia.com/gpu": "9"},
                }
            ]
        },
    }

    causes = invalid_causes(lambda: core.create_namespaced_limit_range("team-a", body))

    # SetDefaults_LimitRangeItem copied the default into defaultRequest: both are over the max.
    assert [c["field"] for c in causes] == [
        "spec.limits[0].defaultRequest[nvidia.com/gpu]",
        "spec.limits[0].default[nvidia.com/gpu]",
    ]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        # (weight 0 is no error on create: mutatequeue.volcano.sh sets it to 1)
        ({"weight": 70000}, "spec.weight"),
        ({"capability": {"cpu": "lots"}}, "spec.capability.cpu"),
        ({"capability": {"cpu": 1.5}}, "spec.capability.cpu"),
        ({"dequeueStrategy": "random"}, "spec.dequeueStrategy"),
        ({"weigth": 2}, "spec.weigth"),
        ({"parent": "Root"}, "spec.parent"),
    ],
)
def test_it_validates_queues_against_the_crd_schema(custom, spec, field):
    causes = invalid_causes(
        lambda: custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue(**spec))
    )

    assert field in [c["field"] for c in causes]


def test_it_accepts_int_or_string_quantities_in_queues(custom):
    body = queue(
        weight=1, capability={"cpu": 64, "memory": "512Gi"}, deserved={"nvidia.com/gpu": "4"}
    )

    created = custom.create_cluster_custom_object(GROUP, VERSION, "queues", body)

    assert created["spec"]["capability"] == {"cpu": 64, "memory": "512Gi"}


def test_it_rejects_unknown_top_level_fields(kubeapi):
    body = {**namespace("team-a"), "sepc": {}}

    status, answer = raw(kubeapi.api_client(), "POST", "/api/v1/namespaces", body)

    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["details"]["causes"][0]["field"] == "sepc"


def test_it_drops_unknown_fields_when_asked_to_ignore_them(kubeapi):
    body = {**namespace("team-a"), "sepc": {}}
    query = [("fieldValidation", "Ignore")]

    status, _ = raw(kubeapi.api_client(), "POST", "/api/v1/namespaces", body, query)

    assert status == 201
    assert "sepc" not in kubeapi.get("Namespace", "team-a")


def test_it_rejects_invalid_labels(core):
    causes = invalid_causes(lambda: core.create_namespace(namespace("team-a", {"team": "a" * 64})))

    assert causes[0]["field"] == "metadata.labels"


def test_it_forbids_a_namespace_on_cluster_scoped_objects(custom):
    body = queue()
    body["metadata"]["namespace"] = "default"

    causes = invalid_causes(
        lambda: custom.create_cluster_custom_object(GROUP, VERSION, "queues", body)
    )

    assert causes[0]["field"] == "metadata.namespace"


def test_it_refuses_to_change_a_role_binding_role_ref(kubeapi):
    rbac = client.RbacAuthorizationV1Api(kubeapi.api_client())
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    rbac.create_namespaced_role_binding(
        "team-a", {"metadata": {"name": "members"}, "roleRef": ref, "subjects": []}
    )

    causes = invalid_causes(
        lambda: rbac.patch_namespaced_role_binding(
            "members",
            "team-a",
            {"roleRef": {**ref, "name": "edit"}},
            _content_type="application/merge-patch+json",
        )
    )

    assert causes[0]["field"] == "roleRef"


def test_it_refuses_to_change_a_priority_class_value(kubeapi):
    sched = client.SchedulingV1Api(kubeapi.api_client())
    sched.create_priority_class({"metadata": {"name": "experiment"}, "value": 100000})

    causes = invalid_causes(
        lambda: sched.patch_priority_class(
            "experiment", {"value": 5}, _content_type="application/merge-patch+json"
        )
    )

    assert causes[0]["field"] == "value"


# ------------------------------------------------------------------ faults


def test_it_injects_a_500_the_given_number_of_times(kubeapi, core):
    rule = kubeapi.fault(500, verb="list", kind="namespaces", times=2)

    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core.list_namespace()
        assert exc.value.status == 500

    assert core.list_namespace().items
    assert rule.fired == 2


def test_it_injects_429_with_retry_after(kubeapi, core):
    kubeapi.fault(429, kind="Namespace", retry_after=7)

    with pytest.raises(ApiException) as exc:
        core.read_namespace("default")

    assert exc.value.status == 429
    assert exc.value.headers["Retry-After"] == "7"
    assert status_of(exc.value)["details"]["retryAfterSeconds"] == 7


def test_it_injects_a_conflict_on_writes_only(kubeapi, core):
    kubeapi.fault(409, verb="write", kind="Namespace")

    core.read_namespace("default")
    with pytest.raises(ApiException) as exc:
        core.patch_namespace("default", {"metadata": {"labels": {"x": "y"}}})

    assert exc.value.status == 409


def test_it_injects_a_timeout_past_the_client_timeout(kubeapi, core):
    kubeapi.fault("timeout", verb="get", delay=5)

    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        core.read_namespace("default", _request_timeout=0.3)

    # The client gave up before the server's 5 s delay ended (well before: 0.3 s, on a busy
    # machine a few seconds at most).
    assert time.monotonic() - started < 4.5


def test_it_injects_a_connection_reset(kubeapi, core):
    kubeapi.fault("reset", verb="list")

    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.list_namespace()
    assert core.list_namespace().items


def test_it_draws_probabilistic_faults_from_a_seeded_rng(kubeapi, core):
    def outcomes():
        kubeapi.reset()
        kubeapi.fault(500, verb="get", times=None, probability=0.5)
        result = []
        for _ in range(12):
            try:
                core.read_namespace("default")
                result.append("ok")
            except ApiException:
                result.append("500")
        return result

    first, second = outcomes(), outcomes()

    assert first == second
    assert set(first) == {"ok", "500"}


def test_it_matches_faults_by_name(kubeapi, core):
    kubeapi.fault(500, name="kube-system")

    assert core.read_namespace("default").metadata.name == "default"
    with pytest.raises(ApiException):
        core.read_namespace("kube-system")


def test_it_rejects_unknown_fault_types(kubeapi):
    with pytest.raises(ValueError):
        kubeapi.fault("explode")


def test_it_restarts_and_can_lose_its_state(kubeapi, core):
    core.create_namespace(namespace("team-a"))

    kubeapi.restart()
    assert core.read_namespace("team-a").metadata.name == "team-a"

    kubeapi.restart(lose_state=True)
    names = [n.metadata.name for n in core.list_namespace().items]
    assert "team-a" not in names
    assert "default" in names


# ------------------------------------------------------------------ counters and helpers


def test_it_counts_requests_per_verb_and_kind(kubeapi, core, custom):
    core.list_namespace()
    core.read_namespace("default")
    core.create_namespace(namespace("team-a"))
    custom.list_cluster_custom_object(GROUP, VERSION, "queues")

    assert kubeapi.counts == {
        ("list", "Namespace"): 1,
        ("get", "Namespace"): 1,
        ("create", "Namespace"): 1,
        ("list", "Queue"): 1,
    }
    assert kubeapi.writes() == 1
    assert kubeapi.writes("Queue") == 0

    kubeapi.reset_counts()
    assert kubeapi.writes() == 0
    assert not kubeapi.counts


def test_it_keeps_setup_objects_out_of_the_counters(kubeapi):
    kubeapi.put_object(queue())

    assert kubeapi.get("queues", "team-a")["metadata"]["resourceVersion"]
    assert not kubeapi.counts


def test_it_starts_each_test_with_fresh_state(kubeapi):
    assert [q["metadata"]["name"] for q in kubeapi.objects("Queue")] == ["default", "root"]
    assert [n["metadata"]["name"] for n in kubeapi.objects("Namespace")] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]
    assert not kubeapi.faults


def test_it_serves_a_standalone_instance_on_a_given_port():
    server = FakeKubeApi(seed=1).start()
    try:
        port = server.port
        server.stop()
        again = FakeKubeApi(port=port).start()
        try:
            api = client.CoreV1Api(again.api_client())
            again.reset()
            assert again.url.endswith(f":{port}")
            assert len(api.list_namespace().items) == 4
        finally:
            again.close()
    finally:
        server.close()


@pytest.mark.slow
def test_it_serves_list_pages_from_a_large_bulk_load(kubeapi, core):
    """What a 155,000-object load holds and how a later page reads; how fast both are is
    bench/kubeapi_load.py's (load < 10 s, page < 1 s on an idle machine)."""
    pods = [
        {
            "kind": "Pod",
            "metadata": {"name": f"pod-{i:06d}", "namespace": f"team-{i % 50:02d}"},
            "spec": {"nodeName": f"node-{i % 5000:04d}", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
        for i in range(150_000)
    ]
    nodes = [{"kind": "Node", "metadata": {"name": f"node-{i:04d}"}} for i in range(5000)]

    assert kubeapi.load(nodes) + kubeapi.load(pods) == 155_000
    first = core.list_pod_for_all_namespaces(limit=500)
    later = core.list_pod_for_all_namespaces(limit=500, _continue=first.metadata._continue)

    assert len(later.items) == 500
    assert later.metadata.remaining_item_count == 149_000
