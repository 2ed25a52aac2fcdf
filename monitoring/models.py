"""Cluster capacity and usage records (filled by the collectors)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Coalesce

from quotas.models import moment_errors
from quotas.querysets import TeamScopedQuerySet


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
    # With the Kueue backend: what Kueue reported per managed ClusterQueue at this collection
    # (monitoring.domain.kueue_status): in use, borrowed, weighted share, workloads.
    kueue_queues = models.JSONField(default=dict, blank=True)

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


def _amount_field(**kwargs):
    kwargs.setdefault("default", Decimal(0))
    return models.DecimalField(max_digits=30, decimal_places=6, **kwargs)


class UsageSample(models.Model):
    """Allocated and pending requests of one namespace and resource at one collection.

    ``team`` is null for namespaces Fairshare does not know (reported as ``unassigned``).
    ``flavor`` is the GPU product for amounts on GPU nodes ("" otherwise or for pending).
    """

    taken_at = models.DateTimeField(db_index=True)
    team = models.ForeignKey(
        "quotas.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="usage"
    )
    namespace = models.CharField(max_length=63)
    resource = models.CharField(max_length=253)
    flavor = models.CharField(max_length=128, blank=True)
    allocated = _amount_field()
    pending = _amount_field()

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-taken_at", "namespace", "resource"]
        indexes = [
            models.Index(fields=["team", "resource", "-taken_at"]),
            models.Index(fields=["namespace", "-taken_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.namespace} {self.resource} at {self.taken_at:%H:%M}: {self.allocated}"


class GpuSample(models.Model):
    """One NVML reading of one GPU (posted by the node agent); attributed to a pod when known."""

    taken_at = models.DateTimeField(db_index=True)
    received_at = models.DateTimeField(auto_now_add=True)
    node = models.CharField(max_length=253)
    uuid = models.CharField(max_length=64)
    index = models.PositiveSmallIntegerField(default=0)
    model = models.CharField(max_length=128, blank=True)
    util_gpu = models.FloatField(null=True, blank=True)
    util_mem = models.FloatField(null=True, blank=True)
    mem_used = models.BigIntegerField(null=True, blank=True)
    mem_total = models.BigIntegerField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    temp_c = models.FloatField(null=True, blank=True)
    namespace = models.CharField(max_length=63, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    team = models.ForeignKey(
        "quotas.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="gpu_samples"
    )

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-taken_at", "node", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["uuid", "taken_at"],
                name="%(app_label)s_%(class)s_unique_uuid_time",
                violation_error_message="This GPU already has a sample at this time.",
            ),
        ]
        indexes = [models.Index(fields=["team", "-taken_at"]), models.Index(fields=["node"])]

    def __str__(self) -> str:
        return f"{self.node}/{self.index} at {self.taken_at:%H:%M}: {self.util_gpu}%"


class GpuInventoryNode(models.Model):
    """A node with GPUs as the latest collection saw it, with the pods holding GPUs there; node
    agents' samples are checked against it. Every collection replaces all rows (``store_usage``).

    ``pods`` lists ``[namespace, name, uid]`` of the bound pods that request GPUs: one row per
    node keeps a collection's write small and is exactly what ingest reads (one node's pods).
    """

    name = models.CharField(max_length=253, unique=True)
    gpus = models.PositiveIntegerField(help_text="Physical GPUs the cluster counts on the node.")
    product = models.CharField(max_length=128, blank=True, help_text="nvidia.com/gpu.product")
    pods = models.JSONField(default=list, blank=True)
    collected_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.gpus} × {self.product or 'GPU'}"


class GpuDevice(models.Model):
    """A GPU UUID and the node that reports it. Kubernetes does not publish GPU UUIDs, so a
    UUID belongs to the node whose agent reported it (within the sample window): no other node
    may report it meanwhile. Written by ingest (``last_seen_at`` = when a sample of it arrived)."""

    uuid = models.CharField(max_length=64, unique=True)
    node = models.CharField(max_length=253, db_index=True)
    index = models.PositiveSmallIntegerField(default=0)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["node", "index"]

    def __str__(self) -> str:
        return f"{self.uuid} on {self.node}"


class GpuSampleRejection(models.Model):
    """GPU samples a node agent sent that ingest refused: counted per node, hour and reason,
    with the latest message as an example (bounded, whatever an agent sends)."""

    node = models.CharField(max_length=253)
    hour = models.DateTimeField(help_text="Start of the UTC hour the samples arrived in.")
    reason = models.CharField(max_length=32)
    count = models.PositiveIntegerField(default=0)
    example = models.CharField(max_length=300, blank=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["-hour", "node", "reason"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "hour", "reason"],
                name="%(app_label)s_%(class)s_unique_node_hour_reason",
                violation_error_message="This node already has a count for this hour and reason.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.count} {self.reason} from {self.node} at {self.hour:%Y-%m-%d %H:00}"


class UsageRollup(models.Model):
    """Hourly, daily or monthly totals per namespace, resource and flavor (re-computable,
    idempotent).

    allocated_hours = Σ allocated amount × time (base units × hours); used_hours =
    utilization-weighted GPU-hours; guarantee_hours = team guarantee × time.

    Monthly rows (calendar months, UTC) are sums of the month's *daily* rows, one per namespace,
    resource, flavor **and team** (a namespace that changed teams inside the month gets one row
    per team, so a month row never attributes a day to another team than its daily row does).
    They also carry ``busy_hours`` = Σ over the days of min(allocated, used), the per-day floor
    the chargeback report needs, which cannot be recovered from the sums (null on hourly and
    daily rows).

    ``covered_hours``: how much of the guarantee the team's allocation covered. Per team,
    resource and hour, min(guarantee, the team's allocated hours over all its namespaces and
    flavors), on the row that carries the guarantee (0 on the others); daily and monthly rows
    sum their hours' and days' values. Null on rows rolled up before it existed: they cover
    min(guarantee, allocated) of themselves. Unused guarantee = guarantee - covered.
    """

    MONTH = "month"  # = monitoring.choices.RollupPeriod.MONTH

    period = models.CharField(
        max_length=8, choices=[("hour", "Hourly"), ("day", "Daily"), (MONTH, "Monthly")]
    )
    start = models.DateTimeField()
    team = models.ForeignKey(
        "quotas.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="rollups"
    )
    namespace = models.CharField(max_length=63)
    resource = models.CharField(max_length=253)
    flavor = models.CharField(max_length=128, blank=True)
    allocated_hours = _amount_field()
    pending_hours = _amount_field()
    used_hours = _amount_field()
    guarantee_hours = _amount_field()
    covered_hours = _amount_field(default=None, null=True, blank=True)
    busy_hours = _amount_field(default=None, null=True, blank=True)
    avg_utilization = models.FloatField(null=True, blank=True)
    samples = models.PositiveIntegerField(default=0)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-start", "namespace", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "start", "namespace", "resource", "flavor"],
                condition=~models.Q(period="month"),
                name="%(app_label)s_%(class)s_unique_bucket",
                violation_error_message="This bucket already has a rollup.",
            ),
            models.UniqueConstraint(
                "start",
                "namespace",
                "resource",
                "flavor",
                Coalesce("team", models.Value(0)),
                condition=models.Q(period="month"),
                name="%(app_label)s_%(class)s_unique_month_bucket",
                violation_error_message="This month bucket already has a rollup for this team.",
            ),
        ]
        indexes = [
            models.Index(fields=["period", "start"]),
            models.Index(fields=["team", "period", "start"]),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.start:%Y-%m-%d %H:%M} {self.namespace} {self.resource}"


class RateCard(models.Model):
    """Price per unit-hour of a resource (GPU-hour, core-hour, GiB-hour), optionally per flavor."""

    resource = models.CharField(max_length=253)
    flavor = models.CharField(max_length=128, blank=True, help_text="Empty: any flavor.")
    price_per_unit_hour = models.DecimalField(max_digits=14, decimal_places=6)
    currency = models.CharField(max_length=3, default="USD")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["resource", "flavor", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(price_per_unit_hour__gte=0),
                name="%(app_label)s_%(class)s_price_non_negative",
                violation_error_message="Prices cannot be negative.",
            ),
            models.CheckConstraint(
                condition=models.Q(valid_to__isnull=True)
                | models.Q(valid_to__gt=models.F("valid_from")),
                name="%(app_label)s_%(class)s_validity_ordered",
                violation_error_message="A rate must end after it starts.",
            ),
        ]

    def __str__(self) -> str:
        flavor = f" ({self.flavor})" if self.flavor else ""
        return f"{self.resource}{flavor}: {self.price_per_unit_hour} {self.currency}/h"

    def clean(self) -> None:
        super().clean()
        errors = moment_errors("valid_from", self.valid_from)
        errors |= moment_errors("valid_to", self.valid_to)
        if errors:
            raise ValidationError(errors)


class ChargebackStatement(models.Model):
    """A frozen monthly statement: later samples do not change it (they are reported as late)."""

    start = models.DateTimeField()
    end = models.DateTimeField()
    group_by = models.CharField(max_length=200, default="team")
    frozen_at = models.DateTimeField(auto_now_add=True)
    frozen_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["-start"]
        constraints = [
            models.UniqueConstraint(
                fields=["start", "end", "group_by"],
                name="%(app_label)s_%(class)s_unique_period_grouping",
                violation_error_message="This period is already frozen for this grouping.",
            ),
        ]

    def __str__(self) -> str:
        return f"Statement {self.start:%Y-%m-%d}–{self.end:%Y-%m-%d} by {self.group_by}"


class IdleGpuAlert(models.Model):
    """GPUs allocated to a team whose utilization stayed under the threshold for the window."""

    team = models.ForeignKey(
        "quotas.Team", on_delete=models.CASCADE, related_name="idle_gpu_alerts"
    )
    namespace = models.CharField(max_length=63, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    node = models.CharField(max_length=253, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    avg_utilization = models.FloatField(default=0.0)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    status = models.CharField(
        max_length=16, choices=[("open", "Open"), ("resolved", "Resolved")], default="open"
    )
    suggestion = models.TextField(blank=True)
    notified_at = models.DateTimeField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen_at"]
        indexes = [models.Index(fields=["team", "status"])]

    def __str__(self) -> str:
        return f"{self.gpus} idle GPU(s) of {self.team} on {self.node}"


class BudgetAlert(models.Model):
    """A budget crossed 80 % or 100 % in a month (one row per threshold and month)."""

    budget = models.ForeignKey("quotas.Budget", on_delete=models.CASCADE, related_name="alerts")
    month = models.DateField(help_text="First day of the month.")
    threshold = models.PositiveSmallIntegerField()
    allocated_hours = models.DecimalField(
        max_digits=20,
        decimal_places=4,
        help_text="Budget use when it crossed: allocated hours this month (services.budget_use).",
    )
    created = models.DateTimeField(auto_now_add=True)
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "month", "threshold"],
                name="%(app_label)s_%(class)s_unique_budget_month_threshold",
                violation_error_message="This threshold already alerted this month.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} reached {self.threshold} % in {self.month:%Y-%m}"


def latest_capacity() -> dict[str, Decimal]:
    """The capacity provider of ``quotas.capacity`` (``FAIRSHARE_CAPACITY_PROVIDER``)."""
    return CapacitySnapshot.latest_amounts()


class Workload(models.Model):
    """One gang or owner group as one collection saw it (``monitoring.domain.workloads``).

    Compact: the whole gang's requests as ``{resource: decimal string}`` and its GPUs as an
    integer (for sorting, filters and metrics), phase, whether it waits and why (``wait_code``,
    ``wait_reason`` in words). ``team`` is null for namespaces Fairshare does not know. Only the
    newest ``FAIRSHARE_WORKLOAD_COLLECTIONS`` collections are kept.
    """

    taken_at = models.DateTimeField(db_index=True)
    team = models.ForeignKey(
        "quotas.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="workloads"
    )
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    kind = models.CharField(max_length=63)
    queue = models.CharField(max_length=253, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    gang_size = models.PositiveIntegerField(default=0)
    pods = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    requested = models.JSONField(default=dict, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    waiting_for = models.JSONField(
        default=dict, blank=True, help_text="What must still be admitted: {resource: amount}."
    )
    waiting_gpus = models.PositiveIntegerField(default=0)
    phase = models.CharField(max_length=32)
    waiting = models.BooleanField(default=False)
    created = models.DateTimeField(null=True, blank=True)
    wait_code = models.CharField(max_length=32, blank=True)
    wait_reason = models.CharField(max_length=500, blank=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-taken_at", "namespace", "kind", "name"]
        indexes = [
            models.Index(fields=["team", "-taken_at"]),
            models.Index(fields=["taken_at", "waiting"]),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.phase})"

    def amounts(self) -> dict[str, Decimal]:
        return {name: Decimal(str(value)) for name, value in self.requested.items()}

    def waiting_amounts(self) -> dict[str, Decimal]:
        return {name: Decimal(str(value)) for name, value in self.waiting_for.items()}


class WorkloadRecord(models.Model):
    """One workload's life across collections (``monitoring.workloads.store_workloads``): when
    it was first seen, first seen waiting, started (first seen running with nothing waiting),
    last seen and finished; how long it waited. Unlike :class:`Workload` rows (the newest
    collections only) records stay ``FAIRSHARE_WORKLOAD_RECORD_DAYS`` after they were last
    seen: they are what run lengths (the estimates of ``monitoring.domain.blockers``) and the
    weekly waits (``monitoring.domain.waits``) are computed from.

    A workload is ``namespace``/``kind``/``name``; at most one record of it is open (not
    finished) at a time. ``finished`` is the last collection that saw it, set once a later
    collection misses it. ``waited_seconds`` is set only where the start was observed: from its
    creation (else its first sighting) to ``started``; null when it was already running when
    first seen, since nobody knows how long it had waited.
    """

    team = models.ForeignKey(
        "quotas.Team",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="workload_records",
    )
    namespace = models.CharField(max_length=63)
    kind = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    gpus = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(null=True, blank=True)
    first_seen = models.DateTimeField()
    first_waiting = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(db_index=True)
    finished = models.DateTimeField(null=True, blank=True)
    waited_seconds = models.PositiveIntegerField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-first_seen", "namespace", "kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "kind", "name"],
                condition=models.Q(finished__isnull=True),
                name="%(app_label)s_%(class)s_unique_open_workload",
                violation_error_message="A workload has at most one open record.",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "started"]),
            models.Index(fields=["team", "kind", "finished"]),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} (since {self.first_seen:%Y-%m-%d %H:%M})"

    @property
    def run_seconds(self) -> int | None:
        """Seconds from the observed start to the finish (None unless both are known)."""
        if self.started is None or self.finished is None or self.waited_seconds is None:
            return None
        return int((self.finished - self.started).total_seconds())
