"""Planning a run: its scope, the live state (one LIST per managed kind, or the snapshot's
objects in plan-only mode), the desired manifests with their last-applied annotation, drift
(live owned fields that differ from what we last applied) and readable diffs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from kube.apply import call_with_retry
from kube.client import build_api_client
from kube.errors import K8sError
from kube.observe import MANAGED_SELECTOR, list_managed, managed_in_dump
from kube.scheduler_config import (
    CONFIG_KEY,
    KUEUE_CONFIG_KEY,
    kueue_config_warnings,
    read_scheduler_config,
    scheduler_config_warnings,
)
from quotas.quantities import parse_quantity as parse_db_quantity
from scheduling.backend import current_backend
from scheduling.desired import SyncScope, sync_scope
from scheduling.domain.plan import (
    Change,
    FieldDiff,
    creation_diff,
    diff_object,
    render_diff,
)
from scheduling.domain.render import CLUSTER_KINDS, LABEL_TEAM, QUEUE_KINDS
from scheduling.domain.render.amounts import VOLCANO_DEVICE_CLASS_PREFIX, device_class_of
from scheduling.exceptions import SyncError
from scheduling.models import SyncRun
from scheduling.sync.progress import Progress

log = logging.getLogger(__name__)

LAST_APPLIED_ANNOTATION = "fairshare.io/last-applied"
PLAN_ONLY = "Plan only — no cluster connected"
RETRY_ATTEMPTS = 5  # per object write and per LIST, on transient errors (call_with_retry)


# --------------------------------------------------------------------------- plan helpers


def parse_live_quantity(value: str) -> Decimal:
    """Kubernetes quantity grammar (via quotas.quantities); ValueError when unparseable."""
    try:
        return parse_db_quantity(value)
    except ValidationError as e:
        raise ValueError(f"not a quantity: {value!r}") from e


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def with_last_applied(manifest: dict[str, Any]) -> dict[str, Any]:
    """Return ``manifest`` annotated with itself (compact JSON) for drift detection.

    Only ``metadata`` is copied: the rest of the rendered manifest is shared, not mutated.
    """
    metadata = dict(manifest["metadata"])
    annotations = dict(metadata.get("annotations") or {})
    annotations[LAST_APPLIED_ANNOTATION] = _canonical_json(manifest)
    metadata["annotations"] = dict(sorted(annotations.items()))
    return {**manifest, "metadata": metadata}


def _without_last_applied(obj: Mapping[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(obj))
    annotations = (copy.get("metadata") or {}).get("annotations") or {}
    annotations.pop(LAST_APPLIED_ANNOTATION, None)
    return copy


def drift_of(live: Mapping[str, Any] | None) -> tuple[FieldDiff, ...]:
    """Fields of ``live`` changed since Fairshare last applied it (empty: no drift or unknown)."""
    if live is None:
        return ()
    raw = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED_ANNOTATION)
    if not raw:
        return ()
    try:
        last = json.loads(raw)
    except ValueError:
        return ()
    if not isinstance(last, dict) or last.get("kind") != live.get("kind"):
        return ()
    return diff_object(last, _without_last_applied(live), parse_quantity=parse_live_quantity)


def drifted_fields(live: Mapping[str, Any]) -> tuple[FieldDiff, ...]:
    """Fields of a live managed object changed since Fairshare last applied it (the watcher's
    drift test; empty when it matches or was never applied by Fairshare)."""
    return drift_of(live)


def _visible(diffs: Sequence[FieldDiff]) -> tuple[FieldDiff, ...]:
    skip = f"metadata.annotations.{LAST_APPLIED_ANNOTATION}"
    return tuple(d for d in diffs if d.path != skip)


def readable_diff(change: Change, drift: Sequence[FieldDiff]) -> str:
    if change.op == "create" and change.body is not None:
        diffs = _visible(creation_diff(change.body))
        shown = Change("create", change.kind, change.namespace, change.name, None, diffs)
        text = render_diff(shown)
    else:
        shown = Change(
            change.op, change.kind, change.namespace, change.name, None, _visible(change.diff)
        )
        text = render_diff(shown)
    if drift:
        lines = [f"  {d.path}: {_show(d.new)} -> {_show(d.old)}" for d in drift]
        text += "\ndrift (changed in the cluster since Fairshare applied it; applied -> live):\n"
        text += "\n".join(lines)
    return text


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def share_source(run: SyncRun) -> list[str]:
    """Record on ``run`` which share computation gives the Queues' deserved, and whether the
    shares are stale (computations failed since); return the log note for a stale one.

    A failed share computation never holds a sync back: quotas and RBAC go out, and the
    Queues keep the last good fair allocation (the renderer falls back to the guarantee when
    there has never been one).
    """
    from scheduling.health import share_health

    health = share_health()
    run.share_computation = health.last_good
    run.shares_stale = health.stale
    if not health.stale:
        return []
    since = f"{health.since:%Y-%m-%d %H:%M} UTC" if health.since else "the start"
    source = (
        f"the last good computation #{health.last_good.pk} of "
        f"{health.last_good.computed_at:%Y-%m-%d %H:%M} UTC"
        if health.last_good is not None
        else "the guarantees (no share computation ever succeeded)"
    )
    return [
        f"Shares stale since {since} ({health.failures} failed computation(s); latest: "
        f"{health.error[:300]}): the Queues' deserved come from {source}."
    ]


def run_scope(stored: Mapping[str, Any] | None) -> SyncScope | None:
    """The run's scope (None: a full sync)."""
    if not stored or not (stored.get("teams") or stored.get("queues")):
        return None
    return sync_scope(stored.get("teams") or (), queues=bool(stored.get("queues")))


