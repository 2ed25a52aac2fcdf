"""Monitoring services: store collections, ingest GPU samples, roll up, detect idle GPUs, budgets.

Every function takes ``now`` (default: the clock) so jobs can be replayed for a past time.

**Integration rule** (rollups and budgets turn point samples into resource-hours):

* A ``UsageSample`` describes the cluster from its collection time until the next collection,
  capped at 2 × the collection interval (the ``collect-usage`` beat schedule, default 60 s):
  a collector outage therefore counts at most two intervals after the last sample, never the
  whole outage. Collections are the distinct times of ``UsageSample`` and ``CapacitySnapshot``
  rows, so a collection that found a namespace idle (no row) ends that namespace's previous
  sample. The last sample holds until ``now`` at most.
* A ``GpuSample`` describes its GPU until the same GPU's next sample, capped at 2 × the agent
  interval (``FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS``, default 15 s). ``used_hours`` =
  Σ util_gpu/100 × that time, for samples attributed to a pod; ``avg_utilization`` is the
  time-weighted mean. Samples without utilization (MIG devices) count for neither.
* Intervals are split at bucket boundaries; buckets are UTC hours and UTC days. Monthly
  rollups (UTC calendar months) are sums of the daily ones (``rollup_usage``).
* ``guarantee_hours`` (TeamQuota guarantee × hours) goes on the row of the team's first
  namespace (by name), resource as in the quota, flavor "". Teams without a namespace get no
  guarantee row. Quotas have no history, so re-running an old window uses today's guarantees.

GPU flavors: the node label ``nvidia.com/gpu.product`` is NVML's device name with spaces
replaced by dashes (GPU feature discovery's rule), so a GpuSample's ``model`` maps to the same
flavor as the allocated amounts of its node.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, DecimalField, F, FloatField, IntegerField, Max, Min, Q, Sum, When
from django.db.models.functions import Coalesce, Least, TruncMonth
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from monitoring.choices import AlertStatus, RollupPeriod
from monitoring.collectors import k8s_usage
from monitoring.domain import gpu_alerts
from monitoring.domain.aggregate import ClusterUsage
from monitoring.exceptions import CollectorError
from monitoring.models import (
    BudgetAlert,
    CapacitySnapshot,
    GpuDevice,
    GpuInventoryNode,
    GpuSample,
    GpuSampleRejection,
    IdleGpuAlert,
    UsageRollup,
    UsageSample,
)
from monitoring.notify import notify_team
from monitoring.workloads import store_workloads
from quotas.models import Budget, Namespace, Team, TeamQuota

logger = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
_ROLLUP_LOCK_KEY = 0x0FA1_0B5E  # advisory lock id for "rollup buckets"
_AMOUNT_PLACES = Decimal("0.000001")
_FUTURE_TOLERANCE = timedelta(minutes=5)


def max_samples_per_batch() -> int:
    """At most this many samples in one batch (``FAIRSHARE_GPU_INGEST_MAX_BATCH_SAMPLES``,
    512): the agent sends one reading per GPU (or MIG device) per batch, 56 at most on a node
    of eight GPUs split seven ways; a batch of thousands is not an agent's (issue 27)."""
    return int(getattr(settings, "FAIRSHARE_GPU_INGEST_MAX_BATCH_SAMPLES", 512))


def sample_spacing() -> timedelta:
    """The least time between two stored samples of one GPU: half the agent's interval
    (``FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS``, 15 s), which leaves room for its jitter and
    refuses a flood of readings microseconds apart (issue 27)."""
    return timedelta(seconds=getattr(settings, "FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS", 15) / 2)


# --------------------------------------------------------------------------- settings


def collect_interval() -> timedelta:
    """The collection interval from the ``collect-usage`` beat entry (default 60 s)."""
    entry = getattr(settings, "CELERY_BEAT_SCHEDULE", {}).get("collect-usage") or {}
    schedule = entry.get("schedule")
    if isinstance(schedule, timedelta):
        return schedule
    if isinstance(schedule, int | float):
        return timedelta(seconds=schedule)
    return timedelta(seconds=60)


def gpu_agent_interval() -> timedelta:
    """The agents' sampling interval (``FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS``, default 15)."""
    return timedelta(seconds=getattr(settings, "FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS", 15))


def is_gpu_resource(resource: str) -> bool:
    """True for resources tracked per GPU flavor: ``*/gpu`` and MIG slices (``*/mig-*``)."""
    return resource.endswith("/gpu") or "/mig-" in resource


def flavor_of_model(model: str) -> str:
    """Map an NVML device name to the node label value (``NVIDIA H100`` → ``NVIDIA-H100``)."""
    return "-".join(model.split())


