"""``manage.py watch_cluster``: repair drift within seconds (a long-running process).

Watches the managed kinds with Fairshare's label selector (resourceVersion, bookmarks, a
re-list after 410 Gone, as client-go's reflector does) and starts a targeted sync for the teams
whose objects were deleted or edited by hand: rate-limited (``--interval``) and coalesced.
Runs until SIGTERM/SIGINT (or ``--seconds``). Deployed as ``deploy/base/watcher.yaml``.
"""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kube.errors import K8sError
from scheduling.exceptions import DomainError


class Command(BaseCommand):
    help = (
        "Watch the cluster's managed objects and start targeted syncs to repair drift "
        "(deleted or hand-edited objects) within seconds."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval",
            type=float,
            default=1.0,
            help="At most one repair sync per this many seconds (default 1; > 0).",
        )
        parser.add_argument(
            "--seconds",
            type=float,
            default=0.0,
            help="Stop after this many seconds (default 0: run until stopped).",
        )

    def handle(self, *args, interval: float = 1.0, seconds: float = 0.0, **options):
        from scheduling.sync import build_client, cluster_mode
        from scheduling.watch import DriftWatcher

        if interval <= 0:
            raise CommandError("--interval must be greater than 0 seconds.")
        if seconds < 0:
            raise CommandError("--seconds must be 0 (run until stopped) or more.")
        mode = cluster_mode()[0]
        if mode not in ("kubeconfig", "in-cluster"):
            raise CommandError(
                f"watch_cluster needs an API server; FAIRSHARE_CLUSTER is "
                f"{settings.FAIRSHARE_CLUSTER!r} (use kubeconfig[:PATH] or in-cluster)."
            )
        try:
            api_client = build_client()
        except (DomainError, K8sError) as e:
            raise CommandError(str(e)) from e
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            if threading.current_thread() is threading.main_thread():
                signal.signal(sig, lambda *_: stop.set())
        if seconds:
            threading.Timer(seconds, stop.set).start()
        watcher = DriftWatcher(api_client, interval=interval)
        self.stdout.write(f"Watching {len(watcher.reflectors)} kinds; repair interval {interval} s")
        try:
            watcher.run(stop)
        finally:
            api_client.close()
        self.stdout.write(f"Stopped; {len(watcher.requested)} repair syncs requested.")
