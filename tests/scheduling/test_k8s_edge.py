"""The Kubernetes edge (kube) against the fake API server, through the real client."""

from __future__ import annotations

import socket

import pytest
from kubernetes.client.exceptions import ApiException

from kube import errors
from kube.apply import call_with_retry, delete, server_side_apply
from kube.client import KINDS, build_api_client, kind_info
from kube.errors import (
    DomainError,
    K8sConfigError,
    K8sConflict,
    K8sError,
    K8sNotFound,
    K8sPermanent,
    K8sTransient,
)
from kube.observe import list_managed, list_raw
from scheduling.domain.backends import BACKENDS

# The lead registers this plugin in tests/conftest.py; naming it here too is harmless (pytest
# registers a plugin once) and lets this module run on its own.
pytest_plugins = ["tests.kubeapi.fixtures"]

MANAGED = {"app.kubernetes.io/managed-by": "fairshare", "fairshare.io/team": "team-a"}


@pytest.fixture
def api(kubeapi):
    api_client = build_api_client("kubeconfig", kubeconfig=kubeapi.kubeconfig_path, timeout=2)
    yield api_client
    api_client.close()


def queue(name="team-a", weight=2):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "labels": dict(MANAGED)},
        "spec": {"weight": weight, "capability": {"nvidia.com/gpu": "8"}, "reclaimable": True},
    }


def quota(namespace="team-a", gpus="8"):
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "fairshare", "namespace": namespace, "labels": dict(MANAGED)},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus, "requests.cpu": "64"}},
    }


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


# ------------------------------------------------------------------ client


def test_it_builds_a_client_from_an_explicit_kubeconfig(kubeapi, api):
    assert list_managed(api, "Namespace") == []
    assert api.configuration.host == kubeapi.url


def test_it_builds_a_client_from_the_kubeconfig_env_var(kubeapi, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubeapi.kubeconfig_path)

    api_client = build_api_client("kubeconfig")

    assert api_client.configuration.host == kubeapi.url
    api_client.close()


@pytest.mark.parametrize(
    ("mode", "message"),
    [("disabled", "disabled"), ("snapshot:/tmp/x.json", "unknown Kubernetes client mode")],
)
def test_it_refuses_modes_without_an_api_client(mode, message):
    with pytest.raises(K8sConfigError, match=message):
        build_api_client(mode)


def test_it_says_which_kubeconfig_is_missing(tmp_path):
    missing = str(tmp_path / "nope")

    with pytest.raises(K8sConfigError, match="no kubeconfig file at"):
        build_api_client("kubeconfig", kubeconfig=missing)


