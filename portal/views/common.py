"""Helpers shared by the portal's views."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as HttpForbidden
from django.utils.http import url_has_allowed_host_and_scheme

from quotas.querysets import is_site_admin


def require_admin(user) -> None:
    if not is_site_admin(user):
        raise HttpForbidden("Only site admins may open this page.")


def safe_next(request, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default
