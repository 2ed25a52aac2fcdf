"""What-if previews as the pages show them.

``present_whatif`` turns ``WhatIf.to_dict()`` (fresh, or stored on ``QuotaRequest.preview``)
into the rows ``_partials/whatif.html`` displays, so a stored preview and a fresh one look the
same; ``fresh_whatif`` and ``request_preview`` run ``scheduling.services`` and turn a problem into
``{"error": ...}``, shown instead of the preview.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from contextlib import contextmanager, suppress
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError

from monitoring.usage import product_rows
from quotas.models import QuotaRequest
from quotas.overlaps import overlaps
from quotas.templatetags.fairshare import approx_quantity, resource_label
from scheduling.domain import whatif as whatif_domain
from scheduling.exceptions import DomainError as SchedulingError
from scheduling.explanation import explanation_table
from scheduling.health import explain_share_error
from scheduling.services import what_if, what_if_for_request
from scheduling.visibility import share_slugs

logger = logging.getLogger(__name__)


PREVIEW_FAILED = "The preview could not be computed; the error has been logged for the admins."
# A hierarchy flag about a team the viewer may not see (share visibility "own"): its message
# names that department, its limit and its teams' guarantees, so the viewer gets this instead.
HIDDEN_HIERARCHY = (
    "The change would break a quota rule of a department above the team for {resource} (a "
    "limit over the department's, or its teams' guarantees over its limit); approval would be "
    "refused. The department's lead or a site admin can say by how much."
)


def decimal_or_zero(value) -> Decimal:
    return Decimal(str(value)) if value not in (None, "") else Decimal(0)


# --------------------------------------------------------------------------- what-if display


def present_whatif(
    data: dict | None, *, focus: str | None = None, visible: frozenset[str] | None = None
) -> dict | None:
    """Turn ``WhatIf.to_dict()`` (fresh or stored) into rows the partial displays.

    ``focus`` is the team the change is for: its rows come first. Other teams are listed only
    when their fair allocation changes. ``visible`` (``scheduling.visibility.share_slugs``) are
    the teams the viewer may see by name; the others' changes are summed into one anonymous
    ``others`` line (None: every team by name). Returns None for an empty (never computed)
    preview.
    """
    if not data:
        return None
    if data.get("error"):
        return {"error": explain_share_error(data["error"])}
    teams = [_team_rows(team) for team in data.get("teams", [])]

    def named(slug) -> bool:
        return visible is None or slug == focus or slug in visible

    losers = _losers(data.get("losers", {}), focus, named)
    focused = next((t for t in teams if t["slug"] == focus), None)
    changes = [_team_change(team) for team in data.get("teams", [])]
    by_slug = {change.slug: change for change in changes}
    # The focus's department chain is not "other teams": its allocation holds the focus's own
    # (issue 29). Its movement is told in words (``sources``), never as a team giving up.
    chain = set(whatif_domain.ancestors(by_slug, focus)) if focus in by_slug else set()
    if focused is not None:
        # GPU-equivalents the team holds now per GPU product (issue 34); older stored previews
        # have none.
        in_use = (data.get("gpu_in_use") or {}).get(focus) or {}
        focused["gpu_products"] = product_rows(in_use)
        focused["reasons"] = _untouched_reasons(data, focused, focus)
        focused["explanation_change"] = _explanation_change(data, focus)
    hidden = [t for t in teams if t["changed"] and not named(t["slug"]) and t["slug"] not in chain]
    return {
        "computed_at": _parse_time(data.get("computed_at")),
        "usage_taken_at": _parse_time(data.get("usage_taken_at")),
        "focus": focused,
        "changed_teams": [
            t
            for t in teams
            if t["changed"] and t["slug"] != focus and named(t["slug"]) and t["slug"] not in chain
        ],
        "others": _sum_rows(hidden) if hidden else None,
        "losers": [loser for loser in losers if loser["amounts"]] if focused is None else [],
        "sources": (
            _present_sources(by_slug, data.get("capacity", {}), focus, named)
            if focused is not None
            else []
        ),
        "flags": [_flag_shown(flag, named) for flag in data.get("flags", [])],
        "blocking": any(
            f.get("kind") in ("guarantees-over-capacity", "hierarchy")
            for f in data.get("flags", [])
        ),
    }


def _explanation_change(data: dict, focus: str) -> dict | None:
    """The focus's change as the parts of "why is my share X" (``explanation.change``): a table
    with a column per resource; None for previews stored before it was computed, or no change."""
    team = next((t for t in data.get("teams", []) if t.get("team") == focus), None)
    change = ((team or {}).get("explanation") or {}).get("change") or []
    if not change:
        return None
    delta = (team or {}).get("delta", {})
    return explanation_table(change, {r: a for r, a in delta.items()}, signed_total=True)


def _team_rows(team: dict) -> dict:
    """One team of a preview: its fair allocation before and after per resource (and under full
    contention, where the preview has it), its weight, share and why, and whether it moved."""
    before, after = team.get("before", {}), team.get("after", {})
    fair_before, fair_after = (
        before.get("fair_allocation", {}),
        after.get("fair_allocation", {}),
    )
    delta = team.get("delta", {})
    contention = team.get("contention") or {}
    contended_before = contention.get("before") or {}
    contended_after = contention.get("after") or {}
    rows = [
        {
            "resource": resource,
            "before": fair_before.get(resource),
            "after": fair_after.get(resource),
            "delta": delta.get(resource, "0"),
            "lost": decimal_or_zero(delta.get(resource)) < 0,
            "moved": decimal_or_zero(delta.get(resource)) != 0,
            # Under full contention (every team demanding its limit): what a guarantee buys.
            # Stored previews from before this was computed have none.
            "contention_before": contended_before.get(resource) if contention else None,
            "contention_after": contended_after.get(resource) if contention else None,
            "contention_gain": decimal_or_zero(contended_after.get(resource))
            > decimal_or_zero(contended_before.get(resource)),
        }
        for resource in sorted(
            fair_before.keys() | fair_after.keys() | delta.keys(),
            key=lambda r: (r != "nvidia.com/gpu", r),
        )
    ]
    return {
        "slug": team.get("team"),
        "weight_before": before.get("weight"),
        "weight_after": after.get("weight"),
        "share_before": before.get("fair_share"),
        "share_after": after.get("fair_share"),
        "why_before": before.get("why", ""),
        "why_after": after.get("why", ""),
        "rows": rows,
        "changed": any(decimal_or_zero(v) != 0 for v in delta.values())
        or before.get("weight") != after.get("weight"),
    }


def _losers(losers_of: dict, focus: str | None, named) -> list[dict]:
    """Who gives up how much: the teams the viewer may name, one by one, and the others summed
    into one anonymous line."""
    losers = [
        {
            "slug": slug,
            "amounts": [
                {"resource": r, "amount": a}
                for r, a in sorted(amounts.items())
                if decimal_or_zero(a) > 0
            ],
        }
        for slug, amounts in sorted(losers_of.items())
        if slug != focus and named(slug)
    ]
    hidden_losses: dict[str, Decimal] = defaultdict(Decimal)
    for slug, amounts in losers_of.items():
        if slug != focus and not named(slug):
            for resource, amount in amounts.items():
                hidden_losses[resource] += decimal_or_zero(amount)
    if any(amount > 0 for amount in hidden_losses.values()):
        losers.append(
            {
                "slug": None,  # "other teams", together
                "amounts": [
                    {"resource": r, "amount": str(a)}
                    for r, a in sorted(hidden_losses.items())
                    if a > 0
                ],
            }
        )
    return losers


def _team_change(team: dict) -> whatif_domain.TeamChange:
    return whatif_domain.TeamChange(
        slug=team.get("team"),
        parent=team.get("parent"),
        before=_amounts(team.get("before", {}).get("fair_allocation", {})),
        after=_amounts(team.get("after", {}).get("fair_allocation", {})),
    )


def _amounts(raw: dict) -> dict[str, Decimal]:
    return {r: decimal_or_zero(a) for r, a in (raw or {}).items()}


def _present_sources(by_slug: dict, capacity: dict, focus: str, named) -> list[dict]:
    """``scheduling.domain.whatif.sources`` as rows the partial displays: for each resource the
    focus's fair allocation moves on, who gives it up (teams the viewer may not see by name
    together), the spare capacity, the own workloads of the departments above, and each
    department's movement in words. The rows' amounts add up to the focus's change."""
    rows = []
    for found in whatif_domain.sources(by_slug, _amounts(capacity), focus):
        gives = []
        hidden = Decimal(0)
        for slug, amount in sorted(found.teams.items()):
            if named(slug):
                gives.append({"slug": slug, "amount": amount})
            else:
                hidden += amount
        if hidden:
            gives.append({"slug": None, "amount": hidden})
        for slug, amount in found.chain_own.items():
            gives.append({"slug": slug, "own": True, "named": named(slug), "amount": amount})
        if found.spare:
            gives.append({"slug": None, "spare": True, "amount": found.spare})
        for give in gives:
            # Shown in the change's direction: what goes to the focus when it gains, what it
            # hands back when it loses; a row against it keeps its sign.
            give["shown"] = give["amount"] if found.gain > 0 else -give["amount"]
        rows.append(
            {
                "resource": found.resource,
                "gain": found.gain,
                "gained": found.gain > 0,
                "gives": gives,
                "departments": [
                    {
                        "slug": move.slug,
                        "named": named(move.slug),
                        "before": move.before,
                        "after": move.after,
                        "delta": move.delta,
                        "focus": move.focus,
                        "other_teams": move.other_teams,
                        "own": move.own,
                    }
                    for move in found.departments
                ],
            }
        )
    return rows


