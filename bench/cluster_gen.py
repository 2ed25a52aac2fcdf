"""Seeded generators of Kubernetes nodes and pods shaped like ``kubectl get nodes,pods -A -o json``.

Two uses:

* ``python bench/cluster_gen.py --demo > monitoring/fixtures/demo_cluster.json`` writes the demo
  cluster: 127 H100 nodes x 8 GPUs (one NotReady, one cordoned, so exactly 1,000 GPUs are
  schedulable), 16 CPU-only nodes, and 554 pods across seven team namespaces, the unmanaged
  ``shared-batch`` and ``kube-system``. Each team's allocated requests fit its ``seed_demo`` quota
  limits (498 GPUs allocated in all, 224 of them unassigned). Workloads are hand-placed (first-fit,
  never over a node's allocatable) and cover Running, Pending (bound and unbound), Succeeded and
  Failed pods, init containers, sidecars and pod overhead.
* ``python bench/cluster_gen.py --demo --dra > monitoring/fixtures/demo_cluster_dra.json`` writes
  the demo with Dynamic Resource Allocation: the committed demo's items unchanged (the
  generator's, then the Fairshare-managed objects scripts/make_demo_cluster.py added), then four
  H100 nodes run by NVIDIA's DRA driver (two of whole GPUs, two in static MIG mode), their
  ResourceSlices, the ``gpu.nvidia.com``/``mig.nvidia.com`` DeviceClasses and the claims of
  ``DRA_CLAIMS`` (exclusive, shared by two pods, template-generated, pending, finished) with
  their pods. Regenerate it after either of the other two writes the base demo.
* ``generate_nodes(n)`` / ``generate_pods(m, nodes)`` (or ``--nodes N --pods M``) make arbitrarily
  large clusters for benchmarks. Pods are yielded lazily and are *not* packed: a node may be
  over-committed, which does not matter for throughput measurements.

Everything is deterministic for a given seed: no clock (timestamps derive from ``BASE_TIME``),
uids come from the seeded RNG. Output is a ``List`` with one compact item per line, so diffs stay
readable.
This module uses only the standard library.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
L40S = "NVIDIA-L40S"
BASE_TIME = datetime(2025, 11, 3, 9, 0, 0, tzinfo=UTC)
DEMO_SEED = 20251103
DEMO_NAMESPACES = (
    "research-ml",
    "research-nlp",
    "prod-inference",
    "prod-training",
    "cv-vision",
    "speech-asr",
    "platform-tools",
)
GPU = "nvidia.com/gpu"

Json = dict[str, Any]


# ---------------------------------------------------------------- object builders


def _timestamp(minutes: int) -> str:
    return (BASE_TIME + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))


def make_node(
    name: str,
    *,
    rng: random.Random,
    cpu: str,
    memory: str,
    gpus: int = 0,
    product: str | None = None,
    zone: str = "us-east-1a",
    instance_type: str = "m7i.16xlarge",
    ready: bool = True,
    unschedulable: bool = False,
) -> Json:
    """Return a Node dict with allocatable ``cpu``/``memory`` (and ``gpus`` of ``product``)."""
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
    }
    allocatable = {
        "cpu": cpu,
        "ephemeral-storage": "3435973836800" if gpus else "472446402560",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": memory,
        "pods": "110",
    }
    taints = []
    if gpus:
        labels[GPU + ".count"] = str(gpus)
        if product is not None:
            labels[GPU + ".product"] = product
        allocatable[GPU] = str(gpus)
        taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
    if unschedulable:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    if not ready:
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    spec: Json = {"providerID": f"aws:///{zone}/i-{rng.getrandbits(64):016x}"}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    heartbeat = _timestamp(0 if ready else -42)
    ready_condition = {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": _timestamp(-10_000 if ready else -38),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(rng),
            "creationTimestamp": _timestamp(-60 * 24 * 90),
            "labels": labels,
        },
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False" if ready else "Unknown",
                    "lastHeartbeatTime": heartbeat,
                },
                ready_condition,
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.31.4",
                "containerRuntimeVersion": "containerd://1.7.24",
            },
        },
    }


def container(
    name: str,
    image: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    *,
    restart_policy: str | None = None,
) -> Json:
    """Return a container dict; ``restart_policy="Always"`` makes an init container a sidecar."""
    out: Json = {"name": name, "image": image}
    resources: Json = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    out["resources"] = resources
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    return out


def make_pod(
    name: str,
    namespace: str,
    *,
    rng: random.Random,
    containers: Sequence[Json],
    init_containers: Sequence[Json] = (),
    node: str | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    scheduler: str = "default-scheduler",
    overhead: dict[str, str] | None = None,
    runtime_class: str | None = None,
    gpu: bool = False,
    minutes: int = 0,
) -> Json:
    """Return a Pod dict as the API server shows it (``spec.nodeName`` set iff bound)."""
    spec: Json = {"containers": list(containers), "restartPolicy": "Never" if gpu else "Always"}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if node is not None:
        spec["nodeName"] = node
    spec["schedulerName"] = scheduler
    if gpu:
        spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    if overhead:
        spec["overhead"] = overhead
    status: Json = {"phase": phase}
    if node is None:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    else:
        status["startTime"] = _timestamp(minutes)
    if phase == "Pending" and node is not None:
        status["containerStatuses"] = [
            {
                "name": c["name"],
                "ready": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
            for c in containers
        ]
    if phase == "Failed":
        status["reason"] = "OOMKilled"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(rng),
            "creationTimestamp": _timestamp(minutes),
            "labels": labels or {},
        },
        "spec": spec,
        "status": status,
    }


# ---------------------------------------------------------------- the demo cluster


@dataclass
class _Slot:
    name: str
    free: dict[str, float]
    pods: list[str] = field(default_factory=list)


class _Packer:
    """First-fit placement over a fixed node order; never exceeds a node's allocatable."""

    def __init__(self, nodes: Iterable[Json]) -> None:
        self.slots = {
            n["metadata"]["name"]: _Slot(
                n["metadata"]["name"],
                {
                    "cpu": float(n["status"]["allocatable"]["cpu"]),
                    "memory": _gib(n["status"]["allocatable"]["memory"]),
                    GPU: float(n["status"]["allocatable"].get(GPU, "0")),
                },
            )
            for n in nodes
        }

    def place(self, need: dict[str, float], *, on: Sequence[str]) -> str:
        for name in on:
            slot = self.slots[name]
            if all(slot.free[r] >= amount for r, amount in need.items()):
                for r, amount in need.items():
                    slot.free[r] -= amount
                return name
        raise RuntimeError(f"demo cluster is full for {need}")


def _gib(memory: str) -> float:
    units = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1.0}
    return float(memory[:-2]) * units[memory[-2:]]


def _need(requests: dict[str, str]) -> dict[str, float]:
    def cores(v: str) -> float:
        return float(v[:-1]) / 1000 if v.endswith("m") else float(v)

    return {
        "cpu": cores(requests.get("cpu", "0")),
        "memory": _gib(requests["memory"]) if "memory" in requests else 0.0,
        GPU: float(requests.get(GPU, "0")),
    }