def test_it_explains_that_in_cluster_mode_needs_a_pod(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    with pytest.raises(K8sConfigError, match="in-cluster"):
        build_api_client("in-cluster")


def test_it_knows_where_each_managed_kind_lives():
    assert kind_info("Queue").path() == "/apis/scheduling.volcano.sh/v1beta1/queues"
    assert kind_info("ResourceQuota").path("team-a", "fairshare") == (
        "/api/v1/namespaces/team-a/resourcequotas/fairshare"
    )
    assert kind_info("RoleBinding").path() == "/apis/rbac.authorization.k8s.io/v1/rolebindings"
    assert kind_info("LocalQueue").path("team-a", "default") == (
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/default"
    )
    assert kind_info("ClusterQueue").path() == "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
    # The registry is both backends' kinds, no more (each sync lists only its backend's).
    assert set(KINDS) == set(BACKENDS["volcano"].kinds) | set(BACKENDS["kueue"].kinds)
    assert set(BACKENDS["volcano"].kinds) == {
        "Namespace",
        "ResourceQuota",
        "LimitRange",
        "Role",
        "RoleBinding",
        "PriorityClass",
        "Queue",
    }
    with pytest.raises(ValueError, match="not a kind Fairshare manages"):
        kind_info("Pod")


# ------------------------------------------------------------------ apply


def test_it_creates_with_server_side_apply_then_is_idempotent(kubeapi, api):
    created = server_side_apply(api, queue())
    # (Volcano's queue controller then patches spec.parent: root and opens the queue.)
    kubeapi.controller_step()
    before = kubeapi.get("Queue", "team-a")["metadata"]["resourceVersion"]
    again = server_side_apply(api, queue())

    assert created["spec"]["weight"] == 2
    assert again["metadata"]["resourceVersion"] == before
    stored = kubeapi.get("Queue", "team-a")
    managers = [e["manager"] for e in stored["metadata"]["managedFields"]]
    assert managers == ["fairshare", "queue-controller"]
    assert kubeapi.counts[("apply", "Queue")] == 2


def test_it_updates_a_field_another_manager_set(kubeapi, api):
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    server_side_apply(api, quota(gpus="4"), field_manager="kubectl")

    updated = server_side_apply(api, quota(gpus="8"))

    assert updated["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"


def test_it_reports_a_conflict_when_not_forcing(api):
    server_side_apply(api, queue(weight=2), field_manager="kubectl")

    with pytest.raises(K8sConflict, match="conflict"):
        server_side_apply(api, queue(weight=5), force=False)


def test_it_stores_nothing_on_a_dry_run_apply(kubeapi, api):
    answer = server_side_apply(api, queue(), dry_run=True)

    assert answer["spec"]["weight"] == 2
    assert kubeapi.get("Queue", "team-a") is None
    assert kubeapi.writes() == 0


def test_it_refuses_a_manifest_without_its_namespace(api):
    body = quota()
    del body["metadata"]["namespace"]

    with pytest.raises(ValueError, match=r"no metadata\.namespace"):
        server_side_apply(api, body)


def test_it_raises_permanent_with_causes_for_an_invalid_manifest(api):
    body = queue()
    body["spec"]["weight"] = 70000

    with pytest.raises(K8sPermanent) as exc:
        server_side_apply(api, body)

    assert exc.value.status == 422
    assert exc.value.reason == "Invalid"
    assert [c["field"] for c in exc.value.causes] == ["spec.weight"]
    assert isinstance(exc.value.__cause__, ApiException)
    assert isinstance(exc.value, DomainError)


def test_it_deletes_and_reports_missing_objects(kubeapi, api):
    server_side_apply(api, queue())

    delete(api, "Queue", "team-a", dry_run=True)
    assert kubeapi.get("Queue", "team-a") is not None
    delete(api, "Queue", "team-a")
    assert kubeapi.get("Queue", "team-a") is None
    with pytest.raises(K8sNotFound):
        delete(api, "Queue", "team-a")


# ------------------------------------------------------------------ observe


def test_it_lists_managed_objects_in_the_minimum_number_of_pages(kubeapi, api):
    for i in range(7):
        kubeapi.put_object({"kind": "Namespace", "metadata": {"name": f"t-{i}", "labels": MANAGED}})
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "unmanaged"}})

    items = list_managed(api, "Namespace", page_size=3)

    assert [i["metadata"]["name"] for i in items] == [f"t-{i}" for i in range(7)]
    assert {(i["apiVersion"], i["kind"]) for i in items} == {("v1", "Namespace")}
    assert kubeapi.counts == {("list", "Namespace"): 3}
    assert kubeapi.writes() == 0


def test_it_lists_raw_pages_from_the_cache_with_selectors(kubeapi, api):
    kubeapi.load(
        {
            "kind": "Pod",
            "metadata": {"name": f"p-{i}", "namespace": "default"},
            "status": {"phase": "Succeeded" if i % 3 == 0 else "Running"},
        }
        for i in range(10)
    )
    params = {"resourceVersion": "0", "fieldSelector": "status.phase!=Succeeded"}

    pods = list(list_raw(api, "/api/v1/pods", page_size=2, params=params))

    assert len(pods) == 6
    assert kubeapi.counts[("list", "Pod")] == 3


# ------------------------------------------------------------------ errors and retries


def test_it_maps_a_500_to_transient_and_retries_with_backoff(kubeapi, api):
    kubeapi.fault(500, verb="list", kind="Queue", times=2)
    sleeps = Sleeps()

    items = call_with_retry(lambda: list_managed(api, "Queue"), sleep=sleeps)

    assert items == []
    assert sleeps == [0.2, 0.4]
    assert kubeapi.counts[("list", "Queue")] == 3


def test_it_honours_retry_after_on_429(kubeapi, api):
    kubeapi.fault(429, verb="apply", retry_after=3)
    sleeps = Sleeps()

    call_with_retry(lambda: server_side_apply(api, queue()), sleep=sleeps)

    assert sleeps == [3.0]
    assert kubeapi.get("Queue", "team-a") is not None


def test_it_caps_every_wait_at_max_delay(kubeapi, api):
    kubeapi.fault(429, retry_after=60, times=3)
    sleeps = Sleeps()

    call_with_retry(lambda: list_managed(api, "Queue"), max_delay=10, sleep=sleeps)

    assert sleeps == [10, 10, 10]


def test_it_gives_up_after_the_last_attempt(kubeapi, api):
    kubeapi.fault(503, times=None)
    sleeps = Sleeps()

    with pytest.raises(K8sTransient) as exc:
        call_with_retry(lambda: list_managed(api, "Queue"), attempts=3, sleep=sleeps)

    assert exc.value.status == 503
    assert len(sleeps) == 2
    assert kubeapi.counts[("list", "Queue")] == 3


