"""Requests that overlap: the same team, a shared resource, overlapping windows (issue 14).

Two pending requests for research-team's GPUs over the same days each preview against today's
quota; approving one changes the other's "before". ``overlaps`` finds, for each request,

* the other *pending* requests it overlaps (flagged on submit and in the approval queue), and
* the overlapping requests *approved after it was submitted* (approved or active): its preview's
  "before" already includes them, which the flag says.

A request's window is [window_start (or its creation), window_end), open-ended when permanent.
Two queries whatever the number of requests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from quotas.choices import QuotaRequestStatus
from quotas.models import QuotaRequest

__all__ = ["Overlap", "overlaps"]

_RESOURCE_WORDS = {"nvidia.com/gpu": "GPUs", "cpu": "CPU", "memory": "memory"}
_IN_FORCE = (QuotaRequestStatus.APPROVED, QuotaRequestStatus.ACTIVE)


@dataclass(frozen=True)
class Overlap:
    """``other`` overlaps the request on ``resources``; ``decided``: it was approved after the
    request was submitted (the request's preview "before" includes it)."""

    other_id: int
    status: str
    resources: tuple[str, ...]
    decided: bool
    window_start: datetime | None
    window_end: datetime | None

    @property
    def message(self) -> str:
        what = ", ".join(_RESOURCE_WORDS.get(r, r) for r in self.resources)
        if self.decided:
            return (
                f"Request #{self.other_id} for the same team and {what} was approved after this "
                "one was submitted: the preview's \u201cbefore\u201d already includes it."
            )
        return (
            f"Overlaps pending request #{self.other_id} for the same team and {what}: approving "
            "one changes what the other adds."
        )


def _span(request: QuotaRequest) -> tuple[datetime, datetime | None]:
    return (request.window_start or request.created, request.window_end)


def _intersect(a: tuple[datetime, datetime | None], b: tuple[datetime, datetime | None]) -> bool:
    (a0, a1), (b0, b1) = a, b
    return (b1 is None or a0 < b1) and (a1 is None or b0 < a1)


def overlaps(requests: Iterable[QuotaRequest]) -> dict[int, list[Overlap]]:
    """{request pk: its overlaps, by other request's pk} for the given (saved) requests; only
    pending requests get overlaps (a decided one is history)."""
    wanted = [r for r in requests if r.status == QuotaRequestStatus.PENDING]
    if not wanted:
        return {}
    candidates = (
        QuotaRequest.objects.filter(
            team_id__in={r.team_id for r in wanted},
            status__in=[QuotaRequestStatus.PENDING, *_IN_FORCE],
        )
        .prefetch_related("lines")
        .order_by("id")
    )
    by_team: dict[int, list[QuotaRequest]] = defaultdict(list)
    for candidate in candidates:
        by_team[candidate.team_id].append(candidate)
    resources = {
        c.pk: {line.resource for line in c.lines.all()} for cs in by_team.values() for c in cs
    }
    result: dict[int, list[Overlap]] = {}
    for request in wanted:
        mine = resources.get(request.pk) or {line.resource for line in request.lines.all()}
        found = []
        for other in by_team[request.team_id]:
            if other.pk == request.pk:
                continue
            shared = tuple(sorted(mine & resources[other.pk]))
            if not shared or not _intersect(_span(request), _span(other)):
                continue
            if other.status == QuotaRequestStatus.PENDING:
                decided = False
            elif other.decided_at is not None and other.decided_at > request.created:
                decided = True
            else:
                continue  # in force before this request was made: part of what it asked against
            found.append(
                Overlap(
                    other_id=other.pk,
                    status=other.status,
                    resources=shared,
                    decided=decided,
                    window_start=other.window_start,
                    window_end=other.window_end,
                )
            )
        if found:
            result[request.pk] = found
    return result
