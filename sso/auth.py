"""Authentication backends: local passwords (throttled, possibly break-glass only) and the
session backend of people who signed in through the identity provider."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend

from config.auth import ThrottledModelBackend


def local_passwords_for(user) -> bool:
    """``FAIRSHARE_LOCAL_PASSWORDS``: ``all`` (default) or ``superusers`` (break-glass)."""
    if getattr(settings, "FAIRSHARE_LOCAL_PASSWORDS", "all") == "all":
        return True
    return bool(user.is_superuser)


class LocalPasswordBackend(ThrottledModelBackend):
    """The throttled password backend, refusing everyone but superusers when local passwords
    are turned off. Sessions made with a password end too once they are turned off."""

    def user_can_authenticate(self, user) -> bool:
        return super().user_can_authenticate(user) and local_passwords_for(user)


class SingleSignOnBackend(ModelBackend):
    """Keeps the sessions ``sso.views.callback`` opens (``login(..., backend=...)``); it never
    checks a password itself."""

    def authenticate(self, request, **credentials):
        return None
