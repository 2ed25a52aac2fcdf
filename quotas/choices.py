from django.db import models


class MembershipRole(models.TextChoices):
    LEAD = "lead", "Lead"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class PreemptionPolicy(models.TextChoices):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority", "Preempt lower priority"
    NEVER = "Never", "Never preempt"


class QuotaRequestStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    ACTIVE = "active", "Active"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn"
    EXPIRED = "expired", "Expired"


class AuditVerb(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"
    SUBMIT = "submit", "Submitted"
    APPROVE = "approve", "Approved"
    REJECT = "reject", "Rejected"
    WITHDRAW = "withdraw", "Withdrew"
    ACTIVATE = "activate", "Activated"
    EXPIRE = "expire", "Expired"
    REBALANCE = "rebalance", "Rebalanced"
    SYNC = "sync", "Synced"


class TransitionKind(models.TextChoices):
    DEACTIVATE = "deactivate", "Deactivation"
    FIRST_CHILD = "first_child", "First team in a department"
    MOVE = "move", "Move to another department"


class TransitionState(models.TextChoices):
    WAITING = "waiting", "Waiting"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