def decimal_string(amount: Decimal) -> str:
    """Render an exact amount without exponent (``Decimal("1E+3")`` → ``"1000"``)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


# --------------------------------------------------------------------------- collection


def namespace_teams() -> dict[str, str]:
    """Return ``{namespace: team slug}`` for every namespace Fairshare knows."""
    return dict(Namespace.objects.values_list("name", "team__slug"))


def observe_cluster(
    namespace_map: Mapping[str, str],
    *,
    api_client: Any = None,
    stats: dict | None = None,
    now: datetime | None = None,
) -> tuple[ClusterUsage, str]:
    """Observe the configured cluster (or ``api_client``); return ``(usage, source)``.

    ``FAIRSHARE_CLUSTER=snapshot:PATH`` reads the dump (the demo) as the cluster at ``now``
    (default: the current time; its timestamps are moved there, so workload ages read as when
    it was taken: monitoring.domain.snapshot_clock); ``kubeconfig[:PATH]`` and
    ``in-cluster`` LIST the API server. Raises CollectorError when collection is disabled or the
    snapshot cannot be read, K8sError subclasses when the API server fails.
    """
    if api_client is not None:
        return k8s_usage.collect(api_client, namespace_map, stats=stats), "kubernetes"
    mode, _, arg = settings.FAIRSHARE_CLUSTER.partition(":")
    if mode == "snapshot":
        at = now or timezone.now()
        usage = k8s_usage.from_snapshot(arg, namespace_map, stats=stats, now=at)
        return usage, f"snapshot:{arg}"[:64]
    if mode == "disabled":
        raise CollectorError("usage collection is disabled (FAIRSHARE_CLUSTER=disabled)")
    from kube.client import build_api_client

    timeout = (5.0, float(getattr(settings, "FAIRSHARE_KUBE_TIMEOUT", 30)))
    client = build_api_client(mode, kubeconfig=arg or None, timeout=timeout)
    try:
        return k8s_usage.collect(client, namespace_map, stats=stats), "kubernetes"
    finally:
        client.close()


def collect_usage(*, now: datetime | None = None, api_client: Any = None):
    """Observe the cluster once and store it; return ``(CapacitySnapshot, n_samples)``.

    The source is ``api_client`` when given, else ``settings.FAIRSHARE_CLUSTER``. Raises
    CollectorError (disabled, unreadable snapshot) or K8sError (API failures); nothing is
    written then.
    """
    now = now or timezone.now()
    namespace_map = namespace_teams()
    stats: dict[str, int] = {}
    usage, source = observe_cluster(namespace_map, api_client=api_client, stats=stats, now=now)
    nodes = max(0, stats.get("nodes", 0) - len(usage.excluded_nodes))
    return store_usage(usage, now=now, source=source, nodes=nodes)


def store_usage(
    usage: ClusterUsage, *, now: datetime, source: str, nodes: int = 0
) -> tuple[CapacitySnapshot, int]:
    """Write one CapacitySnapshot and its UsageSample rows in one transaction.

    Also replaces the GPU inventory node agents are checked against (``store_gpu_inventory``).
    Rows: one per namespace × resource with a non-zero amount. GPU resources allocated on
    flavored nodes get one row per flavor; what remains (pods on unlabelled nodes) and every
    pending amount go on the flavor "" row. ``team`` is null for unassigned namespaces.
    """
    team_ids = dict(Namespace.objects.values_list("name", "team_id"))
    rows: list[UsageSample] = []
    for name, ns_usage in usage.namespaces.items():
        team_id = team_ids.get(name)
        by_flavor = usage.namespace_flavors.get(name, {})
        for resource in sorted(set(ns_usage.allocated) | set(ns_usage.pending)):
            allocated = ns_usage.allocated.get(resource, Decimal(0))
            pending = ns_usage.pending.get(resource, Decimal(0))
            if is_gpu_resource(resource):
                for flavor in sorted(by_flavor):
                    amount = by_flavor[flavor].get(resource, Decimal(0))
                    if amount:
                        rows.append(_usage_row(now, team_id, name, resource, flavor, amount, 0))
                        allocated -= amount
            if allocated or pending:
                rows.append(_usage_row(now, team_id, name, resource, "", allocated, pending))
    with transaction.atomic():
        snapshot = CapacitySnapshot.objects.create(
            taken_at=now,
            source=source,
            resources={r: decimal_string(v) for r, v in sorted(usage.capacity.items())},
            flavors={
                product: {r: decimal_string(v) for r, v in sorted(amounts.items())}
                for product, amounts in sorted(usage.flavors.items())
            },
            nodes=nodes,
        )
        UsageSample.objects.bulk_create(rows, batch_size=2000)
        store_gpu_inventory(usage, now=now)
        workload_rows = store_workloads(usage, now=now, team_ids=team_ids)
    for note in usage.notes:
        logger.warning("collection at %s: %s", now.isoformat(), note)
    logger.info(
        "stored collection at %s from %s: %d samples, %d workloads, %d schedulable nodes",
        now.isoformat(),
        source,
        len(rows),
        workload_rows,
        nodes,
    )
    return snapshot, len(rows)


def _usage_row(now, team_id, namespace, resource, flavor, allocated, pending) -> UsageSample:
    return UsageSample(
        taken_at=now,
        team_id=team_id,
        namespace=namespace,
        resource=resource,
        flavor=flavor,
        allocated=Decimal(allocated),
        pending=Decimal(pending),
    )


# --------------------------------------------------------------------------- GPU ingest


def store_gpu_inventory(usage: ClusterUsage, *, now: datetime) -> None:
    """Replace the GPU inventory (nodes with GPUs, the pods holding GPUs on each) with this
    collection's. Call inside the collection's transaction, so ingest always sees one whole
    collection. Pods bound to a node the node list did not show are left out (an agent there
    has no GPUs to report by the cluster's account)."""
    pods: dict[str, list[list[str]]] = defaultdict(list)
    for pod in usage.gpu_pods:
        pods[pod.node].append([pod.namespace[:63], pod.name[:253], pod.uid[:64]])
    GpuInventoryNode.objects.all().delete()
    GpuInventoryNode.objects.bulk_create(
        (
            GpuInventoryNode(
                name=node.name[:253],
                gpus=node.gpus,
                product=(node.product or "")[:128],
                pods=pods.get(node.name, []),
                collected_at=now,
            )
            for node in usage.gpu_nodes.values()
        ),
        batch_size=500,
    )


@dataclass(frozen=True)
class IngestResult:
    """What one agent batch did. ``rejected_reasons`` name each refused sample by index."""

    node: str
    accepted: int
    duplicates: int
    rejected_reasons: list[str] = field(default_factory=list)
    agent_version: str = ""
    agent_dropped: int = 0
    agent_skipped: int = 0
    rejected: int = 0


_BIGINT_MAX = 2**63 - 1  # the columns' range (PostgreSQL bigint): more is a 500, not a reading
# GPU UUIDs as NVML prints them (GPU-…, MIG-…): letters, digits and a little punctuation.
_UUID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


class SampleRejected(ValueError):
    """One sample refused; ``reason`` is the short code counted in GpuSampleRejection."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def sample_max_age() -> timedelta:
    """How old a sample may be (``FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS``, default one hour:
    the agent's buffer of 240 batches at the default 15 s interval)."""
    return timedelta(seconds=getattr(settings, "FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS", 3600))


def _number(sample: Mapping, key: str, *, low=None, high=None, integer=False):
    value = sample.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SampleRejected("value", f"{key} must be a number or null")
    if integer and value != int(value):
        raise SampleRejected("value", f"{key} must be a whole number")
    if (low is not None and value < low) or (high is not None and value > high):
        raise SampleRejected("value", f"{key} must be between {low} and {high}")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class _Inventory:
    """The latest collection's view of one node: its GPUs and the pods holding GPUs there."""

    node: str
    gpus: int
    product: str
    by_uid: Mapping[str, tuple[str, str]]  # pod uid → (namespace, name)
    by_name: frozenset[tuple[str, str]]  # (namespace, name)

    @classmethod
    def load(cls, node: str) -> _Inventory | None:
        row = GpuInventoryNode.objects.filter(name=node).first()
        if row is None:
            return None
        pods = [(uid, ns, name) for ns, name, uid in row.pods]
        return cls(
            node=node,
            gpus=row.gpus,
            product=row.product,
            by_uid={uid: (ns, name) for uid, ns, name in pods if uid},
            by_name=frozenset((ns, name) for _, ns, name in pods),
        )

    def pod(self, proc: Mapping) -> tuple[str, str] | None:
        """The (namespace, name) of the pod a process names, if it is on this node.

        The pod UID (from the process's cgroup) decides when given; otherwise the namespace and
        name the agent resolved. Either way the namespace returned is the collection's.
        """
        uid = proc.get("pod_uid")
        if isinstance(uid, str) and uid:
            return self.by_uid.get(uid)
        namespace, name = proc.get("namespace"), proc.get("pod")
        if isinstance(namespace, str) and isinstance(name, str):
            return (namespace, name) if (namespace, name) in self.by_name else None
        return None


def _attribution(processes: Any, inventory: _Inventory) -> tuple[str, str]:
    """Pick the pod of a GPU: among its processes' pods (each must be on the node), the one
    using the most memory (ties: by name). Processes outside pods are ignored."""
    if processes is None:
        return "", ""
    if not isinstance(processes, list):
        raise SampleRejected("shape", "processes must be a list")
    candidates = []
    for proc in processes:
        if not isinstance(proc, dict):
            continue
        names_a_pod = any(proc.get(key) for key in ("pod_uid", "namespace", "pod"))
        if not names_a_pod:
            continue
        placed = inventory.pod(proc)
        if placed is None:
            ref = proc.get("pod_uid") or f"{proc.get('namespace')}/{proc.get('pod')}"
            raise SampleRejected(
                "pod",
                f"pod {str(ref)[:80]!r} is not a GPU pod on node {inventory.node} in the latest "
                "collection",
            )
        mem = proc.get("mem_used")
        mem = mem if isinstance(mem, int) and not isinstance(mem, bool) else 0
        candidates.append((-mem, placed[0], placed[1]))
    if not candidates:
        return "", ""
    _, namespace, pod = min(candidates)
    return namespace, pod


def _parse_time(raw: Mapping, *, now: datetime) -> datetime:
    ts = raw.get("ts")
    try:
        taken_at = parse_datetime(ts) if isinstance(ts, str) else None
    except ValueError:  # well-formed but not a date (month 13, hour 25)
        taken_at = None
    if taken_at is None:
        raise SampleRejected("ts", "ts must be an ISO 8601 time")
    if timezone.is_naive(taken_at):
        raise SampleRejected("ts", "ts must carry a time zone")
    try:
        taken_at = taken_at.astimezone(UTC)
    except (OverflowError, ValueError):
        raise SampleRejected("ts", "ts is out of range") from None
    if taken_at > now + _FUTURE_TOLERANCE:
        raise SampleRejected("ts", "ts is in the future")
    oldest = now - sample_max_age()
    if taken_at < oldest:
        raise SampleRejected(
            "ts", f"ts is older than {int(sample_max_age().total_seconds())} seconds"
        )
    return taken_at


def _parse_sample(raw: Any, *, inventory: _Inventory | None, node: str, now: datetime) -> GpuSample:
    """One sample, checked against the node's inventory; its team is filled in by the caller."""
    if not isinstance(raw, dict):
        raise SampleRejected("shape", "must be an object")
    taken_at = _parse_time(raw, now=now)
    uuid = raw.get("uuid")
    if not isinstance(uuid, str) or not uuid or len(uuid) > 64:
        raise SampleRejected("uuid", "uuid must be a non-empty string of at most 64 characters")
    if not _UUID_RE.match(uuid):
        raise SampleRejected("uuid", "uuid may hold only letters, digits and . _ : -")
    if inventory is None:
        raise SampleRejected("node", f"node {node} has no GPUs in the latest collection")
    index = _number(raw, "index", low=0, high=32767, integer=True) or 0
    if index >= inventory.gpus:
        raise SampleRejected(
            "index",
            f"index {index} is not a GPU of node {node} (the latest collection counts "
            f"{inventory.gpus})",
        )
    model = raw.get("model") or ""
    if not isinstance(model, str):
        raise SampleRejected("model", "model must be a string")
    if inventory.product:
        if flavor_of_model(model) != inventory.product:
            raise SampleRejected(
                "model",
                f"model {model[:80]!r} is not node {node}'s GPU ({inventory.product})",
            )
    else:
        # The flavor comes from the cluster: a node without a product label has none, so its
        # samples carry none either (they must match the node's allocated amounts).
        model = ""
    namespace, pod = _attribution(raw.get("processes"), inventory)
    return GpuSample(
        taken_at=taken_at,
        node=node,
        uuid=uuid,
        index=index,
        model=model[:128],
        util_gpu=_number(raw, "util_gpu", low=0, high=100),
        util_mem=_number(raw, "util_mem", low=0, high=100),
        mem_used=_number(raw, "mem_used", low=0, high=_BIGINT_MAX, integer=True),
        mem_total=_number(raw, "mem_total", low=0, high=_BIGINT_MAX, integer=True),
        power_w=_number(raw, "power_w", low=0, high=1e6),
        temp_c=_number(raw, "temp_c", low=-273, high=1e3),
        namespace=namespace,
        pod=pod,
    )


def _check_gpu_identity(
    parsed: dict[tuple[str, datetime], tuple[int, GpuSample]],
    *,
    inventory: _Inventory,
    now: datetime,
) -> list[tuple[int, SampleRejected]]:
    """Refuse samples of GPUs that are not this node's.

    The cluster counts a node's GPUs but does not publish their UUIDs, so a UUID belongs to the
    node that reports it (GpuDevice): within the sample window, a UUID another node reported is
    refused, and a node reports at most as many distinct UUIDs as the collection counts GPUs on
    it. A UUID keeps its index, and an index its UUID, while it is reported. Removes the
    refused samples from ``parsed`` and returns them with their batch index.
    One query.
    """
    since = now - sample_max_age()
    uuids = {sample.uuid for _, sample in parsed.values()}
    devices = GpuDevice.objects.filter(
        Q(uuid__in=uuids) | Q(node=inventory.node), last_seen_at__gte=since
    ).values_list("uuid", "node", "index")
    elsewhere = {uuid: node for uuid, node, _ in devices if node != inventory.node}
    known = {uuid: gpu for uuid, node, gpu in devices if node == inventory.node}
    holder = {gpu: uuid for uuid, gpu in known.items()}
    room = max(0, inventory.gpus - len(known))
    refused: list[tuple[int, SampleRejected]] = []
    for key, (index, sample) in sorted(parsed.items(), key=lambda item: item[1][0]):
        error = None
        if sample.uuid in elsewhere:
            error = SampleRejected(
                "uuid-node", f"GPU {sample.uuid} is reported by node {elsewhere[sample.uuid]}"
            )
        elif sample.uuid in known:
            if known[sample.uuid] != sample.index:
                # A GPU keeps its index while it is reported (issue 27: no moving identities).
                error = SampleRejected(
                    "uuid-index",
                    f"GPU {sample.uuid} is index {known[sample.uuid]} of node {inventory.node}",
                )
        elif room <= 0:
            error = SampleRejected(
                "uuid-count",
                f"node {inventory.node} already reports {inventory.gpus} GPUs; "
                f"{sample.uuid} would be one more",
            )
        elif sample.index in holder:
            error = SampleRejected(
                "uuid-index",
                f"index {sample.index} of node {inventory.node} is GPU {holder[sample.index]}",
            )
        else:
            known[sample.uuid] = sample.index
            holder[sample.index] = sample.uuid
            room -= 1
        if error is not None:
            refused.append((index, error))
            del parsed[key]
    return refused


def _check_spacing(parsed: dict[tuple[str, datetime], tuple[int, GpuSample]]) -> list:
    """Refuse a sample taken less than ``sample_spacing()`` from a stored sample of its GPU or
    from one kept earlier in this batch: a GPU is read once per agent interval, so no more of
    its samples are stored than the interval allows. A sample at exactly a stored time stays
    (a retried batch: counted as a duplicate). Removes the refused samples from ``parsed`` and
    returns them with their batch index. One query."""
    gap = sample_spacing()
    times = [taken_at for _, taken_at in parsed]
    stored: dict[str, list[datetime]] = defaultdict(list)
    for uuid, taken_at in GpuSample.objects.filter(
        uuid__in={uuid for uuid, _ in parsed},
        taken_at__gt=min(times) - gap,
        taken_at__lt=max(times) + gap,
    ).values_list("uuid", "taken_at"):
        stored[uuid].append(taken_at)
    kept: dict[str, list[datetime]] = {uuid: sorted(ts) for uuid, ts in stored.items()}
    refused = []
    for key, (index, _sample) in sorted(parsed.items(), key=lambda item: item[1][0]):
        uuid, taken_at = key
        near = kept.setdefault(uuid, [])
        if taken_at in stored.get(uuid, ()):
            continue
        at = bisect.bisect_left(near, taken_at)
        neighbours = near[max(0, at - 1) : at + 1]
        if any(abs(taken_at - other) < gap for other in neighbours):
            refused.append(
                (
                    index,
                    SampleRejected(
                        "rate",
                        f"ts is less than {gap.total_seconds():g} s from another sample of "
                        f"{uuid}: the agent reads each GPU once per interval",
                    ),
                )
            )
            del parsed[key]
            continue
        near.insert(at, taken_at)
    return refused


def _remember_devices(samples: Iterable[GpuSample], *, node: str, now: datetime) -> None:
    """Record (or move) the accepted samples' GPU UUIDs to this node, seen now (one query)."""
    devices = {
        s.uuid: GpuDevice(uuid=s.uuid, node=node, index=s.index, last_seen_at=now) for s in samples
    }
    if devices:
        GpuDevice.objects.bulk_create(
            list(devices.values()),
            update_conflicts=True,
            unique_fields=["uuid"],
            update_fields=["node", "index", "last_seen_at"],
        )


def record_rejections(node: str, rejected: list[SampleRejected], *, now: datetime) -> None:
    """Count refused samples per node, hour and reason (GpuSampleRejection)."""
    if not rejected:
        return
    hour = floor_hour(now)
    by_reason: dict[str, list[SampleRejected]] = defaultdict(list)
    for error in rejected:
        by_reason[error.reason].append(error)
    for reason, errors in sorted(by_reason.items()):
        example = str(errors[-1])[:300]
        for _attempt in range(2):
            updated = GpuSampleRejection.objects.filter(
                node=node[:253], hour=hour, reason=reason
            ).update(count=F("count") + len(errors), example=example, last_seen_at=now)
            if updated:
                break
            try:
                with transaction.atomic():
                    GpuSampleRejection.objects.create(
                        node=node[:253],
                        hour=hour,
                        reason=reason,
                        count=len(errors),
                        example=example,
                        last_seen_at=now,
                    )
                break
            except IntegrityError:  # another batch of this node created it meanwhile
                continue


def ingest_gpu_batch(*, token_node: str, batch: dict, now: datetime | None = None) -> IngestResult:
    """Validate and store one GPU agent batch (format: ``monitoring.collectors.agent``).

    Only the cluster's own data is trusted; the agent's claims are checked against it:

    1. The batch's ``node``, and any sample's own ``node``, must be the token's node: a node
       token may only report its own GPUs. Otherwise raise ValidationError({"node": ...}).
       A batch that is not the documented shape raises ValidationError naming the field.
    2. Each sample is checked, and refused with a reason (``"samples[3]: ts is older than 3600
       seconds"``) unless:
       * ``ts`` is an aware ISO 8601 time within the window: at most
         ``FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS`` old and 5 minutes ahead;
       * the latest collection places GPUs on the node, ``index`` is one of them, and
         ``model`` is the node's GPU product (the ``nvidia.com/gpu.product`` label, which
         becomes the chargeback flavor; a node without the label stores no model);
       * every pod its processes name (by pod UID, else namespace and name) is a pod the
         latest collection places on this node and that requests GPUs. The namespace (and so
         the team) is the collection's, never the agent's.
       * its GPU UUID is not one another node reports, and is not one more than the node has
         GPUs (see ``_check_gpu_identity``).
    3. Samples are inserted with ``ignore_conflicts`` on (uuid, taken_at), so a retried batch
       (the agent resends after a timeout) is counted in ``duplicates`` and stored once.
    4. Refused samples are counted per node, hour and reason in GpuSampleRejection and logged;
       the agent's cumulative ``dropped_samples``/``skipped_samples`` are logged when non-zero
       and returned on the result.
    """
    now = now or timezone.now()
    if not isinstance(batch, dict):
        raise ValidationError({"batch": "The batch must be a JSON object."})
    node = batch.get("node")
    if not isinstance(node, str) or not node:
        raise ValidationError({"node": "The batch must name its node."})
    if node != token_node:
        raise ValidationError(
            {"node": f"This token belongs to node {token_node!r}; it cannot report for {node!r}."}
        )
    samples = batch.get("samples", [])
    if not isinstance(samples, list):
        raise ValidationError({"samples": "samples must be a list."})
    if len(samples) > max_samples_per_batch():
        raise ValidationError(
            {"samples": f"A batch holds at most {max_samples_per_batch()} samples."}
        )
    for i, raw in enumerate(samples):
        other = raw.get("node") if isinstance(raw, dict) else None
        if other is not None and other != token_node:
            raise ValidationError(
                {"node": f"samples[{i}] is from node {other!r}; this token is for {token_node!r}."}
            )
    agent = batch.get("agent")
    agent = {} if agent is None else agent
    if not isinstance(agent, dict):
        raise ValidationError({"agent": "agent must be an object."})

    inventory = _Inventory.load(node) if samples else None
    refused: list[tuple[int, SampleRejected]] = []
    parsed: dict[tuple[str, datetime], tuple[int, GpuSample]] = {}
    duplicates = 0
    for i, raw in enumerate(samples):
        try:
            sample = _parse_sample(raw, inventory=inventory, node=node, now=now)
        except SampleRejected as e:
            refused.append((i, e))
            continue
        key = (sample.uuid, sample.taken_at)
        if key in parsed:
            duplicates += 1
            continue
        parsed[key] = (i, sample)
    if parsed and inventory is not None:
        refused += _check_gpu_identity(parsed, inventory=inventory, now=now)
    if parsed:
        refused += _check_spacing(parsed)
    # Teams of the pods' namespaces (the collection's namespaces, never the agent's).
    namespaces = {sample.namespace for _, sample in parsed.values() if sample.namespace}
    if namespaces:
        teams = dict(Namespace.objects.filter(name__in=namespaces).values_list("name", "team_id"))
        for _, sample in parsed.values():
            sample.team_id = teams.get(sample.namespace)
    refused.sort(key=lambda item: item[0])
    reasons = [f"samples[{i}]: {error}" for i, error in refused]
    fresh: list[GpuSample] = []
    with transaction.atomic():
        if parsed:
            existing = set(
                GpuSample.objects.filter(
                    uuid__in={k[0] for k in parsed}, taken_at__in={k[1] for k in parsed}
                ).values_list("uuid", "taken_at")
            )
            fresh = [sample for k, (_, sample) in parsed.items() if k not in existing]
            duplicates += len(parsed) - len(fresh)
            # ignore_conflicts covers a concurrent retry of the same batch racing this one.
            GpuSample.objects.bulk_create(fresh, ignore_conflicts=True, batch_size=2000)
            _remember_devices((sample for _, sample in parsed.values()), node=node, now=now)
        record_rejections(node, [error for _, error in refused], now=now)

    dropped = _counter(agent, "dropped_samples")
    skipped = _counter(agent, "skipped_samples")
    if dropped or skipped:
        logger.warning(
            "gpu agent on %s reports %d dropped and %d skipped samples since it started",
            node,
            dropped,
            skipped,
        )
    if reasons:
        logger.warning(
            "rejected %d samples from %s: %s", len(reasons), node, "; ".join(reasons[:20])
        )
    return IngestResult(
        node=node,
        accepted=len(fresh),
        duplicates=duplicates,
        rejected_reasons=reasons,
        agent_version=str(agent.get("version") or "")[:32],
        agent_dropped=dropped,
        agent_skipped=skipped,
        rejected=len(reasons),
    )


def _counter(agent: Mapping, key: str) -> int:
    value = agent.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# --------------------------------------------------------------------------- integration


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _spread(a: datetime, b: datetime, size: timedelta) -> Iterator[tuple[datetime, float]]:
    """Split [a, b) at bucket boundaries; yield ``(bucket start, seconds)``."""
    floor = floor_hour if size == HOUR else floor_day
    while a < b:
        bucket = floor(a)
        end = min(b, bucket + size)
        yield bucket, (end - a).total_seconds()
        a = end


@dataclass
class _Acc:
    """Running totals of one bucket × namespace × resource × flavor (seconds, not hours)."""

    team_id: int | None = None
    allocated: Decimal = Decimal(0)
    pending: Decimal = Decimal(0)
    guarantee: Decimal = Decimal(0)
    used: float = 0.0
    util_seconds: float = 0.0
    samples: int = 0

    def to_rollup(self, period: str, key: tuple) -> UsageRollup:
        start, namespace, resource, flavor = key
        avg = 100 * self.used / self.util_seconds if self.util_seconds else None
        return UsageRollup(
            period=period,
            start=start,
            team_id=self.team_id,
            namespace=namespace,
            resource=resource,
            flavor=flavor,
            allocated_hours=_hours(self.allocated),
            pending_hours=_hours(self.pending),
            used_hours=_hours(Decimal(repr(self.used))),
            guarantee_hours=_hours(self.guarantee),
            avg_utilization=None if avg is None else round(avg, 4),
            samples=self.samples,
        )


def _hours(seconds: Decimal) -> Decimal:
    return (seconds / 3600).quantize(_AMOUNT_PLACES)


Key = tuple[datetime, str, str, str]


def _collection_times(lo: datetime, hi: datetime) -> list[datetime]:
    times = set(
        UsageSample.objects.filter(taken_at__gte=lo, taken_at__lt=hi)
        .values_list("taken_at", flat=True)
        .distinct()
    )
    times.update(
        CapacitySnapshot.objects.filter(taken_at__gte=lo, taken_at__lt=hi).values_list(
            "taken_at", flat=True
        )
    )
    return sorted(times)


def _next_collection(after: datetime) -> datetime | None:
    candidates = [
        UsageSample.objects.filter(taken_at__gte=after).aggregate(t=Min("taken_at"))["t"],
        CapacitySnapshot.objects.filter(taken_at__gte=after).aggregate(t=Min("taken_at"))["t"],
    ]
    return min((t for t in candidates if t is not None), default=None)


def integrate_usage(
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    size: timedelta = HOUR,
    resources: Iterable[str] | None = None,
    gpu: bool = True,
    collect_every: timedelta | None = None,
    gpu_every: timedelta | None = None,
) -> dict[Key, _Acc]:
    """Integrate raw samples over [start, end) into buckets of ``size`` (see module docstring).

    Returns ``{(bucket start, namespace, resource, flavor): totals in seconds}``; buckets may be
    partial when ``start``/``end`` are not aligned. ``resources`` limits the UsageSample rows
    read; ``gpu=False`` skips GpuSamples (budgets need allocation only). ``collect_every`` and
    ``gpu_every`` replace the configured collector and agent intervals, for samples that were
    taken at another cadence (history imported or back-filled at a coarser step).
    """
    acc: dict[Key, _Acc] = defaultdict(_Acc)
    cap = 2 * (collect_every or collect_interval())
    horizon = min(end, now)
    times = _collection_times(start - cap, end)
    following = _next_collection(end)
    hold: dict[datetime, datetime] = {}
    for i, moment in enumerate(times):
        nxt = times[i + 1] if i + 1 < len(times) else following
        limit = moment + cap
        hold[moment] = min(limit, nxt) if nxt is not None else min(limit, max(horizon, moment))

    rows = UsageSample.objects.filter(taken_at__gte=start - cap, taken_at__lt=end)
    if resources is not None:
        rows = rows.filter(resource__in=list(resources))
    for taken_at, team_id, namespace, resource, flavor, allocated, pending in rows.values_list(
        "taken_at", "team_id", "namespace", "resource", "flavor", "allocated", "pending"
    ).iterator(chunk_size=5000):
        a, b = max(taken_at, start), min(hold.get(taken_at, taken_at), end)
        for bucket, seconds in _spread(a, b, size):
            item = acc[(bucket, namespace, resource, flavor)]
            item.team_id = item.team_id or team_id
            secs = Decimal(repr(seconds))
            item.allocated += allocated * secs
            item.pending += pending * secs

    if gpu:
        _integrate_gpus(acc, start, end, horizon, size, 2 * (gpu_every or gpu_agent_interval()))
    return acc


def _integrate_gpus(
    acc: dict[Key, _Acc],
    start: datetime,
    end: datetime,
    horizon: datetime,
    size: timedelta,
    cap: timedelta,
) -> None:
    rows = (
        GpuSample.objects.filter(taken_at__gte=start - cap, taken_at__lt=end + cap)
        .order_by("uuid", "taken_at")
        .values_list("uuid", "taken_at", "util_gpu", "namespace", "team_id", "model")
    )
    previous = None
    for row in rows.iterator(chunk_size=5000):
        if previous is not None:
            _add_gpu_interval(
                acc,
                previous,
                row if row[0] == previous[0] else None,
                start,
                end,
                horizon,
                cap,
                size,
            )
        previous = row
    if previous is not None:
        _add_gpu_interval(acc, previous, None, start, end, horizon, cap, size)


def _add_gpu_interval(acc, sample, following, start, end, horizon, cap, size) -> None:
    _, taken_at, util, namespace, team_id, model = sample
    if util is None or not namespace:
        return
    limit = taken_at + cap
    stop = min(limit, following[1]) if following is not None else min(limit, max(horizon, taken_at))
    key_tail = (namespace, GPU, flavor_of_model(model))
    if start <= taken_at < end:
        item = acc[(floor_hour(taken_at) if size == HOUR else floor_day(taken_at), *key_tail)]
        item.samples += 1
        item.team_id = item.team_id or team_id
    for bucket, seconds in _spread(max(taken_at, start), min(stop, end), size):
        item = acc[(bucket, *key_tail)]
        item.team_id = item.team_id or team_id
        item.used += util / 100 * seconds
        item.util_seconds += seconds


def _add_guarantees(acc: dict[Key, _Acc], buckets: list[datetime], size: timedelta) -> None:
    first_namespace: dict[int, str] = {}
    for team_id, name in Namespace.objects.order_by("name").values_list("team_id", "name"):
        first_namespace.setdefault(team_id, name)
    quotas = TeamQuota.objects.filter(guarantee__gt=0, team__active=True).values_list(
        "team_id", "resource", "guarantee"
    )
    seconds = Decimal(int(size.total_seconds()))
    for team_id, resource, guarantee in quotas:
        namespace = first_namespace.get(team_id)
        if namespace is None:
            continue
        for bucket in buckets:
            item = acc[(bucket, namespace, resource, "")]
            item.team_id = team_id
            item.guarantee += Decimal(guarantee) * seconds


# --------------------------------------------------------------------------- rollups


@dataclass(frozen=True)
class RollupResult:
    start: datetime
    end: datetime
    hourly: int
    daily: int
    monthly: int = 0


def _rollup_lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ROLLUP_LOCK_KEY])