def _untouched_reasons(data: dict, focused: dict, focus: str) -> list[str]:
    """Why a resource the change did not touch still moves for the focus (issue 29): DRF gives
    a team the same fraction of everything it wants, so its other resources move with the one
    that binds. One sentence per column (today; every team wanting its limit) where it happens."""
    change = (data.get("changes") or {}).get(focus) or {}
    touched = set(change.get("guarantee") or {}) | set(change.get("limit") or {})
    if not touched and "weight" not in change:
        return []
    team = next((t for t in data.get("teams", []) if t.get("team") == focus), {})
    demand = team.get("after", {}).get("demand") or {}
    reasons = []
    today = [r for r in focused["rows"] if r["moved"] and r["resource"] not in touched]
    if today:
        wanted = ", ".join(
            f"{approx_quantity(a, r)} {resource_label(r)}" for r, a in sorted(demand.items())
        )
        names = ", ".join(resource_label(r["resource"]) for r in today)
        reasons.append(
            f"Today, {names} move{'s' if len(today) == 1 else ''} although the change does not "
            f"set {'it' if len(today) == 1 else 'them'}: DRF gives a team the same fraction of "
            f"everything it wants ({wanted or 'nothing'}, running and waiting), so the resource "
            "that stops the team stops all of its demand together."
        )
    contended = [
        r
        for r in focused["rows"]
        if r["resource"] not in touched
        and r["contention_before"] is not None
        and decimal_or_zero(r["contention_before"]) != decimal_or_zero(r["contention_after"])
    ]
    if contended:
        names = ", ".join(resource_label(r["resource"]) for r in contended)
        reasons.append(
            f"When every team wants its limit, {names} move{'s' if len(contended) == 1 else ''} "
            "although the change does not set "
            f"{'it' if len(contended) == 1 else 'them'}: each team then wants its limits, and "
            "DRF gives it the same fraction of each, so a new limit on one resource changes how "
            "much of the others that fraction is."
        )
    return reasons


