"""Formatting filters for Fairshare templates: quantities, GPU-hours, percentages, timestamps.

They only format values; they never query the database (``site_admin`` reads the answer cached
on the user by ``is_site_admin``, one query per request at most).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from django import template
from django.utils import timezone
from django.utils.html import format_html

from quotas.domain.quantity import BINARY_SUFFIXES, is_byte_resource
from quotas.quantities import GPU, format_quantity, is_integral_resource
from quotas.querysets import is_site_admin

register = template.Library()

_LABELS = {
    "nvidia.com/gpu": "GPUs",
    "cpu": "CPU cores",
    "memory": "Memory",
    "ephemeral-storage": "Ephemeral storage",
}


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


@register.filter
def quantity(value, resource: str = "") -> str:
    """Render an amount in base units canonically (``500m``, ``64Gi``, ``8``).

    ``None``/empty renders as "—"; text that is not a number is shown as it is.
    """
    amount = _decimal(value)
    if amount is None:
        return "—" if value in (None, "") else str(value)
    try:
        text = format_quantity(amount, resource or "")
    except ValueError:
        return str(value)
    # Canonical forms that read badly (14158336Mi, 22521600m) are shown rounded for people;
    # forms and the API keep the exact canonical value.
    if (
        is_byte_resource(resource or "")
        and amount >= 2**30
        and not text.endswith(("Gi", "Ti", "Pi", "Ei"))
    ):
        return approx_quantity(amount, resource)
    if text.endswith("m") and amount >= 10:
        return f"{amount.quantize(Decimal('0.1'), rounding=ROUND_FLOOR):f}".removesuffix(".0")
    if text.endswith("m") and (resource or "") == GPU:
        # GPU-equivalents (a MIG slice or a shared GPU held through DRA: issue 34) read as a
        # fraction of a GPU, "0.125", not as milli-GPUs.
        return f"{Decimal(text[:-1]).scaleb(-3).normalize():f}"
    return text


@register.filter
def approx_quantity(value, resource: str = "") -> str:
    """A readable amount for totals: bytes in binary units with one decimal (``3.6Ti``),
    fractional devices rounded down (usable GPUs), everything else as ``quantity``."""
    amount = _decimal(value)
    if amount is None or not is_byte_resource(resource or ""):
        if amount is not None and is_integral_resource(resource or ""):
            amount = amount.to_integral_value(rounding=ROUND_FLOOR)
        return quantity(amount if amount is not None else value, resource)
    for suffix, size in BINARY_SUFFIXES:
        if amount >= size:
            scaled = (amount / size).quantize(Decimal("0.1"), rounding=ROUND_FLOOR)
            text = f"{scaled:f}".removesuffix(".0")
            return f"{text}{suffix}"
    return f"{amount.to_integral_value(rounding=ROUND_FLOOR)}"


@register.filter
def limit_quantity(value, resource: str = "") -> str:
    """Like ``quantity`` but an absent limit means "no ceiling" (∞)."""
    return "∞" if value in (None, "") else quantity(value, resource)


@register.filter
def signed_quantity(value, resource: str = "") -> str:
    """A change of an amount: ``+4``, ``−512Mi``, ``±0``."""
    amount = _decimal(value)
    if amount is None:
        return "—"
    if amount == 0:
        return "±0"
    sign = "+" if amount > 0 else "−"
    return f"{sign}{quantity(abs(amount), resource)}"


@register.filter
def whole(value, resource: str = "") -> str:
    """An amount for people: whole devices for GPUs and other extended resources (rounded
    down: no "906.977 GPUs"), readable bytes, else as ``quantity``."""
    return approx_quantity(value, resource)


@register.filter
def signed_whole(value, resource: str = "") -> str:
    """A change as ``whole`` shows amounts: ``+4``, ``−12``, ``±0`` (devices rounded toward
    zero)."""
    amount = _decimal(value)
    if amount is None:
        return "—"
    if is_integral_resource(resource or ""):
        amount = amount.to_integral_value(rounding="ROUND_DOWN")
    if amount == 0:
        return "±0"
    sign = "+" if amount > 0 else "−"
    return f"{sign}{whole(abs(amount), resource)}"


@register.filter
def resource_label(resource: str) -> str:
    """A human name for a Kubernetes resource (``nvidia.com/gpu`` → GPUs); others unchanged."""
    return _LABELS.get(resource, resource)


@register.filter
def gpu_hours(value, unit: str = "GPU-h") -> str:
    """Resource-hours with one decimal and thousands separators: ``1,234.5 GPU-h``."""
    amount = _decimal(value)
    if amount is None:
        return "—"
    return f"{amount:,.1f} {unit}".strip()


@register.filter
def percent(value, digits: int = 1) -> str:
    """A fraction (0.123) as a percentage (``12.3 %``); ``None`` renders as "—"."""
    amount = _decimal(value)
    if amount is None:
        return "—"
    return f"{amount * 100:.{int(digits)}f} %"


@register.filter
def timetag(value: datetime | None, fmt: str = "") -> str:
    """``<time datetime=ISO>`` with a UTC fallback text; fairshare.js shows it in local time."""
    if not value:
        return "—"
    value = value.astimezone(UTC) if timezone.is_aware(value) else value
    text = value.strftime("%Y-%m-%d %H:%M UTC")
    return format_html(
        '<time datetime="{}" data-format="{}">{}</time>', value.isoformat(), fmt or "datetime", text
    )


def _day(moment: datetime, *, year: bool) -> str:
    moment = moment.astimezone(UTC) if timezone.is_aware(moment) else moment
    return f"{moment:%b} {moment.day}" + (f", {moment.year}" if year else "")


@register.filter
def window(request) -> str:
    """A request's window shown whole: ``Dec 2 – Dec 16`` (UTC days; the year when it is not
    this year's, or the window spans two), ``permanent`` without one."""
    start, end = getattr(request, "window_start", None), getattr(request, "window_end", None)
    if end is None:
        return "permanent"
    start = start or getattr(request, "created", None) or timezone.now()
    this_year = timezone.now().astimezone(UTC).year
    years = {start.astimezone(UTC).year, end.astimezone(UTC).year}
    show_year = years != {this_year}
    if len(years) == 1 and show_year:
        return f"{_day(start, year=False)} – {_day(end, year=True)}"
    return f"{_day(start, year=show_year)} – {_day(end, year=show_year)}"


@register.filter
def audit_words(event) -> str:
    """An AuditEvent in plain words (``quotas.audit_words.describe``); select_related("team")
    keeps it query-free."""
    from quotas.audit_words import describe

    return describe(event)


@register.simple_tag
def site_admin(user) -> bool:
    """Whether ``user`` is a site admin (for navigation only; views check access themselves)."""
    return is_site_admin(user)