def describe_scope(scope: SyncScope) -> str:
    teams = ", ".join(sorted(scope.teams)) or "none"
    queues = "every Queue" if scope.queues else f"the Queues of {len(scope.trees)} teams' trees"
    return f"Targeted sync: teams {teams} and {queues}"


def _selector(values: Iterable[str]) -> str:
    # A set-based requirement, ANDed with ours (k8s.io/apimachinery/pkg/labels/selector.go).
    return f"{MANAGED_SELECTOR},{LABEL_TEAM} in ({','.join(sorted(values))})"


def observe_live(
    api_client: Any, progress: Progress | None = None, *, scope: SyncScope | None = None
) -> list[dict[str, Any]]:
    """LIST every managed kind once (paginated); each listing retried as a whole.

    The kinds are the configured backend's (``FAIRSHARE_SCHEDULER``). A targeted sync lists by
    team label instead (``fairshare.io/team in (...)``): the teams' namespaced kinds, the
    Queues (ClusterQueues, Cohorts) of their trees, and none of the cluster kinds
    (PriorityClasses, WorkloadPriorityClasses, ResourceFlavors).
    """
    live: list[dict[str, Any]] = []
    for kind in current_backend().kinds:
        selector = MANAGED_SELECTOR
        if scope is not None:
            if kind in CLUSTER_KINDS or (kind not in QUEUE_KINDS and not scope.teams):
                continue
            if kind not in QUEUE_KINDS:
                selector = _selector(scope.teams)
            elif not scope.queues:
                selector = _selector(scope.trees)
        live += call_with_retry(
            lambda kind=kind, selector=selector: list_managed(
                api_client, kind, label_selector=selector
            ),
            attempts=RETRY_ATTEMPTS,
        )
        if progress is not None:
            progress.beat()
    return live


def snapshot_live(path: str) -> list[dict[str, Any]]:
    try:
        return managed_in_dump(path)
    except (OSError, ValueError) as e:
        raise SyncError(f"cannot read the cluster snapshot {path}: {e}") from e


def is_plan_only() -> bool:
    """True when no cluster is connected (snapshot mode): every sync only plans."""
    return cluster_mode()[0] == "snapshot"


def scheduler_notes(api_client: Any, desired: Sequence[Mapping[str, Any]]) -> list[str]:
    """Warnings about the live scheduler configuration of the configured backend (none when it
    is unreadable): Volcano's (:func:`_volcano_notes`) or Kueue's (:func:`_kueue_notes`)."""
    if current_backend().name == "kueue":
        return _kueue_notes(api_client, desired)
    return _volcano_notes(api_client, desired)