def _flag_shown(flag: dict, named) -> dict:
    """``flag`` as the viewer may see it: a hierarchy flag about a team they may not see by
    name (a department above theirs) loses the names and numbers (``HIDDEN_HIERARCHY``)."""
    if flag.get("kind") == "hierarchy" and flag.get("team") and not named(flag["team"]):
        resource = flag.get("resource") or "a resource"
        return {**flag, "team": None, "message": HIDDEN_HIERARCHY.format(resource=resource)}
    return flag


def _sum_rows(teams: list[dict]) -> dict:
    """The per-resource before/after/change of several teams' preview rows, summed."""
    totals: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    for team in teams:
        for row in team["rows"]:
            total = totals[row["resource"]]
            total[0] += decimal_or_zero(row["before"])
            total[1] += decimal_or_zero(row["after"])
            total[2] += decimal_or_zero(row["delta"])
    return {
        "rows": [
            {
                "resource": resource,
                "before": str(before),
                "after": str(after),
                "delta": str(delta),
                "lost": delta < 0,
                "moved": delta != 0,
            }
            for resource, (before, after, delta) in sorted(totals.items())
        ]
    }


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


PREVIEWS_TOO_OFTEN = (
    "You asked for more previews than the %(rate)s a minute allowed; the next one is computed "
    "in a moment."
)
PREVIEWS_BUSY = "Previews are busy for everyone right now; change an amount again in a moment."
_clock = time.time  # tests replace it


