"""Workloads (pure): PodGroups, Volcano Jobs, pods grouped by owner → gangs, and why they wait.

One collection feeds a :class:`WorkloadCollector`: first the (small) lists of PodGroups, Volcano
Jobs and Warning Events, then the pods one at a time as the usage aggregation streams them
(``monitoring.domain.aggregate.aggregate(..., workloads=collector)``). ``finish()`` returns one
:class:`Workload` per gang and the pending *gang demand* per namespace.

Grouping, in order (the first that applies):

1. a pod naming a listed PodGroup in its ``scheduling.k8s.io/group-name`` annotation
   (Volcano's ``KubeGroupNameAnnotationKey``, set by its job controller, read by its scheduler)
   belongs to that PodGroup's workload; a PodGroup owned by a Volcano Job is shown as that Job
   (kind ``VolcanoJob``), otherwise as the PodGroup;
2. a pod with the ``volcano.sh/job-name`` label (``JobNameKey``) belongs to that Volcano Job;
3. otherwise its controller ``ownerReference`` (``Job``, ``PyTorchJob``, ``StatefulSet``, ...);
   a ``ReplicaSet`` whose name is ``<deployment>-<pod-template-hash>`` is shown as the
   ``Deployment`` (the Deployment controller's naming, ``pkg/controller/deployment/sync.go``);
4. a pod without an owner is its own workload (kind ``Pod``).

**Kueue Workloads** (``kueue.x-k8s.io/v1beta2``, with the Kueue backend): Kueue holds a job
suspended — no pods at all — until it admits it, so a Workload is the only trace of waiting work.
A Workload is shown as its owner (the controller ``ownerReference``: a ``Job``, ``JobSet``,
``RayJob``...), which is also what its pods group under once they run. Until its ``Admitted``
condition is ``True`` it is a waiting gang demanding its whole requests (Σ podSets ``count`` ×
the pod template's effective request: Kueue ``pkg/workload/workload.go``
``totalRequestsFromPodSets``), and why it waits is Kueue's own ``QuotaReserved``/``Admitted``
condition reason and message (``apis/kueue/v1beta2/workload_types.go``), in people's words
(:func:`kueue_wait_words`); its queue is the ClusterQueue of ``status.admission`` or, before,
its LocalQueue. A ``Finished`` Workload is left out.

Volcano Jobs without a PodGroup yet, and quota refusals (Events whose message says
``exceeded quota``) about an object with no pod at all, are workloads too: a refused Job has no
pods to group.

**Gang demand.** A gang starts whole or not at all, so a waiting PodGroup (phase ``Pending`` or
``Inqueue``, or no phase yet) demands its whole gang: ``spec.minResources`` when set, else
``minMember`` × the largest request among its pods, else the Volcano Job's first ``minAvailable``
task pods; minus what its bound members already hold (those count as allocated). Its unbound pods
are *not* counted one by one. Pods of a running PodGroup, and of every other workload, count one
by one as before.

**Why a workload waits** (:func:`wait_reason`), the first that applies:

1. ``quota``: a ResourceQuota refused its pods (``exceeded quota`` Event; the words quote the
   quota's limit and use, e.g. "namespace research-ml's ResourceQuota allows 43 GPUs, 43 are in
   use");
2. ``capability``: the team's queue would pass its limit (quota ceiling, Volcano ``capability``);
3. ``fair-share``: the team's queue would pass its DRF fair allocation (Volcano ``deserved``);
4. ``unschedulable``: the scheduler's words — the PodGroup's ``Unschedulable`` condition, else a
   pod's ``PodScheduled=False`` / ``Unschedulable`` condition;
5. ``pending``: none of the above is known yet.

Nothing here reads the clock or settings; amounts are exact Decimals (``parse_quantity`` is
injected, as in ``aggregate``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .requests import pod_request

__all__ = [
    "GROUP_ANNOTATION",
    "QueueState",
    "QuotaRefusal",
    "WaitReason",
    "Workload",
    "WorkloadCollector",
    "kueue_wait_words",
    "parse_quota_refusal",
    "wait_reason",
]

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
JOB_NAME_LABEL = "volcano.sh/job-name"
POD_TEMPLATE_HASH = "pod-template-hash"
VOLCANO_JOB_API = "batch.volcano.sh/"
GPU = "nvidia.com/gpu"

WAITING_GANG_PHASES = frozenset({"Pending", "Inqueue", ""})

ParseQuantity = Callable[[Any], Decimal]
Resources = dict[str, Decimal]


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class WaitReason:
    code: str  # quota | capability | fair-share | unschedulable | admission (Kueue) | pending
    words: str


@dataclass(frozen=True)
class Workload:
    """One gang (or owner group) as one collection saw it.

    ``gang_size`` is the PodGroup's ``minMember`` (owner groups: the pods seen); ``requested`` the
    whole gang's requests; ``running`` the bound pods; ``signal`` what the cluster said about why it
    waits (``(code, words)``, set by the collector; :func:`wait_reason` adds the queue's view).
    """

    namespace: str
    name: str
    kind: str
    queue: str
    priority_class: str
    gang_size: int
    pods: int
    running: int
    requested: Mapping[str, Decimal]
    phase: str
    created: str  # RFC 3339 as the API server wrote it, "" when unknown
    waiting: bool
    signal: WaitReason | None = None
    team: str = ""
    # What must still be admitted for it to run: a waiting gang's demand (whole gang less its
    # bound members), an owner group's unbound pods; empty when nothing waits.
    waiting_for: Mapping[str, Decimal] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        """Whole GPUs the gang requests (``nvidia.com/gpu``)."""
        return int(self.requested.get(GPU, Decimal(0)))


@dataclass(frozen=True)
class QuotaRefusal:
    """A ResourceQuota admission refusal (``plugin/pkg/admission/resourcequota/controller.go``
    ``CheckRequest``: ``exceeded quota: %s, requested: %s, used: %s, limited: %s``)."""

    quota: str
    requested: Mapping[str, str]
    used: Mapping[str, str]
    limited: Mapping[str, str]


@dataclass(frozen=True)
class QueueState:
    """A team's queue at this collection: what it holds, its fair allocation, its ceiling."""

    team: str
    in_use: Mapping[str, Decimal]
    fair: Mapping[str, Decimal] = field(default_factory=dict)
    limit: Mapping[str, Decimal] = field(default_factory=dict)


# ---------------------------------------------------------------- reasons

_REFUSAL_RE = re.compile(
    r"exceeded quota: (?P<quota>[^,]+), requested: (?P<requested>.*?), used: (?P<used>.*?), "
    r"limited: (?P<limited>[^\s\"']+(?:,[^\s\"']+)*)"
)


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        if name and value:
            out[name] = value
    return out


def parse_quota_refusal(message: str) -> QuotaRefusal | None:
    """Return the refusal an ``exceeded quota`` message describes, or None for other messages."""
    match = _REFUSAL_RE.search(message or "")
    if match is None:
        return None
    return QuotaRefusal(
        quota=match["quota"].strip(),
        requested=_pairs(match["requested"]),
        used=_pairs(match["used"]),
        limited=_pairs(match["limited"]),
    )


def _resource_words(resource: str) -> str:
    name = resource.removeprefix("requests.").removeprefix("limits.")
    return {GPU: "GPUs", "cpu": "CPUs", "memory": "memory"}.get(name, name)


def _amount(amount: Decimal, resource: str = "") -> str:
    if resource.removeprefix("requests.") == "memory":
        return _amount((amount / 2**30).quantize(Decimal("0.01"))) + "Gi"
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


def _quota_words(namespace: str, refusal: QuotaRefusal) -> str:
    names = sorted(refusal.limited, key=lambda r: (GPU not in r, r))
    if not names:
        return f"waiting: namespace {namespace}'s ResourceQuota {refusal.quota} is exceeded"
    name = names[0]
    used = refusal.used.get(name, "?")
    return (
        f"waiting: namespace {namespace}'s ResourceQuota allows {refusal.limited[name]} "
        f"{_resource_words(name)}, {used} are in use"
    )


def wait_reason(workload: Workload, *, queue: QueueState | None = None) -> WaitReason | None:
    """Say why ``workload`` waits (module docstring for the order); None when it does not wait.

    The queue checks apply to workloads in a Volcano queue, resource by resource (GPUs first,
    then the others by name, so the words speak of GPUs whenever GPUs bind): ``in use + gang >
    limit`` → ``capability``, else ``in use + gang > fair`` → ``fair-share``.
    """
    if not workload.waiting:
        return None
    if workload.signal is not None and workload.signal.code == "quota":
        return workload.signal
    if queue is not None and workload.queue:
        wanted = workload.waiting_for or workload.requested
        names = sorted(wanted, key=lambda r: (r != GPU, r))
        for name in names:
            for code, bound, what in (
                ("capability", queue.limit, "its capability"),
                ("fair-share", queue.fair, "its fair allocation"),
            ):
                want = wanted[name]
                if want <= 0 or name not in bound:
                    continue
                held = queue.in_use.get(name, Decimal(0))
                if held + want > bound[name]:
                    amounts = (
                        f"{_amount(held, name)} of {_amount(bound[name], name)} "
                        f"{_resource_words(name)}"
                    )
                    if held >= bound[name]:
                        words = f"waiting: {queue.team}'s queue is at {what}, {amounts}"
                    else:
                        words = (
                            f"waiting: {queue.team}'s queue would pass {what}, {amounts} in "
                            f"use, this needs {_amount(want, name)}"
                        )
                    return WaitReason(code, words)
    if workload.signal is not None:
        return workload.signal
    return WaitReason("pending", "waiting: not scheduled yet")


# ---------------------------------------------------------------- collection


def _add_into(total: Resources, amounts: Mapping[str, Decimal]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, Decimal(0)) + amount


def _scaled(amounts: Mapping[str, Decimal], factor: int) -> Resources:
    return {name: amount * factor for name, amount in amounts.items()}


def _unschedulable(conditions: Any, kind: str) -> str:
    """The message of an Unschedulable condition ("" if none).

    PodGroup: ``type: Unschedulable, status: "True"`` (Volcano ``PodGroupUnschedulableType``).
    Pod: ``type: PodScheduled, status: "False", reason: Unschedulable``.
    """
    for condition in conditions or ():
        if not isinstance(condition, dict):
            continue
        if kind == "PodGroup":
            hit = condition.get("type") == "Unschedulable" and condition.get("status") == "True"
        else:
            hit = (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            )
        if hit:
            return str(condition.get("message") or condition.get("reason") or "Unschedulable")
    return ""


@dataclass(slots=True)
class _Group:
    namespace: str
    name: str
    kind: str
    queue: str = ""
    priority_class: str = ""
    min_member: int = 0
    min_resources: Resources | None = None
    phase: str = ""
    created: str = ""
    gang: bool = False  # a PodGroup: starts whole
    pods: int = 0
    running: int = 0
    unbound: int = 0
    requested: Resources = field(default_factory=dict)
    bound_requested: Resources = field(default_factory=dict)
    unbound_requested: Resources = field(default_factory=dict)
    largest: Resources = field(default_factory=dict)
    largest_key: tuple[Decimal, ...] = ()
    template: Resources | None = None  # Volcano Job: its first minAvailable task pods
    signal: str = ""
    signal_code: str = "unschedulable"  # Kueue's own reason: "admission"
    refs: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) events may name


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or () if isinstance(c, dict)}