def _job(
    rng: random.Random,
    packer: _Packer,
    gpu_nodes: Sequence[str],
    *,
    namespace: str,
    job: str,
    workers: int,
    gpus: int,
    cpu: str,
    memory: str,
    image: str,
    phase: str = "Running",
    bound: bool = True,
    init: Json | None = None,
    prefer: Sequence[str] = (),
    minutes: int = -600,
) -> list[Json]:
    """Volcano job pods ``<job>-worker-<i>``; bound ones are packed, unbound ones stay Pending."""
    requests = {"cpu": cpu, "memory": memory, GPU: str(gpus)}
    pods = []
    for i in range(workers):
        node = None
        if bound and phase in ("Succeeded", "Failed"):
            # Finished pods keep their nodeName but no longer hold resources.
            node = gpu_nodes[(i * 7) % len(gpu_nodes)]
        elif bound:
            order = [*prefer[i : i + 1], *gpu_nodes] if i < len(prefer) else gpu_nodes
            node = packer.place(_need(requests), on=order)
        pods.append(
            make_pod(
                f"{job}-worker-{i}",
                namespace,
                rng=rng,
                containers=[container("trainer", image, dict(requests), dict(requests))],
                init_containers=[init] if init else (),
                node=node,
                phase=phase if bound else "Pending",
                labels={"volcano.sh/job-name": job, "volcano.sh/task-spec": "worker"},
                scheduler="volcano",
                gpu=True,
                minutes=minutes,
            )
        )
    return pods


def _deployment(
    rng: random.Random,
    packer: _Packer,
    nodes: Sequence[str],
    *,
    namespace: str,
    app: str,
    replicas: int,
    requests: dict[str, str],
    limits: dict[str, str] | None = None,
    image: str,
    init_containers: Sequence[Json] = (),
    phases: dict[int, str] | None = None,
    unbound: Sequence[int] = (),
    overhead: dict[str, str] | None = None,
    runtime_class: str | None = None,
    minutes: int = -2000,
) -> list[Json]:
    """ReplicaSet-style pods ``<app>-<hash>-<suffix>``; ``unbound`` replicas stay unscheduled."""
    template_hash = _suffix(rng, 10)
    gpu = GPU in requests
    pods = []
    for i in range(replicas):
        phase = (phases or {}).get(i, "Running")
        need = _need(requests)
        if overhead:
            extra = _need(overhead)
            need = {r: need[r] + extra[r] for r in need}
        if i in unbound:
            node = None
        elif phase in ("Succeeded", "Failed"):
            node = nodes[(i * 7) % len(nodes)]
        else:
            node = packer.place(need, on=nodes)
        pods.append(
            make_pod(
                f"{app}-{template_hash}-{_suffix(rng)}",
                namespace,
                rng=rng,
                containers=[container(app, image, dict(requests), dict(limits or requests))],
                init_containers=init_containers,
                node=node,
                phase="Pending" if node is None else phase,
                labels={"app.kubernetes.io/name": app, "pod-template-hash": template_hash},
                overhead=overhead,
                runtime_class=runtime_class,
                gpu=gpu,
                minutes=minutes + i,
            )
        )
    _owned_by(pods, "apps/v1", "ReplicaSet", f"{app}-{template_hash}", namespace)
    return pods


def _owned_by(pods: list[Json], api_version: str, kind: str, name: str, namespace: str) -> None:
    """Give pods their controller ownerReference (uid derived from the owner: no RNG used)."""
    ref = {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"fairshare-demo:{kind}/{namespace}/{name}")),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [dict(ref)]


def _daemonset(
    rng: random.Random,
    nodes: Sequence[str],
    *,
    app: str,
    image: str,
    requests: dict[str, str] | None,
    limits: dict[str, str] | None = None,
    gpu_tolerant: bool = False,
) -> list[Json]:
    """One ``kube-system`` pod per node (DaemonSet pods are placed regardless of free room)."""
    pods = [
        make_pod(
            f"{app}-{_suffix(rng)}",
            "kube-system",
            rng=rng,
            containers=[container(app, image, requests, limits)],
            node=node,
            labels={"k8s-app": app},
            gpu=gpu_tolerant,
            minutes=-60 * 24 * 30,
        )
        for node in nodes
    ]
    _owned_by(pods, "apps/v1", "DaemonSet", app, "kube-system")
    return pods


