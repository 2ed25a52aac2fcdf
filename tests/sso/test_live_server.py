"""The whole flow over real HTTP on both sides (Fairshare's live server and the provider), as a
browser without JavaScript does it: the admin arrives by SSO, and signing out of Fairshare ends
the provider's session too (RP-initiated logout), so the next sign-in asks for the password.
Runs where Chromium is missing too (test_browser.py then skips)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import requests

from tests.sso.conftest import register
from tests.sso.test_login import end_session_url


def provider_login(session: requests.Session, response, username: str):
    csrf = session.cookies.get("provider_csrftoken", domain="127.0.0.1")
    next_url = parse_qs(urlparse(response.url).query)["next"][0]
    return session.post(
        response.url,
        data={
            "username": username,
            "password": "provider-pw",
            "next": next_url,
            "csrfmiddlewaretoken": csrf,
        },
        timeout=10,
    )


def test_sign_in_and_out_through_both_servers(
    live_server, transactional_db, sso_settings, oidc_provider
):
    sso_settings.SESSION_COOKIE_SECURE = False
    sso_settings.CSRF_COOKIE_SECURE = False
    register(oidc_provider, "fairshare", name="fairshare", base=live_server.url)
    oidc_provider.user("ada", groups=["fairshare-admins"])
    browser = requests.Session()
    assert "Sign in with single sign-on" in browser.get(f"{live_server.url}/login/").text

    at_provider = browser.get(f"{live_server.url}/sso/login/", timeout=10)
    assert at_provider.url.startswith(f"{oidc_provider.url}/accounts/login/")
    home = provider_login(browser, at_provider, "ada")
    assert home.url == f"{live_server.url}/"
    assert 'class="badge">admin' in home.text
    assert browser.get(f"{live_server.url}/sso/groups/").status_code == 200

    out = browser.post(
        f"{live_server.url}/logout/",
        data={"csrfmiddlewaretoken": browser.cookies.get("csrftoken")},
        headers={"Referer": f"{live_server.url}/"},
        timeout=10,
    )
    assert out.status_code == 200 and out.url == f"{live_server.url}/logout/"
    back = browser.get(end_session_url(out), timeout=10)  # the page's refresh, followed
    assert [urlparse(r.headers["Location"]).path for r in back.history] == ["/login/"]
    assert back.url.startswith(f"{live_server.url}/login/")
    assert browser.get(f"{live_server.url}/sso/groups/").url.startswith(f"{live_server.url}/login/")
    again = browser.get(f"{live_server.url}/sso/login/", timeout=10)
    assert "Provider username" in again.text  # the provider's session ended as well
