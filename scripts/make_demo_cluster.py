"""Regenerate the Fairshare-managed objects in ``monitoring/fixtures/demo_cluster.json``.

The demo cluster is a ``kubectl get -o json`` dump. Besides its nodes and pods it holds what a
cluster would hold after an earlier Fairshare sync, so the demo's (plan-only) syncs have
something to compare with. This script makes those objects the way a cluster would:

1. seed the demo into a scratch SQLite database;
2. sync it to the project's fake API server (the validating, defaulting test fixture), through
   the real kubernetes client, and read the objects back (server-side defaults included,
   ``managedFields`` left out as ``kubectl get -o json`` does);
3. then age them as a cluster ages:
   * a hand edit: someone raised research-ml's GPU quota with ``kubectl edit`` (drift);
   * a stale object: production-team's Queue as applied before its last approval (an update
     that is not drift: live and last-applied agree, the desired state moved on);
   * a leftover: the RoleBinding of a member who has since left speech-team (a prune).

Run it after a change to what the renderer writes::

    .venv/bin/python scripts/make_demo_cluster.py

and commit the fixture; ``tests/quotas/test_seed_demo.py`` checks that the demo's sync shows
exactly one drift, at least one plain update, one prune and unchanged objects.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "monitoring" / "fixtures" / "demo_cluster.json"
MANAGED = ("Namespace", "ResourceQuota", "LimitRange", "Role", "RoleBinding", "PriorityClass")
LAST_APPLIED = "fairshare.io/last-applied"
CREATED = "2026-10-01T09:00:00Z"  # "an earlier sync", a fixed time so the fixture is stable


def main() -> int:
    scratch = tempfile.mkdtemp(prefix="fairshare-demo-cluster-")
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        FAIRSHARE_DEBUG="true",
        FAIRSHARE_VAR_DIR=scratch,
        DATABASE_URL=f"sqlite:///{scratch}/db.sqlite3",
        FAIRSHARE_CLUSTER="disabled",
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
    )
    os.environ.pop("CELERY_BROKER_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from scheduling.sync import create_run, run_sync
    from tests.kubeapi.server import FakeKubeApi

    call_command("migrate", verbosity=0)
    call_command("seed_demo", quiet=True)
    server = FakeKubeApi().start()
    try:
        server.reset()
        run = run_sync(create_run(dry_run=False).pk, api_client=server.api_client())
        if run.status != "succeeded":
            print(f"the sync to the fake API server failed: {run.error}", file=sys.stderr)
            return 1
        managed = [
            _as_dumped(obj, kind) for kind in (*MANAGED, "Queue") for obj in server.objects(kind)
        ]
    finally:
        server.close()

    managed = [obj for obj in managed if _is_ours(obj)]
    _hand_edit(managed)
    _stale(managed)
    managed.append(_leftover(managed))

    # Nodes, pods, PodGroups and Events come from the generator; the managed objects after them.
    from bench.cluster_gen import demo_cluster, write_list  # the layout: one item a line

    kept = demo_cluster()["items"]

    with FIXTURE.open("w") as out:
        write_list(kept + sorted(managed, key=_sort_key), out)
    print(
        f"{FIXTURE.relative_to(ROOT)}: {len(kept)} nodes, pods, PodGroups and Events, "
        f"{len(managed)} managed objects"
    )
    return 0


def _as_dumped(obj: dict, kind: str) -> dict:
    """As ``kubectl get -o json`` prints it (no managedFields); uid and creation time made
    stable so that regenerating changes only what the renderer changed."""
    obj = dict(obj, kind=kind)
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    path = f"{kind}/{meta.get('namespace', '')}/{meta['name']}"
    meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"fairshare-demo:{path}"))
    meta["creationTimestamp"] = CREATED
    obj["metadata"] = meta
    return obj


def _is_ours(obj: dict) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get("app.kubernetes.io/managed-by") == "fairshare"


def _find(managed: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    for obj in managed:
        meta = obj["metadata"]
        if obj["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
            return obj
    raise LookupError(f"{kind} {namespace}/{name} is not in the rendered demo")


def _hand_edit(managed: list[dict]) -> None:
    """``kubectl edit resourcequota fairshare -n research-ml``: GPUs raised behind our back."""
    quota = _find(managed, "ResourceQuota", "fairshare", "research-ml")
    hard = quota["spec"]["hard"]
    hard["requests.nvidia.com/gpu"] = str(int(hard["requests.nvidia.com/gpu"]) + 16)


def _stale(managed: list[dict]) -> None:
    """production-team's Queue as applied before its last approval: 32 GPUs less capability."""
    queue = _find(managed, "Queue", "production-team")
    old = dict(queue["spec"], capability=dict(queue["spec"]["capability"]))
    old["capability"]["nvidia.com/gpu"] = str(int(old["capability"]["nvidia.com/gpu"]) - 32)
    queue["spec"] = old
    applied = json.loads(queue["metadata"]["annotations"][LAST_APPLIED])
    applied["spec"] = {**applied["spec"], "capability": old["capability"]}
    annotations = dict(queue["metadata"]["annotations"])
    annotations[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"), sort_keys=True)
    queue["metadata"] = dict(queue["metadata"], annotations=annotations)


def _leftover(managed: list[dict]) -> dict:
    """The RoleBinding of a member who left speech-team: managed, no longer desired."""
    template = next(
        obj
        for obj in managed
        if obj["kind"] == "RoleBinding" and obj["metadata"].get("namespace") == "speech-asr"
    )
    binding = json.loads(json.dumps(template))
    meta = binding["metadata"]
    meta["name"] = "fairshare-member-former-intern"
    meta["uid"] = "5b0f9c1e-6c1d-4c57-9a55-2f3d0c1f0a11"
    meta.get("annotations", {}).pop(LAST_APPLIED, None)
    binding["roleRef"] = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "edit",
    }
    binding["subjects"] = [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "former-intern"}
    ]
    return binding


def _sort_key(obj: dict) -> tuple:
    order = (*MANAGED, "Queue")
    meta = obj["metadata"]
    return (order.index(obj["kind"]), meta.get("namespace") or "", meta["name"])


if __name__ == "__main__":
    raise SystemExit(main())
