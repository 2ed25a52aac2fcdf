"""Protected namespaces and the names that cannot break the sync (services).

The rules themselves are pure (:mod:`quotas.domain.names`); this module adds what the
installation configures: ``FAIRSHARE_PROTECTED_NAMESPACES`` (glob patterns, default ``kube-*``,
``default``, ``volcano-*``, ``kueue-*``) and ``FAIRSHARE_NAMESPACE`` (the namespace Fairshare runs
in, found from ``POD_NAMESPACE`` or the service account's namespace file when in-cluster).

Every entry point reaches these through the models' validation (``full_clean()``, which the API,
the Django admin, the management commands and the services all call) and the renderer is handed
the same patterns, so a protected namespace that is in the database anyway (written before the
rule, or by a raw SQL fix) is still never written into.

A namespace that exists in the cluster and is labelled ``app.kubernetes.io/managed-by`` with
another manager's name is refused where the sync sees the live object
(:func:`foreign_manager`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from quotas.domain.names import (
    DEFAULT_PROTECTED_NAMESPACES,
    protected_by,
)

MANAGED_BY = "app.kubernetes.io/managed-by"
FAIRSHARE = "fairshare"


def protected_namespace_patterns() -> tuple[str, ...]:
    """The configured patterns, plus the namespace Fairshare runs in."""
    configured = getattr(settings, "FAIRSHARE_PROTECTED_NAMESPACES", DEFAULT_PROTECTED_NAMESPACES)
    patterns = list(configured)
    own = getattr(settings, "FAIRSHARE_NAMESPACE", "")
    if own:
        patterns.append(own)
    return tuple(patterns)


def namespace_refusal(name: str) -> str | None:
    """Why Fairshare may not manage the namespace ``name`` (the rule named), or None."""
    own = getattr(settings, "FAIRSHARE_NAMESPACE", "")
    if own and name == own:
        return (
            f"{name!r} is the namespace Fairshare itself runs in (FAIRSHARE_NAMESPACE / "
            "POD_NAMESPACE): it is protected, and Fairshare never writes into it."
        )
    pattern = protected_by(name, protected_namespace_patterns())
    if pattern is not None:
        return (
            f"{name!r} is a protected namespace (it matches {pattern!r} in "
            "FAIRSHARE_PROTECTED_NAMESPACES): Fairshare never manages, writes into or binds "
            "anyone in it."
        )
    return None


def foreign_manager(live_namespace: Mapping[str, Any] | None) -> str | None:
    """Why a live Namespace object belongs to another manager (its ``managed-by`` label names
    someone else), or None. Fairshare does not take such a namespace over, adopted or not."""
    if not live_namespace:
        return None
    labels = (live_namespace.get("metadata") or {}).get("labels") or {}
    manager = labels.get(MANAGED_BY)
    if manager and manager != FAIRSHARE:
        name = (live_namespace.get("metadata") or {}).get("name", "")
        return (
            f"namespace {name!r} is labelled {MANAGED_BY}={manager}: it belongs to another "
            "manager, and Fairshare never writes into it."
        )
    return None
