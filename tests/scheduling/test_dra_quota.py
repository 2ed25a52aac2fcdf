"""Issue 34 (DRA): a team's quota on a device class reaches its namespaces' ResourceQuota, and
the (fake) API server's ResourceQuota admission charges ResourceClaims against it.

The ResourceQuota name of a device class's device count is the resource name itself, with no
``requests.`` prefix (kubernetes pkg/quota/v1/evaluator/core/resource_claims.go
``V1ResourceByDeviceClass``)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ValidationError
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from quotas import decisions, direct, lines
from quotas.exceptions import QuotaExceeded
from quotas.models import TeamQuota
from quotas.quantities import validate_resource_name
from scheduling.choices import SyncStatus
from scheduling.shares import build_problem
from scheduling.sync import create_run, run_sync
from tests.base import GPU
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


def volcano_dra_counts(resources: dict) -> dict[str, int]:
    """A port of Volcano's ``parseDRAResourceList`` (pkg/scheduler/plugins/capacity/capacity.go,
    upstream ed72c7c): ``deviceclass/<class>`` keys are device counts (``quantity.Value()``);
    ``<dim>.deviceclass/<class>`` are capacity dimensions (none here); nothing else is DRA."""
    out = {}
    for name, quantity in resources.items():
        if ".deviceclass/" in name and name.index(".deviceclass/") > 0:
            continue
        if name.startswith("deviceclass/") and name != "deviceclass/":
            out[name.removeprefix("deviceclass/")] = int(parse_quantity(quantity))
    return out


def queue_spec(kubeapi, name):
    return kubeapi.get("Queue", name)["spec"]


def test_the_teams_queue_carries_the_device_counts_volcano_reads(synced):
    spec = queue_spec(synced, "team-a")
    assert volcano_dra_counts(spec["capability"]) == {"gpu.nvidia.com": 2, "mig.nvidia.com": 1}
    # The quota's own name is not one Volcano reads: it is not on the Queue.
    for part in (spec.get("capability", {}), spec.get("deserved", {})):
        assert not any(key.endswith(".deviceclass.resource.k8s.io/devices") for key in part)
    assert spec["capability"]["nvidia.com/gpu"] == "40"  # the other resources as before
    # team-b has no device-class quota: its Queue names none (Volcano: no limit; its namespace's
    # ResourceQuota has no device-class key either).
    assert volcano_dra_counts(queue_spec(synced, "team-b").get("capability", {})) == {}


def test_a_guaranteed_device_count_is_fitted_into_the_department_and_admitted(cast, cluster):
    """Volcano's webhook wants Σ children's guarantee ≤ the parent's for every key, the
    ``deviceclass/`` ones included (validate_queue.go ``validateSiblingsSum`` over
    ``NewResource``, where the key is a scalar): the department's guarantee is derived."""
    TeamQuota.objects.create(
        team=cast.team_a, resource=GPU_DEVICES, guarantee=Decimal(1), limit=Decimal(2)
    )
    TeamQuota.objects.create(
        team=cast.team_b, resource=GPU_DEVICES, guarantee=Decimal(2), limit=Decimal(3)
    )
    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.error

    team_a, team_b = queue_spec(cluster, "team-a"), queue_spec(cluster, "team-b")
    department = queue_spec(cluster, "dept-x")
    assert volcano_dra_counts(team_a["guarantee"]["resource"]) == {"gpu.nvidia.com": 1}
    assert volcano_dra_counts(team_a["deserved"]) == {"gpu.nvidia.com": 1}
    assert volcano_dra_counts(team_b["guarantee"]["resource"]) == {"gpu.nvidia.com": 2}
    assert volcano_dra_counts(department["guarantee"]["resource"]) == {"gpu.nvidia.com": 3}
    assert volcano_dra_counts(department["deserved"]) == {"gpu.nvidia.com": 3}
    assert "deviceclass/gpu.nvidia.com" not in department.get("capability", {})


def test_a_dra_switched_off_volcano_is_named_in_the_sync_notes(synced):
    synced.put_object(
        {
            "kind": "ConfigMap",
            "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
            "data": {
                "volcano-scheduler.conf": (
                    "actions: enqueue, allocate, backfill, reclaim\n"
                    "tiers:\n- plugins:\n  - name: priority\n  - name: gang\n"
                    "- plugins:\n  - name: capacity\n    enableHierarchy: true\n"
                    "    arguments:\n      capacity.DynamicResourceAllocationEnable: false\n"
                )
            },
        }
    )
    run = run_sync(create_run(dry_run=True).pk)
    run.refresh_from_db()
    assert (
        "capacity.DynamicResourceAllocationEnable: false, so the Queues' deviceclass/<class> "
        "device counts (the teams' DRA quota) are not enforced by Volcano"
    ) in run.log


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


