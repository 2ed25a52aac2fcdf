"""Reading the cluster: our labelled objects for sync, nodes and pods for the usage collector.

Every LIST is paginated (``limit``/``continue``) and parsed into plain dicts. Retrying is the
caller's choice: wrap a whole listing in ``apply.call_with_retry`` so a failure halfway through
starts the listing again instead of mixing pages from two attempts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client as k8s_client

from .client import kind_info, request_json

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=fairshare"


def list_raw(
    api_client: k8s_client.ApiClient,
    path: str,
    *,
    page_size: int = 500,
    params: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield the items of the collection at ``path``, one LIST request per page.

    ``params`` go on the first request (``labelSelector``, ``fieldSelector``,
    ``resourceVersion="0"`` to read from the API server's cache). Follow-up pages send only the
    continue token and the selectors, as the API server requires.
    """
    first: dict[str, Any] = {**(params or {}), "limit": page_size}
    follow = {
        k: v for k, v in first.items() if k not in ("resourceVersion", "resourceVersionMatch")
    }
    query = first
    while True:
        page = request_json(api_client, "GET", path, query=query)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return
        query = {**follow, "continue": token}


def list_managed(
    api_client: k8s_client.ApiClient,
    kind: str,
    *,
    label_selector: str = MANAGED_SELECTOR,
    page_size: int = 500,
) -> list[dict[str, Any]]:
    """Return every ``kind`` object matching ``label_selector``, across all namespaces.

    Items carry ``apiVersion`` and ``kind`` (the API server leaves them out of list items).
    Raises ValueError for a kind we do not manage, K8sError subclasses for API failures.
    """
    info = kind_info(kind)
    items = []
    for item in list_raw(
        api_client, info.path(), page_size=page_size, params={"labelSelector": label_selector}
    ):
        item.setdefault("apiVersion", info.api_version)
        item.setdefault("kind", info.kind)
        items.append(item)
    return items


def managed_in_dump(path: str) -> list[dict[str, Any]]:
    """The managed objects of a ``kubectl get ... -o json`` dump (snapshot mode's live state).

    The same objects ``list_managed`` would return from a cluster holding the dump: every item
    of a managed kind carrying ``MANAGED_SELECTOR``'s label. Raises OSError or ValueError for a
    file that cannot be read or is not a Kubernetes List.
    """
    import json

    from .client import KINDS

    with open(path, "rb") as fh:
        doc = json.load(fh)
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{path} is not a Kubernetes List")
    key, _, value = MANAGED_SELECTOR.partition("=")
    return [
        item
        for item in items
        if isinstance(item, dict)
        and item.get("kind") in KINDS
        and ((item.get("metadata") or {}).get("labels") or {}).get(key) == value
    ]
