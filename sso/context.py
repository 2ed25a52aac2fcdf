"""Template context: whether the sign-in page offers single sign-on."""

from __future__ import annotations

from django.conf import settings


def sign_in(request) -> dict[str, object]:
    return {
        "sso_enabled": bool(getattr(settings, "FAIRSHARE_OIDC_ISSUER", "")),
        "local_passwords_restricted": getattr(settings, "FAIRSHARE_LOCAL_PASSWORDS", "all")
        != "all",
    }
