"""Single sign-on pages: start (redirect to the provider), callback (verify, sign in), logout
(local, then RP-initiated at the provider).

Every refusal renders the sign-in page with a sentence saying what was wrong, answered 400 or
403; nothing is created (``sso.services.sign_in`` is one transaction, and it runs only after
the ID token verified).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import requests
from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from joserfc import errors as jose

from sso import client as oidc
from sso.exceptions import SignInRefused
from sso.services import sign_in

logger = logging.getLogger(__name__)

NEXT_KEY = "sso_next"
ID_TOKEN_KEY = "sso_id_token"
BACKEND = "sso.auth.SingleSignOnBackend"


def _refuse(request, message: str, status: int = 403):
    from config.auth import ThrottledAuthenticationForm

    return render(
        request,
        "registration/login.html",
        {"form": ThrottledAuthenticationForm(request), "sso_error": message, "next": ""},
        status=status,
    )


def _redirect_uri(request) -> str:
    return request.build_absolute_uri(reverse("sso:callback"))


@never_cache
@require_GET
def start(request):
    """Send the browser to the provider's authorization endpoint (code flow, PKCE, state and
    nonce kept in the session)."""
    if not oidc.enabled():
        raise Http404("Single sign-on is not configured.")
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    try:
        app = oidc.client()
        oidc.metadata(app)
        request.session[NEXT_KEY] = next_url
        return app.authorize_redirect(request, _redirect_uri(request))
    except SignInRefused as e:
        return _refuse(request, str(e), 502)
    except (requests.RequestException, ValueError) as e:
        logger.warning("OIDC discovery failed for %s: %r", oidc.issuer(), e)
        return _refuse(request, "The identity provider cannot be reached; try again later.", 502)


def _verify(request) -> dict:
    """Exchange the code and verify the ID token; SignInRefused with the reason otherwise."""
    app = oidc.client()
    oidc.metadata(app)
    try:
        token = app.authorize_access_token(
            request,
            claims_options={"iss": {"essential": True, "value": oidc.issuer()}},
            leeway=settings.FAIRSHARE_OIDC_LEEWAY_SECONDS,
        )
    except MismatchingStateError:
        raise SignInRefused(
            "This sign-in was not started here or was used already (state mismatch); "
            "replayed answers are refused. Start again."
        ) from None
    except OAuthError as e:
        raise SignInRefused(
            f"The identity provider refused the sign-in: {e.description or e.error}."
        ) from None
    except jose.ExpiredTokenError:
        raise SignInRefused(
            "The identity provider's ID token has expired (check the clocks). Sign-in refused."
        ) from None
    except jose.ClaimError as e:
        raise SignInRefused(_claim_message(e)) from None
    except jose.JoseError as e:
        raise SignInRefused(
            f"The ID token does not verify against the provider's keys ({e.error}). "
            "Sign-in refused."
        ) from None
    claims = token.get("userinfo")
    if not claims or "id_token" not in token:
        raise SignInRefused("The identity provider sent no ID token. Sign-in refused.")
    return {"claims": dict(claims), "id_token": token["id_token"]}


def _claim_message(e: jose.ClaimError) -> str:
    claim = getattr(e, "claim", "")
    if claim == "aud" or claim == "azp":
        return (
            "The ID token was issued to another application (wrong audience), not to "
            f"{settings.FAIRSHARE_OIDC_CLIENT_ID!r}. Sign-in refused."
        )
    if claim == "iss":
        return f"The ID token comes from an unknown issuer, not {oidc.issuer()}. Sign-in refused."
    if claim == "nonce":
        return "The ID token belongs to another sign-in (nonce mismatch, a replay). Refused."
    if claim in {"iat", "nbf"}:
        return "The ID token is not valid yet (check the clocks). Sign-in refused."
    return f"The ID token's {claim!r} claim is wrong or missing. Sign-in refused."


@never_cache
@require_GET
def callback(request):
    """The provider's answer: verify it, sign the person in, bound the session by the token."""
    if not oidc.enabled():
        raise Http404("Single sign-on is not configured.")
    try:
        verified = _verify(request)
        user, outcome = sign_in(issuer=oidc.issuer(), claims=verified["claims"], now=timezone.now())
    except SignInRefused as e:
        logger.info("single sign-on refused: %s", e)
        return _refuse(request, str(e))
    except (requests.RequestException, ValueError) as e:
        logger.warning("OIDC token exchange failed for %s: %r", oidc.issuer(), e)
        return _refuse(request, "The identity provider cannot be reached; try again later.", 502)
    next_url = request.session.pop(NEXT_KEY, "")
    login(request, user, backend=BACKEND)
    request.session[ID_TOKEN_KEY] = verified["id_token"]
    _bound_session(request, verified["claims"].get("exp"))
    if outcome.kept_last_lead:
        from django.contrib import messages

        messages.warning(
            request,
            "Your groups no longer make you a lead of "
            + ", ".join(outcome.kept_last_lead)
            + ", but you are the last lead there: you stay lead until another is appointed.",
        )
    return HttpResponseRedirect(next_url or resolve_url(settings.LOGIN_REDIRECT_URL))


def _bound_session(request, exp) -> None:
    """The session ends when the ID token does (or at SESSION_COOKIE_AGE, if sooner)."""
    ends = timezone.now() + timedelta(seconds=settings.SESSION_COOKIE_AGE)
    if isinstance(exp, int | float):
        ends = min(ends, datetime.fromtimestamp(exp, tz=UTC))
    request.session.set_expiry(ends)


class LogoutView(auth_views.LogoutView):
    """Django's logout; for a single sign-on session, then the provider's end-session endpoint
    (RP-initiated logout) with the ID token as hint, coming back to the sign-in page.

    The way to the provider is a page that refreshes to it, not a redirect: the sign-out button
    is a form, and the pages' CSP (``form-action 'self'``) also governs where a form's
    redirects may lead, so browsers would stop a redirect to the provider.
    """

    def post(self, request, *args, **kwargs):
        id_token = request.session.get(ID_TOKEN_KEY)
        response = super().post(request, *args, **kwargs)
        if not (id_token and oidc.enabled()):
            return response
        try:
            app = oidc.client()
            if not oidc.metadata(app).get("end_session_endpoint"):
                return response
            url = app.create_logout_url(
                post_logout_redirect_uri=request.build_absolute_uri(resolve_url("login")),
                id_token_hint=id_token,
                client_id=settings.FAIRSHARE_OIDC_CLIENT_ID,
            )["url"]
        except (SignInRefused, requests.RequestException, ValueError) as e:
            logger.warning("RP-initiated logout skipped: %r", e)
            return response
        return render(request, "sso/logout.html", {"end_session_url": url})