def _config_text(api_client: Any, setting: str, default: str, key: str) -> tuple[str, str | None]:
    where = str(getattr(settings, setting, default))
    namespace, _, name = where.partition("/")
    try:
        return where, read_scheduler_config(api_client, namespace, name, key)
    except K8sError as e:
        log.info("cannot read the scheduler configuration %s: %s", where, e)
        return where, None


def _covered_device_classes(desired: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The DRA DeviceClasses whose device counts the desired ClusterQueues cover, each with the
    resource name it is covered by."""
    classes: dict[str, str] = {}
    for obj in desired:
        if obj.get("kind") != "ClusterQueue":
            continue
        for group in (obj.get("spec") or {}).get("resourceGroups") or ():
            for resource in group.get("coveredResources") or ():
                device_class = device_class_of(resource)
                if device_class is not None:
                    classes[device_class] = resource
    return classes


def _kueue_notes(api_client: Any, desired: Sequence[Mapping[str, Any]]) -> list[str]:
    """Kueue's Configuration (``FAIRSHARE_KUEUE_CONFIG``, default
    ``kueue-system/kueue-manager-config``) without fair sharing makes the weights moot; without
    a ``deviceClassMappings`` entry for a device class the ClusterQueues cover, workloads that
    claim it are not admitted."""
    where, text = _config_text(
        api_client, "FAIRSHARE_KUEUE_CONFIG", "kueue-system/kueue-manager-config", KUEUE_CONFIG_KEY
    )
    if text is None:
        return []
    warnings = kueue_config_warnings(text, device_classes=_covered_device_classes(desired))
    for warning in warnings:
        log.warning("Kueue configuration %s: %s", where, warning)
    return [f"Warning: Kueue configuration {where}: {w}" for w in warnings]


def _volcano_notes(api_client: Any, desired: Sequence[Mapping[str, Any]]) -> list[str]:
    """Warnings about the live Volcano scheduler configuration (none when it is unreadable).

    Fairshare's DRF ``deserved`` and its departments only take effect with Volcano's
    ``capacity`` plugin (``enableHierarchy: true`` for departments); the default configuration
    uses ``proportion``, which ignores both. ``FAIRSHARE_VOLCANO_SCHEDULER_CONFIG`` names the
    ConfigMap (``namespace/name``, default ``volcano-system/volcano-scheduler-configmap``).
    """
    where, text = _config_text(
        api_client,
        "FAIRSHARE_VOLCANO_SCHEDULER_CONFIG",
        "volcano-system/volcano-scheduler-configmap",
        CONFIG_KEY,
    )
    if text is None:
        return []
    hierarchy = any(
        obj.get("kind") == "Queue" and (obj.get("spec") or {}).get("parent") for obj in desired
    )
    device_classes = any(
        key.startswith(VOLCANO_DEVICE_CLASS_PREFIX)
        for obj in desired
        if obj.get("kind") == "Queue"
        for key in (obj.get("spec") or {}).get("capability") or {}
    )
    warnings = scheduler_config_warnings(text, hierarchy=hierarchy, device_classes=device_classes)
    for warning in warnings:
        log.warning("Volcano scheduler configuration %s: %s", where, warning)
    return [f"Warning: Volcano scheduler configuration {where}: {w}" for w in warnings]


def cluster_mode() -> tuple[str, str]:
    mode, _, arg = str(getattr(settings, "FAIRSHARE_CLUSTER", "disabled")).partition(":")
    return mode, arg


def build_client() -> Any:
    mode, arg = cluster_mode()
    timeout = float(getattr(settings, "FAIRSHARE_KUBE_TIMEOUT", 30))
    return build_api_client(
        mode,
        kubeconfig=arg or None,
        timeout=(min(5.0, timeout), timeout),
        pool_size=int(getattr(settings, "FAIRSHARE_SYNC_WORKERS", 8)),
    )
