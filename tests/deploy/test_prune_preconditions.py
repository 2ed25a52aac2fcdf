"""A prune deletes the object the sync observed, never one recreated (or changed) since: the
DELETE carries the observed uid and resourceVersion as DeleteOptions preconditions, which the
API server checks against the stored object (apimachinery
``pkg/registry/generic/registry/store.go``, ``Delete``: 409 Conflict on a mismatch)."""

from __future__ import annotations

import pytest

from kube import apply
from quotas.models import Team
from scheduling.choices import SyncStatus
from scheduling.sync import create_run, run_sync, writers


def test_a_delete_with_the_live_object_sends_its_uid_and_resource_version(monkeypatch):
    sent = []
    monkeypatch.setattr(
        apply, "request_json", lambda client, method, path, **kw: sent.append((method, path, kw))
    )
    live = {"metadata": {"name": "fairshare", "uid": "u-1", "resourceVersion": "42"}}

    apply.delete(None, "ResourceQuota", "fairshare", "team-a-ml", live=live)
    apply.delete(None, "Queue", "team-a")

    (method, path, kw), (_, _, plain) = sent
    assert (method, path) == ("DELETE", "/api/v1/namespaces/team-a-ml/resourcequotas/fairshare")
    assert kw["body"] == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u-1", "resourceVersion": "42"},
    }
    assert kw["query"]["propagationPolicy"] == "Background"
    assert "body" not in plain


@pytest.mark.django_db(transaction=True)
def test_a_sync_prunes_with_the_observed_objects_preconditions(
    cast, kubeapi, settings, monkeypatch
):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    run_sync(create_run().pk)
    kubeapi.settle_controller()  # the queue controller's status writes bump resourceVersions
    Team.objects.filter(pk=cast.team_a.pk).update(active=False)
    before = {
        (kind, obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj["metadata"]
        for kind in ("Queue", "RoleBinding", "ResourceQuota", "Role")
        for obj in kubeapi.objects(kind)
    }
    deletes = []
    real = writers.delete

    def recording(client, kind, name, namespace=None, **kw):
        deletes.append((kind, namespace, name, kw.get("live")))
        return real(client, kind, name, namespace, **kw)

    monkeypatch.setattr(writers, "delete", recording)

    run = run_sync(create_run().pk)

    assert run.status == SyncStatus.SUCCEEDED
    assert {(k, n) for k, _, n, _ in deletes} >= {
        ("Queue", "team-a"),
        ("RoleBinding", "fairshare-lead"),
    }
    for kind, namespace, name, live in deletes:
        observed = before[(kind, namespace, name)]
        assert apply.delete_preconditions(live)["preconditions"] == {
            "uid": observed["uid"],
            "resourceVersion": observed["resourceVersion"],
        }


@pytest.mark.django_db(transaction=True)
def test_an_object_changed_after_the_sync_observed_it_is_not_pruned(
    cast, kubeapi, settings, monkeypatch
):
    """Between the LIST and the DELETE someone re-labels (here: rewrites) the ResourceQuota: the
    API server refuses the stale preconditions with 409 and the object survives; the sync
    records that item as failed instead of deleting what it never saw."""
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    run_sync(create_run().pk)
    Team.objects.filter(pk=cast.team_a.pk).update(active=False)
    real = writers.delete
    touched = []

    def racing(client, kind, name, namespace=None, **kw):
        if kind == "ResourceQuota" and not touched:
            current = kubeapi.get(kind, name, namespace)
            current["metadata"].setdefault("annotations", {})["someone/else"] = "edited"
            kubeapi.put_object(current)
            touched.append((namespace, name))
        return real(client, kind, name, namespace, **kw)

    monkeypatch.setattr(writers, "delete", racing)

    run = run_sync(create_run().pk)

    ((namespace, name),) = touched
    assert kubeapi.get("ResourceQuota", name, namespace) is not None
    failed = run.items.filter(kind="ResourceQuota", namespace=namespace, name=name).get()
    assert failed.action == "failed", (failed.action, failed.error)
    assert "Precondition" in failed.error or "409" in failed.error, failed.error
