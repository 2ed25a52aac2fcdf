"""Concurrent writers of a sync (scheduling.sync ``_Writers``/``apply_waves``) and the cheap
per-request path of the client (``kube.client``): the writes of one wave go out
together, never more than ``FAIRSHARE_SYNC_WORKERS`` at once, and the result is the same as one
write after another."""

from __future__ import annotations

import sys
import textwrap

import pytest
import yaml

from kube import client as k8s_client_module
from kube.client import build_api_client
from scheduling.models import SyncRun
from scheduling.sync import create_run, run_sync
from tests.base import make_cast

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    return kubeapi


def first_sync() -> SyncRun:
    run = run_sync(create_run().pk)
    run.refresh_from_db()
    return run


@pytest.mark.parametrize("workers", [1, 4])
def test_a_waves_writes_go_out_together_up_to_the_worker_count(cluster, settings, workers):
    settings.FAIRSHARE_SYNC_WORKERS = workers
    cluster.write_latency = 0.03  # every write holds its request open: overlaps become visible
    make_cast()

    run = first_sync()

    assert run.status == "succeeded", run.error
    assert run.created_count == run.total > 8
    if workers == 1:
        assert cluster.max_in_flight == 1
    else:
        assert 2 <= cluster.max_in_flight <= workers
    # Everything arrived, in an order the server accepted (Namespaces before what is in them,
    # parent Queues before children: the fake rejects anything else).
    assert cluster.get("ResourceQuota", "fairshare", "team-a-ml") is not None
    assert cluster.get("Queue", "team-a")["spec"]["parent"] == "dept-x"


def test_concurrent_and_serial_syncs_write_the_same_objects(cluster, settings):
    make_cast()
    settings.FAIRSHARE_SYNC_WORKERS = 1
    serial = first_sync()
    kinds = ("Namespace", "ResourceQuota", "LimitRange", "Role", "RoleBinding", "Queue")
    written = {k: {o["metadata"]["name"]: o.get("spec") for o in cluster.objects(k)} for k in kinds}
    cluster.reset()
    settings.FAIRSHARE_SYNC_WORKERS = 8

    parallel = first_sync()

    assert parallel.created_count == serial.created_count
    assert {
        k: {o["metadata"]["name"]: o.get("spec") for o in cluster.objects(k)} for k in kinds
    } == written


def test_a_failed_write_fails_only_its_object_among_concurrent_ones(cluster, settings):
    settings.FAIRSHARE_SYNC_WORKERS = 4
    make_cast()
    cluster.fault(422, verb="apply", kind="ResourceQuota", name="fairshare", namespace="team-b-ml")

    run = first_sync()

    failed = list(run.items.filter(action="failed").values_list("kind", "namespace"))
    assert failed == [("ResourceQuota", "team-b-ml")]
    assert run.failed_count == 1
    assert cluster.get("ResourceQuota", "fairshare", "team-a-ml")["spec"]["hard"]


def test_an_unexpected_error_in_a_writer_fails_its_object_and_the_sync_finishes(
    cluster, settings, monkeypatch
):
    from scheduling.sync import writers

    settings.FAIRSHARE_SYNC_WORKERS = 4
    make_cast()
    real = writers.server_side_apply

    def apply(api_client, manifest, **kw):
        meta = manifest["metadata"]
        if manifest["kind"] == "ResourceQuota" and meta.get("namespace") == "team-a-ml":
            raise RuntimeError("a bug in a writer")
        return real(api_client, manifest, **kw)

    monkeypatch.setattr(writers, "server_side_apply", apply)

    run = first_sync()

    failed = list(run.items.filter(action="failed").values_list("kind", "namespace", "error"))
    assert failed == [("ResourceQuota", "team-a-ml", "a bug in a writer")]
    assert run.status == "failed"
    assert cluster.get("ResourceQuota", "fairshare", "team-b-ml") is not None


def test_the_server_counts_requests_on_its_metrics_endpoint(cluster):
    make_cast()
    first_sync()
    api = build_api_client("kubeconfig", kubeconfig=cluster.kubeconfig_path)
    try:
        text = api.call_api("GET", api.configuration.host + "/metrics").read().decode()
    finally:
        api.close()

    rows = [line for line in text.splitlines() if line.startswith("apiserver_request_total{")]
    count = {line.split("{")[1].split("}")[0]: int(line.rsplit(" ", 1)[1]) for line in rows}
    assert count['verb="APPLY",kind="ResourceQuota"'] == cluster.counts[("apply", "ResourceQuota")]
    assert count['verb="APPLY",kind="ResourceQuota"'] == 2  # one per namespace


