"""The demo cluster with Dynamic Resource Allocation: ``monitoring/fixtures/demo_cluster_dra.json``.

Written by ``python bench/cluster_gen.py --demo --dra``: the committed base demo
(``demo_cluster.json``) item for item, then four H100 nodes run by NVIDIA's DRA driver, their
ResourceSlices, two DeviceClasses and the claims of ``cluster_gen.DRA_CLAIMS`` with their pods.
The DRA part's usage is written out by hand below (``DRA_ALLOCATED`` / ``DRA_PENDING``), not
computed with monitoring/domain/dra.py: per claim, a whole GPU is 1, a 1g.10gb 1/8, a 2g.20gb
1/4, a 3g.40gb 1/2; a pending whole-GPU claim its count, a pending MIG claim no GPUs; a finished
claim nothing; a shared claim once.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command

from bench import cluster_gen
from monitoring import collection
from monitoring.collectors import k8s_usage
from monitoring.models import UsageSample

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "monitoring" / "fixtures" / "demo_cluster.json"
VARIANT = ROOT / "monitoring" / "fixtures" / "demo_cluster_dra.json"
GPU = "nvidia.com/gpu"
WHOLE = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
MIG = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"
NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)

# What the DRA part adds, per namespace (hand-counted from the claims in cluster_gen.DRA_CLAIMS).
DRA_ALLOCATED = {
    # rl-shared-gpu (1 GPU, two pods) + three 1g.10gb notebooks
    "research-ml": {GPU: Decimal("1.375"), WHOLE: 1, MIG: 3},
    # one 2g.20gb
    "research-nlp": {GPU: Decimal("0.25"), MIG: 1},
    # two 1-GPU claims each shared by two replicas + two 3g.40gb (template)
    "prod-inference": {GPU: Decimal(3), WHOLE: 2, MIG: 2},
    # one exclusive 4-GPU claim
    "prod-training": {GPU: Decimal(4), WHOLE: 4},
    # 2 GPUs shared by two pods + an exclusive 6; the finished sweep's claim counts nothing
    "cv-vision": {GPU: Decimal(8), WHOLE: 8},
    # four 1g.10gb (template)
    "speech-asr": {GPU: Decimal("0.5"), MIG: 4},
}
DRA_PENDING = {
    "research-nlp": {GPU: Decimal(4), WHOLE: 4},  # a 4-GPU claim of an unbound pod
    "cv-vision": {MIG: 1},  # a 4g.40gb nobody publishes: devices, but no GPU-equivalent yet
    "speech-asr": {GPU: Decimal(1), WHOLE: 1},  # a template claim, known via the pod status
}
TEAM_NAMESPACES = set(cluster_gen.DEMO_NAMESPACES)


def items(path: Path) -> list[dict]:
    return json.loads(path.read_text())["items"]


def dra_part() -> list[dict]:
    return items(VARIANT)[len(items(DEMO)) :]


# ---------------------------------------------------------------- the fixture


def test_the_committed_variant_is_what_the_generator_prints():
    out = io.StringIO()
    cluster_gen.write_list(cluster_gen.dra_demo_cluster()["items"], out)
    assert out.getvalue() == VARIANT.read_text()
    assert len(VARIANT.read_text()) < 1_500_000


def test_the_base_demo_is_in_the_variant_unchanged():
    base, variant = items(DEMO), items(VARIANT)
    assert variant[: len(base)] == base  # the base demo, item for item, in its order
    keys = [(i["kind"], i["metadata"].get("namespace"), i["metadata"]["name"]) for i in variant]
    assert len(set(keys)) == len(keys)  # the DRA part adds objects, it replaces none
    # And the generator's base demo is what it was: the start of the committed base demo.
    generated = cluster_gen.demo_cluster()["items"]
    assert base[: len(generated)] == generated


def test_the_dra_part_holds_what_the_issue_asks_for():
    part = dra_part()
    assert Counter(i["kind"] for i in part) == {
        "Node": 4,
        "DeviceClass": 2,
        "ResourceSlice": 4,
        "ResourceClaimTemplate": 3,
        "ResourceClaim": 20,
        "Pod": 36,
    }
    nodes = {i["metadata"]["name"]: i for i in part if i["kind"] == "Node"}
    for node in nodes.values():
        assert node["metadata"]["labels"][GPU + ".product"] == cluster_gen.H100
        assert GPU not in node["status"]["allocatable"]
        assert GPU not in node["status"]["capacity"]
    slices = [i for i in part if i["kind"] == "ResourceSlice"]
    assert sorted(s["spec"]["nodeName"] for s in slices) == sorted(nodes)
    kinds = Counter()
    for s in slices:
        spec = s["spec"]
        assert spec["driver"] == "gpu.nvidia.com"
        assert spec["pool"] == {"name": spec["nodeName"], "generation": 1, "resourceSliceCount": 1}
        kinds.update(d["attributes"]["type"]["string"] for d in spec["devices"])
    # 16 whole GPUs; 8 x 7 1g.10gb, 6 x (2g.20gb + 2 x 1g.10gb + 3g.40gb), 2 x 2 3g.40gb.
    assert kinds == {"gpu": 16, "mig": 56 + 24 + 4}
    assert {c["metadata"]["name"] for c in part if c["kind"] == "DeviceClass"} == {
        "gpu.nvidia.com",
        "mig.nvidia.com",
    }
    claims = [i for i in part if i["kind"] == "ResourceClaim"]
    assert {c["metadata"]["namespace"] for c in claims} <= TEAM_NAMESPACES
    pods = {p["metadata"]["uid"]: p for p in part if p["kind"] == "Pod"}

    def reserved_by(claim: dict) -> list[str]:
        return [pods[r["uid"]]["status"]["phase"] for r in claim["status"].get("reservedFor", [])]

    shared = [c for c in claims if reserved_by(c) == ["Running", "Running"]]
    assert len(shared) == 4  # each shared by two Running pods
    unallocated = [c for c in claims if not c["status"].get("allocation")]
    assert len(unallocated) == 3
    waiting = {
        (p["metadata"]["namespace"], e.get("resourceClaimName"))
        for p in pods.values()
        if p["status"]["phase"] == "Pending" and "nodeName" not in p["spec"]
        for e in [*p["spec"]["resourceClaims"], *p["status"].get("resourceClaimStatuses", [])]
    }
    for claim in unallocated:  # each wanted by an unbound Pending pod
        assert (claim["metadata"]["namespace"], claim["metadata"]["name"]) in waiting
        assert reserved_by(claim) == []
    finished = [c for c in claims if reserved_by(c) == ["Succeeded"]]
    assert [c["metadata"]["name"] for c in finished] == ["sweep-done"]
    generated = [c for c in claims if c["metadata"].get("generateName")]
    assert len(generated) == 7
    for claim in generated:  # named with a random suffix, found only through the pod status
        (owner,) = claim["metadata"]["ownerReferences"]
        pod = pods[owner["uid"]]
        assert "resourceClaimName" not in pod["spec"]["resourceClaims"][0]
        (entry,) = pod["status"]["resourceClaimStatuses"]
        assert entry["resourceClaimName"] == claim["metadata"]["name"]


def test_every_bound_dra_pod_runs_where_its_devices_are_and_nothing_is_overcommitted():
    part = dra_part()
    devices = {
        (s["spec"]["pool"]["name"], d["name"])
        for s in part
        if s["kind"] == "ResourceSlice"
        for d in s["spec"]["devices"]
    }
    claims = {
        (c["metadata"]["namespace"], c["metadata"]["name"]): c
        for c in part
        if c["kind"] == "ResourceClaim"
    }
    held = Counter()
    for claim in claims.values():
        allocation = claim["status"].get("allocation")
        if not allocation:
            assert "reservedFor" not in claim["status"]
            continue
        (term,) = allocation["nodeSelector"]["nodeSelectorTerms"]
        (node,) = term["matchFields"][0]["values"]
        for result in allocation["devices"]["results"]:
            assert result["pool"] == node
            assert (result["pool"], result["device"]) in devices
            held[(result["pool"], result["device"])] += 1
        claim["node"] = node
    assert max(held.values()) == 1  # no device is allocated to two claims
    nodes = {n["metadata"]["name"]: n for n in part if n["kind"] == "Node"}
    cpu = Counter()
    for pod in (p for p in part if p["kind"] == "Pod"):
        meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
        names = [e.get("resourceClaimName") for e in spec.get("resourceClaims", [])]
        names += [e["resourceClaimName"] for e in status.get("resourceClaimStatuses", [])]
        for name in filter(None, names):
            claim = claims[(meta["namespace"], name)]
            assert spec.get("nodeName") == claim.get("node"), meta["name"]
            if "node" in claim:
                assert meta["uid"] in {r["uid"] for r in claim["status"]["reservedFor"]}
        if spec.get("nodeName") and status["phase"] in ("Running", "Pending"):
            for c in spec["containers"]:
                amount = c["resources"].get("requests", {}).get("cpu", "0")
                cpu[spec["nodeName"]] += (
                    Decimal(amount[:-1]) / 1000 if amount.endswith("m") else Decimal(amount)
                )
    for name, used in cpu.items():
        assert used <= Decimal(nodes[name]["status"]["allocatable"]["cpu"]), name


def test_the_generators_claim_table_says_what_this_test_counts():
    """The hand-written figures above and cluster_gen.DRA_CLAIMS's declared eighths agree."""
    allocated, pending = Counter(), Counter()
    for row in cluster_gen.DRA_CLAIMS:
        into = {"allocated": allocated, "pending": pending}.get(row.state)
        if into is not None:
            into[row.namespace] += Decimal(row.eighths) / 8
    assert dict(allocated) == {ns: r[GPU] for ns, r in DRA_ALLOCATED.items() if GPU in r}
    assert {ns: v for ns, v in pending.items() if v} == {
        ns: r[GPU] for ns, r in DRA_PENDING.items() if GPU in r
    }


