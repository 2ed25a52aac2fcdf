"""Kubernetes quantities and resource names at the Django edge.

Parsing uses ``kubernetes.utils.parse_quantity`` (the Kubernetes grammar, exact Decimal results);
rendering uses the pure ``quotas.domain.quantity.format_quantity``.
"""

from __future__ import annotations

import re
from decimal import Decimal

from django.core.exceptions import ValidationError
from kubernetes.utils import parse_quantity as _k8s_parse_quantity

from quotas.domain.quantity import format_quantity

__all__ = [
    "GPU",
    "amount_words",
    "format_quantity",
    "is_integral_resource",
    "parse_quantity",
    "validate_resource_name",
]

GPU = "nvidia.com/gpu"
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_EXTENDED_RE = re.compile(
    r"^(?=.{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_HUGEPAGES_RE = re.compile(r"^hugepages-[0-9]+(Ki|Mi|Gi)?$")
# Quantities beyond this are certainly typos (10^18 cores or devices); they also keep numbers
# inside the database column.
MAX_QUANTITY = Decimal(10) ** 21
# The Kubernetes quantity grammar, ASCII digits only: Decimal() alone would also read "٣٠",
# "３０" and "1_000", which no API server accepts.
_QUANTITY_RE = re.compile(
    r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$"
)


def parse_quantity(value: object, *, field: str = "quantity") -> Decimal:
    """Parse a Kubernetes quantity (``500m``, ``64Gi``, ``8``) into an exact Decimal.

    Raises ValidationError naming ``field`` for malformed, negative, non-finite or absurdly large
    values.
    """
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, bool) or value is None:
        raise ValidationError({field: f"{value!r} is not a Kubernetes quantity."})
    elif isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(str(value))
    else:
        text = str(value).strip()
        if not text or len(text) > 64 or not _QUANTITY_RE.fullmatch(text):
            raise ValidationError(
                {field: f"{text!r} is not a Kubernetes quantity such as 500m, 64Gi or 8."}
            )
        try:
            result = _k8s_parse_quantity(text)
        except (ValueError, ArithmeticError, TypeError):  # ArithmeticError: 1e999999999Ki
            raise ValidationError(
                {field: f"{text!r} is not a Kubernetes quantity such as 500m, 64Gi or 8."}
            ) from None
    if not result.is_finite():
        raise ValidationError({field: "Quantities must be finite numbers."})
    if result < 0:
        raise ValidationError({field: "Quantities cannot be negative."})
    if result > MAX_QUANTITY:
        raise ValidationError({field: f"Quantities must be at most {MAX_QUANTITY:.0e}."})
    return result


def validate_resource_name(name: str) -> None:
    """Accept Kubernetes resource names: cpu, memory, ephemeral-storage, hugepages-*, and
    domain-prefixed extended resources such as ``nvidia.com/gpu``."""
    if name in STANDARD_RESOURCES or _HUGEPAGES_RE.match(name):
        return
    if _EXTENDED_RE.match(name) and not name.split("/", 1)[0].endswith("kubernetes.io"):
        return
    raise ValidationError(
        f"{name!r} is not a Kubernetes resource name: use cpu, memory, ephemeral-storage, "
        "hugepages-<size> or a domain-prefixed extended resource such as nvidia.com/gpu.",
        code="invalid_resource",
    )


def is_integral_resource(name: str) -> bool:
    """Extended resources (GPUs, MIG slices, RDMA devices) are whole devices in Kubernetes."""
    return "/" in name


_WORDS = {GPU: ("GPU", "GPUs"), "cpu": ("CPU core", "CPU cores")}


def amount_words(amount: Decimal, resource: str) -> str:
    """An amount as people say it: ``208 GPUs``, ``1 GPU``, ``16 CPU cores``, ``64Gi of
    memory``, ``8 example.com/fpga``. Whole devices are rounded down (no "906.977 GPUs")."""
    if is_integral_resource(resource):
        amount = amount.to_integral_value(rounding="ROUND_FLOOR")
    text = format_quantity(amount, resource)
    if resource in _WORDS:
        one, many = _WORDS[resource]
        return f"{text} {one if amount == 1 else many}"
    if resource in STANDARD_RESOURCES:
        return f"{text} of {resource}"
    return f"{text} {resource}"
