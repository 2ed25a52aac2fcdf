"""Cluster usage collector: LIST nodes and live pods, stream them into the pure aggregation.

Two sources, same result (:class:`monitoring.domain.aggregate.ClusterUsage`):

* :func:`collect` reads the API server through ``scheduling.k8s.observe.list_raw`` (the only
  package that talks to the ``kubernetes`` client). Nodes first, then pods, each as a paginated
  LIST (``limit`` + ``continue``) served from the API server's watch cache
  (``resourceVersion=0``), parsed as raw JSON dicts (no client model objects). Pods are filtered
  server-side to the non-terminal phases with
  ``fieldSelector=status.phase!=Succeeded,status.phase!=Failed``; the aggregation skips finished
  pods too, so a server that ignored the selector would still give the right answer. Pages are
  consumed as they arrive, so memory holds one page plus per-namespace sums, not the pod list.
  A transient failure (429, 5xx, timeout) restarts the whole observation (``call_with_retry``),
  so pages from two attempts are never mixed.
* :func:`from_snapshot` reads a ``kubectl get nodes,pods -A -o json`` dump (the demo mode,
  ``FAIRSHARE_CLUSTER=snapshot:PATH``).

Quantities are parsed with ``kubernetes.utils.parse_quantity`` (exact Decimals).

Note: real API servers before Kubernetes 1.31 ignore ``limit`` when ``resourceVersion=0`` is
served from the watch cache and answer in one page; the collector handles both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

from monitoring.domain.aggregate import ClusterUsage, aggregate, parse_list_dump
from monitoring.exceptions import CollectorError
from scheduling.k8s.apply import call_with_retry
from scheduling.k8s.observe import list_raw

NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
DEFAULT_PAGE_SIZE = 500

Stats = MutableMapping[str, int]


def _counted(items: Iterator[dict[str, Any]], stats: Stats, key: str) -> Iterator[dict[str, Any]]:
    for item in items:
        stats[key] = stats.get(key, 0) + 1
        yield item


def collect(
    api_client: Any,
    namespace_teams: Mapping[str, str],
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    attempts: int = 3,
    stats: Stats | None = None,
) -> ClusterUsage:
    """Observe the cluster once and return its aggregate.

    ``namespace_teams`` maps namespace → team slug (others are ``unassigned``). ``stats``, if
    given, receives ``nodes`` and ``pods`` (objects read, from the successful attempt).
    Raises ``scheduling.k8s.errors.K8sError`` subclasses when the API keeps failing.
    """

    def observe() -> ClusterUsage:
        counts: dict[str, int] = {"nodes": 0, "pods": 0}
        params = {"resourceVersion": "0"}
        nodes = list_raw(api_client, NODES_PATH, page_size=page_size, params=params)
        pods = list_raw(
            api_client,
            PODS_PATH,
            page_size=page_size,
            params={**params, "fieldSelector": LIVE_PODS},
        )
        usage = aggregate(
            _counted(nodes, counts, "nodes"),
            _counted(pods, counts, "pods"),
            namespace_teams,
            parse_quantity=parse_quantity,
        )
        if stats is not None:
            stats.update(counts)
        return usage

    return call_with_retry(observe, attempts=attempts)


def from_snapshot(
    path: str | Path, namespace_teams: Mapping[str, str], *, stats: Stats | None = None
) -> ClusterUsage:
    """Aggregate a ``kubectl get nodes,pods -A -o json`` dump.

    Raises CollectorError, naming the file, when it is missing, unreadable, not JSON, not a
    Kubernetes List, or holds a quantity that does not parse.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise CollectorError(f"cannot read cluster snapshot {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise CollectorError(f"cluster snapshot {path} is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise CollectorError(f"cluster snapshot {path} is not a Kubernetes List object")
    try:
        nodes, pods = parse_list_dump(doc)
        usage = aggregate(nodes, pods, namespace_teams, parse_quantity=parse_quantity)
    except (ValueError, TypeError, AttributeError, ArithmeticError) as e:
        raise CollectorError(f"cluster snapshot {path} cannot be read: {e}") from e
    if stats is not None:
        stats.update({"nodes": len(nodes), "pods": len(pods)})
    return usage
