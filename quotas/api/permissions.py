"""Permissions of the REST API (on top of IsAuthenticated and TokenKindPolicy from settings).

Reads are scoped by ``visible_to`` in each ``get_queryset`` (outsiders get 404); these classes
decide who may write.
"""

from __future__ import annotations

from rest_framework import permissions

from quotas.api.authentication import TokenKindPolicy, token_of
from quotas.models import ApiToken
from quotas.querysets import is_site_admin


def with_defaults(*extra) -> list:
    """The default permissions (authenticated, token kind policy) plus ``extra``.

    A view's ``permission_classes`` replaces the defaults, so views that add a rule must keep
    them explicitly; this keeps that impossible to forget.
    """
    return [permissions.IsAuthenticated, TokenKindPolicy, *extra]


class IsSiteAdmin(permissions.BasePermission):
    """Every method: site admins only."""

    message = "Only site admins may do this."

    def has_permission(self, request, view) -> bool:
        return is_site_admin(request.user)


class IsSiteAdminOrReadOnly(permissions.BasePermission):
    """Reads for everyone who reached the view; writes for site admins."""

    message = "Only site admins may change this."

    def has_permission(self, request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or is_site_admin(request.user)


class IsNodeAgentToken(permissions.BasePermission):
    """Only node-agent tokens (GPU sample ingest)."""

    message = "Only node-agent tokens may post GPU samples."

    def has_permission(self, request, view) -> bool:
        token = token_of(request)
        return token is not None and token.kind == ApiToken.Kind.NODE_AGENT