def demo_cluster() -> Json:
    """Return the demo cluster as a ``kind: List`` of Nodes then Pods (deterministic).

    Nodes: ``gpu-h100-000``..``gpu-h100-126`` (192 cores, 2015Gi, 8 H100 each; ``-125`` NotReady and
    ``-126`` cordoned, each still running one training worker) and ``cpu-000``..``cpu-015`` (64
    cores, 256Gi). Pods: training jobs (8-GPU workers of 48 cores and 256Gi), notebooks and
    inference (1-4 GPUs) in the six GPU namespaces, CPU services in ``platform-tools``, and in the
    unmanaged (team-less) namespaces batch work in ``shared-batch`` and DaemonSets/CoreDNS in
    ``kube-system``.

    Sized to the ``seed_demo`` quotas: every team's *allocated* requests (bound, not finished pods)
    fit its limits, and every namespace's fit its ResourceQuota, the team limit split by
    ``Namespace.share``. GPUs allocated (+ pending) against the limit: research-team 56 (+24) of
    64 (research-ml 36 of 43, research-nlp 20 of 21), production-team 120 (+1) of 136 after the
    approved request (prod-training 96 of 102, prod-inference 24 of 34), cv-team 64 (+16) of 96,
    speech-team 34 (+4) of 48, platform-team CPU only; ``shared-batch`` 224 (+8), no quota.
    """
    rng = random.Random(DEMO_SEED)
    zones = ("us-east-1a", "us-east-1b", "us-east-1c")
    gpu_names = [f"gpu-h100-{i:03d}" for i in range(127)]
    cpu_names = [f"cpu-{i:03d}" for i in range(16)]
    not_ready, cordoned = gpu_names[125], gpu_names[126]
    nodes = [
        make_node(
            name,
            rng=rng,
            cpu="192",
            memory="2112880640Ki",
            gpus=8,
            product=H100,
            zone=zones[i % 3],
            instance_type="p5.48xlarge",
            ready=name != not_ready,
            unschedulable=name == cordoned,
        )
        for i, name in enumerate(gpu_names)
    ] + [
        make_node(name, rng=rng, cpu="64", memory="268435456Ki", zone=zones[i % 3])
        for i, name in enumerate(cpu_names)
    ]
    packer = _Packer(nodes)
    # New work never lands on the NotReady or cordoned node; only `prefer=` puts a pod there.
    open_gpu = gpu_names[:125]

    pods: list[Json] = []
    pods += _daemonset(
        rng,
        gpu_names + cpu_names,
        app="kube-proxy",
        image="registry.k8s.io/kube-proxy:v1.31.4",
        requests={"cpu": "100m"},
        gpu_tolerant=True,
    )
    pods += _daemonset(
        rng,
        gpu_names,
        app="nvidia-device-plugin",
        image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        requests=None,
        gpu_tolerant=True,
    )
    pods += _daemonset(
        rng,
        gpu_names,
        app="dcgm-exporter",
        image="nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9",
        requests={"cpu": "100m", "memory": "128Mi"},
        limits={"memory": "256Mi"},
        gpu_tolerant=True,
    )
    for name in (*gpu_names, *cpu_names):
        packer.slots[name].free["cpu"] -= 0.2
        packer.slots[name].free["memory"] -= 0.125
    pods += _deployment(
        rng,
        packer,
        cpu_names,
        namespace="kube-system",
        app="coredns",
        replicas=2,
        requests={"cpu": "100m", "memory": "70Mi"},
        limits={"memory": "170Mi"},
        image="registry.k8s.io/coredns/coredns:v1.11.3",
    )

    fetch = container(
        "fetch-dataset", "registry.example.com/tools/s5cmd:2.2", {"cpu": "4", "memory": "16Gi"}
    )
    trainer = "registry.example.com/train/megatron:24.10"
    # Every team's allocated requests fit its quota limits and each namespace's ResourceQuota (the
    # team limit split by Namespace.share in seed_demo); pending pods are the demand beyond that.
    # An 8-GPU training worker asks for 48 cores and 256Gi.
    # prod-training (ResourceQuota 102 GPUs, 768 cores, 3072Gi): 80 + 16 GPUs, 576 cores, 2944Gi;
    # one worker each on the NotReady and the cordoned node.
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="prod-training",
        job="foundation-70b",
        workers=10,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image=trainer,
        init=fetch,
        prefer=[not_ready],
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="prod-training",
        job="nightly-finetune",
        workers=2,
        gpus=8,
        cpu="48",
        memory="192Gi",
        image=trainer,
        prefer=[cordoned],
        minutes=-180,
    )
    # research-nlp (21 GPUs, 170.667 cores, 682.67Gi): 16 + 4 GPUs, 128 cores, 640Gi bound;
    # 8 GPUs pending.
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-nlp",
        job="llm-pretrain-7b",
        workers=2,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image=trainer,
        init=fetch,
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-nlp",
        job="tokenizer-eval",
        workers=2,
        gpus=2,
        cpu="16",
        memory="64Gi",
        image="registry.example.com/nlp/eval:1.4",
        minutes=-90,
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-nlp",
        job="long-context-13b",
        workers=1,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image=trainer,
        bound=False,
        minutes=-20,
    )
    # research-ml (43 GPUs, 341.333 cores, 1365.33Gi): 24 + 8 GPUs training, 4 notebooks,
    # 208 cores, 1152Gi; 16 GPUs pending; 10 finished data-prep pods.
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-ml",
        job="moe-ablation",
        workers=3,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image=trainer,
        init=fetch,
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-ml",
        job="rl-agent",
        workers=1,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image="registry.example.com/rl/agent:0.9",
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-ml",
        job="moe-scale",
        workers=2,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image=trainer,
        bound=False,
        minutes=-15,
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="research-ml",
        job="data-prep",
        workers=10,
        gpus=1,
        cpu="8",
        memory="64Gi",
        image="registry.example.com/tools/prep:2.0",
        phase="Succeeded",
        minutes=-1440,
    )
    pods += _deployment(
        rng,
        packer,
        open_gpu,
        namespace="research-ml",
        app="notebook",
        replicas=4,
        requests={"cpu": "4", "memory": "32Gi", GPU: "1"},
        image="quay.io/jupyter/pytorch-notebook:cuda12-2024-11-04",
    )
    # prod-inference (34 GPUs, 256 cores, 1024Gi): 12 x 1 GPU (one replica Pending but bound) and
    # one unbound replica; 3 x 4 GPU with an envoy sidecar declared before the weight download
    # init container (the sidecar adds 500m and 256Mi). 24 GPUs, 193.5 cores, 960.75Gi bound.
    pods += _deployment(
        rng,
        packer,
        open_gpu,
        namespace="prod-inference",
        app="serve-llama-8b",
        replicas=13,
        requests={"cpu": "8", "memory": "32Gi", GPU: "1"},
        image="registry.example.com/serve/vllm:0.6.4",
        phases={11: "Pending"},
        unbound=[12],
    )
    envoy = container(
        "envoy",
        "envoyproxy/envoy:v1.32.1",
        {"cpu": "500m", "memory": "256Mi"},
        {"memory": "512Mi"},
        restart_policy="Always",
    )
    download = container(
        "download-weights", "registry.example.com/tools/s5cmd:2.2", {"cpu": "2", "memory": "8Gi"}
    )
    pods += _deployment(
        rng,
        packer,
        open_gpu,
        namespace="prod-inference",
        app="serve-llama-70b",
        replicas=3,
        requests={"cpu": "32", "memory": "192Gi", GPU: "4"},
        image="registry.example.com/serve/vllm:0.6.4",
        init_containers=[envoy, download],
    )
    # cv-vision (96 GPUs, 512 cores, 2048Gi): 48 GPUs training, 8 x 2 GPU eval pods in Kata
    # sandboxes (pod overhead), 4 CPU preprocessing pods; 64 GPUs, 450 cores, 1985.25Gi bound.
    # 3 Failed; 16 GPUs and 2 preprocessing pods pending.
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="cv-vision",
        job="detector-train",
        workers=6,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image="registry.example.com/cv/detectron:3.1",
    )
    pods += _deployment(
        rng,
        packer,
        open_gpu,
        namespace="cv-vision",
        app="detector-eval",
        replicas=8,
        requests={"cpu": "12", "memory": "48Gi", GPU: "2"},
        image="registry.example.com/cv/detectron:3.1",
        runtime_class="kata-nvidia",
        overhead={"cpu": "250m", "memory": "160Mi"},
    )
    pods += _deployment(
        rng,
        packer,
        cpu_names,
        namespace="cv-vision",
        app="label-preprocess",
        replicas=6,
        requests={"cpu": "16", "memory": "16Gi"},
        image="registry.example.com/cv/preprocess:1.2",
        unbound=[4, 5],
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="cv-vision",
        job="segmenter-sweep",
        workers=3,
        gpus=1,
        cpu="8",
        memory="64Gi",
        image="registry.example.com/cv/seg:0.3",
        phase="Failed",
        minutes=-300,
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="cv-vision",
        job="video-pretrain",
        workers=2,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image="registry.example.com/cv/video:0.1",
        bound=False,
        minutes=-5,
    )
    # speech-asr (48 GPUs, 256 cores, 1024Gi): 24 GPUs fine-tuning, 10 x 1 GPU transcription;
    # 34 GPUs, 184 cores, 928Gi bound; 4 x 1 GPU pending.
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="speech-asr",
        job="whisper-ft",
        workers=3,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image="registry.example.com/asr/whisper:3.0",
        init=fetch,
    )
    pods += _deployment(
        rng,
        packer,
        open_gpu,
        namespace="speech-asr",
        app="transcribe",
        replicas=14,
        requests={"cpu": "4", "memory": "16Gi", GPU: "1"},
        image="registry.example.com/asr/whisper:3.0",
        unbound=[10, 11, 12, 13],
    )
    # shared-batch: no team (unassigned usage), no ResourceQuota. 160 + 64 GPUs bound, 8 pending.
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="shared-batch",
        job="embed-backfill",
        workers=20,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image="registry.example.com/batch/embed:2.3",
        minutes=-900,
    )
    pods += _deployment(
        rng,
        packer,
        open_gpu,
        namespace="shared-batch",
        app="batch-eval",
        replicas=16,
        requests={"cpu": "24", "memory": "128Gi", GPU: "4"},
        image="registry.example.com/batch/eval:1.0",
    )
    pods += _job(
        rng,
        packer,
        open_gpu,
        namespace="shared-batch",
        job="reindex",
        workers=1,
        gpus=8,
        cpu="48",
        memory="256Gi",
        image="registry.example.com/batch/embed:2.3",
        bound=False,
        minutes=-10,
    )
    # platform-tools: CPU services, finished CI runs, sandboxed runners with pod overhead.
    for app, replicas, requests, extra in (
        ("prometheus", 2, {"cpu": "4", "memory": "32Gi"}, {}),
        ("grafana", 1, {"cpu": "500m", "memory": "1Gi"}, {}),
        ("loki", 3, {"cpu": "2", "memory": "8Gi"}, {}),
        ("argo-server", 2, {"cpu": "250m", "memory": "512Mi"}, {}),
        ("jupyterhub", 1, {"cpu": "1", "memory": "2Gi"}, {}),
        (
            "ci-runner",
            12,
            {"cpu": "2", "memory": "4Gi"},
            {"phases": dict.fromkeys(range(6), "Succeeded")},
        ),
        (
            "sandbox-runner",
            2,
            {"cpu": "1", "memory": "2Gi"},
            {"runtime_class": "kata", "overhead": {"cpu": "250m", "memory": "160Mi"}},
        ),
    ):
        pods += _deployment(
            rng,
            packer,
            cpu_names,
            namespace="platform-tools",
            app=app,
            replicas=replicas,
            requests=requests,
            image=f"registry.example.com/platform/{app}:stable",
            **extra,
        )
    podgroups = _demo_podgroups(pods)
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": nodes + pods + podgroups + _demo_events(),
        "metadata": {"resourceVersion": ""},
    }


