"""Which scheduler backend this installation writes for: ``FAIRSHARE_SCHEDULER`` (volcano, the
default, or kueue), resolved to a :class:`~scheduling.domain.backends.Backend`.

Every place that renders, lists, watches or exports managed objects asks here, so switching the
setting switches all of them together.
"""

from __future__ import annotations

from django.conf import settings

from scheduling.domain.backends import Backend, backend_named

__all__ = ["current_backend"]


def current_backend() -> Backend:
    """The configured backend (``FAIRSHARE_SCHEDULER``, default ``volcano``)."""
    return backend_named(str(getattr(settings, "FAIRSHARE_SCHEDULER", "volcano")))
