"""The test identity provider (tests/oidc_provider/): a real django-oauth-toolkit OpenID Connect
provider in its own process on loopback, with its own database and RSA key.

``oidc_provider`` (one per test session) starts it and waits for its discovery document;
``provider.user(...)`` creates or changes a user and their groups at the provider (its admin's
job), ``provider.client(...)`` registers a relying party. ``sso_settings`` points Fairshare at it.
``sign_in_over_http`` runs the whole code flow: Fairshare's start view (Django test client),
the provider's login form and authorization endpoint (real HTTP, ``requests``), and back to
Fairshare's callback, which exchanges the code and verifies the ID token over real HTTP.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "fairshare"
CLIENT_SECRET = "fairshare-test-secret-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Provider:
    url: str
    token: str

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def _post(self, path: str, body: dict) -> dict:
        r = requests.post(
            f"{self.url}{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10,
        )
        r.raise_for_status()
        return r.json()

    def user(self, username: str, *, groups: list[str], password: str = "provider-pw") -> str:
        """Create or change a provider user; return their subject."""
        return self._post(
            "/control/user", {"username": username, "password": password, "groups": groups}
        )["sub"]

    def client(self, client_id: str, *, name: str, redirect_uris: list[str], logout=()) -> None:
        self._post(
            "/control/client",
            {
                "client_id": client_id,
                "client_secret": CLIENT_SECRET,
                "name": name,
                "redirect_uris": redirect_uris,
                "post_logout_redirect_uris": list(logout),
            },
        )


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory) -> Provider:
    folder = tmp_path_factory.mktemp("oidc-provider")
    port = _free_port()
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "PROVIDER_PORT": str(port),
        "PROVIDER_DB": str(folder / "provider.sqlite3"),
        "PROVIDER_KEY": str(folder / "key.pem"),
        "PROVIDER_CONTROL_TOKEN": token,
        "PYTHONPATH": str(ROOT),
    }
    log = (folder / "provider.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider.serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    provider = Provider(url=f"http://127.0.0.1:{port}", token=token)
    deadline = time.monotonic() + 60
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    "the test provider exited: " + (folder / "provider.log").read_text()[-2000:]
                )
            try:
                discovery = f"{provider.issuer}/.well-known/openid-configuration"
                if requests.get(discovery, timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the test provider did not start within 60 s")
            time.sleep(0.2)
        yield provider
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture
def sso_settings(settings, oidc_provider):
    """Fairshare configured for the test provider, a relying party registered for the Django
    test client's host and for the browser tests' live server."""
    settings.FAIRSHARE_OIDC_ISSUER = oidc_provider.issuer
    settings.FAIRSHARE_OIDC_CLIENT_ID = CLIENT_ID
    settings.FAIRSHARE_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.FAIRSHARE_OIDC_SCOPES = ["openid", "profile", "email", "groups"]
    settings.FAIRSHARE_OIDC_GROUPS_CLAIM = "groups"
    settings.FAIRSHARE_OIDC_ADMIN_GROUPS = ["fairshare-admins"]
    settings.FAIRSHARE_OIDC_GROUP_PREFIX = "oidc:"
    settings.ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
    register(oidc_provider, CLIENT_ID, name="fairshare")
    return settings


def register(provider: Provider, client_id: str, *, name: str, base: str = "http://testserver"):
    provider.client(
        client_id,
        name=name,
        redirect_uris=[f"{base}/sso/callback/"],
        logout=[f"{base}/login/"],
    )


@dataclass
class Journey:
    callback: str  # the provider's redirect back to Fairshare, with code and state
    response: object  # Fairshare's answer to it


def provider_authorize(location: str, username: str, password: str = "provider-pw") -> str:
    """Follow the provider's side of the flow from its authorization URL: its login form, then
    its authorization endpoint; return the redirect back to the relying party."""
    session = requests.Session()
    r = session.get(location, allow_redirects=True, timeout=10)
    assert "Test identity provider" in r.text, r.text[:500]
    csrf = session.cookies.get("provider_csrftoken")
    next_url = parse_qs(urlparse(r.url).query)["next"][0]
    r = session.post(
        r.url,
        data={
            "username": username,
            "password": password,
            "next": next_url,
            "csrfmiddlewaretoken": csrf,
        },
        headers={"Referer": r.url},
        allow_redirects=False,
        timeout=10,
    )
    assert r.status_code == 302, r.text[:500]
    r = session.get(urljoin(r.url, r.headers["Location"]), allow_redirects=False, timeout=10)
    assert r.status_code == 302, r.text[:500]
    return r.headers["Location"]


def sign_in_over_http(client, username: str, *, password: str = "provider-pw") -> Journey:
    start = client.get("/sso/login/")
    assert start.status_code == 302, start.content[:500]
    callback = provider_authorize(start["Location"], username, password)
    assert callback.startswith("http://testserver/sso/callback/?"), callback
    path = callback.removeprefix("http://testserver")
    return Journey(callback=path, response=client.get(path))


# The browser tests' fixtures (Debian's Chromium, the live server, the page), for test_browser.py.
from tests.browser.conftest import app, browser, page  # noqa: E402, F401
