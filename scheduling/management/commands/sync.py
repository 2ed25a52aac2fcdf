"""``manage.py sync [--dry-run] [--diff]``: run one cluster sync in this process."""

from __future__ import annotations

from collections import Counter

from django.core.management.base import BaseCommand, CommandError

from kube.errors import K8sError
from scheduling.choices import SyncAction, SyncStatus
from scheduling.exceptions import DomainError
from scheduling.models import SyncRun
from scheduling.sync import create_run, iter_changes, run_sync

_ACTIONS = [a.value for a in SyncAction]


class Command(BaseCommand):
    help = (
        "Sync the cluster with the desired state now (in this process): plan, apply, record a "
        "SyncRun. Exits non-zero when the sync fails."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="Plan only: read the cluster, change nothing."
        )
        parser.add_argument(
            "--diff", action="store_true", help="Print each change's readable diff."
        )

    def handle(self, *args, dry_run: bool = False, diff: bool = False, **options):
        run = create_run(dry_run=dry_run, trigger="command")
        try:
            run = run_sync(run.pk)
        except (DomainError, K8sError, ValueError) as e:
            run = SyncRun.objects.get(pk=run.pk)
            raise CommandError(f"{_title(run)} failed: {run.error or e}") from e
        if run.status in (SyncStatus.QUEUED, SyncStatus.MERGED):
            # Another sync holds the lock: this request is pending, carried out by the
            # follow-up that sync enqueues when it is done.
            self.stdout.write(f"{_title(run)}: {run.status}. {run.log}")
            return
        self._summary(run)
        if diff:
            for item in iter_changes(run):
                self.stdout.write(item.diff or f"{item.action} {item}")
                if item.error:
                    self.stdout.write(f"  error: {item.error}")
        if run.status != SyncStatus.SUCCEEDED:
            raise CommandError(f"{_title(run)} failed: {run.error}")

    def _summary(self, run: SyncRun) -> None:
        rows = Counter(run.items.values_list("kind", "action"))
        kinds = sorted({kind for kind, _ in rows})
        width = max([len("kind"), *(len(k) for k in kinds)])
        header = f"{'kind':<{width}}  " + "  ".join(f"{a:>9}" for a in _ACTIONS)
        self.stdout.write(f"{_title(run)}: {run.status}")
        for line in run.log.splitlines():
            self.stdout.write(f"  {line}")
        self.stdout.write(header)
        for kind in kinds:
            cells = "  ".join(f"{rows.get((kind, a), 0):>9}" for a in _ACTIONS)
            self.stdout.write(f"{kind:<{width}}  {cells}")
        totals = "  ".join(f"{sum(n for (_, a), n in rows.items() if a == x):>9}" for x in _ACTIONS)
        self.stdout.write(f"{'total':<{width}}  {totals}")
        if run.drift_count:
            self.stdout.write(f"drift: {run.drift_count} object(s) had been changed by hand")


def _title(run: SyncRun) -> str:
    return f"{'Dry run' if run.dry_run else 'Sync'} #{run.pk}"
