"""In-memory object store for the fake API server.

Objects are kept per kind in a dict keyed by ``(namespace, name)`` ("" for cluster-scoped), plus a
sorted key list for LIST pagination (kept sorted on single writes, rebuilt once after bulk loads).
Stored dicts are never mutated after they are stored: every write stores a new dict, so a LIST can
serialise a page of stored objects without copying the store.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

from .kinds import KINDS

Key = tuple[str, str]
FieldPath = tuple[str, ...]


_NOW: tuple[int, str] = (0, "")


def now() -> str:
    """The current time as metav1.Time marshals it: RFC 3339, whole seconds, UTC
    (k8s.io/apimachinery/pkg/apis/meta/v1/time.go ``Time.MarshalJSON``)."""
    global _NOW
    second = int(time.time())
    if _NOW[0] != second:
        # Formatted once a second: a burst of writes stamps thousands of objects with it.
        _NOW = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _NOW[1]


# How many events the watch history keeps, like the API server's watch cache
# (k8s.io/apiserver/pkg/storage/cacher/watch_cache.go: a ring buffer of recent events; a watch
# from a resourceVersion older than its oldest event is answered "410 Gone").
HISTORY_SIZE = 10_000


@dataclass(frozen=True)
class Event:
    """One change of one object: ``type`` ADDED / MODIFIED / DELETED at ``rv``; ``prev`` is
    the object before the change (None for ADDED), as the watch cache keeps it."""

    rv: int
    type: str
    kind: str
    obj: dict
    prev: dict | None


class Store:
    def __init__(self, history_size: int = HISTORY_SIZE) -> None:
        self.lock = threading.RLock()
        # Watchers wait on this for new events (and for clear(), which ends their streams).
        self.changed = threading.Condition(self.lock)
        self.history: deque[Event] = deque(maxlen=history_size)
        # Events at or below this resourceVersion are no longer in the history.
        self.compacted_rv = 0
        self.generation = 0
        self.rv = 0
        self.items: dict[str, dict[Key, dict]] = {k.kind: {} for k in KINDS}
        self._keys: dict[str, list[Key]] = {k.kind: [] for k in KINDS}
        self._dirty: set[str] = set()
        # (kind, namespace, name) -> manager -> {"operation": str, "time": str, "fields": set}
        self.owners: dict[tuple[str, str, str], dict[str, dict]] = {}

    def clear(self) -> None:
        """Forget every object; the resourceVersion counter keeps counting up. Open watches
        end, and the history is compacted (a watch from an older version gets 410)."""
        with self.lock:
            for kind in self.items:
                self.items[kind] = {}
                self._keys[kind] = []
            self._dirty.clear()
            self.owners.clear()
            self.generation += 1
            self.compact()

    def compact(self) -> None:
        """Drop the whole event history, as etcd compaction does: a watch must re-list."""
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv
            self.changed.notify_all()

    def _record(self, type_: str, kind: str, obj: dict, prev: dict | None) -> None:
        """Append an event (caller holds ``lock``) and wake the watchers."""
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(Event(int(obj["metadata"]["resourceVersion"]), type_, kind, obj, prev))
        self.changed.notify_all()

    def next_rv(self) -> str:
        with self.lock:
            self.rv += 1
            return str(self.rv)

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.items[kind].get((namespace, name))

    def put(self, kind: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        with self.lock:
            bucket = self.items[kind]
            prev = bucket.get(key)
            if prev is None and kind not in self._dirty:
                bisect.insort(self._keys[kind], key)
            bucket[key] = obj
            if prev is None or prev.get("metadata", {}).get("resourceVersion") != meta.get(
                "resourceVersion"
            ):
                self._record("ADDED" if prev is None else "MODIFIED", kind, obj, prev)

    def bulk_put(self, kind: str, objs: list[dict]) -> None:
        with self.lock:
            bucket = self.items[kind]
            for obj in objs:
                meta = obj["metadata"]
                bucket[(meta.get("namespace") or "", meta["name"])] = obj
            self._dirty.add(kind)
            # A bulk load is not streamed: watchers from before it must re-list.
            self.compact()

    def remove(self, kind: str, namespace: str, name: str) -> dict | None:
        key = (namespace, name)
        with self.lock:
            obj = self.items[kind].pop(key, None)
            if obj is not None:
                # The DELETED event carries the last state at the deletion's resourceVersion.
                gone = {**obj, "metadata": {**obj["metadata"], "resourceVersion": self.next_rv()}}
                self._record("DELETED", kind, gone, obj)
            if obj is not None and kind not in self._dirty:
                keys = self._keys[kind]
                i = bisect.bisect_left(keys, key)
                if i < len(keys) and keys[i] == key:
                    del keys[i]
            self.owners.pop((kind, namespace, name), None)
            return obj

    def keys(self, kind: str) -> list[Key]:
        """The sorted keys of ``kind``; callers must hold ``lock`` while they use the list."""
        if kind in self._dirty:
            self._keys[kind] = sorted(self.items[kind])
            self._dirty.discard(kind)
        return self._keys[kind]

    def stamp(self, obj: dict) -> dict:
        """Give a new object its server-set metadata (uid, resourceVersion, creationTimestamp)."""
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self.next_rv()
        return obj