# Volcano queue of each demo namespace's team (seed_demo); shared-batch has no team.
_DEMO_QUEUES = {
    "research-ml": "research-team",
    "research-nlp": "research-team",
    "prod-training": "production-team",
    "prod-inference": "production-team",
    "cv-vision": "cv-team",
    "speech-asr": "speech-team",
    "shared-batch": "default",
}
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


def _stable_uid(path: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fairshare-demo:{path}"))


def _demo_podgroups(pods: list[Json]) -> list[Json]:
    """One PodGroup per live Volcano job, as Volcano's job controller makes them.

    Named ``<job>-<job uid>`` and owned by the job (``pkg/controllers/job/job_controller_util.go``
    ``createPodGroupIfNotExist``); ``minMember`` the job's workers, ``minResources`` their
    requests; each pod names its group in ``scheduling.k8s.io/group-name``. A job whose pods are
    all bound is ``Running``; one whose pods are all unbound is ``Pending`` with the scheduler's
    ``Unschedulable`` condition. Finished jobs get none. Uses no RNG: the pods stay as they were.
    """
    jobs: dict[tuple[str, str], list[Json]] = {}
    for pod in pods:
        meta = pod["metadata"]
        job = meta["labels"].get("volcano.sh/job-name")
        if job and pod["status"]["phase"] not in ("Succeeded", "Failed"):
            jobs.setdefault((meta["namespace"], job), []).append(pod)
    out = []
    for (namespace, job), members in sorted(jobs.items()):
        uid = _stable_uid(f"vcjob/{namespace}/{job}")
        name = f"{job}-{uid}"
        totals: dict[str, float] = {}
        for pod in members:
            pod["metadata"]["annotations"] = {GROUP_ANNOTATION: name}
            for c in pod["spec"]["containers"]:
                for res, amount in (c.get("resources") or {}).get("requests", {}).items():
                    value = _gib(amount) if res == "memory" else float(amount)
                    totals[res] = totals.get(res, 0.0) + value
        min_resources = {
            res: (f"{amount:g}Gi" if res == "memory" else f"{amount:g}")
            for res, amount in sorted(totals.items())
        }
        bound = sum(1 for pod in members if pod["spec"].get("nodeName"))
        created = min(pod["metadata"]["creationTimestamp"] for pod in members)
        status: Json = {"phase": "Running", "running": bound}
        if bound == 0:
            n = len(members)
            status = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "Unschedulable",
                        "status": "True",
                        "reason": "NotEnoughResources",
                        "message": f"{n}/{n} tasks in gang unschedulable: pod group is not ready, "
                        f"{n} Pending, {n} minAvailable; Pending: {n} Unschedulable",
                        "lastTransitionTime": created,
                        "transitionID": _stable_uid(f"transition/{namespace}/{job}"),
                    }
                ],
            }
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": _stable_uid(f"podgroup/{namespace}/{name}"),
                    "creationTimestamp": created,
                    "ownerReferences": [
                        {
                            "apiVersion": "batch.volcano.sh/v1alpha1",
                            "kind": "Job",
                            "name": job,
                            "uid": uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "minMember": len(members),
                    "minResources": min_resources,
                    "queue": _DEMO_QUEUES[namespace],
                },
                "status": status,
            }
        )
    return out


def _demo_events() -> list[Json]:
    """A quota refusal: speech-asr's ResourceQuota (48 GPUs, 38 counted) refused the pods of a
    16-GPU batch Job, so the Job has no pods at all; the Job controller's ``FailedCreate``
    Warning (``pkg/controller/job/job_controller.go``) quotes the quota admission's message
    (``plugin/pkg/admission/resourcequota/controller.go`` ``CheckRequest``)."""
    when = _timestamp(-25)
    return [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": "asr-batch-eval.18a2f3c4d5e6f708",
                "namespace": "speech-asr",
                "uid": _stable_uid("event/speech-asr/asr-batch-eval"),
                "creationTimestamp": when,
            },
            "involvedObject": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "asr-batch-eval",
                "namespace": "speech-asr",
                "uid": _stable_uid("job/speech-asr/asr-batch-eval"),
            },
            "reason": "FailedCreate",
            "type": "Warning",
            "count": 14,
            "firstTimestamp": when,
            "lastTimestamp": _timestamp(-1),
            "source": {"component": "job-controller"},
            "message": 'Error creating: pods "asr-batch-eval-7xk2p" is forbidden: exceeded quota: '
            "fairshare, requested: requests.nvidia.com/gpu=16, used: requests.nvidia.com/gpu=38, "
            "limited: requests.nvidia.com/gpu=48",
        }
    ]


# ---------------------------------------------------------------- the DRA variant

# NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, ex NVIDIA/k8s-dra-driver-gpu) and
# the DeviceClasses its chart installs.
DRA_DRIVER = "gpu.nvidia.com"
DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_MIG_CLASS = "mig.nvidia.com"
DRA_API = "resource.k8s.io/v1"
DRA_SEED = DEMO_SEED + 34  # its own RNG: the base demo's objects do not change
DEMO_FIXTURE = "monitoring/fixtures/demo_cluster.json"  # relative to the repository root
MANAGED_BY = "app.kubernetes.io/managed-by"
_H100_PRODUCT_NAME = "NVIDIA H100 80GB HBM3"  # the driver's productName attribute
_H100_MEMORY = "81559Mi"
# H100 80GB MIG profiles: name -> (profile id, memory slices out of 8, published memory).
# Placements start at a memory slice; a device holds slices start..start+size-1 and is named
# gpu-<minor>-mig-<profile without dots>-<profile id>-<start> (MigSpecTuple.ToCanonicalName).
H100_MIG_PROFILES = {
    "1g.10gb": (19, 1, "9984Mi"),
    "2g.20gb": (14, 2, "19968Mi"),
    "3g.40gb": (9, 4, "40192Mi"),
}
_SEVEN_1G = tuple(("1g.10gb", start) for start in range(7))
_BALANCED = (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4))
_TWO_3G = (("3g.40gb", 0), ("3g.40gb", 4))
# The DRA nodes (8 H100 each, no device plugin): None = whole GPUs; else each GPU's static MIG
# layout, as the node's `nvidia.com/mig.config` (MIG manager) made it.
DRA_NODES: dict[str, tuple[tuple[tuple[str, int], ...], ...] | None] = {
    "gpu-h100-dra-000": None,
    "gpu-h100-dra-001": None,
    "gpu-h100-mig-000": (_SEVEN_1G,) * 8,
    "gpu-h100-mig-001": (_BALANCED,) * 6 + (_TWO_3G,) * 2,
}
_DEMO_NODES = 127 + 16  # the base demo's GPU and CPU nodes
_MIG_CONFIG = {"gpu-h100-mig-000": "all-1g.10gb", "gpu-h100-mig-001": "custom-balanced"}


@dataclass(frozen=True)
class DraClaim:
    """One ResourceClaim of the DRA variant and the pods that use it.

    ``state`` is what Fairshare must make of it: ``allocated`` (reserved by live pods),
    ``pending`` (unallocated, wanted by unbound Pending pods) or ``finished`` (reserved only by
    Succeeded pods: counts nothing). ``eighths`` is its GPU-equivalent in eighths of a GPU as
    declared here (a whole GPU 8, a 1g.10gb 1, a 2g.20gb 2, a 3g.40gb 4; a pending whole-GPU
    request 8 per GPU, a pending MIG request 0); :func:`dra_demo_part` checks it against the
    devices it allocates. ``template``: the claim is generated from that ResourceClaimTemplate
    for its single pod, named ``<pod>-<claim>-<suffix>`` and known through the pod's status.
    """

    namespace: str
    claim: str
    device_class: str
    count: int
    state: str
    eighths: int
    pods: tuple[str, ...]
    node: str | None = None
    devices: tuple[str, ...] = ()
    profile: str | None = None
    template: str | None = None


def _mig(gpu: int, profile: str, start: int) -> str:
    profile_id = H100_MIG_PROFILES[profile][0]
    return f"gpu-{gpu}-mig-{profile.replace('.', '')}-{profile_id}-{start}"


_DRA0, _DRA1, _MIG0, _MIG1 = DRA_NODES
DRA_CLAIMS: tuple[DraClaim, ...] = (
    # research-ml: one GPU shared by an RL actor and its learner; three 1g.10gb notebooks.
    DraClaim(
        "research-ml", "rl-shared-gpu", DRA_GPU_CLASS, 1, "allocated", 8,
        ("rl-actor", "rl-learner"), _DRA0, ("gpu-0",),
    ),
    *(
        DraClaim(
            "research-ml", f"notebook-mig-{i}", DRA_MIG_CLASS, 1, "allocated", 1,
            (f"mig-notebook-{i}",), _MIG0, (_mig(0, "1g.10gb", i),), profile="1g.10gb",
        )
        for i in range(3)
    ),
    # research-nlp: a 2g.20gb tokenizer service; a 4-GPU run waiting (no 4 whole GPUs free).
    DraClaim(
        "research-nlp", "tokenizer-mig", DRA_MIG_CLASS, 1, "allocated", 2,
        ("tokenizer-mig",), _MIG1, (_mig(0, "2g.20gb", 0),), profile="2g.20gb",
    ),
    DraClaim(
        "research-nlp", "long-context-dra", DRA_GPU_CLASS, 4, "pending", 32,
        ("long-context-dra-0",),
    ),
    # prod-inference: two GPUs, each shared by two vLLM replicas; two 3g.40gb servers.
    *(
        DraClaim(
            "prod-inference", f"llama-8b-shared-{i}", DRA_GPU_CLASS, 1, "allocated", 8,
            (f"serve-llama-8b-dra-{i}a", f"serve-llama-8b-dra-{i}b"), _DRA1, (f"gpu-{i}",),
        )
        for i in range(2)
    ),
    *(
        DraClaim(
            "prod-inference", "mig", DRA_MIG_CLASS, 1, "allocated", 4,
            (f"serve-mistral-{i}",), _MIG1, (_mig(6, "3g.40gb", 4 * i),), profile="3g.40gb",
            template="mig-3g40gb",
        )
        for i in range(2)
    ),
    # prod-training: an exclusive 4-GPU fine-tune.
    DraClaim(
        "prod-training", "finetune-dra", DRA_GPU_CLASS, 4, "allocated", 32,
        ("finetune-dra-0",), _DRA0, ("gpu-1", "gpu-2", "gpu-3", "gpu-4"),
    ),
    # cv-vision: 2 GPUs shared by two eval pods; an exclusive 6-GPU trainer; a finished sweep
    # whose claim is not released yet; a probe waiting for a 4g.40gb nobody publishes.
    DraClaim(
        "cv-vision", "eval-shared", DRA_GPU_CLASS, 2, "allocated", 16,
        ("eval-dra-a", "eval-dra-b"), _DRA0, ("gpu-6", "gpu-7"),
    ),
    DraClaim(
        "cv-vision", "seg-train-dra", DRA_GPU_CLASS, 6, "allocated", 48,
        ("seg-train-dra-0",), _DRA1, tuple(f"gpu-{g}" for g in range(2, 8)),
    ),
    DraClaim(
        "cv-vision", "sweep-done", DRA_GPU_CLASS, 1, "finished", 0,
        ("sweep-dra-0",), _DRA0, ("gpu-5",),
    ),
    DraClaim(
        "cv-vision", "probe-4g", DRA_MIG_CLASS, 1, "pending", 0, ("probe-4g40gb",),
        profile="4g.40gb",
    ),
    # speech-asr: four 1g.10gb streaming pods from a template; one template GPU claim pending.
    *(
        DraClaim(
            "speech-asr", "mig", DRA_MIG_CLASS, 1, "allocated", 1,
            (f"asr-stream-{i}",), _MIG0, (_mig(0, "1g.10gb", 3 + i),), profile="1g.10gb",
            template="mig-1g10gb",
        )
        for i in range(4)
    ),
    DraClaim(
        "speech-asr", "gpu", DRA_GPU_CLASS, 1, "pending", 8, ("transcribe-dra-0",),
        template="one-gpu",
    ),
)  # fmt: skip


