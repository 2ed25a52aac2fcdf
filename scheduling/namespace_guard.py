"""Never write into a namespace Fairshare did not create unless a site admin adopted it (services).

The entry points refuse the protected namespaces by name (``quotas.protection``), and the
renderer renders nothing into them; what only the live cluster can tell is checked here, before
the sync writes anything: a Namespace the plan would *create* (none of our objects carries the
``app.kubernetes.io/managed-by: fairshare`` label yet) may already exist.

* If it is labelled ``app.kubernetes.io/managed-by`` with another manager's name, it belongs to
  that manager (Helm, Argo CD, an operator): refused, adopted or not.
* Otherwise, if it exists and was not adopted (``Namespace.adopted``, which the renderer carries
  as the annotation ``fairshare.io/adopted``), server-side apply would quietly take it over,
  binding the team's leads to ClusterRole ``admin`` in it: refused until a site admin adopts it
  (``manage.py adopt_namespace``, or the adopted flag in the API or the Django admin), which
  first shows what will be written into it.

A refused namespace fails its own item and every item of ours inside it, with the reason; the
rest of the run goes on. A LIST by name per namespace the plan creates (one LIST of all when it
creates many); nothing when it creates none, so a steady-state sync reads nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kube.apply import call_with_retry
from kube.client import KINDS
from kube.observe import list_raw
from quotas.models import Namespace
from quotas.protection import foreign_manager, namespace_refusal
from scheduling.domain.plan import Change
from scheduling.domain.render import ANNOTATION_ADOPTED, ANNOTATION_RELEASED

# Up to this many new namespaces are looked up one LIST by name each; more, with one LIST of all.
BY_NAME_AT_MOST = 20


def _adopted(change: Change) -> bool:
    annotations = ((change.body or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_ADOPTED) == "true"


def refusal(change: Change, live: Mapping[str, Any] | None) -> str | None:
    """Why the Namespace ``change`` must not be written, given the live namespace (or None)."""
    protected = namespace_refusal(change.name)
    if protected:
        return protected
    if live is None:
        return None
    foreign = foreign_manager(live)
    if foreign:
        return f"Refused: {foreign}"
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ANNOTATION_RELEASED) == "true":
        return None  # Fairshare had it, and released it (domain/plan/planning.py)
    if change.op == "create" and not _adopted(change):
        return (
            f"Refused: namespace {change.name!r} already exists and Fairshare did not create "
            "it. A site admin must adopt it first (`manage.py adopt_namespace "
            f"{change.name}` shows what will be written into it), or choose another name."
        )
    return None


def _live_namespaces(api_client: Any, names: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """The live Namespaces among ``names``: a LIST by name each for a few, one LIST of all for
    many."""
    info = KINDS["Namespace"]
    if len(names) > BY_NAME_AT_MOST:
        items = call_with_retry(lambda: list(list_raw(api_client, info.path())), attempts=3)
        wanted = set(names)
        return {
            name: item
            for item in items
            if (name := (item.get("metadata") or {}).get("name")) in wanted
        }
    # A LIST narrowed by ``metadata.name`` (every kind supports that field selector) rather than
    # a GET: the ClusterRole grants ``list`` on Namespaces, not ``get`` (deploy/rbac.yaml).
    found: dict[str, Mapping[str, Any]] = {}
    for name in names:
        for item in call_with_retry(
            lambda name=name: list(
                list_raw(api_client, info.path(), params={"fieldSelector": f"metadata.name={name}"})
            ),
            attempts=3,
        ):
            found[name] = item
    return found


def protected_notes(team_slugs: Iterable[str] | None = None) -> list[str]:
    """Log notes for managed namespaces in the database that are protected (written before the
    rule, or around it): the renderer renders nothing into them, and the run says so."""
    rows = Namespace.objects.filter(managed=True)
    if team_slugs is not None:
        rows = rows.filter(team__slug__in=list(team_slugs))
    notes = []
    for name, slug in rows.values_list("name", "team__slug").order_by("name"):
        why = namespace_refusal(name)
        if why:
            notes.append(f"Skipped namespace {name} of team {slug}: {why} Remove it from the team.")
    return notes


def guard(
    api_client: Any, changes: Sequence[Change]
) -> tuple[list[Change], list[tuple[Change, str]]]:
    """Split ``changes`` into those that may go out and those refused (with the reason)."""
    creates = [c for c in changes if c.kind == "Namespace" and c.op == "create"]
    if not creates:
        return list(changes), []
    existing = _live_namespaces(api_client, [c.name for c in creates])
    refused_ns: dict[str, str] = {}
    for change in creates:
        why = refusal(change, existing.get(change.name))
        if why:
            refused_ns[change.name] = why
    return split(changes, refused_ns)


def split(
    changes: Iterable[Change], refused_ns: Mapping[str, str]
) -> tuple[list[Change], list[tuple[Change, str]]]:
    allowed: list[Change] = []
    refused: list[tuple[Change, str]] = []
    for change in changes:
        name = change.name if change.kind == "Namespace" else change.namespace
        if name in refused_ns and change.op != "prune":
            refused.append((change, refused_ns[name]))
        else:
            allowed.append(change)
    return allowed, refused
