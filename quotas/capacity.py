"""Cluster capacity as the quota rules see it: the one narrow door between tenancy and whoever
measures the cluster.

``quotas`` builds on nothing above it, yet its capacity rule (Σ guarantees ≤ usable capacity)
needs the cluster's size. ``FAIRSHARE_CAPACITY_PROVIDER`` names (dotted path) a callable
taking no arguments and returning ``{resource: Decimal amount}`` of the latest schedulable
capacity, ``{}`` when nothing has been measured yet; the default is the monitoring app's
``monitoring.models.latest_capacity`` (the newest ``CapacitySnapshot``).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.utils.module_loading import import_string


def latest_capacity() -> dict[str, Decimal]:
    """The latest measured capacity per resource, from the configured provider."""
    provider = import_string(settings.FAIRSHARE_CAPACITY_PROVIDER)
    return {resource: Decimal(amount) for resource, amount in provider().items()}
