from django.db import models


class SyncStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    # A request that arrived while another sync ran: carried out by the follow-up run it was
    # merged into (``SyncRun.merged_into``), never dropped and never failed.
    MERGED = "merged", "Merged"


class SyncAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    UNCHANGED = "unchanged", "Unchanged"
    PRUNE = "prune", "Pruned"
    FAILED = "failed", "Failed"
