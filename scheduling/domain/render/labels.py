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
    "CLUSTER_KINDS",
    "KIND_ORDER",
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

# Kueue's queue label (sigs.k8s.io/kueue pkg/controller/constants/constants.go ``QueueLabel``):
# a job names its LocalQueue with it; a job without it gets ``default`` where a LocalQueue of
# that name exists (jobframework/defaults.go ``setDefaultLocalQueue``).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The Cohort every top-level ClusterQueue and Cohort hangs from (a dotted name, so no team slug,
# a DNS label, can ever be it): Kueue refuses borrowing and lending limits on a queue without a
# parent (pkg/webhooks/clusterqueue_webhook.go ``validateLimit``), so Volcano's implicit ``root``
# becomes an explicit root Cohort.
ROOT_COHORT = "fairshare.root"

# Creation order: what other objects refer to comes first (a Queue's parent, a namespace's
# contents, the Role a RoleBinding names). Pruning walks it backwards. Both backends' kinds are
# here; a backend renders only its own (scheduling.domain.backends).
KIND_ORDER: dict[str, int] = {
    "Namespace": 0,
    "PriorityClass": 1,
    "WorkloadPriorityClass": 2,
    "ResourceFlavor": 3,
    "Queue": 4,
    "Cohort": 5,
    "ClusterQueue": 6,
    "ResourceQuota": 7,
    "LimitRange": 8,
    "LocalQueue": 9,
    "Role": 10,
    "RoleBinding": 11,
}

# The hierarchical kinds: rendered per department tree (a targeted sync renders and lists the
# trees it touches), ordered parents first.
QUEUE_KINDS = frozenset({"Queue", "Cohort", "ClusterQueue"})
# Cluster-scoped kinds no team owns: rendered whole, by full syncs only.
CLUSTER_KINDS = frozenset({"PriorityClass", "WorkloadPriorityClass", "ResourceFlavor"})