def _dra_node(name: str, *, rng: random.Random, zone: str) -> Json:
    """An H100 node run by NVIDIA's DRA driver: labelled, tainted, no ``nvidia.com/gpu``."""
    node = make_node(
        name, rng=rng, cpu="192", memory="2112880640Ki", zone=zone, instance_type="p5.48xlarge"
    )
    labels = node["metadata"]["labels"]
    labels["nvidia.com/dra-kubelet-plugin"] = "true"
    labels[GPU + ".present"] = "true"
    labels[GPU + ".product"] = H100
    if name in _MIG_CONFIG:
        labels["nvidia.com/mig.config"] = _MIG_CONFIG[name]
    for part in ("allocatable", "capacity"):
        node["status"][part]["ephemeral-storage"] = "3435973836800"
    node["spec"]["taints"] = [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
    return node


def _slice_devices(node: str) -> list[Json]:
    """The devices the kubelet plugin publishes for ``node`` (deviceinfo.go ``GetDevice``)."""
    layout = DRA_NODES[node]
    common = {
        "productName": {"string": _H100_PRODUCT_NAME},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.95.5"},
    }
    devices = []
    for gpu in range(8):
        gpu_uuid = f"GPU-{_stable_uid(f'gpu/{node}/{gpu}')}"
        if layout is None:
            attributes = {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid}, **common}
            attributes["index"] = {"int": gpu}
            attributes["minor"] = {"int": gpu}
            capacity = {"memory": {"value": _H100_MEMORY}}
            devices.append({"name": f"gpu-{gpu}", "attributes": attributes, "capacity": capacity})
            continue
        for profile, start in layout[gpu]:
            _, size, memory = H100_MIG_PROFILES[profile]
            name = _mig(gpu, profile, start)
            attributes = {
                "type": {"string": "mig"},
                "uuid": {"string": f"MIG-{_stable_uid(f'mig/{node}/{name}')}"},
                "parentUUID": {"string": gpu_uuid},
                "parentIndex": {"int": gpu},
                "parentMinor": {"int": gpu},
                "profile": {"string": profile},
                **common,
            }
            capacity = {"memory": {"value": memory}}
            for s in range(start, start + size):
                capacity[f"memorySlice{s}"] = {"value": "1"}
            devices.append({"name": name, "attributes": attributes, "capacity": capacity})
    return devices


def _resource_slice(node: Json, *, rng: random.Random) -> Json:
    name = node["metadata"]["name"]
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{name}-{DRA_DRIVER}-{_suffix(rng)}",
            "uid": _uid(rng),
            "creationTimestamp": _timestamp(-60 * 24 * 7),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": _slice_devices(name),
        },
    }


def _device_classes() -> list[Json]:
    """The chart's DeviceClasses (deployments/helm/.../templates/deviceclass-*.yaml)."""

    def device_class(name: str, kind: str, extra: Json) -> Json:
        cel = f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}']"
        cel += f".type == '{kind}'"
        return {
            "apiVersion": DRA_API,
            "kind": "DeviceClass",
            "metadata": {
                "name": name,
                "uid": _stable_uid(f"deviceclass/{name}"),
                "creationTimestamp": _timestamp(-60 * 24 * 30),
            },
            "spec": {"selectors": [{"cel": {"expression": cel}}], **extra},
        }

    return [
        device_class(DRA_GPU_CLASS, "gpu", {"extendedResourceName": GPU}),
        device_class(DRA_MIG_CLASS, "mig", {}),
    ]


def _claim_spec(row: DraClaim) -> Json:
    exactly: Json = {
        "deviceClassName": row.device_class,
        "allocationMode": "ExactCount",
        "count": row.count,
    }
    if row.profile is not None:
        cel = f"device.attributes['{DRA_DRIVER}'].profile == '{row.profile}'"
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"devices": {"requests": [{"name": _request_name(row), "exactly": exactly}]}}


def _request_name(row: DraClaim) -> str:
    return "mig" if row.device_class == DRA_MIG_CLASS else "gpu"


def _templates() -> list[Json]:
    out, seen = [], set()
    for row in DRA_CLAIMS:
        if row.template is None or (row.namespace, row.template) in seen:
            continue
        seen.add((row.namespace, row.template))
        out.append(
            {
                "apiVersion": DRA_API,
                "kind": "ResourceClaimTemplate",
                "metadata": {
                    "name": row.template,
                    "namespace": row.namespace,
                    "uid": _stable_uid(f"resourceclaimtemplate/{row.namespace}/{row.template}"),
                    "creationTimestamp": _timestamp(-60 * 24 * 3),
                },
                "spec": {"spec": _claim_spec(row)},
            }
        )
    return out


_DRA_WORK = {  # namespace -> (image, requests of each pod besides its claim)
    "research-ml": ("quay.io/jupyter/pytorch-notebook:cuda12-2024-11-04", "4", "32Gi"),
    "research-nlp": ("registry.example.com/nlp/eval:1.4", "8", "64Gi"),
    "prod-inference": ("registry.example.com/serve/vllm:0.6.4", "8", "32Gi"),
    "prod-training": ("registry.example.com/train/megatron:24.10", "32", "256Gi"),
    "cv-vision": ("registry.example.com/cv/detectron:3.1", "12", "48Gi"),
    "speech-asr": ("registry.example.com/asr/whisper:3.0", "4", "16Gi"),
}


def _check_row(row: DraClaim, devices: dict[tuple[str, str], Json]) -> None:
    """The declared row agrees with the slices it allocates from (a generator self-check)."""
    if row.state == "pending":
        assert row.node is None and not row.devices, row
        want = 8 * row.count if row.device_class == DRA_GPU_CLASS else 0
        assert row.eighths == want, row
        return
    assert row.node is not None and len(row.devices) == row.count, row
    eighths = 0
    for name in row.devices:
        device = devices[(row.node, name)]
        kind = device["attributes"]["type"]["string"]
        assert kind == ("mig" if row.device_class == DRA_MIG_CLASS else "gpu"), row
        if row.profile is not None:
            assert device["attributes"]["profile"]["string"] == row.profile, row
        eighths += 8 if kind == "gpu" else sum(1 for c in device["capacity"] if "Slice" in c)
    assert row.eighths == (0 if row.state == "finished" else eighths), row


