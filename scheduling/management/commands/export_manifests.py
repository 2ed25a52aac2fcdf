"""``manage.py export_manifests --out DIR``: the desired state as YAML files, for GitOps.

It writes the configured backend's set (``FAIRSHARE_SCHEDULER``: Volcano's Queues, or Kueue's
ResourceFlavors, WorkloadPriorityClasses, Cohorts, ClusterQueues and LocalQueues). Kueue's
objects may be applied in any order — a ClusterQueue naming a Cohort or ResourceFlavor that does
not exist yet is accepted and stays inactive until it does, a LocalQueue likewise for its
ClusterQueue — and the layout applies parents first all the same
(``cluster/cohort-<depth>-...``, ``cluster/clusterqueue-<depth>-...``).

The layout (``render.file_name``) lets ``kubectl apply --server-side -R -f DIR`` apply a first
export in one pass: kubectl walks the tree in lexical order, so cluster-scoped objects
(``cluster/``: PriorityClasses, then Queues numbered by depth, parents first) come before
``namespaces/<ns>/``, where the Namespace (``00-namespace-<ns>.yaml``) comes before what lives
in it. A *change* of the Queues may not be applicable in one pass (a Queue that must shrink
before a sibling grows, a child under a parent written in the same pass while Volcano's
webhook cache lags, a Queue to delete): the export compares its Queues with the previous
export's files in DIR (``plan.kubectl_passes``) and says so, with the reasons.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import yaml
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from quotas.quantities import parse_quantity
from scheduling.backend import current_backend
from scheduling.desired import build_cluster_spec
from scheduling.domain.plan import kubectl_passes, plan
from scheduling.domain.render import file_name, queue_depths

MARKER = ".fairshare-export"
_MARKER_HEADER = (
    "# Files written by `manage.py export_manifests`; the next export removes the ones that are\n"
    "# no longer desired. Other files in this directory are never touched.\n"
)


def _quantity(value: str):
    try:
        return parse_quantity(value)
    except ValidationError as e:
        raise ValueError(f"not a quantity: {value!r}") from e


def _dump(manifest: dict) -> str:
    # Insertion order is the renderer's deterministic order (apiVersion, kind, metadata, ...).
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _safe(relative: str) -> bool:
    path = PurePosixPath(relative)
    return bool(relative) and not path.is_absolute() and ".." not in path.parts


class Command(BaseCommand):
    help = (
        "Write the desired manifests as YAML files (one per object, stable names) into DIR. "
        "Output is byte-identical for the same database; files a previous export wrote that are "
        f"no longer desired are removed (tracked in DIR/{MARKER}), other files are left alone."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="Directory to write (created if needed).")

    def handle(self, *args, out: str, **options):
        root = Path(out)
        if root.exists() and not root.is_dir():
            raise CommandError(f"{root} exists and is not a directory")
        try:
            manifests = current_backend().render(build_cluster_spec())
        except ValueError as e:
            raise CommandError(f"cannot render the desired state: {e}") from e
        depths = queue_depths(manifests)
        files = {file_name(m, depths.get(m["metadata"]["name"], 0)): _dump(m) for m in manifests}
        previous = self._previous(root / MARKER)
        reasons = self._passes(root, previous, manifests)
        written = unchanged = 0
        for relative in sorted(files):
            path = root / relative
            text = files[relative]
            if path.is_file() and path.read_text(encoding="utf-8") == text:
                unchanged += 1
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written += 1
        removed = 0
        for relative in sorted(previous - files.keys()):
            path = root / relative
            if path.is_file():
                path.unlink()
                removed += 1
            self._prune_empty_dirs(root, path.parent)
        (root / MARKER).write_text(
            _MARKER_HEADER + "".join(f"{r}\n" for r in sorted(files)), encoding="utf-8"
        )
        self.stdout.write(
            f"{len(files)} manifests in {root}: {written} written, {unchanged} unchanged, "
            f"{removed} removed"
        )
        if reasons:
            self.stdout.write(
                "More than one `kubectl apply` pass is needed for this change (Volcano's queue "
                "webhook checks each write against a cache that may lag the previous ones): "
                "apply, wait a few seconds, apply again until nothing is denied, and delete "
                "removed Queues children first; `manage.py sync` orders the writes itself.\n"
                + "".join(f"  - {reason}\n" for reason in reasons)
            )

    @staticmethod
    def _passes(root: Path, previous: set[str], manifests: list[dict]) -> list[str]:
        """Why the Queues of this export cannot replace the previous export's in one pass."""
        before = []
        for relative in sorted(previous):
            path = root / relative
            if relative.startswith("cluster/queue-") and path.is_file():
                before.append(yaml.safe_load(path.read_text(encoding="utf-8")))
        if not before:
            return []
        queues = [m for m in manifests if m.get("kind") == "Queue"]
        return kubectl_passes(plan(queues, before, parse_quantity=_quantity))

    @staticmethod
    def _previous(marker: Path) -> set[str]:
        if not marker.is_file():
            return set()
        lines = marker.read_text(encoding="utf-8").splitlines()
        return {line for line in lines if line and not line.startswith("#") and _safe(line)}

    @staticmethod
    def _prune_empty_dirs(root: Path, directory: Path) -> None:
        """Remove directories emptied by the removals, up to (not including) ``root``."""
        root = root.resolve()
        current = directory.resolve()
        while current != root and root in current.parents:
            if current.is_dir():
                if any(current.iterdir()):
                    return
                current.rmdir()
            current = current.parent
