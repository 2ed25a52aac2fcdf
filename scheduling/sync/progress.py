"""A run's progress: ``done``/``total``/``heartbeat_at`` written now and then (what the UI's
progress bar and the stale-run reaper read), the single-flight lock extended with each write."""

from __future__ import annotations

import time

from django.utils import timezone

from scheduling.choices import SyncStatus
from scheduling.models import SyncRun
from scheduling.sync.flight import RedisLock

PROGRESS_INTERVAL = 2.0  # seconds between progress/heartbeat writes


class Progress:
    """Writes ``done``/``total``/``heartbeat_at`` to the run now and then, extending the lock."""

    def __init__(self, run: SyncRun, lock: RedisLock | None) -> None:
        self.run = run
        self.lock = lock
        self.total = 0
        self.done = 0
        self._last = time.monotonic()

    def start(self, total: int) -> None:
        self.total = total
        self._write()

    def step(self) -> None:
        self.done += 1
        if time.monotonic() - self._last >= PROGRESS_INTERVAL:
            self._write()

    def beat(self) -> None:
        if time.monotonic() - self._last >= PROGRESS_INTERVAL:
            self._write()

    def _write(self) -> None:
        self._last = time.monotonic()
        if self.lock is not None:
            self.lock.refresh()
        SyncRun.objects.filter(pk=self.run.pk, status=SyncStatus.RUNNING).update(
            total=self.total, done=self.done, heartbeat_at=timezone.now()
        )
