"""Time one usage collection of a large cluster through the fake API server; print a table.

Usage: ``.venv/bin/python bench/collect.py [--nodes 5000] [--pods 150000] [--podgroups 20000]
[--events 2000] [--page-size 500] [--tracemalloc]``

The fake Kubernetes API server (``tests/kubeapi``) runs in this process; ``bench/cluster_gen``
nodes and pods (every third in a Volcano PodGroup, the others owned by ReplicaSets), PodGroups and
Warning events are ``.load()``-ed into it, and ``monitoring.collectors.k8s_usage.collect`` LISTs
them through the real ``kubernetes`` client (paginated, ``resourceVersion=0``, live pods by field
selector), aggregates them and groups the pods into workloads (gang demand, wait signals). No
database is touched.

Printed figures:

* wall time of the collection (the server's JSON encoding shares the process and the GIL, so
  this is pessimistic compared with a real API server), the process's CPU time over the same
  span (server and collector threads together: what the work costs when other processes
  compete for the CPUs) and the load average;
* peak RSS of the process (``getrusage``), which includes the server's own copy of the cluster,
  and the RSS right before the collection, so the difference is what the collection added;
* with ``--tracemalloc``, the peak of Python allocations made during the collection (a second,
  slower run; the server's per-page encoding is included since it runs in-process).

Targets (DESIGN): under 30 s and under 1.5 GB peak.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cluster_gen import (
    generate_nodes,
    generate_podgroups,
    generate_pods,
    generate_quota_events,
    with_owners,
)
from bench.dra import build as dra_cluster
from bench.dra import device_classes
from monitoring.collectors.k8s_usage import collect
from tests.kubeapi.server import FakeKubeApi

NAMESPACE_TEAMS = {
    "research-ml": "research",
    "research-nlp": "research",
    "prod-inference": "production",
    "prod-training": "production",
    "cv-vision": "vision",
    "speech-asr": "speech",
}


def rss_mib() -> float:
    """Peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--podgroups", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=2_000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tracemalloc", action="store_true", help="also measure allocations")
    parser.add_argument(
        "--dra-nodes",
        type=int,
        default=0,
        help="also N H100 nodes under NVIDIA's DRA driver, their slices, DeviceClasses, claims "
        "and pods (bench/dra.py's cluster)",
    )
    args = parser.parse_args()

    server = FakeKubeApi().start()
    server.reset()
    started = time.perf_counter()
    nodes = generate_nodes(args.nodes, seed=args.seed)
    loaded = server.load(nodes)
    podgroups = generate_podgroups(args.podgroups, seed=args.seed)
    loaded += server.load(with_owners(generate_pods(args.pods, nodes, seed=args.seed), podgroups))
    loaded += server.load(podgroups)
    loaded += server.load(generate_quota_events(args.events))
    if args.dra_nodes:
        dra_nodes, slices, claims, dra_pods, *_ = dra_cluster(args.dra_nodes, 0.1, 0.05)
        loaded += server.load([*dra_nodes, *slices, *device_classes(), *claims, *dra_pods])
        del dra_nodes, slices, claims, dra_pods
    del nodes, podgroups
    gc.collect()
    print(f"loaded {loaded:,} objects in {time.perf_counter() - started:.1f} s")

    api_client = server.api_client()
    before = current_rss_mib()
    stats: dict[str, int] = {}
    started = time.perf_counter()
    cpu_started = time.process_time()
    usage = collect(api_client, NAMESPACE_TEAMS, page_size=args.page_size, stats=stats)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    peak = rss_mib()
    lists = dict(server.counts)

    print(f"nodes read            {stats['nodes']:>12,}")
    print(f"live pods read        {stats['pods']:>12,}")
    print(f"PodGroups read        {stats['podgroups']:>12,}")
    print(f"Warning events read   {stats['events']:>12,}")
    if args.dra_nodes:
        claims_read = f"{stats.get('resourceclaims', 0):,} / {stats.get('resourceslices', 0):,}"
        print(f"claims / slices read  {claims_read:>12}")
        print(f"DRA GPU-equivalents   {_dra_allocated(usage):>12,}")
    waiting = sum(1 for w in usage.workloads if w.waiting)
    print(f"workloads             {len(usage.workloads):>12,} ({waiting:,} waiting)")
    print(f"LIST requests         {lists}")
    print(f"schedulable GPUs      {usage.capacity.get('nvidia.com/gpu', 0):>12,}")
    counts = usage.pod_counts
    print(f"pods allocated/pending {counts['allocated']:>11,} / {counts['pending']:,}")
    inventory = f"{len(usage.gpu_nodes):,} nodes / {len(usage.gpu_pods):,} pods"
    print(f"GPU inventory         {inventory:>12}")
    print(f"wall time             {wall:>12.2f} s   (target < 30 s)")
    print(f"CPU time, all threads {cpu:>12.2f} s   (server and collector; less load-sensitive)")
    print(f"load average          {os.getloadavg()[0]:>12.1f}   ({os.cpu_count()} CPUs)")
    print(f"RSS before collection {before:>12.0f} MiB (fake server's copy of the cluster)")
    print(f"peak RSS              {peak:>12.0f} MiB (target < 1536 MiB)")
    print(f"added by collection   {peak - before:>12.0f} MiB")

    if args.tracemalloc:
        tracemalloc.start()
        collect(api_client, NAMESPACE_TEAMS, page_size=args.page_size)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"tracemalloc peak      {traced_peak / 2**20:>12.1f} MiB (second run, traced)")
    api_client.close()
    server.close()
    return 0


def _dra_allocated(usage) -> object:
    """GPU-equivalents allocated in bench/dra.py's namespaces (ns-000 … ns-199)."""
    return sum(
        ns.allocated.get("nvidia.com/gpu", 0)
        for name, ns in usage.namespaces.items()
        if name.startswith("ns-")
    )


if __name__ == "__main__":
    sys.exit(main())