@contextmanager
def preview_allowance(viewer):
    """Yield None if ``viewer`` may compute a preview now, else the message to show instead.

    A preview runs the whole solver, so they are bounded (issue 27): each person may ask for
    ``FAIRSHARE_PREVIEW_RATE_PER_MINUTE`` (30) a minute, and at most
    ``FAIRSHARE_PREVIEW_CONCURRENCY`` (4) run at once over everyone, so a burst of previews
    cannot slow down every other page. Counters are atomic cache increments.
    """
    rate = int(getattr(settings, "FAIRSHARE_PREVIEW_RATE_PER_MINUTE", 30))
    window = f"preview-rate:{getattr(viewer, 'pk', None)}:{int(_clock() // 60)}"
    if _increment(window, 120) > rate:
        yield PREVIEWS_TOO_OFTEN % {"rate": rate}
        return
    running = "preview-running"
    if _increment(running, 60) > int(getattr(settings, "FAIRSHARE_PREVIEW_CONCURRENCY", 4)):
        _decrement(running)
        yield PREVIEWS_BUSY
        return
    try:
        yield None
    finally:
        _decrement(running)


def _increment(key: str, ttl: int) -> int:
    if cache.add(key, 1, ttl):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired in between
        cache.add(key, 1, ttl)
        return 1


def _decrement(key: str) -> None:
    with suppress(ValueError):
        cache.decr(key)


def fresh_whatif(changes: dict, *, viewer, focus: str | None = None) -> dict:
    """Run ``what_if``; a problem becomes ``{"error": ...}`` (shown instead of the preview),
    and so does a refusal of ``preview_allowance``."""
    with preview_allowance(viewer) as refused:
        if refused:
            return {"error": refused}
        return _fresh_whatif(changes, viewer=viewer, focus=focus)


def _fresh_whatif(changes: dict, *, viewer, focus: str | None = None) -> dict:
    try:
        return present_whatif(what_if(changes).to_dict(), focus=focus, visible=share_slugs(viewer))
    except ValidationError as e:
        return {"error": " ".join(e.messages)}
    except SchedulingError as e:
        return {"error": str(e)}
    except Exception:
        # A preview is advice next to a form: a bug in the solver must not take the form (or
        # the approval) down with it. It is logged with its traceback, not swallowed.
        logger.exception("what-if preview failed for %s", sorted(changes))
        return {"error": PREVIEW_FAILED}


def request_preview(quota_request: QuotaRequest, adjustments=None, *, viewer=None) -> dict:
    """``what_if_for_request`` as JSON (stored on approval); errors as ``{"error": ...}``.
    With a ``viewer`` (a page showing it) it is bounded by ``preview_allowance``; the preview
    an approval stores is not."""
    if viewer is not None:
        with preview_allowance(viewer) as refused:
            if refused:
                return {"error": refused}
            return request_preview(quota_request, adjustments)
    try:
        return what_if_for_request(quota_request, adjustments).to_dict()
    except ValidationError as e:
        return {"error": " ".join(e.messages)}
    except SchedulingError as e:
        return {"error": str(e)}
    except Exception:  # see fresh_whatif: logged with its traceback
        logger.exception("what-if preview failed for request #%s", quota_request.pk)
        return {"error": PREVIEW_FAILED}


def with_overlaps(whatif: dict | None, quota_request: QuotaRequest) -> dict | None:
    """Add the request's overlaps (``quotas.overlaps``) to a presented preview as ``overlap``
    flags: pending requests it overlaps, and overlapping approvals its "before" includes."""
    if not whatif or whatif.get("error"):
        return whatif
    found = overlaps([quota_request]).get(quota_request.pk, [])
    if found:
        whatif = dict(whatif)
        whatif["flags"] = [
            *whatif.get("flags", []),
            *({"kind": "overlap", "message": o.message} for o in found),
        ]
    return whatif
