"""Writing to the cluster: server-side apply with field manager ``fairshare``, delete, retries."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client as k8s_client

from .client import kind_info, request_json
from .errors import K8sConflict, K8sTransient

log = logging.getLogger(__name__)

T = TypeVar("T")
FIELD_MANAGER = "fairshare"


def _target(manifest: dict[str, Any]) -> tuple[str, str | None, str]:
    info = kind_info(str(manifest.get("kind")))
    if manifest.get("apiVersion") != info.api_version:
        raise ValueError(
            f"{info.kind} must have apiVersion {info.api_version}, got {manifest.get('apiVersion')}"
        )
    meta = manifest.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not name:
        raise ValueError(f"{info.kind} manifest has no metadata.name")
    if info.namespaced and not namespace:
        raise ValueError(f"{info.kind} {name!r} is namespaced but has no metadata.namespace")
    if not info.namespaced and namespace:
        raise ValueError(f"{info.kind} {name!r} is cluster-scoped but has metadata.namespace")
    return info.path(namespace, name), namespace, name


def server_side_apply(
    api_client: k8s_client.ApiClient,
    manifest: dict[str, Any],
    *,
    field_manager: str = FIELD_MANAGER,
    dry_run: bool = False,
    force: bool = True,
    result: bool = True,
) -> dict[str, Any]:
    """Apply ``manifest`` (create or update) and return the object as the server now has it
    (``{}`` when not ``result``: the answer is not decoded).

    With ``dry_run`` the server validates and answers but stores nothing. ``force`` takes over
    fields another manager owns (Fairshare is the source of truth for the fields it renders).
    Raises ValueError for a malformed manifest, K8sError subclasses for API failures
    (K8sPermanent with ``causes`` for a 422).
    """
    path, _, _ = _target(manifest)
    query = {
        "fieldManager": field_manager,
        "force": "true" if force else None,
        "dryRun": "All" if dry_run else None,
    }
    return request_json(
        api_client,
        "PATCH",
        path,
        query=query,
        body=manifest,
        content_type="application/apply-patch+yaml",
        parse=result,
    )


def delete(
    api_client: k8s_client.ApiClient,
    kind: str,
    name: str,
    namespace: str | None = None,
    *,
    dry_run: bool = False,
    live: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Delete one object (dependents in the background) and return the server's answer.

    ``live``: the object as observed when the delete was decided (a prune). The request then
    carries its ``uid`` and ``resourceVersion`` as DeleteOptions preconditions, so an object
    deleted and recreated since, or changed since, is not deleted: the API server answers 409
    (K8sConflict; apimachinery ``pkg/registry/generic/registry/store.go``, ``Delete`` checks
    ``options.Preconditions`` against the stored object).
    Raises K8sNotFound if it is already gone (callers pruning may treat that as done).
    """
    info = kind_info(kind)
    if info.namespaced and not namespace:
        raise ValueError(f"{kind} {name!r} is namespaced: pass namespace")
    query = {"propagationPolicy": "Background", "dryRun": "All" if dry_run else None}
    options = delete_preconditions(live)
    if options is None:
        return request_json(api_client, "DELETE", info.path(namespace, name), query=query)
    return request_json(api_client, "DELETE", info.path(namespace, name), query=query, body=options)


def delete_preconditions(live: dict[str, Any] | None) -> dict[str, Any] | None:
    """The DeleteOptions body that deletes ``live`` only if it is still that object, unchanged
    (None when ``live`` has neither a uid nor a resourceVersion)."""
    meta = (live or {}).get("metadata") or {}
    preconditions = {
        key: str(meta[key]) for key in ("uid", "resourceVersion") if meta.get(key) not in (None, "")
    }
    if not preconditions:
        return None
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}


def call_with_retry(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base_delay: float = 0.2,
    max_delay: float = 10.0,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """Call ``fn`` until it succeeds, retrying only what retrying can fix.

    1. K8sTransient: wait and try again, at most ``attempts`` calls in all. The wait doubles from
       ``base_delay``; a server's Retry-After replaces it when longer. Every wait is capped at
       ``max_delay`` so a worker is never parked for long.
    2. K8sConflict: try again once at once (the object changed between read and write).
    3. Anything else (K8sPermanent, K8sNotFound, ...) propagates immediately.
    The last error is re-raised when the attempts run out.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    failures = 0
    conflict_retried = False
    while True:
        try:
            return fn()
        except K8sConflict as e:
            if conflict_retried:
                raise
            conflict_retried = True
            log.info("retrying once after a conflict: %s", e)
        except K8sTransient as e:
            failures += 1
            if failures >= attempts:
                raise
            delay = base_delay * 2 ** (failures - 1)
            if e.retry_after is not None:
                delay = max(delay, e.retry_after)
            delay = min(delay, max_delay)
            log.warning(
                "transient Kubernetes error (attempt %d of %d), retrying in %.2fs: %s",
                failures,
                attempts,
                delay,
                e,
            )
            sleep(delay)