def rollup_usage(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
    collect_every: timedelta | None = None,
    gpu_every: timedelta | None = None,
) -> RollupResult:
    """Recompute hourly rollups for [start, end), daily rollups for the days it touches and
    monthly rollups for the months those days are in.

    Windows are aligned to whole UTC hours (``start`` floored, ``end`` floored and never past
    the current hour, which is still filling). Defaults: ``end`` = the start of the current
    hour; ``start`` = two hours earlier, or the hour after the newest hourly rollup if that is
    older (catching up after an outage, back to the raw retention at most).

    Idempotent: the window's hourly buckets, the touched days' daily buckets and the touched
    months' monthly buckets are deleted and recreated in one transaction (serialized by an
    advisory lock on PostgreSQL), so running it twice gives the same rows, and re-running a past
    window picks up late GPU samples. Daily rows are sums of the hourly rows, monthly rows sums
    of the daily rows (``rollup_months``); ``avg_utilization`` is weighted by ``samples`` (GPU
    readings behind each hour's average). ``collect_every``/``gpu_every``: the cadence the
    window's samples were taken at, when it is not the configured one (``integrate_usage``).
    """
    now = now or timezone.now()
    current = floor_hour(now)
    end = min(floor_hour(end), current) if end is not None else current
    if start is None:
        start = end - 2 * HOUR
        latest = UsageRollup.objects.filter(period=RollupPeriod.HOUR).aggregate(t=Max("start"))["t"]
        oldest_raw = now - timedelta(days=settings.FAIRSHARE_RETENTION_RAW_DAYS)
        if latest is not None and latest + HOUR < start:
            start = max(latest + HOUR, floor_hour(oldest_raw))
    start = floor_hour(start)
    if start >= end:
        return RollupResult(start, end, 0, 0)

    acc = integrate_usage(
        start, end, now=now, size=HOUR, collect_every=collect_every, gpu_every=gpu_every
    )
    buckets = []
    moment = start
    while moment < end:
        buckets.append(moment)
        moment += HOUR
    _add_guarantees(acc, buckets, HOUR)
    hourly = cover_guarantees(
        [item.to_rollup(RollupPeriod.HOUR, key) for key, item in sorted(acc.items())]
    )

    first_day, last_day = floor_day(start), floor_day(end - timedelta(microseconds=1))
    with transaction.atomic():
        _rollup_lock()
        UsageRollup.objects.filter(
            period=RollupPeriod.HOUR, start__gte=start, start__lt=end
        ).delete()
        UsageRollup.objects.bulk_create(hourly, batch_size=2000)
        daily = _daily_rows(first_day, last_day + DAY)
        UsageRollup.objects.filter(
            period=RollupPeriod.DAY, start__gte=first_day, start__lt=last_day + DAY
        ).delete()
        UsageRollup.objects.bulk_create(daily, batch_size=2000)
        monthly = rollup_months(first_day, last_day + DAY)
    logger.info(
        "rolled up %s..%s: %d hourly, %d daily and %d monthly rows",
        start.isoformat(),
        end.isoformat(),
        len(hourly),
        len(daily),
        monthly,
    )
    return RollupResult(start, end, len(hourly), len(daily), monthly)