def kueue_resources(cq):
    return {
        resource["name"]: resource
        for group in cq["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
    }


KUEUE_BASE = (
    "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
    "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare]\n"
)


def kueue_sync(cast, cluster, settings, config):
    settings.FAIRSHARE_SCHEDULER = "kueue"
    cluster.put_object({"kind": "Namespace", "metadata": {"name": "kueue-system"}})
    cluster.put_object(
        {
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": config},
        }
    )
    TeamQuota.objects.create(
        team=cast.team_a, resource=GPU_DEVICES, guarantee=Decimal(0), limit=Decimal(2)
    )
    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.error
    return run


def test_with_kueue_every_clusterqueue_covers_the_device_count_by_its_quota_name(
    cast, cluster, settings
):
    """The ResourceClaimTemplate path: Kueue charges ``count`` devices of a mapped class under
    the mapping's name (kueue pkg/dra/claims.go ``countDevicesPerClass``), which is the quota's
    name; team-b has none of it (0), as for every resource a ClusterQueue covers."""
    mapped = (
        KUEUE_BASE + "resources:\n  deviceClassMappings:\n"
        f"  - name: {GPU_DEVICES}\n    deviceClassNames: [gpu.nvidia.com]\n"
    )
    run = kueue_sync(cast, cluster, settings, mapped)

    hard = cluster.get("ResourceQuota", "fairshare", NAMESPACE)["spec"]["hard"]
    assert hard[GPU_DEVICES] == "2"
    team_a = kueue_resources(cluster.get("ClusterQueue", "team-a"))[GPU_DEVICES]
    assert team_a == {"name": GPU_DEVICES, "nominalQuota": "0", "borrowingLimit": "2"}
    team_b = kueue_resources(cluster.get("ClusterQueue", "team-b"))[GPU_DEVICES]
    assert team_b["nominalQuota"] == "0"
    assert "deviceClassMappings" not in run.log


def test_with_kueue_an_unmapped_device_class_is_named_in_the_sync_notes(cast, cluster, settings):
    run = kueue_sync(cast, cluster, settings, KUEUE_BASE)
    assert (
        "DeviceClass gpu.nvidia.com has no resources.deviceClassMappings entry, so Kueue does "
        "not admit workloads whose ResourceClaimTemplates name it; map it to "
        f"{GPU_DEVICES}"
    ) in run.log


def test_with_kueue_a_class_mapped_to_another_name_is_named_too(cast, cluster, settings):
    other = (
        KUEUE_BASE + "resources:\n  deviceClassMappings:\n"
        "  - name: example.com/gpu\n    deviceClassNames: [gpu.nvidia.com]\n"
    )
    run = kueue_sync(cast, cluster, settings, other)
    assert "DeviceClass gpu.nvidia.com is mapped to example.com/gpu, which no ClusterQueue" in (
        run.log
    )


def test_the_shipped_kueue_configuration_passes_kueues_mapping_rules():
    """deploy/kueue/helm-values.yaml's mappings against kueue pkg/config/validation.go
    ``validateDeviceClassMappings``: names and classes are label keys (≤ 253), no duplicate
    name, at most 16 mappings and 8 classes each, a class in one mapping only."""
    values = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy/kueue/helm-values.yaml").read_text()
    )
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    mappings = config["resources"]["deviceClassMappings"]
    assert 0 < len(mappings) <= 16
    label_key = re.compile(
        r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
    )
    names, classes = set(), set()
    for mapping in mappings:
        assert label_key.match(mapping["name"]) and len(mapping["name"]) <= 253
        assert mapping["name"] not in names
        names.add(mapping["name"])
        assert 0 < len(mapping["deviceClassNames"]) <= 8
        for device_class in mapping["deviceClassNames"]:
            assert label_key.match(device_class) and device_class not in classes
            classes.add(device_class)
            assert mapping["name"] == device_class + ".deviceclass.resource.k8s.io/devices"
    # gpu.nvidia.com carries extendedResourceName: nvidia.com/gpu under DRAExtendedResource;
    # mapped, Kueue would charge plain nvidia.com/gpu requests under the mapping's name.
    assert "gpu.nvidia.com" not in classes


