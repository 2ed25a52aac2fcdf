"""The solver's JSON command line, run as ``python -m scheduling.domain.fairness``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduling.domain.fairness"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_it_solves_a_problem_from_stdin():
    problem = {
        "capacity": {"cpu": 9, "memory": 18, "nvidia.com/gpu": 3},
        "tenants": [
            {"name": "b", "demand": {"cpu": 300, "memory": 100}},
            {"name": "a", "demand": {"cpu": 100, "memory": 400, "nvidia.com/gpu": 1}},
        ],
        "integral": ["nvidia.com/gpu"],
    }

    done = run(json.dumps(problem))

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    assert list(out["allocations"]) == ["a", "b"]
    assert out["allocations"]["b"] == {
        "resources": {"cpu": 6.0, "memory": 2.0, "nvidia.com/gpu": 0},
        "dominant_share": pytest.approx(2 / 3),
        "dominant_resource": "cpu",
        "reason": "saturated:cpu",
    }
    assert out["allocations"]["a"]["resources"] == {
        "cpu": pytest.approx(3.0),
        "memory": pytest.approx(12.0),
        "nvidia.com/gpu": 0,
    }
    # Integral amounts are JSON integers.
    assert '"nvidia.com/gpu": 0,' in done.stdout or '"nvidia.com/gpu": 0\n' in done.stdout


def test_it_accepts_every_tenant_field():
    problem = {
        "capacity": {"cpu": 100},
        "tenants": [
            {"name": "dept", "demand": {}, "weight": 2, "guarantee": {}, "limit": None},
            {
                "name": "team",
                "demand": {"cpu": 500},
                "weight": 1,
                "guarantee": {"cpu": 10},
                "limit": {"cpu": 40},
                "parent": "dept",
            },
            {"name": "other", "demand": {"cpu": 500}, "parent": None},
        ],
    }

    done = run(json.dumps(problem))

    assert done.returncode == 0, done.stderr
    got = {n: a["resources"]["cpu"] for n, a in json.loads(done.stdout)["allocations"].items()}
    assert got == pytest.approx({"dept": 40.0, "other": 60.0, "team": 40.0}, rel=1e-12)


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{not json", "error: bad JSON:"),
        ("[]", "error: problem must be a JSON object"),
        ('{"tenants": []}', "error: capacity must be an object"),
        ('{"capacity": {"cpu": 1}, "tenants": {}}', "error: tenants must be a list"),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {"tpu": 1}}]}',
            "error: tenant 'a': demand: unknown resource 'tpu' (not in capacity)",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {"cpu": -1}}]}',
            "error: tenant 'a': demand['cpu'] must be >= 0, got -1",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {}, "weight": 0}]}',
            "error: tenant 'a': weight must be > 0, got 0",
        ),
        (
            '{"capacity": {"cpu": 9}, "tenants": [{"name": "a", "demand": {}, '
            '"guarantee": {"cpu": 5}, "limit": {"cpu": 4}}]}',
            "error: tenant 'a': guarantee['cpu'] (5) exceeds limit['cpu'] (4)",
        ),
        (
            '{"capacity": {"cpu": 9}, "tenants": [{"name": "a", "demand": {}, '
            '"guarantee": {"cpu": 5}}, {"name": "b", "demand": {}, "guarantee": {"cpu": 5}}]}',
            "error: guarantee['cpu']: sum of guarantees (10) exceeds capacity (9)",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {}, "parent": "x"}]}',
            "error: tenant 'a': unknown parent 'x'",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {}, "parent": "b"}, '
            '{"name": "b", "demand": {}, "parent": "a"}]}',
            "error: tenant 'a': cycle in parents ('a' -> 'b' -> 'a')",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {}}, '
            '{"name": "a", "demand": {}}]}',
            "error: tenant 'a': duplicate name",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a", "demand": {}, "gaurantee": {}}]}',
            "error: tenant 'a': unknown field 'gaurantee'",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [{"name": "a"}]}',
            "error: tenant 'a': demand is required",
        ),
        (
            '{"capacity": {"cpu": 1}, "tenants": [], "integral": ["gpu"]}',
            "error: integral: unknown resource 'gpu' (not in capacity)",
        ),
    ],
)
def test_it_rejects_malformed_input_with_one_line_and_exit_code_2(stdin, message):
    done = run(stdin)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1
