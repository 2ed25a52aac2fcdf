"""GPU-equivalents configurable per DeviceClass (issue 34: "configurable per device class"):
``FAIRSHARE_DRA_GPU_EQUIVALENTS`` replaces the built-in rule (a whole GPU 1, a MIG device its
memory slices ÷ 8) for the classes it names: a fixed fraction per device (a time-shared GPU, a
device of another driver) or memory slices ÷ N (an A30's 4). Hand-computed figures."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command

from monitoring.domain import dra

GPU = "nvidia.com/gpu"
ROOT = Path(__file__).resolve().parents[2]
SHARED = "shared.example.com"
A30_MIG = "mig-a30.nvidia.com"


def node(name, product="NVIDIA-A30"):
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name, uid, node_name=None, claims=(), phase="Running", namespace="ml"):
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
        },
        "status": {"phase": phase},
    }


def device(name, kind, slices=0, **attributes):
    attrs = {"type": {"string": kind}, **{k: {"string": v} for k, v in attributes.items()}}
    return {
        "name": name,
        "attributes": attrs,
        "capacity": {f"memorySlice{i}": {"value": "1"} for i in range(slices)},
    }


def resource_slice(driver, node_name, *devices):
    return {
        "kind": "ResourceSlice",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def claim(name, requests, results=(), reserved=(), namespace="ml"):
    status = {}
    if results:
        status["allocation"] = {"devices": {"results": list(results)}}
        status["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in reserved]
    return {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
        "status": status,
    }


def exactly(name, device_class, count=1, **extra):
    return {
        "name": name,
        "exactly": {"deviceClassName": device_class, "count": count, **extra},
    }


def result(request, driver, pool, dev, **extra):
    return {"request": request, "driver": driver, "pool": pool, "device": dev, **extra}


CLUSTER = [
    node("a30-1"),
    node("share-1", product="NVIDIA-L40S"),
    # An A30 in MIG mode: 4 memory slices; a 2g.12gb holds 2 of them, a 1g.6gb 1.
    resource_slice(
        "gpu.nvidia.com",
        "a30-1",
        device("gpu-0-mig-2g12gb-14-0", "mig", 2, parentUUID="GPU-a30-0"),
        device("gpu-0-mig-1g6gb-19-2", "mig", 1, parentUUID="GPU-a30-0"),
        device("gpu-0-mig-1g6gb-19-3", "mig", 1, parentUUID="GPU-a30-0"),
    ),
    # Another driver's shared device: four users per GPU.
    resource_slice("share.example.com", "share-1", device("l40s-0-share-0", "shared")),
    # One 2g.12gb (2 of 4 slices: 0.5) and one 1g.6gb (0.25) allocated, a pod each; the second
    # through firstAvailable (its result names request/subrequest).
    claim(
        "big-slice",
        [exactly("r", A30_MIG)],
        [result("r", "gpu.nvidia.com", "a30-1", "gpu-0-mig-2g12gb-14-0")],
        [("p1", "u1")],
    ),
    claim(
        "small-slice",
        [
            {
                "name": "r",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com"},
                    {"name": "small", "deviceClassName": A30_MIG},
                ],
            }
        ],
        [result("r/small", "gpu.nvidia.com", "a30-1", "gpu-0-mig-1g6gb-19-2")],
        [("p2", "u2")],
    ),
    # A shared device held by two pods: counted once, 0.25.
    claim(
        "share",
        [exactly("r", SHARED)],
        [result("r", "share.example.com", "share-1", "l40s-0-share-0")],
        [("p3", "u3"), ("p4", "u4")],
    ),
    # An admin's look at the same device: 0.
    claim(
        "admin-look",
        [exactly("r", SHARED, adminAccess=True)],
        [result("r", "share.example.com", "share-1", "l40s-0-share-0", adminAccess=True)],
        [("p5", "u5")],
    ),
    # Pending: two shared devices (2 × 0.25) and an A30 slice (slices/N: not chosen yet, 0).
    claim("want-share", [exactly("r", SHARED, count=2)]),
    claim("want-slice", [exactly("r", A30_MIG)]),
    pod("p1", "u1", "a30-1", ["big-slice"]),
    pod("p2", "u2", "a30-1", ["small-slice"]),
    pod("p3", "u3", "share-1", ["share"]),
    pod("p4", "u4", "share-1", ["share"]),
    pod("p5", "u5", "share-1", ["admin-look"]),
    pod("p6", "u6", None, ["want-share", "want-slice"], phase="Pending"),
]
RULES = f"{SHARED}=0.25, {A30_MIG}=slices/4"


def usage(rules):
    doc = {"kind": "List", "items": CLUSTER}
    objects = dra.split_dra_items(doc)
    pods = [i for i in CLUSTER if i["kind"] == "Pod"]
    return dra.dra_usage(objects, pods, rules)


def test_configured_classes_count_by_their_rule():
    counted = usage(dra.parse_gpu_equivalents(RULES))
    # 2g.12gb 2/4 + 1g.6gb 1/4 + shared 0.25 (two pods, once; the admin's look 0).
    assert counted.allocated["ml"][GPU] == Decimal("0.5") + Decimal("0.25") + Decimal("0.25")
    assert counted.pending["ml"][GPU] == Decimal("0.5")
    # Per node, for the flavors (Rule 6).
    assert counted.allocated_nodes["ml"] == {"a30-1": Decimal("0.75"), "share-1": Decimal("0.25")}
    # Device counts (Rule 2) are the quota evaluator's, untouched by the rules.
    assert counted.allocated["ml"][dra.class_resource(SHARED)] == 2  # share + admin-look
    assert counted.allocated["ml"][dra.class_resource(A30_MIG)] == 2


def test_without_rules_the_built_in_rule_applies():
    counted = usage({})
    # MIG devices of the A30 ÷ 8 (the built-in assumption, which the rule corrects), the other
    # driver's device 0; nothing pending (neither class is gpu.nvidia.com).
    assert counted.allocated["ml"][GPU] == Decimal(2 + 1) / 8
    assert GPU not in counted.pending.get("ml", {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        (" a.example.com = 0.5 ,", {"a.example.com": dra.GpuEquivalentRule(Decimal("0.5"))}),
        (
            "x=1,y=slices/4",
            {"x": dra.GpuEquivalentRule(Decimal(1)), "y": dra.GpuEquivalentRule(None, 4)},
        ),
    ],
)
def test_the_setting_is_read(text, expected):
    assert dra.parse_gpu_equivalents(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu.nvidia.com", "entry 'gpu.nvidia.com': must be CLASS=FRACTION or CLASS=slices/N"),
        ("Bad_Class=0.5", "'Bad_Class' is not a DeviceClass name"),
        ("a=0", "'0' must be a fraction of a GPU with 0 < FRACTION <= 1"),
        ("a=1.5", "'1.5' must be a fraction of a GPU"),
        ("a=half", "'half' must be a fraction of a GPU"),
        ("a=NaN", "'NaN' must be a fraction of a GPU"),
        ("a=slices/0", "slices/N needs a whole number N >= 1"),
        ("a=0.5,a=0.25", "DeviceClass a is configured twice"),
    ],
)
def test_a_bad_setting_names_the_entry_and_the_rule(text, message):
    with pytest.raises(ValueError) as exc:
        dra.parse_gpu_equivalents(text)
    assert message in str(exc.value)


def test_a_bad_setting_stops_the_start_with_the_settings_name():
    env = {**os.environ, "FAIRSHARE_DEBUG": "true", "FAIRSHARE_DRA_GPU_EQUIVALENTS": "a=2"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "FAIRSHARE_DRA_GPU_EQUIVALENTS: entry 'a=2': '2' must be a fraction" in done.stderr


@pytest.mark.django_db
def test_collect_usage_prints_by_the_configured_rules(settings, tmp_path):
    settings.FAIRSHARE_DRA_GPU_EQUIVALENTS = dra.parse_gpu_equivalents(RULES)
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": CLUSTER}))
    out = io.StringIO()

    call_command("collect_usage", snapshot=str(dump), print_json=True, stdout=out)

    printed = json.loads(out.getvalue())
    assert printed["namespaces"]["ml"]["allocated"][GPU] == 1
    assert printed["namespaces"]["ml"]["pending"][GPU] == 0.5
    # The A30 node's one physical GPU is capacity; the shared device's driver is not NVIDIA's.
    assert printed["flavors"]["NVIDIA-A30"][GPU] == 1
