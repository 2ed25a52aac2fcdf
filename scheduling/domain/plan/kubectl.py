"""Whether one ``kubectl apply`` pass of exported manifests can carry out a set of changes.

Invariant: :func:`kubectl_passes` is empty exactly when no changed Queue shrinks, is pruned, or
sits under a parent that the same changes write (what one pass, and Volcano's lagging webhook,
cannot carry out).
"""

from __future__ import annotations

from collections.abc import Sequence

from .changes import Change
from .hierarchy import queue_parent

__all__ = ["kubectl_passes"]


def kubectl_passes(changes: Sequence[Change]) -> list[str]:
    """Why one ``kubectl apply`` pass of the final manifests cannot take the cluster from the
    previous state to this one (empty: one pass is enough).

    ``kubectl apply -R`` writes each file once, final amounts, in lexical order, and deletes
    nothing. Volcano's webhook checks every write against its (lagging) cache of the Queues
    (``validate_queue.go``), so a pass is not enough when:

    1. a Queue must shrink before another grows (a change with a shrink-stage ``interim``, or
       a pure decrease that :func:`apply_waves` writes in the shrink stage): the file order
       may grow a sibling first, and the sums over a parent are denied;
    2. a Queue is created or re-parented under a parent that this same set of changes creates
       or grows: the webhook may not see the parent's write yet (its informer lags), so the
       child is denied until a second pass;
    3. a Queue is removed: ``kubectl apply`` does not delete (without ``--prune``), and a
       Queue with children cannot be deleted before them.
    """
    reasons: list[str] = []
    queues = [c for c in changes if c.kind == "Queue" and c.op != "unchanged"]
    parents_written = {c.name for c in queues if c.op in ("create", "update")}
    for change in queues:
        if change.op == "prune":
            reasons.append(f"Queue {change.name} is no longer desired: delete it (children first)")
        elif change.interim is not None or change.stage == "shrink":
            reasons.append(f"Queue {change.name} shrinks: it must be written before others grow")
        else:
            parent = queue_parent(change.body)
            if parent in parents_written:
                reasons.append(
                    f"Queue {change.name} sits under {parent}, which this change also writes: "
                    "the webhook may not see the parent's new state yet"
                )
    return reasons
