"""Watch-driven drift repair (service): watch the managed kinds, sync the teams that drifted.

``DriftWatcher`` runs one :class:`~kube.watch.Reflector` per managed kind (our label
selector, resourceVersion, bookmarks, re-list after 410) and turns what it sees into targeted
syncs:

* a managed object DELETED (by hand, or by a namespace deletion) → its team is dirty;
* an object ADDED or MODIFIED whose owned fields differ from its ``fairshare.io/last-applied``
  annotation (``sync.drifted_fields``: someone edited it behind Fairshare's back) → dirty;
  Fairshare's own applies leave the object equal to the annotation, so they start nothing;
* an object without a team label (a PriorityClass) → a full sync is due.

Dirty teams are coalesced and flushed at most once per ``interval`` seconds as one
``start_sync(teams=...)`` (trigger ``watch``); the sync's single flight merges whatever
arrives while one runs. A (re-)list checks every object the same way, and objects that
vanished while nobody watched count as deleted. The scheduled full sync stays the source of
truth.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kube.watch import Reflector
from scheduling.domain.render import LABEL_TEAM

log = logging.getLogger(__name__)

StartSync = Callable[..., Any]


class DriftWatcher:
    """Watches the cluster and requests targeted syncs for drift (see the module docstring)."""

    def __init__(
        self,
        api_client: Any,
        *,
        interval: float = 1.0,
        kinds: Iterable[str] | None = None,
        start: StartSync | None = None,
        timeout_seconds: int = 300,
    ) -> None:
        from scheduling.backend import current_backend
        from scheduling.sync import start_sync

        if kinds is None:
            kinds = current_backend().kinds

        self.api_client = api_client
        self.interval = interval
        self.start = start or start_sync
        self.reflectors = [
            Reflector(api_client, kind, self.on_event, timeout_seconds=timeout_seconds)
            for kind in kinds
        ]
        self._lock = threading.Lock()
        self._teams: set[str] = set()
        self._full = False
        self._last_flush = 0.0
        self.requested: list[dict[str, Any]] = []  # what was started (logs, tests)

    def on_event(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        from scheduling.sync import drifted_fields

        if event == "DELETED":
            why = "deleted"
        elif event in ("ADDED", "MODIFIED") and drifted_fields(obj):
            why = "edited"
        else:
            return
        meta = obj.get("metadata") or {}
        team = (meta.get("labels") or {}).get(LABEL_TEAM)
        log.info(
            "drift: %s %s/%s %s (team %s)",
            obj.get("kind"),
            meta.get("namespace") or "-",
            meta.get("name"),
            why,
            team or "none",
        )
        with self._lock:
            if team:
                self._teams.add(str(team))
            else:
                self._full = True

    def flush(self, *, now: float | None = None) -> dict[str, Any] | None:
        """Start one sync for everything dirty, at most once per ``interval``; return what
        was requested (None when nothing was due)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not (self._teams or self._full) or now - self._last_flush < self.interval:
                return None
            request: dict[str, Any] = (
                {"trigger": "watch"}
                if self._full
                else {"trigger": "watch", "teams": sorted(self._teams)}
            )
            self._teams.clear()
            self._full = False
            self._last_flush = now
        try:
            self.start(**request)
        except Exception:
            log.exception("could not start the repair sync %s", request)
            raise
        self.requested.append(request)
        return request

    def run(self, stop: threading.Event, *, tick: float = 0.05) -> None:
        """Run every reflector in its own thread and flush until ``stop`` is set."""
        threads = [
            threading.Thread(target=r.run, args=(stop,), name=f"watch:{r.kind}", daemon=True)
            for r in self.reflectors
        ]
        for thread in threads:
            thread.start()
        try:
            while not stop.wait(tick):
                self._flush_safely()
            self._flush_safely()
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=5)

    def _flush_safely(self) -> None:
        from django.db import close_old_connections

        try:
            self.flush()
        except Exception:  # logged in flush; the watcher keeps running
            close_old_connections()
