"""Running the writers: the plan's waves applied by a pool of writer threads, server-side apply
and delete retried per object, admission-webhook denials tried again after the rest of their
wave, Namespaces routed to a new Queue only once it is Open. One ``Outcome`` per object.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from kube.apply import call_with_retry, delete, server_side_apply
from kube.errors import K8sError, K8sNotFound, K8sTransient, is_webhook_denial
from kube.observe import list_managed
from scheduling.choices import SyncAction
from scheduling.domain.plan import (
    Change,
    FieldDiff,
    Step,
    apply_waves,
)
from scheduling.sync import planning
from scheduling.sync.planning import drift_of, readable_diff
from scheduling.sync.progress import Progress

log = logging.getLogger(__name__)

T = TypeVar("T")


# Three objects in a row without any HTTP answer (after retries) means the API server is gone,
# not that one object is slow: stop instead of waiting out every remaining object.
UNREACHABLE_AFTER = 3
PROGRESS_INTERVAL = 2.0  # seconds between progress/heartbeat writes


# --------------------------------------------------------------------------- applying


@dataclass
class Outcome:
    change: Change
    action: str
    drift: bool = False
    diff: str = ""
    error: str = ""
    attempts: int = 0
    drifted: tuple[FieldDiff, ...] = ()
    described: bool = False

    def describe(self) -> None:
        """Fill in ``diff``, the change as the run's log shows it (once)."""
        if not self.described:
            self.described = True
            if self.change.op != "unchanged":
                self.diff = readable_diff(self.change, self.drifted)


@dataclass
class _Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    no_answer_streak: int = 0
    applied: int = 0


def _attempted(fn: Callable[[], T], outcome: Outcome) -> Callable[[], T]:
    def call() -> T:
        outcome.attempts += 1
        return fn()

    return call


def _execute(api_client: Any, step: Step, outcome: Outcome) -> None:
    """Carry out one write of a change; raise K8sError or ValueError on failure."""

    def retry(fn: Callable[[], Any]) -> Any:
        return call_with_retry(_attempted(fn, outcome), attempts=planning.RETRY_ATTEMPTS)

    change = step.change
    if step.action == "delete":
        # A prune of something already gone is done; so is the delete half of a replace.
        with contextlib.suppress(K8sNotFound):
            # A prune deletes the object it observed, not one recreated since (preconditions).
            live = change.body if change.op == "prune" else None
            retry(lambda: delete(api_client, change.kind, change.name, change.namespace, live=live))
        return
    body = step.body or {}
    retry(lambda: server_side_apply(api_client, body, result=False))


class NotRouted(K8sError):
    """A Namespace kept its old queue-name annotation: the Queue it should name is not Open."""


def _wait_until_open(api_client: Any, names: set[str]) -> dict[str, str | None]:
    """Poll the managed Queues (one LIST per round) until each of ``names`` reports
    ``status.state: Open``, bounded by ``FAIRSHARE_SYNC_ROUTE_WAIT`` seconds (default 10; the
    pause doubles from 0.05 s to 0.5 s). Return the Queues that did not open: name → state
    (None: the Queue does not exist). Volcano's queue controller opens a new Queue some time
    after it is created (``pkg/controllers/queue/queue_controller_action.go`` ``openQueue``)."""
    limit = float(getattr(settings, "FAIRSHARE_SYNC_ROUTE_WAIT", 10.0))
    deadline = time.monotonic() + limit
    delay = 0.05
    while True:
        queues = call_with_retry(
            lambda: list_managed(api_client, "Queue"), attempts=planning.RETRY_ATTEMPTS
        )
        states = {
            q["metadata"]["name"]: str((q.get("status") or {}).get("state") or "") for q in queues
        }
        closed = {name: states.get(name) for name in names if states.get(name) != "Open"}
        if not closed or time.monotonic() + delay > deadline:
            return closed
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _not_routed(name: str, state: str | None, *, failed: bool = False) -> NotRouted:
    limit = float(getattr(settings, "FAIRSHARE_SYNC_ROUTE_WAIT", 10.0))
    seen = "does not exist" if state is None else f"is {state or 'not opened yet'}"
    if failed:
        seen, limit = "could not be written in this run", 0.0
    return NotRouted(
        f"Kept the old scheduling.volcano.sh/queue-name: Queue {name} {seen}"
        + (f" after {limit:g} s" if limit else "")
        + ", "
        "and Volcano denies a PodGroup in a queue that is not Open (validate_podgroup.go). "
        "The next sync routes the namespace once the Queue is Open."
    )


