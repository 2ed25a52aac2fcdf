"""Sign-in throttling: one rule for every way in (the site's login page, the Django admin's).

The rule is enforced in the authentication backend (:class:`ThrottledModelBackend`), so every
caller of ``django.contrib.auth.authenticate`` gets it; the two login forms only check first to
say why they refuse (:class:`SignInThrottleMixin`), and the login views answer such a refusal
with 429 and ``Retry-After``.

Failures are counted in the cache (shared across processes when ``REDIS_URL`` is set) with
atomic increments (Redis ``INCR``; a lock in the local-memory cache), under three keys. The
client is the address :func:`config.net.client_ip` gives (a trusted proxy's header when the
operator configured one, as the shipped deploy/ and compose do), an IPv6 client by its /64,
since one host holds a whole /64:

* **username + client**: after ``FAIRSHARE_LOGIN_MAX_FAILURES`` failures (5), each further
  attempt must wait a back-off after the previous failure: ``FAIRSHARE_LOGIN_BACKOFF_SECONDS``
  (30) for the first, doubling with each failure, at most ``FAIRSHARE_LOGIN_BACKOFF_MAX_SECONDS``
  (900). Someone guessing one account is slowed to a few tries an hour; the same person on
  another machine, and everyone else, signs in as usual.
* **username** alone, wherever the attempts come from, with a larger allowance
  (``FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT``, 20) and the same back-off: one password
  guessed from many addresses is slowed to the same few tries an hour.
* **client** alone, with a larger allowance (``FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS``,
  50) and the same back-off: one machine guessing many accounts (password spraying) is slowed
  too, without one bad typist holding up their colleagues behind the same NAT.

Back-off, not lock-out: nobody is refused for longer than the maximum back-off, and a success
clears that username's counters (not the client's, or a spraying attacker with one valid
account could reset it). Failures are forgotten after twice the maximum back-off without a new
one. Unknown usernames count exactly like real ones, so the answers don't reveal which exist.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import PermissionDenied

from config.net import client_ip

_clock = time.time  # tests replace it


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int = 0  # seconds until the next attempt is allowed


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def _backoff(failures: int, free: int) -> float:
    """Seconds to wait after the last failure, once ``failures`` reached ``free``."""
    if failures < free:
        return 0.0
    base = _setting("FAIRSHARE_LOGIN_BACKOFF_SECONDS", 30)
    cap = _setting("FAIRSHARE_LOGIN_BACKOFF_MAX_SECONDS", 900)
    exponent = min(failures - free, 32)
    return float(min(cap, base * 2**exponent))


def _key(kind: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:40]
    return f"signin:{kind}:{digest}"


def _normal(username: str | None) -> str:
    return (username or "").strip().lower()[:150]


def client_key(request) -> str:
    """The client as the throttle counts it: its address, an IPv6 address by its /64."""
    address = client_ip(request)
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.version == 4:
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.ip_network(f"{parsed}/64", strict=False))


def _buckets(request, username: str | None) -> list[tuple[str, int]]:
    client = client_key(request)
    name = _normal(username)
    return [
        (_key("user", name, client), _setting("FAIRSHARE_LOGIN_MAX_FAILURES", 5)),
        (_key("account", name), _setting("FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT", 20)),
        (_key("addr", client), _setting("FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS", 50)),
    ]


def check(request, username: str | None) -> Verdict:
    """May this username try to sign in from this request's address now?"""
    now = _clock()
    buckets = _buckets(request, username)
    stored = cache.get_many([f"{key}:n" for key, _ in buckets] + [f"{key}:t" for key, _ in buckets])
    wait = 0.0
    for key, free in buckets:
        failures = int(stored.get(f"{key}:n") or 0)
        last = float(stored.get(f"{key}:t") or 0.0)
        remaining = last + _backoff(failures, free) - now
        wait = max(wait, remaining)
    if wait > 0:
        return Verdict(False, math.ceil(wait))
    return Verdict(True)


def _increment(key: str, ttl: int) -> int:
    """Add one to the counter ``key`` atomically (Redis ``INCR``), creating it at 1."""
    if cache.add(key, 1, ttl):
        return 1
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add() and incr()
        cache.add(key, 1, ttl)
        return 1
    cache.touch(key, ttl)
    return count


def record_failure(request, username: str | None) -> None:
    now = _clock()
    ttl = 2 * _setting("FAIRSHARE_LOGIN_BACKOFF_MAX_SECONDS", 900)
    for key, _free in _buckets(request, username):
        _increment(f"{key}:n", ttl)
        cache.set(f"{key}:t", now, ttl)


def record_success(request, username: str | None) -> None:
    keys = [key for key, _free in _buckets(request, username)[:2]]
    cache.delete_many([f"{key}:{part}" for key in keys for part in ("n", "t")])


class ThrottledModelBackend(ModelBackend):
    """ModelBackend behind the sign-in throttle: a throttled attempt is refused before the
    password is even checked (``PermissionDenied`` stops ``authenticate()`` at once)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(self.get_user_model_username_field())
        if username is None or password is None:
            return None
        if not check(request, username).allowed:
            raise PermissionDenied("Too many failed sign-ins.")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            record_failure(request, username)
        else:
            record_success(request, username)
        return user

    @staticmethod
    def get_user_model_username_field() -> str:
        from django.contrib.auth import get_user_model

        return get_user_model().USERNAME_FIELD


def _wait_text(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} seconds"
    return f"{math.ceil(seconds / 60)} minutes"


class SignInThrottleMixin:
    """For AuthenticationForm subclasses: say "wait" instead of "wrong password" when the
    throttle refuses (the backend enforces it either way)."""

    throttle_message = "Too many failed sign-ins. Wait %(wait)s and try again."
    retry_after = 0  # seconds, when the throttle refused

    def clean(self):
        username = self.cleaned_data.get("username")
        if username is not None and self.cleaned_data.get("password") is not None:
            verdict = check(self.request, username)
            if not verdict.allowed:
                self.retry_after = verdict.retry_after
                raise forms.ValidationError(
                    self.throttle_message,
                    code="throttled",
                    params={"wait": _wait_text(verdict.retry_after)},
                )
        return super().clean()


class ThrottledAuthenticationForm(SignInThrottleMixin, AuthenticationForm):
    """The site's login form."""


class ThrottledAdminAuthenticationForm(SignInThrottleMixin, AdminAuthenticationForm):
    """The Django admin's login form (``admin.site.login_form``)."""


def too_many_requests(response):
    """A login page whose form the throttle refused becomes 429 with ``Retry-After``
    (RFC 6585 section 4), so scripts and proxies see the refusal; the page still says why."""
    context = getattr(response, "context_data", None) or {}
    form = context.get("form")
    wait = getattr(form, "retry_after", 0)
    if wait:
        response.status_code = 429
        response["Retry-After"] = str(wait)
    return response


class ThrottledLoginView(LoginView):
    """The site's login view: 429 with ``Retry-After`` when the throttle refuses."""

    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form):
        return too_many_requests(super().form_invalid(form))


def admin_login(request, extra_context=None):
    """The Django admin's login (``admin.site.login``), answering 429 like the site's."""
    from django.contrib import admin

    return too_many_requests(admin.site.login(request, extra_context))