# ---------------------------------------------------------------- the snapshot collector


def plus(base: dict, extra: dict) -> dict:
    out = dict(base)
    for name, amount in extra.items():
        out[name] = out.get(name, 0) + amount
    return out


def test_the_snapshot_collector_adds_exactly_the_dra_part_per_namespace():
    teams = {ns: ns.split("-")[0] for ns in cluster_gen.DEMO_NAMESPACES}
    base = k8s_usage.from_snapshot(DEMO, teams)
    variant = k8s_usage.from_snapshot(VARIANT, teams)

    assert set(variant.namespaces) == set(base.namespaces)
    for name, usage in variant.namespaces.items():
        before = base.namespaces[name]
        for kind, dra_part_of in (("allocated", DRA_ALLOCATED), ("pending", DRA_PENDING)):
            got = getattr(usage, kind)
            want = plus(getattr(before, kind), dra_part_of.get(name, {}))
            gpu_keys = {GPU, WHOLE, MIG}
            assert {r: v for r, v in got.items() if r in gpu_keys} == {
                r: v for r, v in want.items() if r in gpu_keys
            }, (name, kind)
            assert isinstance(got.get(GPU, Decimal(0)), Decimal)
    # Spelled out for one namespace: 36 device-plugin GPUs + 1 + 3 x 1/8.
    assert variant.namespaces["research-ml"].allocated[GPU] == Decimal("37.375")
    assert variant.namespaces["research-nlp"].pending[GPU] == base.namespaces[
        "research-nlp"
    ].pending[GPU] + Decimal(4)
    assert not [n for n in variant.notes if "not in any ResourceSlice" in n]