def test_lowering_a_device_class_limit_while_claims_hold_devices_converges(synced, cast):
    """A transition with workloads running: two claims hold the team's two devices; an admin
    lowers the limit to 1. The sync writes hard: 1 to the ResourceQuota and deviceclass/… 1 to
    the Queue; the two claims stay (ResourceQuota admission never deletes, it only refuses new
    charges: staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go —
    ``checkRequest``); a third is refused naming used 2 over limited 1; raising the limit back
    admits it."""
    for name in ("one", "two"):
        create(synced, claim(name, exactly()))

    direct.set_team_quota(
        cast.team_a, GPU_DEVICES, guarantee="0", limit="1", actor=cast.root, announce=False
    )
    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert synced.get("ResourceQuota", "fairshare", NAMESPACE)["spec"]["hard"][GPU_DEVICES] == "1"
    assert volcano_dra_counts(queue_spec(synced, "team-a")["capability"])["gpu.nvidia.com"] == 1
    names = {c["metadata"]["name"] for c in synced.objects("ResourceClaim")}
    assert {"one", "two"} <= names
    assert (
        f"requested: {GPU_DEVICES}=1, used: {GPU_DEVICES}=2, limited: {GPU_DEVICES}=1"
        in refused(synced, claim("three", exactly()))
    )

    direct.set_team_quota(
        cast.team_a, GPU_DEVICES, guarantee="0", limit="3", actor=cast.root, announce=False
    )
    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.error
    create(synced, claim("three", exactly()))
    assert volcano_dra_counts(queue_spec(synced, "team-a")["capability"])["gpu.nvidia.com"] == 3


def collected_capacity(**device_classes):
    """A newer capacity record with device-class capacity, as the collector writes it (Rule 7 of
    monitoring.domain.dra: the devices each DeviceClass's selectors pick)."""
    from django.utils import timezone

    from monitoring.models import CapacitySnapshot

    return CapacitySnapshot.objects.create(
        taken_at=timezone.now() + timedelta(seconds=1),
        source="test",
        resources={
            GPU: "100",
            "cpu": "1000",
            "memory": str(4 * 2**40),
            **{
                f"{c}.deviceclass.resource.k8s.io/devices": str(n)
                for c, n in device_classes.items()
            },
        },
        nodes=13,
    )


def test_a_device_class_guarantee_is_approved_within_its_capacity_and_reaches_the_queues(
    cast, cluster
):
    """With capacity for the class collected, a guarantee is approved as any other (Σ ≤
    capacity × (1 − reserve): 8 × 0.9, 7 whole devices), refused beyond, and reaches Volcano as
    ``deviceclass/<class>`` guarantee and deserved (the department's derived), while the fair
    shares leave the count out (its GPUs are nvidia.com/gpu GPU-equivalents already)."""
    collected_capacity(**{"gpu.nvidia.com": 8})
    first = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU_DEVICES, "4", "6")],
        justification="Reserved whole GPUs for the nightly run.",
    )
    decisions.approve_request(first.pk, approver=cast.root)
    second = decisions.submit_request(
        team=cast.team_b,
        requester=cast.charlie,
        lines=[lines.LineInput(GPU_DEVICES, "4", "6")],
        justification="Ours too.",
    )
    with pytest.raises(QuotaExceeded) as exc:
        decisions.approve_request(second.pk, approver=cast.root)
    assert exc.value.resource == GPU_DEVICES
    assert "would total 8, over the 7 schedulable" in str(exc.value)  # whole devices

    problem = build_problem()
    assert GPU_DEVICES not in problem.capacity
    assert GPU in problem.capacity

    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.error
    team_a, department = queue_spec(cluster, "team-a"), queue_spec(cluster, "dept-x")
    assert volcano_dra_counts(team_a["guarantee"]["resource"]) == {"gpu.nvidia.com": 4}
    assert volcano_dra_counts(team_a["deserved"]) == {"gpu.nvidia.com": 4}
    assert volcano_dra_counts(team_a["capability"]) == {"gpu.nvidia.com": 6}
    assert volcano_dra_counts(department["guarantee"]["resource"]) == {"gpu.nvidia.com": 4}
    hard = cluster.get("ResourceQuota", "fairshare", NAMESPACE)["spec"]["hard"]
    assert hard[GPU_DEVICES] == "6"


def test_with_kueue_a_device_class_guarantee_is_nominal_quota_never_lent(cast, cluster, settings):
    """The same guarantee on the Kueue backend (scheduling/domain/kueue/quotas.py): nominalQuota
    = deserved = 4, lendingLimit = deserved − guarantee = 0 (never lent), borrowingLimit =
    limit − deserved = 2; the department's Cohort holds nothing beyond its team's."""
    settings.FAIRSHARE_SCHEDULER = "kueue"
    collected_capacity(**{"gpu.nvidia.com": 8})
    request = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU_DEVICES, "4", "6")],
        justification="Reserved whole GPUs for the nightly run.",
    )
    decisions.approve_request(request.pk, approver=cast.root)

    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()

    assert run.status == SyncStatus.SUCCEEDED, run.error
    team_a = kueue_resources(cluster.get("ClusterQueue", "team-a"))[GPU_DEVICES]
    assert team_a == {
        "name": GPU_DEVICES,
        "nominalQuota": "4",
        "borrowingLimit": "2",
        "lendingLimit": "0",
    }
    department = kueue_resources(cluster.get("Cohort", "dept-x"))[GPU_DEVICES]
    assert department["nominalQuota"] == "0"
