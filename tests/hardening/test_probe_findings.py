"""The outside probe's findings (issue 15), one test (or a few) per finding, as the probe sent
them. Sign-in throttling is in tests/config/test_signin.py, node-agent ingest in
tests/monitoring/test_ingest_trust.py, share visibility in
tests/scheduling/test_share_visibility.py, the fuzz run in tests/hardening/test_fuzz.py."""

from __future__ import annotations

import json

import pytest

from tests.hardening.conftest import client_for

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


# ------------------------------------------------------------------ 6: NUL bytes are a 400


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (
            "/api/v1/memberships/",
            {"team": "team-a\x00", "user": "nobody", "role": "viewer"},
            "team",
        ),
        (
            "/api/v1/memberships/",
            {"team": "team-a", "user": "nob\x00ody", "role": "viewer"},
            "user",
        ),
        (
            "/api/v1/quota-requests/",
            {
                "team": "\x00",
                "justification": "x",
                "lines": [{"resource": "nvidia.com/gpu", "guarantee": "1", "limit": "2"}],
            },
            "team",
        ),
        (
            "/api/v1/quota-requests/",
            {
                "team": "team-a",
                "justification": "x",
                "lines": [{"resource": "nvidia.com/gpu\x00", "guarantee": "1", "limit": "2"}],
            },
            "lines[0].resource",
        ),
    ],
)
def test_nul_bytes_in_a_body_are_a_400_naming_the_field(world, url, body, field):
    response = post_json(client_for(world, "alice"), url, body)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()


@pytest.mark.parametrize(
    "url",
    [
        "/requests/?team=%00",
        "/requests/?status=%00",
        "/api/v1/memberships/?team=%00",
        "/api/v1/gpu-samples/?uuid=a%00b",
        "/reports/?month=2025-05%00",
    ],
)
def test_nul_bytes_in_a_query_are_a_400(world, url):
    response = client_for(world, "alice").get(url)
    assert response.status_code == 400, (url, response.status_code)


def test_the_api_names_the_parameter_holding_a_nul(world):
    response = client_for(world, "alice").get("/api/v1/memberships/?team=%00")
    assert response.json() == {"errors": {"team": ["Null characters are not allowed."]}}


# ------------------------------------------------------------------ 11: no-store


@pytest.mark.parametrize("role", ["alice", "svc_all"])
@pytest.mark.parametrize(
    "url", ["/", "/teams/team-a/", "/api/v1/teams/", "/api/v1/quota-requests/"]
)
def test_authenticated_answers_are_never_stored(world, role, url):
    response = client_for(world, role).get(url)
    assert "no-store" in response.get("Cache-Control", ""), (role, url, response.status_code)
    assert "private" in response["Cache-Control"]
