"""Fairness over time, the I/O side: the setting, and decayed past use folded from the hourly
rollups (the formula is ``scheduling.domain.pastuse``; docs/drf.md "Past use").

Cost does not grow with history: ``fold`` adds only the hours since the last fold to one
``PastUsageState`` row per half-life (one grouped query over those hours' rollups), and the share
computation reads that row. The first fold for a half-life (a new install, or an admin choosing
another half-life) reads the whole hourly history once, decayed by the database itself.

Hours *settle* before they are folded: ``rollup_usage`` recomputes the last two hours every run
(late samples), so only hours that ended ``SETTLE`` ago or earlier count.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Min
from django.utils import timezone

from config.env import parse_duration
from monitoring.choices import RollupPeriod
from monitoring.models import CapacitySnapshot, UsageRollup
from monitoring.units import floor_hour
from quotas.changes import audit
from quotas.choices import AuditVerb
from quotas.querysets import is_site_admin
from quotas.signals import quota_changed
from scheduling.domain import pastuse
from scheduling.models import FairnessSetting, PastUsageState

__all__ = [
    "SETTLE",
    "Fairness",
    "PastInputs",
    "current_fairness",
    "describe_half_life",
    "fold",
    "load_past",
    "set_fairness",
]

SETTLE = timedelta(hours=3)
_HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Fairness:
    """The fairness-over-time setting in force, and where each part came from."""

    half_life_seconds: int  # 0: off
    strength: Decimal
    half_life_source: str  # "environment" | "admin"
    strength_source: str

    @property
    def enabled(self) -> bool:
        return self.half_life_seconds > 0 and self.strength > 0


def describe_half_life(seconds: int) -> str:
    """``604800`` → ``7d``; ``5400`` → ``1h30m``; 0 → ``off``."""
    if seconds <= 0:
        return "off"
    parts = []
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if unit == "w" and seconds % size:
            continue
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def current_fairness() -> Fairness:
    """The admin's override where set, else the environment (one query)."""
    row = FairnessSetting.objects.filter(pk=1).first()
    half_life, half_source = int(settings.FAIRSHARE_USAGE_HALF_LIFE), "environment"
    strength, strength_source = Decimal(settings.FAIRSHARE_USAGE_STRENGTH), "environment"
    if row is not None and row.half_life_seconds is not None:
        half_life, half_source = row.half_life_seconds, "admin"
    if row is not None and row.strength is not None:
        strength, strength_source = row.strength, "admin"
    return Fairness(half_life, strength, half_source, strength_source)


def set_fairness(*, actor, half_life: str | None, strength: str | Decimal | None) -> Fairness:
    """Set (or, with None, clear back to the environment) the admin's override; audited.

    ``half_life`` is a duration (``7d``; ``0`` turns it off). Raises ValidationError keyed by
    field for a malformed duration or a strength outside 0..0.9. Site admins only (the caller's
    view checks; this checks too)."""
    if not is_site_admin(actor):
        raise ValidationError({"half_life": "Only site admins may change fairness over time."})
    errors = {}
    seconds = None
    if half_life is not None and str(half_life).strip() != "":
        try:
            seconds = parse_duration(str(half_life))
        except ValueError as e:
            errors["half_life"] = str(e)
        else:
            if 0 < seconds < 3600:
                errors["half_life"] = "A half-life must be at least 1h (the rollups are hourly)."
    value = None
    if strength is not None and str(strength).strip() != "":
        try:
            value = Decimal(str(strength).strip())
        except ArithmeticError:
            errors["strength"] = f"{strength!r} is not a number."
        else:
            if not value.is_finite() or not 0 <= value <= Decimal(str(pastuse.MAX_STRENGTH)):
                errors["strength"] = f"Strength must be from 0 to {pastuse.MAX_STRENGTH}."
            elif value != value.quantize(Decimal("0.01")):
                errors["strength"] = "Give the strength with at most two decimals."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        before = current_fairness()
        row, _ = FairnessSetting.objects.update_or_create(
            pk=1,
            defaults={"half_life_seconds": seconds, "strength": value, "updated_by": actor},
        )
        after = current_fairness()
        audit(
            actor=actor,
            verb=AuditVerb.UPDATE,
            obj=row,
            team=None,
            before={
                "half_life": describe_half_life(before.half_life_seconds),
                "strength": str(before.strength),
            },
            after={
                "half_life": describe_half_life(after.half_life_seconds),
                "strength": str(after.strength),
            },
            note="Fairness over time: half-life and strength of past use in the fair shares.",
        )
        # Every team's fair allocation may move: recompute, then sync every Queue.
        transaction.on_commit(
            lambda: quota_changed.send(
                sender=FairnessSetting, team_ids=None, reason="fairness-setting"
            )
        )
    return after


# --------------------------------------------------------------------------- folding


