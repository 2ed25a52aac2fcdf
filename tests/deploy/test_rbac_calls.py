"""The ClusterRole grants exactly what the code's Kubernetes API calls need: each verb is
traced to the calls that use it, and a call nobody listed here fails the test until the role
(and deploy/README.md's table) says why it is needed.

Every request to the API server goes through ``request_json`` (kube/client.py) or,
for watches, ``param_serialize`` in kube/watch.py; no generated API class is used.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from kube.client import KINDS
from scheduling.domain.backends import BACKENDS
from scheduling.domain.types import ClusterSpec, MemberSpec, NamespaceSpec, TeamSpec

ROOT = Path(__file__).parents[2]
PRODUCT = ("config", "kube", "quotas", "scheduling", "monitoring", "portal")

# Each call site: (file, HTTP method) -> the verbs it needs, on what.
MANAGED = "the managed kinds"
CALL_SITES = {
    # list_raw / list_managed: LIST (GET on a collection), paged
    ("kube/observe.py", "GET"): ("list", "collections"),
    # list_with_version: the drift watcher's LIST before its WATCH
    ("kube/watch.py", "GET"): ("list", MANAGED),
    # stream_watch: GET ...?watch=true
    ("kube/watch.py", "GET watch"): ("watch", MANAGED),
    # server_side_apply: PATCH (application/apply-patch+yaml); creates what does not exist
    ("kube/apply.py", "PATCH"): ("patch+create", MANAGED),
    # delete (prune)
    ("kube/apply.py", "DELETE"): ("delete", MANAGED),
    # the Volcano scheduler ConfigMap: a namespaced Role in deploy/volcano/, not the ClusterRole
    ("kube/scheduler_config.py", "GET"): ("get", "volcano role"),
}


def call_sites() -> set[tuple[str, str]]:
    found = set()
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name == "request_json":
                    method = node.args[1]
                    assert isinstance(method, ast.Constant), f"{rel}: request_json method"
                    found.add((rel, method.value))
                elif name == "param_serialize":
                    found.add((rel, "GET watch"))
            assert "V1Api(" not in path.read_text(), f"{rel} uses a generated API class"
    return found


def collection_resources() -> set[tuple[str, str]]:
    """(group, resource) of the collections the collectors LIST (their *_PATH constants)."""
    text = (ROOT / "monitoring" / "collectors" / "k8s_usage.py").read_text()
    found = set()
    for path in re.findall(r'^[A-Z_]+_PATH = "([^"]+)"', text, flags=re.M):
        parts = path.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        found.add((group, parts[-1]))
    return found


def managed(backend: str) -> set[tuple[str, str]]:
    infos = [KINDS[kind] for kind in BACKENDS[backend].kinds]
    return {(i.api_version.rpartition("/")[0], i.plural) for i in infos}


# The ClusterRoles each backend's deployment binds: the base's, and with Kueue the overlay's.
ROLE_FILES = {"volcano": ("rbac.yaml",), "kueue": ("rbac.yaml", "kueue/rbac-kueue.yaml")}


def granted(backend: str = "volcano", files: tuple[str, ...] | None = None):
    grants = set()
    for name in files or ROLE_FILES[backend]:
        docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / name).read_text()) if d]
        [role] = [d for d in docs if d["kind"] == "ClusterRole"]
        grants |= {
            (g, r, v, n)
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
            for n in rule.get("resourceNames") or ["*"]
        }
    return grants


def needed(backend: str = "volcano") -> set[tuple[str, str, str, str]]:
    need = set()
    kinds = managed(backend)
    for (group, resource), verb in [
        *[(gr, "list") for gr in collection_resources() | kinds],
        *[(gr, "watch") for gr in kinds],
        *[(gr, v) for gr in kinds for v in ("patch", "create", "delete")],
    ]:
        need.add((group, resource, verb, "*"))
    # The team RoleBindings' roleRefs and the Role fairshare-volcano (RBAC escalation
    # prevention: bind on the roles referenced, and every permission a Role it creates grants).
    spec = ClusterSpec(
        teams=(TeamSpec("team-a", members=(MemberSpec("a", "lead"), MemberSpec("b", "member"))),),
        namespaces=(NamespaceSpec("team-a-ml", "team-a", volcano_jobs=True),),
    )
    for manifest in BACKENDS[backend].render(spec):
        if manifest["kind"] == "RoleBinding" and manifest["roleRef"]["kind"] == "ClusterRole":
            need.add(
                ("rbac.authorization.k8s.io", "clusterroles", "bind", manifest["roleRef"]["name"])
            )
        if manifest["kind"] == "Role":
            for rule in manifest["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        need |= {(g, r, v, "*") for v in rule["verbs"]}
    return need


def test_every_api_call_site_is_known():
    assert call_sites() == set(CALL_SITES)


def test_the_cluster_role_grants_exactly_what_the_calls_need():
    grants, need = granted(), needed()
    assert need - grants == set(), "the code needs permissions the ClusterRole lacks"
    # bind on a role no team binding uses today (admin, edit, view: the roles a member may get)
    unused = {g for g in grants - need if g[2] != "bind"}
    assert unused == set(), "the ClusterRole grants verbs the code never uses"
    assert {g[3] for g in grants if g[2] == "bind"} == {"admin", "edit", "view"}


def test_with_kueue_the_overlay_grants_exactly_what_the_kueue_calls_add():
    need = needed("kueue")
    grants = granted("kueue")
    assert need - grants == set(), "the Kueue backend needs permissions its ClusterRoles lack"
    overlay = granted(files=("kueue/rbac-kueue.yaml",))
    assert {g[0] for g in overlay} == {"kueue.x-k8s.io"}, "the overlay grants only Kueue's kinds"
    assert overlay - need == set(), "the Kueue ClusterRole grants verbs the code never uses"
    # ...and the base grants nothing of Kueue's: those rights come only with the backend.
    assert {g for g in granted("volcano") if g[0] == "kueue.x-k8s.io"} == set()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_backend_lists_only_kinds_its_role_files_grant(backend):
    lists = {(g, r) for g, r, v, _ in granted(backend) if v == "list"}
    assert managed(backend) <= lists


def test_deploy_readmes_least_privilege_table_is_the_cluster_role():
    """deploy/README.md's table, row by row, is exactly the ClusterRole's rules."""
    text = (ROOT / "deploy" / "README.md").read_text()
    section = text.split("## RBAC", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    documented = set()
    for group, resources, verbs, _why in rows:
        group = group.strip("`").replace('""', "")
        names = re.findall(r"`([a-z-]+)`", resources)
        resources = resources.split("`")[0] if names else resources
        for resource in (r.strip() for r in resources.split(",")):
            for verb in (v.strip() for v in verbs.split(",")):
                for name in names or ["*"]:
                    documented.add((group, resource, verb, name))
    assert documented == granted()


def test_the_kueue_overlay_documented_in_deploy_kueue_renders_with_the_backend_set(tmp_path):
    from tests.deploy.manifests import kustomize

    (tmp_path / "deploy").symlink_to(ROOT / "deploy")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [deploy, deploy/kueue]\n"
        "configMapGenerator:\n  - name: fairshare\n    namespace: fairshare\n"
        "    behavior: merge\n    literals: [FAIRSHARE_SCHEDULER=kueue]\n"
    )
    docs = kustomize(tmp_path)
    [config] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config["data"]["FAIRSHARE_SCHEDULER"] == "kueue"
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if "Role" in d["kind"]}
    assert {("ClusterRole", "fairshare-kueue"), ("Role", "fairshare-read-kueue-config")} <= roles
    [reader] = [d for d in docs if d["kind"] == "Role"]
    assert reader["metadata"]["namespace"] == "kueue-system"
    assert reader["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["kueue-manager-config"],
            "verbs": ["get"],
        }
    ]
