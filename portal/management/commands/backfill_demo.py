"""``manage.py backfill_demo [--days N] [--follow]``: weeks of demo history, through the product.

Replays the weeks before now on the demo cluster snapshot (``FAIRSHARE_CLUSTER=snapshot:PATH``),
with the pods that ``monitoring.demo`` says ran at each moment, through the product's own code:

1. collections (``aggregate`` → ``store_usage``): hourly up to three hours ago, then at the
   configured collection interval up to now (the live hourly rollups recompute the last two
   hours at that cadence);
2. GPU samples of the running pods' GPUs: every two hours, then at the configured agent
   interval (``FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS``; the demo's is five minutes);
3. rollups per day (``rollup_usage``, told the coarse cadence), budget checks at the end of each
   day, share computations every six hours (share history), idle-GPU detection and raw-sample
   pruning at the end.

Idempotent: it starts after the newest collection already stored (none: ``--days`` back), so a
second run adds only the minutes since the first, and a demo restarted days later gets its gap
filled. ``--follow`` then keeps posting GPU samples at the agent interval (the demo has no GPU
nodes; the beat schedule keeps collecting the snapshot) until interrupted.

A portal command because it composes the apps: monitoring's collections, samples and rollups
and scheduling's share computations.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone
from kubernetes.utils import parse_quantity

from monitoring import budgets, collection, demo, idle, rollups, units
from monitoring.domain.aggregate import aggregate, cached_parser, parse_list_dump
from monitoring.models import CapacitySnapshot, GpuSample
from quotas.models import Namespace
from scheduling.exceptions import DomainError
from scheduling.services import compute_shares

SOURCE = "demo-backfill"
COARSE_COLLECT = timedelta(hours=1)
COARSE_GPU = timedelta(hours=2)
FINE_WINDOW = timedelta(hours=3)  # the last hours at the configured cadence (live rollups)
SHARES_EVERY = timedelta(hours=6)
DAY = timedelta(days=1)


class Command(BaseCommand):
    help = (
        "Back-fill weeks of demo history (collections, GPU samples, rollups, budgets, shares, "
        "idle GPUs) from the demo cluster snapshot; --follow keeps posting GPU samples."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", type=int, default=35, help="how far back to start (default 35)"
        )
        parser.add_argument(
            "--follow", action="store_true", help="then post GPU samples until interrupted"
        )

    def handle(self, *args, days=35, follow=False, **options):
        if not 1 <= days <= 60:
            raise CommandError("--days must be between 1 and 60.")
        mode, _, path = settings.FAIRSHARE_CLUSTER.partition(":")
        if mode != "snapshot":
            raise CommandError(
                "backfill_demo replays the demo cluster: it needs FAIRSHARE_CLUSTER=snapshot:PATH "
                f"(now {settings.FAIRSHARE_CLUSTER!r})."
            )
        try:
            nodes, pods = parse_list_dump(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as e:
            raise CommandError(f"cannot read the demo cluster snapshot {path}: {e}") from e
        self.nodes, self.pods = nodes, pods
        self.gpus = demo.demo_gpus(nodes, pods)
        self.parse = cached_parser(parse_quantity)
        self.teams = collection.namespace_teams()
        self.team_ids = dict(Namespace.objects.values_list("name", "team_id"))

        now = timezone.now()
        newest = (
            CapacitySnapshot.objects.exclude(source="demo-seed")
            .order_by("-taken_at")
            .values_list("taken_at", flat=True)
            .first()
        )
        newest_gpu = GpuSample.objects.order_by("-taken_at").values_list("taken_at", flat=True)
        newest_gpu = newest_gpu.first()
        if newest is None:
            start = _floor_day(now - timedelta(days=days))
        else:  # resume after the newest collection
            start = newest + timedelta(seconds=1)
        # Each stream resumes after its own newest row (the GPU feed may have run on).
        self.resume_gpu = start if newest_gpu is None else newest_gpu + timedelta(seconds=1)
        started = time.monotonic()
        counts = self._history(start, now)
        self.stdout.write(
            f"Demo history {start:%Y-%m-%d %H:%M} → {now:%Y-%m-%d %H:%M} UTC: "
            f"{counts['collections']} collections, {counts['gpu_samples']} GPU samples, "
            f"{counts['shares']} share computations, {counts['budget_alerts']} budget alerts, "
            f"{counts['idle']} idle GPUs ({time.monotonic() - started:.1f} s)."
        )
        if follow:
            self._follow()

    # ------------------------------------------------------------ history

    def _history(self, start: datetime, now: datetime) -> dict[str, int]:
        counts = dict.fromkeys(("collections", "gpu_samples", "shares", "budget_alerts", "idle"), 0)
        fine_from = max(start, units.floor_hour(now) - FINE_WINDOW)
        # Coarse part, a day at a time: write, roll up with the coarse cadence, check budgets.
        day = start
        last_shares = None
        while day < fine_from:
            stop = min(_floor_day(day) + DAY, fine_from)
            with transaction.atomic():
                for t in _steps(day, stop, COARSE_COLLECT):
                    self._collect(t, now)
                    counts["collections"] += 1
                    if last_shares is None or t - last_shares >= SHARES_EVERY:
                        counts["shares"] += self._shares(t)
                        last_shares = t
                for t in _steps(max(_ceil(day, COARSE_GPU), self.resume_gpu), stop, COARSE_GPU):
                    counts["gpu_samples"] += self._gpu_samples(t, now)
            rollups.rollup_usage(
                start=units.floor_hour(day),
                end=stop,
                now=stop,
                collect_every=COARSE_COLLECT,
                gpu_every=COARSE_GPU,
            )
            counts["budget_alerts"] += len(budgets.check_budgets(now=stop))
            day = stop
        # Fine part: the configured cadence, so the live hourly rollups recompute it alike.
        with transaction.atomic():
            for t in _steps(fine_from, now, units.collect_interval()):
                self._collect(t, now)
                counts["collections"] += 1
            for t in _steps(max(fine_from, self.resume_gpu), now, units.gpu_agent_interval()):
                counts["gpu_samples"] += self._gpu_samples(t, now)
        if fine_from < units.floor_hour(now):
            rollups.rollup_usage(start=fine_from, end=units.floor_hour(now), now=now)
        counts["shares"] += self._shares(now)
        counts["budget_alerts"] += len(budgets.check_budgets(now=now))
        counts["idle"] = idle.detect_idle_gpus(now=now).idle_gpus
        rollups.prune_samples(now=now)
        return counts

    def _collect(self, t: datetime, end: datetime) -> None:
        usage = aggregate(
            self.nodes, demo.pods_at(self.pods, t, end=end), self.teams, parse_quantity=self.parse
        )
        schedulable = len(self.nodes) - len(usage.excluded_nodes)
        collection.store_usage(usage, now=t, source=SOURCE, nodes=schedulable)

    def _gpu_samples(self, t: datetime, end: datetime) -> int:
        running = {
            (pod["metadata"]["namespace"], pod["metadata"]["name"])
            for pod in self.pods
            if demo.running(pod, t, end=end)
        }
        readings = demo.readings_at(self.gpus, t, end=end, running_pods=running)
        return _insert_gpu_samples(readings, self.team_ids)

    def _shares(self, t: datetime) -> int:
        try:
            compute_shares(trigger=SOURCE, now=t)
        except DomainError as e:  # e.g. quotas an admin made invalid: history skips that point
            self.stderr.write(f"shares at {t:%Y-%m-%d %H:%M}: {e}")
            return 0
        return 1

    # ------------------------------------------------------------ follow

    def _follow(self) -> None:
        every = units.gpu_agent_interval()
        self.stdout.write(f"Posting demo GPU samples every {every.total_seconds():g} s.")
        try:
            while True:
                time.sleep(every.total_seconds())
                now = timezone.now()
                # One transaction per batch, as the agents' ingest API stores it: in autocommit
                # each of the ~500 rows was its own commit, and on SQLite's rollback journal
                # the page reads queued behind ~500 lock cycles a minute (issue 29's stalls).
                with transaction.atomic():
                    self._gpu_samples(now, now)
        except KeyboardInterrupt:
            return


_GPU_COLUMNS = (
    "taken_at", "received_at", "node", "uuid", "index", "model", "util_gpu", "util_mem",
    "mem_used", "mem_total", "power_w", "temp_c", "namespace", "pod", "team_id",
)  # fmt: skip


def _insert_gpu_samples(readings: list[demo.Reading], team_ids: dict[str, int]) -> int:
    """Insert readings as GpuSamples with one ``executemany`` (the ORM's per-field preparation
    costs ~20x more, and a back-fill writes hundreds of thousands). Portable: Django's cursor
    takes ``%s`` on every backend; times are adapted by the backend's own ``ops``."""
    if not readings:
        return 0
    opts = GpuSample._meta
    columns = [opts.get_field(name).column for name in _GPU_COLUMNS]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(opts.db_table)} ({', '.join(quote(c) for c in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    adapt = connection.ops.adapt_datetimefield_value
    received = adapt(timezone.now())
    taken = {t: adapt(t) for t in {r.taken_at for r in readings}}
    rows = [
        (
            taken[r.taken_at], received, r.gpu.node, r.gpu.uuid, r.gpu.index, r.gpu.model,
            r.util_gpu, r.util_mem, r.mem_used, r.mem_total, r.power_w, r.temp_c,
            r.gpu.namespace, r.gpu.pod, team_ids.get(r.gpu.namespace),
        )
        for r in readings
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
    return len(rows)


def _floor_day(t: datetime) -> datetime:
    return units.floor_day(t)


def _ceil(t: datetime, step: timedelta) -> datetime:
    floor = units.floor_hour(t)
    return floor if floor == t else floor + step


def _steps(start: datetime, stop: datetime, step: timedelta):
    t = start
    while t < stop:
        yield t
        t += step
