"""GPUs requested through Dynamic Resource Allocation count (issue 34, dra-rules.md).

The fixture tests/monitoring/fixtures/dra_cluster.json is a hand-made
``kubectl get nodes,pods,resourceclaims,resourceslices,deviceclasses -A -o json`` dump:

* nodes ``gpu-1`` (device plugin, 8 GPUs), ``dra-1`` (DRA, whole GPUs ``gpu-0``..``gpu-7``) and
  ``dra-2`` (DRA, static MIG: ``gpu-0-mig-1g10gb-19-0`` with 1 memory slice,
  ``gpu-0-mig-3g40gb-9-4`` with 4, ``gpu-1-mig-1g10gb-19-0`` with 1; plus a stale generation 1
  of the same pool, listed after it, that says 8 slices / ``type: gpu``);
* ``ml-a``: device-plugin pods (2 GPUs bound, 1 pending), an exclusive 1-GPU claim, a 2-GPU
  claim shared by a Running and a bound Pending pod;
* ``ml-b``: a 2-GPU claim wanted by two Pending pods, a template-generated 1-GPU claim known
  only through ``status.resourceClaimStatuses``, a pending 1-MIG claim, an unreferenced claim;
* ``ml-c``: a 1g.10gb and a 3g.40gb MIG claim, a ``firstAvailable`` [whole GPU, else MIG] claim
  that got a 1g.10gb;
* ``ops``: an admin-access ``All`` claim over dra-1's 8 GPUs;
* ``ml-d``: a claim reserved only by a Succeeded pod and a vanished one, and the scheduler's
  extended-resource claim of a pod that asks for ``nvidia.com/gpu: 1``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from kubernetes.utils import parse_quantity

from monitoring.collectors import k8s_usage
from monitoring.domain import dra
from monitoring.domain.aggregate import aggregate, parse_list_dump
from monitoring.models import UsageSample

FIXTURE = Path(__file__).parent / "fixtures" / "dra_cluster.json"
GPU = "nvidia.com/gpu"
GPU_CLASS = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
MIG_CLASS = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"
H100 = "NVIDIA-H100-80GB-HBM3"
GI = 2**30


def load():
    return json.loads(FIXTURE.read_text())


def without_dra(doc):
    items = [i for i in doc["items"] if not i["apiVersion"].startswith("resource.k8s.io/")]
    return {**doc, "items": items}


def print_usage(path):
    out = StringIO()
    call_command("collect_usage", "--snapshot", str(path), "--print", stdout=out)
    return json.loads(out.getvalue())


# Three nodes of 64 cores, 256Gi and 110 pods each; gpu-1 has 8 device-plugin GPUs, dra-1
# publishes 8 whole GPUs, dra-2 MIG devices of 2 physical GPUs (GPU-dra2-0, GPU-dra2-1): 18.
# The DeviceClasses' selectors pick dra-1's 8 whole GPUs (gpu.nvidia.com: type gpu) and dra-2's
# 3 MIG devices (mig.nvidia.com: type mig): the device-class quotas' capacity (Rule 7).
CAPACITY = {
    "cpu": 3 * 64,
    "memory": 3 * 256 * GI,
    GPU: 8 + 8 + 2,
    "pods": 3 * 110,
    GPU_CLASS: 8,
    MIG_CLASS: 3,
}


@pytest.mark.django_db
def test_print_counts_device_plugin_and_dra_gpus_per_namespace():
    doc = print_usage(FIXTURE)

    assert doc == {
        # DRA GPUs are capacity as device-plugin GPUs are (Rule 5 of monitoring.domain.dra).
        "capacity": CAPACITY,
        "flavors": {H100: CAPACITY},
        "namespaces": {
            "ml-a": {
                "team": "unassigned",
                "allocated": {
                    # plugin-train 4 + dra-train 2 + shared-0 1 + shared-1 1
                    "cpu": 8,
                    # plugin-train 2 (device plugin) + whole-gpu 1 + shared-gpus 2 (once,
                    # though two pods reserve it) = 5
                    GPU: 5,
                    # whole-gpu count 1 + shared-gpus count 2 = 3
                    GPU_CLASS: 3,
                },
                # plugin-wait, unbound: cpu 4, nvidia.com/gpu 1
                "pending": {"cpu": 4, GPU: 1},
            },
            "ml-b": {
                "team": "unassigned",
                "allocated": {},
                "pending": {
                    # four unbound pods of 1 core
                    "cpu": 4,
                    # pending-pair 2 (once, for two pods) + wait-tmpl-gpu-x7k2p 1 (found
                    # through the pod's status) = 3; pending-mig adds no GPU-equivalent (not
                    # chosen yet); nobody-uses-me (4) is referenced by no pod
                    GPU: 3,
                    GPU_CLASS: 3,
                    # pending-mig count 1
                    MIG_CLASS: 1,
                },
            },
            "ml-c": {
                "team": "unassigned",
                "allocated": {
                    # three bound pods of 1 core
                    "cpu": 3,
                    # mig-1g: 1 slice / 8 = 0.125; mig-3g: 4 slices / 8 = 0.5;
                    # flexible got a 1g.10gb: 1 / 8 = 0.125 → 0.125 + 0.5 + 0.125 = 0.75
                    GPU: 0.75,
                    # flexible names gpu.nvidia.com (count 1) and mig.nvidia.com (count 1):
                    # both are charged
                    GPU_CLASS: 1,
                    # mig-1g 1 + mig-3g 1 + flexible 1 = 3
                    MIG_CLASS: 3,
                },
                "pending": {},
            },
            "ml-d": {
                "team": "unassigned",
                "allocated": {
                    # ext-pod 1 core (finished-job counts nothing)
                    "cpu": 1,
                    # ext-pod's own request 1; its extended-resource claim adds 0;
                    # done-claim is reserved only by a Succeeded and a vanished pod: 0
                    GPU: 1,
                    # the extended-resource claim still counts for its class: 1
                    GPU_CLASS: 1,
                },
                "pending": {},
            },
            "ops": {
                "team": "unassigned",
                # monitor 1 core; admin access holds no GPU (no nvidia.com/gpu key) but its
                # All request is charged AllocationResultsMaxSize = 32 devices
                "allocated": {"cpu": 1, GPU_CLASS: 32},
                "pending": {},
            },
        },
    }


@pytest.mark.django_db
def test_the_same_dump_without_dra_objects_prints_what_the_pods_alone_say(tmp_path):
    path = tmp_path / "no-dra.json"
    stripped = without_dra(load())
    path.write_text(json.dumps(stripped))

    doc = print_usage(path)

    # Only the pods' own requests: plugin-train's 2 GPUs and ext-pod's 1 GPU bound,
    # plugin-wait's 1 pending; no device-class keys; ops appears (its pod is live).
    assert doc["namespaces"] == {
        "ml-a": {
            "team": "unassigned",
            "allocated": {"cpu": 8, GPU: 2},
            "pending": {"cpu": 4, GPU: 1},
        },
        "ml-b": {"team": "unassigned", "allocated": {}, "pending": {"cpu": 4}},
        "ml-c": {"team": "unassigned", "allocated": {"cpu": 3}, "pending": {}},
        "ml-d": {"team": "unassigned", "allocated": {"cpu": 1, GPU: 1}, "pending": {}},
        "ops": {"team": "unassigned", "allocated": {"cpu": 1}, "pending": {}},
    }
    nodes, pods = parse_list_dump(stripped)
    assert doc == aggregate(nodes, pods, {}, parse_quantity=parse_quantity).to_json_dict()


@pytest.mark.django_db
def test_storing_the_dump_keeps_fractions_and_device_class_rows():
    call_command("collect_usage", "--snapshot", str(FIXTURE), stdout=StringIO())

    rows = {
        (r.namespace, r.resource, r.flavor): (r.allocated, r.pending)
        for r in UsageSample.objects.all()
    }
    # DRA GPUs carry their node's flavor (Rule 6): ml-c's 0.75 on dra-2 is H100
    assert rows[("ml-c", GPU, H100)] == (Decimal("0.75"), Decimal(0))
    # ml-a: plugin-train's 2 GPUs on gpu-1 and the 3 DRA GPUs on dra-1, all H100; 1 pending on ""
    assert rows[("ml-a", GPU, H100)] == (Decimal(5), Decimal(0))
    assert rows[("ml-a", GPU, "")] == (Decimal(0), Decimal(1))
    assert rows[("ops", GPU_CLASS, "")] == (Decimal(32), Decimal(0))


def test_from_snapshot_adds_exact_fractions_and_sums_teams():
    teams = {"ml-a": "vision", "ml-c": "vision", "ml-b": "nlp"}
    stats = {}

    usage = k8s_usage.from_snapshot(FIXTURE, teams, stats=stats)

    assert usage.namespaces["ml-c"].allocated[GPU] == Decimal("0.75")
    assert usage.notes == ()
    # vision = ml-a + ml-c: GPUs 5 + 0.75 = 5.75; gpu class 3 + 1 = 4; mig class 0 + 3 = 3;
    # cpu 8 + 3 = 11. Pending: ml-a's plugin-wait only.
    assert usage.teams["vision"].allocated == {
        "cpu": Decimal(11),
        GPU: Decimal("5.75"),
        GPU_CLASS: Decimal(4),
        MIG_CLASS: Decimal(3),
    }
    assert usage.teams["vision"].pending == {"cpu": Decimal(4), GPU: Decimal(1)}
    assert usage.teams["nlp"].pending[GPU] == Decimal(3)
    # unassigned = ml-d + ops: GPUs 1 + 0; gpu class 1 + 32 = 33
    assert usage.teams["unassigned"].allocated[GPU_CLASS] == Decimal(33)
    # 12 claims, 3 slices in the dump; 15 pods (finished-job included)
    assert (stats["resourceclaims"], stats["resourceslices"], stats["pods"]) == (12, 3, 15)


# ---------------------------------------------------------------- pure rules


def test_only_the_highest_generation_of_a_pool_is_read():
    devices = dra.slice_devices(dra.split_dra_items(load()).slices)

    # generation 2 of dra-2 says 1, 4 and 1 memory slices; the stale generation 1 said 8 and
    # "type: gpu" for the 3g.40gb
    small = devices[("gpu.nvidia.com", "dra-2", "gpu-0-mig-1g10gb-19-0")]
    half = devices[("gpu.nvidia.com", "dra-2", "gpu-0-mig-3g40gb-9-4")]
    assert (small.type, small.memory_slices) == ("mig", 1)
    assert (half.type, half.memory_slices) == ("mig", 4)
    # 8 whole GPUs on dra-1 + 3 MIG devices on dra-2
    assert len(devices) == 11


@pytest.mark.parametrize(
    ("slices", "kind", "expected"),
    [
        (0, "gpu", Decimal(1)),  # a whole GPU
        (1, "mig", Decimal("0.125")),  # 1g.10gb: 1/8
        (2, "mig", Decimal("0.25")),  # 2g.20gb: 2/8
        (4, "mig", Decimal("0.5")),  # 3g.40gb: 4/8
        (8, "mig", Decimal(1)),  # 7g.80gb: 8/8
        (0, "vfio", Decimal(0)),  # not a GPU type these rules know
    ],
)
def test_gpu_equivalent_of_a_device(slices, kind, expected):
    device = dra.SliceDevice("gpu.nvidia.com", "n", "d", kind, slices)
    assert dra.gpu_equivalent(device) == expected


def _claim(*requests):
    return {"spec": {"devices": {"requests": list(requests)}}}


def _sub(name, device_class, count=None, mode="ExactCount"):
    sub = {"name": name, "deviceClassName": device_class, "allocationMode": mode}
    if count is not None:
        sub["count"] = count
    return sub


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        # exactly, count defaults to 1
        (_claim({"name": "r", "exactly": _sub("r", "gpu")}), {"gpu": 1}),
        # two requests of one class add up: 2 + 3
        (
            _claim(
                {"name": "a", "exactly": _sub("a", "gpu", 2)},
                {"name": "b", "exactly": _sub("b", "gpu", 3)},
            ),
            {"gpu": 5},
        ),
        # All: AllocationResultsMaxSize, whatever was allocated
        (_claim({"name": "r", "exactly": _sub("r", "gpu", mode="All")}), {"gpu": 32}),
        # an unknown mode is charged 0 (the class is still named)
        (_claim({"name": "r", "exactly": _sub("r", "gpu", 4, mode="Some")}), {"gpu": 0}),
        # prioritized-list-multiple-subrequests: 2 and 1 of one class → the larger, 2
        (
            _claim({"name": "r", "firstAvailable": [_sub("a", "gpu", 2), _sub("b", "gpu", 1)]}),
            {"gpu": 2},
        ),
        # ...-allocation-mode-all: 1 and All of one class → 32
        (
            _claim(
                {"name": "r", "firstAvailable": [_sub("a", "gpu", 1), _sub("b", "gpu", mode="All")]}
            ),
            {"gpu": 32},
        ),
        # ...-different-device-classes: gpu 1, tpu All → gpu 1 and tpu 32
        (
            _claim(
                {"name": "r", "firstAvailable": [_sub("a", "gpu", 1), _sub("b", "tpu", mode="All")]}
            ),
            {"gpu": 1, "tpu": 32},
        ),
        # admin: not exempt
        (
            _claim({"name": "r", "exactly": {**_sub("r", "gpu", 2), "adminAccess": True}}),
            {"gpu": 2},
        ),
        # a request of an unknown kind: nothing
        (_claim({"name": "r"}), {}),
    ],
)
def test_device_counts_per_class_follow_the_quota_evaluator(claim, expected):
    assert dra.class_devices(claim) == expected


def test_a_claim_reserved_only_by_finished_or_vanished_pods_counts_nothing():
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {
            "allocation": {"devices": {"results": []}},
            "reservedFor": [
                {"resource": "pods", "name": "done", "uid": "u-done"},
                {"resource": "pods", "name": "gone", "uid": "u-gone"},
            ],
        },
    }
    # u-done is Succeeded (so not live), u-gone is not in the input
    assert dra.claim_state(claim, {"u-live"}, set()) is None
    assert dra.claim_state(claim, {"u-done"}, set()) == "allocated"
    # a reservation by something other than a pod does not count
    claim["status"]["reservedFor"] = [
        {"apiGroup": "example.com", "resource": "pods", "name": "x", "uid": "u-live"}
    ]
    assert dra.claim_state(claim, {"u-live"}, set()) is None


def test_a_generated_claim_is_found_through_the_pod_status_never_by_its_name():
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train-gpu", "namespace": "ns"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": _sub("gpu", "gpu.nvidia.com")}]}
        },
        "status": {},
    }
    pod = {
        "metadata": {"name": "train", "namespace": "ns", "uid": "u"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
        "status": {"phase": "Pending"},
    }
    objects = dra.DraObjects(claims=(claim,))

    # "<pod>-<claim>" looks like the generated name, but the pod's status does not say so
    assert dra.dra_usage(objects, [pod]).pending == {}

    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "train-gpu"}]
    assert dra.dra_usage(objects, [pod]).pending == {
        "ns": {GPU: Decimal(1), "gpu.nvidia.com" + dra.DEVICE_CLASS_SUFFIX: Decimal(1)}
    }


def test_a_device_missing_from_the_slices_counts_zero_and_says_so():
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": _sub("g", "gpu.nvidia.com")}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "g", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-9"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
    }
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "status": {"phase": "Running"}}

    usage = dra.dra_usage(dra.DraObjects(claims=(claim,)), [pod])

    # the class is charged from the spec (1), the unknown device adds no GPU-equivalent
    assert usage.allocated == {"ns": {"gpu.nvidia.com" + dra.DEVICE_CLASS_SUFFIX: Decimal(1)}}
    assert usage.notes == (
        "DRA: claim ns/c holds device n/gpu-9, not in any ResourceSlice: counted as 0 GPUs",
    )


def test_a_dump_without_dra_objects_has_none():
    doc = without_dra(load())
    assert dra.split_dra_items(doc) is None
    # a bare ResourceClaimList (what the API returns) is recognised
    bare = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimList", "items": [{}]}
    assert dra.split_dra_items(bare) == dra.DraObjects(claims=({},))


def test_a_pending_admin_access_claim_is_no_gpu_demand_but_is_charged_by_class():
    # Admin access never holds a device (allocated results count 0, Rule 3b), so a pending
    # admin request is no demand for one either; the quota evaluator still charges it (Rule 2).
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "all",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 2,
                            "adminAccess": True,
                        },
                    },
                    {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                ]
            }
        }
    }
    assert dra._pending_gpus(claim) == Decimal(1)  # only the ordinary request's 1 GPU
    assert dra.class_devices(claim) == {"gpu.nvidia.com": 3}  # 2 + 1: admins are not exempt
