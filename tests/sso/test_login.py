"""Single sign-on through the test provider over real HTTP: Authlib's real discovery, code
exchange and ID-token verification against the provider's own keys."""

from __future__ import annotations

import base64
import html
import json
import re
import time
from unittest import mock
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from authlib.integrations.django_client.apps import DjangoOAuth2App
from django.contrib.auth import get_user_model
from django.test import Client

from quotas.models import ExternalIdentity, Membership
from tests.sso.conftest import sign_in_over_http

pytestmark = pytest.mark.django_db


def test_it_signs_a_new_person_in_through_the_provider(client, sso_settings, oidc_provider):
    subject = oidc_provider.user("dana", groups=["staff"])
    journey = sign_in_over_http(client, "dana")
    assert journey.response.status_code == 302
    assert journey.response["Location"] == "/"
    identity = ExternalIdentity.objects.get(issuer=oidc_provider.issuer, subject=subject)
    assert identity.user.username == "dana"
    assert identity.groups == ["staff"]
    assert not identity.user.has_usable_password()
    page = client.get("/")
    assert page.status_code == 200
    assert page.wsgi_request.user == identity.user


def end_session_url(response) -> str:
    """The provider address the signed-out page refreshes to (and links to)."""
    found = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', response.content.decode())
    assert found, response.content[:500]
    return html.unescape(found.group(1))


def _nothing_created():
    assert not get_user_model().objects.exists()
    assert not ExternalIdentity.objects.exists()
    assert not Membership.objects.exists()


def _refused(response, text: str) -> None:
    assert response.status_code == 403, response.content[:300]
    assert text in response.content.decode()
    assert "_auth_user_id" not in response.wsgi_request.session


def test_it_bounds_the_session_by_the_id_token(client, sso_settings, oidc_provider):
    oidc_provider.user("erin", groups=[])
    before = time.time()
    sign_in_over_http(client, "erin")
    expiry = client.session.get_expiry_date().timestamp()
    # The provider's ID tokens live 10 hours (django-oauth-toolkit's ID_TOKEN_EXPIRE_SECONDS);
    # Django's own session age (2 weeks) is longer, so the token's end is the session's.
    assert before + 36000 - 5 <= expiry <= time.time() + 36000 + 5


def test_the_sign_in_page_offers_single_sign_on_only_when_configured(client, settings, db):
    settings.FAIRSHARE_OIDC_ISSUER = ""
    page = client.get("/login/").content.decode()
    assert "single sign-on" not in page
    assert client.get("/sso/login/").status_code == 404
    assert client.get("/sso/callback/?code=x&state=y").status_code == 404
    settings.FAIRSHARE_OIDC_ISSUER = "https://idp.example.test"
    assert "Sign in with single sign-on" in client.get("/login/").content.decode()


def test_it_refuses_an_unknown_issuer(client, sso_settings, oidc_provider):
    # The provider answers on localhost too, but its discovery document names 127.0.0.1.
    sso_settings.FAIRSHARE_OIDC_ISSUER = oidc_provider.issuer.replace("127.0.0.1", "localhost")
    response = client.get("/sso/login/")
    assert response.status_code == 502
    assert "Unknown issuer" in response.content.decode()
    _nothing_created()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("wrong-issuer", "unknown issuer"),
        ("wrong-audience", "wrong audience"),
        ("expired", "ID token has expired"),
    ],
)
def test_it_refuses_a_bad_id_token(client, sso_settings, oidc_provider, name, message):
    from tests.sso.conftest import register

    register(oidc_provider, f"fairshare-{name}", name=name)
    sso_settings.FAIRSHARE_OIDC_CLIENT_ID = f"fairshare-{name}"
    oidc_provider.user("mallory", groups=["team-a-leads"])
    _refused(sign_in_over_http(client, "mallory").response, message)
    _nothing_created()


def test_it_refuses_a_missing_group_claim(client, sso_settings, oidc_provider):
    sso_settings.FAIRSHARE_OIDC_SCOPES = ["openid", "profile", "email"]  # no groups scope
    oidc_provider.user("frank", groups=["team-a-members"])
    _refused(sign_in_over_http(client, "frank").response, "sent no &#x27;groups&#x27; claim")
    _nothing_created()


