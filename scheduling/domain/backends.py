"""The scheduler backends: one interface, a pure renderer each (Volcano, Kueue).

The tenancy model, approvals, previews and fair shares are the same whichever scheduler runs the
cluster; what differs is which objects carry them. A :class:`Backend` says which kinds it writes
(listed, watched, planned and pruned by the sync), which of them are hierarchical (rendered per
department tree, parents first) and how to render a :class:`~scheduling.domain.types.ClusterSpec`.
``FAIRSHARE_SCHEDULER`` picks one (``scheduling.backend.current_backend``); nothing else in
Fairshare asks which.

Both renderers start from the same checked spec and the same queue amounts
(``render.prepare``); ``tests/scheduling/test_backends.py`` proves they encode the same guarantee,
fair allocation, ceiling and weight per team and department.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from . import kueue
from .render import KIND_ORDER, render
from .render.manifests import Manifest
from .types import ClusterSpec

__all__ = ["BACKENDS", "Backend", "backend_named"]

Renderer = Callable[..., list[Manifest]]

_TENANCY = ("Namespace", "ResourceQuota", "LimitRange", "Role", "RoleBinding", "PriorityClass")


@dataclass(frozen=True)
class Backend:
    """A scheduler backend: its ``name``, the ``kinds`` it manages (in apply order) and its
    renderer (``render(spec, namespaces_of=None)``)."""

    name: str
    label: str
    kinds: tuple[str, ...]
    renderer: Renderer
    # What of the spec this backend cannot express, in people's words (sync notes).
    limitations: Callable[[ClusterSpec], list[str]] = lambda spec: []

    def render(
        self, spec: ClusterSpec, *, namespaces_of: Collection[str] | None = None
    ) -> list[Manifest]:
        return self.renderer(spec, namespaces_of=namespaces_of)

    def notes(self, spec: ClusterSpec) -> list[str]:
        """Warnings about settings of ``spec`` that this backend cannot carry out."""
        return self.limitations(spec)


def _ordered(*kinds: str) -> tuple[str, ...]:
    return tuple(sorted(kinds, key=KIND_ORDER.__getitem__))


VOLCANO = Backend("volcano", "Volcano", _ordered(*_TENANCY, "Queue"), render)
KUEUE = Backend(
    "kueue",
    "Kueue",
    _ordered(
        *_TENANCY,
        "WorkloadPriorityClass",
        "ResourceFlavor",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
    ),
    kueue.render,
    kueue.limitations,
)
BACKENDS: dict[str, Backend] = {b.name: b for b in (VOLCANO, KUEUE)}


def backend_named(name: str) -> Backend:
    """The backend called ``name`` (``volcano`` or ``kueue``); ValueError names the choices."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown scheduler {name!r}: FAIRSHARE_SCHEDULER must be one of "
            f"{', '.join(sorted(BACKENDS))}"
        ) from None
