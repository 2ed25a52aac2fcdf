"""Tests for the pure desired-state renderer (scheduling.domain.render)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from scheduling.domain.plan import server_defaults
from scheduling.domain.render import (
    deserved_amounts,
    file_name,
    limit_range_item,
    object_key,
    object_name,
    render,
)
from scheduling.domain.types import (
    ClusterSpec,
    LimitSpec,
    MemberSpec,
    NamespaceSpec,
    TeamSpec,
    TierSpec,
)
from tests.kubeapi import volcano

D = Decimal
QUEUE_CRD = Path(__file__).parents[1] / "kubeapi" / "scheduling.volcano.sh_queues.yaml"
MANAGED = {"app.kubernetes.io/managed-by": "fairshare"}

PRODUCTION = TierSpec("production", 1000000, "PreemptLowerPriority", "Production training")
EXPERIMENT = TierSpec("experiment", 100000, "Never")


def team(slug: str = "team-a", **kwargs) -> TeamSpec:
    return TeamSpec(slug, **kwargs)


def cluster(teams=(), namespaces=(), tiers=()) -> ClusterSpec:
    return ClusterSpec(teams=tuple(teams), namespaces=tuple(namespaces), tiers=tuple(tiers))


def keys(objects) -> list[tuple]:
    return [object_key(obj) for obj in objects]


def find(objects, kind, namespace=None, name=None) -> dict:
    [obj] = [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"].get("namespace") == namespace
        and (name is None or o["metadata"]["name"] == name)
    ]
    return obj


def strict_queue_schema() -> dict:
    """The Queue CRD's schema with unknown fields forbidden (kubectl's strict field validation)."""

    def forbid_extra(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                forbid_extra(value)
        elif isinstance(node, list):
            for value in node:
                forbid_extra(value)

    crd = yaml.safe_load(QUEUE_CRD.read_text())
    schema = copy.deepcopy(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    forbid_extra(schema["properties"]["spec"])
    return schema


QUEUE_SCHEMA = strict_queue_schema()

# One team, two managed namespaces, one unmanaged one: the reference example.
RESEARCH = cluster(
    teams=[
        team(
            "research",
            weight=3,
            tier="production",
            reclaimable=False,
            guarantee={"nvidia.com/gpu": D(8), "cpu": D(32)},
            limit={"nvidia.com/gpu": D(16), "cpu": D(128), "memory": D(2**40)},
            deserved={"nvidia.com/gpu": D(12), "cpu": D("40.5"), "memory": D(2**39)},
            members=(
                MemberSpec("carol", "viewer"),
                MemberSpec("bob", "member"),
                MemberSpec("alice", "lead"),
            ),
            groups=(("ml-leads", "lead"),),
        )
    ],
    namespaces=[
        NamespaceSpec(
            "research-train",
            "research",
            labels={"env": "prod"},
            quota={"cpu": D(96), "memory": D(3 * 2**38), "nvidia.com/gpu": D(12)},
            limits=LimitSpec(
                default_request={"cpu": D("0.5"), "memory": D(2**30)},
                default_limit={"cpu": D(2), "memory": D(2**32)},
                max={"nvidia.com/gpu": D(8)},
            ),
            volcano_jobs=True,
        ),
        NamespaceSpec(
            "research-dev",
            "research",
            quota={"cpu": D(32), "memory": D(2**38), "nvidia.com/gpu": D(4)},
        ),
        NamespaceSpec("research-legacy", "research", managed=False, quota={"cpu": D(1)}),
    ],
    tiers=[PRODUCTION],
)


# ---------------------------------------------------------------- the reference example


def test_one_team_with_two_namespaces_renders_exactly_these_objects():
    assert keys(render(RESEARCH)) == [
        ("Namespace", None, "research-dev"),
        ("Namespace", None, "research-train"),
        ("PriorityClass", None, "production"),
        ("Queue", None, "research"),
        ("ResourceQuota", "research-dev", "fairshare"),
        ("ResourceQuota", "research-train", "fairshare"),
        ("LimitRange", "research-train", "fairshare"),
        ("Role", "research-train", "fairshare-volcano"),
        ("RoleBinding", "research-dev", "fairshare-lead"),
        ("RoleBinding", "research-dev", "fairshare-member"),
        ("RoleBinding", "research-dev", "fairshare-viewer"),
        ("RoleBinding", "research-train", "fairshare-lead"),
        ("RoleBinding", "research-train", "fairshare-member"),
        ("RoleBinding", "research-train", "fairshare-viewer"),
        ("RoleBinding", "research-train", "fairshare-volcano"),
    ]


def test_the_queue_carries_weight_capability_guarantee_and_clamped_deserved():
    assert find(render(RESEARCH), "Queue") == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {
            "name": "research",
            "labels": {
                "app.kubernetes.io/managed-by": "fairshare",
                "fairshare.io/team": "research",
                "fairshare.io/tier": "production",
            },
        },
        "spec": {
            "weight": 3,
            "reclaimable": False,
            "capability": {"cpu": "128", "memory": "1Ti", "nvidia.com/gpu": "16"},
            "guarantee": {"resource": {"cpu": "32", "nvidia.com/gpu": "8"}},
            "deserved": {"cpu": "40500m", "memory": "512Gi", "nvidia.com/gpu": "12"},
        },
    }


def test_the_namespace_has_user_labels_and_ownership_labels():
    assert find(render(RESEARCH), "Namespace", name="research-train") == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "research-train",
            "labels": {
                "app.kubernetes.io/managed-by": "fairshare",
                "env": "prod",
                "fairshare.io/team": "research",
                "fairshare.io/tier": "production",
            },
            # Volcano's PodGroup webhook routes the namespace's workloads to this queue.
            "annotations": {"scheduling.volcano.sh/queue-name": "research"},
        },
    }


def test_user_labels_cannot_override_ownership_labels():
    spec = cluster(
        [team()],
        [NamespaceSpec("ns", "team-a", labels={"fairshare.io/team": "team-b", "x": "y"})],
    )
    labels = find(render(spec), "Namespace")["metadata"]["labels"]
    assert labels == {**MANAGED, "fairshare.io/team": "team-a", "x": "y"}


def test_the_limit_range_has_container_defaults_and_maxima():
    assert find(render(RESEARCH), "LimitRange", "research-train") == {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": "fairshare",
            "namespace": "research-train",
            "labels": {**MANAGED, "fairshare.io/team": "research"},
        },
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    # Explicit zero GPU defaults: without them the API server would copy the
                    # max (8) into default and defaultRequest, giving every container 8 GPUs.
                    "default": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "0"},
                    "defaultRequest": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "0"},
                    "max": {"nvidia.com/gpu": "8"},
                }
            ]
        },
    }


def test_role_bindings_bind_users_and_groups_to_the_built_in_cluster_roles():
    objects = render(RESEARCH)
    bindings = {
        o["metadata"]["name"]: (o["roleRef"], o["subjects"])
        for o in objects
        if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == "research-train"
    }
    rbac = "rbac.authorization.k8s.io"
    assert bindings == {
        "fairshare-lead": (
            {"apiGroup": rbac, "kind": "ClusterRole", "name": "admin"},
            [
                {"kind": "Group", "apiGroup": rbac, "name": "ml-leads"},
                {"kind": "User", "apiGroup": rbac, "name": "alice"},
            ],
        ),
        "fairshare-member": (
            {"apiGroup": rbac, "kind": "ClusterRole", "name": "edit"},
            [{"kind": "User", "apiGroup": rbac, "name": "bob"}],
        ),
        "fairshare-viewer": (
            {"apiGroup": rbac, "kind": "ClusterRole", "name": "view"},
            [{"kind": "User", "apiGroup": rbac, "name": "carol"}],
        ),
        "fairshare-volcano": (
            {"apiGroup": rbac, "kind": "Role", "name": "fairshare-volcano"},
            [
                {"kind": "Group", "apiGroup": rbac, "name": "ml-leads"},
                {"kind": "User", "apiGroup": rbac, "name": "alice"},
                {"kind": "User", "apiGroup": rbac, "name": "bob"},
            ],
        ),
    }


def test_the_volcano_role_covers_jobs_and_podgroups():
    role = find(render(RESEARCH), "Role", "research-train")
    assert role["rules"] == [
        {
            "apiGroups": ["batch.volcano.sh"],
            "resources": ["jobs"],
            "verbs": [
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
        },
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "resources": ["podgroups"],
            "verbs": ["get", "list", "watch"],
        },
    ]


def test_a_role_without_subjects_gets_no_binding():
    spec = cluster([team(members=(MemberSpec("bob", "member"),))], [NamespaceSpec("ns", "team-a")])
    assert [o["metadata"]["name"] for o in render(spec) if o["kind"] == "RoleBinding"] == [
        "fairshare-member"
    ]


def test_every_object_carries_the_ownership_labels():
    for obj in render(RESEARCH):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "fairshare"
        if obj["kind"] == "PriorityClass":
            assert "fairshare.io/team" not in labels
            assert labels["fairshare.io/tier"] == obj["metadata"]["name"]
        else:
            assert labels["fairshare.io/team"] == "research"


# ---------------------------------------------------------------- ResourceQuota


@pytest.mark.parametrize(
    ("quota", "limits", "hard"),
    [
        ({}, None, {}),
        (
            {"cpu": D(8), "memory": D(2**35), "nvidia.com/gpu": D(2)},
            None,
            {"requests.cpu": "8", "requests.memory": "32Gi", "requests.nvidia.com/gpu": "2"},
        ),
        (
            {"cpu": D("7.5"), "memory": D(2**35), "nvidia.com/gpu": D(2)},
            LimitSpec(quota_limits=True),
            {
                "limits.cpu": "7500m",
                "limits.memory": "32Gi",
                "requests.cpu": "7500m",
                "requests.memory": "32Gi",
                "requests.nvidia.com/gpu": "2",
            },
        ),
        (
            {
                "nvidia.com/mig-1g.10gb": D(7),
                "rdma/rdma-shared": D(1),
                "ephemeral-storage": D(2**40),
            },
            LimitSpec(quota_limits=True),
            {
                "requests.ephemeral-storage": "1Ti",
                "requests.nvidia.com/mig-1g.10gb": "7",
                "requests.rdma/rdma-shared": "1",
            },
        ),
        ({"cpu": D(4)}, LimitSpec(quota_limits=False), {"requests.cpu": "4"}),
    ],
)
def test_the_resource_quota_has_requests_and_only_cpu_memory_limits(quota, limits, hard):
    spec = cluster([team()], [NamespaceSpec("ns", "team-a", quota=quota, limits=limits)])
    assert find(render(spec), "ResourceQuota", "ns")["spec"] == {"hard": hard}


RESOURCES = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "amd.com/gpu", "example.com/x"]
)
AMOUNTS = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    quota=st.dictionaries(RESOURCES, AMOUNTS, max_size=6),
    quota_limits=st.booleans(),
)
def test_no_quota_ever_limits_an_extended_resource(quota, quota_limits):
    spec = cluster(
        [team()],
        [NamespaceSpec("ns", "team-a", quota=quota, limits=LimitSpec(quota_limits=quota_limits))],
    )
    hard = find(render(spec), "ResourceQuota", "ns")["spec"]["hard"]
    assert {k for k in hard if k.startswith("limits.")} <= {"limits.cpu", "limits.memory"}
    assert {k for k in hard if k.startswith("requests.")} == {f"requests.{r}" for r in quota}
    for resource, amount in quota.items():
        # format_quantity rounds sub-milli amounts up, never down
        assert parse_quantity(hard[f"requests.{resource}"]) >= amount


# ---------------------------------------------------------------- Queue deserved


@pytest.mark.parametrize(
    ("fair", "guarantee", "limit", "deserved"),
    [
        ({}, {}, {}, {}),
        ({"cpu": D(10)}, {}, {}, {"cpu": D(10)}),
        # below the guarantee: raised to it
        ({"nvidia.com/gpu": D(2)}, {"nvidia.com/gpu": D(4)}, {}, {"nvidia.com/gpu": D(4)}),
        # above the capability: lowered to it
        ({"nvidia.com/gpu": D(20)}, {}, {"nvidia.com/gpu": D(16)}, {"nvidia.com/gpu": D(16)}),
        # guaranteed but absent from the fair allocation: included at the guarantee
        ({"cpu": D(10)}, {"nvidia.com/gpu": D(4)}, {}, {"cpu": D(10), "nvidia.com/gpu": D(4)}),
        # no fair allocation at all (solver not run yet): deserved = guarantee
        ({}, {"cpu": D(8)}, {"cpu": D(16)}, {"cpu": D(8)}),
        # a limit alone adds nothing to deserved
        ({}, {}, {"cpu": D(16)}, {}),
        ({"cpu": D("0.25")}, {"cpu": D("0.5")}, {"cpu": D(1)}, {"cpu": D("0.5")}),
    ],
)
def test_deserved_is_the_fair_share_clamped_between_guarantee_and_capability(
    fair, guarantee, limit, deserved
):
    assert deserved_amounts(team(deserved=fair, guarantee=guarantee, limit=limit)) == deserved


AMOUNT_MAPS = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), AMOUNTS)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(fair=AMOUNT_MAPS, guarantee=AMOUNT_MAPS, extra=AMOUNT_MAPS)
def test_rendered_queues_always_pass_volcanos_deserved_rules(fair, guarantee, extra):
    limit = {r: guarantee.get(r, 0) + extra[r] for r in extra}
    spec = cluster([team(deserved=fair, guarantee=guarantee, limit=limit)])
    queue = find(render(spec), "Queue")["spec"]
    deserved = {r: parse_quantity(v) for r, v in queue.get("deserved", {}).items()}
    for resource, value in queue.get("guarantee", {}).get("resource", {}).items():
        assert deserved[resource] >= parse_quantity(value)
    for resource, value in queue.get("capability", {}).items():
        if resource in deserved:
            assert deserved[resource] <= parse_quantity(value)
    jsonschema.validate(find(render(spec), "Queue"), QUEUE_SCHEMA)


# ---------------------------------------------------------------- hierarchy and activity


def test_departments_get_queues_and_children_name_their_parent():
    spec = cluster(
        [
            team("vision", parent="ai"),
            team("ai", is_department=True, weight=4),
            team("nlp", parent="ai"),
            team("ops"),
        ]
    )
    queues = {o["metadata"]["name"]: o for o in render(spec) if o["kind"] == "Queue"}
    assert list(queues) == ["ai", "ops", "nlp", "vision"]  # parents before children
    assert queues["ai"]["metadata"]["labels"]["fairshare.io/department"] == "true"
    assert queues["ai"]["spec"] == {"weight": 4, "reclaimable": True}
    assert queues["vision"]["spec"]["parent"] == "ai"
    assert "parent" not in queues["ops"]["spec"]


def test_inactive_teams_render_nothing():
    spec = cluster(
        [team("team-a", active=False, members=(MemberSpec("bob", "lead"),)), team("team-b")],
        [NamespaceSpec("ns-a", "team-a", quota={"cpu": D(1)}), NamespaceSpec("ns-b", "team-b")],
    )
    assert keys(render(spec)) == [
        ("Namespace", None, "ns-b"),
        ("Queue", None, "team-b"),
        ("ResourceQuota", "ns-b", "fairshare"),
    ]


def test_an_inactive_department_takes_its_children_with_it():
    spec = cluster(
        [team("ai", is_department=True, active=False), team("nlp", parent="ai")],
        [NamespaceSpec("nlp", "nlp")],
    )
    assert render(spec) == []


def test_unmanaged_namespaces_render_nothing():
    spec = cluster([team()], [NamespaceSpec("legacy", "team-a", managed=False)])
    assert keys(render(spec)) == [("Queue", None, "team-a")]


def test_an_empty_limit_policy_renders_no_limit_range():
    spec = cluster([team()], [NamespaceSpec("ns", "team-a", limits=LimitSpec())])
    assert "LimitRange" not in {o["kind"] for o in render(spec)}


# ---------------------------------------------------------------- PriorityClasses


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        (
            PRODUCTION,
            {
                "value": 1000000,
                "preemptionPolicy": "PreemptLowerPriority",
                "description": "Production training",
            },
        ),
        (EXPERIMENT, {"value": 100000, "preemptionPolicy": "Never"}),
        (
            TierSpec("batch", 10, "Never", global_default=True),
            {"value": 10, "preemptionPolicy": "Never", "globalDefault": True},
        ),
    ],
)
def test_each_tier_becomes_a_priority_class(tier, expected):
    [obj] = render(cluster(tiers=[tier]))
    assert obj == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": tier.name, "labels": {**MANAGED, "fairshare.io/tier": tier.name}},
        **expected,
    }


# ---------------------------------------------------------------- names and files


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("Namespace", "research-dev"), "research-dev"),
        (("Queue", "research"), "research"),
        (("PriorityClass", "production"), "production"),
        (("ResourceQuota",), "fairshare"),
        (("LimitRange",), "fairshare"),
        (("Role",), "fairshare-volcano"),
        (("RoleBinding", "", "lead"), "fairshare-lead"),
        (("RoleBinding", "", "volcano"), "fairshare-volcano"),
    ],
)
def test_object_names_are_derived_in_one_place(args, name):
    assert object_name(*args) == name


@pytest.mark.parametrize("args", [("Deployment",), ("Queue",), ("RoleBinding", "", "owner")])
def test_object_name_rejects_what_it_does_not_render(args):
    with pytest.raises(ValueError):
        object_name(*args)


def test_file_names_are_stable_and_unique():
    names = [file_name(obj) for obj in render(RESEARCH)]
    assert len(set(names)) == len(names)
    # Lexical order is apply order: cluster objects, then each Namespace before its contents.
    assert sorted(names)[:6] == [
        "cluster/priorityclass-production.yaml",
        "cluster/queue-0-research.yaml",
        "namespaces/research-dev/00-namespace-research-dev.yaml",
        "namespaces/research-dev/resourcequota-fairshare.yaml",
        "namespaces/research-dev/rolebinding-fairshare-lead.yaml",
        "namespaces/research-dev/rolebinding-fairshare-member.yaml",
    ]
    assert "namespaces/research-train/role-fairshare-volcano.yaml" in names
    assert "namespaces/research-train/rolebinding-fairshare-volcano.yaml" in names


# ---------------------------------------------------------------- determinism


def test_the_same_model_in_any_order_renders_identical_output():
    shuffled = ClusterSpec(
        teams=tuple(reversed(RESEARCH.teams)),
        namespaces=tuple(reversed(RESEARCH.namespaces)),
        tiers=tuple(reversed(RESEARCH.tiers)),
    )
    first = json.dumps(render(RESEARCH), sort_keys=True)
    assert json.dumps(render(shuffled), sort_keys=True) == first
    assert json.dumps(render(RESEARCH), sort_keys=True) == first


def test_rendering_does_not_share_mutable_state_between_calls():
    first = render(RESEARCH)
    first[0]["metadata"]["labels"]["x"] = "y"
    assert "x" not in render(RESEARCH)[0]["metadata"]["labels"]


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "obj", [o for o in render(RESEARCH) if o["kind"] != "Queue"], ids=lambda o: file_name(o)
)
def test_core_objects_validate_against_the_kubernetes_schema(obj):
    kubernetes_validate.validate(obj, "1.32", strict=True)


def test_queues_validate_against_the_volcano_crd():
    for obj in render(RESEARCH):
        if obj["kind"] == "Queue":
            jsonschema.validate(obj, QUEUE_SCHEMA)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (cluster([team("default")]), "reserved"),
        (cluster([team("root")]), "reserved"),
        (cluster([team(tier="gold")]), "unknown tier gold"),
        (cluster([team(parent="ai")]), "unknown parent ai"),
        (cluster([team(parent="ops"), team("ops")]), "not a department"),
        (cluster([team(), team()]), "duplicate team"),
        (cluster([team()], [NamespaceSpec("ns", "team-b")]), "unknown team team-b"),
        (
            cluster([team()], [NamespaceSpec("ns", "team-a"), NamespaceSpec("ns", "team-a")]),
            "duplicate namespace",
        ),
        (
            cluster(
                tiers=[
                    TierSpec("a", 1, "Never", global_default=True),
                    TierSpec("b", 2, "Never", global_default=True),
                ]
            ),
            "global default",
        ),
    ],
)
def test_render_rejects_inconsistent_models(spec, message):
    with pytest.raises(ValueError, match=message):
        render(spec)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TeamSpec("a", weight=0), "weight"),
        (lambda: TeamSpec("a", weight=65536), "weight"),
        (lambda: TeamSpec("a", guarantee={"cpu": D(9)}, limit={"cpu": D(8)}), "exceeds"),
        (lambda: TeamSpec("a", limit={"cpu": D(-1)}), ">= 0"),
        (lambda: TeamSpec("a", groups=(("g", "owner"),)), "unknown role"),
        (lambda: MemberSpec("bob", "owner"), "unknown role"),
        (lambda: NamespaceSpec("ns", "a", quota={"limits.nvidia.com/gpu": D(1)}), "resource"),
        (lambda: TierSpec("system-x", 1, "Never"), "reserved"),
        (lambda: TierSpec("x", 2_000_000_000, "Never"), "int32"),
        (lambda: TierSpec("x", 1, "Sometimes"), "preemption"),
        (lambda: LimitSpec(default_request={"cpu": D(2)}, default_limit={"cpu": D(1)}), "exceeds"),
        (
            lambda: LimitSpec(default_limit={"nvidia.com/gpu": D(9)}, max={"nvidia.com/gpu": D(8)}),
            "exceeds",
        ),
        (lambda: LimitSpec(default_request={"nvidia.com/gpu": D(1)}), "overcommitted"),
    ],
)
def test_specs_reject_values_the_api_server_would_reject(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_the_renderer_and_planner_import_neither_django_nor_kubernetes():
    code = (
        "import sys, scheduling.domain.render, scheduling.domain.plan, scheduling.domain.types; "
        "bad = [m for m in sys.modules if m.split('.')[0] in {'django', 'kubernetes', 'yaml'}]; "
        "assert not bad, bad"
    )
    root = Path(__file__).parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


# ---------------------------------------------------------------- upstream semantics


def test_no_gpu_is_defaulted_onto_a_container_that_names_none():
    item = limit_range_item(LimitSpec(max={"nvidia.com/gpu": D(8), "cpu": D(16)}))

    # Extended resources: explicit zero defaults. cpu: what Kubernetes would default anyway.
    assert item == {
        "type": "Container",
        "default": {"cpu": "16", "nvidia.com/gpu": "0"},
        "defaultRequest": {"cpu": "16", "nvidia.com/gpu": "0"},
        "max": {"cpu": "16", "nvidia.com/gpu": "8"},
    }


LIMIT_AMOUNTS = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]),
    st.integers(min_value=1, max_value=16).map(D),
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(maximum=LIMIT_AMOUNTS, request=LIMIT_AMOUNTS)
def test_the_limit_range_is_a_fixed_point_of_the_api_servers_defaulting(maximum, request):
    request = {r: min(v, maximum.get(r, v)) for r, v in request.items()}
    limits = {r: v for r, v in request.items()}  # non-overcommittable: request == limit
    spec = LimitSpec(default_request=request, default_limit=limits, max=maximum)
    item = limit_range_item(spec)

    defaulted = server_defaults({"kind": "LimitRange", "spec": {"limits": [copy.deepcopy(item)]}})[
        "spec"
    ]["limits"][0]
    assert defaulted == item
    for resource in maximum.keys() - request.keys():
        if "/" in resource:
            assert item["default"][resource] == "0"


def test_a_departments_own_namespaces_route_to_its_own_leaf_queue():
    spec = cluster(
        [
            team(
                "ai",
                is_department=True,
                guarantee={"nvidia.com/gpu": D(10)},
                limit={"nvidia.com/gpu": D(40)},
                deserved={"nvidia.com/gpu": D(30)},
            ),
            team(
                "nlp",
                parent="ai",
                guarantee={"nvidia.com/gpu": D(4)},
                deserved={"nvidia.com/gpu": D(12)},
            ),
        ],
        [NamespaceSpec("ai-shared", "ai"), NamespaceSpec("nlp", "nlp")],
    )
    objects = render(spec)
    queues = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Queue"}

    routes = {
        o["metadata"]["name"]: o["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"]
        for o in objects
        if o["kind"] == "Namespace"
    }
    assert routes == {"ai-shared": "ai.own", "nlp": "nlp"}
    assert queues["ai.own"] == {
        "weight": 1,
        "reclaimable": True,
        "capability": {"nvidia.com/gpu": "40"},
        "guarantee": {"resource": {"nvidia.com/gpu": "6"}},  # 10 less the team's 4
        "deserved": {"nvidia.com/gpu": "18"},  # 30 less the team's 12
        "parent": "ai",
    }
    assert list(queues) == ["ai", "ai.own", "nlp"]  # parents first


def test_a_department_guarantee_is_derived_from_its_teams():
    spec = cluster(
        [
            team("ai", is_department=True, guarantee={"cpu": D(8)}),
            team("a", parent="ai", guarantee={"cpu": D(6), "nvidia.com/gpu": D(2)}),
            team("b", parent="ai", guarantee={"cpu": D(6)}),
        ]
    )
    ai = find(render(spec), "Queue", name="ai")["spec"]

    assert ai["guarantee"] == {"resource": {"cpu": "12", "nvidia.com/gpu": "2"}}
    assert ai["deserved"] == {"cpu": "12", "nvidia.com/gpu": "2"}


def test_children_that_want_more_than_their_department_share_its_deserved():
    spec = cluster(
        [
            team(
                "ai",
                is_department=True,
                limit={"nvidia.com/gpu": D(20)},
                deserved={"nvidia.com/gpu": D(20)},
            ),
            team(
                "a",
                parent="ai",
                guarantee={"nvidia.com/gpu": D(4)},
                deserved={"nvidia.com/gpu": D(20)},
            ),
            team(
                "b",
                parent="ai",
                guarantee={"nvidia.com/gpu": D(2)},
                deserved={"nvidia.com/gpu": D(10)},
            ),
        ]
    )
    queues = {o["metadata"]["name"]: o["spec"] for o in render(spec) if o["kind"] == "Queue"}

    # 30 wanted under 20: each keeps its guarantee, the 14 left go 16:8 → 9 and 4 (floored).
    assert queues["a"]["deserved"] == {"nvidia.com/gpu": "13"}
    assert queues["b"]["deserved"] == {"nvidia.com/gpu": "6"}


@pytest.mark.parametrize(
    ("teams", "message"),
    [
        (
            [
                team("ai", is_department=True, limit={"cpu": D(8)}),
                team("a", parent="ai", limit={"cpu": D(16)}),
            ],
            "team a: its cpu limit 16 is over the 8 limit of department ai",
        ),
        (
            [
                team("ai", is_department=True, limit={"cpu": D(8)}),
                team("a", parent="ai", guarantee={"cpu": D(6)}),
                team("b", parent="ai", guarantee={"cpu": D(6)}),
            ],
            "team ai: guarantees for cpu total 12 (its own and its teams'), over its 8 limit",
        ),
    ],
)
def test_hierarchies_no_fitting_can_repair_are_refused(teams, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        render(cluster(teams))


HIERARCHY_AMOUNTS = st.dictionaries(
    st.sampled_from(["cpu", "nvidia.com/gpu"]), st.integers(min_value=0, max_value=50).map(D)
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    data=st.data(),
    children=st.integers(min_value=1, max_value=3),
    own_namespace=st.booleans(),
)
def test_rendered_hierarchies_always_pass_volcanos_webhook(data, children, own_namespace):
    kids = []
    for i in range(children):
        guarantee = data.draw(HIERARCHY_AMOUNTS)
        extra = data.draw(HIERARCHY_AMOUNTS)
        kids.append(
            team(
                f"t{i}",
                parent="ai",
                guarantee=guarantee,
                limit={r: guarantee.get(r, D(0)) + extra[r] for r in extra},
                deserved=data.draw(HIERARCHY_AMOUNTS),
            )
        )
    total = {r: sum(k.guarantee.get(r, D(0)) for k in kids) for r in ("cpu", "nvidia.com/gpu")}
    headroom = data.draw(HIERARCHY_AMOUNTS)
    dept_limit = {
        r: max([total[r], *(k.limit.get(r, D(0)) for k in kids)]) + headroom[r] for r in headroom
    }
    wanted = data.draw(HIERARCHY_AMOUNTS)
    dept = team(
        "ai",
        is_department=True,
        guarantee={r: min(v, dept_limit.get(r, v)) for r, v in wanted.items()},
        limit=dept_limit,
        deserved=data.draw(HIERARCHY_AMOUNTS),
    )
    namespaces = [NamespaceSpec("ai-own", "ai")] if own_namespace else []
    queues = [o for o in render(cluster([dept, *kids], namespaces)) if o["kind"] == "Queue"]

    # Created parents first through Volcano's webhook (imitated): every one admitted.
    store: dict = {}
    for obj in queues:
        stored = copy.deepcopy(obj)
        stored["spec"].setdefault("parent", "root")
        volcano.validate_queue(stored, None, store)
        store[obj["metadata"]["name"]] = stored
    # and each one still passes with all the others in place (as on an update)
    for name, obj in store.items():
        volcano.validate_queue(obj, obj, {n: q for n, q in store.items() if n != name} | {})


def test_a_creates_field_listing_equals_its_diff_against_nothing():
    """``creation_diff`` (what a first sync shows per create, walked directly) is the diff of the
    rendered object against an empty live one, field for field, for every kind we render."""
    from scheduling.domain.plan import creation_diff, diff_object

    objects = render(RESEARCH)
    assert {o["kind"] for o in objects} >= {"Namespace", "ResourceQuota", "Queue", "RoleBinding"}
    for obj in objects:
        empty = {"kind": obj["kind"], "metadata": {}}
        want = diff_object(obj, empty, parse_quantity=parse_quantity)
        assert creation_diff(obj) == want, obj["kind"]
        assert want  # never vacuous: a create always lists fields
