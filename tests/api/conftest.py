"""Clients for every role of the cast, by name (users by session, tokens by bearer header)."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from quotas.tokens import issue_token

USER_ROLES = {
    "viewer": "vic",
    "member": "bob",
    "lead": "alice",
    "other-lead": "charlie",
    "dept-lead": "dora",
    "admin": "root",
    "nobody": "nobody",
}
TOKEN_ROLES = {
    "service-chargeback": {"kind": "service", "scopes": ["read:chargeback"]},
    "service-all": {"kind": "service", "scopes": ["read:all"]},
    "node-agent": {"kind": "node-agent", "node": "gpu-001"},
    "personal-lead": {"kind": "personal"},
}


@pytest.fixture(autouse=True)
def _fresh_throttles():
    # Throttle counters live in the cache; each test starts with a full budget.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def client_as(cast):
    """client_as("lead") → an APIClient acting as that role; "anonymous" is unauthenticated."""

    def make(role: str) -> APIClient:
        client = APIClient()
        if role == "anonymous":
            return client
        if role in USER_ROLES:
            client.force_authenticate(getattr(cast, USER_ROLES[role]))
            return client
        spec = dict(TOKEN_ROLES[role])
        owner = cast.alice if spec["kind"] == "personal" else cast.root
        issued = issue_token(owner=owner, name=role, actor=owner, **spec)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
        return client

    return make
