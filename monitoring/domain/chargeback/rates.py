"""The rate card: rates indexed by resource and flavor, and a record's time cut into priced pieces.

Cost is charged on *allocation* (requests x time), not on utilization. A clipped bucket
``[a, b)`` is cut at every rate boundary (``valid_from``/``valid_to``) that falls inside it; each
piece is priced by the rate valid on it. A rate for the record's exact flavor wins over the
generic (``flavor=""``) rate of the resource; a piece with neither is unpriced.

Invariant: no two rates for the same resource and flavor are valid at the same instant
(``index_rates`` rejects overlaps), so every piece has at most one price.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from itertools import pairwise

from .model import ChargebackError, Rate, UsageRecord
from .validation import check_aware

RateIndex = dict[tuple[str, str], list[Rate]]


def index_rates(rates: Iterable[Rate]) -> RateIndex:
    """Group rates by (resource, flavor), sorted by ``valid_from``; reject overlaps.

    Two rates for the same resource and flavor that are valid at the same instant would make the
    price ambiguous, so that raises ChargebackError naming both.
    """
    index: RateIndex = defaultdict(list)
    for rate in rates:
        check_aware(rate.valid_from, "rate valid_from")
        if rate.valid_to is not None:
            check_aware(rate.valid_to, "rate valid_to")
            if rate.valid_to <= rate.valid_from:
                raise ChargebackError(f"rate valid_to must be after valid_from: {rate!r}")
        price = rate.price_per_unit_hour
        if not isinstance(price, Decimal) or not price.is_finite() or price < 0:
            raise ChargebackError(f"rate price must be a finite, non-negative Decimal: {rate!r}")
        index[(rate.resource, rate.flavor)].append(rate)
    for group in index.values():
        group.sort(key=lambda r: r.valid_from)
        for before, after in pairwise(group):
            if before.valid_to is None or before.valid_to > after.valid_from:
                raise ChargebackError(f"overlapping rates: {before!r} and {after!r}")
    return dict(index)


def _valid_at(rates: list[Rate], t: datetime) -> Rate | None:
    """The rate of ``rates`` valid at ``t``, if any."""
    for rate in rates:
        if rate.valid_from <= t and (rate.valid_to is None or t < rate.valid_to):
            return rate
    return None


Piece = tuple[datetime, datetime, Rate | None]


def price_pieces(record: UsageRecord, a: datetime, b: datetime, index: RateIndex) -> list[Piece]:
    """Cut ``[a, b)`` at every rate boundary inside it and price each piece.

    Within a piece no rate starts or ends, so the rate valid at the piece's start is valid on all
    of it: the exact-flavor rate if any, else the generic one, else None (unpriced). Adjacent
    pieces with the same rate are merged.
    """
    exact = index.get((record.resource, record.flavor), []) if record.flavor else []
    generic = index.get((record.resource, ""), [])
    cuts = {a, b}
    for rate in (*exact, *generic):
        for t in (rate.valid_from, rate.valid_to):
            if t is not None and a < t < b:
                cuts.add(t)
    points = sorted(cuts)
    pieces: list[Piece] = []
    for p, q in pairwise(points):
        rate = _valid_at(exact, p) or _valid_at(generic, p)
        if pieces and pieces[-1][2] is rate:
            pieces[-1] = (pieces[-1][0], q, rate)
        else:
            pieces.append((p, q, rate))
    return pieces
