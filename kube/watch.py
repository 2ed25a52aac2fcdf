"""Watching the cluster: a reflector for our labelled objects (list, then watch, re-list on 410).

Modelled on client-go's ``tools/cache/reflector.go`` (``ListAndWatch``):

1. LIST the kind with our label selector; remember the list's ``resourceVersion`` and replace
   the local store with the items (objects that were in the store and are not in the list
   were deleted while nobody watched: reported as deleted, as ``DeltaFIFO.Replace`` does);
2. WATCH from that ``resourceVersion`` with ``allowWatchBookmarks=true`` and a
   ``timeoutSeconds``; every event moves the ``resourceVersion`` on, and so does a
   ``BOOKMARK`` (it carries only the version);
3. when the stream ends (timeout, closed connection) watch again from the last version;
4. when the server answers ``410 Gone`` / ``Expired`` — an ``ERROR`` event with a 410 Status,
   or an HTTP 410 to the watch request — the version is too old: LIST again (step 1), not a
   crash; other failures back off and retry.

Events are handed to callbacks as plain dicts; the caller decides what drift is.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from .client import kind_info, request_json
from .errors import K8sError, translated
from .observe import MANAGED_SELECTOR

log = logging.getLogger(__name__)

Key = tuple[str | None, str]
EventHandler = Callable[[str, dict[str, Any], "dict[str, Any] | None"], None]


class Expired(Exception):
    """The watch's resourceVersion is older than the server's history (410): re-list."""


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or None, str(meta.get("name")))


def list_with_version(
    api_client: k8s_client.ApiClient, kind: str, *, label_selector: str, page_size: int = 500
) -> tuple[list[dict[str, Any]], str]:
    """LIST every page; return the items (with apiVersion/kind) and the list's resourceVersion."""
    info = kind_info(kind)
    query: dict[str, Any] = {"labelSelector": label_selector, "limit": page_size}
    items: list[dict[str, Any]] = []
    version = ""
    while True:
        page = request_json(api_client, "GET", info.path(), query=query)
        meta = page.get("metadata") or {}
        version = version or str(meta.get("resourceVersion") or "")
        for item in page.get("items") or []:
            item.setdefault("apiVersion", info.api_version)
            item.setdefault("kind", info.kind)
            items.append(item)
        token = meta.get("continue")
        if not token:
            return items, version
        query = {"labelSelector": label_selector, "limit": page_size, "continue": token}


def stream_watch(
    api_client: k8s_client.ApiClient,
    kind: str,
    *,
    resource_version: str,
    label_selector: str = MANAGED_SELECTOR,
    timeout_seconds: int = 300,
) -> Iterator[dict[str, Any]]:
    """Yield the watch events (``{"type", "object"}``) of one watch request until it ends.

    Raises Expired for a 410 (as an ERROR event or as the HTTP status), K8sError otherwise.
    """
    info = kind_info(kind)
    params = [
        ("watch", "true"),
        ("labelSelector", label_selector),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(timeout_seconds)),
    ]
    if resource_version:
        params.append(("resourceVersion", resource_version))
    request = api_client.param_serialize(
        method="GET",
        resource_path=info.path(),
        query_params=params,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    where = f"WATCH {api_client.configuration.host}{info.path()}"
    # The read timeout outlasts the server's: a quiet stream still gets bookmarks.
    with translated(where):
        try:
            response = api_client.call_api(*request, _request_timeout=(5.0, timeout_seconds + 30.0))
        except ApiException as e:
            if e.status == 410:
                raise Expired(f"{where}: 410 Gone") from e
            raise
        if not 200 <= response.status <= 299:
            body = response.read().decode("utf-8", "replace")
            if response.status == 410:
                raise Expired(f"{where}: 410 Gone: {body[:200]}")
            raise ApiException.from_response(http_resp=response, body=body, data=None)
        raw = response.response
        buffer = b""
        try:
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        _raise_for_error(event, where)
                        yield event
            if buffer.strip():
                event = json.loads(buffer)
                _raise_for_error(event, where)
                yield event
        finally:
            raw.release_conn()


def _raise_for_error(event: dict[str, Any], where: str) -> None:
    if event.get("type") != "ERROR":
        return
    status = event.get("object") or {}
    if status.get("code") == 410 or status.get("reason") in ("Expired", "Gone"):
        raise Expired(f"{where}: {status.get('message') or '410 Gone'}")
    raise K8sError(
        f"{where}: watch error {status.get('code')}: {status.get('message')}",
        status=status.get("code"),
        reason=str(status.get("reason") or ""),
    )


@dataclass
class Reflector:
    """List-and-watch of one kind; calls ``on_event(type, obj, old)`` for every change.

    ``type`` is ADDED / MODIFIED / DELETED. A (re-)list reports what changed since the store
    was last filled: new or changed objects as ADDED/MODIFIED, missing ones as DELETED (the
    very first list reports everything as ADDED). ``lists`` and ``expired`` count re-lists and
    410s (for tests and logs).
    """

    api_client: k8s_client.ApiClient
    kind: str
    on_event: EventHandler
    label_selector: str = MANAGED_SELECTOR
    timeout_seconds: int = 300
    backoff: float = 1.0
    resource_version: str = ""
    store: dict[Key, dict[str, Any]] = field(default_factory=dict)
    lists: int = 0
    expired: int = 0

    def list(self) -> None:
        """Step 1: LIST, replace the store, report the differences."""
        items, version = list_with_version(
            self.api_client, self.kind, label_selector=self.label_selector
        )
        self.lists += 1
        fresh = {_key(obj): obj for obj in items}
        old, self.store = self.store, fresh
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self.on_event("ADDED", obj, None)
            elif _version(before) != _version(obj):
                self.on_event("MODIFIED", obj, before)
        for key, obj in old.items():
            if key not in fresh:
                self.on_event("DELETED", obj, obj)
        self.resource_version = version

    def watch_once(self) -> None:
        """Steps 2–3: one watch request from the current version, until the stream ends.

        Raises Expired (410) and K8sError.
        """
        for event in stream_watch(
            self.api_client,
            self.kind,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            timeout_seconds=self.timeout_seconds,
        ):
            kind = event.get("type")
            obj = event.get("object") or {}
            version = _version(obj)
            if kind == "BOOKMARK":
                self.resource_version = version or self.resource_version
                continue
            obj.setdefault("kind", self.kind)
            key = _key(obj)
            before = self.store.get(key)
            if kind == "DELETED":
                self.store.pop(key, None)
            else:
                self.store[key] = obj
            self.resource_version = version or self.resource_version
            self.on_event(str(kind), obj, before)

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set (step 4: re-list after 410, back off on
        errors). Never raises for API failures; logs them."""
        while not stop.is_set():
            try:
                if not self.resource_version:
                    self.list()
                self.watch_once()
            except Expired as e:
                self.expired += 1
                log.info("watch of %s expired (%s); re-listing", self.kind, e)
                self.resource_version = ""
            except (K8sError, ValueError, OSError) as e:
                log.warning("watch of %s failed: %s; retrying in %.1fs", self.kind, e, self.backoff)
                stop.wait(self.backoff)


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
