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
