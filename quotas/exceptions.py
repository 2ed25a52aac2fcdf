"""Domain errors of the quotas app; views and the API map them to HTTP answers in one place."""


class DomainError(Exception):
    """Base of every error a quotas service raises on purpose."""


class InvalidTransition(DomainError):
    """The object is not in a state that allows this action (e.g. approving a rejected request)."""


class QuotaExceeded(DomainError):
    """Granting the change would push the sum of guarantees over schedulable capacity.

    ``field`` names the offending resource so forms and the API can attach the message to it.
    """

    def __init__(self, message: str, *, resource: str, requested: str, available: str):
        super().__init__(message)
        self.resource = resource
        self.requested = requested
        self.available = available


class PermissionDenied(DomainError):
    """The actor may not perform this action on this team."""


class SelfDecisionRefused(PermissionDenied):
    """Separation of duties: an admin may not decide their own quota request."""
