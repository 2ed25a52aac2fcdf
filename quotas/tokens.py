"""API tokens: creation (shown once), hashing, lookup and revocation.

A token reads ``fs_<prefix>_<secret>``; only its SHA-256 is stored, with the prefix for display.
The secret has 256 bits of entropy, so a plain (unsalted) hash is safe and makes lookup O(1).

Hygiene rules (so a leaked token does not live for ever):

* Every token expires. Without ``expires_at`` it gets ``FAIRSHARE_TOKEN_DEFAULT_DAYS`` (90);
  an expiry in the past, or later than ``FAIRSHARE_TOKEN_MAX_DAYS`` (365) ahead, is refused.
  Tokens stored before this rule without an expiry stop working ``FAIRSHARE_TOKEN_MAX_DAYS``
  after their creation.
* Tokens are created by a person signed in with a session, never with another token: otherwise
  a stolen token could mint a fresh one and outlive its own revocation.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from quotas.choices import AuditVerb
from quotas.exceptions import PermissionDenied
from quotas.models import ApiToken
from quotas.querysets import is_site_admin

SCOPES = ("read:chargeback", "read:all", "ingest:gpu")
PREFIX = "fs_"


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    raw: str  # shown once, never stored


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _new_raw() -> tuple[str, str]:
    prefix = secrets.token_hex(4)
    return prefix, f"{PREFIX}{prefix}_{secrets.token_urlsafe(32)}"


def issue_token(
    *,
    owner,
    name: str,
    kind: str = ApiToken.Kind.PERSONAL,
    scopes: Iterable[str] = (),
    node: str = "",
    expires_at: datetime | None = None,
    actor=None,
    via_token: ApiToken | None = None,
    now: datetime | None = None,
) -> IssuedToken:
    """Create a token. Users create personal tokens for themselves; only admins create service
    and node-agent tokens; nobody creates one while authenticated by a token (``via_token``).
    Raises PermissionDenied or ValidationError (field-keyed)."""
    from quotas.changes import audit

    if via_token is not None:
        raise PermissionDenied(
            "Tokens cannot create tokens: sign in with your password to create one."
        )
    actor = actor or owner
    now = now or timezone.now()
    scopes = sorted(set(scopes))
    errors = {}
    if not (name or "").strip():
        errors["name"] = "Give the token a name."
    longest = timedelta(days=max_lifetime_days())
    if expires_at is None:
        expires_at = now + timedelta(days=min(default_lifetime_days(), longest.days))
    elif expires_at <= now:
        errors["expires_at"] = "The expiry must be in the future."
    elif expires_at > now + longest:
        errors["expires_at"] = f"Tokens live at most {longest.days} days; choose an earlier expiry."
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        errors["scopes"] = f"Unknown scopes {', '.join(unknown)}; allowed: {', '.join(SCOPES)}."
    if kind == ApiToken.Kind.NODE_AGENT and not node:
        errors["node"] = "A node-agent token belongs to one node."
    if kind == ApiToken.Kind.PERSONAL and scopes:
        errors["scopes"] = "Personal tokens act as their user and take no scopes."
    if kind not in ApiToken.Kind.values:
        errors["kind"] = f"Unknown kind; allowed: {', '.join(ApiToken.Kind.values)}."
    if errors:
        raise ValidationError(errors)
    if kind == ApiToken.Kind.PERSONAL and actor.pk != owner.pk:
        raise PermissionDenied("Personal tokens are created by their owner.")
    if kind != ApiToken.Kind.PERSONAL and not is_site_admin(actor):
        raise PermissionDenied("Only site admins create service and node-agent tokens.")
    if kind == ApiToken.Kind.NODE_AGENT:
        scopes = ["ingest:gpu"]
    prefix, raw = _new_raw()
    with transaction.atomic():
        if kind == ApiToken.Kind.PERSONAL:
            _check_personal_allowance(owner, now=now)
        token = ApiToken.objects.create(
            name=name.strip(),
            kind=kind,
            user=owner,
            scopes=scopes,
            node=node,
            prefix=prefix,
            key_hash=hash_token(raw),
            expires_at=expires_at,
        )
        audit(
            actor=actor,
            verb=AuditVerb.CREATE,
            obj=token,
            team=None,
            after={
                "name": token.name,
                "kind": kind,
                "scopes": scopes,
                "node": node,
                "expires_at": expires_at.isoformat(),
            },
        )
    return IssuedToken(token, raw)


def max_personal_tokens() -> int:
    return int(getattr(settings, "FAIRSHARE_TOKEN_MAX_PERSONAL", 10))


def _check_personal_allowance(owner, *, now: datetime) -> None:
    """At most ``FAIRSHARE_TOKEN_MAX_PERSONAL`` live (unrevoked, unexpired) personal tokens per
    person (issue 27); the owner's row is locked so two creations at once cannot both pass."""
    users = get_user_model().objects.select_for_update()
    users.filter(pk=owner.pk).values_list("pk", flat=True).first()
    live = (
        ApiToken.objects.filter(user=owner, kind=ApiToken.Kind.PERSONAL, revoked_at__isnull=True)
        .exclude(expires_at__lte=now)
        .count()
    )
    if live >= max_personal_tokens():
        raise ValidationError(
            {
                "name": f"You have {live} active personal tokens, the most allowed "
                f"(FAIRSHARE_TOKEN_MAX_PERSONAL); revoke one you no longer use first."
            }
        )


def default_lifetime_days() -> int:
    return int(getattr(settings, "FAIRSHARE_TOKEN_DEFAULT_DAYS", 90))


def max_lifetime_days() -> int:
    return int(getattr(settings, "FAIRSHARE_TOKEN_MAX_DAYS", 365))


def expiry_of(token: ApiToken) -> datetime:
    """When the token stops working: its expiry, or (stored without one) the longest life."""
    if token.expires_at is not None:
        return token.expires_at
    return token.created + timedelta(days=max_lifetime_days())


def authenticate_token(raw: str, *, now: datetime | None = None) -> ApiToken | None:
    """Return the live token for ``raw``, or None (unknown, revoked, expired, inactive user)."""
    if not raw or not raw.startswith(PREFIX) or len(raw) > 200:
        return None
    now = now or timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=hash_token(raw), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    if expiry_of(token) <= now:
        return None
    # Throttle the write: one update per minute per token is plenty for "last used".
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def revoke_token(token_id: int, *, actor) -> ApiToken:
    """Revoke a token: its owner or a site admin may. Idempotent."""
    from quotas.changes import audit

    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token_id)
        if token.user_id != actor.pk and not is_site_admin(actor):
            raise PermissionDenied("Only the token's owner or an admin may revoke it.")
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            audit(actor=actor, verb=AuditVerb.DELETE, obj=token, team=None)
    return token