def dra_demo_part() -> list[Json]:
    """The DRA objects the ``--dra`` variant adds to the demo (deterministic, own RNG).

    Four H100 nodes served by NVIDIA's DRA driver (:data:`DRA_NODES`; ``nvidia.com/gpu`` is not
    in their allocatable), one ResourceSlice each (pool = node, generation 1), the
    ``gpu.nvidia.com`` and ``mig.nvidia.com`` DeviceClasses, the claims of :data:`DRA_CLAIMS`
    with their templates and pods, and per DRA node the kube-proxy, dcgm-exporter and DRA
    kubelet-plugin DaemonSet pods. Every device is allocated to at most one claim and every
    bound pod runs on the node of its claim's devices.
    """
    rng = random.Random(DRA_SEED)
    zones = ("us-east-1a", "us-east-1b", "us-east-1c")
    nodes = [_dra_node(name, rng=rng, zone=zones[i % 3]) for i, name in enumerate(DRA_NODES)]
    slices = [_resource_slice(node, rng=rng) for node in nodes]
    devices = {
        (s["spec"]["pool"]["name"], d["name"]): d for s in slices for d in s["spec"]["devices"]
    }
    taken: set[tuple[str, str]] = set()
    for row in DRA_CLAIMS:
        _check_row(row, devices)
        for name in row.devices:
            assert (row.node, name) not in taken, (row, name)
            taken.add((row.node, name))

    names = list(DRA_NODES)
    pods: list[Json] = []
    pods += _daemonset(
        rng,
        names,
        app="kube-proxy",
        image="registry.k8s.io/kube-proxy:v1.31.4",
        requests={"cpu": "100m"},
        gpu_tolerant=True,
    )
    pods += _daemonset(
        rng,
        names,
        app="nvidia-dra-driver-gpu-kubelet-plugin",
        image="nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
        requests={"cpu": "100m", "memory": "128Mi"},
        gpu_tolerant=True,
    )
    pods += _daemonset(
        rng,
        names,
        app="dcgm-exporter",
        image="nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9",
        requests={"cpu": "100m", "memory": "128Mi"},
        limits={"memory": "256Mi"},
        gpu_tolerant=True,
    )
    claims: list[Json] = []
    for row in DRA_CLAIMS:
        image, cpu, memory = _DRA_WORK[row.namespace]
        requests = {"cpu": cpu, "memory": memory}
        finished = row.state == "finished"
        members = []
        for pod_name in row.pods:
            main = container("main", image, dict(requests), {"memory": memory})
            main["resources"]["claims"] = [{"name": _request_name(row)}]
            pod = make_pod(
                pod_name,
                row.namespace,
                rng=rng,
                containers=[main],
                node=row.node,
                phase="Succeeded" if finished else ("Pending" if row.node is None else "Running"),
                labels={"app.kubernetes.io/name": pod_name.rsplit("-", 1)[0]},
                gpu=True,
                minutes=-30 if row.node is None else -240,
            )
            if row.node is None:
                everyone = _DEMO_NODES + len(DRA_NODES)
                pod["status"]["conditions"][0]["message"] = (
                    f"0/{everyone} nodes are available: {everyone} cannot allocate all claims."
                )
            members.append(pod)
        claim_name = row.claim
        if row.template is not None:
            (pod,) = members
            claim_name = f"{pod['metadata']['name']}-{row.claim}-{_suffix(rng)}"
            pod["spec"]["resourceClaims"] = [
                {"name": _request_name(row), "resourceClaimTemplateName": row.template}
            ]
            pod["status"]["resourceClaimStatuses"] = [
                {"name": _request_name(row), "resourceClaimName": claim_name}
            ]
        else:
            for pod in members:
                pod["spec"]["resourceClaims"] = [
                    {"name": _request_name(row), "resourceClaimName": row.claim}
                ]
        claims.append(_claim(row, claim_name, members, rng=rng))
        pods += members
    return [*nodes, *_device_classes(), *slices, *_templates(), *claims, *pods]


def _claim(row: DraClaim, name: str, pods: list[Json], *, rng: random.Random) -> Json:
    meta: Json = {
        "name": name,
        "namespace": row.namespace,
        "uid": _uid(rng),
        "creationTimestamp": min(p["metadata"]["creationTimestamp"] for p in pods),
    }
    if row.template is not None:
        (pod,) = pods
        meta["generateName"] = f"{pod['metadata']['name']}-{row.claim}-"
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": _request_name(row)}
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    status: Json = {}
    if row.node is not None:
        meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
        status["allocation"] = {
            "devices": {
                "results": [
                    {
                        "request": _request_name(row),
                        "driver": DRA_DRIVER,
                        "pool": row.node,
                        "device": device,
                    }
                    for device in row.devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [row.node]}
                        ]
                    }
                ]
            },
        }
        status["reservedFor"] = [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
            for p in pods
        ]
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": _claim_spec(row),
        "status": status,
    }


def _managed_objects() -> list[Json]:
    """The Fairshare-managed objects of the committed base demo (scripts/make_demo_cluster.py
    writes them after the generator's items), so that the demo's plan-only sync against the
    variant compares with what an earlier sync left, as it does against the base demo."""
    path = Path(__file__).resolve().parents[1] / DEMO_FIXTURE
    if not path.exists():
        return []
    items = json.loads(path.read_text())["items"]
    return [i for i in items if (i["metadata"].get("labels") or {}).get(MANAGED_BY) == "fairshare"]


def dra_demo_cluster() -> Json:
    """The ``--demo --dra`` variant: the committed base demo's items unchanged (the generator's
    nodes, pods, PodGroups and Events, then its Fairshare-managed objects), then
    :func:`dra_demo_part`."""
    items = demo_cluster()["items"] + _managed_objects() + dra_demo_part()
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


# ---------------------------------------------------------------- scale generators


def generate_nodes(count: int, *, seed: int = 0, gpu_fraction: float = 0.8) -> list[Json]:
    """Return ``count`` nodes: ``gpu_fraction`` of them 8-GPU (H100/A100/L40S), the rest CPU-only.

    About 1 % of nodes are NotReady and 1 % cordoned, as in a real fleet.
    """
    rng = random.Random(seed)
    flavors = ((H100, "p5.48xlarge"), (A100, "p4de.24xlarge"), (L40S, "g6e.48xlarge"))
    nodes = []
    for i in range(count):
        roll = rng.random()
        common = {"rng": rng, "zone": f"us-east-1{'abc'[i % 3]}", "ready": roll >= 0.01}
        common["unschedulable"] = 0.01 <= roll < 0.02
        if i < count * gpu_fraction:
            product, instance = flavors[i % len(flavors)]
            nodes.append(
                make_node(
                    f"gpu-{i:05d}",
                    cpu="192",
                    memory="2112880640Ki",
                    gpus=8,
                    product=product,
                    instance_type=instance,
                    **common,
                )
            )
        else:
            nodes.append(make_node(f"cpu-{i:05d}", cpu="64", memory="268435456Ki", **common))
    return nodes


_GPU_SHAPES = (
    ({"cpu": "176", "memory": "1600Gi", GPU: "8"}, 3),
    ({"cpu": "8", "memory": "64Gi", GPU: "1"}, 6),
    ({"cpu": "16", "memory": "128Gi", GPU: "2"}, 2),
    ({"cpu": "32", "memory": "256Gi", GPU: "4"}, 2),
)
_CPU_SHAPES = (
    ({"cpu": "100m", "memory": "128Mi"}, 4),
    ({"cpu": "500m", "memory": "1Gi"}, 6),
    ({"cpu": "2", "memory": "4Gi"}, 4),
    ({"cpu": "4", "memory": "16Gi"}, 2),
    ({"cpu": "250m", "memory": "512Mi"}, 4),
)


