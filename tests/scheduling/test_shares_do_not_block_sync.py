"""Quotas and RBAC don't wait for shares: when the share computation fails, an approval's quota
and a new member's RoleBinding still reach the cluster, through the real receivers and tasks
(run eagerly), and the run says that the Queues kept the last good fair allocation."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from config.celery import app
from quotas import members
from quotas.decisions import approve_request, submit_request
from quotas.lines import LineInput
from scheduling import services
from scheduling.choices import SyncStatus
from scheduling.exceptions import ShareProblemError
from scheduling.models import ShareFailure, SyncRun
from scheduling.sync import create_run, run_sync
from tests.base import GPU, make_cast


@pytest.fixture
def eager(monkeypatch):
    """Celery tasks run in the calling thread (the chain too), as a worker would run them."""
    # The app reads Django settings with the CELERY_ namespace, so its keys carry the prefix.
    keys = ("CELERY_TASK_ALWAYS_EAGER", "CELERY_TASK_EAGER_PROPAGATES")
    before = {k: app.conf.get(k) for k in keys}
    app.conf.update(dict.fromkeys(keys, True))
    yield
    app.conf.update(before)


def broken_problem(inputs):
    raise ShareProblemError("tenant 'dept-x': its children's guarantees of 'nvidia.com/gpu' ...")


@pytest.mark.django_db(transaction=True)
def test_a_share_failure_does_not_block_quota_and_rbac_changes(
    kubeapi, settings, eager, monkeypatch, client
):
    cast = make_cast()
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    good = services.compute_shares(trigger="test")
    assert run_sync(create_run().pk).status == SyncStatus.SUCCEEDED
    deserved = kubeapi.get("Queue", "team-a")["spec"]["deserved"]
    # From now on every share computation fails (an invalid DRF problem).
    monkeypatch.setattr(services, "make_problem", broken_problem)

    request = submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "25", "44")],
        justification="More GPUs.",
    )
    approve_request(request.pk, approver=cast.root)
    members.add_member(cast.team_a, username="nobody", role="viewer", actor=cast.root)

    assert ShareFailure.objects.filter(trigger="quota-change:approve").exists()
    quota = kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "44"
    viewers = kubeapi.get("RoleBinding", "fairshare-viewer", "team-a-ml")["subjects"]
    assert {s["name"] for s in viewers} == {"vic", "nobody"}
    queue = kubeapi.get("Queue", "team-a")["spec"]
    assert queue["capability"]["nvidia.com/gpu"] == "44"
    assert queue["guarantee"]["resource"]["nvidia.com/gpu"] == "25"
    assert queue["deserved"]["nvidia.com/gpu"] == max(deserved["nvidia.com/gpu"], "25", key=int)

    runs = list(SyncRun.objects.exclude(trigger="manual").order_by("pk"))
    assert {r.status for r in runs} <= {SyncStatus.SUCCEEDED, SyncStatus.MERGED}
    assert not any(r.pruned_count for r in runs)
    # The approval's targeted sync went out first; the one chained after the failed share
    # computation still ran, with the last good allocation, and says so.
    first = runs[0]
    assert (first.trigger, first.scope) == ("quota-change:approve", {"teams": ["team-a"]})
    assert first.shares_stale is False
    stale = next(r for r in runs if r.scope.get("queues"))
    assert stale.status == SyncStatus.SUCCEEDED
    assert (stale.shares_stale, stale.share_computation_id) == (True, good.pk)
    assert f"the last good computation #{good.pk}" in stale.log
    assert stale.unchanged_count == 3  # every Queue planned, none changed: deserved kept
    assert runs[-1].shares_stale is True  # the membership's sync, after the failure

    client.force_login(cast.root)
    page = client.get(reverse("scheduling:syncrun", args=[stale.pk])).content.decode()
    assert f"share computation #{good.pk}" in page
    assert 'badge failed">stale</span>' in page
    api = client.get(f"/api/v1/sync-runs/{stale.pk}/").json()
    assert (api["shares_stale"], api["share_computation"]) == (True, good.pk)


@pytest.mark.django_db
def test_a_run_with_current_shares_is_not_stale(cast, kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    good = services.compute_shares(trigger="test")

    run = run_sync(create_run().pk)

    assert (run.shares_stale, run.share_computation_id) == (False, good.pk)
    assert "stale" not in run.log
    queue = kubeapi.get("Queue", "team-a")["spec"]
    snapshot = good.snapshots.get(team=cast.team_a)
    assert Decimal(queue["deserved"]["nvidia.com/gpu"]) >= Decimal(
        snapshot.fair_allocation.get(GPU, "0")
    ).min(Decimal(40))
