"""deploy/: the Kustomize base for Fairshare itself (rendered by ``kubectl kustomize``, valid
under ``kubernetes-validate --strict``) and deploy/volcano/ (the scheduler configuration
Fairshare expects, and the warning a sync gives when the live one lacks it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kube.scheduler_config import CONFIG_KEY, scheduler_config_warnings

DEPLOY = Path(__file__).parents[2] / "deploy"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
K8S_VERSION = "1.33.0"

needs_kubectl = pytest.mark.skipif(
    not Path(KUBECTL).exists(), reason="kubectl is not installed (see .ci/run)"
)


def kustomize(path: Path) -> list[dict]:
    result = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def base() -> dict[tuple[str, str], dict]:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl is not installed (see .ci/run)")
    return {(d["kind"], d["metadata"]["name"]): d for d in kustomize(DEPLOY)}


@needs_kubectl
def test_the_rendered_base_passes_strict_validation(base):
    for doc in base.values():
        # raises ValidationError for an unknown field or a wrong type (strict: no extras)
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@needs_kubectl
def test_the_base_has_web_worker_beat_service_ingress_and_a_migrations_job(base):
    kinds = {key for key in base}
    assert {
        ("Deployment", "fairshare-web"),
        ("Deployment", "fairshare-worker"),
        ("Deployment", "fairshare-beat"),
        ("Service", "fairshare-web"),
        ("Ingress", "fairshare"),
        ("ValidatingAdmissionPolicy", "fairshare-managed-namespaces-only"),
        ("ValidatingAdmissionPolicyBinding", "fairshare-managed-namespaces-only"),
        ("ServiceAccount", "fairshare"),
        ("ClusterRole", "fairshare"),
        ("Namespace", "fairshare"),
    } <= kinds
    web = base[("Deployment", "fairshare-web")]["spec"]["template"]["spec"]
    assert web["initContainers"][0]["command"] == ["python", "-m", "config.migrate"]
    assert base[("Deployment", "fairshare-beat")]["spec"]["strategy"]["type"] == "Recreate"
    assert base[("Deployment", "fairshare-beat")]["spec"]["replicas"] == 1
    watcher = base[("Deployment", "fairshare-watcher")]["spec"]
    assert watcher["strategy"]["type"] == "Recreate" and watcher["replicas"] == 1
    command = watcher["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "manage.py", "watch_cluster"]


def test_docker_compose_runs_the_watcher():
    compose = yaml.safe_load((DEPLOY.parent / "docker-compose.yml").read_text())
    assert compose["services"]["watcher"]["command"][:3] == ["python", "manage.py", "watch_cluster"]


@needs_kubectl
def test_every_container_reads_the_config_map_and_the_secret_and_has_resources(base):
    [configmap] = [d for (kind, _), d in base.items() if kind == "ConfigMap"]
    assert configmap["data"]["FAIRSHARE_CLUSTER"] == "in-cluster"
    for (kind, name), doc in base.items():
        if kind not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "fairshare", name
        for container in pod.get("initContainers", []) + pod["containers"]:
            refs = {next(iter(r)): next(iter(r.values()))["name"] for r in container["envFrom"]}
            # the generated ConfigMap (with its hash suffix) and the operator's Secret
            assert refs == {"configMapRef": configmap["metadata"]["name"], "secretRef": "fairshare"}
            assert container["resources"]["requests"]["memory"], name
            assert container["resources"]["limits"]["memory"], name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


@needs_kubectl
def test_web_and_worker_have_probes_the_app_answers(base):
    web = base[("Deployment", "fairshare-web")]["spec"]["template"]["spec"]["containers"][0]
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # The kubelet's Host is the pod IP (tests/deploy/test_wiring.py calls them so): no header.
    for probe in (web["readinessProbe"], web["livenessProbe"]):
        assert "httpHeaders" not in probe["httpGet"]
    worker = base[("Deployment", "fairshare-worker")]["spec"]["template"]["spec"]["containers"]
    assert "inspect ping" in " ".join(worker[0]["livenessProbe"]["exec"]["command"])
    assert base[("Service", "fairshare-web")]["spec"]["ports"][0]["targetPort"] == "http"


def test_the_probe_paths_exist(client):
    assert client.get("/healthz").status_code == 200


# --------------------------------------------------------------------------- deploy/volcano


def volcano_conf() -> str:
    configmap = yaml.safe_load(
        (DEPLOY / "volcano" / "non-helm" / "volcano-scheduler-configmap.yaml").read_text()
    )
    assert configmap["metadata"] == {
        "name": "volcano-scheduler-configmap",
        "namespace": "volcano-system",
        "labels": {"app.kubernetes.io/part-of": "fairshare"},
    }
    return configmap["data"][CONFIG_KEY]


def test_the_shipped_scheduler_configuration_is_the_one_fairshare_expects():
    text = volcano_conf()
    conf = yaml.safe_load(text)
    tiers = [[p["name"] for p in tier["plugins"]] for tier in conf["tiers"]]

    assert [a.strip() for a in conf["actions"].split(",")] == [
        "enqueue",
        "allocate",
        "backfill",
        "preempt",
        "reclaim",
    ]
    assert tiers == [["priority", "gang", "conformance"], ["capacity", "predicates", "binpack"]]
    capacity = conf["tiers"][1]["plugins"][0]
    assert capacity["enableHierarchy"] is True
    assert scheduler_config_warnings(text, hierarchy=True) == []


@needs_kubectl
def test_the_volcano_kustomization_renders_and_validates():
    docs = kustomize(DEPLOY / "volcano") + kustomize(DEPLOY / "volcano" / "non-helm")
    assert {(d["kind"], d["metadata"]["namespace"]) for d in docs} == {
        ("ConfigMap", "volcano-system"),
        ("Role", "volcano-system"),
        ("RoleBinding", "volcano-system"),
    }
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["volcano-scheduler-configmap"],
            "verbs": ["get"],
        }
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("conf", "hierarchy", "expected"),
    [
        # Volcano's chart default: proportion, no capacity
        (
            "actions: enqueue, allocate, backfill\ntiers:\n- plugins:\n  - name: priority\n"
            "- plugins:\n  - name: drf\n  - name: proportion\n",
            False,
            ["the capacity plugin is not enabled (plugins: drf, priority, proportion)"],
        ),
        (
            "tiers:\n- plugins:\n  - name: capacity\n  - name: proportion\n",
            False,
            ["both the proportion and the capacity plugin are enabled"],
        ),
        (
            "tiers:\n- plugins:\n  - name: capacity\n    enabledHierarchy: true\n",
            True,
            ["the capacity plugin runs without enableHierarchy: true"],
        ),
        ("tiers:\n- plugins:\n  - name: capacity\n", False, []),
        ("tiers: [", False, ["it is not valid YAML"]),
    ],
)
def test_it_says_what_a_scheduler_configuration_lacks(conf, hierarchy, expected):
    warnings = scheduler_config_warnings(conf, hierarchy=hierarchy)

    assert len(warnings) == len(expected)
    for warning, start in zip(warnings, expected, strict=True):
        assert warning.startswith(start), warning
