"""Building the API client, the kinds Fairshare manages, and raw JSON REST calls.

``build_api_client()`` is called once per process by the Django side, which passes the mode from
settings (``FAIRSHARE_CLUSTER``). The client has urllib3's own retries turned off, so every call is
one request and ``apply.call_with_retry`` is the only retry policy, and a default timeout on every
call (the ``kubernetes`` library has none).

Managed objects are read and written through ``request_json()``: raw REST calls that parse JSON
into plain dicts, so a LIST of thousands of objects builds no model objects.
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import (
    should_bypass_proxies,
    tcp_keepalive_socket_options,
)
from kubernetes.config.config_exception import ConfigException
from urllib3.util import create_urllib3_context, wait_for_read

from .errors import K8sConfigError, translated

log = logging.getLogger(__name__)

# (connect, read) seconds; a LIST page of 500 pods comes back well within this.
DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 30.0)
MODES = ("kubeconfig", "in-cluster", "disabled")


@dataclass(frozen=True)
class KindInfo:
    """Where a kind lives in the REST API."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection path (all namespaces when ``namespace`` is None), or an object's path."""
        base = "/api/v1" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


KINDS: dict[str, KindInfo] = {
    info.kind: info
    for info in (
        KindInfo("Namespace", "v1", "namespaces", False),
        KindInfo("ResourceQuota", "v1", "resourcequotas", True),
        KindInfo("LimitRange", "v1", "limitranges", True),
        KindInfo("Role", "rbac.authorization.k8s.io/v1", "roles", True),
        KindInfo("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings", True),
        KindInfo("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", False),
        KindInfo("Queue", "scheduling.volcano.sh/v1beta1", "queues", False),
        KindInfo(
            "WorkloadPriorityClass", "kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", False
        ),
        KindInfo("ResourceFlavor", "kueue.x-k8s.io/v1beta2", "resourceflavors", False),
        KindInfo("Cohort", "kueue.x-k8s.io/v1beta2", "cohorts", False),
        KindInfo("ClusterQueue", "kueue.x-k8s.io/v1beta2", "clusterqueues", False),
        KindInfo("LocalQueue", "kueue.x-k8s.io/v1beta2", "localqueues", True),
    )
}


