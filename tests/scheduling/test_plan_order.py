"""The order of a sync's writes (scheduling.domain.plan.apply_steps): every intermediate state
must pass Volcano's queue webhook, imitated by tests/kubeapi/volcano.py. Each case also shows
that the plain dependency order (parents first) would be denied, so the test can fail."""

from __future__ import annotations

import copy
import random

import pytest
from kubernetes.utils import parse_quantity

from scheduling.domain.plan import apply_steps, apply_waves, field_leaves, plan
from tests.kubeapi import volcano

GPU = "nvidia.com/gpu"
LABELS = {"app.kubernetes.io/managed-by": "fairshare"}


def queue(name, parent=None, g=None, d=None, c=None, **extra):
    spec = {"weight": 1, "reclaimable": True, **extra}
    if c is not None:
        spec["capability"] = {GPU: str(c)}
    if g is not None:
        spec["guarantee"] = {"resource": {GPU: str(g)}}
    if d is not None:
        spec["deserved"] = {GPU: str(d)}
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": spec,
    }


def live(*queues):
    """As stored after our apply: we own what we set; the controller put parentless queues
    under root."""
    out = []
    for q in queues:
        q = copy.deepcopy(q)
        tree: dict = {}
        for path in field_leaves(q):
            node = tree
            for part in path:
                node = node.setdefault(f"f:{part}", {})
        q["metadata"]["managedFields"] = [
            {"manager": "fairshare", "operation": "Apply", "fieldsV1": tree}
        ]
        q["spec"].setdefault("parent", "root")
        out.append(q)
    return out


def simulate(live_queues, writes):
    """Apply ``writes`` [(action, name, body)] one by one through Volcano's webhook."""
    store = {q["metadata"]["name"]: copy.deepcopy(q) for q in live_queues}
    for action, name, body in writes:
        if action == "delete":
            volcano.validate_queue_delete(name, store)
            del store[name]
            continue
        new = copy.deepcopy(body)
        if not new["spec"].get("parent"):
            # server-side apply removes the parent we set before; the controller sets root
            new["spec"]["parent"] = "root"
        volcano.validate_queue(new, store.get(name), store)
        store[name] = new
    return store


def steps_of(desired, live_queues):
    changes = plan(desired, live_queues, parse_quantity=parse_quantity)
    return [(s.action, s.change.name, s.body) for s in apply_steps(changes)]


def naive_of(desired, live_queues):
    changes = plan(desired, live_queues, parse_quantity=parse_quantity)
    out = []
    for c in changes:
        if c.op in ("create", "update"):
            out.append(("apply", c.name, c.body))
        elif c.op == "prune":
            out.append(("delete", c.name, None))
    return out


