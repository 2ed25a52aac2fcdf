"""The demo's history (pure, deterministic): which pods of the demo cluster ran when, and what
their GPUs read.

The demo cluster (``monitoring/fixtures/demo_cluster.json``) is one moment: *now*. To give the
demo weeks of usage, rollups, chargeback and share history, ``manage.py backfill_demo`` replays
the weeks before it through the product's own code (aggregation, ``store_usage``, rollups,
budgets, shares, idle detection). This module decides what it replays, from nothing but pod
names and times, so every run gives the same history:

* **Which pods ran at time t.** Each pod runs in blocks of a few hours (the length depends on its
  name); in each block it runs with its namespace's *duty* (a training namespace runs most of
  the time, a research one less, and less at weekends). Duty grows towards 1 as t approaches
  the end of the history, so usage rises over the weeks and meets the snapshot, where every
  pod runs.
* **What a GPU reads.** A GPU of a running pod reads its namespace's utilization profile: a
  mean, a daily swing (inference follows the working day), and noise; temperature, power and
  memory follow utilization. One pod per namespace profile can be marked *idle* (a notebook
  left holding a GPU): it reads 2-6 %, so idle-GPU detection and chargeback's idle share have
  something real to find. A few GPUs read what trips one of the source documents' GPU alerts
  (``monitoring.domain.gpu_alerts``): a data-loader-bound pod under 50 %, a GPU with its memory
  full, one running hot.

Nothing here reads a clock, settings or the database.
"""

from __future__ import annotations

import functools
import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from monitoring.domain import gpu_alerts

__all__ = [
    "GPU",
    "PROFILES",
    "DemoGpu",
    "Profile",
    "Reading",
    "demo_gpus",
    "pods_at",
    "readings_at",
    "running",
]

GPU = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
HISTORY = timedelta(days=35)  # how far back duty starts from its base value
MIB = 2**20


@dataclass(frozen=True)
class Profile:
    """How a namespace's pods run and what their GPUs read."""

    duty: float  # share of blocks a pod runs in, five weeks back (grows to 1 at the end)
    weekend: float = 1.0  # duty factor on Saturdays and Sundays
    util: float = 80.0  # mean GPU utilization, %
    swing: float = 5.0  # amplitude of the daily cycle, % (peak at 14:00 UTC)
    noise: float = 6.0  # ± uniform noise, %
    idle_pods: int = 0  # the N smallest GPU pods of the namespace idle at 2-6 % (a notebook)
    trips: str = ""  # the smallest GPU pod's first GPU reads what trips this GPU alert


PROFILES: Mapping[str, Profile] = {
    "prod-training": Profile(duty=0.85, util=88, swing=3, trips=gpu_alerts.HIGH_TEMPERATURE.alert),
    "prod-inference": Profile(duty=0.95, util=70, swing=14, noise=6),
    "research-ml": Profile(duty=0.55, weekend=0.6, util=82),
    "research-nlp": Profile(duty=0.5, weekend=0.5, util=74, idle_pods=1),
    "cv-vision": Profile(duty=0.6, weekend=0.7, util=79, trips=gpu_alerts.HIGH_MEMORY.alert),
    "speech-asr": Profile(
        duty=0.5, weekend=0.6, util=71, noise=10, trips=gpu_alerts.LOW_UTILIZATION.alert
    ),
    "platform-tools": Profile(duty=0.9, util=30),
    "shared-batch": Profile(duty=0.7, util=65, noise=12),
}
DEFAULT_PROFILE = Profile(duty=0.7)


def _unit(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) from ``parts`` (no global random state)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _profile(namespace: str) -> Profile:
    return PROFILES.get(namespace, DEFAULT_PROFILE)


