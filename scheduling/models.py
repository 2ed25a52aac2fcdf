"""Fair-share history (ShareComputation, ShareSnapshot) and cluster sync records
(SyncRun, SyncItem)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from quotas.querysets import TeamScopedQuerySet
from scheduling.choices import SyncAction, SyncStatus


class ShareComputation(models.Model):
    """One run of the DRF solver over the whole cluster (the snapshots hang off it)."""

    computed_at = models.DateTimeField(db_index=True)
    trigger = models.CharField(max_length=64, default="schedule")
    capacity = models.JSONField(default=dict, help_text="Capacity used, {resource: amount}.")
    duration_ms = models.PositiveIntegerField(default=0)
    teams = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-computed_at", "-id"]
        get_latest_by = "computed_at"

    def __str__(self) -> str:
        return f"Shares at {self.computed_at:%Y-%m-%d %H:%M}"


class ShareFailure(models.Model):
    """A share computation that could not run: the quotas made an invalid DRF problem.

    Shares are stale from the first failure after the latest ShareComputation until the next
    successful one (``scheduling.health.share_health``). ``notified`` marks the failure whose
    episode admins were told about (one notification per episode).
    """

    failed_at = models.DateTimeField(db_index=True)
    trigger = models.CharField(max_length=64, default="schedule")
    error = models.TextField()
    notified = models.BooleanField(default=False)

    class Meta:
        ordering = ["-failed_at", "-id"]
        get_latest_by = "failed_at"

    def __str__(self) -> str:
        return f"Share computation failed at {self.failed_at:%Y-%m-%d %H:%M}"


class ShareSnapshot(models.Model):
    """A team's usage, dominant share and DRF fair allocation at one computation.

    Amounts are JSON maps {resource: decimal string in base units}.
    """

    computation = models.ForeignKey(
        ShareComputation, on_delete=models.CASCADE, related_name="snapshots"
    )
    computed_at = models.DateTimeField(db_index=True)
    team = models.ForeignKey("quotas.Team", on_delete=models.CASCADE, related_name="shares")
    usage = models.JSONField(default=dict)
    demand = models.JSONField(default=dict)
    dominant_share = models.FloatField(default=0.0)
    dominant_resource = models.CharField(max_length=253, blank=True)
    weighted_share = models.FloatField(default=0.0, help_text="Dominant share ÷ weight.")
    fair_allocation = models.JSONField(default=dict)
    fair_share = models.FloatField(default=0.0, help_text="Dominant share of the fair allocation.")
    reason = models.CharField(max_length=300, blank=True)
    # Fairness over time (issue 32; docs/drf.md "Past use"): the subtree's decayed mean
    # allocation {resource: decimal string}, its dominant share of the capacity, and the
    # weight the solver used after the adjustment for past use. Empty / null when it is off.
    past_usage = models.JSONField(default=dict, blank=True)
    past_share = models.FloatField(null=True, blank=True)
    effective_weight = models.FloatField(null=True, blank=True)
    # "Why is my share X": the fair allocation as named parts that add up to it
    # (scheduling.domain.explain), the same list the page and the API show.
    explanation = models.JSONField(default=list, blank=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-computed_at", "team__slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["computation", "team"],
                name="%(app_label)s_%(class)s_unique_computation_team",
                violation_error_message="A computation has one snapshot per team.",
            ),
        ]
        indexes = [models.Index(fields=["team", "-computed_at"])]

    def __str__(self) -> str:
        return f"{self.team} at {self.computed_at:%Y-%m-%d %H:%M}: {self.dominant_share:.3f}"


class SyncRun(models.Model):
    """One plan-and-apply of the desired state against the cluster (or a dry run)."""

    status = models.CharField(
        max_length=16, choices=SyncStatus.choices, default=SyncStatus.QUEUED, db_index=True
    )
    dry_run = models.BooleanField(default=False)
    trigger = models.CharField(max_length=64, default="manual")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="sync_runs",
    )
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    created_count = models.PositiveIntegerField(default=0)
    updated_count = models.PositiveIntegerField(default=0)
    unchanged_count = models.PositiveIntegerField(default=0)
    pruned_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    drift_count = models.PositiveIntegerField(
        default=0, help_text="Objects changed in the cluster behind Fairshare's back."
    )
    scope = models.JSONField(
        default=dict,
        blank=True,
        help_text="Empty: a full sync. Otherwise a targeted one: {'teams': [slug, ...]} plans "
        "only those teams' objects and the Queues of their department trees.",
    )
    share_computation = models.ForeignKey(
        ShareComputation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="sync_runs",
        help_text="The share computation whose fair allocation the Queues' deserved came from.",
    )
    shares_stale = models.BooleanField(
        default=False,
        help_text="Share computations had failed since that computation: deserved was stale.",
    )
    merged_into = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="merged_requests",
        help_text="The follow-up run that carried out this request (status merged).",
    )
    quota_requests = models.ManyToManyField(
        "quotas.QuotaRequest",
        blank=True,
        related_name="sync_runs",
        help_text="The approved quota requests this run was started to apply (a run that "
        "merges others takes over theirs).",
    )
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        kind = "dry run" if self.dry_run else "sync"
        return f"{kind} #{self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (SyncStatus.SUCCEEDED, SyncStatus.FAILED, SyncStatus.MERGED)

    @property
    def is_targeted(self) -> bool:
        return bool(self.scope)

    @property
    def scope_teams(self) -> list[str]:
        return sorted((self.scope or {}).get("teams") or [])


class SyncItem(models.Model):
    """What one sync run did (or would do) to one Kubernetes object."""

    run = models.ForeignKey(SyncRun, on_delete=models.CASCADE, related_name="items")
    kind = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    team_slug = models.CharField(max_length=63, blank=True, db_index=True)
    action = models.CharField(max_length=16, choices=SyncAction.choices)
    planned_action = models.CharField(max_length=16, choices=SyncAction.choices, blank=True)
    drift = models.BooleanField(default=False)
    diff = models.TextField(blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "action"])]

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.action} {self.kind} {where}{self.name}"


class FairnessSetting(models.Model):
    """An admin's override of ``FAIRSHARE_USAGE_HALF_LIFE`` / ``FAIRSHARE_USAGE_STRENGTH`` (one
    row, pk 1; a null field means "the environment's value"). Changed only through
    ``scheduling.pastuse.set_fairness`` (audited)."""

    half_life_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="0 turns fairness over time off; null: the environment's."
    )
    strength = models.DecimalField(max_digits=3, decimal_places=2, null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    def __str__(self) -> str:
        return f"Fairness over time: half-life {self.half_life_seconds}, strength {self.strength}"


class PastUsageState(models.Model):
    """Decayed past use for one half-life, folded from the hourly rollups up to ``through``
    (``scheduling.pastuse.fold``): the share computation reads one row whatever the history.

    ``usage``: {team id: {resource: Σ decay(age)·allocated resource-hours}}; ``capacity``:
    {resource: Σ decay(age)·capacity-hours} over the observed history (from ``first``, the
    first hourly rollup or capacity snapshot). Both are as of ``through`` (an hour boundary;
    hours ending later are not folded).
    """

    half_life_seconds = models.PositiveIntegerField(unique=True)
    first = models.DateTimeField()
    through = models.DateTimeField()
    usage = models.JSONField(default=dict)
    capacity = models.JSONField(default=dict)
    folded_hours = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return (
            f"Past use (half-life {self.half_life_seconds} s) through {self.through:%Y-%m-%d %H:%M}"
        )
