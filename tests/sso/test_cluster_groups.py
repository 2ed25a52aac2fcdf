"""A team's identity-provider groups in its RoleBindings, with the API server's group prefix."""

from __future__ import annotations

import pytest

from quotas.groups import add_cluster_group
from quotas.models import Namespace
from scheduling.desired import build_cluster_spec
from scheduling.domain.render import render


def bindings(spec, namespace: str) -> dict[str, list[dict]]:
    return {
        m["metadata"]["name"]: m["subjects"]
        for m in render(spec)
        if m["kind"] == "RoleBinding" and m["metadata"]["namespace"] == namespace
    }


@pytest.fixture
def team_ns(cast):
    Namespace.objects.get_or_create(name="team-a-train", defaults={"team": cast.team_a})
    return "team-a-train"


def test_rolebindings_carry_the_teams_groups_with_the_prefix(cast, settings, team_ns):
    settings.FAIRSHARE_OIDC_GROUP_PREFIX = "oidc:"
    add_cluster_group(cast.team_a, group="ml-leads", role="lead", actor=cast.root)
    add_cluster_group(cast.team_a, group="ml-team", role="member", actor=cast.root)
    found = bindings(build_cluster_spec(), team_ns)
    group = {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io"}
    assert {**group, "name": "oidc:ml-leads"} in found["fairshare-lead"]
    assert {**group, "name": "oidc:ml-team"} in found["fairshare-member"]
    assert {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"} in found[
        "fairshare-lead"
    ]
    assert all(s["name"] != "oidc:ml-team" for s in found["fairshare-lead"])


def test_without_groups_the_rolebindings_bind_users_only(cast, team_ns):
    found = bindings(build_cluster_spec(), team_ns)
    assert found
    assert all(s["kind"] == "User" for subjects in found.values() for s in subjects)


def test_the_prefix_can_be_empty(cast, settings, team_ns):
    settings.FAIRSHARE_OIDC_GROUP_PREFIX = ""
    add_cluster_group(cast.team_a, group="ml-team", role="viewer", actor=cast.root)
    names = [s["name"] for s in bindings(build_cluster_spec(), team_ns)["fairshare-viewer"]]
    assert "ml-team" in names


def test_a_prefix_that_lands_in_system_groups_is_never_bound(cast, settings, team_ns):
    settings.FAIRSHARE_OIDC_GROUP_PREFIX = "system:"
    add_cluster_group(cast.team_a, group="masters", role="lead", actor=cast.root)
    found = bindings(build_cluster_spec(), team_ns)
    assert all(not s["name"].startswith("system:") for v in found.values() for s in v)
