"""GPU-sample ingest: one agent batch checked against its token's node, the collection's GPU
inventory and the trust rules (bounds, age, spacing, identity), stored in one transaction;
refused samples are counted per reason (``GpuSampleRejection``)."""

from __future__ import annotations

import bisect
import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from monitoring.models import (
    GpuDevice,
    GpuInventoryNode,
    GpuSample,
    GpuSampleRejection,
)
from monitoring.units import flavor_of_model, floor_hour
from quotas.models import Namespace

logger = logging.getLogger(__name__)

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
    # GPU UUID → the (namespace, name) of the pods holding it through DRA claims, sorted
    by_gpu: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    @classmethod
    def load(cls, node: str) -> _Inventory | None:
        row = GpuInventoryNode.objects.filter(name=node).first()
        if row is None:
            return None
        pods = [(entry[2], entry[0], entry[1]) for entry in row.pods]
        by_gpu: dict[str, set[tuple[str, str]]] = {}
        for entry in row.pods:
            for uuid in entry[3] if len(entry) > 3 else ():
                by_gpu.setdefault(uuid, set()).add((entry[0], entry[1]))
        return cls(
            node=node,
            gpus=row.gpus,
            product=row.product,
            by_uid={uid: (ns, name) for uid, ns, name in pods if uid},
            by_name=frozenset((ns, name) for _, ns, name in pods),
            by_gpu={uuid: tuple(sorted(held)) for uuid, held in by_gpu.items()},
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


def _attribution(processes: Any, inventory: _Inventory, uuid: str = "") -> tuple[str, str]:
    """Pick the pod of a GPU: among its processes' pods (each must be on the node), the one
    using the most memory (ties: by name). Processes outside pods are ignored. When no process
    names a pod, the pod holding the GPU through a DRA claim (the collection's ResourceSlices
    name its UUID; several pods sharing one claim: the first by name) is the GPU's."""
    namespace, pod = _process_attribution(processes, inventory)
    if not pod and uuid in inventory.by_gpu:
        namespace, pod = inventory.by_gpu[uuid][0]
    return namespace, pod


def _process_attribution(processes: Any, inventory: _Inventory) -> tuple[str, str]:
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
    namespace, pod = _attribution(raw.get("processes"), inventory, uuid)
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
    node, samples, agent = _batch_shape(batch, token_node=token_node)
    inventory = _Inventory.load(node) if samples else None
    parsed, refused, duplicates = _parse_all(samples, inventory=inventory, node=node, now=now)
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


def _batch_shape(batch: Any, *, token_node: str) -> tuple[str, list, dict]:
    """Rule 1 of ``ingest_gpu_batch``: the batch is the documented shape and every node it names
    is the token's; return its node, samples and agent block. Raises ValidationError naming
    the field."""
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
    return node, samples, agent


def _parse_all(
    samples: list, *, inventory: _Inventory | None, node: str, now: datetime
) -> tuple[
    dict[tuple[str, datetime], tuple[int, GpuSample]], list[tuple[int, SampleRejected]], int
]:
    """Rule 2 of ``ingest_gpu_batch``: each sample parsed and checked against the inventory,
    then the batch's GPU identities and spacing; return the accepted samples by (uuid, time)
    with their index, the refused ones with theirs, and the repeats within the batch."""
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
    return parsed, refused, duplicates


def _counter(agent: Mapping, key: str) -> int:
    value = agent.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