@pytest.mark.django_db
def test_collect_usage_prints_the_variant_with_dra_keys():
    out = io.StringIO()

    call_command("collect_usage", snapshot=str(VARIANT), print_json=True, stdout=out)

    doc = json.loads(out.getvalue())["namespaces"]
    assert doc["research-ml"]["allocated"][GPU] == 37.375
    assert doc["research-ml"]["allocated"][MIG] == 3
    assert doc["cv-vision"]["allocated"][WHOLE] == 8
    assert doc["cv-vision"]["pending"][MIG] == 1
    assert doc["speech-asr"]["pending"][WHOLE] == 1
    assert WHOLE not in doc["shared-batch"]["allocated"]


def test_the_demo_collects_the_variant_as_its_cluster(cast, settings):
    settings.FAIRSHARE_CLUSTER = f"snapshot:{VARIANT}"

    snapshot, n = collection.collect_usage(now=NOW)

    assert snapshot.source.startswith("snapshot:")
    assert n == UsageSample.objects.filter(taken_at=NOW).count() > 0
    samples = UsageSample.objects.filter(taken_at=NOW, resource=GPU)
    dra = sum(r[GPU] for r in DRA_ALLOCATED.values())
    assert dra == Decimal("17.125")
    assert sum(s.allocated for s in samples) == 498 + dra
