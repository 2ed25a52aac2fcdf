"""What Kueue says about each ClusterQueue Fairshare manages (pure): usage, borrowing, fair share.

From ``status`` of a ``kueue.x-k8s.io/v1beta2`` ClusterQueue (``apis/kueue/v1beta2/
clusterqueue_types.go`` ``ClusterQueueStatus``): ``flavorsUsage[].resources[]`` (``total``: what
admitted workloads use, ``borrowed``: the part above the queue's nominal quota), summed over
flavors per resource; ``fairSharing.weightedShare`` (``fairsharing_types.go``: the largest ratio
of usage above nominal to what the cohort can lend, divided by the weight; 0 when within the
nominal quota); ``pendingWorkloads`` and ``admittedWorkloads``. A Cohort's status has only
``fairSharing.weightedShare`` (``cohort_types.go`` ``CohortStatus``). Shown beside Fairshare's
own numbers on the team page (a department's: its Cohort).

Invariant: amounts are exact decimal strings; a ClusterQueue without status reads as nothing
known (``weighted_share`` None), never as zero use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

__all__ = ["queue_statuses"]

TEAM_LABEL = "fairshare.io/team"


def _text(amount: Decimal) -> str:
    return format(amount.normalize(), "f") if amount else "0"


def queue_statuses(
    cluster_queues: Iterable[Mapping[str, Any]],
    parse_quantity: Callable[[Any], Decimal],
    *,
    kind: str = "ClusterQueue",
) -> dict[str, dict[str, Any]]:
    """``{name: {kind, team, weighted_share, in_use, borrowed, pending, admitted}}`` for every
    ClusterQueue (or Cohort, ``kind``) carrying Fairshare's team label."""
    out: dict[str, dict[str, Any]] = {}
    for cq in cluster_queues:
        metadata = cq.get("metadata") or {}
        team = (metadata.get("labels") or {}).get(TEAM_LABEL)
        if not team:
            continue
        status = cq.get("status") or {}
        in_use: dict[str, Decimal] = {}
        borrowed: dict[str, Decimal] = {}
        for flavor in status.get("flavorsUsage") or ():
            for resource in (flavor or {}).get("resources") or ():
                name = str(resource.get("name") or "")
                if not name:
                    continue
                for key, into in (("total", in_use), ("borrowed", borrowed)):
                    if resource.get(key) is not None:
                        into[name] = into.get(name, Decimal(0)) + Decimal(
                            parse_quantity(resource[key])
                        )
        share = (status.get("fairSharing") or {}).get("weightedShare")
        out[str(metadata.get("name") or "")] = {
            "kind": kind,
            "team": str(team),
            "weighted_share": int(share) if share is not None else None,
            "in_use": {r: _text(v) for r, v in sorted(in_use.items())},
            "borrowed": {r: _text(v) for r, v in sorted(borrowed.items()) if v},
            "pending": int(status.get("pendingWorkloads") or 0),
            "admitted": int(status.get("admittedWorkloads") or 0),
        }
    return dict(sorted(out.items()))
