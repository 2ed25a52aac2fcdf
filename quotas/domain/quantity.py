"""Canonical rendering of Kubernetes quantities (pure).

Parsing is done at the edges with ``kubernetes.utils.parse_quantity`` (the library the whole project
uses for quantity grammar); the domain receives exact ``Decimal`` amounts in base units
(cores, bytes, devices) and turns them back into the canonical strings Kubernetes users read:

* memory-like amounts (bytes) use the largest binary suffix that divides them exactly: ``64Gi``;
* amounts with a fractional part use milli-units when exact: ``500m``;
* whole amounts are plain integers: ``8``.

``format_quantity(parse_quantity(s)) == s`` for every canonical string, and parsing the result gives
back the same Decimal (round-trip exact) except for sub-milli fractions, which are rounded *up* to
the next milli-unit, as the API server does.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

__all__ = [
    "BINARY_SUFFIXES",
    "DEVICE_CLASS_SUFFIX",
    "device_class_of",
    "format_quantity",
    "is_byte_resource",
]

# A DRA device class's device count, as a ResourceQuota names it: ``<class>`` + this (kubernetes
# pkg/quota/v1/evaluator/core/resource_claims.go — V1ResourceByDeviceClass, with
# corev1.ResourceClaimsPerClass), charged by the ResourceClaim evaluator, never ``requests.``.
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"

BINARY_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)

_BYTE_RESOURCES = {"memory", "ephemeral-storage", "storage"}


def device_class_of(resource: str) -> str | None:
    """The DeviceClass a ``<class>.deviceclass.resource.k8s.io/devices`` name counts, else None."""
    if resource.endswith(DEVICE_CLASS_SUFFIX) and len(resource) > len(DEVICE_CLASS_SUFFIX):
        return resource[: -len(DEVICE_CLASS_SUFFIX)]
    return None


def is_byte_resource(resource: str) -> bool:
    """Return True if ``resource`` is measured in bytes (memory, storage, hugepages)."""
    base = resource.split(".", 1)[1] if resource.startswith(("requests.", "limits.")) else resource
    return base in _BYTE_RESOURCES or base.startswith("hugepages-")


def format_quantity(value: Decimal | int | str, resource: str = "") -> str:
    """Render ``value`` (base units) canonically; ``resource`` picks binary suffixes for bytes.

    Raises ValueError for negative or non-finite amounts.
    """
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"quantity must be a finite, non-negative number, got {value!r}")
    if amount != amount.to_integral_value():
        millis = (amount * 1000).to_integral_value(rounding=ROUND_CEILING)
        if millis % 1000 == 0:
            return str(int(millis // 1000))
        return f"{int(millis)}m"
    whole = int(amount)
    if is_byte_resource(resource) and whole:
        for suffix, size in BINARY_SUFFIXES:
            if whole % size == 0:
                return f"{whole // size}{suffix}"
    return str(whole)
