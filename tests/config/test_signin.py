"""Sign-in throttling: one rule for the site's login and the Django admin's, keyed on username
and client address, with back-off instead of a lock-out for everyone (config/auth.py), and the
client address taken from a proxy header only when one is configured (config/net.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth import authenticate
from django.core.cache import cache
from django.test import Client, RequestFactory
from django.urls import reverse

from config import auth
from config.net import client_ip
from tests.base import PASSWORD

pytestmark = pytest.mark.django_db

PROXY = "10.0.0.5"  # the TLS proxy: every request reaches Django from here


@pytest.fixture(autouse=True)
def _clean_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def clock(monkeypatch):
    """A settable clock for the throttle (seconds)."""

    class Clock:
        now = 1_000_000.0

        def __call__(self):
            return self.now

    fake = Clock()
    monkeypatch.setattr(auth, "_clock", fake)
    return fake


def site_login(client, username, password):
    return client.post(reverse("login"), {"username": username, "password": password})


def admin_login(client, username, password):
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


# ------------------------------------------------------------------ finding 1: the admin door


def test_the_admin_login_backs_off_after_repeated_wrong_passwords(cast):
    attacker = Client(REMOTE_ADDR="198.51.100.7")
    for _ in range(5):
        assert admin_login(attacker, "root", "wrong").status_code == 200
    for _ in range(2):
        assert admin_login(attacker, "root", "wrong").status_code == 429
    response = admin_login(attacker, "root", PASSWORD)
    assert response.status_code == 429
    assert not signed_in(attacker)
    assert "Too many failed sign-ins" in response.content.decode()


def test_failures_at_one_door_count_at_the_other(cast):
    client = Client(REMOTE_ADDR="198.51.100.8")
    for _ in range(5):
        site_login(client, "root", "wrong")
    response = admin_login(client, "root", PASSWORD)
    assert not signed_in(client)
    assert "Too many failed sign-ins" in response.content.decode()


def test_a_throttled_attempt_is_refused_by_authenticate_itself(cast):
    request = RequestFactory().post("/elsewhere/", REMOTE_ADDR="198.51.100.9")
    for _ in range(5):
        assert authenticate(request, username="root", password="wrong") is None
    assert authenticate(request, username="root", password=PASSWORD) is None


def test_the_admin_still_signs_in_staff_with_the_right_password(cast):
    client = Client(REMOTE_ADDR="198.51.100.10")
    response = admin_login(client, "root", PASSWORD)
    assert response.status_code == 302
    assert signed_in(client)


# ------------------------------------------------ finding 2: keyed on user + address


def test_one_users_failures_behind_the_proxy_do_not_hold_up_the_others(cast):
    for _ in range(6):
        site_login(Client(REMOTE_ADDR=PROXY), "alice", "wrong")
    bob = Client(REMOTE_ADDR=PROXY)
    assert site_login(bob, "bob", PASSWORD).status_code == 302
    alice = Client(REMOTE_ADDR=PROXY)
    assert site_login(alice, "alice", PASSWORD).status_code == 429
    assert not signed_in(alice)


def test_with_the_proxy_header_configured_the_same_user_elsewhere_still_signs_in(cast, settings):
    settings.FAIRSHARE_CLIENT_IP_HEADER = "X-Forwarded-For"
    attacker = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="203.0.113.66")
    for _ in range(6):
        site_login(attacker, "alice", "wrong")
    alice = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="192.0.2.20")
    assert site_login(alice, "alice", PASSWORD).status_code == 302


def test_a_forwarded_for_header_the_client_made_up_does_not_escape_the_throttle(cast, settings):
    # Not configured: the header is the client's own claim, and is ignored.
    for i in range(6):
        site_login(
            Client(REMOTE_ADDR="198.51.100.11", HTTP_X_FORWARDED_FOR=f"1.2.3.{i}"), "alice", "x"
        )
    client = Client(REMOTE_ADDR="198.51.100.11", HTTP_X_FORWARDED_FOR="9.9.9.9")
    assert site_login(client, "alice", PASSWORD).status_code == 429
    # Configured: only the entry our proxy appended counts, not what the client put before it.
    cache.clear()
    settings.FAIRSHARE_CLIENT_IP_HEADER = "X-Forwarded-For"
    for i in range(6):
        spoofed = f"1.2.3.{i}, 203.0.113.5"
        site_login(Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=spoofed), "alice", "x")
    client = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="4.4.4.4, 203.0.113.5")
    assert site_login(client, "alice", PASSWORD).status_code == 429
    assert not signed_in(client)


def test_one_address_guessing_many_accounts_backs_off_too(cast, settings):
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS = 5
    attacker = Client(REMOTE_ADDR="198.51.100.12")
    for name in ("alice", "bob", "vic", "charlie", "no-such-user"):
        site_login(attacker, name, "wrong")
    response = site_login(attacker, "dora", PASSWORD)
    assert "Too many failed sign-ins" in response.content.decode()
    assert not signed_in(attacker)
    assert site_login(Client(REMOTE_ADDR="198.51.100.13"), "dora", PASSWORD).status_code == 302


# ------------------------------------------------------------------ back-off, not lock-out


def test_the_wait_doubles_with_each_failure_and_ends(cast, clock, settings):
    settings.FAIRSHARE_LOGIN_BACKOFF_SECONDS = 30
    settings.FAIRSHARE_LOGIN_BACKOFF_MAX_SECONDS = 100
    request = RequestFactory().post("/", REMOTE_ADDR="198.51.100.14")
    for _ in range(5):
        auth.record_failure(request, "alice")
    assert auth.check(request, "alice") == auth.Verdict(False, 30)
    clock.now += 30
    assert auth.check(request, "alice").allowed
    auth.record_failure(request, "alice")
    assert auth.check(request, "alice") == auth.Verdict(False, 60)
    clock.now += 60
    auth.record_failure(request, "alice")
    assert auth.check(request, "alice") == auth.Verdict(False, 100)  # capped
    clock.now += 100
    assert auth.check(request, "alice").allowed
    assert auth.check(request, "ALICE ").allowed  # same account, normalised


def test_signing_in_clears_the_users_failures_but_not_the_addresses(cast, clock, settings):
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS = 6
    client = Client(REMOTE_ADDR="198.51.100.15")
    for _ in range(4):
        site_login(client, "alice", "wrong")
    assert site_login(client, "alice", PASSWORD).status_code == 302
    assert auth.check(RequestFactory().post("/", REMOTE_ADDR="198.51.100.15"), "alice").allowed
    client.logout()
    for _ in range(2):
        site_login(client, "bob", "wrong")
    # Six failures from this address: spraying goes on backing off after a success.
    assert not auth.check(RequestFactory().post("/", REMOTE_ADDR="198.51.100.15"), "vic").allowed


def test_the_message_says_how_long_to_wait(cast, clock, settings):
    settings.FAIRSHARE_LOGIN_BACKOFF_SECONDS = 600
    client = Client(REMOTE_ADDR="198.51.100.16")
    for _ in range(5):
        site_login(client, "alice", "wrong")
    response = site_login(client, "alice", PASSWORD)
    assert "Wait 10 minutes" in response.content.decode()


# ------------------------------------------------------------------ the client address


@pytest.mark.parametrize(
    ("header", "hops", "proxies", "meta", "expected"),
    [
        ("", 1, [], {"HTTP_X_FORWARDED_FOR": "1.1.1.1"}, "10.0.0.5"),
        ("X-Forwarded-For", 1, [], {"HTTP_X_FORWARDED_FOR": "1.1.1.1"}, "1.1.1.1"),
        ("X-Forwarded-For", 1, [], {"HTTP_X_FORWARDED_FOR": "6.6.6.6, 2.2.2.2"}, "2.2.2.2"),
        (
            "X-Forwarded-For",
            2,
            [],
            {"HTTP_X_FORWARDED_FOR": "6.6.6.6, 2.2.2.2, 10.1.1.1"},
            "2.2.2.2",
        ),
        ("X-Forwarded-For", 2, [], {"HTTP_X_FORWARDED_FOR": "2.2.2.2"}, "10.0.0.5"),  # bypassed
        ("X-Forwarded-For", 1, [], {"HTTP_X_FORWARDED_FOR": "not-an-ip"}, "10.0.0.5"),
        ("X-Forwarded-For", 1, [], {"HTTP_X_FORWARDED_FOR": "[2001:db8::1]:443"}, "2001:db8::1"),
        ("X-Forwarded-For", 1, [], {"HTTP_X_FORWARDED_FOR": "192.0.2.1:8080"}, "192.0.2.1"),
        ("X-Forwarded-For", 1, [], {}, "10.0.0.5"),
        ("X-Real-IP", 1, [], {"HTTP_X_REAL_IP": "3.3.3.3"}, "3.3.3.3"),
        ("X-Real-IP", 1, ["10.0.0.0/24"], {"HTTP_X_REAL_IP": "3.3.3.3"}, "3.3.3.3"),
        ("X-Real-IP", 1, ["10.9.0.0/16"], {"HTTP_X_REAL_IP": "3.3.3.3"}, "10.0.0.5"),
    ],
)
def test_the_client_address_is_read_only_from_the_configured_header(
    settings, header, hops, proxies, meta, expected
):
    settings.FAIRSHARE_CLIENT_IP_HEADER = header
    settings.FAIRSHARE_TRUSTED_PROXY_HOPS = hops
    settings.FAIRSHARE_TRUSTED_PROXIES = proxies
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.5", **meta)
    assert client_ip(request) == expected


def test_the_api_throttles_anonymous_clients_by_the_same_address(settings):
    from config.api_policy import UserOrTokenRateThrottle

    settings.FAIRSHARE_CLIENT_IP_HEADER = ""
    throttle = UserOrTokenRateThrottle()
    from rest_framework.request import Request

    spoofed = Request(
        RequestFactory().get("/", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="7.7.7.7")
    )
    assert throttle.get_cache_key(spoofed, None).endswith("ip-10.0.0.5")


# ------------------------------------------- issue 27: per account, per client, 429, validators


def test_one_account_guessed_from_many_addresses_backs_off(cast, settings):
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT = 8
    for i in range(8):  # 2 guesses each from 4 addresses: under every per-address allowance
        site_login(Client(REMOTE_ADDR=f"198.51.100.{40 + i // 2}"), "alice", "wrong")
    fresh = Client(REMOTE_ADDR="192.0.2.99")
    response = site_login(fresh, "alice", PASSWORD)
    assert response.status_code == 429
    assert not signed_in(fresh)
    # Other accounts are not touched by it.
    assert site_login(Client(REMOTE_ADDR="192.0.2.99"), "bob", PASSWORD).status_code == 302


def test_the_account_back_off_ends_and_a_success_clears_it(cast, clock, settings):
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT = 3
    settings.FAIRSHARE_LOGIN_BACKOFF_SECONDS = 30
    for i in range(3):
        auth.record_failure(RequestFactory().post("/", REMOTE_ADDR=f"203.0.113.{i}"), "alice")
    elsewhere = RequestFactory().post("/", REMOTE_ADDR="192.0.2.50")
    assert auth.check(elsewhere, "alice") == auth.Verdict(False, 30)
    clock.now += 30
    assert auth.check(elsewhere, "alice").allowed
    auth.record_failure(elsewhere, "alice")
    assert not auth.check(elsewhere, "alice").allowed
    auth.record_success(elsewhere, "alice")
    assert auth.check(RequestFactory().post("/", REMOTE_ADDR="203.0.113.9"), "alice").allowed


def test_an_ipv6_client_is_one_client_across_its_64(cast, settings):
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS = 4
    for i in range(4):  # four addresses of one /64, four different accounts
        request = RequestFactory().post("/", REMOTE_ADDR=f"2001:db8:1:2::{i + 1:x}")
        auth.record_failure(request, f"user{i}")
    same_64 = RequestFactory().post("/", REMOTE_ADDR="2001:db8:1:2:ffff::1")
    assert not auth.check(same_64, "dora").allowed
    other_64 = RequestFactory().post("/", REMOTE_ADDR="2001:db8:1:3::1")
    assert auth.check(other_64, "dora").allowed
    assert auth.client_key(same_64) == "2001:db8:1:2::/64"
    mapped = RequestFactory().post("/", REMOTE_ADDR="::ffff:192.0.2.7")
    assert auth.client_key(mapped) == "192.0.2.7"


def test_failures_counted_at_once_are_all_counted(cast, monkeypatch, settings):
    """The counter is an atomic increment, not a get-then-set that loses concurrent failures."""
    import threading
    import time

    real_get = cache.get

    def slow_get(*args, **kwargs):  # widen the window a get-then-set would lose updates in
        value = real_get(*args, **kwargs)
        time.sleep(0.005)
        return value

    monkeypatch.setattr(cache, "get", slow_get)
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT = 1000
    request = RequestFactory().post("/", REMOTE_ADDR="198.51.100.60")
    start = threading.Barrier(8)

    def fail():
        start.wait()
        for _ in range(5):
            auth.record_failure(request, "alice")

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    key = auth._buckets(request, "alice")[1][0]
    assert real_get(f"{key}:n") == 40


@pytest.mark.parametrize("door", [site_login, admin_login])
def test_a_throttled_sign_in_answers_429_with_retry_after(cast, clock, settings, door):
    settings.FAIRSHARE_LOGIN_BACKOFF_SECONDS = 120
    client = Client(REMOTE_ADDR="198.51.100.61")
    for _ in range(5):
        assert door(client, "root", "wrong").status_code == 200
    response = door(client, "root", PASSWORD)
    assert response.status_code == 429
    assert response["Retry-After"] == "120"
    assert "Too many failed sign-ins" in response.content.decode()
    assert not signed_in(client)


def test_passwords_must_pass_djangos_validators(cast):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    user = get_user_model().objects.get(username="alice")
    for weak in ("password", "12345678901234", "alice-alice", "short1!"):
        with pytest.raises(ValidationError):
            validate_password(weak, user)
    validate_password("correct-horse-battery-staple", user)
    # The Django admin's password form applies them.
    admin = Client()
    admin.force_login(
        get_user_model().objects.create_superuser("super", "super@example.com", "x-unused-x")
    )
    response = admin.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": "password", "password2": "password"},
    )
    assert response.status_code == 200
    assert "This password is too common" in response.content.decode()


def test_the_shipped_deploy_and_compose_read_the_client_address_from_the_proxy_header():
    """Behind the ingress every request comes from a few addresses; without the header one of
    them would put every user in one sign-in bucket (issue 27, the high finding)."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    kustomization = yaml.safe_load((root / "deploy" / "kustomization.yaml").read_text())
    literals = [
        literal
        for generator in kustomization["configMapGenerator"]
        if generator["name"] == "fairshare"
        for literal in generator["literals"]
    ]
    assert "FAIRSHARE_CLIENT_IP_HEADER=X-Forwarded-For" in literals
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    web = compose["services"]["web"]["environment"]
    assert web["FAIRSHARE_CLIENT_IP_HEADER"].endswith("X-Forwarded-For}")