def test_it_refuses_a_replayed_answer(client, sso_settings, oidc_provider, django_user_model):
    oidc_provider.user("grace", groups=[])
    journey = sign_in_over_http(client, "grace")
    assert journey.response.status_code == 302
    users = django_user_model.objects.count()
    # Someone else's browser replays the captured answer: no sign-in was started there.
    other = Client()
    _refused(other.get(journey.callback), "state mismatch")
    # The same browser replays it: the state was used up by the first answer.
    again = client.get(journey.callback)
    assert again.status_code == 403 and "state mismatch" in again.content.decode()
    # A fresh sign-in carrying the used code: the provider refuses the code.
    start = other.get("/sso/login/")
    state = parse_qs(urlparse(start["Location"]).query)["state"][0]
    code = parse_qs(urlparse(journey.callback).query)["code"][0]
    replay = other.get("/sso/callback/", {"code": code, "state": state})
    _refused(replay, "The identity provider refused the sign-in")
    assert django_user_model.objects.count() == users


def test_it_logs_out_at_the_provider_too(client, sso_settings, oidc_provider):
    oidc_provider.user("heidi", groups=[])
    sign_in_over_http(client, "heidi")
    response = client.post("/logout/")
    # A page that refreshes to the provider (a redirect would break the pages' form-action CSP).
    assert response.status_code == 200
    end_session = end_session_url(response)
    target = urlparse(end_session)
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{oidc_provider.issuer}/logout/"
    query = parse_qs(target.query)
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert query["id_token_hint"][0].count(".") == 2
    # The provider accepts the hint and the registered address and sends the browser back.
    answer = requests.get(end_session, allow_redirects=False, timeout=10)
    assert answer.status_code == 302
    assert answer.headers["Location"].startswith("http://testserver/login/")
    assert "_auth_user_id" not in client.session


def test_a_password_session_logs_out_locally_only(client, sso_settings, django_user_model):
    django_user_model.objects.create_user("local", password="a-long-local-password")
    client.login(username="local", password="a-long-local-password")
    response = client.post("/logout/")
    assert response["Location"] == "/login/"


def test_local_passwords_can_be_kept_for_break_glass_admins_only(
    client, settings, django_user_model
):
    settings.FAIRSHARE_LOCAL_PASSWORDS = "superusers"
    django_user_model.objects.create_user("olga", password="a-long-local-password")
    django_user_model.objects.create_superuser("root", password="a-long-local-password")
    refused = client.post("/login/", {"username": "olga", "password": "a-long-local-password"})
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    allowed = client.post("/login/", {"username": "root", "password": "a-long-local-password"})
    assert allowed.status_code == 302 and "_auth_user_id" in client.session
    settings.FAIRSHARE_LOCAL_PASSWORDS = "all"
    client.logout()
    client.post("/login/", {"username": "olga", "password": "a-long-local-password"})
    assert "_auth_user_id" in client.session


def test_it_never_takes_over_a_local_account_of_the_same_name(
    client, sso_settings, oidc_provider, django_user_model
):
    local = django_user_model.objects.create_superuser("root", password="a-long-local-password")
    oidc_provider.user("root", groups=[])
    sign_in_over_http(client, "root")
    identity = ExternalIdentity.objects.get()
    assert identity.user != local
    assert identity.user.username == "root-2"
    assert not identity.user.is_superuser


def test_it_refuses_an_id_token_whose_signature_does_not_verify(
    client, sso_settings, oidc_provider
):
    real = DjangoOAuth2App.fetch_access_token

    def forged(self, *args, **kwargs):
        token = real(self, *args, **kwargs)  # the provider's real answer, then tampered with
        header, payload, signature = token["id_token"].split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["groups"] = ["fairshare-admins"]
        payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        token["id_token"] = f"{header}.{payload}.{signature}"
        return token

    oidc_provider.user("oscar", groups=[])
    with mock.patch.object(DjangoOAuth2App, "fetch_access_token", forged):
        response = sign_in_over_http(client, "oscar").response
    _refused(response, "does not verify against the provider")
    _nothing_created()
