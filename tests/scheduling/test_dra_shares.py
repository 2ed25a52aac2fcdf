"""Fractional GPU-equivalents (MIG slices and shared GPUs held through DRA, issue 34) in the fair
shares: usage and dominant shares keep the fraction; fair allocations of ``nvidia.com/gpu`` stay
whole GPUs (``scheduling.domain.fairness.rounding``: never rounded above a team's demand), so no
Queue gets a fractional device count, which Volcano's webhook refuses for an extended resource
(validate_queue.go ``validateResourceQuantityOfQueue`` → ``ValidateResourceQuantityValue``)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from monitoring.models import UsageSample
from scheduling.choices import SyncStatus
from scheduling.models import ShareSnapshot
from scheduling.services import compute_shares
from scheduling.sync import create_run, run_sync
from tests.base import GPU

NOW = timezone.now().replace(microsecond=0)


def usage(team, namespace, allocated, pending=0, flavor=""):
    UsageSample.objects.create(
        taken_at=NOW,
        team=team,
        namespace=namespace,
        resource=GPU,
        flavor=flavor,
        allocated=Decimal(allocated),
        pending=Decimal(pending),
    )


@pytest.fixture
def fractional(cast):
    # team-a: two whole H100s and three 1g.10gb slices (0.375); wants one slice more (0.125).
    usage(cast.team_a, "team-a-ml", "2.375", pending="0.125", flavor="NVIDIA-H100-80GB-HBM3")
    # team-b: one shared GPU's half.
    usage(cast.team_b, "team-b-ml", "0.5")
    computation = compute_shares(trigger="test", now=NOW)
    return {s.team.slug: s for s in ShareSnapshot.objects.filter(computation=computation)}


@pytest.mark.django_db
def test_usage_and_demand_keep_the_fraction_and_the_allocation_is_whole_gpus(fractional):
    a, b = fractional["team-a"], fractional["team-b"]
    assert a.usage == {GPU: "2.375"}
    assert a.demand == {GPU: "2.5"}
    assert a.dominant_share == pytest.approx(2.375 / 100)
    assert b.usage == {GPU: "0.5"}
    # Rounded down, never above the demand: a team is not promised a GPU it does not need.
    assert a.fair_allocation == {GPU: "2"}
    assert b.fair_allocation == {GPU: "0"}


@pytest.mark.django_db
def test_the_queues_get_whole_device_counts_and_volcano_admits_them(fractional, kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5

    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    for queue in kubeapi.objects("Queue"):
        spec = queue["spec"]
        for part in (spec.get("capability", {}), spec.get("deserved", {})):
            if GPU in part:
                assert Decimal(part[GPU]) == Decimal(part[GPU]).to_integral_value(), queue
    assert kubeapi.get("Queue", "team-a")["spec"]["deserved"][GPU] == "20"  # its guarantee


@pytest.mark.django_db
def test_the_preview_says_why_a_fraction_is_not_allocated(fractional):
    from scheduling.services import what_if

    result = what_if({"team-b": {"weight": 2}}, now=NOW)

    assert result.teams["team-b"].why_after == (
        "the cluster has spare capacity: you get your whole demand in whole GPUs (the 0.5 "
        "GPU-equivalents more that your workloads want, parts of a GPU, are not rounded up to one)"
    )
