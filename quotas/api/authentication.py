"""Bearer-token authentication and token-aware permissions for the REST API."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from quotas.models import ApiToken
from quotas.tokens import authenticate_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer fs_…``. Sets ``request.auth`` to the ApiToken."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        try:
            raw = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Malformed token.") from None
        token = authenticate_token(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword


def token_of(request) -> ApiToken | None:
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiToken) else None


class TokenKindPolicy(permissions.BasePermission):
    """Node-agent tokens may only reach views that declare ``allow_node_agent = True``; service
    tokens are read-only except on views that declare the scope they need for writing
    (``write_scope``), and reach a view only when it lists one of their scopes in
    ``read_scopes`` (``read:all`` reaches every read). Views that declare
    ``people_only = True`` (the token endpoints) refuse service and node-agent tokens
    altogether: no scope lets a token read other tokens."""

    message = "This token may not be used here."

    def has_permission(self, request, view) -> bool:
        token = token_of(request)
        if token is None or token.kind == ApiToken.Kind.PERSONAL:
            return True
        if getattr(view, "people_only", False):
            return False
        scopes = set(token.scopes)
        if token.kind == ApiToken.Kind.NODE_AGENT:
            return bool(getattr(view, "allow_node_agent", False))
        if request.method in permissions.SAFE_METHODS:
            wanted = set(getattr(view, "read_scopes", ()))
            return "read:all" in scopes or bool(scopes & wanted)
        write_scope = getattr(view, "write_scope", None)
        return bool(write_scope) and write_scope in scopes


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describes ApiTokenAuthentication in the OpenAPI schema (HTTP bearer)."""

    target_class = ApiTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A Fairshare API token: `Authorization: Bearer fs_…`.",
        }
