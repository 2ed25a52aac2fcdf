"""Audit entries in plain words: ``dana submitted request #3 for research-team: GPU guarantee
32 → 48`` instead of ``Submitted quotas.QuotaRequest Request #3``.

``describe(event)`` reads only the event's own fields (verb, object, before/after JSON written
by the services), so a page of entries costs no query.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from quotas.choices import AuditVerb
from quotas.quantities import format_quantity

__all__ = ["describe", "quota_changes"]

_RESOURCE_WORDS = {"nvidia.com/gpu": "GPU", "cpu": "CPU", "memory": "memory"}
_OBJECTS = {
    "quotas.TeamQuota": "quota",
    "quotas.Team": "team",
    "quotas.Membership": "membership",
    "quotas.Namespace": "namespace",
    "quotas.ApiToken": "API token",
    "quotas.Budget": "budget",
    "quotas.PriorityTier": "priority tier",
    "monitoring.RateCard": "rate card",
}


def _amount(value, resource: str) -> str:
    if value in (None, ""):
        return "no limit"
    try:
        return format_quantity(Decimal(str(value)), resource)
    except (InvalidOperation, ValueError):
        return str(value)


def quota_changes(before: dict | None, after: dict | None) -> list[str]:
    """``GPU guarantee 32 → 48`` for each amount that differs between two quota states
    ({resource: {guarantee, limit}}), resources sorted, GPUs first."""
    before, after = before or {}, after or {}
    parts = []
    for resource in sorted(before.keys() | after.keys(), key=lambda r: (r != "nvidia.com/gpu", r)):
        old, new = before.get(resource) or {}, after.get(resource) or {}
        if not isinstance(old, dict) or not isinstance(new, dict):
            continue
        label = _RESOURCE_WORDS.get(resource, resource)
        for key in ("guarantee", "limit"):
            if old.get(key) != new.get(key):
                was = _amount(old.get(key), resource) if old else "none"
                parts.append(f"{label} {key} {was} → {_amount(new.get(key), resource)}")
    return parts


def _request_lines(state: dict | None, *, approved: bool = False) -> list[str]:
    """A request's lines (``request_state``): requested (or approved) amounts against the team's
    amounts when it was submitted."""
    parts = []
    lines = (state or {}).get("lines") or {}
    for resource in sorted(lines, key=lambda r: (r != "nvidia.com/gpu", r)):
        line = lines[resource]
        label = _RESOURCE_WORDS.get(resource, resource)
        for key in ("guarantee", "limit"):
            new = line.get(f"approved_{key}") if approved else None
            new = new if new is not None else line.get(key)
            old = line.get(f"previous_{key}")
            if "previous_guarantee" not in line:  # entries from before previous_* were recorded
                parts.append(f"{label} {key} {_amount(new, resource)}")
            elif old != new:
                parts.append(f"{label} {key} {_amount(old, resource)} → {_amount(new, resource)}")
    return parts


def describe(event) -> str:
    """One sentence for an AuditEvent (the actor first, "system" for tasks)."""
    who = event.actor_name or "system"
    team = getattr(event, "team", None)
    team_slug = team.slug if team is not None else ""
    for_team = f" for {team_slug}" if team_slug else ""
    if event.object_type == "quotas.QuotaRequest":
        ref = f"request #{event.object_id}{for_team}"
        request_state = (event.after or {}).get("request") if event.after else None
        if event.verb == AuditVerb.SUBMIT:
            changes = _request_lines(event.after)
            return f"{who} submitted {ref}" + (f": {', '.join(changes)}" if changes else "")
        if event.verb == AuditVerb.APPROVE:
            after = {k: v for k, v in (event.after or {}).items() if k != "request"}
            changes = quota_changes(event.before, after) or _request_lines(
                request_state, approved=True
            )
            scheduled = (request_state or {}).get("status") == "approved" and (
                request_state or {}
            ).get("window_start")
            text = f"{who} approved {ref}"
            if scheduled:
                text += " (starts when its window opens)"
            return text + (f": {', '.join(changes)}" if changes else "")
        if event.verb == AuditVerb.REJECT:
            return f"{who} rejected {ref}"
        if event.verb == AuditVerb.WITHDRAW:
            return f"{who} withdrew {ref}"
        if event.verb == AuditVerb.ACTIVATE:
            changes = quota_changes(event.before, event.after)
            return f"Temporary grant #{event.object_id}{for_team} started" + (
                f": {', '.join(changes)}" if changes else ""
            )
        if event.verb == AuditVerb.EXPIRE:
            changes = quota_changes(event.before, event.after)
            return f"Temporary grant #{event.object_id}{for_team} ended" + (
                f": {', '.join(changes)}" if changes else ""
            )
    if event.object_type == "quotas.TeamQuota" and event.verb == AuditVerb.UPDATE:
        changes = quota_changes(event.before, event.after)
        whose = f"{team_slug}'s quota" if team_slug else "a quota"
        return f"{who} set {whose}" + (f": {', '.join(changes)}" if changes else "")
    if event.verb == AuditVerb.REBALANCE:
        return f"{who} rebalanced weights, tiers and guarantees"
    thing = _OBJECTS.get(event.object_type, event.object_type.rpartition(".")[2].lower())
    verb = event.get_verb_display().lower()
    name = f" {event.object_repr}" if event.object_repr else ""
    return f"{who} {verb} {thing}{name}{for_team if thing != 'team' else ''}"