def kind_info(kind: str) -> KindInfo:
    """Return the registry entry for ``kind``; raise ValueError for a kind we do not manage."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"{kind!r} is not a kind Fairshare manages ({', '.join(KINDS)})") from None


class ApiClient(k8s_client.ApiClient):
    """``kubernetes.client.ApiClient`` with a default timeout on every call, and the direct
    connections ``request_json`` uses (see ``Connections``)."""

    def __init__(self, configuration: k8s_client.Configuration, *, timeout: Any) -> None:
        super().__init__(configuration)
        self.default_timeout = timeout
        self.connections = Connections.for_configuration(
            configuration, timeout=timeout, maxsize=configuration.connection_pool_maxsize
        )

    def close(self) -> None:
        if self.connections is not None:
            self.connections.close()
        super().close()

    def call_api(  # type: ignore[override]
        self,
        method: str,
        url: str,
        header_params: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        return super().call_api(
            method,
            url,
            header_params,
            body,
            post_params,
            _request_timeout=_request_timeout or self.default_timeout,
        )


def build_api_client(
    mode: str,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
    pool_size: int = 16,
) -> ApiClient:
    """Build the API client for ``mode``: ``kubeconfig`` or ``in-cluster``.

    ``kubeconfig`` mode reads ``kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``.
    Raises K8sConfigError for ``disabled``, an unknown mode, or a missing or unusable config.
    """
    configuration = k8s_client.Configuration()
    if mode == "kubeconfig":
        path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        # $KUBECONFIG may list several files; the first one that exists is used.
        candidates = [p for p in path.split(os.pathsep) if p]
        existing = next((p for p in candidates if Path(p).is_file()), None)
        if existing is None:
            raise K8sConfigError(f"kubeconfig mode: no kubeconfig file at {path!r}")
        try:
            k8s_config.load_kube_config(
                config_file=existing, context=context, client_configuration=configuration
            )
        except (ConfigException, OSError, ValueError, TypeError) as e:
            raise K8sConfigError(f"kubeconfig mode: cannot load {existing!r}: {e}") from e
    elif mode == "in-cluster":
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as e:
            raise K8sConfigError(f"in-cluster mode: not running in a pod? {e}") from e
    elif mode == "disabled":
        raise K8sConfigError(
            "Kubernetes access is disabled (FAIRSHARE_CLUSTER=disabled); nothing can be "
            "observed or applied"
        )
    else:
        raise K8sConfigError(f"unknown Kubernetes client mode {mode!r}; use one of {MODES}")
    # One request per call: retrying is call_with_retry's job, and urllib3 would otherwise
    # silently retry idempotent calls and sleep through Retry-After on its own.
    configuration.retries = False
    # Enough pooled connections for the sync's concurrent writers (urllib3 opens more when all
    # are busy but only keeps this many).
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, pool_size)
    _throttle_refresh(configuration)
    try:
        api_client = ApiClient(configuration, timeout=timeout)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise K8sConfigError(
            f"cannot use the TLS settings for {configuration.host} (CA or client certificate): {e}"
        ) from e
    api_client.user_agent = "fairshare"
    return api_client


#: How often the credential loader's refresh hook may run (seconds).
REFRESH_INTERVAL = 1.0


def _throttle_refresh(configuration: k8s_client.Configuration) -> None:
    """Run the credential loader's refresh hook at most once per ``REFRESH_INTERVAL``.

    ``load_kube_config`` installs a hook that ``Configuration.get_api_key_with_prefix`` calls on
    every request; besides renewing an expired exec/auth-provider token, it re-sets ``host``,
    which re-reads the whole proxy environment (``urllib.request.getproxies_environment``):
    about 0.3 ms a request, a fifth of a first sync's client time. Once a second still renews a
    token well before any issuer's lifetime runs out (client-go's exec plugin refreshes on
    expiry, too).
    """
    if configuration.refresh_api_key_hook is None:
        return
    inner = [configuration.refresh_api_key_hook]
    last = [float("-inf")]
    lock = threading.Lock()

    def throttled(config: k8s_client.Configuration) -> None:
        now = time.monotonic()
        with lock:
            if now - last[0] < REFRESH_INTERVAL:
                return
            last[0] = now
            inner[0](config)
            # The loader's hook installs itself again each time it runs: keep it wrapped.
            current = config.refresh_api_key_hook
            if current is not None and current is not throttled:
                inner[0] = current
                config.refresh_api_key_hook = throttled

    configuration.refresh_api_key_hook = throttled


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as ``ApiException`` reads one (``status``, ``reason``, ``headers``,
    ``data``)."""

    status: int
    reason: str
    headers: Any
    data: bytes


