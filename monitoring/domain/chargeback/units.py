"""Billing units: which resources are GPUs, which are bytes, and the unit each is billed in.

Hours are *resource-hours in billing units*: GPU-hours for GPUs (and MIG slices, per slice),
core-hours for ``cpu``, **GiB-hours** for byte resources (``memory``, ``ephemeral-storage``,
``hugepages-*``; records carry byte-hours, divided by 2**30 with ``scale``) and device-hours for
any other extended resource. Rates and budget limits are in the same units. One currency is
assumed.

Invariant: ``scale`` is exact in Decimal (1/2**30 = 5**30/10**30 is a finite decimal), so the GiB
conversion never rounds.
"""

from __future__ import annotations

from decimal import Decimal

BYTES_PER_GIB = 2**30

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
# 1/2**30 = 5**30/10**30 is a finite decimal, so the GiB conversion stays exact in Decimal.
_PER_GIB = Decimal(5**30).scaleb(-30)
_ONE = Decimal(1)


def is_byte_resource(resource: str) -> bool:
    """Return True if ``resource`` is measured in bytes (billed per GiB-hour)."""
    return resource in _BYTE_RESOURCES or resource.startswith("hugepages-")


def is_gpu_resource(resource: str) -> bool:
    """Return True for GPU devices and MIG slices (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`)."""
    return resource.endswith("/gpu") or "/mig-" in resource


def unit_of(resource: str) -> str:
    """Return the billing unit of ``resource``: GPU-hour, core-hour, GiB-hour or device-hour."""
    if resource == "cpu":
        return "core-hour"
    if is_byte_resource(resource):
        return "GiB-hour"
    if is_gpu_resource(resource):
        return "GPU-hour"
    return "device-hour"


def scale(resource: str) -> Decimal:
    """The factor from record units to billing units: 1/2**30 for byte resources, else 1."""
    return _PER_GIB if is_byte_resource(resource) else _ONE
