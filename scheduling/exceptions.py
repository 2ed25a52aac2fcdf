"""Domain errors of the scheduling app; tasks and views map them to outcomes in one place."""


class DomainError(Exception):
    """Base of every error the scheduling app raises on purpose."""


class NoCapacity(DomainError):
    """No capacity was ever collected, so there is nothing to share."""


class ShareProblemError(DomainError):
    """The quotas (or proposed changes) make an invalid DRF problem; the message says why."""


class SyncError(DomainError):
    """A sync could not be carried out (the run records why)."""
