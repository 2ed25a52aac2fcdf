"""The group-rule and cluster-group endpoints: site admins only, validated, audited."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from quotas.models import AuditEvent, GroupRule, TeamClusterGroup
from sso.services import sign_in

RULES = "/api/v1/group-rules/"
BINDINGS = "/api/v1/cluster-groups/"


@pytest.fixture
def api(cast):
    client = APIClient()
    client.force_authenticate(cast.root)
    return client


def test_outsiders_cannot_see_or_write_rules(cast):
    client = APIClient()
    client.force_authenticate(cast.alice)  # a lead, not a site admin
    assert client.get(RULES).status_code == 403
    body = {"pattern": "g", "team": "team-a", "role": "lead"}
    assert client.post(RULES, body, format="json").status_code == 403
    assert client.post(BINDINGS, {"team": "team-a", "group": "g"}, format="json").status_code == 403
    assert not GroupRule.objects.exists()


def test_an_admin_creates_previews_and_deletes_a_rule(api, cast):
    sign_in(
        issuer="https://idp.example.test",
        claims={"sub": "s-1", "preferred_username": "kim", "groups": ["ml-team", "other"]},
        now=timezone.now(),
    )
    preview = api.post(RULES + "preview/", {"pattern": "ml-*"}, format="json")
    assert preview.status_code == 200
    assert preview.json() == [{"username": "kim", "groups": ["ml-team"]}]
    created = api.post(RULES, {"pattern": "ml-*", "team": "team-a", "role": "member"})
    assert created.status_code == 201, created.json()
    rule_id = created.json()["id"]
    assert created.json()["team"] == "team-a"
    assert api.get(f"{RULES}{rule_id}/matches/").json() == [
        {"username": "kim", "groups": ["ml-team"]}
    ]
    assert AuditEvent.objects.filter(object_type="quotas.GroupRule", verb="create").exists()
    assert api.delete(f"{RULES}{rule_id}/").status_code == 204
    assert not GroupRule.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"pattern": "admins-*", "site_admin": True}, "pattern"),
        ({"pattern": "g", "team": "team-a"}, "role"),
        ({"pattern": "g", "role": "lead"}, "team"),
        ({"pattern": "bad\x01name", "team": "team-a", "role": "lead"}, "pattern"),
        ({"pattern": "g", "team": "no-such-team", "role": "lead"}, "team"),
    ],
)
def test_a_bad_rule_is_refused_with_its_field(api, body, field):
    response = api.post(RULES, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"], response.json()
    assert not GroupRule.objects.exists()


def test_an_admin_binds_a_group_in_a_team(api, cast):
    created = api.post(BINDINGS, {"team": "team-a", "group": "ml-team", "role": "member"})
    assert created.status_code == 201, created.json()
    assert TeamClusterGroup.objects.get().group == "ml-team"
    refused = api.post(BINDINGS, {"team": "team-a", "group": "system:masters", "role": "lead"})
    assert refused.status_code == 400
    assert "group" in refused.json()["errors"]
    assert TeamClusterGroup.objects.count() == 1
