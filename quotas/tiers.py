"""What a tier change does to workloads, said where the change is made (issue 25, item 6).

A PriorityClass's ``value`` and ``preemptionPolicy`` are immutable (Kubernetes
``pkg/apis/scheduling/validation/validation.go`` ``ValidatePriorityClassUpdate``), so the sync
replaces the class: a delete and a create, back to back in one unit of writes
(``scheduling.domain.plan.apply_waves``). The API server's Priority admission plugin
(``plugin/pkg/admission/priority/admission.go``) copies a class's value and policy into each pod
when the pod is created, and never again: pods that exist keep what they were given. A pod
created between the delete and the create is refused (its class does not exist for that
moment) and its controller creates it again.

The API answers a change with an HTTP ``Warning: 299`` header (as the Kubernetes API server
does for its own warnings); the Django admin shows the same words as a warning message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KEEP = (
    "Running and pending pods keep the priority and preemption policy they were created with; "
    "only pods created from now on get the new ones."
)


def tier_value_notice(before: Mapping[str, Any] | None, name: str, value: int, policy: str) -> str:
    """The notice for a changed PriorityTier (``before``: its previous ``value`` and
    ``preemption_policy``), or "" when neither changed."""
    if before is None:
        return ""
    old_value, old_policy = before.get("value"), before.get("preemption_policy")
    if old_value == value and old_policy == policy:
        return ""
    return (
        f"Tier {name}: value {old_value} -> {value}, preemption policy {old_policy} -> {policy}. "
        "Kubernetes cannot change a PriorityClass in place, so the sync deletes and re-creates "
        f"PriorityClass {name} back to back; a pod created in between is refused and retried "
        f"by its controller. {KEEP}"
    )


def team_tier_notice(slug: str, old: str | None, new: str | None) -> str:
    """The notice for a team moved from tier ``old`` to ``new`` (names), or "" if unchanged."""
    if old == new:
        return ""
    return (
        f"Team {slug}: tier {old or '(none)'} -> {new or '(none)'}. {KEEP} A pod gets a "
        "priority from the PriorityClass it names, so the team's new pods should name "
        f"{new or 'no tier class'}."
    )
