"""Defaulting the fake API server applies to an object before validating and storing it.

Each function follows the upstream function it names (kubernetes/kubernetes):

* :func:`namespace` — ``pkg/apis/core/v1/defaults.go`` ``SetDefaults_Namespace``: the label
  ``kubernetes.io/metadata.name: <name>`` (set on every create and update);
* :func:`limit_range` — ``pkg/apis/core/v1/defaults.go`` ``SetDefaults_LimitRangeItem``: for a
  ``type: Container`` item, ``max`` fills a missing ``default``, ``default`` a missing
  ``defaultRequest``, and ``min`` a missing ``defaultRequest``;
* :func:`priority_class` — ``pkg/apis/scheduling/v1/defaults.go`` ``SetDefaults_PriorityClass``:
  ``preemptionPolicy: PreemptLowerPriority``.

Fields filled in by defaulting have no field manager: server-side apply does not count them as
anyone's, which is why a client that compares whole objects sees them as differences.
"""

from __future__ import annotations

from typing import Any

LABEL_METADATA_NAME = "kubernetes.io/metadata.name"


def namespace(obj: dict[str, Any]) -> None:
    meta = obj.setdefault("metadata", {})
    if meta.get("name"):
        labels = meta.get("labels") or {}
        meta["labels"] = {**labels, LABEL_METADATA_NAME: meta["name"]}


def limit_range(obj: dict[str, Any]) -> None:
    for item in (obj.get("spec") or {}).get("limits") or ():
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = dict(item.get("default") or {})
        request = dict(item.get("defaultRequest") or {})
        for key, value in (item.get("max") or {}).items():
            default.setdefault(key, value)
        for key, value in default.items():
            request.setdefault(key, value)
        for key, value in (item.get("min") or {}).items():
            request.setdefault(key, value)
        # Go keeps the (empty) maps; they serialise as omitted (omitempty), as here.
        if default:
            item["default"] = default
        if request:
            item["defaultRequest"] = request


def priority_class(obj: dict[str, Any]) -> None:
    if obj.get("preemptionPolicy") is None:
        obj["preemptionPolicy"] = "PreemptLowerPriority"


BY_KIND = {"Namespace": namespace, "LimitRange": limit_range, "PriorityClass": priority_class}


def apply(kind: str, obj: dict[str, Any]) -> None:
    """Default ``obj`` (a ``kind``) in place."""
    fn = BY_KIND.get(kind)
    if fn is not None:
        fn(obj)
