"""A cluster snapshot's times moved to the present (pure).

``FAIRSHARE_CLUSTER=snapshot:PATH`` (the demo, and offline evaluation of a ``kubectl get -o json``
dump) stands for the cluster *as it is now*: every collection reads it again and stamps what it
finds with the time of the collection. The dump's own timestamps (pod creation and start times,
node heartbeats, event times, condition transitions) were written when it was taken, so read
as they are, a pod that had waited 40 minutes when the dump was taken would be shown waiting
13 months a year later. :func:`redate` moves every timestamp of the dump by one offset, so the
dump's moment becomes ``now`` and every age reads as it did when the dump was taken.

**The dump's moment** is its newest timestamp among the kinds a collection reads (nodes, pods,
PodGroups, Volcano Jobs, Events): a live cluster's freshest entries are its kubelets'
``lastHeartbeatTime`` (every 10 s to 5 min, ``pkg/kubelet/kubelet_node_status.go``
``updateNodeStatus``) and its newest events, so the newest stamp is within minutes of when
``kubectl get`` ran. Other objects in the dump (ResourceQuotas, Queues: Fairshare's own, read
by the plan-only sync) are moved by the same offset but do not set it.

Timestamps are the RFC 3339 strings the API server writes (``metav1.Time``: second precision,
``Z``; ``metav1.MicroTime`` for ``eventTime``: microseconds). A field is a timestamp when its key
ends in ``Timestamp``, ``Time``, ``At`` or is ``time`` (``managedFields``) and its value parses
as one; anything else is copied as it is. This module imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["moment", "redate"]

WORKLOAD_KINDS = frozenset({"Node", "Pod", "PodGroup", "Job", "Event"})
_SUFFIXES = ("Timestamp", "Time", "At")


def _is_time_key(key: str) -> bool:
    return key == "time" or key.endswith(_SUFFIXES)


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) < 20 or value[4] != "-" or value[10] != "T":
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def _format(when: datetime, like: str) -> str:
    """``when`` in the shape of ``like``: seconds (metav1.Time) or microseconds (MicroTime)."""
    if "." in like:
        return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _times(node: Any):
    if isinstance(node, Mapping):
        for key, value in node.items():
            if _is_time_key(str(key)):
                parsed = _parse(value)
                if parsed is not None:
                    yield parsed
                    continue
            yield from _times(value)
    elif isinstance(node, list):
        for value in node:
            yield from _times(value)


def moment(doc: Mapping[str, Any]) -> datetime | None:
    """The newest timestamp of the dump's nodes, pods, PodGroups, Jobs and Events (None when
    it has none)."""
    newest = None
    for item in doc.get("items") or ():
        if isinstance(item, Mapping) and item.get("kind") in WORKLOAD_KINDS:
            for when in _times(item):
                if newest is None or when > newest:
                    newest = when
    return newest


def _shift(node: Any, offset: timedelta) -> Any:
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if _is_time_key(str(key)):
                parsed = _parse(value)
                if parsed is not None:
                    out[key] = _format(parsed + offset, value)
                    continue
            out[key] = _shift(value, offset)
        return out
    if isinstance(node, list):
        return [_shift(value, offset) for value in node]
    return node


def redate(doc: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A copy of the List ``doc`` with every timestamp moved by ``now - moment(doc)`` (whole
    seconds); ``doc`` unchanged when it has no timestamps. ``now`` must be timezone-aware."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    then = moment(doc)
    if then is None:
        return dict(doc)
    offset = timedelta(seconds=int((now.astimezone(UTC) - then).total_seconds()))
    return _shift(doc, offset)
