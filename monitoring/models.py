"""Cluster capacity and usage records (filled by the collectors)."""

from __future__ import annotations

from decimal import Decimal

from django.db import models


class CapacitySnapshot(models.Model):
    """Schedulable capacity of the cluster at one time (Ready, schedulable nodes' allocatable).

    ``resources`` maps resource name → amount in base units as a decimal string (exact);
    ``flavors`` maps GPU product → {resource: amount}.
    """

    taken_at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=64, default="collector")
    resources = models.JSONField(default=dict)
    flavors = models.JSONField(default=dict, blank=True)
    nodes = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-taken_at", "-id"]
        get_latest_by = "taken_at"

    def __str__(self) -> str:
        return f"Capacity at {self.taken_at:%Y-%m-%d %H:%M} ({self.source})"

    def amounts(self) -> dict[str, Decimal]:
        return {name: Decimal(str(value)) for name, value in self.resources.items()}

    @classmethod
    def latest_amounts(cls) -> dict[str, Decimal]:
        """Return the latest capacity per resource, or {} when nothing was collected yet."""
        snapshot = cls.objects.order_by("-taken_at", "-id").first()
        return snapshot.amounts() if snapshot else {}
