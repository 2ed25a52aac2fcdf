"""Names, keys and order of rendered objects: what each is called, where it is exported to, and
in which order objects are applied.

Invariant: :func:`object_name` is the single place names are decided, and :func:`sort_key` the
single dependency order (Namespaces, PriorityClasses, Queues parents-first, then namespaced
kinds), so the same spec always gives the same list, byte for byte once serialised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduling.domain.types import ROLES, TeamSpec

from .labels import KIND_ORDER, MANAGER, OWN_QUEUE_SUFFIX, QUEUE_KINDS

__all__ = [
    "KUEUE_LOCAL_QUEUE",
    "file_name",
    "hierarchy_parent",
    "leaf_queue_name",
    "object_key",
    "object_name",
    "queue_depths",
    "sort_key",
]


def object_name(kind: str, owner: str = "", role: str = "") -> str:
    """Return ``metadata.name`` for a rendered object; the single place names are decided.

    ``owner`` is the namespace name for a Namespace, the team slug for a Queue and the tier name
    for a PriorityClass; ``role`` (``lead``, ``member``, ``viewer``, ``volcano``) picks the
    RoleBinding.
    The per-namespace singletons (ResourceQuota, LimitRange, the Volcano Role) are all
    ``fairshare``-prefixed so they never collide with objects a team creates itself.
    Kueue's kinds: a ClusterQueue is named like the Queue it stands for, a Cohort after its
    department, a ResourceFlavor and a WorkloadPriorityClass after their owner (flavor, tier);
    the LocalQueue of a namespace is ``default`` (:data:`KUEUE_LOCAL_QUEUE`), and the read-only
    Kueue Role is ``fairshare-kueue`` (``role="kueue"``).
    Raises ValueError for a kind the renderer does not produce.
    """
    if kind in (
        "Namespace",
        "Queue",
        "PriorityClass",
        "ClusterQueue",
        "Cohort",
        "ResourceFlavor",
        "WorkloadPriorityClass",
    ):
        if not owner:
            raise ValueError(f"{kind} name needs an owner")
        return owner
    if kind in ("ResourceQuota", "LimitRange"):
        return MANAGER
    if kind == "LocalQueue":
        return KUEUE_LOCAL_QUEUE
    if kind == "Role":
        return f"{MANAGER}-kueue" if role == "kueue" else f"{MANAGER}-volcano"
    if kind == "RoleBinding":
        if role not in (*ROLES, "volcano", "kueue"):
            raise ValueError(f"unknown role {role!r}")
        return f"{MANAGER}-{role}"
    raise ValueError(f"fairshare does not render {kind}")


# Kueue's DefaultLocalQueueName (pkg/controller/constants/constants.go): a job without the
# ``kueue.x-k8s.io/queue-name`` label is given this queue when a LocalQueue of that name exists in
# its namespace (LocalQueueDefaulting, on by default since Kueue v0.12).
KUEUE_LOCAL_QUEUE = "default"


def hierarchy_parent(manifest: Mapping[str, Any]) -> str | None:
    """The parent a hierarchical object names: a Volcano Queue's ``spec.parent``, a Cohort's
    ``spec.parentName``, a ClusterQueue's ``spec.cohortName``; None for any other kind."""
    field = {"Queue": "parent", "Cohort": "parentName", "ClusterQueue": "cohortName"}.get(
        str(manifest.get("kind"))
    )
    if field is None:
        return None
    parent = (manifest.get("spec") or {}).get(field)
    return str(parent) if parent else None


def leaf_queue_name(team: TeamSpec) -> str:
    """The queue a team's namespaces route to: its own Queue, or ``<slug>.own`` for a
    department (a queue with children takes no jobs)."""
    return f"{team.slug}{OWN_QUEUE_SUFFIX}" if team.is_department else team.slug


def object_key(manifest: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """Return ``(kind, namespace, name)``; namespace is None for cluster-scoped objects."""
    metadata = manifest.get("metadata") or {}
    return (manifest["kind"], metadata.get("namespace") or None, metadata["name"])


def file_name(manifest: Mapping[str, Any], depth: int = 0) -> str:
    """Return a stable relative path for GitOps export, in an order ``kubectl apply -R -f``
    can apply in one pass (it walks the tree in lexical order).

    Cluster-scoped objects go under ``cluster/`` (before ``namespaces/``), Queues numbered by
    their ``depth`` in the hierarchy so a parent comes before its children (Volcano's webhook
    refuses a child whose parent does not exist yet); a namespace's objects under
    ``namespaces/<ns>/``, the Namespace itself first (``00-``), so deleting the folder removes
    all of it: ``cluster/priorityclass-production.yaml``, ``cluster/queue-1-cv-team.yaml``,
    ``namespaces/ml/00-namespace-ml.yaml``, ``namespaces/ml/resourcequota-fairshare.yaml``.
    """
    kind, namespace, name = object_key(manifest)
    base = f"{kind.lower()}-{name}.yaml"
    if kind == "Namespace":
        return f"namespaces/{name}/00-{base}"
    if kind in QUEUE_KINDS:
        return f"cluster/{kind.lower()}-{depth}-{name}.yaml"
    if namespace is None:
        return f"cluster/{base}"
    return f"namespaces/{namespace}/{base}"


def queue_depths(manifests: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Depth of each rendered Queue, Cohort and ClusterQueue (0 for the top level) from the
    parent each names (:func:`hierarchy_parent`). Names are unique across these kinds: a
    department's Cohort is its slug, its ClusterQueue ``<slug>.own``."""
    parents = {
        m["metadata"]["name"]: hierarchy_parent(m)
        for m in manifests
        if m.get("kind") in QUEUE_KINDS
    }
    depths: dict[str, int] = {}
    for name in parents:
        depth, current = 0, parents[name]
        while current and depth <= len(parents):
            depth, current = depth + 1, parents.get(current)
        depths[name] = depth
    return depths


def sort_key(
    manifest: Mapping[str, Any], depth: Mapping[str, int] | None = None
) -> tuple[int, int, str, str]:
    """Dependency-order sort key: kind rank, queue depth (parents first), namespace, name.

    ``depth`` maps queue names to their distance from the root; unknown kinds sort last.
    """
    kind, namespace, name = object_key(manifest)
    level = (depth or {}).get(name, 0) if kind in QUEUE_KINDS else 0
    return (KIND_ORDER.get(kind, len(KIND_ORDER)), level, namespace or "", name)
