"""Building the API client, the kinds Fairshare manages, and raw JSON REST calls.

``build_api_client()`` is called once per process by the Django side, which passes the mode from
settings (``FAIRSHARE_CLUSTER``). The client has urllib3's own retries turned off, so every call is
one request and ``apply.call_with_retry`` is the only retry policy, and a default timeout on every
call (the ``kubernetes`` library has none).

Managed objects are read and written through ``request_json()``: raw REST calls that parse JSON
into plain dicts, so a LIST of thousands of objects builds no model objects.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse
from kubernetes.config.config_exception import ConfigException

from .errors import K8sConfigError, translated

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
    )
}


def kind_info(kind: str) -> KindInfo:
    """Return the registry entry for ``kind``; raise ValueError for a kind we do not manage."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"{kind!r} is not a kind Fairshare manages ({', '.join(KINDS)})") from None


class ApiClient(k8s_client.ApiClient):
    """``kubernetes.client.ApiClient`` with a default timeout on every call."""

    def __init__(self, configuration: k8s_client.Configuration, *, timeout: Any) -> None:
        super().__init__(configuration)
        self.default_timeout = timeout

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
    api_client = ApiClient(configuration, timeout=timeout)
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


def _timeout(value: Any) -> urllib3.Timeout:
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

    The request goes straight to the client's urllib3 pool (``rest_client.pool_manager``, which
    carries the TLS, proxy and retry settings the configuration gave it) with the client's
    default headers and credentials: the generated client's per-call serialisation and
    content-type dispatch cost more than the request itself on a sync of thousands of objects.
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
    timeout = _timeout(getattr(api_client, "default_timeout", DEFAULT_TIMEOUT))
    manager = api_client.rest_client.pool_manager
    with translated(f"{method} {config.host}{path}"):
        if type(manager) is urllib3.PoolManager:
            # No proxy: the host's connection pool directly (what PoolManager.urlopen does
            # after parsing the URL again on every call).
            raw = manager.connection_from_url(config.host).urlopen(
                method,
                target,
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
        if not 200 <= raw.status <= 299:
            raise ApiException.from_response(
                http_resp=RESTResponse(raw), body=data.decode("utf-8", "replace"), data=None
            )
    if not parse:
        return {}
    result = json.loads(data)
    if not isinstance(result, dict):
        raise ValueError(f"{method} {path}: expected a JSON object, got {type(result).__name__}")
    return result
