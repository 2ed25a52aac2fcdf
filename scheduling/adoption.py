"""Adopting a namespace that exists and that Fairshare did not create (services).

Adoption is an explicit site-admin action (``manage.py adopt_namespace NAME --team SLUG``): it
first shows what the sync would write into the namespace — its labels and queue annotation, the
ResourceQuota, the LimitRange, the RoleBindings (who gets which built-in ClusterRole) and the
Volcano Role — and only with ``--confirm`` records the namespace as the team's, marked
``adopted`` (``quotas.models.Namespace.adopted``). An adopted namespace is never deleted by a
prune (``domain/plan/planning.py`` releases it instead) and the sync's guard
(``scheduling.namespace_guard``) lets Fairshare write into it; a namespace that is protected
(``quotas.protection``) or labelled as another manager's cannot be adopted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas.changes import audit, notify_quota_changed
from quotas.choices import AuditVerb
from quotas.models import Namespace, Team
from scheduling.backend import current_backend
from scheduling.desired import build_cluster_spec, sync_scope


def _what(manifest: Mapping[str, Any]) -> list[str]:
    kind, meta = manifest["kind"], manifest.get("metadata") or {}
    name = meta.get("name")
    if kind == "Namespace":
        lines = [f"Namespace {name}: labels and annotations (existing ones are kept)"]
        lines += [f"    label {k}={v}" for k, v in sorted((meta.get("labels") or {}).items())]
        lines += [
            f"    annotation {k}={v}" for k, v in sorted((meta.get("annotations") or {}).items())
        ]
        return lines
    if kind == "ResourceQuota":
        hard = (manifest.get("spec") or {}).get("hard") or {}
        shown = ", ".join(f"{k}={v}" for k, v in hard.items()) or "(no amounts)"
        return [f"ResourceQuota {name}: {shown}"]
    if kind == "LimitRange":
        items = (manifest.get("spec") or {}).get("limits") or []
        return [f"LimitRange {name}: container defaults and maxima {items}"]
    if kind == "RoleBinding":
        role = (manifest.get("roleRef") or {}).get("name")
        subjects = ", ".join(
            f"{s.get('kind')} {s.get('name')}" for s in manifest.get("subjects") or []
        )
        return [f"RoleBinding {name}: {subjects} → {manifest['roleRef']['kind']} {role}"]
    return [f"{kind} {name}"]


def adoption_preview(namespace: str, team: Team) -> list[str]:
    """What the sync will write into ``namespace`` once it is adopted for ``team``: one line per
    object (and per label). Nothing is saved. Raises ValidationError naming the rule for a name
    Fairshare may not manage."""
    with transaction.atomic():
        row = Namespace.objects.filter(name=namespace).first() or Namespace(
            name=namespace, team=team
        )
        if row.team_id != team.pk:
            raise ValidationError(
                {"name": f"Namespace {namespace!r} already belongs to team {row.team.slug}."}
            )
        row.adopted = True
        row.full_clean()
        row.save()
        scope = sync_scope([team.slug])
        manifests = current_backend().render(
            build_cluster_spec(within=scope.trees), namespaces_of=scope.teams
        )
        transaction.set_rollback(True)
    lines: list[str] = []
    for manifest in manifests:
        meta = manifest.get("metadata") or {}
        if meta.get("namespace") == namespace or (
            manifest["kind"] == "Namespace" and meta.get("name") == namespace
        ):
            lines += _what(manifest)
    return lines


def adopt_namespace(namespace: str, team: Team, *, actor) -> Namespace:
    """Record ``namespace`` as ``team``'s, adopted (audited; a targeted sync follows)."""
    with transaction.atomic():
        row = Namespace.objects.select_for_update().filter(name=namespace).first()
        if row is not None and row.team_id != team.pk:
            raise ValidationError(
                {"name": f"Namespace {namespace!r} already belongs to team {row.team.slug}."}
            )
        before = None if row is None else {"adopted": row.adopted, "team": row.team.slug}
        row = row or Namespace(name=namespace, team=team)
        row.adopted = True
        row.full_clean()
        row.save()
        audit(
            actor=actor,
            verb=AuditVerb.CREATE if before is None else AuditVerb.UPDATE,
            obj=row,
            team=team,
            before=before,
            after={"adopted": True, "team": team.slug},
            note="Adopted: the namespace existed before Fairshare managed it.",
        )
        notify_quota_changed([team.pk], "adopt")
    return row