# ---------------------------------------------------------------- the refresh hook


EXEC_PLUGIN = textwrap.dedent(
    """
    import json, pathlib, sys
    counter = pathlib.Path(sys.argv[1])
    n = int(counter.read_text() or 0) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    print(json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        # Already expired: every refresh that is let through must run the plugin again.
        "status": {"token": f"token-{n}", "expirationTimestamp": "2000-01-01T00:00:00Z"},
    }))
    """
)


@pytest.fixture
def exec_kubeconfig(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)
    counter = tmp_path / "runs"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": sys.executable,
                        "args": [str(plugin), str(counter)],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path, counter


def test_the_credential_refresh_runs_at_most_once_an_interval(exec_kubeconfig, monkeypatch):
    path, counter = exec_kubeconfig
    api = build_api_client("kubeconfig", kubeconfig=str(path))
    config = api.configuration
    loaded = int(counter.read_text())

    tokens = {config.get_api_key_with_prefix("BearerToken") for _ in range(50)}

    # 50 requests within the interval: the (expired) token was renewed once, not 50 times.
    assert int(counter.read_text()) == loaded + 1
    assert len(tokens) == 1

    monkeypatch.setattr(k8s_client_module, "REFRESH_INTERVAL", 0.0)
    before = int(counter.read_text())
    renewed = [config.get_api_key_with_prefix("BearerToken") for _ in range(3)]

    # Past the interval it runs on every request again (the loader re-installed its hook each
    # time; it stayed wrapped), and the request carries the new token.
    assert int(counter.read_text()) == before + 3
    assert renewed[-1] == f"Bearer token-{before + 3}"
    api.close()


def test_a_runs_log_says_where_its_time_went(cluster):
    make_cast()

    run = first_sync()

    summary = run.log.splitlines()[-1]
    phases = summary[summary.rindex("(") + 1 : -1].split(", ")
    assert [p.split()[0] for p in phases] == ["start", "render", "read", "plan", "write"]
    assert all(float(p.split()[1]) >= 0 for p in phases)


def test_a_proxying_pool_manager_gets_the_whole_url(cluster):
    """A client that is not ours (no direct connections) goes through its pool manager; a
    ProxyManager must see the absolute URL, only a plain PoolManager is bypassed for its
    host's connection pool."""
    import urllib3

    from kube.client import request_json

    seen = []

    class Recording(urllib3.PoolManager):  # stands in for ProxyManager (not a plain one)
        def request(self, method, url, **kw):
            seen.append(url)
            return super().request(method, url, **kw)

    api = build_api_client("kubeconfig", kubeconfig=cluster.kubeconfig_path)
    try:
        api.connections = None
        api.rest_client.pool_manager = Recording()
        page = request_json(api, "GET", "/api/v1/namespaces", query={"limit": 1})
    finally:
        api.close()

    assert page["kind"] == "NamespaceList"
    assert seen == [f"{cluster.url}/api/v1/namespaces?limit=1"]


def test_a_kubeconfig_proxy_url_sends_every_request_through_the_proxy(cluster, tmp_path):
    """``proxy-url`` in the kubeconfig: requests go to the proxy (here the fake itself, which
    like a forward proxy takes the absolute URL), for a server name that does not resolve."""
    from kube.client import request_json
    from kube.errors import K8sTransient

    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://api.cluster.invalid:6443', "
        f"proxy-url: '{cluster.url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    api = build_api_client("kubeconfig", kubeconfig=str(config), timeout=5)
    try:
        assert api.connections is None
        page = request_json(api, "GET", "/api/v1/namespaces", query={"limit": 1})
    finally:
        api.close()
    assert page["kind"] == "NamespaceList"

    direct = tmp_path / "direct"
    direct.write_text(config.read_text().replace(f", proxy-url: '{cluster.url}'", ""))
    api = build_api_client("kubeconfig", kubeconfig=str(direct), timeout=5)
    try:
        with pytest.raises(K8sTransient, match="unreachable"):
            request_json(api, "GET", "/api/v1/namespaces")
    finally:
        api.close()
