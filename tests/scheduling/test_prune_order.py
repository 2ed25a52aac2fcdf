"""The order of the late prunes of ``apply_waves`` (scheduling.domain.plan), pinned literally
(issue 25, item 9): children before parents, namespaced objects before their Namespace.

Reversing that order passed the scheduling, fake-server and fault tests in one run and was caught
by only one timing-dependent fault test in another; this test names every wave, so any change
to the order fails here, deterministically."""

from __future__ import annotations

import copy

from kubernetes.utils import parse_quantity

from scheduling.domain.plan import apply_waves, plan
from tests.kubeapi import volcano
from tests.scheduling.test_plan_order import LABELS, live, namespaced, queue


def namespace(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": LABELS}}


def priority_class(name):
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "value": 100,
    }


def cluster():
    """Live: queues a > b > c, two namespaces with a ResourceQuota, LimitRange, Role and
    RoleBinding each, and a PriorityClass. Desired: c moves under a new x; everything else
    goes (namespaces pruned too)."""
    current = live(queue("a"), queue("b", "a"), queue("c", "b"))
    for ns in ("old-1", "old-2"):
        current.append(namespace(ns))
        kinds = ("ResourceQuota", "LimitRange", "Role", "RoleBinding")
        current += [namespaced(kind, ns) for kind in kinds]
    current.append(priority_class("gone"))
    return [queue("x"), queue("c", "x")], current


def literal(waves):
    return [
        sorted((s.action, s.change.kind, s.change.namespace, s.change.name) for u in w for s in u)
        for w in waves
    ]


def test_late_prunes_go_children_first_and_namespaces_last():
    desired, current = cluster()

    waves = apply_waves(
        plan(desired, current, parse_quantity=parse_quantity, prune_namespaces=True)
    )

    assert literal(waves) == [
        # shrink stage, then main stage (c moves from b to x)
        [("apply", "Queue", None, "c")],
        [("apply", "Queue", None, "x")],
        [("apply", "Queue", None, "c")],
        # late prunes: reverse dependency order, one kind (and Queue depth) per wave
        [
            ("delete", "RoleBinding", "old-1", "fairshare"),
            ("delete", "RoleBinding", "old-2", "fairshare"),
        ],
        [("delete", "Role", "old-1", "fairshare"), ("delete", "Role", "old-2", "fairshare")],
        [
            ("delete", "LimitRange", "old-1", "fairshare"),
            ("delete", "LimitRange", "old-2", "fairshare"),
        ],
        [
            ("delete", "ResourceQuota", "old-1", "fairshare"),
            ("delete", "ResourceQuota", "old-2", "fairshare"),
        ],
        [("delete", "Queue", None, "b")],  # the child ...
        [("delete", "Queue", None, "a")],  # ... before its parent
        [("delete", "PriorityClass", None, "gone")],
        [("delete", "Namespace", None, "old-1"), ("delete", "Namespace", None, "old-2")],
    ]


def test_the_pinned_queue_prunes_pass_volcanos_webhook_and_the_reverse_does_not():
    desired, current = cluster()
    waves = apply_waves(plan(desired, current, parse_quantity=parse_quantity))
    writes = [s for w in waves for u in w for s in u if s.change.kind == "Queue"]
    moves = [s for s in writes if s.action == "apply"]
    prunes = [s.change.name for s in writes if s.action == "delete"]

    def replay(order):
        queues = {q["metadata"]["name"]: copy.deepcopy(q) for q in current if q["kind"] == "Queue"}
        for step in moves:
            queues[step.change.name] = copy.deepcopy(step.body)
        for name in order:
            volcano.validate_queue_delete(name, queues)
            del queues[name]

    replay(prunes)
    try:
        replay(list(reversed(prunes)))
    except volcano.Denied as e:
        assert str(e) == "queue a can not be deleted because it has 1 child queues: b"
    else:
        raise AssertionError("deleting a parent before its child passed Volcano's webhook")
