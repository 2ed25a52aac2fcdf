"""The solver's JSON command line: ``python -m scheduling.domain.fairness`` (see ``__main__``).

``{"capacity": {...}, "tenants": [{"name", "demand", "weight", "guarantee", "limit", "parent"}],
"integral": [...]}`` in, ``{"allocations": {name: {"resources", "dominant_share",
"dominant_resource", "reason"}}}`` out.

Invariant: a malformed document or invalid problem gives exit status 2 and one ``error: ...``
line on stderr, never a traceback; integral amounts are written as JSON integers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from .model import Allocation, ProblemError, Tenant
from .solver import solve

_PROBLEM_KEYS = {"capacity", "tenants", "integral"}


_TENANT_KEYS = {"name", "demand", "weight", "guarantee", "limit", "parent"}


def parse_problem(data: Any) -> tuple[dict[str, float], list[Tenant], frozenset[str]]:
    """Turn decoded JSON into ``solve()`` arguments; raise ProblemError on a malformed shape."""
    if not isinstance(data, dict):
        raise ProblemError("problem must be a JSON object")
    unknown = sorted(set(data) - _PROBLEM_KEYS)
    if unknown:
        raise ProblemError(f"problem: unknown field {unknown[0]!r}")
    if "capacity" not in data or not isinstance(data["capacity"], dict):
        raise ProblemError("capacity must be an object of resource to amount")
    raw_tenants = data.get("tenants")
    if not isinstance(raw_tenants, list):
        raise ProblemError("tenants must be a list")
    raw_integral = data.get("integral", [])
    if not isinstance(raw_integral, list) or not all(isinstance(x, str) for x in raw_integral):
        raise ProblemError("integral must be a list of resource names")
    tenants = []
    for position, raw in enumerate(raw_tenants):
        if not isinstance(raw, dict):
            raise ProblemError(f"tenants[{position}] must be an object")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ProblemError(f"tenants[{position}]: name must be a non-empty string")
        owner = f"tenant {name!r}"
        unknown = sorted(set(raw) - _TENANT_KEYS)
        if unknown:
            raise ProblemError(f"{owner}: unknown field {unknown[0]!r}")
        if "demand" not in raw:
            raise ProblemError(f"{owner}: demand is required")
        for key in ("demand", "guarantee", "limit"):
            value = raw.get(key)
            if value is not None and not isinstance(value, dict):
                raise ProblemError(f"{owner}: {key} must be an object of resource to amount")
        if raw["demand"] is None:
            raise ProblemError(f"{owner}: demand must be an object of resource to amount")
        parent = raw.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise ProblemError(f"{owner}: parent must be a tenant name or null")
        tenants.append(
            Tenant(
                name=name,
                demand=raw["demand"],
                weight=raw.get("weight", 1.0),
                guarantee=raw.get("guarantee") or {},
                limit=raw.get("limit"),
                parent=parent,
            )
        )
    return data["capacity"], tenants, frozenset(raw_integral)


def allocations_to_json(
    allocations: Mapping[str, Allocation], integral: Iterable[str] = ()
) -> dict[str, Any]:
    """Render allocations as the CLI's JSON document; integral amounts become JSON integers."""
    whole = set(integral)
    return {
        "allocations": {
            name: {
                "resources": {
                    r: int(v) if r in whole else v for r, v in allocation.resources.items()
                },
                "dominant_share": allocation.dominant_share,
                "dominant_resource": allocation.dominant_resource,
                "reason": allocation.reason,
            }
            for name, allocation in allocations.items()
        }
    }


def main(
    stdin: TextIO | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Read a problem as JSON from stdin, write allocations as JSON to stdout; return exit code.

    Return 2 with a one-line ``error: ...`` on stderr for bad JSON or an invalid problem.
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        data = json.load(stdin)
    except json.JSONDecodeError as e:
        stderr.write(f"error: bad JSON: {e}\n")
        return 2
    try:
        capacity, tenants, integral = parse_problem(data)
        allocations = solve(capacity, tenants, integral=integral)
    except ProblemError as e:
        stderr.write(f"error: {e}\n")
        return 2
    json.dump(allocations_to_json(allocations, integral), stdout, indent=2)
    stdout.write("\n")
    return 0
