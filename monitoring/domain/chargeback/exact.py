"""Exact arithmetic for the report: time weights, exact sums and the one rounding at the end.

Every sum is a Decimal in ``EXACT``, a context that traps instead of rounding, kept per
denominator of the reduced time weight (``Parts``): ``{denominator: numerator}`` means
Σ numerator / denominator. A whole bucket (weight 1) lands on denominator 1, so in the usual case
a value is one exact Decimal and needs no rational arithmetic at all; a value with several
denominators becomes one ``fractions.Fraction`` only when it is rounded.

Invariant: nothing is rounded before ``round_exact`` / ``round_parts``, which round once, half to
even, to cost 0.01 (``CENT``), hours 0.0001 (``HOUR_PLACES``) or percentages 0.01
(``PCT_PLACES``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation, Overflow
from fractions import Fraction
from math import gcd

CENT = Decimal("0.01")
HOUR_PLACES = Decimal("0.0001")
PCT_PLACES = Decimal("0.01")

# Every sum is kept as Decimal in this context: additions and multiplications are exact (Inexact
# traps rather than rounds), and much cheaper than Fraction arithmetic.
EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation, Overflow])
# Rounding an exact Decimal once, half to even (quantize rounds the exact operand).
ROUNDING = Context(prec=1000, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, Overflow])
ZERO = Decimal(0)

_MICROSECOND = timedelta(microseconds=1)

# An exact value as ``{denominator: numerator}`` meaning Σ numerator / denominator. A time weight
# ``overlap / bucket`` is reduced by their gcd; a whole bucket (weight 1) lands on denominator 1,
# so in the usual case a value is one exact Decimal and needs no rational arithmetic at all.
Parts = dict[int, Decimal]


def weight(a: datetime, b: datetime, s: datetime, e: datetime) -> tuple[int, int]:
    """Return the share ``(b - a) / (e - s)`` of a bucket as a reduced (numerator, denominator)."""
    if a == s and b == e:
        return 1, 1
    part, whole = _micros(b - a), _micros(e - s)
    divisor = gcd(part, whole)
    return part // divisor, whole // divisor


def add(parts: Parts, den: int, value: Decimal) -> None:
    """Add ``value / den`` to ``parts`` (in the caller's Decimal context)."""
    parts[den] = parts[den] + value if den in parts else value


def merge(into: Parts, parts: Parts) -> None:
    """Add every term of ``parts`` to ``into``."""
    for den, value in parts.items():
        add(into, den, value)


def exact(parts: Parts) -> Fraction:
    """The exact value Σ numerator / denominator as a Fraction."""
    return sum((Fraction(value) / den for den, value in parts.items()), Fraction(0))


def round_exact(value: Fraction, places: Decimal) -> Decimal:
    """Round an exact value to ``places`` (a power of ten) with ROUND_HALF_EVEN."""
    exponent = places.as_tuple().exponent
    assert isinstance(exponent, int)
    # round() on a Fraction rounds half to even: exactly decimal.ROUND_HALF_EVEN, with no
    # intermediate Decimal context that could round first.
    return Decimal(round(value * Fraction(10) ** -exponent)).scaleb(exponent)


def round_parts(parts: Parts, places: Decimal) -> Decimal:
    """Round an exact ``{denominator: numerator}`` value like ``round_exact``.

    With the single denominator 1 the value is one exact Decimal, rounded by ``quantize``;
    otherwise it goes through ``Fraction`` (``exact``).
    """
    if not parts:
        return ZERO.quantize(places)
    if len(parts) == 1 and 1 in parts:
        return parts[1].quantize(places, context=ROUNDING)
    return round_exact(exact(parts), places)


def round_hours(value: Fraction) -> Decimal:
    """Round an exact number of hours to ``HOUR_PLACES``."""
    return round_exact(value, HOUR_PLACES)


def _micros(delta: timedelta) -> int:
    return delta // _MICROSECOND
