"""A second, independent client: kubectl applies the export to the fake API server.

``kubectl apply --server-side -R -f DIR`` must succeed in one pass on the ``export_manifests``
layout (Namespaces before their contents, Queue parents before children); a second apply
changes nothing (no resourceVersion moves), ``kubectl diff --server-side`` reports no
difference, and ``kubectl get queues`` lists the Queues. kubectl comes from the machine
(``/usr/bin/kubectl``; ``.ci/run`` installs Debian's ``kubernetes-client`` where it is missing).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduling import services

pytestmark = pytest.mark.django_db

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def kubectl(kubeconfig: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def client_minor() -> int:
    out = subprocess.run(
        [KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    ).stdout
    return int("".join(c for c in json.loads(out)["clientVersion"]["minor"] if c.isdigit()))


def versions(kubeapi) -> dict:
    return {
        (kind, o["metadata"].get("namespace"), o["metadata"]["name"]): o["metadata"][
            "resourceVersion"
        ]
        for kind in ("Namespace", "Queue", "PriorityClass", "ResourceQuota", "LimitRange")
        for o in kubeapi.objects(kind)
    }


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed (see .ci/run)")
def test_kubectl_round_trips_the_export(kubeapi, tmp_path):
    call_command("seed_demo", "--quiet")
    services.compute_shares(trigger="test")
    out = tmp_path / "export"
    call_command("export_manifests", "--out", str(out))
    config = kubeapi.kubeconfig_path
    # kubectl >= 1.27 leaves validation to the server (fieldValidation=Strict, found through
    # /openapi/v3); older ones validate against the protobuf /openapi/v2 the fake lacks.
    validate = [] if client_minor() >= 27 else ["--validate=false"]

    first = kubectl(config, "apply", "--server-side", "-R", "-f", str(out), *validate)
    kubeapi.controller_step()  # Volcano's queue controller parents and opens the new Queues
    before = versions(kubeapi)
    kubectl(config, "apply", "--server-side", "-R", "-f", str(out), *validate)
    diff = kubectl(config, "diff", "--server-side", "-R", "-f", str(out), check=False)
    queues = kubectl(config, "get", "queues", "-o", "name")

    assert "namespace/research-ml serverside-applied" in first.stdout
    assert versions(kubeapi) == before  # the second apply changed nothing
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert diff.stdout == ""
    names = set(queues.stdout.split())
    assert {"queue.scheduling.volcano.sh/ai-research", "queue.scheduling.volcano.sh/cv-team"} <= (
        names
    )
    # What kubectl applied passes the fake's upstream rules, as Fairshare's own sync does.
    stored = kubeapi.get("LimitRange", "fairshare", "research-ml")
    assert stored["spec"]["limits"][0]["default"]["nvidia.com/gpu"] == "0"
    assert kubeapi.get("Queue", "ai-research")["spec"]["parent"] == "root"


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed (see .ci/run)")
def test_kubectl_is_refused_a_queue_that_breaks_volcanos_rules(kubeapi, tmp_path):
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: dept\n"
        "spec:\n  weight: 1\n  capability:\n    nvidia.com/gpu: '8'\n---\n"
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: team\n"
        "spec:\n  weight: 1\n  parent: dept\n  capability:\n    nvidia.com/gpu: '16'\n"
    )

    result = kubectl(
        kubeapi.kubeconfig_path, "apply", "--server-side", "-f", str(manifest), check=False
    )

    assert result.returncode != 0
    assert 'admission webhook "validatequeue.volcano.sh" denied the request' in result.stderr
    assert "exceeds its ancestor's capability" in result.stderr