def generate_pods(
    count: int,
    nodes: Sequence[Json],
    *,
    seed: int = 0,
    namespaces: Sequence[str] = (*DEMO_NAMESPACES, "kube-system"),
) -> Iterator[Json]:
    """Yield ``count`` pods placed at random on ``nodes`` (lazily; memory stays flat).

    Mix: 85 % Running, 7 % Pending unbound, 2 % Pending bound, 4 % Succeeded, 2 % Failed; 40 % ask
    for GPUs (on GPU nodes), 20 % have an init container, 5 % a sidecar, 2 % pod overhead, 10 %
    have two containers, 10 % set limits only. Quantities come from a small set of strings.
    """
    rng = random.Random(seed)
    gpu_nodes = [n["metadata"]["name"] for n in nodes if GPU in n["status"]["allocatable"]]
    all_nodes = [n["metadata"]["name"] for n in nodes]
    gpu_shapes = [s for s, w in _GPU_SHAPES for _ in range(w)]
    cpu_shapes = [s for s, w in _CPU_SHAPES for _ in range(w)]
    sidecar = container(
        "istio-proxy",
        "istio/proxyv2:1.24.1",
        {"cpu": "100m", "memory": "128Mi"},
        restart_policy="Always",
    )
    init = container("setup", "busybox:1.37", {"cpu": "1", "memory": "1Gi"})
    for i in range(count):
        gpu = bool(gpu_nodes) and rng.random() < 0.4
        requests = rng.choice(gpu_shapes if gpu else cpu_shapes)
        limits_only = rng.random() < 0.1
        containers = [
            container(
                "main", "registry.example.com/app:1", None if limits_only else requests, requests
            )
        ]
        if rng.random() < 0.1:
            containers.append(
                container("logger", "fluent/fluent-bit:3.2", {"cpu": "50m", "memory": "64Mi"})
            )
        inits = []
        if rng.random() < 0.05:
            inits.append(sidecar)
        if rng.random() < 0.2:
            inits.append(init)
        roll = rng.random()
        phase, bound = "Running", True
        if roll < 0.07:
            phase, bound = "Pending", False
        elif roll < 0.09:
            phase = "Pending"
        elif roll < 0.13:
            phase = "Succeeded"
        elif roll < 0.15:
            phase = "Failed"
        overhead = {"cpu": "250m", "memory": "160Mi"} if rng.random() < 0.02 else None
        yield make_pod(
            f"pod-{i:06d}",
            rng.choice(namespaces),
            rng=rng,
            containers=containers,
            init_containers=inits,
            node=rng.choice(gpu_nodes if gpu else all_nodes) if bound else None,
            phase=phase,
            overhead=overhead,
            gpu=gpu,
            minutes=-(i % 10_000),
        )


def generate_podgroups(
    count: int, *, seed: int = 0, namespaces: Sequence[str] = DEMO_NAMESPACES
) -> list[Json]:
    """``count`` Volcano PodGroups ``gang-<i>`` spread over ``namespaces`` (deterministic).

    Mix: 80 % Running, 15 % Pending (with the scheduler's Unschedulable condition), 5 % Inqueue;
    ``minMember`` 1-8, ``minResources`` of 8-GPU workers. Uses its own RNG, so the nodes and pods
    of the same seed do not change.
    """
    rng = random.Random(seed + 1)
    out = []
    for i in range(count):
        members = rng.randint(1, 8)
        roll = rng.random()
        phase = "Running" if roll < 0.8 else ("Pending" if roll < 0.95 else "Inqueue")
        status: Json = {"phase": phase}
        if phase == "Pending":
            status["conditions"] = [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NotEnoughResources",
                    "message": f"{members}/{members} tasks in gang unschedulable",
                }
            ]
        namespace = namespaces[i % len(namespaces)]
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": f"gang-{i:05d}",
                    "namespace": namespace,
                    "creationTimestamp": _timestamp(-(i % 5000)),
                },
                "spec": {
                    "minMember": members,
                    "queue": f"{namespace}-queue",
                    "minResources": {
                        "cpu": str(48 * members),
                        "memory": f"{256 * members}Gi",
                        GPU: str(8 * members),
                    },
                },
                "status": status,
            }
        )
    return out


def with_owners(pods: Iterable[Json], podgroups: Sequence[Json]) -> Iterator[Json]:
    """Give generated pods owners (lazily): every third pod joins a PodGroup of its namespace
    (``scheduling.k8s.io/group-name``, round robin), the others belong to a ReplicaSet of 25."""
    groups: dict[str, list[str]] = {}
    for pg in podgroups:
        groups.setdefault(pg["metadata"]["namespace"], []).append(pg["metadata"]["name"])
    turn: dict[str, int] = {}
    for i, pod in enumerate(pods):
        meta = pod["metadata"]
        namespace = meta["namespace"]
        names = groups.get(namespace)
        if names and i % 3 == 0:
            k = turn.get(namespace, 0)
            turn[namespace] = k + 1
            meta["annotations"] = {GROUP_ANNOTATION: names[k % len(names)]}
        else:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"rs-{i // 25:05d}",
                    "uid": f"rs-{i // 25:05d}",
                    "controller": True,
                }
            ]
        yield pod


def generate_quota_events(count: int, *, namespaces: Sequence[str] = DEMO_NAMESPACES) -> list[Json]:
    """``count`` Warning events, half of them ResourceQuota refusals of a Job's pods."""
    out = []
    for i in range(count):
        namespace = namespaces[i % len(namespaces)]
        refused = i % 2 == 0
        message = (
            f'Error creating: pods "job-{i:05d}-x" is forbidden: exceeded quota: fairshare, '
            "requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=40, "
            "limited: requests.nvidia.com/gpu=43"
            if refused
            else "Back-off restarting failed container"
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"job-{i:05d}.{i:x}", "namespace": namespace},
                "involvedObject": {"kind": "Job", "name": f"job-{i:05d}", "namespace": namespace},
                "type": "Warning",
                "reason": "FailedCreate" if refused else "BackOff",
                "message": message,
                "lastTimestamp": _timestamp(-(i % 600)),
            }
        )
    return out


# ---------------------------------------------------------------- output


def write_list(items: Iterable[Json], out: TextIO) -> None:
    """Write a ``kind: List`` with one compact item per line (streams ``items``)."""
    out.write('{"apiVersion":"v1","kind":"List","items":[')
    for index, item in enumerate(items):
        out.write(",\n" if index else "\n")
        out.write(json.dumps(item, separators=(",", ":")))
    out.write('\n],"metadata":{"resourceVersion":""}}\n')


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", action="store_true", help="print the committed demo cluster")
    parser.add_argument(
        "--dra",
        action="store_true",
        help="with --demo: the variant with DRA nodes, slices and claims (demo_cluster_dra.json)",
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.dra and not args.demo:
        parser.error("--dra needs --demo")
    if args.demo:
        cluster = dra_demo_cluster() if args.dra else demo_cluster()
        write_list(cluster["items"], sys.stdout)
        return 0
    nodes = generate_nodes(args.nodes, seed=args.seed)
    write_list(itertools.chain(nodes, generate_pods(args.pods, nodes, seed=args.seed)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