class _Connection(http.client.HTTPConnection):
    """One keep-alive connection; TLS (when ``context``) is set up as urllib3 would."""

    def __init__(self, owner: Connections) -> None:
        super().__init__(owner.host, owner.port, timeout=owner.connect_timeout)
        self.owner = owner

    def connect(self) -> None:
        owner = self.owner
        # Connect (and shake hands) within the connect timeout, then wait for answers as long
        # as the read timeout allows (urllib3.Timeout's connect/read).
        sock = socket.create_connection((self.host, self.port), owner.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in owner.socket_options:
                sock.setsockopt(*option)
            if owner.context is not None:
                sock = owner.context.wrap_socket(sock, server_hostname=owner.server_hostname)
            sock.settimeout(owner.read_timeout)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Connections:
    """Keep-alive HTTP/1.1 connections to the API server, made with the standard library's
    ``http.client``, that ``request_json`` sends through.

    Why not the ``kubernetes`` client's urllib3 pool: a first sync is 16,000 server-side
    applies from 8 writer threads under one interpreter lock, and urllib3 spends about 0.1 ms
    of CPU a request on top of ``http.client`` (retry and timeout objects, the
    dropped-connection check, response wrapping): a ``request_json`` write took 0.19 ms of CPU
    through the pool and takes 0.10 ms through these (docs/benchmarks.md, "Convergence").

    The configuration's TLS settings are applied as ``kubernetes.client.rest`` passes them to
    urllib3: ``verify_ssl`` (CERT_REQUIRED / CERT_NONE), ``ssl_ca_cert`` / ``ca_cert_data``
    (else the system's CAs), ``cert_file`` / ``key_file``, ``tls_server_name`` (SNI and the
    name checked), ``assert_hostname=False``, ``socket_options`` / ``keep_alive``, on a context
    from urllib3's own ``create_urllib3_context`` (its TLS version floor and ciphers).
    ``for_configuration`` returns None where a setting needs urllib3 (a proxy, a SOCKS proxy,
    ``assert_hostname`` naming another host): those requests take the urllib3 pool.

    Idle connections are kept (at most ``maxsize``) and, like urllib3's pool
    (``is_connection_dropped``), one the server has closed meanwhile is not reused.
    """

    def __init__(self, configuration: k8s_client.Configuration, *, timeout: Any, maxsize: int):
        url = urlsplit(configuration.host)
        https = url.scheme == "https"
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if https else 80)
        # A server URL may carry a path (an API server behind a proxy, e.g. /k8s/clusters/x).
        self.prefix = url.path.rstrip("/")
        if isinstance(timeout, tuple):
            self.connect_timeout, self.read_timeout = float(timeout[0]), float(timeout[1])
        else:
            self.connect_timeout = self.read_timeout = float(timeout)
        self.socket_options = list(
            configuration.socket_options
            or (tcp_keepalive_socket_options() if configuration.keep_alive else [])
        )
        self.server_hostname = configuration.tls_server_name or self.host
        self.context = _ssl_context(configuration) if https else None
        self.maxsize = max(1, int(maxsize or 1))
        self.idle: list[_Connection] = []
        self.lock = threading.Lock()

    @classmethod
    def for_configuration(
        cls, configuration: k8s_client.Configuration, *, timeout: Any, maxsize: int
    ) -> Connections | None:
        scheme = urlsplit(configuration.host).scheme
        if scheme not in ("http", "https"):
            return None
        if configuration.proxy and not should_bypass_proxies(
            configuration.host, configuration.no_proxy or ""
        ):
            return None
        if isinstance(configuration.assert_hostname, str):
            return None
        return cls(configuration, timeout=timeout, maxsize=maxsize)

    def request(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        """Send one request and read the whole answer; raise OSError / HTTPException when the
        connection fails (the connection is then dropped, never reused)."""
        conn = self._take()
        try:
            conn.request(method, self.prefix + target, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            conn.close()
            raise
        answer = Answer(response.status, response.reason, response.headers, data)
        self._give(conn)
        return answer

    def _take(self) -> _Connection:
        while True:
            with self.lock:
                conn = self.idle.pop() if self.idle else None
            if conn is None:
                return _Connection(self)
            # An idle connection with something to read has been closed by the server (or
            # sent what no request asked for): urllib3's is_connection_dropped.
            if conn.sock is None or not wait_for_read(conn.sock, timeout=0.0):
                return conn
            conn.close()

    def _give(self, conn: _Connection) -> None:
        with self.lock:
            if len(self.idle) < self.maxsize:
                self.idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


def _ssl_context(configuration: k8s_client.Configuration) -> ssl.SSLContext:
    verify = bool(configuration.verify_ssl)
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)
    if verify:
        # urllib3 checks the name itself unless told not to (assert_hostname=False).
        context.check_hostname = configuration.assert_hostname is not False
        if configuration.ssl_ca_cert or configuration.ca_cert_data:
            context.load_verify_locations(
                cafile=configuration.ssl_ca_cert or None,
                cadata=configuration.ca_cert_data or None,
            )
        else:
            context.load_default_certs()
    else:
        context.check_hostname = False
        log.warning(
            "TLS verification of the API server %s is off (insecure-skip-tls-verify)",
            configuration.host,
        )
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


@functools.lru_cache(maxsize=16)
def _timeout(value: Any) -> urllib3.Timeout:
    # Shared: a connection pool works on a clone of the Timeout it is given (Timeout.clone in
    # HTTPConnectionPool._get_timeout), never on the object itself.
    if isinstance(value, tuple):
        return urllib3.Timeout(connect=value[0], read=value[1])
    return urllib3.Timeout(total=value)


def request_json(
    api_client: k8s_client.ApiClient,
    method: str,
    path: str,
    *,
    query: dict[str, Any] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    parse: bool = True,
) -> dict[str, Any]:
    """Make one REST call and return the JSON answer as a dict (``{}`` unless ``parse``: a
    writer that only needs to know it succeeded skips decoding the object sent back).

    The request goes through the client's ``Connections`` (our ``ApiClient``, no proxy), else
    straight to its urllib3 pool (``rest_client.pool_manager``, which carries the TLS, proxy
    and retry settings the configuration gave it), with the client's default headers and
    credentials: the generated client's per-call serialisation and content-type dispatch cost
    more than the request itself on a sync of thousands of objects.
    A body is sent as compact JSON (also valid YAML, for server-side apply).
    Raises a K8sError subclass (see errors.py) for any non-2xx answer or transport failure.
    """
    config = api_client.configuration
    headers = {**api_client.default_headers, "Accept": "application/json"}
    payload = None
    if body is not None:
        headers["Content-Type"] = content_type
        payload = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":"))
    params = [(k, v) for k, v in (query or {}).items() if v is not None]
    api_client.update_params_for_auth(headers, params, ["BearerToken"], path, method, None)
    target = path + (f"?{urlencode(params)}" if params else "")
    connections = getattr(api_client, "connections", None)
    with translated(f"{method} {config.host}{path}"):
        if connections is not None:
            if isinstance(payload, str):
                payload = payload.encode()
            answer = connections.request(method, target, payload, headers)
        else:
            answer = _pooled(api_client, method, target, payload, headers)
        if not 200 <= answer.status <= 299:
            raise ApiException.from_response(
                http_resp=answer, body=answer.data.decode("utf-8", "replace"), data=None
            )
    if not parse:
        return {}
    result = json.loads(answer.data)
    if not isinstance(result, dict):
        raise ValueError(f"{method} {path}: expected a JSON object, got {type(result).__name__}")
    return result


def _pooled(
    api_client: k8s_client.ApiClient,
    method: str,
    target: str,
    payload: str | bytes | None,
    headers: dict[str, str],
) -> Answer:
    """One request through the client's urllib3 pool manager (a proxy, or a client that is
    not ours)."""
    config = api_client.configuration
    timeout = _timeout(getattr(api_client, "default_timeout", DEFAULT_TIMEOUT))
    manager = api_client.rest_client.pool_manager
    if type(manager) is urllib3.PoolManager:
        # No proxy: the host's connection pool directly (what PoolManager.urlopen does after
        # parsing the URL again on every call).
        raw = manager.connection_from_url(config.host).urlopen(
            method,
            urlsplit(config.host).path.rstrip("/") + target,
            body=payload,
            headers=headers,
            timeout=timeout,
            preload_content=False,
            assert_same_host=False,
            redirect=False,
        )
    else:
        raw = manager.request(
            method,
            config.host + target,
            body=payload,
            headers=headers,
            timeout=timeout,
            preload_content=False,
        )
    try:
        data = raw.data
    finally:
        raw.release_conn()
    return Answer(raw.status, raw.reason or "", raw.headers, data)
