"""API tokens for people: create (the secret shown once), list, revoke.

Over ``quotas.tokens``, which holds the rules (every token expires, at most
``FAIRSHARE_TOKEN_MAX_DAYS`` ahead; only admins make service and node-agent tokens). The pages
take sessions only — the UI ignores bearer tokens — so a token can never mint a token here.
Everyone lists and revokes their own tokens; site admins see and revoke every token.

Creating one is POST/redirect/GET: the POST stores the new secret in the session and redirects
to the list, whose next GET shows it once and removes it from the session. Reloading that page
shows no secret and creates nothing (a reload of the POST itself is never offered).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpForbidden
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from portal.forms import TokenForm
from quotas import tokens as token_services
from quotas.exceptions import PermissionDenied
from quotas.models import ApiToken
from quotas.querysets import is_site_admin

_FORM_FIELDS = {"name", "kind", "scopes", "node"}
# The session key holding a just-created token's id and secret until the next GET shows it.
ISSUED_KEY = "fairshare:issued-token"


def _tokens_of(user):
    """The tokens the user may see and revoke: their own; site admins every token (to revoke a
    leaked one)."""
    tokens = ApiToken.objects.select_related("user")
    return tokens if is_site_admin(user) else tokens.filter(user=user)


def _take_issued(request) -> dict | None:
    """The token created by this session's last POST, with its secret, once: popped from the
    session, and only while that token is still the user's own, live one."""
    stored = request.session.pop(ISSUED_KEY, None)
    if not isinstance(stored, dict):
        return None
    token = (
        ApiToken.objects.filter(pk=stored.get("id"), user=request.user, revoked_at__isnull=True)
        .select_related("user")
        .first()
    )
    if token is None or token_services.expiry_of(token) <= timezone.now():
        return None
    return {"token": token, "raw": str(stored.get("raw", ""))}


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """The user's tokens and the form for a new one; after creation (a redirect here) the
    secret, once."""
    admin = is_site_admin(request.user)
    form = TokenForm(request.POST or None, admin=admin)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            issued = token_services.issue_token(
                owner=request.user,
                actor=request.user,
                name=data["name"],
                kind=data["kind"],
                scopes=data.get("scopes") or (),
                node=data.get("node", ""),
                expires_at=form.expires_at(),
            )
        except ValidationError as e:
            for key, errors in e.message_dict.items():
                field = "expires_on" if key == "expires_at" else key
                form.add_error(field if field in form.fields else None, errors)
        except PermissionDenied as e:
            raise HttpForbidden(str(e)) from e
        else:
            request.session[ISSUED_KEY] = {"id": issued.token.pk, "raw": issued.raw}
            return redirect("portal:tokens")
    issued = _take_issued(request) if request.method == "GET" else None
    now = timezone.now()
    rows = [
        {
            "token": token,
            "expires": token_services.expiry_of(token),
            "live": token.revoked_at is None and token_services.expiry_of(token) > now,
        }
        for token in _tokens_of(request.user).order_by("-created", "-id")
    ]
    return render(
        request,
        "portal/tokens.html",
        {"form": form, "issued": issued, "rows": rows, "is_admin": admin},
    )


@login_required
@require_POST
def token_revoke(request, pk: int):
    """Revoke one of the tokens the user may see (404 for any other: no existence oracle)."""
    token = get_object_or_404(_tokens_of(request.user), pk=pk)
    try:
        token_services.revoke_token(token.pk, actor=request.user)
    except PermissionDenied as e:
        raise HttpForbidden(str(e)) from e
    messages.success(request, f"Token {token.name} ({token.prefix}…) revoked.")
    return redirect("portal:tokens")
