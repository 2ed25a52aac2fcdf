"""Sign-in with throttling: after too many failures for a username or an address, refuse for a
while (per cache: shared across processes when REDIS_URL is set)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache


def _keys(request, username: str) -> list[str]:
    address = request.META.get("REMOTE_ADDR", "") if request else ""
    return [f"login-fail:user:{username.lower()}", f"login-fail:addr:{address}"]


class ThrottledAuthenticationForm(AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": "Too many failed sign-ins. Wait %(minutes)s minutes and try again.",
    }

    def clean(self):
        username = (self.cleaned_data.get("username") or "")[:150]
        limit = getattr(settings, "FAIRSHARE_LOGIN_MAX_FAILURES", 5)
        window = getattr(settings, "FAIRSHARE_LOGIN_LOCKOUT_SECONDS", 900)
        keys = _keys(self.request, username)
        if any((cache.get(key) or 0) >= limit for key in keys):
            raise forms.ValidationError(
                self.error_messages["throttled"],
                code="throttled",
                params={"minutes": max(1, window // 60)},
            )
        try:
            return super().clean()
        except forms.ValidationError:
            for key in keys:
                cache.add(key, 0, window)
                try:
                    cache.incr(key)
                except ValueError:
                    cache.set(key, 1, window)
            raise
