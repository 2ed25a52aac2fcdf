"""The marks the renderer puts on objects: field manager, labels, annotations, kind order.

Labels: ``app.kubernetes.io/managed-by: fairshare`` on everything; ``fairshare.io/team: <slug>``
on everything a team owns; ``fairshare.io/tier: <name>`` on PriorityClasses and on a team's
Namespace and Queue when it has a tier; ``fairshare.io/department: "true"`` on department Queues.
PriorityClasses carry **no** team label: they belong to the cluster, and the obvious placeholder
``_cluster`` is not even a valid label value (values must start with an alphanumeric).

Invariant: these are the one definition of the names; the planner, the sync, the namespace guard
and the watcher all read them from here (through the package index).
"""

from __future__ import annotations

from quotas.domain.names import OWN_QUEUE_SUFFIX, RESERVED_QUEUE_NAMES

__all__ = [
    "ANNOTATION_ADOPTED",
    "ANNOTATION_QUEUE",
    "ANNOTATION_RELEASED",
    "KIND_ORDER",
    "LABEL_DEPARTMENT",
    "LABEL_MANAGED_BY",
    "LABEL_TEAM",
    "LABEL_TIER",
    "MANAGER",
    "OWN_QUEUE_SUFFIX",
    "RESERVED_QUEUE_NAMES",
    "ROLE_CLUSTER_ROLES",
    "VOLCANO_ROLES",
]

MANAGER = "fairshare"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_TEAM = "fairshare.io/team"
LABEL_TIER = "fairshare.io/tier"
LABEL_DEPARTMENT = "fairshare.io/department"
# Volcano's QueueNameAnnotationKey (volcano.sh/apis pkg/apis/scheduling/v1beta1/labels.go).
ANNOTATION_QUEUE = "scheduling.volcano.sh/queue-name"
# On a Namespace that existed before Fairshare managed it: never deleted (plan releases it).
ANNOTATION_ADOPTED = "fairshare.io/adopted"
# Left on a Namespace Fairshare released (it stays, empty of ours): Fairshare had it before, so
# managing it again is not a take-over (scheduling.namespace_guard).
ANNOTATION_RELEASED = "fairshare.io/released"

ROLE_CLUSTER_ROLES: dict[str, str] = {"lead": "admin", "member": "edit", "viewer": "view"}
VOLCANO_ROLES = ("lead", "member")

# OWN_QUEUE_SUFFIX and RESERVED_QUEUE_NAMES (Volcano creates ``root`` and ``default`` itself; a
# team with one of these slugs would fight the scheduler) come from quotas.domain.names, the one
# definition of the name rules that the entry points validate against too.

# Creation order: what other objects refer to comes first (a Queue's parent, a namespace's
# contents, the Role a RoleBinding names). Pruning walks it backwards.
KIND_ORDER: dict[str, int] = {
    "Namespace": 0,
    "PriorityClass": 1,
    "Queue": 2,
    "ResourceQuota": 3,
    "LimitRange": 4,
    "Role": 5,
    "RoleBinding": 6,
}
