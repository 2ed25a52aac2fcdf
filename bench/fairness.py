"""Time ``scheduling.domain.fairness.solve`` on seeded random problems; print a table.

Usage: ``.venv/bin/python bench/fairness.py [--sizes 100,1000,10000,100000] [--repeat 3]``

Each problem has 8 resources (cpu, memory, GPUs of two flavors, MIG slices, RDMA, storage,
hugepages) whose capacities are about half of the summed demand, so most resources saturate.
Tenants demand a random subset of the resources, weights are 1-10, one tenant in ten has a
guarantee and one in ten a limit; GPUs are integral. The hierarchical problem puts the same
leaves under a 3-level tree (``k`` organisations, ``k**2`` departments, ``k = round(n ** (1/3))``);
organisations and departments have no demand of their own. Problems are generated outside
the timer, which measures ``solve()`` only. Shown per size and shape: the best of ``--repeat``
runs in wall-clock and CPU (process) time (CPU time is the steadier figure on a shared machine),
the median CPU time of the runs, microseconds per tenant, and ``growth``: the time ratio to the
previous size divided by the ``n log n`` ratio (1.0 means ``n log n`` growth exactly; above 1 grows
faster). The load average is printed first: on a loaded machine every figure is higher.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.domain.fairness import Tenant, solve

RESOURCES = (
    "cpu",
    "memory",
    "nvidia.com/gpu",
    "amd.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "rdma/rdma-shared",
    "ephemeral-storage",
    "hugepages-2Mi",
)
INTEGRAL = frozenset({"nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb"})


def make_problem(
    n: int, *, hierarchy: bool, seed: int = 42
) -> tuple[dict[str, float], list[Tenant]]:
    """Return ``(capacity, tenants)`` with ``n`` leaf tenants (plus parents if ``hierarchy``)."""
    rng = random.Random(seed)
    leaves = []
    totals = dict.fromkeys(RESOURCES, 0.0)
    for i in range(n):
        demand = {}
        for resource in RESOURCES:
            if rng.random() < 0.6:
                amount = float(rng.randint(1, 16)) if resource in INTEGRAL else rng.uniform(1, 100)
                demand[resource] = amount
                totals[resource] += amount
        leaves.append(
            {"name": f"team-{i:06d}", "demand": demand, "weight": float(rng.randint(1, 10))}
        )
    capacity = {r: float(max(1, int(totals[r] / 2))) for r in RESOURCES}
    guaranteed = dict.fromkeys(RESOURCES, 0.0)
    for leaf in leaves:
        roll = rng.random()
        if roll < 0.1:
            guarantee = {r: float(int(v / 4)) for r, v in leaf["demand"].items()}
            if all(guaranteed[r] + v <= capacity[r] * 0.5 for r, v in guarantee.items()):
                leaf["guarantee"] = guarantee
                for r, v in guarantee.items():
                    guaranteed[r] += v
        elif roll < 0.2:
            leaf["limit"] = {r: v * rng.uniform(0.3, 1.0) for r, v in leaf["demand"].items()}
    tenants = []
    if hierarchy:
        k = max(2, round(n ** (1 / 3)))
        for o in range(k):
            tenants.append(Tenant(name=f"org-{o:03d}", demand={}, weight=float(rng.randint(1, 5))))
        for d in range(k * k):
            tenants.append(
                Tenant(
                    name=f"dept-{d:05d}",
                    demand={},
                    weight=float(rng.randint(1, 5)),
                    parent=f"org-{d % k:03d}",
                )
            )
        for leaf in leaves:
            leaf["parent"] = f"dept-{rng.randrange(k * k):05d}"
    tenants.extend(Tenant(**leaf) for leaf in leaves)
    return capacity, tenants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average: {load} ({os.cpu_count()} CPUs)")
    print(
        f"{'tenants':>8} {'resources':>9} {'shape':>8} {'ms/solve':>9} {'cpu ms':>9} "
        f"{'median':>9} {'us/tenant':>10} {'growth':>7}"
    )
    previous: dict[bool, tuple[int, float]] = {}
    for n in sizes:
        for hierarchy in (False, True):
            capacity, tenants = make_problem(n, hierarchy=hierarchy)
            best = float("inf")
            cpu = []
            for _ in range(args.repeat):
                gc.collect()  # start each run from the same heap state
                start, start_cpu = time.perf_counter(), time.process_time()
                solve(capacity, tenants, integral=INTEGRAL)
                cpu.append(time.process_time() - start_cpu)
                best = min(best, time.perf_counter() - start)
            best_cpu = min(cpu)
            growth = ""
            if hierarchy in previous:
                m, t = previous[hierarchy]
                growth = f"{(best_cpu / t) / ((n * math.log(n)) / (m * math.log(m))):.2f}"
            previous[hierarchy] = (n, best_cpu)
            shape = "3-level" if hierarchy else "flat"
            print(
                f"{n:>8} {len(RESOURCES):>9} {shape:>8} {best * 1e3:>9.1f} {best_cpu * 1e3:>9.1f} "
                f"{statistics.median(cpu) * 1e3:>9.1f} {best * 1e6 / len(tenants):>10.2f} "
                f"{growth:>7}"
            )


if __name__ == "__main__":
    main()
