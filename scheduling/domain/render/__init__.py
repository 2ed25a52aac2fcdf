"""Desired-state renderer: the tenancy model as Kubernetes manifests (pure).

``render(spec)`` turns a :class:`~scheduling.domain.types.ClusterSpec` into plain dicts ready for
server-side apply (field manager ``fairshare``), every one labelled
``app.kubernetes.io/managed-by: fairshare`` so the planner knows what it may prune.

Package layout (imports point down this list; no module imports one above it):

- :mod:`.labels`: the field manager, labels, annotations, role maps and kind order;
- :mod:`.keys`: object names and keys, export file names, queue depths, the sort order;
- :mod:`.amounts`: the Queues' guarantee, capability and deserved, fitted to the hierarchy;
- :mod:`.manifests`: the per-kind manifest builders (what is rendered, and why so);
- :mod:`.assemble`: ``render()``, checking the spec and assembling the sorted list.

This index re-exports what callers import, so ``from scheduling.domain.render import X`` keeps
working; nothing here reads a name at run time, so patch a name on the module that defines it.
"""

from __future__ import annotations

from .amounts import QueueAmounts, deserved_amounts, queue_amounts
from .assemble import render
from .keys import (
    KUEUE_LOCAL_QUEUE,
    file_name,
    hierarchy_parent,
    leaf_queue_name,
    object_key,
    object_name,
    queue_depths,
    sort_key,
)
from .labels import (
    ANNOTATION_ADOPTED,
    ANNOTATION_QUEUE,
    ANNOTATION_RELEASED,
    CLUSTER_KINDS,
    KIND_ORDER,
    KUEUE_QUEUE_LABEL,
    LABEL_DEPARTMENT,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    LABEL_TIER,
    MANAGER,
    OWN_QUEUE_SUFFIX,
    QUEUE_KINDS,
    RESERVED_QUEUE_NAMES,
    ROLE_CLUSTER_ROLES,
    ROOT_COHORT,
)
from .manifests import limit_range_item

__all__ = [
    "ANNOTATION_ADOPTED",
    "ANNOTATION_QUEUE",
    "ANNOTATION_RELEASED",
    "CLUSTER_KINDS",
    "KIND_ORDER",
    "KUEUE_LOCAL_QUEUE",
    "KUEUE_QUEUE_LABEL",
    "LABEL_DEPARTMENT",
    "LABEL_MANAGED_BY",
    "LABEL_TEAM",
    "LABEL_TIER",
    "MANAGER",
    "OWN_QUEUE_SUFFIX",
    "QUEUE_KINDS",
    "RESERVED_QUEUE_NAMES",
    "ROLE_CLUSTER_ROLES",
    "ROOT_COHORT",
    "QueueAmounts",
    "deserved_amounts",
    "file_name",
    "hierarchy_parent",
    "leaf_queue_name",
    "limit_range_item",
    "object_key",
    "object_name",
    "queue_amounts",
    "queue_depths",
    "render",
    "sort_key",
]
