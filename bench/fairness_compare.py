"""Compare two versions of the DRF solver: speed side by side, and answers on random problems.

Usage (the old version from git history, the new one from the work tree)::

    git show e6966d7:scheduling/domain/fairness.py > /tmp/fairness_old.py
    .venv/bin/python bench/fairness_compare.py time /tmp/fairness_old.py \\
        scheduling/domain/fairness.py --cases 10000:flat,10000:3-level --repeat 7 --rounds 2
    .venv/bin/python bench/fairness_compare.py fuzz /tmp/fairness_old.py \\
        scheduling/domain/fairness.py --problems 6000

``time`` runs each version in its own process, alternating A, B, A, B ... for ``--rounds``,
each process timing ``--repeat`` solves of ``bench/fairness.py``'s problem; it prints the best CPU
time of each version. Alternating processes keeps a drifting machine from favouring one version,
and a fresh process each time keeps one version's garbage from slowing the other.

``fuzz`` solves seeded random problems (up to 40 tenants, 1-5 resources, hierarchies, guarantees,
limits, zero capacities, integral resources) with both versions and counts the problems whose
amounts differ (beyond ``--rel``, default 1e-7, relative), and those that differ only in a
reason or dominant resource; it prints the first few of each. Exit status 1 if any amount
differs. ``--flat`` drops every parent, to compare flat problems alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent

TIMER = r"""
import gc, sys, time
sys.path.insert(0, sys.argv[1])
from bench.fairness import INTEGRAL, make_problem
from bench.fairness_compare import load
M = load(sys.argv[2])
capacity, tenants = make_problem(int(sys.argv[3]), hierarchy=sys.argv[4] == "3-level")
tenants = [M.Tenant(t.name, t.demand, t.weight, t.guarantee, t.limit, t.parent) for t in tenants]
best = float("inf")
for _ in range(int(sys.argv[5])):
    gc.collect()
    start = time.process_time()
    M.solve(capacity, tenants, integral=INTEGRAL)
    best = min(best, time.process_time() - start)
print(best)
"""


def load(path: str) -> ModuleType:
    """Import a solver file as its own module (its dataclasses need it in ``sys.modules``)."""
    name = f"solver_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def time_versions(a: str, b: str, cases: list[str], repeat: int, rounds: int) -> None:
    print(f"A = {a}\nB = {b}")
    for case in cases:
        n, shape = case.split(":")
        best = {a: float("inf"), b: float("inf")}
        for _ in range(rounds):
            for path in (a, b):
                out = subprocess.check_output(
                    [sys.executable, "-c", TIMER, str(ROOT), path, n, shape, str(repeat)],
                    text=True,
                )
                best[path] = min(best[path], float(out))
        print(
            f"{int(n):>8} {shape:>8}: A {best[a] * 1e3:9.1f} ms  B {best[b] * 1e3:9.1f} ms  "
            f"B/A {best[b] / best[a]:.2f}"
        )


def random_problem(rng: random.Random):
    """Return (capacity, tenants as tuples, integral resources)."""
    resources = [f"r{i}" for i in range(rng.randint(1, 5))]
    integral = [r for r in resources if rng.random() < 0.3]
    capacity = {r: float(0 if rng.random() < 0.03 else rng.randint(1, 60)) for r in resources}
    names = [f"t{i:02d}" for i in range(rng.randint(1, 40))]
    rng.shuffle(names)
    left = dict(capacity)
    tenants = []
    for i, name in enumerate(names):
        demand = {}
        for r in resources:
            if rng.random() < 0.6:
                whole = r in integral and rng.random() < 0.5
                demand[r] = (
                    float(rng.randint(0, 20))
                    if whole
                    else round(rng.uniform(0, 30), rng.choice([0, 1, 3]))
                )
        guarantee = {}
        if rng.random() < 0.3:
            for r in demand:
                guarantee[r] = round(rng.random() * left[r] / 3, rng.choice([0, 2]))
                left[r] -= guarantee[r]
        limit = None
        if rng.random() < 0.25:
            limit = {r: max(guarantee.get(r, 0.0), round(rng.uniform(0, 30), 2)) for r in demand}
        parent = names[rng.randrange(i)] if i and rng.random() < 0.5 else None
        weight = rng.choice([0.5, 1.0, 2.0, 3.0, 7.5])
        tenants.append((name, demand, weight, guarantee, limit, parent))
    return capacity, tenants, integral


def run(module: ModuleType, capacity, tenants, integral):
    try:
        return module.solve(capacity, [module.Tenant(*t) for t in tenants], integral=integral)
    except module.ProblemError as e:
        return str(e)


def fuzz(a: str, b: str, problems: int, show: int, flat: bool = False, rel: float = 1e-7) -> int:
    old, new = load(a), load(b)
    invalid = amounts = ties = 0
    for seed in range(problems):
        capacity, tenants, integral = random_problem(random.Random(seed))
        if flat:  # the same problems without their hierarchy
            tenants = [(*t[:5], None) for t in tenants]
        x, y = run(old, capacity, tenants, integral), run(new, capacity, tenants, integral)
        if isinstance(x, str) or isinstance(y, str):
            if isinstance(x, str) and isinstance(y, str):
                invalid += 1
            else:
                amounts += 1
                print(f"seed {seed}: only one version rejects the problem: {x!r} / {y!r}")
            continue
        differ = [
            (name, r, x[name].resources[r], y[name].resources[r])
            for name in x
            for r in x[name].resources
            if not math.isclose(
                x[name].resources[r], y[name].resources[r], rel_tol=rel, abs_tol=rel
            )
        ]
        labels = [
            (
                name,
                x[name].reason,
                y[name].reason,
                x[name].dominant_resource,
                y[name].dominant_resource,
            )
            for name in x
            if x[name].reason != y[name].reason
            or x[name].dominant_resource != y[name].dominant_resource
        ]
        if differ:
            amounts += 1
            if amounts <= show:
                print(f"seed {seed}: amounts differ: {differ[:4]}")
        elif labels:
            ties += 1
            if ties <= show:
                print(f"seed {seed}: reason or dominant resource differs: {labels[:4]}")
    print(
        f"{problems} problems: {invalid} invalid in both, {amounts} with different amounts, "
        f"{ties} with the same amounts but a different reason or dominant resource"
    )
    return 1 if amounts else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("time")
    t.add_argument("a")
    t.add_argument("b")
    t.add_argument("--cases", default="10000:flat,10000:3-level,100000:flat,100000:3-level")
    t.add_argument("--repeat", type=int, default=5)
    t.add_argument("--rounds", type=int, default=2)
    f = sub.add_parser("fuzz")
    f.add_argument("a")
    f.add_argument("b")
    f.add_argument("--problems", type=int, default=2000)
    f.add_argument("--show", type=int, default=5)
    f.add_argument("--flat", action="store_true", help="drop every parent (flat problems only)")
    f.add_argument("--rel", type=float, default=1e-7, help="relative (and absolute) tolerance")
    args = parser.parse_args()
    if args.command == "time":
        time_versions(args.a, args.b, args.cases.split(","), args.repeat, args.rounds)
        return 0
    return fuzz(args.a, args.b, args.problems, args.show, args.flat, args.rel)


if __name__ == "__main__":
    sys.exit(main())
