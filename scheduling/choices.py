from django.db import models


class SyncStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class SyncAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    UNCHANGED = "unchanged", "Unchanged"
    PRUNE = "prune", "Pruned"
    FAILED = "failed", "Failed"