def _name(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def running(pod: Mapping[str, Any], t: datetime, *, end: datetime) -> bool:
    """Whether ``pod`` (a manifest of the snapshot) runs at ``t`` in a history ending at ``end``.

    Finished pods (Succeeded, Failed) never run; at ``end`` every other pod runs.
    """
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if t >= end:
        return True
    namespace, name = _name(pod)
    profile = _profile(namespace)
    age = min(1.0, (end - t) / HISTORY)
    duty = profile.duty + (1 - profile.duty) * (1 - age) ** 2
    if t.astimezone(UTC).weekday() >= 5:
        duty *= profile.weekend
    block = int(t.timestamp() // 3600) // _block_hours(namespace, name)
    return _run_draw(namespace, name, block) < duty


@functools.lru_cache(maxsize=4096)
def _block_hours(namespace: str, name: str) -> int:
    return 3 + int(_unit("block", namespace, name) * 10)  # 3..12 h


@functools.lru_cache(maxsize=65536)
def _run_draw(namespace: str, name: str, block: int) -> float:
    return _unit("run", namespace, name, block)


def pods_at(pods: Iterable[Mapping[str, Any]], t: datetime, *, end: datetime) -> list[dict]:
    """The pods of the snapshot that run at ``t`` (the others are left out, as if gone)."""
    return [dict(pod) for pod in pods if running(pod, t, end=end)]


# ---------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class DemoGpu:
    """One GPU of the demo cluster held by a pod of the snapshot."""

    node: str
    index: int
    uuid: str
    model: str  # NVML's device name: the node label with dashes as spaces
    namespace: str
    pod: str
    idle: bool
    trips: str = ""  # the GPU alert its readings trip ("" for none)


@dataclass(frozen=True)
class Reading:
    """What the node agent would read from ``gpu`` at ``t`` (its sample fields)."""

    gpu: DemoGpu
    taken_at: datetime
    util_gpu: float
    util_mem: float
    mem_used: int
    mem_total: int
    power_w: float
    temp_c: float


def _gpu_count(pod: Mapping[str, Any]) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(requests.get(GPU, limits.get(GPU, 0)) or 0)
    return total


def demo_gpus(
    nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> list[DemoGpu]:
    """The GPUs held by the snapshot's bound, unfinished pods: on each node, pods (by name) get
    consecutive GPU indices; UUIDs derive from node and index, as stable as real ones."""
    model_of = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        label = (meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, "")
        model_of[meta.get("name")] = " ".join(label.split("-"))
    by_node: dict[str, list[tuple[str, str, int]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        gpus = _gpu_count(pod)
        if node and gpus and phase not in ("Succeeded", "Failed"):
            namespace, name = _name(pod)
            by_node.setdefault(node, []).append((namespace, name, gpus))
    idle_left = {ns: profile.idle_pods for ns, profile in PROFILES.items()}
    idle_pods, tripping = set(), {}
    held = sorted((ns, gpus, name) for pods_on in by_node.values() for ns, name, gpus in pods_on)
    for namespace, _, name in held:  # the smallest pods of a namespace idle first
        if idle_left.get(namespace, 0) > 0:
            idle_left[namespace] -= 1
            idle_pods.add((namespace, name))
        elif namespace not in tripping.values() and _profile(namespace).trips:
            tripping[(namespace, name)] = namespace
    out = []
    for node in sorted(by_node):
        index = 0
        for namespace, name, gpus in sorted(by_node[node]):
            first = True
            for _ in range(gpus):
                out.append(
                    DemoGpu(
                        node=node,
                        index=index,
                        uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}.demo')}",
                        model=model_of.get(node, ""),
                        namespace=namespace,
                        pod=name,
                        idle=(namespace, name) in idle_pods,
                        trips=_profile(namespace).trips
                        if (namespace, name) in tripping and first
                        else "",
                    )
                )
                index += 1
                first = False
    return out


def readings_at(
    gpus: Iterable[DemoGpu],
    t: datetime,
    *,
    end: datetime,
    running_pods: set[tuple[str, str]],
) -> list[Reading]:
    """Readings at ``t`` of the GPUs whose pod runs then (``running_pods``: (namespace, name))."""
    hour = t.astimezone(UTC).hour + t.minute / 60
    out = []
    for gpu in gpus:
        if (gpu.namespace, gpu.pod) not in running_pods:
            continue
        profile = _profile(gpu.namespace)
        jitter = _unit("util", gpu.uuid, int(t.timestamp() // 60)) * 2 - 1
        mem_total = 81559 * MIB  # an H100 80GB as NVML reports it
        if gpu.trips:
            values = gpu_alerts.TRIPPING_VALUES[gpu.trips]
            util = values["util_gpu"] + jitter
            mem_share = values["mem_fraction"]
            temp = values["temp_c"] + jitter
        else:
            if gpu.idle:
                util = 4 + 2 * jitter
            else:
                daily = math.cos((hour - 14) / 24 * 2 * math.pi)
                util = profile.util + profile.swing * daily + profile.noise * jitter
            util = min(100.0, max(0.0, util))
            mem_share = 0.08 if gpu.idle else 0.35 + 0.55 * util / 100
            temp = 31 + 0.42 * util + 3 * jitter
        util = round(util, 1)
        out.append(
            Reading(
                gpu=gpu,
                taken_at=t,
                util_gpu=util,
                util_mem=round(util * 0.6, 1),
                mem_used=int(mem_total * mem_share),
                mem_total=mem_total,
                power_w=round(70 + 6.3 * util, 1),
                temp_c=round(temp, 1),
            )
        )
    return out
