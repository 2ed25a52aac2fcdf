"""deploy/rbac.yaml: Fairshare's own ServiceAccount gets exactly the permissions it needs."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

RBAC = Path(__file__).parents[2] / "deploy" / "rbac.yaml"
K8S_VERSION = "1.30.0"
READ = ["get", "list", "watch"]
# LIST/WATCH by label, server-side apply (PATCH; create when absent), prune (DELETE): no get, no
# update (tests/deploy/test_rbac_calls.py checks them against the code's calls).
MANAGE = ["list", "watch", "create", "patch", "delete"]


@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    return {d["kind"]: d for d in docs}


def permissions(rules: list[dict]) -> set[tuple[str, str, str, str]]:
    """Flatten rules into (apiGroup, resource, verb, resourceName or '*') tuples."""
    flat = set()
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or ["*"]:
                        flat.add((group, resource, verb, name))
    return flat


def expand(group: str, resources: list[str], verbs: list[str], names=("*",)) -> set:
    return {(group, r, v, n) for r in resources for v in verbs for n in names}


def test_it_defines_a_service_account_bound_to_its_cluster_role(documents):
    assert set(documents) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    account = documents["ServiceAccount"]["metadata"]
    binding = documents["ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": documents["ClusterRole"]["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def test_the_cluster_role_grants_exactly_what_fairshare_needs(documents):
    expected = (
        expand("", ["pods", "nodes"], ["list"])
        # The workload collector: quota refusals are Warning events (list, nothing more).
        | expand("", ["events"], ["list"])
        # The usage collector: Dynamic Resource Allocation objects (list, nothing more).
        | expand("resource.k8s.io", ["resourceclaims", "resourceslices", "deviceclasses"], ["list"])
        | expand("", ["namespaces", "resourcequotas", "limitranges"], MANAGE)
        | expand("rbac.authorization.k8s.io", ["roles", "rolebindings"], MANAGE)
        | expand("scheduling.k8s.io", ["priorityclasses"], MANAGE)
        | expand("scheduling.volcano.sh", ["queues"], MANAGE)
        | expand("rbac.authorization.k8s.io", ["clusterroles"], ["bind"], ["admin", "edit", "view"])
        # What the rendered Role `fairshare-volcano` grants (RBAC escalation prevention).
        | expand(
            "batch.volcano.sh",
            ["jobs"],
            ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        )
        | expand("scheduling.volcano.sh", ["podgroups"], READ)
    )

    assert permissions(documents["ClusterRole"]["rules"]) == expected


def test_it_never_grants_wildcards_secrets_or_escalation(documents):
    granted = permissions(documents["ClusterRole"]["rules"])

    assert not [p for p in granted if "*" in p[:3]]
    assert not [p for p in granted if p[1] in ("secrets", "configmaps", "clusterrolebindings")]
    assert not [p for p in granted if p[2] in ("escalate", "impersonate")]
    assert {p[3] for p in granted if p[2] == "bind"} == {"admin", "edit", "view"}


def test_the_volcano_role_fairshare_renders_is_covered_by_its_own_permissions(documents):
    from scheduling.domain.render import render
    from scheduling.domain.types import ClusterSpec, MemberSpec, NamespaceSpec, TeamSpec

    spec = ClusterSpec(
        teams=(TeamSpec("team-a", members=(MemberSpec("alice", "lead"),)),),
        namespaces=(NamespaceSpec("team-a-ml", "team-a", volcano_jobs=True),),
    )
    [role] = [m for m in render(spec) if m["kind"] == "Role"]
    granted = permissions(documents["ClusterRole"]["rules"])

    assert permissions(role["rules"]) <= granted


@pytest.mark.parametrize("kind", ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"])
def test_the_objects_validate_against_the_kubernetes_schema(documents, kind):
    kubernetes_validate.validate(documents[kind], K8S_VERSION, strict=True)