def kueue_wait_words(conditions: Mapping[str, Mapping[str, Any]], queue: str) -> str:
    """Why Kueue has not admitted a Workload, from its conditions, for people.

    ``QuotaReserved`` ``False`` carries the scheduler's words (``Pending``: "couldn't assign
    flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor ...",
    ``Inadmissible``: "LocalQueue default doesn't exist" ...); quota reserved but not yet
    ``Admitted`` waits for admission checks (``AdmissionChecks`` state)."""
    reserved = conditions.get("QuotaReserved") or {}
    where = f"in Kueue queue {queue}" if queue else "in Kueue"
    if reserved.get("status") == "True":
        admitted = conditions.get("Admitted") or {}
        detail = admitted.get("message") or "its admission checks are not all Ready"
        return f"quota reserved {where}; not admitted yet: {detail}"
    reason = str(reserved.get("reason") or "")
    message = str(reserved.get("message") or "")
    if not reserved:
        return f"not looked at by Kueue yet ({where})"
    if reason == "Inadmissible":
        return f"Kueue cannot admit it {where}: {message or reason}"
    return f"waiting for quota {where}: {message or reason or 'no reason given'}"


def _owner(metadata: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(kind, name, apiVersion)`` of the controller ownerReference (else the first one)."""
    refs = [r for r in metadata.get("ownerReferences") or () if isinstance(r, dict)]
    if not refs:
        return None
    ref = next((r for r in refs if r.get("controller")), refs[0])
    return str(ref.get("kind") or ""), str(ref.get("name") or ""), str(ref.get("apiVersion") or "")


class WorkloadCollector:
    """Accumulates one collection's workloads; feed PodGroups, Jobs and Events before pods."""

    def __init__(self, parse_quantity: ParseQuantity) -> None:
        self._parse = parse_quantity
        self._groups: dict[tuple[str, str, str], _Group] = {}
        self._podgroups: dict[tuple[str, str], _Group] = {}
        self._vcjobs: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._refusals: dict[tuple[str, str, str], tuple[str, QuotaRefusal]] = {}
        self.notes: list[str] = []

    # -- inputs -------------------------------------------------------------------------------

    def _resources(self, raw: Any) -> Resources:
        if not isinstance(raw, dict):
            return {}
        return {str(k): Decimal(self._parse(v)) for k, v in raw.items()}

    def add_job(self, job: Mapping[str, Any]) -> None:
        """A ``batch.volcano.sh`` Job: remembered so its PodGroup and pods are shown as it."""
        metadata = job.get("metadata") or {}
        key = (metadata.get("namespace") or "default", metadata.get("name") or "")
        self._vcjobs[key] = job

    def _job_template(self, job: Mapping[str, Any]) -> Resources:
        """The requests of the Job's first ``minAvailable`` pods, tasks in order."""
        spec = job.get("spec") or {}
        tasks = [t for t in spec.get("tasks") or () if isinstance(t, dict)]
        total_replicas = sum(int(t.get("replicas") or 0) for t in tasks)
        left = int(spec.get("minAvailable") or total_replicas)
        out: Resources = {}
        for task in tasks:
            take = min(left, int(task.get("replicas") or 0))
            if take <= 0:
                continue
            pod_spec = (task.get("template") or {}).get("spec") or {}
            per_pod: Resources = {}
            for c in pod_spec.get("containers") or ():
                resources = (c or {}).get("resources") or {}
                requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
                _add_into(per_pod, self._resources(requests))
            _add_into(out, _scaled(per_pod, take))
            left -= take
        return out

    def add_podgroup(self, podgroup: Mapping[str, Any]) -> None:
        metadata = podgroup.get("metadata") or {}
        spec = podgroup.get("spec") or {}
        status = podgroup.get("status") or {}
        namespace = metadata.get("namespace") or "default"
        name = metadata.get("name") or ""
        owner = _owner(metadata)
        kind, shown = "PodGroup", name
        refs = [("PodGroup", name)]
        job = None
        if owner is not None and owner[0] == "Job" and owner[2].startswith(VOLCANO_JOB_API):
            kind, shown = "VolcanoJob", owner[1]
            refs.append(("Job", owner[1]))
            job = self._vcjobs.get((namespace, owner[1]))
        group = _Group(
            namespace=sys.intern(namespace),
            name=shown,
            kind=kind,
            queue=str(spec.get("queue") or ""),
            priority_class=str(spec.get("priorityClassName") or ""),
            min_member=int(spec.get("minMember") or 0),
            min_resources=self._resources(spec.get("minResources")) or None,
            phase=str(status.get("phase") or ""),
            created=str(metadata.get("creationTimestamp") or ""),
            gang=True,
            signal=_unschedulable(status.get("conditions"), "PodGroup"),
            refs=refs,
        )
        if job is not None:
            group.template = self._job_template(job)
            group.priority_class = group.priority_class or str(
                (job.get("spec") or {}).get("priorityClassName") or ""
            )
        self._podgroups[(namespace, name)] = group
        self._groups[(namespace, kind, shown)] = group

    def add_kueue_workload(self, workload: Mapping[str, Any]) -> None:
        """A Kueue Workload (module docstring): a waiting gang until admitted, then its owner's
        pods count one by one."""
        metadata = workload.get("metadata") or {}
        spec = workload.get("spec") or {}
        status = workload.get("status") or {}
        conditions = _conditions(status)
        if (conditions.get("Finished") or {}).get("status") == "True":
            return
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name") or "")
        owner = _owner(metadata)
        kind, shown = (owner[0], owner[1]) if owner else ("Workload", name)
        requested: Resources = {}
        count = 0
        for podset in spec.get("podSets") or ():
            if not isinstance(podset, dict):
                continue
            n = int(podset.get("count") or 0)
            count += n
            template = (podset.get("template") or {}).get("spec") or {}
            _add_into(requested, _scaled(pod_request({"spec": template}, self._parse), n))
        admission = status.get("admission") or {}
        queue = str(admission.get("clusterQueue") or spec.get("queueName") or "")
        key = (sys.intern(namespace), sys.intern(kind), shown)
        group = self._groups.get(key)
        if group is None:
            group = _Group(namespace=key[0], name=shown, kind=key[1], refs=[(kind, shown)])
            self._groups[key] = group
        group.queue = queue
        group.priority_class = str(spec.get("priorityClassName") or group.priority_class)
        group.created = group.created or str(metadata.get("creationTimestamp") or "")
        if (conditions.get("Admitted") or {}).get("status") != "True":
            group.gang = True
            group.phase = "Pending"
            group.min_member = count
            group.min_resources = requested or None
            group.signal = kueue_wait_words(conditions, queue)
            group.signal_code = "admission"

    def add_event(self, event: Mapping[str, Any]) -> None:
        """Keep the newest ``exceeded quota`` refusal per involved object."""
        refusal = parse_quota_refusal(str(event.get("message") or ""))
        if refusal is None:
            return
        involved = event.get("involvedObject") or {}
        metadata = event.get("metadata") or {}
        namespace = involved.get("namespace") or metadata.get("namespace") or "default"
        key = (namespace, str(involved.get("kind") or ""), str(involved.get("name") or ""))
        when = str(
            event.get("lastTimestamp")
            or event.get("eventTime")
            or metadata.get("creationTimestamp")
            or ""
        )
        if key not in self._refusals or when >= self._refusals[key][0]:
            self._refusals[key] = (when, refusal)

    def add_pod(
        self, pod: Mapping[str, Any], namespace: str, request: Mapping[str, Decimal], bound: bool
    ) -> bool:
        """Count a live pod into its workload. Return True if its request is part of a waiting
        gang's demand (then the caller must not count it as pending on its own)."""
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        group = None
        pg_name = annotations.get(GROUP_ANNOTATION)
        if pg_name:
            group = self._podgroups.get((namespace, pg_name))
        if group is None:
            group = self._owner_group(pod, metadata, namespace)
        group.pods += 1
        _add_into(group.requested, request)
        gang = group.gang
        if gang:  # only a gang's size is derived from its largest member
            key = tuple(request.get(r, Decimal(0)) for r in (GPU, "cpu", "memory"))
            if not group.largest or key > group.largest_key:
                group.largest, group.largest_key = dict(request), key
        if not group.priority_class:
            group.priority_class = str((pod.get("spec") or {}).get("priorityClassName") or "")
        if bound:
            group.running += 1
            if gang:  # subtracted from the gang's demand
                _add_into(group.bound_requested, request)
            return False
        group.unbound += 1
        if not gang:  # what an owner group waits for
            _add_into(group.unbound_requested, request)
        if not group.signal:
            group.signal = _unschedulable((pod.get("status") or {}).get("conditions"), "Pod")
        return group.gang and group.phase in WAITING_GANG_PHASES

    def _owner_group(self, pod: Mapping[str, Any], metadata: Mapping[str, Any], namespace: str):
        labels = metadata.get("labels") or {}
        owner = _owner(metadata)
        refs: list[tuple[str, str]] = []
        if labels.get(JOB_NAME_LABEL):
            kind, name = "VolcanoJob", str(labels[JOB_NAME_LABEL])
            refs.append(("Job", name))
        elif owner is not None:
            kind, name = owner[0], owner[1]
            refs.append((kind, name))
            template_hash = labels.get(POD_TEMPLATE_HASH)
            if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
                kind, name = "Deployment", name[: -len(template_hash) - 1]
        else:
            kind, name = "Pod", str(metadata.get("name") or "")
            refs.append(("Pod", name))
        key = (namespace, kind, name)
        group = self._groups.get(key)
        if group is None:
            group = _Group(namespace=sys.intern(namespace), name=name, kind=sys.intern(kind))
            if kind == "VolcanoJob":
                job = self._vcjobs.get((namespace, name))
                if job is not None:
                    group.queue = str((job.get("spec") or {}).get("queue") or "")
            self._groups[key] = group
        for ref in refs:
            if ref not in group.refs:
                group.refs.append(ref)
        created = str(metadata.get("creationTimestamp") or "")
        if created and (not group.created or created < group.created):
            group.created = created
        return group

    # -- output -------------------------------------------------------------------------------

    def _gang_request(self, group: _Group) -> Resources:
        if group.min_resources:
            return dict(group.min_resources)
        if group.largest and group.min_member:
            return _scaled(group.largest, max(group.min_member, 1))
        if group.template:
            return dict(group.template)
        return dict(group.requested)

    def _job_without_group(self, namespace: str, name: str, job: Mapping[str, Any]) -> None:
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        metadata = job.get("metadata") or {}
        phase = str((status.get("state") or {}).get("phase") or "Pending")
        group = _Group(
            namespace=namespace,
            name=name,
            kind="VolcanoJob",
            queue=str(spec.get("queue") or ""),
            priority_class=str(spec.get("priorityClassName") or ""),
            min_member=int(spec.get("minAvailable") or 0),
            phase=phase,
            created=str(metadata.get("creationTimestamp") or ""),
            gang=phase == "Pending",
            refs=[("Job", name)],
        )
        group.template = self._job_template(job)
        self._groups[(namespace, "VolcanoJob", name)] = group

    def finish(
        self, namespace_teams: Mapping[str, str], *, unassigned: str = "unassigned"
    ) -> tuple[list[Workload], dict[str, Resources]]:
        """Return ``(workloads, gang_pending)``: workloads sorted by namespace, kind and name;
        ``gang_pending`` is ``{namespace: demand of its waiting gangs}``, and of the owners whose
        pods a ResourceQuota refused (no pod of theirs exists to be counted as pending)."""
        for (namespace, name), job in self._vcjobs.items():
            if (namespace, "VolcanoJob", name) not in self._groups:
                self._job_without_group(namespace, name, job)
        claimed: set[tuple[str, str, str]] = set()
        for group in self._groups.values():
            for kind, name in group.refs:
                claimed.add((group.namespace, kind, name))
        for (namespace, kind, name), (_, refusal) in sorted(self._refusals.items()):
            if (namespace, kind, name) in claimed or kind in ("", "Namespace"):
                continue
            # A refused owner with no pods at all: its pods were never created.
            group = _Group(namespace=namespace, name=name, kind=kind, refs=[(kind, name)])
            group.requested = self._resources(
                {k.removeprefix("requests."): v for k, v in refusal.requested.items()}
            )
            group.unbound = 1
            group.unbound_requested = dict(group.requested)
            self._groups[(namespace, kind, name)] = group

        workloads: list[Workload] = []
        gang_pending: dict[str, Resources] = {}
        for key in sorted(self._groups):
            group = self._groups[key]
            if group.gang:
                requested = self._gang_request(group)
                waiting = group.phase in WAITING_GANG_PHASES
                demand: Resources = {}
                if waiting:
                    demand = {
                        r: a - group.bound_requested.get(r, Decimal(0))
                        for r, a in requested.items()
                    }
                    demand = {r: a for r, a in demand.items() if a > 0}
                    if demand:
                        _add_into(gang_pending.setdefault(group.namespace, {}), demand)
                phase = group.phase or "Pending"
                size = group.min_member or group.pods
            else:
                requested = dict(group.requested)
                waiting = group.unbound > 0
                demand = dict(group.unbound_requested)
                if group.pods == 0 and demand:
                    # An owner whose pods a ResourceQuota refused has no pending pod to count:
                    # what it waits for is demand all the same (running plus waiting, issue
                    # 29), or a preview could never show the quota that admits it.
                    _add_into(gang_pending.setdefault(group.namespace, {}), demand)
                size = group.pods
                if group.pods == 0:
                    phase = "Pending"
                elif group.unbound == 0:
                    phase = "Running"
                elif group.running == 0:
                    phase = "Pending"
                else:
                    phase = "Partial"
            refusal = None
            for kind, name in group.refs:
                found = self._refusals.get((group.namespace, kind, name))
                if found is not None and (refusal is None or found[0] > refusal[0]):
                    refusal = found
            signal = None
            if refusal is not None and waiting:
                signal = WaitReason("quota", _quota_words(group.namespace, refusal[1]))
            elif group.signal and waiting:
                words = group.signal
                if words == "Unschedulable":  # the condition carried no message
                    words = f"the scheduler found no node for {group.unbound} of its pods"
                signal = WaitReason(group.signal_code, f"waiting: {words}")
            workloads.append(
                Workload(
                    namespace=group.namespace,
                    name=group.name,
                    kind=group.kind,
                    queue=group.queue,
                    priority_class=group.priority_class,
                    gang_size=size,
                    pods=group.pods,
                    running=group.running,
                    requested={r: a for r, a in sorted(requested.items()) if a},
                    phase=phase,
                    created=group.created,
                    waiting=waiting,
                    signal=signal,
                    team=namespace_teams.get(group.namespace, unassigned),
                    waiting_for={r: a for r, a in sorted(demand.items()) if a} if waiting else {},
                )
            )
        return workloads, gang_pending