def _write_unit(api_client: Any, unit: Sequence[Step], outcome: Outcome) -> list[Exception | None]:
    """Carry out a unit's writes in order (in a writer thread: HTTP only, no database); one
    result per write attempted, None for success, and nothing after the first failure."""
    results: list[Exception | None] = []
    for step in unit:
        try:
            _execute(api_client, step, outcome)
        except (K8sError, ValueError) as e:
            results.append(e)
            break
        results.append(None)
    return results


class _Writers:
    """``size`` writer threads that carry out units (HTTP only, no database) and hand back
    their results; the calling thread keeps every outcome, the streak and the progress."""

    def __init__(self, api_client: Any, size: int) -> None:
        self.api_client = api_client
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.threads = [
            threading.Thread(target=self._work, name=f"sync-write-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self.threads:
            thread.start()

    def _work(self) -> None:
        # Results go back in batches while there is more to do (each hand-over wakes the calling
        # thread, which costs about as much as a write), and always before this thread waits
        # for work or stops, and at once after a failure (the caller counts them).
        finished: list[tuple[Sequence[Step], list[Exception | None]]] = []
        while True:
            try:
                item = self.todo.get_nowait()
            except queue.Empty:
                if finished:
                    self.done.put(finished)
                    finished = []
                item = self.todo.get()
            if item is None:
                break
            unit, outcome = item
            try:
                results = (
                    [] if self.cancelled.is_set() else _write_unit(self.api_client, unit, outcome)
                )
                # The readable diff is written here, while the other writers wait for their
                # answers: on a first sync it is most of the calling thread's work otherwise.
                outcome.describe()
            except Exception as e:
                # A bug fails its object; it must not end the thread the sync is waiting on.
                log.exception("sync writer: %s %s/%s", unit[0].action, unit[0].change.kind, e)
                results = [e]
            finished.append((unit, results))
            if len(finished) >= 32 or (results and results[-1] is not None):
                self.done.put(finished)
                finished = []
        if finished:
            self.done.put(finished)

    def run(self, wave: Sequence[Sequence[Step]], outcomes: Mapping[int, Outcome]) -> Iterator:
        """Send the wave's units out; yield ``(unit, results)`` as they finish."""
        count = 0
        for unit in wave:
            self.todo.put((unit, outcomes[id(unit[0].change)]))
            count += 1
        while count:
            for finished in self.done.get():
                count -= 1
                yield finished

    def close(self) -> None:
        self.cancelled.set()
        for _ in self.threads:
            self.todo.put(None)
        for thread in self.threads:
            thread.join()


def _apply_wave(
    writers: _Writers,
    wave: Sequence[Sequence[Step]],
    outcomes: Mapping[int, Outcome],
    remaining: Counter,
    tally: _Tally,
    total: int,
    progress: Progress,
) -> None:
    """Carry out one wave's units concurrently and take in their results as they finish.

    A write an admission webhook denied (``is_webhook_denial``) is tried again once the rest
    of the wave is done — the unit from that write on — up to ``FAIRSHARE_SYNC_DENIAL_RETRIES``
    more times (default 5) with a doubling pause from ``FAIRSHARE_SYNC_DENIAL_BACKOFF`` seconds
    (default 0.1: 3.1 s in all), before it counts as failed like any other error. Volcano's
    webhooks judge a write against an informer cache that may not have seen the writes just
    made (``pkg/webhooks/admission/queues/validate/validate_queue.go`` reads parent and children
    through the queue lister), so an ordering that is valid at every step can still be denied
    for a moment. The order of the waves is kept: the next wave starts only after this one's
    retries.
    """
    attempts = int(getattr(settings, "FAIRSHARE_SYNC_DENIAL_RETRIES", 5))
    pause = float(getattr(settings, "FAIRSHARE_SYNC_DENIAL_BACKOFF", 0.1))
    not_routed: dict[int, NotRouted] = {}
    pending = []
    for unit in wave:
        if outcomes[id(unit[0].change)].action == SyncAction.FAILED:
            remaining[id(unit[0].change)] -= len(unit)
        else:
            pending.append(unit)
    opening = {step.route_queue for unit in pending for step in unit if step.route_queue}
    if opening:
        # A Queue whose own write failed in this run will not open: no need to wait for it.
        failed = {
            o.change.name
            for o in outcomes.values()
            if o.change.kind == "Queue" and o.action == SyncAction.FAILED
        }
        closed: dict[str, str | None] = {name: None for name in opening & failed}
        if opening - failed:
            closed.update(_wait_until_open(writers.api_client, opening - failed))
        routed = []
        for unit in pending:
            queue = next((step.route_queue for step in unit if step.route_queue), None)
            if queue in closed:
                # Written without the new routing (the quota and RBAC still go out), and failed
                # with the reason: the next sync routes it.
                not_routed[id(unit[0].change)] = _not_routed(
                    queue, closed[queue], failed=queue in failed
                )
                unit = tuple(step.unrouted() if step.route_queue else step for step in unit)
            routed.append(unit)
        pending = routed
    for attempt in range(attempts + 1):
        denied: list[Sequence[Step]] = []
        for unit, results in writers.run(pending, outcomes):
            key = id(unit[0].change)
            outcome = outcomes[key]
            last = results[-1] if results else None
            if last is not None and attempt < attempts and is_webhook_denial(last):
                remaining[key] -= len(results) - 1
                denied.append(unit[len(results) - 1 :])
                log.info(
                    "sync run #%s: %s %s/%s denied by a webhook, retried after the wave: %s",
                    progress.run.pk,
                    unit[0].action,
                    unit[0].change.kind,
                    unit[0].change.name,
                    last,
                )
                continue
            remaining[key] -= len(unit)
            if key in not_routed and all(error is None for error in results):
                results = [*results, not_routed[key]]
            _take_results(outcome, results, tally, total, progress)
            if outcome.action != SyncAction.FAILED and remaining[key] == 0:
                tally.applied += 1
            progress.beat()
        if not denied:
            return
        time.sleep(pause * 2**attempt)
        pending = denied


def _take_results(
    outcome: Outcome,
    results: Sequence[Exception | None],
    tally: _Tally,
    total: int,
    progress: Progress,
) -> None:
    for error in results:
        if error is None:
            tally.no_answer_streak = 0
            continue
        outcome.action = SyncAction.FAILED
        outcome.error = str(error)
        no_answer = isinstance(error, K8sTransient) and error.status is None
        tally.no_answer_streak = tally.no_answer_streak + 1 if no_answer else 0
        log.warning("sync run #%s: %s failed: %s", progress.run.pk, outcome.diff, error)
        if tally.no_answer_streak >= UNREACHABLE_AFTER:
            raise K8sTransient(
                f"Kubernetes API unreachable: {UNREACHABLE_AFTER} objects in a row got "
                f"no answer (last: {error}). {tally.applied} of {total} changes "
                "were applied before that; the next sync re-plans from the live state."
            ) from error


def apply_all(
    api_client: Any,
    changes: Sequence[Change],
    live: Mapping[tuple[str, str | None, str], Mapping[str, Any]],
    *,
    dry_run: bool,
    progress: Progress,
) -> list[Outcome]:
    """Apply (or, for a dry run, only describe) every change; per-object failures are kept.

    The writes go in ``apply_waves`` order (Queue decreases first, children before parents;
    then everything else in dependency order; then the remaining prunes), so that every
    intermediate state passes Volcano's webhook. The units of a wave (same kind, same Queue
    depth, same stage) go out concurrently, ``FAIRSHARE_SYNC_WORKERS`` at a time, as a
    controller's workers would: a first sync of thousands of objects is bounded by the round
    trip, not by their number. A change with several writes (an interim shrink, a delete
    before a re-create) is one outcome; once one of its writes failed, the others are skipped.
    Raises K8sTransient when the API server stops answering altogether (UNREACHABLE_AFTER
    writes in a row with no HTTP answer).
    """
    tally = _Tally()
    outcomes: dict[int, Outcome] = {}
    for change in changes:
        current = live.get((change.kind, change.namespace, change.name))
        drift = drift_of(current) if change.op == "update" else ()
        outcomes[id(change)] = Outcome(change, action=change.op, drift=bool(drift), drifted=drift)
    if not dry_run:
        waves = apply_waves(changes)
        remaining = Counter(id(step.change) for wave in waves for unit in wave for step in unit)
        widest = max((len(wave) for wave in waves), default=0)
        workers = max(1, min(int(getattr(settings, "FAIRSHARE_SYNC_WORKERS", 8)), widest))
        writers = _Writers(api_client, workers)
        try:
            for wave in waves:
                _apply_wave(writers, wave, outcomes, remaining, tally, len(changes), progress)
        finally:
            writers.close()
    for change in changes:
        outcome = outcomes[id(change)]
        outcome.describe()  # a dry run's, and those no writer got to
        tally.outcomes.append(outcome)
        progress.step()
    return tally.outcomes
