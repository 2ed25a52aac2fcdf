"""Time the fake Kubernetes API server (tests/kubeapi) on a large bulk load and a list page.

Usage::

    .venv/bin/python bench/kubeapi_load.py [--pods 150000] [--nodes 5000] [--repeat 3]

Loads ``--nodes`` Nodes and ``--pods`` Pods (spread over 50 namespaces and the nodes) into a
fresh ``FakeKubeApi`` through ``load()``, then reads the second page of 500 pods of
``list_pod_for_all_namespaces`` through the real ``kubernetes`` client, ``--repeat`` times, and
prints the best and worst load and page times. Targets (formerly wall-clock assertions in
tests/kubeapi/test_server.py, which now checks only what the load and the page contain): the
155,000-object load under 10 s and a later page under 1 s, on an idle machine. Run it on an idle
machine: the figures mean nothing under load.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from tests.kubeapi.server import FakeKubeApi  # noqa: E402


def objects(pods: int, nodes: int) -> tuple[list[dict], list[dict]]:
    pod_objects = [
        {
            "kind": "Pod",
            "metadata": {"name": f"pod-{i:06d}", "namespace": f"team-{i % 50:02d}"},
            "spec": {"nodeName": f"node-{i % nodes:04d}", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
        for i in range(pods)
    ]
    node_objects = [{"kind": "Node", "metadata": {"name": f"node-{i:04d}"}} for i in range(nodes)]
    return node_objects, pod_objects


def once(pods: int, nodes: int) -> tuple[float, float]:
    node_objects, pod_objects = objects(pods, nodes)
    server = FakeKubeApi().start()
    try:
        core = client.CoreV1Api(server.api_client())
        started = time.monotonic()
        assert server.load(node_objects) + server.load(pod_objects) == pods + nodes
        load_seconds = time.monotonic() - started
        first = core.list_pod_for_all_namespaces(limit=500)
        started = time.monotonic()
        later = core.list_pod_for_all_namespaces(limit=500, _continue=first.metadata._continue)
        page_seconds = time.monotonic() - started
        assert len(later.items) == 500
        return load_seconds, page_seconds
    finally:
        server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [once(args.pods, args.nodes) for _ in range(args.repeat)]
    loads, pages = [r[0] for r in runs], [r[1] for r in runs]
    total = args.pods + args.nodes
    print(f"load of {total:,} objects: best {min(loads):.2f} s, worst {max(loads):.2f} s")
    print(f"a later page of 500:     best {min(pages):.3f} s, worst {max(pages):.3f} s")
    ok = min(loads) < 10 and min(pages) < 1.0
    print("targets (load < 10 s, page < 1 s):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
