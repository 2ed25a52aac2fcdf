"""Planner: what has to change for the cluster to match the desired state (pure).

``plan(desired, live)`` pairs rendered manifests with observed objects by ``(kind, namespace,
name)`` and returns one :class:`Change` per object (``create``, ``update`` with its field
diffs, ``unchanged`` or ``prune``); :func:`apply_steps` / :func:`apply_waves` order the writes
so that every intermediate state passes Volcano's queue webhook.

Package layout (imports point down this list; no module imports one above it):

- :mod:`.fields`: field paths, and the per-kind tables (atomic lists, quantities, immutables);
- :mod:`.changes`: ``Change`` and ``FieldDiff``, what the planner returns;
- :mod:`.defaults`: ``server_defaults``, what the API server adds to what we apply;
- :mod:`.ownership`: which fields are ours (``managedFields``, the last-applied annotation);
- :mod:`.diff`: semantic comparison of a desired and a live object (``diff_object``);
- :mod:`.hierarchy`: Queue parents and depths, and the shrink-stage interim states;
- :mod:`.planning`: ``plan()``, pairing both sides, with the pruning and release rules;
- :mod:`.waves`: ``Step``, ``apply_steps`` and ``apply_waves``, the order of the writes;
- :mod:`.display`: ``render_diff``, a change as text for people;
- :mod:`.kubectl`: ``kubectl_passes``, why one ``kubectl apply`` pass is not enough.

This index re-exports what callers import, so ``from scheduling.domain.plan import X`` keeps
working; nothing here reads a name at run time, so patch a name on the module that defines it.
"""

from __future__ import annotations

from .changes import Change, FieldDiff, Op
from .defaults import server_defaults
from .diff import creation_diff, diff_object
from .display import render_diff
from .fields import ATOMIC_LISTS, IMMUTABLE_FIELDS, OWNED_FIELDS
from .hierarchy import ROOT_QUEUE
from .kubectl import kubectl_passes
from .ownership import field_leaves, fields_v1_leaves
from .planning import plan
from .waves import Step, apply_steps, apply_waves

__all__ = [
    "ATOMIC_LISTS",
    "IMMUTABLE_FIELDS",
    "OWNED_FIELDS",
    "ROOT_QUEUE",
    "Change",
    "FieldDiff",
    "Op",
    "Step",
    "apply_steps",
    "apply_waves",
    "creation_diff",
    "diff_object",
    "field_leaves",
    "fields_v1_leaves",
    "kubectl_passes",
    "plan",
    "render_diff",
    "server_defaults",
]