def test_it_does_not_retry_a_permanent_error(kubeapi, api):
    body = queue()
    body["spec"]["weight"] = 70000
    sleeps = Sleeps()

    with pytest.raises(K8sPermanent):
        call_with_retry(lambda: server_side_apply(api, body), sleep=sleeps)

    assert sleeps == []
    assert kubeapi.counts[("apply", "Queue")] == 1


def test_it_retries_a_conflict_once(kubeapi, api):
    kubeapi.fault(409, verb="apply", times=1)
    sleeps = Sleeps()

    call_with_retry(lambda: server_side_apply(api, queue()), sleep=sleeps)

    assert sleeps == []
    assert kubeapi.counts[("apply", "Queue")] == 2


def test_it_raises_a_second_conflict(kubeapi, api):
    kubeapi.fault(409, verb="apply", times=2)

    with pytest.raises(K8sConflict):
        call_with_retry(lambda: server_side_apply(api, queue()), sleep=Sleeps())


def test_it_maps_a_timeout_to_transient(kubeapi):
    kubeapi.fault("timeout", verb="list", delay=5)
    api_client = build_api_client("kubeconfig", kubeconfig=kubeapi.kubeconfig_path, timeout=0.3)

    with pytest.raises(K8sTransient, match="timed out"):
        list_managed(api_client, "Queue")
    api_client.close()


def test_it_maps_a_connection_reset_to_transient_and_recovers(kubeapi, api):
    kubeapi.fault("reset", verb="list")
    sleeps = Sleeps()

    assert call_with_retry(lambda: list_managed(api, "Queue"), sleep=sleeps) == []
    assert len(sleeps) == 1


def test_it_recovers_from_a_server_restart_between_calls(kubeapi, api):
    server_side_apply(api, queue())

    kubeapi.restart(lose_state=True)
    call_with_retry(lambda: server_side_apply(api, queue()), sleep=Sleeps())

    assert kubeapi.get("Queue", "team-a") is not None


def test_it_reports_an_unreachable_server_as_transient(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the call: nothing listens there
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    api_client = build_api_client("kubeconfig", kubeconfig=str(config), timeout=1)

    with pytest.raises(K8sTransient) as exc:
        list_managed(api_client, "Namespace")

    assert "Kubernetes API unreachable" in str(exc.value)
    assert f"GET http://127.0.0.1:{port}/api/v1/namespaces" in str(exc.value)
    assert exc.value.retry_after is None
    api_client.close()


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (404, K8sNotFound),
        (409, K8sConflict),
        (410, K8sTransient),
        (429, K8sTransient),
        (500, K8sTransient),
        (504, K8sTransient),
        (400, K8sPermanent),
        (403, K8sPermanent),
        (422, K8sPermanent),
        (501, K8sPermanent),
    ],
)
def test_it_maps_status_codes_to_our_errors(status, expected):
    error = errors.wrap(ApiException(status=status, reason="X"))

    assert type(error) is expected
    assert error.status == status


def test_it_truncates_huge_bodies_and_chains_the_original():
    original = ApiException(status=500, reason="InternalError")
    original.body = "x" * 10_000

    with pytest.raises(K8sTransient) as exc, errors.translated("LIST queues"):
        raise original

    assert exc.value.__cause__ is original
    assert len(str(exc.value)) < 1200
    assert len(exc.value.body) < 1100
    assert str(exc.value).startswith("LIST queues: HTTP 500")


def test_it_uses_the_status_message_and_retry_after_from_the_body():
    e = ApiException(status=429, reason="Too Many Requests")
    e.body = (
        '{"kind": "Status", "message": "slow down", "reason": "TooManyRequests", '
        '"details": {"retryAfterSeconds": 4}}'
    )

    error = errors.wrap(e)

    assert isinstance(error, K8sTransient)
    assert error.retry_after == 4.0
    assert "slow down" in str(error)
    assert isinstance(error, K8sError)


def test_requests_reuse_one_keep_alive_connection(kubeapi, api):
    list_managed(api, "Queue")
    (conn,) = api.connections.idle
    sock = conn.sock

    for _ in range(5):
        list_managed(api, "Queue")

    assert api.connections.idle == [conn]
    assert conn.sock is sock  # the same TCP connection all along


def test_a_connection_the_server_closed_while_idle_is_not_reused(kubeapi, api):
    """The server closes a kept-alive connection (a restart, an idle timeout): the next request
    opens a new one instead of failing on the dead one (no retry needed)."""
    server_side_apply(api, queue())
    (conn,) = api.connections.idle
    old = conn.sock

    kubeapi.restart()
    server_side_apply(api, queue(weight=3))

    assert kubeapi.get("Queue", "team-a")["spec"]["weight"] == 3
    assert old.fileno() == -1  # closed
    assert all(c.sock is not old for c in api.connections.idle)
