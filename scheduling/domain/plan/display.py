"""Changes for people: the readable text form of a :class:`~.changes.Change`.

Invariant: one header line per change, one indented line per field diff, absent values as
``(none)``; the output depends on the change only.
"""

from __future__ import annotations

import json
from typing import Any

from .changes import Change

__all__ = ["render_diff"]


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def render_diff(change: Change) -> str:
    """Return a readable text form: a header line, then one indented line per field diff.

    ``update ResourceQuota team-a/fairshare`` followed by
    ``  spec.hard.requests.nvidia.com/gpu: 64 -> 80``; absent values print as ``(none)``.
    """
    where = f"{change.namespace}/{change.name}" if change.namespace else change.name
    lines = [f"{change.op} {change.kind} {where}"]
    lines += [f"  {d.path}: {_show(d.old)} -> {_show(d.new)}" for d in change.diff]
    return "\n".join(lines)
