"""Soak H-DRF under limits at every level: seeded random 2-3-level hierarchies, two checks each.

Usage: ``.venv/bin/python bench/fairness_limits.py [--problems 10000] [--seed 28] [--reference]``

Each problem has 2-4 resources, 2-4 roots, and 2 or 3 levels; every internal node has 1-3
children (a department may hold an own demand too); weights 0.5-4; a limit on about half of the
tenants *at every level* (a random subset of resources, a random part of the capacity or of the
demand); guarantees on one tenant in ten when ``--guarantees``. Per problem, on the default
solver (``--reference``: the nested-search path as well):

* **limit**: no tenant or department holds more than its limit or the capacity of a resource,
  and the groups' sums stay within their parents' (relative 1e-9);
* **Pareto**: no short team could be raised with what is left: for each leaf below its demand
  and its own limit, the leftovers (capacity minus use, within every limit on its path, up to its
  demand) must not let its progress ``min_r x[r] / d[r]`` over its demanded resources rise by
  more than 1e-7 (relative to its demand).

Prints the counts of problems with a violation and the first few offenders (as JSON problems
that ``python -m scheduling.domain.fairness`` reads); exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.domain import fairness
from scheduling.domain.fairness import Allocation, Tenant

RESOURCES = ("cpu", "disk", "mem", "nvidia.com/gpu")
REL = 1e-9
PARETO = 1e-7


def make_problem(
    rng: random.Random, *, guarantees: bool = False, depths: tuple[int, ...] = (2, 3)
) -> tuple[dict[str, float], list[Tenant]]:
    """A random hierarchy of one of ``depths`` levels with limits at every level."""
    resources = rng.sample(RESOURCES, rng.randint(2, 4))
    capacity = {r: float(rng.choice((1, 2, 3, 10, 24, 100))) for r in resources}
    depth = rng.choice(depths)
    tenants: list[dict] = []
    counter = iter(range(1, 10_000))

    def limit(demand: dict[str, float]) -> dict[str, float] | None:
        if rng.random() >= 0.5:
            return None
        chosen = rng.sample(resources, rng.randint(1, len(resources)))
        return {
            r: round(
                rng.uniform(0.05, 1.0) * (demand.get(r) or capacity[r])
                if rng.random() < 0.5
                else rng.uniform(0.1, 0.9) * capacity[r],
                3,
            )
            for r in chosen
        }

    def leaf_demand() -> dict[str, float]:
        chosen = rng.sample(resources, rng.randint(1, len(resources)))
        return {r: round(rng.uniform(0.05, 1.5) * capacity[r], 3) for r in chosen}

    def node(parent: str | None, level: int) -> None:
        name = f"{'d' if level < depth - 1 else 't'}{next(counter):02d}"
        internal = level < depth - 1
        demand = leaf_demand() if not internal or rng.random() < 0.15 else {}
        entry: dict = {"name": name, "demand": demand, "weight": rng.choice((0.5, 1, 1, 2, 3, 4))}
        if parent is not None:
            entry["parent"] = parent
        lim = limit(demand if not internal else {})
        if lim:
            entry["limit"] = lim
        if guarantees and not internal and rng.random() < 0.1:
            entry["guarantee"] = {r: round(rng.uniform(0.0, 0.2) * capacity[r], 3) for r in demand}
        tenants.append(entry)
        if internal:
            for _ in range(rng.randint(1, 3)):
                node(name, level + 1)

    for _ in range(rng.randint(2, 4)):
        node(None, 0)
    problem = [Tenant(**t) for t in tenants]
    if guarantees:
        try:
            fairness._validate(capacity, problem, ())
        except fairness.ProblemError:  # a guarantee over a limit on its path: none then
            problem = [Tenant(**{**t, "guarantee": {}}) for t in tenants]
    return capacity, problem


def problem_json(capacity: dict[str, float], tenants: list[Tenant]) -> str:
    rows = []
    for t in tenants:
        row: dict = {"name": t.name, "demand": dict(t.demand), "weight": t.weight}
        for key in ("guarantee", "limit", "parent"):
            value = getattr(t, key)
            if value:
                row[key] = dict(value) if isinstance(value, dict) else value
        rows.append(row)
    return json.dumps({"capacity": capacity, "tenants": rows})


def limit_violations(
    capacity: dict[str, float], tenants: list[Tenant], result: dict[str, Allocation]
) -> list[str]:
    """Tenants over a limit or the capacity, groups over their parent or the capacity."""
    bad = []
    for t in tenants:
        got = result[t.name].resources
        for r, v in got.items():
            if v > capacity.get(r, 0.0) * (1 + REL) + REL:
                bad.append(f"{t.name} holds {r} {v:g} over the capacity {capacity.get(r, 0):g}")
        for r, v in (t.limit or {}).items():
            if got.get(r, 0.0) > v * (1 + REL) + REL:
                bad.append(f"{t.name} holds {r} {got[r]:g} over its limit {v:g}")
    for r, cap in capacity.items():
        used = sum(result[t.name].resources[r] for t in tenants if t.parent is None)
        if used > cap * (1 + REL) + REL:
            bad.append(f"the roots hold {r} {used:g} over the capacity {cap:g}")
    return bad


def pareto_violations(
    capacity: dict[str, float], tenants: list[Tenant], result: dict[str, Allocation]
) -> list[str]:
    """Short teams that the leftovers (within every limit on their path) could raise."""
    by_name = {t.name: t for t in tenants}
    parents = {t.parent for t in tenants if t.parent}
    left = {
        r: cap - sum(result[t.name].resources[r] for t in tenants if t.parent is None)
        for r, cap in capacity.items()
    }
    bad = []
    for t in tenants:
        if t.name in parents:
            continue  # a parent's own demand is not a team: checked through its children
        want = {r: v for r, v in t.demand.items() if v > 0}
        if not want:
            continue
        got = result[t.name].resources
        progress = min(got[r] / v for r, v in want.items())
        cut = min([1.0] + [(t.limit or {}).get(r, float("inf")) / v for r, v in want.items()])
        if progress >= cut * (1 - PARETO):
            continue
        path = []
        up = t
        while up is not None:
            path.append(up)
            up = by_name.get(up.parent) if up.parent else None
        rise = cut - progress
        for r, v in want.items():
            room = left[r]
            for a in path:
                lim = (a.limit or {}).get(r)
                if lim is not None:
                    room = min(room, lim - result[a.name].resources[r])
            # progress can reach (got + room) / v on r
            rise = min(rise, (got[r] + max(room, 0.0)) / v - progress)
        if rise > PARETO * max(1.0, progress):
            bad.append(f"{t.name} could rise by {rise:.3g} of its demand (progress {progress:.4g})")
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--guarantees", action="store_true")
    parser.add_argument("--levels", default="2,3", help="depths to draw from, e.g. 2 or 2,3")
    parser.add_argument("--reference", action="store_true", help="also the nested-search path")
    parser.add_argument("--show", type=int, default=3, help="offending problems to print")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    depths = tuple(int(x) for x in args.levels.split(","))
    paths = [("default", fairness._solve)]
    if args.reference:
        paths.append(("reference", fairness._solve_hierarchy_reference))
    counts = {(p, k): 0 for p, _ in paths for k in ("limit", "pareto")}
    shown = 0
    start = time.perf_counter()
    for _ in range(args.problems):
        capacity, tenants = make_problem(rng, guarantees=args.guarantees, depths=depths)
        for path, solver in paths:
            result = solver(fairness._validate(capacity, tenants, ()))
            for kind, check in (("limit", limit_violations), ("pareto", pareto_violations)):
                found = check(capacity, tenants, result)
                if found:
                    counts[(path, kind)] += 1
                    if shown < args.show:
                        shown += 1
                        print(f"{path} {kind}: {found[0]}\n  {problem_json(capacity, tenants)}")
    elapsed = time.perf_counter() - start
    print(f"{args.problems} random limited hierarchies (seed {args.seed}) in {elapsed:.1f} s")
    for (path, kind), count in counts.items():
        print(f"  {path:>9} {kind:>6} violations: {count}")
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
