"""Issue 34 (DRA): a team's quota on a device class reaches its namespaces' ResourceQuota, and
the (fake) API server's ResourceQuota admission charges ResourceClaims against it.

The ResourceQuota name of a device class's device count is the resource name itself, with no
``requests.`` prefix (kubernetes pkg/quota/v1/evaluator/core/resource_claims.go
``V1ResourceByDeviceClass``)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from quotas.models import TeamQuota
from quotas.quantities import validate_resource_name
from scheduling.choices import SyncStatus
from scheduling.shares import build_problem
from scheduling.sync import create_run, run_sync
from tests.kubeapi.kubectl import KUBECTL, kubectl

GPU_DEVICES = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
MIG_DEVICES = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"
NAMESPACE = "team-a-ml"  # team-a's only namespace (tests.base.make_cast)


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    return kubeapi


@pytest.fixture
def synced(cast, cluster):
    TeamQuota.objects.create(
        team=cast.team_a, resource=GPU_DEVICES, guarantee=Decimal(0), limit=Decimal(2)
    )
    TeamQuota.objects.create(
        team=cast.team_a, resource=MIG_DEVICES, guarantee=Decimal(0), limit=Decimal(1)
    )
    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.error
    return cluster


def claim(name, *requests):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": list(requests)}},
    }


def exactly(device_class="gpu.nvidia.com", **extra):
    return {"name": "r", "exactly": {"deviceClassName": device_class, **extra}}


def create(kubeapi, body):
    api = client.CustomObjectsApi(kubeapi.api_client())
    return api.create_namespaced_custom_object(
        "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", body
    )


def refused(kubeapi, body) -> str:
    with pytest.raises(ApiException) as exc:
        create(kubeapi, body)
    assert exc.value.status == 403
    return json.loads(exc.value.body)["message"]


def test_a_device_class_resource_name_is_accepted():
    validate_resource_name(GPU_DEVICES)
    with pytest.raises(ValidationError):
        validate_resource_name("gpu.nvidia.com.deviceclass.resource.k8s.io/")


def test_the_quota_is_rendered_unprefixed(synced):
    hard = synced.get("ResourceQuota", "fairshare", NAMESPACE)["spec"]["hard"]

    assert hard[GPU_DEVICES] == "2"
    assert hard[MIG_DEVICES] == "1"
    assert f"requests.{GPU_DEVICES}" not in hard
    assert hard["requests.nvidia.com/gpu"] == "40"  # the other resources as before


def test_the_teams_queue_names_no_device_class(synced):
    # The device class is the namespaces' ResourceQuota's to enforce; Volcano's own DRA queue
    # keys are not written yet (issue 34), and the quota name is not one Volcano reads.
    queues = [q for q in synced.objects("Queue") if q["metadata"]["name"].endswith("team-a")]
    assert len(queues) == 1, [q["metadata"]["name"] for q in synced.objects("Queue")]
    spec = queues[0]["spec"]
    for part in (spec.get("capability", {}), spec.get("guarantee", {}).get("resource", {})):
        assert not any(key.endswith(".deviceclass.resource.k8s.io/devices") for key in part)
    assert "nvidia.com/gpu" in spec.get("capability", {})


def test_claims_are_admitted_up_to_the_quota(synced):
    create(synced, claim("two", exactly(count=2)))

    message = refused(synced, claim("third", exactly()))

    assert message == (
        f'resourceclaims.resource.k8s.io "third" is forbidden: exceeded quota: fairshare, '
        f"requested: {GPU_DEVICES}=1, used: {GPU_DEVICES}=2, limited: {GPU_DEVICES}=2"
    )


def test_an_admin_access_claim_is_charged_too(synced):
    create(synced, claim("admin", exactly(count=2, adminAccess=True)))

    assert f"used: {GPU_DEVICES}=2" in refused(synced, claim("one", exactly()))


def test_a_first_available_claim_charges_every_class_it_names(synced):
    either = {
        "name": "r",
        "firstAvailable": [
            {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
            {"name": "slice", "deviceClassName": "mig.nvidia.com"},
        ],
    }
    create(synced, claim("either", either))

    assert f"used: {MIG_DEVICES}=1" in refused(synced, claim("mig", exactly("mig.nvidia.com")))
    create(synced, claim("one-more-gpu", exactly()))  # 1 of 2 gpu devices used so far


@pytest.mark.skipif(not KUBECTL, reason="kubectl not installed")
def test_kubectl_sees_the_refusal(synced, tmp_path):
    create(synced, claim("two", exactly(count=2)))
    manifest = tmp_path / "claim.json"
    manifest.write_text(json.dumps({**claim("third", exactly()), "metadata": {"name": "third"}}))

    result = kubectl(
        synced.kubeconfig_path, "create", "-n", NAMESPACE, "-f", str(manifest), check=False
    )

    assert result.returncode != 0
    assert "exceeded quota: fairshare" in result.stderr


def test_a_device_class_quota_stays_out_of_the_fair_share_problem(cast):
    """It has no capacity (nodes publish no such resource), so shares.py leaves it out."""
    TeamQuota.objects.create(
        team=cast.team_a, resource=GPU_DEVICES, guarantee=Decimal(1), limit=Decimal(2)
    )

    problem = build_problem()

    assert GPU_DEVICES not in problem.capacity
    assert GPU_DEVICES in problem.teams["team-a"].limit  # read, then left out
    for tenant in problem.tenants:
        assert GPU_DEVICES not in tenant.demand
        assert GPU_DEVICES not in tenant.guarantee
        assert GPU_DEVICES not in (tenant.limit or {})


def test_with_kueue_the_quota_is_the_resourcequotas_and_no_clusterqueue_covers_it(
    cast, cluster, settings
):
    # Kueue covers the resources the cluster reports (docs/kueue.md); a device class is enforced
    # by the namespaces' ResourceQuota, as with Volcano (Kueue's deviceClassMappings: issue 34).
    settings.FAIRSHARE_SCHEDULER = "kueue"
    TeamQuota.objects.create(
        team=cast.team_a, resource=GPU_DEVICES, guarantee=Decimal(0), limit=Decimal(2)
    )
    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.error
    hard = cluster.get("ResourceQuota", "fairshare", NAMESPACE)["spec"]["hard"]
    assert hard[GPU_DEVICES] == "2"
    queues = cluster.objects("ClusterQueue")
    assert queues
    for cq in queues:
        names = {
            resource["name"]
            for group in cq["spec"]["resourceGroups"]
            for flavor in group["flavors"]
            for resource in flavor["resources"]
        }
        assert GPU_DEVICES not in names, cq["metadata"]["name"]
