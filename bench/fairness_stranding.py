"""Count the GPUs a fair allocation leaves to nobody although a short team could use them.

Usage::

    git show main:scheduling/domain/fairness.py > /tmp/fairness_main.py
    .venv/bin/python bench/fairness_stranding.py /tmp/fairness_main.py \\
        scheduling/domain/fairness.py [--problems 400] [--seed 18]

Each seeded problem is a contended two-level hierarchy on a cluster of 100 GPUs, 1,000 cores and
4,000 GiB: 2 to 4 departments (weights 1-3) of 1 to 4 teams (weights 1-3), each team with a
random shape from GPU-heavy (2 cores per GPU) to CPU-heavy (100 cores per GPU), 1-4 GiB per
core, scaled to a dominant share of 10-60 % of the cluster (whole GPUs). Draws whose summed
demand fits the cluster are skipped and not counted (contended problems only). GPUs are whole
(``integral``), as in Fairshare.

*Recoverable GPUs* of a solution: starting from what no team holds (the cluster less the teams'
allocations: a department's allocation beyond its teams' sum runs no team's work), every team
short of its demand (in name order) grows along its demand vector by the largest factor that
fits what is left of every resource (and its department's limit, none here); the GPUs so added
are the recoverable ones. Each solver version (a file path) prints how many problems have more
than one recoverable GPU, the median, p90 and max recoverable GPUs per problem, and the mean
share of the 100 GPUs stranded.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fairness_compare import load

GPU = "nvidia.com/gpu"
CAPACITY = {"cpu": 1000.0, "memory": 4000.0 * 2**30, GPU: 100.0}


def make_problem(rng: random.Random) -> list[dict] | None:
    """Departments and teams as plain dicts, or ``None`` if the draw is not contended."""
    tenants = []
    totals = dict.fromkeys(CAPACITY, 0.0)
    for d in range(rng.randint(2, 4)):
        dept = f"dept-{d}"
        tenants.append({"name": dept, "demand": {}, "weight": float(rng.randint(1, 3))})
        for t in range(rng.randint(1, 4)):
            cores_per_gpu = 2.0 * 50.0 ** rng.random()  # 2 (GPU-heavy) .. 100 (CPU-heavy)
            shape = {GPU: 1.0, "cpu": cores_per_gpu}
            shape["memory"] = cores_per_gpu * rng.uniform(1, 4) * 2**30
            # Scaled so that the team's dominant share is 10-60 % of the cluster.
            scale = rng.uniform(0.1, 0.6) / max(v / CAPACITY[r] for r, v in shape.items())
            demand = {r: v * scale for r, v in shape.items()}
            demand[GPU] = float(max(1, round(demand[GPU])))
            for r, v in demand.items():
                totals[r] += v
            tenants.append(
                {
                    "name": f"{dept}-team-{t}",
                    "demand": demand,
                    "weight": float(rng.randint(1, 3)),
                    "parent": dept,
                }
            )
    if all(totals[r] <= CAPACITY[r] for r in CAPACITY):
        return None
    return tenants


def recoverable(tenants: list[dict], result) -> float:
    """GPUs that teams short of their demand could still take from what is left."""
    teams = [t for t in tenants if "parent" in t]
    # What no team holds: a department's allocation beyond its teams' sum is held by nobody.
    left = {r: c - sum(result[t["name"]].resources[r] for t in teams) for r, c in CAPACITY.items()}
    gained = 0.0
    for team in sorted(teams, key=lambda t: t["name"]):
        got = result[team["name"]].resources
        short = {r: v - got[r] for r, v in team["demand"].items() if v - got[r] > 1e-9 * v}
        if not short:
            continue
        demand = team["demand"]
        # Grow along the demand vector: the largest fraction of the missing part that fits.
        need = {r: demand[r] - got[r] for r in demand}
        frac = min(
            [1.0] + [max(0.0, left[r]) / need[r] for r in demand if need[r] > 1e-12 * demand[r]]
        )
        if frac <= 0.0:
            continue
        for r in demand:
            left[r] -= frac * need[r]
        gained += frac * need[GPU]
    return gained


def run(path: str, problems: list[list[dict]]) -> dict[str, float]:
    module = load(path)
    per_problem = []
    start = time.process_time()
    for tenants in problems:
        objects = [
            module.Tenant(t["name"], t["demand"], t["weight"], parent=t.get("parent"))
            for t in tenants
        ]
        result = module.solve(CAPACITY, objects, integral={GPU})
        per_problem.append(recoverable(tenants, result))
    elapsed = time.process_time() - start
    per_problem.sort()
    p90 = per_problem[min(len(per_problem) - 1, round(0.9 * (len(per_problem) - 1)))]
    return {
        "over_one": sum(1 for g in per_problem if g > 1.0),
        "median": statistics.median(per_problem),
        "p90": p90,
        "max": per_problem[-1],
        "mean_share": statistics.fmean(per_problem) / CAPACITY[GPU],
        "cpu_s": elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("solvers", nargs="+", help="solver files (e.g. main's, then this tree's)")
    parser.add_argument("--problems", type=int, default=400, help="draws (uncontended skipped)")
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    problems = [p for p in (make_problem(rng) for _ in range(args.problems)) if p is not None]
    print(f"{len(problems)} contended problems of {args.problems} draws (seed {args.seed})")
    print(
        f"{'solver':<40} {'>1 GPU':>8} {'median':>8} {'p90':>8} {'max':>8} {'mean':>7} {'cpu s':>7}"
    )
    for path in args.solvers:
        f = run(path, problems)
        print(
            f"{path:<40} {f['over_one']:>8} {f['median']:>8.1f} {f['p90']:>8.1f} "
            f"{f['max']:>8.1f} {f['mean_share']:>6.1%} {f['cpu_s']:>7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