CASES = {
    # 16 GPUs from speech to research under an unchanged department guarantee of 96.
    "sibling rebalance": (
        [
            queue("ai", g=96, d=96),
            queue("research", "ai", 32, 32),
            queue("speech", "ai", 32, 32),
            queue("cv", "ai", 32, 32),
        ],
        [
            queue("ai", g=96, d=96),
            queue("research", "ai", 48, 48),
            queue("speech", "ai", 16, 16),
            queue("cv", "ai", 32, 32),
        ],
    ),
    # The department shrinks: its children must shrink first.
    "parent shrinks": (
        [
            queue("ai", g=96, d=96, c=200),
            queue("a", "ai", 48, 48, 100),
            queue("b", "ai", 48, 48, 100),
        ],
        [queue("ai", g=64, d=64, c=80), queue("a", "ai", 32, 32, 80), queue("b", "ai", 32, 32, 80)],
    ),
    # It grows: it must grow first.
    "parent grows": (
        [queue("ai", g=64, d=64, c=80), queue("a", "ai", 32, 32, 80), queue("b", "ai", 32, 32, 80)],
        [
            queue("ai", g=96, d=96, c=200),
            queue("a", "ai", 48, 48, 150),
            queue("b", "ai", 48, 48, 150),
        ],
    ),
    # One queue's guarantee goes up while its capability goes down under a parent that grows
    # its guarantee and shrinks its capability: shrink what shrinks, then grow what grows.
    "mixed directions": (
        [
            queue("ai", g=40, d=40, c=200),
            queue("a", "ai", 20, 20, 150),
            queue("b", "ai", 20, 20, 150),
        ],
        [
            queue("ai", g=60, d=60, c=100),
            queue("a", "ai", 40, 40, 100),
            queue("b", "ai", 20, 20, 100),
        ],
    ),
    # A team moves to another department that grows for it; the old one shrinks.
    "move": (
        [
            queue("x", g=50, d=50, c=100),
            queue("y", g=10, d=10, c=100),
            queue("t", "x", 40, 40, 100),
            queue("u", "y", 10, 10, 100),
        ],
        [
            queue("x", g=10, d=10, c=50),
            queue("y", g=50, d=50, c=100),
            queue("t", "y", 40, 40, 100),
            queue("u", "y", 10, 10, 100),
        ],
    ),
    # A department leaves its parent with its own team below it; the old parent shrinks.
    "move a subtree": (
        [queue("x", g=10, d=10, c=100), queue("c", "x", 10, 10, 80), queue("b", "c", 10, 10, 80)],
        [queue("x"), queue("c", None, 10, 10, 80), queue("b", "c", 10, 10, 80)],
    ),
    # A department goes away with its team; another team moves out of it first.
    "prune a parent": (
        [
            queue("x", g=30, d=30, c=100),
            queue("t", "x", 20, 20),
            queue("u", "x", 10, 10),
            queue("y", g=0, d=0),
        ],
        [queue("y", g=20, d=20), queue("t", "y", 20, 20)],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_intermediate_state_passes_volcanos_webhook(case):
    before, after = CASES[case]
    current = live(*before)

    final = simulate(current, steps_of(after, current))

    # The end state is the desired one.
    for want in after:
        got = final[want["metadata"]["name"]]["spec"]
        for field in ("guarantee", "deserved", "capability"):
            assert got.get(field) == want["spec"].get(field), (case, field)
    assert set(final) == {q["metadata"]["name"] for q in after}


@pytest.mark.parametrize("case", ["sibling rebalance", "parent shrinks", "mixed directions"])
def test_the_plain_dependency_order_would_be_denied(case):
    before, after = CASES[case]
    current = live(*before)

    with pytest.raises(volcano.Denied):
        simulate(current, naive_of(after, current))


def test_a_pure_decrease_is_written_once_and_early():
    before, after = CASES["sibling rebalance"]
    steps = steps_of(after, live(*before))

    assert [(a, n) for a, n, _ in steps] == [("apply", "speech"), ("apply", "research")]


def test_a_steady_state_has_no_steps():
    _, after = CASES["move"]
    assert steps_of(after, live(*after)) == []


# ---------------------------------------------------------------- waves (concurrent writers)


def writes_of(waves, rng):
    """One order the concurrent writers may produce: the waves in turn, each one's units in
    any order (a unit's own writes stay in order: one writer carries them out)."""
    out = []
    for wave in waves:
        units = list(wave)
        rng.shuffle(units)
        out += [(s.action, s.change.name, s.body) for unit in units for s in unit]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_any_order_within_each_wave_passes_volcanos_webhook(case):
    before, after = CASES[case]
    current = live(*before)
    waves = apply_waves(plan(after, current, parse_quantity=parse_quantity))
    rng = random.Random(case)

    for _ in range(30):
        final = simulate(current, writes_of(waves, rng))

        for want in after:
            got = final[want["metadata"]["name"]]["spec"]
            for field in ("guarantee", "deserved", "capability"):
                assert got.get(field) == want["spec"].get(field), (case, field)
        assert set(final) == {q["metadata"]["name"] for q in after}


def test_the_waves_are_apply_steps_in_groups():
    before, after = CASES["move"]
    changes = plan(after, live(*before), parse_quantity=parse_quantity)

    waves = apply_waves(changes)

    assert [s for wave in waves for unit in wave for s in unit] == apply_steps(changes)
    assert all(wave for wave in waves)


def namespaced(kind, namespace, name="fairshare"):
    api = {"Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1"}
    return {
        "apiVersion": api.get(kind, "v1"),
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
    }


def test_a_wave_holds_one_kind_at_one_depth_in_dependency_order():
    desired = [
        queue("dept", g=10, d=10),
        queue("a", "dept", 5, 5),
        queue("b", "dept", 5, 5),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-a", "labels": LABELS}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-b", "labels": LABELS}},
        *(
            namespaced(k, ns)
            for k in ("ResourceQuota", "Role", "RoleBinding")
            for ns in ("ns-a", "ns-b")
        ),
    ]

    waves = apply_waves(plan(desired, [], parse_quantity=parse_quantity))

    shape = [sorted({(s.change.kind, s.change.name) for u in w for s in u}) for w in waves]
    assert shape == [
        [("Namespace", "ns-a"), ("Namespace", "ns-b")],
        [("Queue", "dept")],
        [("Queue", "a"), ("Queue", "b")],  # siblings together, after their parent
        [("ResourceQuota", "fairshare")],
        [("Role", "fairshare")],
        [("RoleBinding", "fairshare")],  # after the Roles they bind
    ]
    assert [len(w) for w in waves] == [2, 1, 2, 2, 2, 2]
