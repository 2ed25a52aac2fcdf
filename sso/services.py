"""Signing a person in from a verified ID token: find or create the user by issuer and
subject, record the groups they brought, and apply the group rules (``quotas.groups``).

One transaction: a refusal (no group claim, a malformed one, a deactivated account) leaves no
user, identity or membership behind, and changes nothing for a returning user.

Accounts are linked by issuer + subject only, never by username or e-mail address: someone who
can choose their username at the identity provider must not be able to take over the local
account of the same name (the break-glass admin's, say). A new user whose username is taken
gets the next free ``name-2``, ``name-3``, ...
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from quotas.groups import GroupOutcome, apply_groups
from quotas.models import ExternalIdentity
from sso.exceptions import SignInRefused

MAX_GROUPS = 1000  # more than any provider sends in a token (Entra ID stops at 200)
_NOT_USERNAME = re.compile(r"[^\w.@+-]")


def read_groups(claims: Mapping[str, object]) -> list[str]:
    """The groups claim as a sorted list of names; SignInRefused when missing or malformed."""
    name = settings.FAIRSHARE_OIDC_GROUPS_CLAIM
    if name not in claims:
        raise SignInRefused(
            f"The identity provider sent no {name!r} claim, so Fairshare cannot tell your teams. "
            f"Ask an administrator to release it (scope and claim mapping; see "
            f"docs/operations.md). Nothing was changed."
        )
    value = claims[name]
    if isinstance(value, str):
        value = [value]  # some providers send one group as a plain string
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise SignInRefused(f"The {name!r} claim is not a list of group names. Sign-in refused.")
    if len(value) > MAX_GROUPS:
        raise SignInRefused(f"The {name!r} claim lists over {MAX_GROUPS} groups. Sign-in refused.")
    return sorted({g for g in value if g})


def _username(claims: Mapping[str, object], subject: str) -> str:
    User = get_user_model()
    wanted = str(claims.get(settings.FAIRSHARE_OIDC_USERNAME_CLAIM) or "")
    base = _NOT_USERNAME.sub("-", wanted)[:140].strip("-.")
    if not base:
        base = "sso-" + hashlib.sha256(subject.encode()).hexdigest()[:12]
    candidate, n = base, 1
    while User.objects.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def sign_in(*, issuer: str, claims: Mapping[str, object], now: datetime):
    """Return ``(user, GroupOutcome)`` for the verified ``claims`` of ``issuer``'s ID token.

    Raises SignInRefused (nothing written) for a missing or malformed groups claim, a missing
    subject or a deactivated Fairshare account.
    """
    subject = str(claims.get("sub") or "")
    if not subject:
        raise SignInRefused("The ID token names no subject. Sign-in refused.")
    groups = read_groups(claims)
    User = get_user_model()
    with transaction.atomic():
        identity = (
            ExternalIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is None:
            user = User(username=_username(claims, subject))
            user.set_unusable_password()
            _profile(user, claims)
            user.full_clean(exclude=["password"])
            user.save()
            identity = ExternalIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        else:
            user = identity.user
            if not user.is_active:
                raise SignInRefused(
                    "Your Fairshare account is deactivated. Ask a site admin to reactivate it."
                )
            _profile(user, claims)
            user.save(update_fields=["email", "first_name", "last_name"])
        identity.groups = groups
        identity.last_sign_in = now
        identity.save(update_fields=["groups", "last_sign_in", "updated"])
        outcome: GroupOutcome = apply_groups(user, identity, groups)
    return user, outcome


def _profile(user, claims: Mapping[str, object]) -> None:
    email = claims.get("email")
    if isinstance(email, str):
        try:
            validate_email(email)
        except ValidationError:
            pass  # an address Django would refuse is not worth refusing the sign-in for
        else:
            user.email = email
    for field, claim in (("first_name", "given_name"), ("last_name", "family_name")):
        value = claims.get(claim)
        if isinstance(value, str):
            setattr(user, field, value[:150])
