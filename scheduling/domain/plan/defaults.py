"""The defaults the API server (and Volcano's webhook) add to what we apply.

Before comparing, the desired manifest is defaulted like the API server would default it
(LimitRange items, PriorityClass ``preemptionPolicy``, Queue ``weight``/``reclaimable``), so a
value the server fills in identically is no difference.

Invariant: :func:`server_defaults` never changes its argument (it copies what it defaults).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .fields import value_at

__all__ = ["server_defaults"]


def server_defaults(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``manifest`` with the defaults the API server would add to it (a new dict; nested
    parts that are not defaulted are shared, so treat the result as read-only).

    Only defaults of fields a manifest may set are modelled — the ones that would otherwise make
    a live object look different from what we applied:

    * LimitRange ``type: Container`` items: Kubernetes ``pkg/apis/core/v1/defaults.go``
      ``SetDefaults_LimitRangeItem`` (max → missing default; default → missing defaultRequest;
      min → missing defaultRequest);
    * PriorityClass: ``preemptionPolicy: PreemptLowerPriority`` (``pkg/apis/scheduling/v1/
      defaults.go`` ``SetDefaults_PriorityClass``);
    * Queue: ``reclaimable: true`` and ``weight: 1`` (Volcano ``pkg/webhooks/admission/queues/
      mutate/mutate_queue.go`` ``createQueuePatch``).
    """
    kind = manifest.get("kind")
    if kind not in ("LimitRange", "PriorityClass", "Queue"):
        return dict(manifest)  # nothing defaulted: no copy (the planner only reads it)
    if kind == "LimitRange":
        obj = copy.deepcopy(dict(manifest))
    else:
        obj = dict(manifest)
        if isinstance(obj.get("spec"), Mapping):
            obj["spec"] = dict(obj["spec"])
    if kind == "LimitRange":
        for item in value_at(obj, ("spec", "limits")) or ():
            if isinstance(item, dict) and item.get("type") == "Container":
                default = dict(item.get("default") or {})
                request = dict(item.get("defaultRequest") or {})
                for key, value in (item.get("max") or {}).items():
                    default.setdefault(key, value)
                for key, value in default.items():
                    request.setdefault(key, value)
                for key, value in (item.get("min") or {}).items():
                    request.setdefault(key, value)
                if default:
                    item["default"] = default
                if request:
                    item["defaultRequest"] = request
    elif kind == "PriorityClass":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif kind == "Queue" and isinstance(obj.get("spec"), dict):
        obj["spec"].setdefault("reclaimable", True)
        if not obj["spec"].get("weight"):
            obj["spec"]["weight"] = 1
    return obj
