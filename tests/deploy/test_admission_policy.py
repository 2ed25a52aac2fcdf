"""deploy/admission-policy.yaml: its CEL, evaluated by a CEL implementation (cel-python), on
the requests the API server would send it.

The variables the API server binds (Kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/
plugin/policy/validating``): ``request`` (the AdmissionRequest: ``operation``, ``namespace``,
``kind``, ``userInfo``), ``object`` (null for a DELETE), ``oldObject`` (null for a CREATE),
``namespaceObject`` (the request's Namespace; null for cluster-scoped objects) and
``variables`` (``spec.variables``, each evaluated in order, later ones seeing earlier ones).
A failing matchCondition means the policy does not apply; then each validation must be true.
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest

from scheduling.domain.render import LABEL_MANAGED_BY, render
from scheduling.domain.types import ClusterSpec, MemberSpec, NamespaceSpec, TeamSpec

from .manifests import DEPLOY, kustomize

FAIRSHARE = "system:serviceaccount:fairshare:fairshare"
MANAGED = {LABEL_MANAGED_BY: "fairshare"}
KINDS = {
    "Namespace": ("", None),
    "RoleBinding": ("rbac.authorization.k8s.io", "ns"),
    "Role": ("rbac.authorization.k8s.io", "ns"),
    "ResourceQuota": ("", "ns"),
    "LimitRange": ("", "ns"),
    "PriorityClass": ("scheduling.k8s.io", None),
    "Queue": ("scheduling.volcano.sh", None),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", None),
}


@pytest.fixture(scope="module")
def policy() -> dict:
    docs = {d["kind"]: d for d in kustomize(DEPLOY)}
    binding = docs["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding["policyName"] == docs["ValidatingAdmissionPolicy"]["metadata"]["name"]
    assert binding["validationActions"] == ["Deny"]
    assert "matchResources" not in binding  # every object the policy matches
    return docs["ValidatingAdmissionPolicy"]["spec"]


class Evaluator:
    def __init__(self, spec: dict) -> None:
        self.env = celpy.Environment()
        self.spec = spec

    def run(self, expression: str, activation: dict[str, Any]) -> Any:
        return self.env.program(self.env.compile(expression)).evaluate(activation)

    def refusals(
        self,
        *,
        operation: str,
        kind: str,
        name: str,
        namespace: str = "",
        labels: dict | None = None,
        old_labels: dict | None = None,
        namespace_labels: dict | None = None,
        user: str = FAIRSHARE,
    ) -> list[str] | None:
        """The messages of the validations that fail (None: the policy does not apply)."""
        group, _ = KINDS[kind]

        def obj(labels: dict | None) -> dict:
            meta: dict[str, Any] = {"name": name}
            if namespace:
                meta["namespace"] = namespace
            if labels is not None:
                meta["labels"] = labels
            return {"kind": kind, "metadata": meta}

        new = None if operation == "DELETE" else obj(labels)
        old = (
            None if operation == "CREATE" else obj(old_labels if operation == "UPDATE" else labels)
        )
        ns_object = None
        if namespace and kind != "Namespace":
            meta: dict[str, Any] = {"name": namespace}
            if namespace_labels is not None:
                meta["labels"] = namespace_labels
            ns_object = {"kind": "Namespace", "metadata": meta}
        activation = {
            "request": celpy.json_to_cel(
                {
                    "operation": operation,
                    "namespace": namespace,
                    "name": name,
                    "kind": {"group": group, "version": "v1", "kind": kind},
                    "userInfo": {"username": user},
                }
            ),
            "object": celpy.json_to_cel(new),
            "oldObject": celpy.json_to_cel(old),
            "namespaceObject": celpy.json_to_cel(ns_object),
        }
        for condition in self.spec["matchConditions"]:
            if not self.run(condition["expression"], activation):
                return None
        variables: dict[str, Any] = {}
        for variable in self.spec["variables"]:
            activation["variables"] = celpy.json_to_cel(variables)
            variables[variable["name"]] = self.run(variable["expression"], activation)
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        failed = []
        for validation in self.spec["validations"]:
            if not self.run(validation["expression"], activation):
                message = validation.get("message") or str(
                    self.run(validation["messageExpression"], activation)
                )
                failed.append(message)
        return failed


@pytest.fixture(scope="module")
def cel(policy) -> Evaluator:
    return Evaluator(policy)


def test_it_names_the_service_account_fairshares_pods_run_as():
    docs = kustomize(DEPLOY)
    [account] = [d for d in docs if d["kind"] == "ServiceAccount"]
    username = (
        f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    )
    assert username == FAIRSHARE
    for doc in docs:
        if doc["kind"] == "Deployment":
            assert (
                doc["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
            )
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    [condition] = policy["spec"]["matchConditions"]
    assert f"'{username}'" in condition["expression"]


def test_it_matches_every_write_of_fairshares_service_account_only(policy, cel):
    [rule] = policy["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["*"] and rule["resources"] == ["*", "*/*"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    assert policy["failurePolicy"] == "Fail"
    # Anyone else: the policy does not apply (RBAC alone decides).
    for user in ("kubernetes-admin", "system:serviceaccount:fairshare:other"):
        assert (
            cel.refusals(
                operation="CREATE", kind="RoleBinding", name="x", namespace="kube-system", user=user
            )
            is None
        )


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
@pytest.mark.parametrize("kind", ["RoleBinding", "Role", "ResourceQuota", "LimitRange"])
def test_it_lets_fairshare_write_its_objects_in_namespaces_it_manages(cel, operation, kind):
    assert (
        cel.refusals(
            operation=operation,
            kind=kind,
            name="fairshare-team-lead",
            namespace="team-a-ml",
            labels=MANAGED,
            old_labels=MANAGED,
            namespace_labels=MANAGED,
        )
        == []
    )


def test_every_object_the_renderer_makes_passes_in_the_namespaces_it_renders(cel):
    spec = ClusterSpec(
        teams=(TeamSpec("team-a", members=(MemberSpec("alice", "lead"),)),),
        namespaces=(NamespaceSpec("team-a-ml", "team-a", volcano_jobs=True),),
    )
    manifests = render(spec)
    namespaces = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Namespace"}
    for manifest in manifests:
        meta = manifest["metadata"]
        namespace = meta.get("namespace", "")
        kind = manifest["kind"]
        for operation in ("CREATE", "DELETE"):
            refused = cel.refusals(
                operation=operation,
                kind=kind,
                name=meta["name"],
                namespace=namespace,
                labels=meta.get("labels"),
                namespace_labels=namespaces[namespace]["metadata"]["labels"] if namespace else None,
            )
            assert refused == [], (kind, meta["name"], refused)


@pytest.mark.parametrize(
    "namespace",
    ["kube-system", "kube-public", "default", "volcano-system", "kueue-system", "fairshare"],
)
def test_it_refuses_a_role_binding_in_a_protected_namespace_even_if_labelled(cel, namespace):
    refused = cel.refusals(
        operation="CREATE",
        kind="RoleBinding",
        name="fairshare-team-admin",
        namespace=namespace,
        labels=MANAGED,
        namespace_labels=MANAGED,
    )
    assert f"Fairshare may not write in the protected namespace {namespace}" in refused


@pytest.mark.parametrize(
    "namespace_labels", [None, {}, {LABEL_MANAGED_BY: "argocd"}, {"team": "fairshare"}]
)
def test_it_refuses_writes_in_a_namespace_fairshare_does_not_manage(cel, namespace_labels):
    for operation in ("CREATE", "UPDATE", "DELETE"):
        refused = cel.refusals(
            operation=operation,
            kind="RoleBinding",
            name="fairshare-team-admin",
            namespace="payments",
            labels=MANAGED,
            old_labels=MANAGED,
            namespace_labels=namespace_labels,
        )
        assert refused == [
            "Fairshare may write only in namespaces labelled "
            "app.kubernetes.io/managed-by=fairshare; payments is not"
        ]


@pytest.mark.parametrize("request_namespace", ["", "team-b"])
def test_namespaces_it_may_create_and_those_it_may_not(cel, request_namespace):
    def namespace(name, operation="CREATE", labels=MANAGED, old_labels=None):
        return cel.refusals(
            operation=operation,
            kind="Namespace",
            name=name,
            # The API server may give a Namespace's own name as request.namespace.
            namespace=request_namespace and name,
            labels=labels,
            old_labels=old_labels,
        )

    assert namespace("team-b") == []
    assert namespace("team-b", "DELETE") == []
    assert namespace("kube-evil") == [
        "Fairshare may not write in the protected namespace kube-evil"
    ]
    assert namespace("default", "UPDATE", old_labels={}) == [
        "Fairshare may not write in the protected namespace default"
    ]
    # Unlabelled: not Fairshare's to create, or to delete.
    assert namespace("team-b", labels={}) == [
        "Fairshare may write only objects labelled app.kubernetes.io/managed-by=fairshare"
    ]
    assert namespace("payments", "DELETE", labels=None)
    # Another manager's namespace is never taken over.
    assert namespace("ml-argo", "UPDATE", old_labels={LABEL_MANAGED_BY: "argocd"}) == [
        "Fairshare may not take over an object another manager labelled as its own"
    ]


def test_cluster_scoped_objects_need_fairshares_label(cel):
    assert cel.refusals(operation="CREATE", kind="PriorityClass", name="x", labels=MANAGED) == []
    assert cel.refusals(operation="DELETE", kind="Queue", name="default", labels={}) == [
        "Fairshare may write only objects labelled app.kubernetes.io/managed-by=fairshare"
    ]
    # A ClusterRoleBinding to cluster-admin, were RBAC ever to allow it, is refused too.
    assert cel.refusals(operation="CREATE", kind="ClusterRoleBinding", name="x", labels=None)
