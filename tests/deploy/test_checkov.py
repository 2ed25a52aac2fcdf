"""checkov (PyPI, from its own virtualenv .venv-checkov) finds nothing in the rendered deploy/:
every check passes or is skipped with its reason in deploy/.checkov.yaml."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from .manifests import DEPLOY, ROOT, require_kubectl


@pytest.mark.slow
def test_checkov_finds_nothing_in_the_rendered_manifests():
    require_kubectl()
    # scripts/checkov.sh creates .venv-checkov first if it is missing (scripts/test.sh does
    # that before pytest).
    result = subprocess.run(
        [str(ROOT / "scripts" / "checkov.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    counts = re.search(r"Passed checks: (\d+), Failed checks: (\d+)", result.stdout)
    assert counts, result.stdout[-2000:]
    assert int(counts[1]) > 300 and int(counts[2]) == 0


def test_every_skipped_check_has_its_reason():
    text = (DEPLOY / ".checkov.yaml").read_text()
    skipped = yaml.safe_load(text)["skip-check"]
    lines = text.splitlines()
    for check in skipped:
        index = lines.index(f"  - {check}")
        # the comment just above it (or above the run of checks it belongs to)
        above = index - 1
        while lines[above].startswith("  - CKV"):
            above -= 1
        assert lines[above].lstrip().startswith("#"), f"{check} has no reason"
