"""deploy/ as the cluster will get it: rendered with ``kubectl kustomize`` (the base and
deploy/volcano/), plus the Prometheus Operator objects of deploy/monitoring/ as they are."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


def require_kubectl() -> None:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl is not installed (see .ci/run)")


def kustomize(path: Path) -> list[dict]:
    require_kubectl()
    result = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def kustomize_with_image_tag(tag: str) -> list[dict]:
    """The base rendered by an overlay that only changes the image tag (a new release)."""
    with tempfile.TemporaryDirectory() as scratch:
        overlay = Path(scratch)
        (overlay / "deploy").symlink_to(DEPLOY)
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            "resources: [deploy]\n"
            f"images:\n  - name: ghcr.io/example/fairshare\n    newTag: {tag!r}\n"
        )
        return kustomize(overlay)


def monitoring() -> list[dict]:
    docs: list[dict] = []
    for path in sorted((DEPLOY / "monitoring").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def everything() -> list[dict]:
    """What an operator applies: the base, Volcano's side and the monitoring objects."""
    return kustomize(DEPLOY) + kustomize(DEPLOY / "volcano") + monitoring()


def pod_template(doc: dict) -> dict | None:
    if doc["kind"] in WORKLOADS:
        return doc["spec"]["template"]
    return None


def containers(doc: dict, *, init: bool = True) -> list[dict]:
    template = pod_template(doc)
    if template is None:
        return []
    spec = template["spec"]
    return (spec.get("initContainers", []) if init else []) + spec["containers"]


def config_map(docs: list[dict]) -> dict:
    [configmap] = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("fairshare")
    ]
    return configmap
