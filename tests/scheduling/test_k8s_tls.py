"""HTTPS to the API server: the settings of a kubeconfig's cluster and user entries, through
both transports of ``request_json`` (our direct ``Connections`` and the ``kubernetes`` client's
urllib3 pool), against the fake API server serving TLS with certificates from ``openssl``.

A real cluster is always HTTPS; both transports must accept and refuse the same things
(the urllib3 pool is the library's behaviour, the reference for ours), and kubectl, a second
client, must accept the fake's TLS as it accepts a real API server's.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import yaml

from kube.apply import server_side_apply
from kube.client import build_api_client, request_json
from kube.errors import K8sTransient
from tests.kubeapi.server import FakeKubeApi
from tests.kubeapi.tls import make_pki

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is not installed (see .ci/run)"
)

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), names=("localhost", "kubernetes.default.svc"))


@pytest.fixture(scope="module")
def https(pki):
    server = FakeKubeApi(tls=pki.server_context()).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def mtls(pki):
    """An API server that requires a client certificate (``--client-ca-file``)."""
    server = FakeKubeApi(tls=pki.server_context(verify_clients=True)).start()
    yield server
    server.close()


def kubeconfig(tmp_path: Path, server: str, cluster: dict, user: dict | None = None) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": user or {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return str(path)


def client(path: str, transport: str):
    api = build_api_client("kubeconfig", kubeconfig=path, timeout=5)
    if transport == "urllib3":
        api.connections = None  # the kubernetes client's own pool (the reference)
    else:
        assert api.connections is not None
    return api


def namespaces(path: str, transport: str) -> dict:
    api = client(path, transport)
    try:
        return request_json(api, "GET", "/api/v1/namespaces", query={"limit": 1})
    finally:
        api.close()


TRANSPORTS = ["direct", "urllib3"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_it_trusts_the_clusters_ca_and_checks_the_servers_name(https, pki, tmp_path, transport):
    good = kubeconfig(
        tmp_path, f"https://localhost:{https.port}", {"certificate-authority": pki.ca}
    )
    assert namespaces(good, transport)["kind"] == "NamespaceList"

    # Another CA did not sign the server's certificate.
    wrong_ca = kubeconfig(
        tmp_path, f"https://localhost:{https.port}", {"certificate-authority": pki.other_ca}
    )
    with pytest.raises(K8sTransient, match="CERTIFICATE_VERIFY_FAILED"):
        namespaces(wrong_ca, transport)

    # The certificate names localhost and kubernetes.default.svc, not the IP address.
    by_ip = kubeconfig(
        tmp_path, f"https://127.0.0.1:{https.port}", {"certificate-authority": pki.ca}
    )
    with pytest.raises(K8sTransient, match="CERTIFICATE_VERIFY_FAILED"):
        namespaces(by_ip, transport)


def test_a_ca_file_that_holds_no_certificate_is_a_configuration_error(https, tmp_path):
    from kube.errors import K8sConfigError

    bogus = tmp_path / "ca.crt"
    bogus.write_text("not a certificate\n")
    path = kubeconfig(
        tmp_path, f"https://localhost:{https.port}", {"certificate-authority": str(bogus)}
    )

    with pytest.raises(K8sConfigError, match="TLS settings for https://localhost"):
        build_api_client("kubeconfig", kubeconfig=path)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tls_server_name_is_the_name_checked(https, pki, tmp_path, transport):
    named = kubeconfig(
        tmp_path,
        f"https://127.0.0.1:{https.port}",
        {"certificate-authority": pki.ca, "tls-server-name": "kubernetes.default.svc"},
    )
    assert namespaces(named, transport)["kind"] == "NamespaceList"

    misnamed = kubeconfig(
        tmp_path,
        f"https://127.0.0.1:{https.port}",
        {"certificate-authority": pki.ca, "tls-server-name": "api.example.com"},
    )
    with pytest.raises(K8sTransient, match="CERTIFICATE_VERIFY_FAILED"):
        namespaces(misnamed, transport)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_insecure_skip_tls_verify_accepts_any_certificate(https, tmp_path, transport):
    insecure = kubeconfig(
        tmp_path, f"https://127.0.0.1:{https.port}", {"insecure-skip-tls-verify": True}
    )
    assert namespaces(insecure, transport)["kind"] == "NamespaceList"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_certificate_is_presented_when_the_server_asks(mtls, pki, tmp_path, transport):
    server = f"https://localhost:{mtls.port}"
    with_cert = kubeconfig(
        tmp_path,
        server,
        {"certificate-authority": pki.ca},
        {"client-certificate": pki.client_cert, "client-key": pki.client_key},
    )
    assert namespaces(with_cert, transport)["kind"] == "NamespaceList"

    token_only = kubeconfig(tmp_path, server, {"certificate-authority": pki.ca})
    with pytest.raises(K8sTransient, match="unreachable"):
        namespaces(token_only, transport)


def test_concurrent_writers_share_the_tls_connections(https, pki, tmp_path):
    """Eight threads, one client: every apply lands, and no more connections are kept than
    the pool allows."""
    https.reset()
    path = kubeconfig(
        tmp_path, f"https://localhost:{https.port}", {"certificate-authority": pki.ca}
    )
    api = build_api_client("kubeconfig", kubeconfig=path, timeout=5)
    errors: list[BaseException] = []

    def write(start: int) -> None:
        try:
            for i in range(start, start + 25):
                server_side_apply(
                    api,
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": f"tls-{i}"},
                    },
                    result=False,
                )
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(25 * n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert {f"tls-{i}" for i in range(200)} <= {
            o["metadata"]["name"] for o in https.objects("Namespace")
        }
        assert 1 <= len(api.connections.idle) <= api.connections.maxsize
    finally:
        api.close()
    assert api.connections.idle == []


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed (see .ci/run)")
def test_kubectl_accepts_the_fakes_tls_with_a_client_certificate(mtls, pki, tmp_path):
    import subprocess

    mtls.reset()  # the default namespaces
    path = kubeconfig(
        tmp_path,
        f"https://localhost:{mtls.port}",
        {"certificate-authority": pki.ca},
        {"client-certificate": pki.client_cert, "client-key": pki.client_key},
    )
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", path, "get", "namespaces", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "namespace/default" in result.stdout.split()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_server_url_with_a_path_keeps_it_on_every_request(tmp_path, transport):
    """An API server behind a proxy at a path (``server: https://proxy/k8s/clusters/c-1``):
    the path stays in front of every request's, as the generated client's ``host + path``."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            body = json.dumps({"kind": "NamespaceList", "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        path = kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_port}/k8s/clusters/c-1", {})
        assert namespaces(path, transport)["kind"] == "NamespaceList"
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/k8s/clusters/c-1/api/v1/namespaces?limit=1"]


def test_the_fake_runs_on_its_own_over_https(tmp_path):
    """``python -m tests.kubeapi --tls DIR`` (what ``bench/convergence.py --tls`` starts): an
    HTTPS server named localhost, and a kubeconfig that trusts its fresh CA."""
    import subprocess
    import sys

    config = tmp_path / "kubeconfig"
    command = [sys.executable, "-m", "tests.kubeapi", "--tls", str(tmp_path / "pki")]
    process = subprocess.Popen(
        [*command, "--kubeconfig", str(config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = process.stdout.readline().split()[-1]
        process.stdout.readline()
        assert url.startswith("https://localhost:")
        assert namespaces(str(config), "direct")["kind"] == "NamespaceList"
    finally:
        process.terminate()
        process.wait(timeout=10)
