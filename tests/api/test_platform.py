"""Tokens, GPU ingest, sync triggers, throttling, the error shape and the permission guard."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.permissions import IsAuthenticated
from rest_framework.test import APIClient

from config.api import flatten_errors
from config.api_policy import UserOrTokenRateThrottle
from monitoring.models import GpuSample
from quotas.api.authentication import TokenKindPolicy
from quotas.models import ApiToken
from quotas.tokens import issue_token
from scheduling.models import SyncRun
from tests.monitoring.gpu_inventory import node_object, place, pod_object

pytestmark = pytest.mark.django_db


# ---------------------------------------------------------------- tokens


def test_a_personal_token_is_shown_once_then_works_until_revoked(cast, client_as):
    client = client_as("lead")
    created = client.post(reverse("quotas-api:token-list"), {"name": "laptop"}, format="json")
    assert created.status_code == 201
    raw = created.json()["token"]
    assert raw.startswith("fs_") and created.json()["prefix"] in raw
    listed = client.get(reverse("quotas-api:token-list")).json()["results"]
    assert [t["name"] for t in listed] == ["laptop"]
    assert "token" not in listed[0]

    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert bearer.get(reverse("quotas-api:team-list")).status_code == 200
    revoke = reverse("quotas-api:token-revoke", args=[created.json()["id"]])
    assert client_as("member").post(revoke).status_code == 404
    assert client.post(revoke).json()["revoked_at"]
    refused = bearer.get(reverse("quotas-api:team-list"))
    assert refused.status_code == 401
    assert refused.json() == {"errors": {"detail": ["Invalid, expired or revoked token."]}}


def test_only_admins_manage_service_tokens(cast, client_as):
    url = reverse("quotas-api:servicetoken-list")
    payload = {"name": "finance", "kind": "service", "scopes": ["read:chargeback"]}
    assert client_as("lead").post(url, payload, format="json").status_code == 403
    assert client_as("lead").get(url).status_code == 403
    created = client_as("admin").post(url, payload, format="json")
    assert created.status_code == 201
    assert (created.json()["scopes"], created.json()["kind"]) == (["read:chargeback"], "service")
    node = client_as("admin").post(url, {"name": "n", "kind": "node-agent"}, format="json")
    assert (node.status_code, list(node.json()["errors"])) == (400, ["node"])
    bad = client_as("admin").post(url, payload | {"scopes": ["write:all"]}, format="json")
    assert (bad.status_code, list(bad.json()["errors"])) == (400, ["scopes[0]"])


def test_service_tokens_are_read_only(cast, client_as):
    client = client_as("service-all")
    assert client.get(reverse("quotas-api:team-list")).status_code == 200
    response = client.post(reverse("quotas-api:token-list"), {"name": "more"}, format="json")
    assert response.status_code == 403


# ---------------------------------------------------------------- GPU ingest


TAKEN = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _gpu_inventory(db):
    # The latest collection places GPUs and team-a's pod p (UID u) on gpu-001.
    place([node_object("gpu-001")], [pod_object("gpu-001", "team-a-ml", "p", uid="u")])


def _batch(node: str) -> dict:
    return {
        "node": node,
        "agent": {"version": "0.1.0", "dropped_samples": 0, "skipped_samples": 0},
        "samples": [
            {
                "ts": TAKEN.isoformat(),
                "uuid": "GPU-1",
                "index": 0,
                "model": "NVIDIA H100 80GB HBM3",
                "util_gpu": 87,
                "util_mem": 40,
                "mem_used": 1,
                "mem_total": 2,
                "power_w": 600.5,
                "temp_c": 60,
                "processes": [
                    {"pid": 1, "pod_uid": "u", "namespace": "team-a-ml", "pod": "p", "mem_used": 1}
                ],
            }
        ],
    }


def test_a_node_agent_posts_samples_for_its_own_node(cast, client_as):
    url = reverse("monitoring-api:gpusample-ingest")
    agent = client_as("node-agent")
    response = agent.post(url, _batch("gpu-001"), format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["accepted"], response.json()["node"]) == (1, "gpu-001")
    sample = GpuSample.objects.get()
    assert (sample.team, sample.taken_at) == (cast.team_a, TAKEN)
    # ...and may do nothing else.
    assert agent.get(reverse("monitoring-api:gpusample-list")).status_code == 403
    assert agent.get(reverse("quotas-api:team-list")).status_code == 403


def test_a_node_agent_cannot_report_for_another_node(cast, client_as):
    response = client_as("node-agent").post(
        reverse("monitoring-api:gpusample-ingest"), _batch("gpu-999"), format="json"
    )
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["node"]
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize("role", ["admin", "lead", "service-all"])
def test_only_node_agent_tokens_ingest(cast, client_as, role):
    response = client_as(role).post(
        reverse("monitoring-api:gpusample-ingest"), _batch("gpu-001"), format="json"
    )
    assert response.status_code == 403


# ---------------------------------------------------------------- sync runs


def test_an_admin_triggers_a_sync_and_gets_202_with_the_run_url(cast, client_as, monkeypatch):
    enqueued = []
    monkeypatch.setattr("scheduling.sync.runs._enqueue", enqueued.append)
    client = client_as("admin")
    response = client.post(reverse("scheduling-api:syncrun-list"), {"dry_run": True}, format="json")
    assert response.status_code == 202
    run = SyncRun.objects.get()
    assert (run.dry_run, run.trigger, run.requested_by) == (True, "api", cast.root)
    assert response.json()["url"].endswith(f"/api/v1/sync-runs/{run.pk}/")
    assert response["Location"] == response.json()["url"]
    assert client.get(response.json()["url"]).json()["status"] == "queued"
    assert client.get(reverse("scheduling-api:syncitem-list"), {"run": run.pk}).status_code == 200


@pytest.mark.parametrize("role", ["lead", "member", "service-all"])
def test_sync_runs_are_for_admins(cast, client_as, role):
    client = client_as(role)
    assert client.post(reverse("scheduling-api:syncrun-list"), {}).status_code == 403
    expected = 200 if role == "service-all" else 403
    # A read:all service token owned by an admin reads runs; people who aren't admins do not.
    assert client.get(reverse("scheduling-api:syncrun-list")).status_code == expected


def test_current_shares_come_from_the_latest_computation_only(cast, client_as):
    from django.utils import timezone

    from scheduling.models import ShareComputation, ShareSnapshot

    old = ShareComputation.objects.create(computed_at=timezone.now())
    new = ShareComputation.objects.create(computed_at=timezone.now())
    for computation, share in ((old, 0.1), (new, 0.2)):
        ShareSnapshot.objects.create(
            computation=computation,
            computed_at=computation.computed_at,
            team=cast.team_a,
            usage={"memory": str(64 * 2**30)},
            dominant_share=share,
        )
    body = client_as("member").get(reverse("scheduling-api:sharesnapshot-current")).json()
    assert [(s["dominant_share"], s["usage"]) for s in body["results"]] == [
        (0.2, {"memory": "64Gi"})
    ]


# ---------------------------------------------------------------- errors and throttling


def test_throttled_requests_get_429_in_the_error_shape(cast, client_as, monkeypatch):
    monkeypatch.setattr(UserOrTokenRateThrottle, "THROTTLE_RATES", {"user": "2/min"})
    client = client_as("lead")
    url = reverse("quotas-api:team-list")
    assert [client.get(url).status_code for _ in range(2)] == [200, 200]
    response = client.get(url)
    assert response.status_code == 429
    assert response.json()["errors"]["detail"][0].startswith("Request was throttled")
    assert int(response["Retry-After"]) > 0
    # Another caller has its own budget; another personal token of the same user does not
    # (issue 27: more tokens are not more requests).
    assert client_as("member").get(url).status_code == 200
    assert client_as("personal-lead").get(url).status_code == 429


def test_errors_are_flattened_into_field_paths():
    nested = {
        "lines": [{}, {"limit": ["Bad."]}],
        "non_field_errors": ["Nope."],
        "adjustments": {"nvidia.com/gpu": {"guarantee": ["Bad too."]}},
    }
    assert flatten_errors(nested) == {
        "lines[1].limit": ["Bad."],
        "detail": ["Nope."],
        "adjustments.nvidia.com/gpu.guarantee": ["Bad too."],
    }


def _api_views():
    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and (prefix + str(p.pattern)).startswith("api/v1/"):
                yield prefix + str(p.pattern), p.callback

    return list(walk(get_resolver().url_patterns))


def test_every_api_view_keeps_authentication_and_the_token_policy():
    views = _api_views()
    assert len(views) > 20
    for route, callback in views:
        cls = callback.cls
        actions = getattr(callback, "actions", {}) or {"get": None}
        for handler in actions.values():
            kwargs = getattr(getattr(cls, handler, None), "kwargs", {}) if handler else {}
            classes = kwargs.get("permission_classes", cls.permission_classes)
            assert IsAuthenticated in classes, route
            assert TokenKindPolicy in classes, route


def test_token_fixtures_build_real_tokens(cast):
    issued = issue_token(owner=cast.root, name="x", kind="service", scopes=["read:all"])
    assert ApiToken.objects.get(pk=issued.token.pk).kind == "service"
