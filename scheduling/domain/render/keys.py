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

from .labels import KIND_ORDER, MANAGER, OWN_QUEUE_SUFFIX

__all__ = [
    "file_name",
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
    Raises ValueError for a kind the renderer does not produce.
    """
    if kind in ("Namespace", "Queue", "PriorityClass"):
        if not owner:
            raise ValueError(f"{kind} name needs an owner")
        return owner
    if kind in ("ResourceQuota", "LimitRange"):
        return MANAGER
    if kind == "Role":
        return f"{MANAGER}-volcano"
    if kind == "RoleBinding":
        if role not in (*ROLES, "volcano"):
            raise ValueError(f"unknown role {role!r}")
        return f"{MANAGER}-{role}"
    raise ValueError(f"fairshare does not render {kind}")


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
    if kind == "Queue":
        return f"cluster/{kind.lower()}-{depth}-{name}.yaml"
    if namespace is None:
        return f"cluster/{base}"
    return f"namespaces/{namespace}/{base}"


def queue_depths(manifests: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Depth of each rendered Queue (0 for the top level) from the manifests' ``spec.parent``."""
    parents = {
        m["metadata"]["name"]: (m.get("spec") or {}).get("parent")
        for m in manifests
        if m.get("kind") == "Queue"
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
    level = (depth or {}).get(name, 0) if kind == "Queue" else 0
    return (KIND_ORDER.get(kind, len(KIND_ORDER)), level, namespace or "", name)
