"""Domain errors of the scheduling app; tasks and views map them to outcomes in one place."""


class DomainError(Exception):
    """Base of every error the scheduling app raises on purpose."""
