from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from quotas.exceptions import PermissionDenied
from quotas.models import ApiToken
from quotas.tokens import authenticate_token, hash_token, issue_token, revoke_token

pytestmark = pytest.mark.django_db


def test_a_personal_token_is_stored_hashed_and_shown_once(cast):
    issued = issue_token(owner=cast.alice, name="laptop")
    assert issued.raw.startswith("fs_")
    token = ApiToken.objects.get()
    assert token.key_hash == hash_token(issued.raw)
    assert issued.raw not in str(ApiToken.objects.values_list())
    assert authenticate_token(issued.raw) == token


def test_unknown_revoked_and_expired_tokens_do_not_authenticate(cast):
    issued = issue_token(owner=cast.alice, name="x", expires_at=timezone.now() + timedelta(hours=1))
    assert authenticate_token(issued.raw + "x") is None
    assert authenticate_token("not-a-token") is None
    assert authenticate_token(issued.raw, now=timezone.now() + timedelta(hours=2)) is None
    revoke_token(issued.token.pk, actor=cast.alice)
    assert authenticate_token(issued.raw) is None


def test_a_deactivated_user_token_stops_working(cast):
    issued = issue_token(owner=cast.bob, name="x")
    cast.bob.is_active = False
    cast.bob.save()
    assert authenticate_token(issued.raw) is None


def test_only_admins_issue_service_and_node_tokens(cast):
    with pytest.raises(PermissionDenied):
        issue_token(owner=cast.alice, name="x", kind="service", scopes=["read:chargeback"])
    issued = issue_token(
        owner=cast.root, name="finance", kind="service", scopes=["read:chargeback"], actor=cast.root
    )
    assert issued.token.scopes == ["read:chargeback"]
    node = issue_token(owner=cast.root, name="n1", kind="node-agent", node="gpu-001")
    assert node.token.scopes == ["ingest:gpu"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x", "kind": "service", "scopes": ["write:everything"]}, "scopes"),
        ({"name": "x", "kind": "node-agent"}, "node"),
        ({"name": "x", "scopes": ["read:all"]}, "scopes"),
    ],
)
def test_bad_token_requests_name_the_field(cast, kwargs, field):
    with pytest.raises(ValidationError) as info:
        issue_token(owner=cast.root, **kwargs)
    assert field in info.value.message_dict


def test_others_cannot_revoke_a_token(cast):
    issued = issue_token(owner=cast.alice, name="x")
    with pytest.raises(PermissionDenied):
        revoke_token(issued.token.pk, actor=cast.charlie)
    revoke_token(issued.token.pk, actor=cast.root)
    assert authenticate_token(issued.raw) is None


# ------------------------------------------------------------------ hygiene (issue 15, finding 9)


def test_a_token_without_an_expiry_gets_the_default_lifetime(cast, settings):
    settings.FAIRSHARE_TOKEN_DEFAULT_DAYS = 30
    now = timezone.now()
    issued = issue_token(owner=cast.alice, name="laptop", now=now)
    assert issued.token.expires_at == now + timedelta(days=30)
    assert authenticate_token(issued.raw, now=now + timedelta(days=29)) is not None
    assert authenticate_token(issued.raw, now=now + timedelta(days=30)) is None


@pytest.mark.parametrize("days", [-1, 0, 366])
def test_an_expiry_in_the_past_or_beyond_the_longest_life_is_refused(cast, days):
    now = timezone.now()
    with pytest.raises(ValidationError) as info:
        issue_token(owner=cast.alice, name="x", expires_at=now + timedelta(days=days), now=now)
    assert "expires_at" in info.value.message_dict
    assert not ApiToken.objects.exists()


def test_a_token_stored_without_an_expiry_stops_after_the_longest_life(cast, settings):
    settings.FAIRSHARE_TOKEN_MAX_DAYS = 10
    issued = issue_token(owner=cast.alice, name="old")
    ApiToken.objects.filter(pk=issued.token.pk).update(expires_at=None)
    created = ApiToken.objects.get().created
    assert authenticate_token(issued.raw, now=created + timedelta(days=9)) is not None
    assert authenticate_token(issued.raw, now=created + timedelta(days=10)) is None


def test_a_token_cannot_create_a_token(cast):
    first = issue_token(owner=cast.alice, name="laptop")
    with pytest.raises(PermissionDenied):
        issue_token(owner=cast.alice, name="copy", via_token=first.token)
    assert ApiToken.objects.count() == 1


def test_through_the_api_a_personal_token_cannot_mint_another(cast):
    from rest_framework.test import APIClient

    first = issue_token(owner=cast.alice, name="laptop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {first.raw}")
    response = client.post("/api/v1/tokens/", {"name": "outlives-revocation"}, format="json")
    assert response.status_code == 403
    assert ApiToken.objects.count() == 1
    # Signed in with a session, alice creates one as before.
    client = APIClient()
    client.force_authenticate(cast.alice)
    assert client.post("/api/v1/tokens/", {"name": "ok"}, format="json").status_code == 201


def test_through_the_api_an_admins_token_cannot_mint_a_service_token(cast):
    from rest_framework.test import APIClient

    admin_token = issue_token(owner=cast.root, name="root-laptop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_token.raw}")
    body = {"name": "x", "kind": "service", "scopes": ["read:all"]}
    assert client.post("/api/v1/service-tokens/", body, format="json").status_code == 403


@pytest.mark.parametrize("url", ["/api/v1/tokens/", "/api/v1/service-tokens/"])
def test_a_read_all_service_token_lists_no_tokens(cast, url):
    from rest_framework.test import APIClient

    issue_token(owner=cast.alice, name="laptop")
    service = issue_token(
        owner=cast.root, name="reader", kind="service", scopes=["read:all"], actor=cast.root
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {service.raw}")
    assert client.get(url).status_code == 403
    assert client.get("/api/v1/teams/").status_code == 200  # still reads everything else
