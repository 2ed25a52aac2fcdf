"""Why a single sign-on was refused: each carries a sentence for the person signing in."""

from __future__ import annotations

from quotas.exceptions import DomainError


class SignInRefused(DomainError):
    """The sign-in was refused; nothing was created or changed."""
