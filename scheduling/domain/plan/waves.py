"""The order of a sync's writes: :func:`apply_steps` and the concurrent :func:`apply_waves`.

:func:`~.planning.plan` lists creates, updates and unchanged objects in dependency order
(Namespaces, PriorityClasses, Queues parents-first, then namespaced kinds; see
``render.sort_key``), prunes last in the reverse order. :func:`apply_steps` turns that into the
writes, ordered so that every intermediate state passes Volcano's queue webhook: Queue amounts
that shrink are written first, children before parents; those that grow afterwards, parents
first. A Namespace that (re)routes to a Queue is written after every Queue write.

Invariant: :func:`apply_steps` is :func:`apply_waves` flattened; units of one wave are
independent of each other, and every wave finishes before the next starts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scheduling.domain.render.labels import ANNOTATION_QUEUE, KIND_ORDER

from .changes import Change
from .hierarchy import depths_from_parents, queue_parent

__all__ = ["Step", "apply_steps", "apply_waves"]


@dataclass(frozen=True)
class Step:
    """One write of a sync: ``apply`` a manifest or ``delete`` an object, for ``change``;
    ``route`` applies a Namespace routed to a Queue the same plan creates, once that Queue
    reports Open (``route_queue`` says which; the sync waits for it, bounded)."""

    change: Change
    action: Literal["apply", "delete", "route"]
    body: dict[str, Any] | None

    @property
    def route_queue(self) -> str | None:
        """The Queue a ``route`` step waits for."""
        if self.action != "route" or self.body is None:
            return None
        return ((self.body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_QUEUE)

    def unrouted(self) -> Step:
        """This ``route`` step as a plain apply that keeps the Namespace's live routing (its
        old annotation, or none for a new Namespace): what goes out when the Queue does not
        open in time, so the Namespace and its quota still exist."""
        body = self.body or {}
        metadata = dict(body.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        old = next((d.old for d in self.change.diff if d.path == _ROUTE_PATH), None)
        if old is None:
            annotations.pop(ANNOTATION_QUEUE, None)
        else:
            annotations[ANNOTATION_QUEUE] = old
        metadata["annotations"] = annotations
        return Step(self.change, "apply", {**body, "metadata": metadata})


_ROUTE_PATH = f"metadata.annotations.{ANNOTATION_QUEUE}"

# Written after every Queue of the plan and before the namespaced kinds.
_ROUTE_RANK = (KIND_ORDER["Queue"], 1 << 30)


def _routes(change: Change, opening: Collection[str]) -> str | None:
    """The queue a Namespace create/update (re)routes to, when that changes; None otherwise.

    Such a write goes after every Queue write of the plan (and before the namespaced kinds),
    whole: nothing before that needs the Namespace. When its Queue is created by the same plan
    (``opening``) it is a ``route`` step, which the sync carries out only once the Queue
    reports Open. Volcano's ``mutate_podgroup.go`` reads the annotation when a PodGroup is
    created and ``validate_podgroup.go`` then requires the queue to exist and be Open: a
    PodGroup created between an early switch and the Queue's opening would be denied.
    """
    if change.kind != "Namespace" or change.op not in ("create", "update") or not change.body:
        return None
    queue = ((change.body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_QUEUE)
    if not queue:
        return None
    if change.op == "update" and not any(d.path == _ROUTE_PATH for d in change.diff):
        return None
    return queue


def apply_steps(changes: Sequence[Change]) -> list[Step]:
    """Order the writes of a plan so that every intermediate state passes Volcano's webhook.

    Volcano's ``validate_queue.go`` checks each Queue write against the Queues as they are at
    that moment (child capability <= nearest ancestor's, Σ children's guarantee and deserved <=
    the parent's, a queue with children cannot be deleted). So:

    1. **shrink** — deepest first (by the live hierarchy): delete Queues pruned with their whole
       subtree; apply each Queue's ``interim`` (what goes down); apply changes whose interim is
       the desired state (pure decreases). Shrinking a child never breaks its parent's sums and
       a parent shrinks only after its children.
    2. **main** — :func:`plan` order (Namespaces, PriorityClasses, Queues parents first, then
       namespaced kinds): every other create and update. A parent grows before its children,
       and siblings only grow after all of them shrank in step 1. A Namespace whose
       ``scheduling.volcano.sh/queue-name`` is set or changes is written after every Queue
       write (a ``route`` step when its Queue is new: the sync waits until it is Open).
    3. **prune** — the remaining prunes in reverse dependency order (a Queue that still had
       children waits until they moved away).

    An update touching an immutable field is a delete then an apply (``needs_replace``).
    Unchanged objects produce no step. Deterministic. The same writes as
    :func:`apply_waves`, one after the other.
    """
    return [step for wave in apply_waves(changes) for unit in wave for step in unit]


def apply_waves(changes: Sequence[Change]) -> list[list[tuple[Step, ...]]]:
    """The writes of :func:`apply_steps` in *waves* that concurrent writers may carry out.

    A wave is a list of units; a unit is the writes of one change that must follow each other
    (a delete before a re-create). Units of one wave are independent of each other — the same
    kind at the same Queue depth in the same stage: siblings, never a parent and its child, never
    a namespaced object and its Namespace — so they may go out in any order or all at once. Every
    wave must be finished before the next starts; that keeps the order of kinds, depths and
    stages of :func:`apply_steps` and with it every rule that order exists for (Volcano's
    hierarchy checks at every intermediate state; a Role before the RoleBindings that refer to
    it, as RBAC's escalation check in the API server resolves the Role being bound).
    """
    early: dict[int, list[tuple[str, tuple[Step, ...]]]] = {}
    main: dict[tuple[int, int], list[tuple[Step, ...]]] = {}
    late: dict[tuple[int, int], list[tuple[Step, ...]]] = {}
    depths = depths_from_parents(
        {c.name: queue_parent(c.body) for c in changes if c.kind == "Queue" and c.body is not None}
    )

    opening = {c.name for c in changes if c.kind == "Queue" and c.op == "create"}

    def rank(change: Change) -> tuple[int, int]:
        level = depths.get(change.name, 0) if change.kind == "Queue" else 0
        return KIND_ORDER.get(change.kind, len(KIND_ORDER)), level

    for change in changes:
        if change.op == "unchanged":
            continue
        stage = early.setdefault(-change.live_depth, [])
        if change.op == "prune":
            delete = Step(change, "delete", None)
            if change.kind == "Queue" and change.stage == "shrink":
                stage.append((change.name, (delete,)))
                continue
            if change.interim is not None:
                stage.append((change.name, (Step(change, "apply", change.interim),)))
            late.setdefault(rank(change), []).append((delete,))
            continue
        writes: tuple[Step, ...] = (Step(change, "apply", change.body),)
        queue = _routes(change, opening)
        if queue is not None:
            writes = (Step(change, "route" if queue in opening else "apply", change.body),)
        if change.needs_replace:
            writes = (Step(change, "delete", None), *writes)
        if queue is not None:
            main.setdefault(_ROUTE_RANK, []).append(writes)
            continue
        if change.interim is not None and change.stage == "shrink":
            stage.append((change.name, writes))
            continue
        if change.interim is not None:
            stage.append((change.name, (Step(change, "apply", change.interim),)))
        main.setdefault(rank(change), []).append(writes)
    waves: list[list[tuple[Step, ...]]] = [
        [unit for _, unit in sorted(early[depth], key=lambda item: item[0])]
        for depth in sorted(early)
        if early[depth]
    ]
    waves += [main[key] for key in sorted(main)]
    waves += [late[key] for key in sorted(late, reverse=True)]
    return waves
