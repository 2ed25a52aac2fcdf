"""What the planner returns: one :class:`Change` per object, with its :class:`FieldDiff` s.

Invariant: a Change is a frozen value; ``body`` is the desired manifest for create, update and
unchanged, the live object as observed for prune; ``diff`` is empty except for updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .fields import IMMUTABLE_FIELDS

__all__ = ["Change", "FieldDiff", "Op", "Stage"]

Op = Literal["create", "update", "unchanged", "prune"]


@dataclass(frozen=True)
class FieldDiff:
    """One differing leaf: ``path`` is dotted (``spec.hard.requests.nvidia.com/gpu``, list
    indexes as ``[0]``); ``old`` is the live value, ``new`` the desired one, None when absent."""

    path: str
    old: Any
    new: Any


Stage = Literal["shrink", "main"]


@dataclass(frozen=True)
class Change:
    """What to do with one object.

    ``body`` is the desired manifest for create/update/unchanged, and the live object as observed
    for prune (so the apply side can delete with a uid/resourceVersion precondition). ``diff`` is
    empty except for updates. ``namespace`` is None for cluster-scoped objects.

    ``interim`` (Queues only) is a manifest to apply in the *shrink* stage, before anything
    grows: the amounts that go down, so that no intermediate state breaks Volcano's hierarchy
    rules; ``stage`` says when the change itself is applied (``shrink`` when the interim state
    already is the desired one: a pure decrease).
    """

    op: Op
    kind: str
    namespace: str | None
    name: str
    body: dict[str, Any] | None
    diff: tuple[FieldDiff, ...] = ()
    interim: dict[str, Any] | None = None
    stage: Stage = "main"
    live_depth: int = 0

    @property
    def needs_replace(self) -> bool:
        """True when the update touches a field the API server will not change in place."""
        immutable = IMMUTABLE_FIELDS.get(self.kind, ())
        return self.op == "update" and any(
            d.path == f or d.path.startswith(f"{f}.") for d in self.diff for f in immutable
        )