def cover_guarantees(rows: list[UsageRollup]) -> list[UsageRollup]:
    """Set ``covered_hours`` on one hour's (or one day's) rows: per team, resource and bucket,
    min(guarantee, the team's allocated hours over all its namespaces and flavors), on the rows
    that carry the guarantee (the team's first namespace, flavor ""); 0 on the others.

    A guarantee is a team-level figure while allocation rows are per namespace and flavor (GPUs
    are allocated under their product, the guarantee row has none), so min(guarantee, allocated)
    per row would miss the allocation and call the whole guarantee unused. Returns ``rows``.
    """
    allocated: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row.team_id is not None:
            allocated[(row.start, row.team_id, row.resource)] += row.allocated_hours
    for row in sorted(rows, key=lambda r: (r.start, r.namespace, r.flavor)):
        row.covered_hours = Decimal(0)
        if row.team_id is None or not row.guarantee_hours:
            continue
        key = (row.start, row.team_id, row.resource)
        row.covered_hours = min(row.guarantee_hours, allocated[key])
        allocated[key] -= row.covered_hours
    return rows


def _next_month(moment: datetime) -> datetime:
    return moment.replace(year=moment.year + moment.month // 12, month=moment.month % 12 + 1)


_DEC = DecimalField(max_digits=40, decimal_places=6)


def rollup_months(start: datetime, end: datetime) -> int:
    """Recompute the monthly rollups of every UTC month overlapping [start, end) from the daily
    rollups; return the number of monthly rows written.

    Whole months are deleted and recreated (one aggregate query, grouped in SQL), inside the
    caller's transaction if there is one, else in its own, under the rollup lock, so running it
    again changes nothing. ``rollup_usage`` calls it for the months it touched; call it directly
    to backfill months whose daily rows were written some other way (e.g. before monthly
    rollups existed): the chargeback report reads a month from monthly rows as soon as that
    month has any, so they must be complete.

    One row per month, namespace, resource, flavor and team: the sums of the daily rows, plus
    ``covered_hours`` = Σ min(guarantee, allocated) and ``busy_hours`` = Σ min(allocated, used)
    over the days (the per-day floors of the chargeback report). ``samples`` and
    ``avg_utilization`` combine like hours into days: the samples-weighted mean of the days
    that have one.
    """
    first = month_start(start)
    stop = _next_month(month_start(end - timedelta(microseconds=1)))
    with transaction.atomic():
        _rollup_lock()
        UsageRollup.objects.filter(
            period=UsageRollup.MONTH, start__gte=first, start__lt=stop
        ).delete()
        rows = _monthly_rows(first, stop)
        UsageRollup.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _postgres() -> bool:
    """Whether SQL sums are exact here (PostgreSQL ``numeric``); elsewhere they are summed in
    Python (``_monthly_rows_in_python``), with the same results."""
    return connection.vendor == "postgresql"


def _monthly_rows(first: datetime, stop: datetime) -> list[UsageRollup]:
    if not _postgres():
        return _monthly_rows_in_python(first, stop)
    with_util = Q(avg_utilization__isnull=False, samples__gt=0)
    sums = (
        UsageRollup.objects.filter(period=RollupPeriod.DAY, start__gte=first, start__lt=stop)
        .order_by()
        .annotate(month=TruncMonth("start", tzinfo=UTC))
        .values("month", "namespace", "resource", "flavor", "team_id")
        .annotate(
            a=Sum("allocated_hours"),
            p=Sum("pending_hours"),
            u=Sum("used_hours"),
            g=Sum("guarantee_hours"),
            covered=Sum(
                Coalesce(
                    "covered_hours",
                    Least("guarantee_hours", "allocated_hours", output_field=_DEC),
                    output_field=_DEC,
                )
            ),
            busy=Sum(Least("allocated_hours", "used_hours", output_field=_DEC)),
            util=Sum(
                Case(
                    When(with_util, then=F("avg_utilization") * F("samples")),
                    default=None,
                    output_field=FloatField(),
                )
            ),
            n=Sum(Case(When(with_util, then=F("samples")), default=0), output_field=IntegerField()),
        )
        .order_by("month", "namespace", "resource", "flavor", "team_id")
    )
    return [
        UsageRollup(
            period=UsageRollup.MONTH,
            start=row["month"],
            namespace=row["namespace"],
            resource=row["resource"],
            flavor=row["flavor"],
            team_id=row["team_id"],
            allocated_hours=row["a"],
            pending_hours=row["p"],
            used_hours=row["u"],
            guarantee_hours=row["g"],
            covered_hours=row["covered"],
            busy_hours=row["busy"],
            avg_utilization=round(row["util"] / row["n"], 4) if row["n"] else None,
            samples=row["n"],
        )
        for row in sums
    ]


def _monthly_rows_in_python(first: datetime, stop: datetime) -> list[UsageRollup]:
    """The portable equivalent of ``_monthly_rows``' SQL (every database but PostgreSQL).

    The same grouping and sums, added up exactly in Python ``Decimal``: SQLite keeps decimals
    as floating point, and its ``sum()`` would round where PostgreSQL's ``numeric`` does not.
    """
    zero = Decimal(0)
    totals: dict[tuple, dict[str, Any]] = {}
    rows = UsageRollup.objects.filter(
        period=RollupPeriod.DAY, start__gte=first, start__lt=stop
    ).order_by()
    for row in rows.values(
        "start", "namespace", "resource", "flavor", "team_id", "allocated_hours",
        "pending_hours", "used_hours", "guarantee_hours", "covered_hours", "avg_utilization",
        "samples",
    ).iterator(chunk_size=5000):  # fmt: skip
        month = month_start(row["start"])
        key = (month, row["namespace"], row["resource"], row["flavor"], row["team_id"])
        t = totals.get(key)
        if t is None:
            t = totals[key] = dict.fromkeys(("a", "p", "u", "g", "covered", "busy"), zero)
            t |= {"util": None, "n": 0}
        a, u, g = row["allocated_hours"], row["used_hours"], row["guarantee_hours"]
        t["a"] += a
        t["p"] += row["pending_hours"]
        t["u"] += u
        t["g"] += g
        t["covered"] += min(g, a) if row["covered_hours"] is None else row["covered_hours"]
        t["busy"] += min(a, u)
        if row["avg_utilization"] is not None and row["samples"] > 0:
            t["util"] = (t["util"] or 0.0) + row["avg_utilization"] * row["samples"]
            t["n"] += row["samples"]
    return [
        UsageRollup(
            period=UsageRollup.MONTH,
            start=month,
            namespace=namespace,
            resource=resource,
            flavor=flavor,
            team_id=team_id,
            allocated_hours=t["a"],
            pending_hours=t["p"],
            used_hours=t["u"],
            guarantee_hours=t["g"],
            covered_hours=t["covered"],
            busy_hours=t["busy"],
            avg_utilization=round(t["util"] / t["n"], 4) if t["n"] else None,
            samples=t["n"],
        )
        for (month, namespace, resource, flavor, team_id), t in sorted(
            totals.items(), key=lambda item: (item[0][:4], item[0][4] or 0)
        )
    ]


def _daily_rows(first_day: datetime, stop: datetime) -> list[UsageRollup]:
    totals: dict[Key, dict[str, Any]] = {}
    rows = UsageRollup.objects.filter(
        period=RollupPeriod.HOUR, start__gte=first_day, start__lt=stop
    ).values_list(
        "start",
        "namespace",
        "resource",
        "flavor",
        "team_id",
        "allocated_hours",
        "pending_hours",
        "used_hours",
        "guarantee_hours",
        "covered_hours",
        "avg_utilization",
        "samples",
    )
    for start, ns, res, flavor, team_id, alloc, pend, used, guar, cov, avg, samples in rows:
        key = (floor_day(start), ns, res, flavor)
        item = totals.setdefault(
            key,
            {"team_id": team_id, "sums": [Decimal(0)] * 5, "util": 0.0, "samples": 0},
        )
        item["team_id"] = item["team_id"] or team_id
        # An hour rolled up before covered hours existed covers min(G, A) of itself.
        covered = min(guar, alloc) if cov is None else cov
        for i, value in enumerate((alloc, pend, used, guar, covered)):
            item["sums"][i] += value
        if avg is not None and samples:
            item["util"] += avg * samples
            item["samples"] += samples
    return [
        UsageRollup(
            period=RollupPeriod.DAY,
            start=key[0],
            namespace=key[1],
            resource=key[2],
            flavor=key[3],
            team_id=item["team_id"],
            allocated_hours=item["sums"][0],
            pending_hours=item["sums"][1],
            used_hours=item["sums"][2],
            guarantee_hours=item["sums"][3],
            covered_hours=item["sums"][4],
            avg_utilization=round(item["util"] / item["samples"], 4) if item["samples"] else None,
            samples=item["samples"],
        )
        for key, item in sorted(totals.items())
    ]


def prune_samples(now: datetime | None = None) -> dict[str, int]:
    """Delete raw samples (and ingest rejection counts) past ``FAIRSHARE_RETENTION_RAW_DAYS``
    and hourly rollups past
    ``FAIRSHARE_RETENTION_HOURLY_DAYS``; daily and monthly rollups are kept. The newest
    CapacitySnapshot is always kept (quota capacity checks read it). Returns deleted counts per
    model."""
    now = now or timezone.now()
    raw_cutoff = now - timedelta(days=settings.FAIRSHARE_RETENTION_RAW_DAYS)
    hourly_cutoff = now - timedelta(days=settings.FAIRSHARE_RETENTION_HOURLY_DAYS)
    newest = CapacitySnapshot.objects.order_by("-taken_at", "-id").values_list("pk", flat=True)
    keep = list(newest[:1])
    deleted = {
        "usage_samples": UsageSample.objects.filter(taken_at__lt=raw_cutoff).delete()[0],
        "gpu_samples": GpuSample.objects.filter(taken_at__lt=raw_cutoff).delete()[0],
        "capacity_snapshots": CapacitySnapshot.objects.filter(taken_at__lt=raw_cutoff)
        .exclude(pk__in=keep)
        .delete()[0],
        "hourly_rollups": UsageRollup.objects.filter(
            period=RollupPeriod.HOUR, start__lt=hourly_cutoff
        ).delete()[0],
        "gpu_sample_rejections": GpuSampleRejection.objects.filter(hour__lt=raw_cutoff).delete()[0],
        "gpu_devices": GpuDevice.objects.filter(last_seen_at__lt=raw_cutoff).delete()[0],
    }
    if any(deleted.values()):
        logger.info("pruned %s", deleted)
    return deleted


# --------------------------------------------------------------------------- idle GPUs


@dataclass(frozen=True)
class IdleGpu:
    uuid: str
    node: str
    namespace: str
    pod: str
    team_id: int
    since: datetime
    avg_utilization: float


@dataclass(frozen=True)
class IdleResult:
    idle_gpus: int
    opened: list[int]
    extended: list[int]
    resolved: list[int]


def find_idle_gpus(*, now: datetime, threshold: float, window: timedelta) -> list[IdleGpu]:
    """Return the GPUs idle for the whole window ending at ``now``.

    A GPU is idle when, over its samples from the last one at or before ``now − window``
    until ``now``:

    1. the window is full: such a sample exists (a GPU observed for less than the window is
       not judged yet);
    2. it still reports: the newest sample is at most 2 × the agent interval old;
    3. there is no gap longer than 2 × the agent interval (missing data is not idleness);
    4. every sample is attributed to the same pod of a known team;
    5. every sample's ``util_gpu`` is known and strictly under ``threshold`` (a GPU exactly at
       the threshold is not idle).
    """
    cap = 2 * gpu_agent_interval()
    window_start = now - window
    rows = (
        GpuSample.objects.filter(taken_at__gte=window_start - cap, taken_at__lte=now)
        .order_by("uuid", "taken_at")
        .values_list("uuid", "taken_at", "util_gpu", "node", "namespace", "pod", "team_id")
    )
    idle: list[IdleGpu] = []
    group: list[tuple] = []
    for row in rows.iterator(chunk_size=5000):
        if group and group[0][0] != row[0]:
            idle.extend(_judge(group, now, window_start, cap, threshold))
            group = []
        group.append(row)
    if group:
        idle.extend(_judge(group, now, window_start, cap, threshold))
    return idle


def _judge(group, now, window_start, cap, threshold) -> list[IdleGpu]:
    first = max((i for i, row in enumerate(group) if row[1] <= window_start), default=None)
    if first is None:
        return []
    samples = group[first:]
    if now - samples[-1][1] > cap:
        return []
    uuid, _, _, node, namespace, pod, team_id = samples[0]
    for previous, row in itertools.pairwise(samples):
        if row[1] - previous[1] > cap:
            return []
    for row in samples:
        if row[2] is None or row[2] >= threshold:
            return []
        if (row[4], row[5], row[6]) != (namespace, pod, team_id) or not pod or team_id is None:
            return []
    average = sum(row[2] for row in samples) / len(samples)
    return [IdleGpu(uuid, node, namespace, pod, team_id, samples[0][1], average)]


def _suggestion(
    *, gpus: int, node: str, namespace: str, pod: str, avg: float, minutes: int, threshold: float
) -> str:
    return (
        f"{gpus} GPU(s) on node {node} allocated to pod {namespace}/{pod} averaged "
        f"{avg:.1f} % utilization over the last {minutes} minutes (idle threshold "
        f"{threshold:g} %). Release them for other teams: stop or scale down the workload "
        f"(kubectl -n {namespace} delete pod {pod}), or request fewer GPUs per pod."
    )


def detect_idle_gpus(*, now: datetime | None = None) -> IdleResult:
    """Open, extend and resolve IdleGpuAlerts; notify a team's leads once per new alert.

    GPUs found by :func:`find_idle_gpus` (``FAIRSHARE_IDLE_GPU_THRESHOLD`` %,
    ``FAIRSHARE_IDLE_GPU_WINDOW_MINUTES``) are grouped per team, namespace, pod and node: one
    alert each. An open alert for the same group is extended (``last_seen_at``, GPU count and
    average updated); otherwise one is opened with a reclaim suggestion. Open alerts whose group
    is no longer idle are resolved. Notifications go out after the commit, claimed with a
    conditional update on ``notified_at`` so two concurrent runs never send the same one twice.
    """
    now = now or timezone.now()
    threshold = float(settings.FAIRSHARE_IDLE_GPU_THRESHOLD)
    minutes = int(settings.FAIRSHARE_IDLE_GPU_WINDOW_MINUTES)
    idle = find_idle_gpus(now=now, threshold=threshold, window=timedelta(minutes=minutes))
    groups: dict[tuple[int, str, str, str], list[IdleGpu]] = defaultdict(list)
    for gpu in idle:
        groups[(gpu.team_id, gpu.namespace, gpu.pod, gpu.node)].append(gpu)

    opened, extended, resolved = [], [], []
    with transaction.atomic():
        open_alerts = {
            (a.team_id, a.namespace, a.pod, a.node): a
            for a in IdleGpuAlert.objects.select_for_update().filter(status=AlertStatus.OPEN)
        }
        for key, gpus in sorted(groups.items()):
            team_id, namespace, pod, node = key
            avg = round(sum(g.avg_utilization for g in gpus) / len(gpus), 2)
            text = _suggestion(
                gpus=len(gpus),
                node=node,
                namespace=namespace,
                pod=pod,
                avg=avg,
                minutes=minutes,
                threshold=threshold,
            )
            alert = open_alerts.pop(key, None)
            if alert is not None:
                alert.last_seen_at = now
                alert.gpus = len(gpus)
                alert.avg_utilization = avg
                alert.suggestion = text
                alert.save(update_fields=["last_seen_at", "gpus", "avg_utilization", "suggestion"])
                extended.append(alert.pk)
            else:
                alert = IdleGpuAlert.objects.create(
                    team_id=team_id,
                    namespace=namespace,
                    pod=pod,
                    node=node,
                    gpus=len(gpus),
                    avg_utilization=avg,
                    started_at=min(g.since for g in gpus),
                    last_seen_at=now,
                    suggestion=text,
                )
                opened.append(alert.pk)
        stale = [a.pk for a in open_alerts.values()]
        if stale:
            IdleGpuAlert.objects.filter(pk__in=stale).update(status=AlertStatus.RESOLVED)
            resolved.extend(stale)

    for alert in IdleGpuAlert.objects.filter(
        status=AlertStatus.OPEN, notified_at__isnull=True
    ).select_related("team"):
        claimed = IdleGpuAlert.objects.filter(pk=alert.pk, notified_at__isnull=True).update(
            notified_at=now
        )
        if claimed:
            notify_team(
                alert.team,
                subject=f"{alert.gpus} idle GPU(s) in {alert.namespace}",
                body=alert.suggestion,
            )
    if opened or resolved:
        logger.info(
            "idle GPUs: %d idle, alerts opened %s, extended %s, resolved %s",
            len(idle),
            opened,
            extended,
            resolved,
        )
    return IdleResult(len(idle), opened, extended, resolved)


# --------------------------------------------------------------------------- budgets


def month_start(moment: datetime) -> datetime:
    """The first instant of ``moment``'s calendar month, in UTC (rollups are UTC buckets)."""
    return floor_day(moment).replace(day=1)


@dataclass(frozen=True)
class BudgetUse:
    """How much of one monthly budget a team has allocated so far (``budget_use``).

    ``allocated_hours`` are the chargeback report's allocated hours of the budget's resource
    (requests × time, in billing units: GPU-, core-, GiB-hours) for ``[month_start, cutoff)``,
    rounded like the report (4 places); ``percent`` = allocated / budget × 100 (2 places).
    """

    team: Team
    budget: Budget
    resource: str
    unit: str
    month_start: datetime
    cutoff: datetime
    allocated_hours: Decimal
    budget_hours: Decimal
    percent: Decimal

    @property
    def fraction(self) -> Decimal:
        return self.percent / 100

    @property
    def over(self) -> bool:
        return self.allocated_hours >= self.budget_hours


def budget_cutoff(*, now: datetime) -> datetime:
    """The instant budget use counts up to: the end of the newest rolled-up hour of ``now``'s
    month (no later than ``now``), or the month's start when nothing is rolled up yet.

    Every surface (team page, Reports, the API, alerts and their emails, /metrics) counts up to
    this same instant, so at one moment they all show the same figure; it moves once an hour,
    when the hourly rollup job has run.
    """
    first = month_start(now)
    latest = UsageRollup.objects.filter(
        period=RollupPeriod.HOUR, start__gte=first, start__lt=now
    ).aggregate(t=Max("start"))["t"]
    return first if latest is None else min(latest + HOUR, now)


def budget_use(
    *, now: datetime | None = None, teams: Iterable[Team] | None = None
) -> list[BudgetUse]:
    """Budget use this month per (team, resource) budget: THE figure every surface shows.

    ``teams`` limits the result (None: every team with a budget). Allocated hours come from the
    chargeback report (``monitoring.chargeback.build_report``, grouped by team and resource) over
    ``[month start, budget_cutoff(now))``: the same hours, units and rounding as Reports, the CSV
    and the chargeback API. Sorted by team slug and resource.
    """
    from monitoring import chargeback
    from monitoring.domain.chargeback import unit_of

    now = now or timezone.now()
    first = month_start(now)
    cutoff = budget_cutoff(now=now)
    budgets = Budget.objects.select_related("team").order_by("team__slug", "resource")
    if teams is not None:
        budgets = budgets.filter(team__in=[getattr(team, "pk", team) for team in teams])
    budgets = list(budgets)
    if not budgets:
        return []
    used: dict[tuple[str, str], tuple[Decimal, Decimal]] = {}
    if first < cutoff:
        report = chargeback.build_report(
            start=first, end=cutoff, group_by=("team", "resource"), user=None
        ).report
        for line in report.lines:
            for use in line.budgets:
                used[(line.value("team"), use.resource)] = (use.used_hours, use.used_pct)
    none = (Decimal("0.0000"), Decimal("0.00"))
    out = []
    for budget in budgets:
        hours, percent = used.get((budget.team.slug, budget.resource), none)
        out.append(
            BudgetUse(
                team=budget.team,
                budget=budget,
                resource=budget.resource,
                unit=unit_of(budget.resource),
                month_start=first,
                cutoff=cutoff,
                allocated_hours=hours,
                budget_hours=budget.monthly_hours,
                percent=percent,
            )
        )
    return out


def month_to_date_hours(*, now: datetime) -> dict[tuple[int, str], Decimal]:
    """``{(team id, resource): allocated hours}`` of the budgeted resources: ``budget_use``."""
    return {(use.team.pk, use.resource): use.allocated_hours for use in budget_use(now=now)}


def check_budgets(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Raise a BudgetAlert the first time a team's budget use this month crosses each threshold.

    Budget use is ``budget_use``: allocated hours of the budget's resource (requests × time,
    what chargeback bills) up to the end of the newest rolled-up hour, the figure every page
    shows. Thresholds are ``FAIRSHARE_BUDGET_THRESHOLDS`` percent (default 80 and 100) of
    ``monthly_hours``. The unique (budget, month, threshold) constraint makes each alert, and its
    notification, happen once per month even when runs overlap. Returns the alerts created now.
    """
    now = now or timezone.now()
    thresholds = sorted(set(settings.FAIRSHARE_BUDGET_THRESHOLDS))
    created: list[BudgetAlert] = []
    for use in budget_use(now=now):
        budget, hours = use.budget, use.allocated_hours
        month: date = use.month_start.date()
        for threshold in thresholds:
            if hours < budget.monthly_hours * threshold / 100:
                break
            alert, is_new = BudgetAlert.objects.get_or_create(
                budget=budget,
                month=month,
                threshold=threshold,
                defaults={"allocated_hours": hours},
            )
            if not is_new:
                continue
            created.append(alert)
            notify_team(
                budget.team,
                subject=f"{budget.team.slug} reached {threshold} % of its {budget.resource} budget",
                body=budget_alert_text(use, threshold),
            )
            alert.notified_at = timezone.now()
            alert.save(update_fields=["notified_at"])
    return created


def budget_alert_text(use: BudgetUse, threshold: int) -> str:
    """The alert email's body: the figures as the team page shows them, and up to when."""
    return (
        f"Team {use.team.name} has allocated {use.allocated_hours:,.1f} of its "
        f"{use.budget_hours:,.1f} {use.resource} {use.unit}s budgeted for "
        f"{use.month_start:%B %Y} ({use.percent} %, the {threshold} % threshold), counted up to "
        f"{use.cutoff:%Y-%m-%d %H:%M} UTC."
    )


# --------------------------------------------------------------------------- GPU alerts


def gpu_reporting_window() -> timedelta:
    """How long a GPU counts as reporting after its newest sample: two minutes, or two agent
    intervals where those are longer (``/metrics`` and the team page use the same window)."""
    return max(gpu_alerts.FRESHNESS, 2 * gpu_agent_interval())


@dataclass(frozen=True)
class GpuAlert:
    """A GPU alert of ``deploy/monitoring/prometheusrule.yaml`` that fires now for one GPU."""

    alert: str
    severity: str
    summary: str
    node: str
    index: int
    uuid: str
    model: str
    namespace: str
    pod: str
    value: float
    unit: str
    since: datetime


def current_gpu_alerts(*, team: Team, now: datetime | None = None) -> list[GpuAlert]:
    """Return the GPU alerts firing now for the GPUs the team's pods use, newest samples first.

    Evaluates :data:`monitoring.domain.gpu_alerts.GPU_ALERT_RULES` (the PrometheusRule's
    thresholds and ``for:`` durations) on each GPU's samples attributed to ``team`` over the
    longest ``for:`` plus the reporting window, the way Prometheus evaluates the ``/metrics``
    series (:func:`monitoring.domain.gpu_alerts.evaluate`). Samples of other teams are never
    read, so a GPU that changed teams only counts from its first sample for this team. Sorted
    by severity (critical first), then node, GPU index and alert name. One query.
    """
    now = now or timezone.now()
    window = gpu_reporting_window()
    rows = (
        GpuSample.objects.filter(
            team=team, taken_at__gte=now - gpu_alerts.LONGEST_FOR - window, taken_at__lte=now
        )
        .order_by("uuid", "taken_at")
        .values_list(
            "uuid",
            "taken_at",
            "node",
            "index",
            "model",
            "namespace",
            "pod",
            "util_gpu",
            "mem_used",
            "mem_total",
            "temp_c",
        )
    )
    found: list[GpuAlert] = []
    for uuid, group in itertools.groupby(rows.iterator(chunk_size=5000), key=lambda r: r[0]):
        samples = list(group)
        readings = [
            gpu_alerts.Reading(
                taken_at=r[1],
                utilization=r[7],
                memory_percent=gpu_alerts.memory_percent(r[8], r[9]),
                temperature=r[10],
                namespace=r[5],
                pod=r[6],
            )
            for r in samples
        ]
        _, _, node, index, model, namespace, pod, *_ = samples[-1]
        for firing in gpu_alerts.evaluate_all(readings, now=now, freshness=window):
            rule = firing.rule
            found.append(
                GpuAlert(
                    alert=rule.alert,
                    severity=rule.severity,
                    summary=rule.summary,
                    node=node,
                    index=index,
                    uuid=uuid,
                    model=model,
                    namespace=namespace,
                    pod=pod,
                    value=firing.value,
                    unit=rule.unit,
                    since=firing.since,
                )
            )
    severity_order = {"critical": 0, "warning": 1}
    found.sort(key=lambda a: (severity_order.get(a.severity, 2), a.node, a.index, a.alert))
    return found
