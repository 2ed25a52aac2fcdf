"""The OpenID Connect relying party: Authlib's Django client, configured from settings.

Why Authlib: its client does the whole authorization-code flow the issue asks for — discovery
from the issuer's ``/.well-known/openid-configuration``, PKCE (S256), ``state`` kept in the
session and checked once, a ``nonce`` per sign-in checked against the ID token, the ID token's
signature verified against the provider's JWKS (refetched when a new key id appears) and its
``iss``, ``aud``, ``exp`` and ``iat`` validated, and RP-initiated logout from the discovered
``end_session_endpoint``. mozilla-django-oidc does not discover endpoints and does not check
the ID token's ``exp`` or ``iss`` itself.

On top of Authlib this module checks one more thing the specification requires (OpenID
Connect Discovery §4.3): the discovery document's ``issuer`` must be exactly the configured
issuer, or the provider is not the one Fairshare was told to trust.
"""

from __future__ import annotations

import threading

from authlib.integrations.django_client import OAuth
from django.conf import settings

from sso.exceptions import SignInRefused

NAME = "fairshare"
_lock = threading.Lock()
_cached: tuple[tuple, object] | None = None


def enabled() -> bool:
    return bool(getattr(settings, "FAIRSHARE_OIDC_ISSUER", ""))


def issuer() -> str:
    return settings.FAIRSHARE_OIDC_ISSUER.rstrip("/")


def _config() -> tuple:
    return (
        issuer(),
        settings.FAIRSHARE_OIDC_CLIENT_ID,
        settings.FAIRSHARE_OIDC_CLIENT_SECRET,
        tuple(settings.FAIRSHARE_OIDC_SCOPES),
        settings.FAIRSHARE_OIDC_TIMEOUT,
    )


def client():
    """The registered Authlib client for the current settings (one per configuration, so its
    discovery document and keys are fetched once per process)."""
    global _cached
    config = _config()
    with _lock:
        if _cached is None or _cached[0] != config:
            iss, client_id, secret, scopes, timeout = config
            oauth = OAuth()
            oauth.register(
                NAME,
                client_id=client_id,
                client_secret=secret,
                server_metadata_url=f"{iss}/.well-known/openid-configuration",
                client_kwargs={
                    "scope": " ".join(scopes),
                    "code_challenge_method": "S256",
                    "default_timeout": timeout,
                    "token_endpoint_auth_method": "client_secret_basic",
                },
            )
            _cached = (config, oauth.create_client(NAME))
        return _cached[1]


def metadata(app) -> dict:
    """The provider's discovery document, refused unless it names the configured issuer."""
    document = app.load_server_metadata()
    said = str(document.get("issuer", "")).rstrip("/")
    if said != issuer():
        # Forget it, so a corrected provider is read again on the next attempt.
        app.server_metadata.pop("_loaded_at", None)
        raise SignInRefused(
            f"Unknown issuer: the identity provider at {issuer()} says it is "
            f"{said or 'nobody'!r}. Sign-in refused; check FAIRSHARE_OIDC_ISSUER."
        )
    return document
