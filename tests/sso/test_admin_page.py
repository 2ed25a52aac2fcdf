"""The site admins' page for group rules and cluster groups, and the settings' checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from quotas.models import GroupRule, TeamClusterGroup
from sso.services import sign_in
from tests.base import PASSWORD

PAGE = "/sso/groups/"
ROOT = Path(__file__).resolve().parents[2]


def test_only_site_admins_open_the_page(client, cast):
    client.force_login(cast.alice)
    assert client.get(PAGE).status_code == 403
    client.force_login(cast.root)
    assert client.get(PAGE).status_code == 200


def test_an_admin_previews_then_adds_a_rule(client, cast):
    sign_in(
        issuer="https://idp.example.test",
        claims={"sub": "s-1", "preferred_username": "kim", "groups": ["ml-team"]},
        now=timezone.now(),
    )
    client.force_login(cast.root)
    body = {"pattern": "ml-*", "team": "team-a", "role": "member"}
    preview = client.post(PAGE, {**body, "action": "preview"})
    assert preview.status_code == 200
    assert "kim" in preview.content.decode()
    assert not GroupRule.objects.exists()
    added = client.post(PAGE, {**body, "action": "add"})
    assert added.status_code == 302
    rule = GroupRule.objects.get()
    assert (rule.pattern, rule.team.slug, rule.role) == ("ml-*", "team-a", "member")
    listing = client.get(PAGE).content.decode()
    assert "ml-*" in listing and "kim" in listing
    client.post(f"/sso/groups/{rule.pk}/delete/")
    assert not GroupRule.objects.exists()


def test_a_bad_rule_shows_the_reason_and_saves_nothing(client, cast):
    client.force_login(cast.root)
    page = client.post(PAGE, {"pattern": "adm*", "site_admin": "on", "action": "add"})
    assert page.status_code == 200
    assert "exact group names only" in page.content.decode()
    assert not GroupRule.objects.exists()


def test_an_admin_binds_a_group_in_the_cluster(client, cast):
    client.force_login(cast.root)
    body = {"bind-group": "ml-team", "bind-team": "team-a", "bind-role": "member"}
    assert client.post(PAGE, {**body, "action": "bind"}).status_code == 302
    assert TeamClusterGroup.objects.get().group == "ml-team"
    page = client.post(PAGE, {**body, "bind-group": "system:masters", "action": "bind"})
    assert "Kubernetes&#x27; own" in page.content.decode()
    assert TeamClusterGroup.objects.count() == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FAIRSHARE_OIDC_ISSUER": "https://idp.example.test"}, "FAIRSHARE_OIDC_CLIENT_ID"),
        (
            {
                "FAIRSHARE_OIDC_ISSUER": "http://idp.example.test",
                "FAIRSHARE_OIDC_CLIENT_ID": "x",
                "FAIRSHARE_OIDC_CLIENT_SECRET": "y",
            },
            "https://",
        ),
        (
            {
                "FAIRSHARE_OIDC_ISSUER": "https://idp.example.test",
                "FAIRSHARE_OIDC_CLIENT_ID": "x",
                "FAIRSHARE_OIDC_CLIENT_SECRET": "y",
                "FAIRSHARE_OIDC_SCOPES": "profile,groups",
            },
            "openid",
        ),
    ],
)
def test_settings_refuse_an_incomplete_configuration(env, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSHARE_OIDC_")}
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=ROOT,
        env={**clean, "SECRET_KEY": "x" * 50, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr


def test_the_password_form_still_works_with_single_sign_on_configured(client, cast, settings):
    settings.FAIRSHARE_OIDC_ISSUER = "https://idp.example.test"
    response = client.post("/login/", {"username": "bob", "password": PASSWORD})
    assert response.status_code == 302