def _weighted_sums(start: datetime, end: datetime, half_life: int) -> dict[str, dict[str, float]]:
    """Σ decay(end − hour end)·allocated_hours per team id and resource over the hourly rollups
    starting in [start, end), decayed by the database (one query)."""
    table = UsageRollup._meta.db_table
    if connection.vendor == "postgresql":
        age = "EXTRACT(EPOCH FROM (%s::timestamptz - start)) - 3600"
        amount = "allocated_hours::float8"
        params = [end]
    else:
        age = "(julianday(%s) - julianday(start)) * 86400.0 - 3600"
        amount = "CAST(allocated_hours AS REAL)"
        params = [end.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")]
    sql = (
        f"SELECT team_id, resource, SUM({amount} * POWER(0.5, ({age}) / %s)) FROM {table} "
        "WHERE period = %s AND start >= %s AND start < %s AND team_id IS NOT NULL "
        "AND allocated_hours > 0 GROUP BY team_id, resource"
    )
    params += [float(half_life), RollupPeriod.HOUR, start, end]
    sums: dict[str, dict[str, float]] = defaultdict(dict)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for team_id, resource, value in cursor.fetchall():
            if value:
                sums[str(team_id)][resource] = float(value)
    return dict(sums)


def _capacity_sums(
    start: datetime, end: datetime, half_life: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(Σ decay(end − hour end)·capacity of each hour in [start, end), the first hour's
    capacity). An hour's capacity is the latest snapshot taken before it ended (none yet:
    nothing)."""
    snapshots = list(
        CapacitySnapshot.objects.filter(taken_at__lt=end, taken_at__gte=start)
        .order_by("taken_at", "id")
        .values_list("taken_at", "resources")
    )
    before = (
        CapacitySnapshot.objects.filter(taken_at__lt=start)
        .order_by("-taken_at", "-id")
        .values_list("resources", flat=True)
        .first()
    )
    current = before or {}
    sums: dict[str, float] = defaultdict(float)
    first_capacity: dict[str, float] | None = None
    index, hour = 0, start
    while hour < end:
        hour_end = hour + _HOUR
        while index < len(snapshots) and snapshots[index][0] < hour_end:
            current = snapshots[index][1]
            index += 1
        amounts = {r: float(Decimal(str(a))) for r, a in current.items()}
        if first_capacity is None:
            first_capacity = amounts
        weight = pastuse.decay((end - hour_end).total_seconds(), half_life)
        for resource, amount in amounts.items():
            sums[resource] += amount * weight
        hour = hour_end
    return dict(sums), first_capacity or {}


def fold(*, now: datetime | None = None, half_life: int | None = None) -> PastUsageState | None:
    """Bring the past-use state of ``half_life`` (default: the one in force) up to the last
    settled hour; return it (None when off or when nothing was ever rolled up)."""
    now = now or timezone.now()
    if half_life is None:
        fairness = current_fairness()
        if not fairness.enabled:
            return None
        half_life = fairness.half_life_seconds
    through = floor_hour(now) - SETTLE
    with transaction.atomic():
        state = PastUsageState.objects.select_for_update().filter(half_life_seconds=half_life)
        state = state.first()
        if state is None:
            starts = [
                UsageRollup.objects.filter(period=RollupPeriod.HOUR).aggregate(t=Min("start"))["t"],
                CapacitySnapshot.objects.aggregate(t=Min("taken_at"))["t"],
            ]
            starts = [floor_hour(t) for t in starts if t is not None]
            if not starts or min(starts) >= through:
                return None
            start = min(starts)
            capacity, _ = _capacity_sums(start, through, half_life)
            # Two computations folding a new half-life at once: the second finds the row.
            return PastUsageState.objects.get_or_create(
                half_life_seconds=half_life,
                defaults=dict(
                    first=start,
                    through=through,
                    usage=_weighted_sums(start, through, half_life),
                    capacity=dict(sorted(capacity.items())),
                    folded_hours=int((through - start) / _HOUR),
                ),
            )[0]
        if state.through >= through:
            return state
        factor = pastuse.decay((through - state.through).total_seconds(), half_life)
        new_usage = _weighted_sums(state.through, through, half_life)
        new_capacity, _ = _capacity_sums(state.through, through, half_life)
        state.usage = pastuse.combine(state.usage, factor, new_usage)
        state.capacity = pastuse.combine({"": state.capacity}, factor, {"": new_capacity}).get(
            "", {}
        )
        state.folded_hours += int((through - state.through) / _HOUR)
        state.through = through
        state.save()
        return state


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class PastInputs:
    """What the share computation needs: per team id the decayed resource-hours, the decayed
    capacity-hours, and the setting."""

    half_life_seconds: int
    strength: float
    through: datetime | None  # None: nothing folded yet
    usage: dict[int, dict[str, float]]
    capacity: dict[str, float]


def load_past() -> PastInputs | None:
    """Read the past use for the setting in force as last folded (two queries; writes
    nothing: ``compute_shares`` folds first); None when it is off."""
    fairness = current_fairness()
    if not fairness.enabled:
        return None
    state = PastUsageState.objects.filter(half_life_seconds=fairness.half_life_seconds).first()
    if state is None:
        return PastInputs(fairness.half_life_seconds, float(fairness.strength), None, {}, {})
    return PastInputs(
        half_life_seconds=fairness.half_life_seconds,
        strength=float(fairness.strength),
        through=state.through,
        usage={int(team): dict(values) for team, values in state.usage.items()},
        capacity=dict(state.capacity),
    )
