"""Benchmark the GPU inventory a collection stores and the ingest that checks samples with it.

Usage (a scratch PostgreSQL database whose name contains "bench"; the script migrates and
*flushes* it, and refuses any other database):

    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE fairshare_bench_ingest'
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairshare_bench_ingest \\
        .venv/bin/python bench/ingest.py

Options: ``--nodes 5000 --pods 150000 --batches 200``.

It generates the cluster of bench/collect.py (``bench/cluster_gen``: 80 % GPU nodes), aggregates
it (``monitoring.domain.aggregate``) and times ``store_gpu_inventory`` (what every collection
now adds: replace the nodes with GPUs and their GPU pods) three times; then posts
``--batches`` batches of one node's 8 GPUs, each sample attributed to a pod on that node, through
``ingest_gpu_batch`` (every check: window, inventory, pods by UID, UUIDs of other nodes, the
node's GPU count) and prints the median and p95 per batch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
os.environ.setdefault("FAIRSHARE_LOG_LEVEL", "WARNING")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402
from kubernetes.utils import parse_quantity  # noqa: E402

from bench.cluster_gen import generate_nodes, generate_pods  # noqa: E402
from bench.common import pct  # noqa: E402
from monitoring.collection import store_gpu_inventory  # noqa: E402
from monitoring.domain.aggregate import aggregate  # noqa: E402
from monitoring.ingest import ingest_gpu_batch  # noqa: E402
from monitoring.models import GpuSample  # noqa: E402


def fresh_database() -> None:
    name = str(settings.DATABASES["default"]["NAME"])
    if "bench" not in name:
        sys.exit(f"refusing to flush database {name!r}: its name must contain 'bench'")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    fresh_database()

    nodes = list(generate_nodes(args.nodes))
    usage = aggregate(nodes, generate_pods(args.pods, nodes), {}, parse_quantity=parse_quantity)
    print(f"GPU inventory         {len(usage.gpu_nodes):,} nodes / {len(usage.gpu_pods):,} pods")
    times = []
    for _ in range(3):
        started = time.perf_counter()
        store_gpu_inventory(usage, now=timezone.now())
        times.append(time.perf_counter() - started)
    print(f"store_gpu_inventory   {', '.join(f'{t:.2f} s' for t in times)}")

    # The node with the most GPU pods, and samples of its GPUs attributed to them.
    by_node: dict[str, list] = {}
    for pod in usage.gpu_pods:
        by_node.setdefault(pod.node, []).append(pod)
    node = max(by_node, key=lambda name: len(by_node[name]))
    gpu = usage.gpu_nodes[node]
    product = (gpu.product or "").replace("-", " ")
    pods = by_node[node]
    now = timezone.now()
    per_batch, stored = [], 0
    for i in range(args.batches):
        at = now - timedelta(seconds=15 * (args.batches - i))
        samples = [
            {
                "ts": at.isoformat(),
                "uuid": f"GPU-{node}-{index}",
                "index": index,
                "model": product,
                "util_gpu": 50,
                "mem_used": 2**30,
                "processes": [{"pid": 1, "pod_uid": pods[index % len(pods)].uid, "mem_used": 1}],
            }
            for index in range(min(8, gpu.gpus))
        ]
        started = time.perf_counter()
        result = ingest_gpu_batch(
            token_node=node, batch={"node": node, "samples": samples}, now=now
        )
        per_batch.append((time.perf_counter() - started) * 1000)
        stored += result.accepted
        if result.rejected:
            sys.exit(f"unexpected rejections: {result.rejected_reasons[:3]}")
    print(f"batches of {len(samples)} GPUs    {args.batches} on {node}, {stored:,} samples stored")
    print(
        f"ingest per batch      median {pct(per_batch, 50):.1f} ms, p95 {pct(per_batch, 95):.1f} ms"
    )
    print(f"GPU samples in table  {GpuSample.objects.count():,}")


if __name__ == "__main__":
    main()
