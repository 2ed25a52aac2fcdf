"""``manage.py collect_usage [--snapshot FILE] [--print]``: one usage collection."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone

from kube.errors import K8sError
from monitoring import collection
from monitoring.collectors import k8s_usage
from monitoring.exceptions import CollectorError


class Command(BaseCommand):
    help = (
        "Collect cluster usage once and store it. --snapshot FILE reads a "
        "`kubectl get nodes,pods -A -o json` dump instead of the cluster (with resourceclaims, "
        "resourceslices and deviceclasses, DRA GPUs count too); --print prints the "
        "aggregate as JSON (base units) and stores nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--snapshot", metavar="FILE", help="read this kubectl JSON dump, not the cluster"
        )
        parser.add_argument(
            "--print",
            action="store_true",
            dest="print_json",
            help="print the aggregate as JSON; do not write to the database",
        )

    def handle(self, *args, snapshot=None, print_json=False, **options):
        namespace_map = self._namespace_map(required=not print_json)
        stats: dict[str, int] = {}
        now = timezone.now()
        try:
            if snapshot:
                usage = k8s_usage.from_snapshot(
                    snapshot,
                    namespace_map,
                    stats=stats,
                    now=now,
                    gpu_equivalents=settings.FAIRSHARE_DRA_GPU_EQUIVALENTS,
                )
                source = f"snapshot:{snapshot}"[:64]
            else:
                usage, source = collection.observe_cluster(namespace_map, stats=stats, now=now)
        except (CollectorError, K8sError) as e:
            raise CommandError(str(e)) from e
        if print_json:
            self.stdout.write(json.dumps(usage.to_json_dict(), indent=2))
            return
        nodes = max(0, stats.get("nodes", 0) - len(usage.excluded_nodes))
        snap, samples = collection.store_usage(usage, now=now, source=source, nodes=nodes)
        self.stdout.write(
            f"Stored collection #{snap.pk} at {snap.taken_at:%Y-%m-%d %H:%M:%S} from {source}: "
            f"{samples} usage samples, {nodes} schedulable nodes, capacity "
            f"{json.dumps(snap.resources, sort_keys=True)}"
        )

    def _namespace_map(self, *, required: bool) -> dict[str, str]:
        try:
            return collection.namespace_teams()
        except DatabaseError as e:
            if required:
                raise CommandError(f"cannot read namespaces from the database: {e}") from e
            # --print works without a database: every namespace is then unassigned.
            self.stderr.write(f"warning: no namespace→team map ({e}); all are unassigned")
            return {}
