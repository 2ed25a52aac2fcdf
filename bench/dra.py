"""Time counting a large DRA cluster (issue 34); print a table.

Usage: ``.venv/bin/python bench/dra.py [--nodes 1000] [--shared 0.1] [--pending 0.05]``

A cluster of ``--nodes`` H100 nodes run by NVIDIA's DRA driver (no device-plugin GPUs): half
publish 8 whole GPUs, half are in static MIG mode with seven 1g.10gb devices per GPU (56 devices
per node), one ResourceSlice per node. Every device is held by one allocated ResourceClaim,
reserved by one Running pod, or by two for a ``--shared`` fraction of the claims; a ``--pending``
fraction of as many claims again waits, each referenced by an unbound Pending pod. Claims are
spread over 200 namespaces. Pure Python, no server, no database: what is measured is
``monitoring.domain.aggregate.aggregate`` of the nodes and pods, then
``monitoring.domain.dra.dra_usage`` and ``add_dra_usage`` (capacity, flavors, GPU inventory),
the work a collection adds for DRA.

Printed figures: objects, the time of each step (best of ``--repeat``), the tracemalloc peak of
one DRA count, and a check of the totals against what the generator put in (GPU-equivalents
allocated = whole GPUs + MIG devices / 8; capacity = 8 GPUs per node; the DeviceClasses
``gpu.nvidia.com`` and ``mig.nvidia.com``, NVIDIA's CEL selectors, select every whole GPU and
every MIG device).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes.utils import parse_quantity

from monitoring.domain import dra
from monitoring.domain.aggregate import aggregate

H100 = "NVIDIA-H100-80GB-HBM3"
DRIVER = "gpu.nvidia.com"
NAMESPACES = 200


def _attr(value: str) -> dict:
    return {"string": value}


def build(nodes: int, shared: float, pending: float):
    items_nodes, slices, claims, pods = [], [], [], []
    whole_gpus = mig_devices = 0
    n_claim = 0
    for i in range(nodes):
        name = f"dra-{i:05}"
        items_nodes.append(
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": H100}},
                "status": {
                    "allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        devices = []
        for g in range(8):
            uuid = f"GPU-{i:05}-{g}"
            if i % 2 == 0:
                devices.append(
                    {
                        "name": f"gpu-{g}",
                        "attributes": {"type": _attr("gpu"), "uuid": _attr(uuid)},
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                )
                whole_gpus += 1
            else:
                for start in range(7):
                    devices.append(
                        {
                            "name": f"gpu-{g}-mig-1g10gb-19-{start}",
                            "attributes": {"type": _attr("mig"), "parentUUID": _attr(uuid)},
                            "capacity": {f"memorySlice{start}": {"value": "1"}},
                        }
                    )
                    mig_devices += 1
        slices.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpu"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
        for device in devices:
            n_claim += 1
            namespace = f"ns-{n_claim % NAMESPACES:03}"
            claim_name = f"c-{n_claim}"
            holders = 2 if (n_claim % max(1, round(1 / shared)) == 0 if shared else False) else 1
            reserved = []
            for h in range(holders):
                uid = f"uid-{n_claim}-{h}"
                reserved.append({"resource": "pods", "name": f"p-{n_claim}-{h}", "uid": uid})
                pods.append(_pod(namespace, f"p-{n_claim}-{h}", uid, name, claim_name))
            mig = device["attributes"]["type"]["string"] == "mig"
            claims.append(
                {
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim_name, "namespace": namespace},
                    "spec": _spec("mig.nvidia.com" if mig else "gpu.nvidia.com"),
                    "status": {
                        "allocation": {
                            "devices": {
                                "results": [
                                    {
                                        "request": "gpu",
                                        "driver": DRIVER,
                                        "pool": name,
                                        "device": device["name"],
                                    }
                                ]
                            }
                        },
                        "reservedFor": reserved,
                    },
                }
            )
    waiting = int(len(claims) * pending)
    for w in range(waiting):
        namespace = f"ns-{w % NAMESPACES:03}"
        claim_name = f"w-{w}"
        claims.append(
            {
                "kind": "ResourceClaim",
                "metadata": {"name": claim_name, "namespace": namespace},
                "spec": _spec("gpu.nvidia.com"),
                "status": {},
            }
        )
        pods.append(_pod(namespace, f"wait-{w}", f"uid-w-{w}", None, claim_name))
    return items_nodes, slices, claims, pods, whole_gpus, mig_devices, waiting


def device_classes() -> tuple[dict, ...]:
    """NVIDIA's two DeviceClasses (its Helm chart's CEL selectors): whole GPUs and MIG devices."""
    return tuple(
        {
            "kind": "DeviceClass",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": f"{kind_}.nvidia.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && "
                            f"device.attributes['{DRIVER}'].type == '{kind_}'"
                        }
                    }
                ]
            },
        }
        for kind_ in ("gpu", "mig")
    )


def _spec(device_class: str) -> dict:
    return {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
    }


def _pod(namespace, name, uid, node, claim_name) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "4", "memory": "32Gi"}}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def best(repeat: int, fn):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--shared", type=float, default=0.1)
    parser.add_argument("--pending", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    nodes, slices, claims, pods, whole, migs, waiting = build(args.nodes, args.shared, args.pending)
    teams = {f"ns-{i:03}": f"team-{i % 40:02}" for i in range(NAMESPACES)}
    classes = device_classes()
    objects = dra.DraObjects(claims=tuple(claims), slices=tuple(slices), classes=classes)

    t_agg, usage = best(
        args.repeat, lambda: aggregate(nodes, pods, teams, parse_quantity=parse_quantity)
    )
    t_count, counted = best(args.repeat, lambda: dra.dra_usage(objects, pods))
    t_add, merged = best(
        args.repeat,
        lambda: dra.add_dra_usage(
            usage, counted, teams, nodes=nodes, parse_quantity=parse_quantity
        ),
    )
    tracemalloc.start()
    dra.add_dra_usage(
        usage, dra.dra_usage(objects, pods), teams, nodes=nodes, parse_quantity=parse_quantity
    )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    allocated = sum(
        (ns.allocated.get(dra.GPU, Decimal(0)) for ns in merged.namespaces.values()), Decimal(0)
    )
    expected = Decimal(whole) + Decimal(migs) / 8
    rows = [
        ("nodes / slices", f"{len(nodes):,} / {len(slices):,}"),
        ("devices (whole GPUs + 1g.10gb MIG)", f"{whole:,} + {migs:,}"),
        ("claims (allocated + pending)", f"{len(claims) - waiting:,} + {waiting:,}"),
        ("pods", f"{len(pods):,}"),
        ("aggregate (pods, no DRA), best of runs", f"{t_agg:.2f} s"),
        ("dra_usage, best of runs", f"{t_count:.2f} s"),
        ("add_dra_usage (capacity, flavors, inventory)", f"{t_add:.2f} s"),
        ("tracemalloc peak of one DRA count", f"{peak / 2**20:.1f} MiB"),
        ("GPU-equivalents allocated (expected)", f"{allocated} ({expected})"),
        ("GPU capacity (expected)", f"{merged.capacity.get(dra.GPU)} ({8 * len(nodes)})"),
        ("GPU inventory pods", f"{len(merged.gpu_pods):,}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    whole_class = merged.capacity.get(dra.class_resource("gpu.nvidia.com"))
    mig_class = merged.capacity.get(dra.class_resource("mig.nvidia.com"))
    print(
        f"{'device-class capacity gpu / mig (expected)':<{width}}  {whole_class} / {mig_class} "
        f"({whole} / {migs})"
    )
    ok = (
        allocated == expected
        and merged.capacity.get(dra.GPU) == 8 * len(nodes)
        and (whole_class, mig_class) == (whole, migs)
    )
    print("totals match" if ok else "TOTALS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
