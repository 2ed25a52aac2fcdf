"""Tests for the pure planner (scheduling.domain.plan), in the style of kopf's diff tests."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import pytest
from kubernetes.utils import parse_quantity

from scheduling.domain.plan import (
    Change,
    FieldDiff,
    diff_object,
    field_leaves,
    fields_v1_leaves,
    plan,
    render_diff,
)
from scheduling.domain.render import render
from scheduling.domain.types import ClusterSpec, MemberSpec, NamespaceSpec, TeamSpec, TierSpec

OURS = {"app.kubernetes.io/managed-by": "fairshare", "fairshare.io/team": "team-a"}


def quota(hard: dict, namespace: str = "team-a", labels: dict | None = None, **extra) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "fairshare",
            "namespace": namespace,
            "labels": OURS if labels is None else labels,
        },
        "spec": {"hard": hard},
        **extra,
    }


def queue(name: str, labels: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "labels": OURS if labels is None else labels},
        "spec": {"weight": 1, "reclaimable": True, **spec},
    }


def namespace(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": OURS if labels is None else labels},
    }


def server_side(obj: dict, **metadata) -> dict:
    """``obj`` as the API server returns it: with server-populated metadata and a status."""
    live = copy.deepcopy(obj)
    live["metadata"].update(
        uid="0b7d2f0e-0000-4000-8000-000000000001",
        resourceVersion="4711",
        generation=3,
        creationTimestamp="2025-01-01T00:00:00Z",
        managedFields=[{"manager": "kube-controller-manager", "operation": "Update"}],
        **metadata,
    )
    live["status"] = {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "0"}}
    return live


def fields_v1(obj: dict) -> dict:
    """A ``fieldsV1`` tree owning every leaf of ``obj`` (what its applier would own)."""
    tree: dict = {}
    for path in field_leaves(obj):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def run(desired, live, **kwargs) -> list[Change]:
    return plan(desired, live, parse_quantity=parse_quantity, **kwargs)


def ops(changes) -> list[tuple]:
    return [(c.op, c.kind, c.namespace, c.name) for c in changes]


# ---------------------------------------------------------------- the four operations


def test_a_missing_object_is_created():
    desired = quota({"requests.cpu": "8"})
    assert run([desired], []) == [
        Change("create", "ResourceQuota", "team-a", "fairshare", desired, ())
    ]


def test_an_identical_object_is_unchanged():
    desired = quota({"requests.cpu": "8"})
    assert run([desired], [server_side(desired)]) == [
        Change("unchanged", "ResourceQuota", "team-a", "fairshare", desired, ())
    ]


def test_a_different_object_is_updated_with_its_field_diffs():
    desired = quota({"requests.cpu": "8", "requests.nvidia.com/gpu": "80"})
    live = server_side(quota({"requests.cpu": "8", "requests.nvidia.com/gpu": "64"}))
    assert run([desired], [live]) == [
        Change(
            "update",
            "ResourceQuota",
            "team-a",
            "fairshare",
            desired,
            (FieldDiff("spec.hard.requests.nvidia.com/gpu", "64", "80"),),
        )
    ]


def test_a_labelled_object_no_longer_desired_is_pruned_with_its_live_body():
    live = server_side(quota({"requests.cpu": "8"}, namespace="old"))
    assert run([], [live]) == [Change("prune", "ResourceQuota", "old", "fairshare", live, ())]


# ---------------------------------------------------------------- semantic quantities


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("1073741824", "1Gi"),
        ("1Gi", "1024Mi"),
        ("0.5", "500m"),
        ("8", 8),
        ("1k", "1000"),
        ("64Gi", "68719476736"),
        ("1.5", "1500m"),
        ("1e3", "1k"),
    ],
)
def test_equal_quantities_in_different_notations_are_unchanged(old, new):
    desired = quota({"requests.memory": new})
    live = server_side(quota({"requests.memory": old}))
    assert ops(run([desired], [live])) == [("unchanged", "ResourceQuota", "team-a", "fairshare")]


@pytest.mark.parametrize(
    ("old", "new"),
    [("1Gi", "1G"), ("500m", "0.501"), ("8", "9"), ("garbage", "1"), ("1", "0")],
)
def test_different_quantities_are_reported_as_written(old, new):
    desired = quota({"requests.cpu": new})
    live = server_side(quota({"requests.cpu": old}))
    [change] = run([desired], [live])
    assert change.diff == (FieldDiff("spec.hard.requests.cpu", old, new),)


def test_queue_quantities_are_compared_semantically_too():
    desired = queue("team-a", capability={"memory": "1Ti"}, guarantee={"resource": {"cpu": "0.5"}})
    live = server_side(
        queue(
            "team-a",
            capability={"memory": "1099511627776"},
            guarantee={"resource": {"cpu": "500m"}},
        )
    )
    assert ops(run([desired], [live])) == [("unchanged", "Queue", None, "team-a")]


def test_limit_range_quantities_are_compared_semantically_too():
    item = {"type": "Container", "default": {"cpu": "1", "memory": "1Gi"}}
    desired = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "fairshare", "namespace": "team-a", "labels": OURS},
        "spec": {"limits": [item]},
    }
    live = server_side(desired)
    # As stored: SetDefaults_LimitRangeItem copied default into defaultRequest.
    live["spec"]["limits"][0]["default"] = {"cpu": "1000m", "memory": "1024Mi"}
    live["spec"]["limits"][0]["defaultRequest"] = {"cpu": "1", "memory": "1Gi"}
    assert ops(run([desired], [live])) == [("unchanged", "LimitRange", "team-a", "fairshare")]


def test_numbers_that_are_not_quantities_compare_exactly():
    desired = queue("team-a", weight=2)
    live = server_side(queue("team-a", weight="2"))
    [change] = run([desired], [live])
    assert change.diff == (FieldDiff("spec.weight", "2", 2),)


# ---------------------------------------------------------------- what is ignored


def test_server_populated_fields_are_ignored():
    desired = quota({"requests.cpu": "8"})
    live = server_side(desired)
    live["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    assert diff_object(desired, live, parse_quantity=parse_quantity) == ()


def test_fields_we_do_not_set_are_ignored_on_the_live_object():
    desired = queue("team-a", capability={"nvidia.com/gpu": "8"})
    live = server_side(desired)
    live["spec"].update(dequeueStrategy="traverse", priority=5, type="gpu")
    live["metadata"]["labels"] = {**OURS, "team.example.com/owner": "someone"}
    assert ops(run([desired], [live])) == [("unchanged", "Queue", None, "team-a")]


def test_unlabelled_live_objects_are_never_pruned():
    strangers = [
        server_side(quota({"requests.cpu": "1"}, namespace="other", labels={})),
        server_side(queue("theirs", labels={"app.kubernetes.io/managed-by": "helm"})),
    ]
    assert run([], strangers) == []


def test_an_unlabelled_live_object_we_desire_is_adopted_by_an_update():
    desired = quota({"requests.cpu": "8"})
    live = server_side(quota({"requests.cpu": "8"}, labels={"owner": "manual"}))
    [change] = run([desired], [live])
    assert change.op == "update"
    assert change.diff == (
        FieldDiff("metadata.labels.app.kubernetes.io/managed-by", None, "fairshare"),
        FieldDiff("metadata.labels.fairshare.io/team", None, "team-a"),
    )


# ---------------------------------------------------------------- what counts as a difference


@pytest.mark.parametrize(
    ("live_spec", "desired_spec", "diff"),
    [
        # a field we own disappears from the desired state: the live value must go
        ({"parent": "ai"}, {}, [FieldDiff("spec.parent", "ai", None)]),
        (
            {"capability": {"cpu": "8", "nvidia.com/gpu": "4"}},
            {"capability": {"cpu": "8"}},
            [FieldDiff("spec.capability.nvidia.com/gpu", "4", None)],
        ),
        (
            {"deserved": {"cpu": "8"}},
            {},
            [FieldDiff("spec.deserved.cpu", "8", None)],
        ),
        ({}, {"reclaimable": False}, [FieldDiff("spec.reclaimable", True, False)]),
        # empty and absent are the same thing to the API server
        ({"capability": {}}, {}, []),
        ({}, {"guarantee": {"resource": {}}}, []),
    ],
)
def test_fields_we_applied_before_are_compared_key_by_key(live_spec, desired_spec, diff):
    live = server_side(queue("team-a", **live_spec))
    # We applied everything the live object has (our managedFields entry says so).
    live["metadata"]["managedFields"].append(
        {"manager": "fairshare", "operation": "Apply", "fieldsV1": fields_v1(live)}
    )
    desired = queue("team-a", **desired_spec)
    assert list(diff_object(desired, live, parse_quantity=parse_quantity)) == diff


def test_a_stale_ownership_label_is_a_difference():
    desired = queue("team-a")
    live = server_side(queue("team-a", labels={**OURS, "fairshare.io/tier": "production"}))
    [change] = run([desired], [live])
    assert change.diff == (FieldDiff("metadata.labels.fairshare.io/tier", "production", None),)


def test_a_label_we_applied_before_and_no_longer_want_is_a_difference():
    desired = namespace("ns", labels=OURS)
    live = server_side(
        namespace("ns", labels={**OURS, "env": "dev", "kubernetes.io/metadata.name": "ns"})
    )
    live["metadata"]["managedFields"].append(
        {
            "manager": "fairshare",
            "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:env": {}, "f:fairshare.io/team": {}}}},
        }
    )
    [change] = run([desired], [live])
    assert change.diff == (FieldDiff("metadata.labels.env", "dev", None),)


def test_subject_lists_are_compared_item_by_item():
    def binding(*names):
        subjects = [
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": n} for n in names
        ]
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "fairshare-member", "namespace": "team-a", "labels": OURS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": subjects,
        }

    [change] = run([binding("alice", "bob")], [server_side(binding("alice", "carol", "dave"))])
    # a removed item is reported leaf by leaf, like a removed map
    assert change.diff == (
        FieldDiff("subjects[1].name", "carol", "bob"),
        FieldDiff("subjects[2].apiGroup", "rbac.authorization.k8s.io", None),
        FieldDiff("subjects[2].kind", "User", None),
        FieldDiff("subjects[2].name", "dave", None),
    )
    assert not change.needs_replace


@pytest.mark.parametrize(
    ("live_value", "desired_value", "replace"),
    [(1000, 2000, True), (1000, 1000, False)],
)
def test_changing_a_priority_class_value_needs_a_replace(live_value, desired_value, replace):
    def pc(value):
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "gold", "labels": {"app.kubernetes.io/managed-by": "fairshare"}},
            "value": value,
            "preemptionPolicy": "Never",
            "description": "Gold",
        }

    [change] = run([pc(desired_value)], [server_side(pc(live_value))])
    assert change.needs_replace is replace


# ---------------------------------------------------------------- namespaces and ordering


def test_namespaces_are_never_pruned_by_default_but_released():
    gone = server_side(namespace("gone"))
    gone["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "team-a"}
    gone["metadata"]["managedFields"].append(
        {"manager": "fairshare", "operation": "Apply", "fieldsV1": fields_v1(gone)}
    )
    live = [gone, server_side(quota({"requests.cpu": "1"}, "gone"))]

    changes = run([], live)

    assert ops(changes) == [
        ("update", "Namespace", None, "gone"),
        ("prune", "ResourceQuota", "gone", "fairshare"),
    ]
    # Released: an empty apply removes what we applied, the routing to a queue that is gone.
    release = changes[0]
    # What stays marks it as Fairshare's before, so managing it again is no take-over.
    assert release.body == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "gone", "annotations": {"fairshare.io/released": "true"}},
    }
    assert release.diff == (
        FieldDiff("metadata.annotations.fairshare.io/released", None, "true"),
        FieldDiff("metadata.annotations.scheduling.volcano.sh/queue-name", "team-a", None),
        FieldDiff("metadata.labels.app.kubernetes.io/managed-by", "fairshare", None),
        FieldDiff("metadata.labels.fairshare.io/team", "team-a", None),
    )


def test_namespaces_are_pruned_when_asked_after_their_contents():
    live = [server_side(namespace("gone")), server_side(quota({"requests.cpu": "1"}, "gone"))]
    assert ops(run([], live, prune_namespaces=True)) == [
        ("prune", "ResourceQuota", "gone", "fairshare"),
        ("prune", "Namespace", None, "gone"),
    ]


def test_changes_come_in_dependency_order_and_prunes_in_reverse():
    desired = [
        quota({"requests.cpu": "1"}, "b"),
        queue("vision", parent="ai"),
        quota({"requests.cpu": "1"}, "a"),
        namespace("b"),
        queue("ai"),
        namespace("a"),
    ]
    live = [
        server_side(queue("old-child", parent="old-dept")),
        server_side(queue("old-dept")),
        server_side(quota({"requests.cpu": "1"}, "old")),
        server_side(namespace("old")),
        server_side(namespace("a")),
    ]
    assert ops(run(desired, live, prune_namespaces=True)) == [
        ("unchanged", "Namespace", None, "a"),
        ("create", "Namespace", None, "b"),
        ("create", "Queue", None, "ai"),
        ("create", "Queue", None, "vision"),
        ("create", "ResourceQuota", "a", "fairshare"),
        ("create", "ResourceQuota", "b", "fairshare"),
        ("prune", "ResourceQuota", "old", "fairshare"),
        ("prune", "Queue", None, "old-child"),
        ("prune", "Queue", None, "old-dept"),
        ("prune", "Namespace", None, "old"),
    ]


def test_the_plan_does_not_depend_on_input_order():
    desired = [namespace("a"), namespace("b"), queue("q"), quota({"requests.cpu": "2"}, "a")]
    live = [server_side(namespace("c")), server_side(quota({"requests.cpu": "1"}, "a"))]
    first = run(desired, live, prune_namespaces=True)
    assert run(desired[::-1], live[::-1], prune_namespaces=True) == first


def test_duplicate_objects_are_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        run([namespace("a"), namespace("a")], [])


# ---------------------------------------------------------------- with the renderer


SPEC = ClusterSpec(
    teams=(
        TeamSpec(
            "team-a",
            tier="gold",
            guarantee={"nvidia.com/gpu": Decimal(4)},
            limit={"nvidia.com/gpu": Decimal(8), "memory": Decimal(2**40)},
            members=(MemberSpec("alice", "lead"),),
        ),
    ),
    namespaces=(
        NamespaceSpec(
            "team-a",
            "team-a",
            quota={"memory": Decimal(2**36), "nvidia.com/gpu": Decimal(4)},
            volcano_jobs=True,
        ),
    ),
    tiers=(TierSpec("gold", 1000, "Never"),),
)


def test_a_steady_state_plan_has_only_unchanged_objects():
    desired = render(SPEC)
    live = [server_side(obj) for obj in desired]
    [live_quota] = [obj for obj in live if obj["kind"] == "ResourceQuota"]
    # the API server canonicalises quantities its own way
    live_quota["spec"]["hard"]["requests.memory"] = "68719476736"
    assert {c.op for c in run(desired, live)} == {"unchanged"}


def test_a_rendered_model_plans_as_all_creates_in_render_order():
    desired = render(SPEC)
    changes = run(desired, [])
    assert [c.body for c in changes] == desired
    assert {c.op for c in changes} == {"create"}


# ---------------------------------------------------------------- render_diff


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (
            Change(
                "update",
                "ResourceQuota",
                "team-a",
                "fairshare",
                {},
                (FieldDiff("spec.hard.requests.nvidia.com/gpu", "64", "80"),),
            ),
            "update ResourceQuota team-a/fairshare\n  spec.hard.requests.nvidia.com/gpu: 64 -> 80",
        ),
        (
            Change(
                "update",
                "Queue",
                None,
                "research",
                {},
                (
                    FieldDiff("spec.parent", "ai", None),
                    FieldDiff("spec.reclaimable", True, False),
                    FieldDiff("subjects[2]", None, {"name": "bob", "kind": "User"}),
                ),
            ),
            "update Queue research\n"
            "  spec.parent: ai -> (none)\n"
            "  spec.reclaimable: true -> false\n"
            '  subjects[2]: (none) -> {"kind":"User","name":"bob"}',
        ),
        (Change("create", "Namespace", None, "ml", {}), "create Namespace ml"),
        (Change("prune", "Role", "ml", "fairshare-volcano", {}), "prune Role ml/fairshare-volcano"),
        (Change("unchanged", "Queue", None, "ml", {}), "unchanged Queue ml"),
    ],
)
def test_render_diff_reads_like_a_changelog(change, text):
    assert render_diff(change) == text


# ---------------------------------------------------------------- what a real server adds


def test_server_filled_queue_fields_are_not_differences():
    desired = queue("ai-research", capability={"nvidia.com/gpu": "208"})
    live = server_side(desired)
    # Volcano's controller (parent: root), the CRD default (dequeueStrategy) and the
    # controller's annotation, all owned by someone else.
    live["spec"].update(parent="root", dequeueStrategy="traverse")
    live["metadata"]["annotations"] = {"volcano.sh/closed-by-parent": "false"}
    live["metadata"]["managedFields"] = [
        {"manager": "fairshare", "operation": "Apply", "fieldsV1": fields_v1(desired)},
        {
            "manager": "queue-controller",
            "operation": "Update",
            "fieldsV1": {"f:spec": {"f:parent": {}}},
        },
    ]

    assert diff_object(desired, live, parse_quantity=parse_quantity) == ()


def test_another_managers_key_in_a_map_we_set_is_theirs():
    desired = quota({"requests.cpu": "8"})
    live = server_side(quota({"requests.cpu": "8", "count/pods": "100"}))
    live["metadata"]["managedFields"] = [
        {"manager": "fairshare", "operation": "Apply", "fieldsV1": fields_v1(desired)},
        {
            "manager": "kubectl",
            "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:hard": {"f:count/pods": {}}}},
        },
    ]

    assert diff_object(desired, live, parse_quantity=parse_quantity) == ()


def test_a_key_we_applied_and_another_manager_also_owns_is_left_to_them():
    desired = quota({"requests.cpu": "8"})
    live = server_side(quota({"requests.cpu": "8", "requests.memory": "1Gi"}))
    owned = {"f:spec": {"f:hard": {"f:requests.cpu": {}, "f:requests.memory": {}}}}
    live["metadata"]["managedFields"] = [
        {"manager": "fairshare", "operation": "Apply", "fieldsV1": owned},
        {
            "manager": "kubectl",
            "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:hard": {"f:requests.memory": {}}}},
        },
    ]

    # apply would only drop our ownership, not the value: nothing to write for it
    assert diff_object(desired, live, parse_quantity=parse_quantity) == ()


def test_api_server_defaults_of_fields_we_set_are_not_differences():
    item = {"type": "Container", "max": {"nvidia.com/gpu": "8"}}
    desired = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "fairshare", "namespace": "team-a", "labels": OURS},
        "spec": {"limits": [item]},
    }
    live = server_side(desired)
    live["spec"]["limits"][0].update(
        default={"nvidia.com/gpu": "8"}, defaultRequest={"nvidia.com/gpu": "8"}
    )

    assert diff_object(desired, live, parse_quantity=parse_quantity) == ()


def test_without_managed_fields_the_last_applied_annotation_says_what_we_set():
    previous = queue("team-a", capability={"cpu": "8", "nvidia.com/gpu": "4"})
    live = server_side(previous)
    live["metadata"]["managedFields"] = []
    live["metadata"]["annotations"] = {"fairshare.io/last-applied": json.dumps(previous)}
    desired = queue("team-a", capability={"cpu": "8"})

    assert diff_object(desired, live, parse_quantity=parse_quantity) == ()
    assert diff_object(
        desired,
        live,
        parse_quantity=parse_quantity,
        last_applied_annotation="fairshare.io/last-applied",
    ) == (FieldDiff("spec.capability.nvidia.com/gpu", "4", None),)


def test_field_leaves_are_per_map_key_with_atomic_lists_whole():
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "b", "labels": {"a": "1"}, "annotations": {"x": "y"}},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "alice"}],
    }
    assert field_leaves(binding) == {
        ("metadata", "labels", "a"),
        ("metadata", "annotations", "x"),
        ("roleRef", "kind"),
        ("roleRef", "name"),
        ("subjects",),
    }
    assert fields_v1_leaves(
        {"f:spec": {"f:hard": {"f:requests.cpu": {}}, "f:limits": {'k:{"type":"Pod"}': {}}}}
    ) == {("spec", "hard", "requests.cpu"), ("spec", "limits")}
