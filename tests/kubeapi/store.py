"""In-memory object store for the fake API server.

Objects are kept per kind in a dict keyed by ``(namespace, name)`` ("" for cluster-scoped), plus a
sorted key list for LIST pagination (kept sorted on single writes, rebuilt once after bulk loads).
Stored dicts are never mutated after they are stored: every write stores a new dict, so a LIST can
serialise a page of stored objects without copying the store.
"""

from __future__ import annotations

import bisect
import threading
import uuid
from datetime import UTC, datetime

from .kinds import KINDS

Key = tuple[str, str]
FieldPath = tuple[str, ...]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.rv = 0
        self.items: dict[str, dict[Key, dict]] = {k.kind: {} for k in KINDS}
        self._keys: dict[str, list[Key]] = {k.kind: [] for k in KINDS}
        self._dirty: set[str] = set()
        # (kind, namespace, name) -> manager -> {"operation": str, "time": str, "fields": set}
        self.owners: dict[tuple[str, str, str], dict[str, dict]] = {}

    def clear(self) -> None:
        """Forget every object; the resourceVersion counter keeps counting up."""
        with self.lock:
            for kind in self.items:
                self.items[kind] = {}
                self._keys[kind] = []
            self._dirty.clear()
            self.owners.clear()

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
            if key not in bucket and kind not in self._dirty:
                bisect.insort(self._keys[kind], key)
            bucket[key] = obj

    def bulk_put(self, kind: str, objs: list[dict]) -> None:
        with self.lock:
            bucket = self.items[kind]
            for obj in objs:
                meta = obj["metadata"]
                bucket[(meta.get("namespace") or "", meta["name"])] = obj
            self._dirty.add(kind)

    def remove(self, kind: str, namespace: str, name: str) -> dict | None:
        key = (namespace, name)
        with self.lock:
            obj = self.items[kind].pop(key, None)
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
