"""A fake Kubernetes API server for tests and benchmarks.

A real HTTP server on 127.0.0.1 that the real ``kubernetes`` client talks to through a generated
kubeconfig. It keeps objects in memory and serves GET, LIST (label and field selectors, ``limit``
and ``continue``), POST, PUT, PATCH (JSON merge patch; strategic merge treated as merge; server-side
apply with managedFields-lite) and DELETE, with ``dryRun=All``, for the kinds in ``kinds.py``. It
defaults and validates like the real server where it matters (``defaults.py``, ``validation.py``),
runs Volcano's admission webhooks and queue controller (``volcano.py``) and Kueue's webhooks and
finalizer-holding controllers (``kueue.py``), injects faults on demand, and counts requests per
``(verb, kind)``.

What it imitates, with the upstream source (each function names its own):

* defaulting: ``SetDefaults_Namespace``, ``SetDefaults_LimitRangeItem``,
  ``SetDefaults_PriorityClass`` (``defaults.py``), CRD structural defaults (``dequeueStrategy``,
  Kueue's ``queueingStrategy: BestEffortFIFO``, ...);
* validation: names, labels, quantities, quota names, ``ValidateLimitRange``, RBAC shapes,
  PriorityClass values and immutable ``value``/``preemptionPolicy`` (``validation.py``); the
  ``priority`` admission plugin's single ``globalDefault``
  (``plugin/pkg/admission/priority/admission.go``);
* Volcano: queue mutating and validating webhooks, the queue controller's ``spec.parent: root``
  and open state, PodGroup routing by the namespace annotation, job admission to leaf queues;
  Volcano's own ``root`` and ``default`` queues exist from the start (``volcano.py``);
  PodGroups and Volcano Jobs validated against their CRD schemas (the verbatim copies of
  ``/work/shared/schemas/volcano``); core/v1 Events with ``legacyValidateEvent``;
* Kueue (kubernetes-sigs/kueue at ff69552e79ad21652c36caa97038382e55625cf7): ClusterQueue,
  Cohort, LocalQueue, ResourceFlavor, WorkloadPriorityClass and Workload at ``v1beta2`` (the
  storage version; the deprecated ``v1beta1`` is not served), validated against the verbatim
  CRDs: the OpenAPI schema, ``x-kubernetes-list-type`` uniqueness and the
  ``x-kubernetes-validations`` CEL rules, evaluated by cel-python (``validation.py``,
  ``cel.py``); the ``mclusterqueue``/``vclusterqueue``/``vcohort``/``mresourceflavor``/
  ``vresourceflavor``/``mworkload``/``vworkload.kb.io`` webhooks; the ClusterQueue and
  ResourceFlavor reconcilers' ``kueue.x-k8s.io/resource-in-use`` finalizer, released in the
  request that frees the object (``kueue_controller_step()``, ``kueue.py``);
* finalizers: a DELETE of an object with ``metadata.finalizers`` marks it
  (``deletionTimestamp``) and answers the object; the update that removes its last finalizer
  deletes it; a terminating object takes no new finalizers (``_mark_deleting``, ``_store``);
* time, as a Volcano cluster has it: the webhooks validate against a lagging informer cache
  (``webhook_cache_lag``), the queue controller parents and opens a Queue after the write
  (``controller_delay``, ``controller_step()``); what the scheduler's capacity plugin does with
  PodGroups in missing or non-leaf queues (``scheduler_blocked()``, ``stranded_podgroups()``);
* ResourceQuota admission for ResourceClaims (``claimquota.py``): the claim evaluator's
  ``count/resourceclaims.resource.k8s.io`` and ``<class>.deviceclass.resource.k8s.io/devices``
  charge, refused with ``exceeded quota: ...`` (403) on CREATE; pods are not charged;
* DELETE with DeleteOptions in the body (``dryRun``, ``preconditions``, ``propagationPolicy``),
  NamespaceLifecycle's immortal namespaces;
* a cluster without Volcano's CRDs (``uninstall()``): 404 for the group's paths;
* server-side apply with per-field ownership as structured-merge-diff tracks it: every map key
  is its own field (``f:spec: {f:hard: {f:requests.cpu: {}}}``), lists are atomic (so are the
  Volcano and core lists Fairshare writes; the ``x-kubernetes-list-type: map`` lists of Volcano
  Jobs and Kueue's kinds are treated as atomic too, not merged by key), conflicts are per field,
  fields a manager stops applying are removed unless another manager owns them; update-style writes
  (PUT, merge and JSON patches) take ownership of what they change;
* JSON patch (RFC 6902), JSON merge patch (RFC 7386), ``dryRun=All``, ``fieldValidation``;
  no strategic merge patch for custom resources (415, as apiextensions-apiserver);
* discovery and ``/openapi/v3`` (PATCH operations with their parameters and the kinds'
  schemas) so that kubectl can validate and apply.

* watch (``?watch=true``, ``watch.py``-style line-delimited JSON events over a chunked response),
  served like the API server's watch cache: events after the requested ``resourceVersion``,
  label-filtered with the previous state (an object that stops matching arrives as DELETED),
  ``BOOKMARK`` events with ``allowWatchBookmarks``, ``timeoutSeconds``, and an ``ERROR`` event
  with a 410 ``Expired`` Status when the version is older than the history
  (``k8s.io/apiserver/pkg/storage/cacher``, see ``_watch``).

Simplifications, on purpose: no auth, no status/scale subresources over HTTP, LIST pages
are cut from the current state rather than a snapshot, deleting a namespace removes its objects at
once, strategic merge patch is a JSON merge patch (lists are replaced, not merged by key), the
queue controller acts on a background worker ``controller_delay`` seconds after a write (not
in the request), and no associative lists.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import copy
import json
import logging
import random
import socket
import ssl
import struct
import tempfile
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from . import claimquota, defaults, kueue, openapi, validation, volcano
from .kinds import BY_KIND, BY_PATH, KINDS, Kind, lookup
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .store import FieldPath, Store, now

log = logging.getLogger(__name__)

WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete"})
# The metrics' verb label is the HTTP method (LIST, WATCH and APPLY told apart): CleanVerb in
# k8s.io/apiserver/pkg/endpoints/metrics/metrics.go.
_METRIC_VERBS = {"create": "POST", "update": "PUT"}
# What Kueue's ClusterQueue and ResourceFlavor reconcilers watch (their own kinds, Workloads that
# leave a ClusterQueue, Namespaces whose deletion takes Workloads with them).
_KUEUE_WATCHED = frozenset({"ClusterQueue", "ResourceFlavor", "Workload", "Namespace"})
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Namespaces that can never be deleted: the NamespaceLifecycle admission plugin's immortal
# namespaces (k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go
# ``Register``: ``NewLifecycle(sets.NewString(metav1.NamespaceDefault,
# metav1.NamespaceSystem, metav1.NamespacePublic))``; ``Admit`` refuses their DELETE).
# kube-node-lease is not among them upstream.
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
# k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go ValidateDeleteOptions
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
_MISSING = object()


class ApiError(Exception):
    """An error answered as a ``Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def _details(kind: Kind, name: str | None, **extra: Any) -> dict:
    out: dict[str, Any] = {"kind": kind.plural}
    if name:
        out["name"] = name
    if kind.group:
        out["group"] = kind.group
    out.update(extra)
    return out


def _invalid_details(kind: Kind, name: str, causes: list) -> dict:
    """A 422's details: ``k8s.io/apimachinery/pkg/api/errors`` ``NewInvalid`` names the *kind*
    (``ClusterQueue``), not the resource, which kubectl prints: ``The ClusterQueue "x" is
    invalid: ...``."""
    return {**_details(kind, name, causes=causes), "kind": kind.kind}


def not_found(kind: Kind, name: str) -> ApiError:
    message = f'{kind.resource} "{name}" not found'
    return ApiError(404, "NotFound", message, details=_details(kind, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


# --------------------------------------------------------------------------- faults


@dataclass
class FaultRule:
    """Answer matching requests with ``error`` instead of serving them.

    ``error`` is an HTTP status code (500, 503, 429, 409, ...), ``"timeout"`` (hold the request for
    ``delay`` seconds, then drop the connection without an answer) or ``"reset"`` (close the
    connection with a TCP RST). ``times`` is how many matching requests fire (None: all of them);
    ``probability`` draws from the server's seeded RNG. ``verb`` may be ``"write"`` for any write.
    """

    error: int | str
    verb: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    times: int | None = 1
    probability: float = 1.0
    retry_after: int | None = 1
    delay: float = 10.0
    fired: int = field(default=0, init=False)

    def matches(self, verb: str, kind: str, name: str | None, namespace: str | None) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        any_write = self.verb == "write" and verb in WRITE_VERBS
        if self.verb is not None and self.verb != verb and not any_write:
            return False
        if self.kind is not None and self.kind != kind:
            return False
        if self.name is not None and self.name != name:
            return False
        return self.namespace is None or self.namespace == namespace


class _Drop(Exception):
    """Close the connection without an answer (after a reset or a timeout)."""


# --------------------------------------------------------------------------- object helpers


# Fields every write carries that no manager owns (identity, server-set, status subresource).
_UNTRACKED_TOP_LEVEL = ("apiVersion", "kind", "metadata", "status")


def owned_fields(obj: dict) -> dict[FieldPath, Any]:
    """The fields server-side apply tracks for ``obj``, as structured-merge-diff does.

    Labels and annotations by key; below the top level every map key is its own field
    (``("spec", "hard", "requests.cpu")``), lists and scalars are leaves (atomic lists: the
    kinds served here have no associative ones). Empty maps and lists own nothing.
    """
    out: dict[FieldPath, Any] = {}
    meta = obj.get("metadata") or {}
    for section in ("labels", "annotations"):
        for key, value in (meta.get(section) or {}).items():
            out[("metadata", section, key)] = value

    def walk(value: Any, path: FieldPath) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(sub, (*path, key))
        elif value is not None and value != []:
            out[path] = value

    for key, value in obj.items():
        if key in _UNTRACKED_TOP_LEVEL:
            continue
        walk(value, (key,))
    return out


def _set_path(obj: dict, path: FieldPath, value: Any) -> None:
    node = obj
    for p in path[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[path[-1]] = copy.deepcopy(value)


def _del_path(obj: dict, path: FieldPath) -> None:
    parents = []
    node: Any = obj
    for p in path[:-1]:
        if not isinstance(node, dict) or p not in node:
            return
        parents.append((node, p))
        node = node[p]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    # Drop containers the removal emptied (labels: {} after the last label goes).
    for parent, key in reversed(parents):
        if parent[key] == {} and key != "metadata":
            del parent[key]
        else:
            break


def _fields_v1(paths: Iterable[FieldPath]) -> dict:
    out: dict = {}
    for path in sorted(paths):
        node = out
        for p in path:
            node = node.setdefault(f"f:{p}", {})
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value and leaves ``target`` untouched."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"the JSON patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test); returns a new value.

    Raises ApiError 422 for an operation that does not apply (as the API server does).
    """
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)

    def fail(message: str) -> ApiError:
        return ApiError(
            422,
            "Invalid",
            f"the server rejected our request due to an error in our request: {message}",
        )

    def parent_of(parts: list[str]) -> tuple[Any, str]:
        node = doc
        for part in parts[:-1]:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise fail(f"doc is missing path: /{'/'.join(parts)}")
        return node, parts[-1]

    def get(parts: list[str]) -> Any:
        node = doc
        for part in parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise fail(f"doc is missing path: /{'/'.join(parts)}")
        return node

    def add(parts: list[str], value: Any) -> None:
        nonlocal doc
        if not parts:
            doc = copy.deepcopy(value)
            return
        node, key = parent_of(parts)
        if isinstance(node, dict):
            node[key] = copy.deepcopy(value)
        elif isinstance(node, list):
            index = len(node) if key == "-" else int(key) if key.isdigit() else -1
            if not 0 <= index <= len(node):
                raise fail(f"index out of bounds: {key}")
            node.insert(index, copy.deepcopy(value))
        else:
            raise fail(f"doc is missing path: /{'/'.join(parts)}")

    def remove(parts: list[str]) -> Any:
        node, key = parent_of(parts)
        if isinstance(node, dict) and key in node:
            return node.pop(key)
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            return node.pop(int(key))
        raise fail(f"doc is missing path: /{'/'.join(parts)}")

    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request("each JSON patch operation needs an op and a path")
        parts = _pointer(op["path"])
        kind = op["op"]
        if kind == "add":
            add(parts, op.get("value"))
        elif kind == "remove":
            remove(parts)
        elif kind == "replace":
            remove(parts)
            add(parts, op.get("value"))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = remove(source) if kind == "move" else copy.deepcopy(get(source))
            add(parts, value)
        elif kind == "test":
            if get(parts) != op.get("value"):
                raise fail(f"testing value /{'/'.join(parts)} failed")
        else:
            raise bad_request(f"unexpected JSON patch operation {kind!r}")
    return doc


def _keep_deletion(meta: dict, old_meta: dict) -> None:
    """``rest.BeforeUpdate`` (k8s.io/apiserver/pkg/registry/rest/update.go): "an update can
    never remove/change a deletion timestamp" nor remove the grace period."""
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        if old_meta.get(key) is not None:
            meta[key] = old_meta[key]
        elif key == "deletionTimestamp":
            meta.pop(key, None)


def _spec_changed(old: dict, new: dict) -> bool:
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    raw = json.dumps({"rv": rv, "start": list(key)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        start = data["start"]
        return (str(start[0]), str(start[1]))
    except (binascii.Error, ValueError, KeyError, IndexError, TypeError):
        raise bad_request(f"continue key is not valid: {token!r}") from None


# --------------------------------------------------------------------------- server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer
    # A response is buffered and sent in one write when the handler is done
    # (handle_one_request flushes), as Go's net/http does (src/net/http/server.go: the
    # response's bufio.Writer, flushed when the handler returns); a watch flushes each event.
    wbufsize = 64 * 1024

    def setup(self) -> None:
        super().setup()
        # Like kube-apiserver (Go sets TCP_NODELAY): without it the body, written after the
        # headers, waits ~40 ms for the client's delayed ACK on every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def parse_request(self) -> bool:
        """``BaseHTTPRequestHandler.parse_request`` for the plain HTTP/1.1 requests clients
        send, without the ``email`` package: its header parser was about a third of this
        server's time per request. Anything else (another version, a malformed line) takes the
        standard path, which reads the headers itself."""
        line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = line.split()
        if len(words) != 3 or words[2] != "HTTP/1.1":
            return super().parse_request()
        self.command, self.path, self.request_version = words
        self.requestline = line
        headers = _Headers()
        for _ in range(100):  # http.client's _MAXHEADERS
            raw = self.rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, sep, value = str(raw, "iso-8859-1").partition(":")
            if not sep:
                self.send_error(400, f"Bad header line {raw[:80]!r}")
                return False
            headers[name.strip()] = value.strip()
        else:
            self.send_error(431, "Too many headers")
            return False
        self.headers = headers  # type: ignore[assignment]
        self.close_connection = headers.get("Connection", "").lower() == "close"
        return True

    def _serve(self) -> None:
        try:
            self.server.api._serve(self)
        except _Drop:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _Headers(dict):
    """Request headers by case-insensitive name (what the handlers read: ``get``)."""

    def __setitem__(self, name: str, value: str) -> None:
        super().__setitem__(name.lower(), value)

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


@dataclass(frozen=True)
class _WatchRequest:
    kind: Kind
    namespace: str | None
    query: dict[str, str]


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The listen backlog. socketserver's default is 5: a burst of new connections (a sync's
    # writers, watches) overflows it, the kernel drops the SYNs and the clients retransmit
    # after a second. The API server is a Go listener, whose backlog is the kernel's
    # somaxconn (Go: src/net/sock_linux.go maxListenerBacklog; 4096 on current kernels).
    request_queue_size = 4096

    def __init__(self, address: tuple[str, int], api: FakeKubeApi) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        super().__init__(address, _Handler)


class FakeKubeApi:
    """The fake API server. ``start()`` it, point a client at ``kubeconfig_path``, ``stop()`` it.

    ``unknown_fields`` is what happens to unknown fields when a request does not say
    (``fieldValidation``): ``"reject"`` (422, the default: catches typos) or ``"drop"``
    (what a real server does by default, with a warning).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        seed: int = 0,
        unknown_fields: str = "reject",
        strict_quota_names: bool = True,
        tls: ssl.SSLContext | None = None,
        ca_file: str = "",
    ) -> None:
        self.host = host
        # HTTPS: a server-side context (its certificate, and the client CAs it asks for when
        # it verifies clients), and the CA file the generated kubeconfig trusts.
        self.tls = tls
        self.ca_file = ca_file
        self.port = port
        self.store = Store()
        self.counts: Counter[tuple[str, str]] = Counter()
        self.dry_run_counts: Counter[tuple[str, str]] = Counter()
        # (kind, labelSelector) of every LIST, so tests can assert what a sync asked for.
        self.list_selectors: list[tuple[str, str]] = []
        self.faults: list[FaultRule] = []
        self.rng = random.Random(seed)
        self.seed = seed
        self.unknown_fields = unknown_fields
        self.strict_quota_names = strict_quota_names
        # Watch: seconds between bookmarks on an idle stream, and the default stream length.
        self.bookmark_interval = 1.0
        self.watch_timeout = 60.0
        # Seconds every write takes (a real API server's round trip to etcd), and the most
        # requests (watches aside) that were being served at once: tests of concurrent writers.
        self.write_latency = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._meta_lock = threading.Lock()
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.kubeconfig_path: str = ""
        self._clients: list[Any] = []
        # API groups whose CRDs are "not installed": their paths answer 404 as an API server
        # without the CRD does (no handler registered for the group/version). See uninstall().
        self.uninstalled: set[str] = set()
        # Time, as Volcano has it (issue 25). Its webhooks validate against an informer cache
        # (cmd/webhook-manager/app/server.go: ``service.Config.QueueLister`` is a
        # SharedInformerFactory lister), which lags the API server: with
        # ``webhook_cache_lag = N`` the queue webhooks see the Queues as they were before the
        # last N writes to Queues, until each write is ``webhook_cache_delay`` seconds old (an
        # informer catches up; a client that retries with backoff converges). 0: no lag.
        self.webhook_cache_lag = 0
        self.webhook_cache_delay = 0.2
        # Denials that the up-to-date view would have allowed (the lag's observable effect).
        self.stale_denials = 0
        # (time.monotonic() of the write, the resourceVersion of its first event)
        self._queue_writes: deque[tuple[float, int]] = deque(maxlen=256)
        # The queue controller (pkg/controllers/queue) acts after a write, not inside it: each
        # write enqueues its Queue, and ``controller_delay`` seconds later a background worker
        # runs the controller (or a test calls ``controller_step()`` with
        # ``auto_controller = False``). Until then a new Queue has no ``status.state``.
        self.controller_delay = 0.05
        self.auto_controller = True
        # The scheduler's capacity plugin with ``enableHierarchy: true`` (what Fairshare ships);
        # see scheduler_blocked().
        self.scheduler_hierarchy = True
        self._pending: dict[str, float] = {}
        self._controller_busy = 0
        self._controller = threading.Condition()
        self._controller_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeKubeApi:
        if self._server is not None:
            return self
        self._server = _HttpServer((self.host, self.port), self)
        self.port = self._server.server_address[1]
        if self.tls is not None:
            # TLS on every accepted connection, as the API server's listener
            # (k8s.io/apiserver/pkg/server/secure_serving.go: a tls.Listener).
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"kubeapi:{self.port}", daemon=True
        )
        self._thread.start()
        self._controller_thread = threading.Thread(
            target=self._controller_loop, name=f"kubeapi-controller:{self.port}", daemon=True
        )
        self._controller_thread.start()
        if not self.kubeconfig_path:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="kubeapi-")
            self.kubeconfig_path = self.write_kubeconfig(Path(self._tmpdir.name) / "kubeconfig")
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection (clients see resets / refusals)."""
        server, self._server = self._server, None
        self._wake_sleepers()
        with self._controller:
            self._controller.notify_all()
        if self._controller_thread is not None:
            self._controller_thread.join(timeout=5)
            self._controller_thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        for conn in list(server.connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def close(self) -> None:
        self.stop()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
            self.kubeconfig_path = ""

    def restart(self, *, lose_state: bool = False) -> None:
        """Stop and start again on the same port; ``lose_state`` also forgets every object
        (the resourceVersion counter keeps counting, as if etcd were restored empty)."""
        self.stop()
        if lose_state:
            self.store.clear()
            self.seed_namespaces()
            self.seed_volcano()
        self.start()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "fake",
                    "cluster": {"server": self.url}
                    | ({"certificate-authority": self.ca_file} if self.ca_file else {}),
                }
            ],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake"}},
            ],
            "current-context": "fake",
        }
        Path(path).write_text(yaml.safe_dump(config))
        return str(path)

    def api_client(self, *, retries: Any = False) -> Any:
        """A ``kubernetes.client.ApiClient`` loaded from the generated kubeconfig.

        ``retries=False`` turns off urllib3's own retries so that each call is one request
        (and fault rules fire predictably); pass None for the library default.
        """
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig_path, client_configuration=cfg)
        cfg.retries = retries
        api_client = client.ApiClient(cfg)
        self._clients.append(api_client)
        return api_client

    def close_clients(self) -> None:
        """Close every client ``api_client()`` handed out (their pooled connections too)."""
        clients, self._clients = self._clients, []
        for api_client in clients:
            api_client.close()

    # ------------------------------------------------------------------ test/bench helpers

    def reset(self) -> None:
        """Fresh state: no objects but the default namespaces, no faults, zero counters."""
        self.faults.clear()
        self.uninstalled.clear()
        self.write_latency = 0.0
        self.webhook_cache_lag = 0
        self.webhook_cache_delay = 0.2
        self.stale_denials = 0
        self.controller_delay = 0.05
        self.auto_controller = True
        self.scheduler_hierarchy = True
        with self._controller:
            self._pending.clear()
            self._queue_writes.clear()
        self._wake_sleepers()
        self.store.clear()
        self.seed_namespaces()
        self.seed_volcano()
        self.reset_counts()
        self.rng = random.Random(self.seed)
        if not self.running:
            self.start()

    def seed_namespaces(self, names: Iterable[str] = DEFAULT_NAMESPACES) -> None:
        for name in names:
            self.put_object(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                    "status": {"phase": "Active"},
                }
            )

    def seed_volcano(self) -> None:
        """Volcano's own queues, as a fresh installation has them: ``root`` (the top of the
        hierarchy, created by the scheduler) and ``default`` (``pkg/controllers/queue``
        creates it; its controller gives it ``parent: root``), both open."""
        for name, spec in (
            ("root", {"weight": 1, "reclaimable": False}),
            ("default", {"weight": 1, "reclaimable": True, "parent": "root"}),
        ):
            self.put_object(
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": {**spec, "dequeueStrategy": "traverse"},
                    "status": {"state": "Open"},
                }
            )

    def reset_counts(self) -> None:
        with self._meta_lock:
            self.counts.clear()
            self.dry_run_counts.clear()
            self.list_selectors.clear()
            self.max_in_flight = 0

    def writes(self, kind: str | None = None) -> int:
        """Write requests received (create/update/patch/apply/delete), dry runs excluded."""
        want = lookup(kind).kind if kind else None
        with self._meta_lock:
            total = sum(
                n
                for (verb, k), n in self.counts.items()
                if verb in WRITE_VERBS and (want is None or k == want)
            )
            dry = sum(n for (_, k), n in self.dry_run_counts.items() if want is None or k == want)
        return total - dry

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """A deep copy of the stored object, or None."""
        obj = self.store.get(lookup(kind).kind, namespace or "", name)
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str, namespace: str | None = None) -> list[dict]:
        """Deep copies of every stored object of ``kind`` (in ``namespace`` if given), sorted."""
        k = lookup(kind).kind
        with self.store.lock:
            items = [
                obj
                for (ns, _), obj in sorted(self.store.items[k].items())
                if namespace is None or ns == namespace
            ]
        return copy.deepcopy(items)

    def put_object(self, obj: dict) -> dict:
        """Store ``obj`` as is (test setup): no validation, no counters, no namespace check."""
        kind = BY_KIND[obj["kind"]]
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", kind.api_version)
        meta = obj["metadata"]
        old = self.store.get(kind.kind, meta.get("namespace") or "", meta["name"])
        if old is not None:
            for key in ("uid", "creationTimestamp"):
                obj["metadata"].setdefault(key, old["metadata"][key])
        self.store.put(kind.kind, self.store.stamp(obj))
        return copy.deepcopy(obj)

    def load(self, objects: Iterable[dict]) -> int:
        """Bulk-load objects for benchmarks: no validation, no copies, no counters.

        The dicts are stamped in place (uid, resourceVersion, creationTimestamp) and then belong to
        the server: do not mutate them afterwards. Returns how many were loaded.
        """
        by_kind: dict[str, list[dict]] = {}
        created = now()
        with self.store.lock:
            for obj in objects:
                meta = obj.setdefault("metadata", {})
                kind = BY_KIND[obj["kind"]]
                obj.setdefault("apiVersion", kind.api_version)
                meta.setdefault("uid", f"{self.store.rv + 1:032x}")
                meta.setdefault("creationTimestamp", created)
                meta["resourceVersion"] = self.store.next_rv()
                by_kind.setdefault(kind.kind, []).append(obj)
            for kind_name, objs in by_kind.items():
                self.store.bulk_put(kind_name, objs)
        return sum(len(v) for v in by_kind.values())

    def scheduler_blocked(self) -> str | None:
        """Why Volcano's scheduler would allocate and enqueue nothing at all now (the capacity
        plugin's hierarchy check failed), or None: see ``volcano.scheduler_blocked``."""
        with self.store.lock:
            podgroups = list(self.store.items["PodGroup"].values())
            queues = self._current_queues()
        return volcano.scheduler_blocked(podgroups, queues, hierarchy=self.scheduler_hierarchy)

    def stranded_podgroups(self) -> list[tuple[str, str, str, str]]:
        """``(namespace, name, queue, reason)`` of each PodGroup with work left whose queue does
        not exist or is not a leaf: see ``volcano.stranded_podgroups``."""
        with self.store.lock:
            podgroups = list(self.store.items["PodGroup"].values())
            queues = self._current_queues()
        return volcano.stranded_podgroups(podgroups, queues)

    def uninstall(self, *groups: str) -> None:
        """Act as a cluster without these API groups' CRDs (e.g. ``"batch.volcano.sh"``): every
        path of the group answers 404 "the server could not find the requested resource", as
        kube-apiserver's ``NotFoundHandler`` does for an unregistered group/version.
        ``reset()`` installs them again."""
        self.uninstalled.update(groups)

    def fault(self, error: int | str, **match: Any) -> FaultRule:
        """Add a fault rule (see FaultRule); ``kind`` may be a kind name or plural."""
        if match.get("kind"):
            match["kind"] = lookup(match["kind"]).kind
        if not (isinstance(error, int) or error in ("timeout", "reset")):
            raise ValueError(f"unknown fault {error!r}: use a status code, 'timeout' or 'reset'")
        rule = FaultRule(error, **match)
        self.faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        self.faults.clear()
        self._wake_sleepers()

    def _wake_sleepers(self) -> None:
        old, self._wake = self._wake, threading.Event()
        old.set()

    # ------------------------------------------------------------------ HTTP

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        """The request body: ``Content-Length`` bytes, or a chunked body (what kubectl sends
        for ``delete --raw -f``), as Go's net/http reads either (src/net/http/transfer.go)."""
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size_line = h.rfile.readline(65537)
                try:
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    raise _Drop from None
                if size == 0:
                    while h.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(h.rfile.read(size))
                h.rfile.readline(65537)  # the CRLF after the chunk
        length = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(length) if length else b""

    def _serve(self, h: _Handler) -> None:
        raw = self._read_body(h)
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        headers: dict[str, str] = {}
        if parts.path == "/metrics" and h.command == "GET":
            self._send_metrics(h)
            return
        with self._meta_lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            code, body = self._route(h, h.command, parts.path, query, raw)
        except ApiError as e:
            code, body, headers = e.code, e.body(), e.headers
        finally:
            with self._meta_lock:
                self.in_flight -= 1
        if isinstance(body, _WatchRequest):
            self._watch(h, body)
            return
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(payload)

    def _route(
        self, h: _Handler, method: str, path: str, query: dict[str, str], raw: bytes
    ) -> tuple[int, Any]:
        segs = [unquote(s) for s in path.strip("/").split("/") if s]
        if segs[:1] == ["openapi"]:
            self._count("get", "OpenAPI")
            document = openapi.document(segs[1:], KINDS)
            if document is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return 200, document
        discovery = self._discovery(segs)
        if discovery is not None:
            self._count("get", "Discovery")
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
            return 200, discovery
        if segs[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = name = sub = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, plural = rest[1], rest[2]
            name = rest[3] if len(rest) > 3 else None
            sub = "/".join(rest[4:]) or None
        elif rest:
            plural = rest[0]
            name = rest[1] if len(rest) > 1 else None
            sub = "/".join(rest[2:]) or None
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        kind = BY_PATH.get((group, version, plural))
        if kind is not None and kind.group in self.uninstalled:
            kind = None
        if kind is None or (namespace is not None and not kind.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        verb = {
            "GET": "get" if name else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "apply" if content_type == APPLY else "patch",
            "DELETE": "delete",
        }[method]
        watching = verb == "list" and query.get("watch") in ("true", "1")
        if watching:
            verb = "watch"
        self._count(verb, kind.kind, dry_run=query.get("dryRun") == "All")
        self._maybe_fault(h, verb, kind, name, namespace)
        if self.write_latency and verb in WRITE_VERBS:
            time.sleep(self.write_latency)

        if sub:
            raise ApiError(404, "NotFound", f"the fake API server does not serve {sub!r}")
        if kind.namespaced and namespace is None and verb not in ("list", "watch"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if watching:
            return 200, _WatchRequest(kind, namespace, query)
        if "dryRun" in query and query["dryRun"] != "All":
            raise bad_request(f'unsupported dry-run value "{query["dryRun"]}"')
        dry_run = query.get("dryRun") == "All"
        ns = namespace or ""
        if verb == "list":
            return 200, self._list(kind, namespace, query)
        mark = self.store.rv
        if method == "POST":
            if name:
                raise ApiError(405, "MethodNotAllowed", "POST to a named object is not allowed")
            created = self._create(kind, ns, self._json(raw), query, h, dry_run)
            self._after_write(kind, ns, created["metadata"]["name"], mark)
            return 201, created
        assert name is not None
        if verb == "get":
            obj = self.store.get(kind.kind, ns, name)
            if obj is None:
                raise not_found(kind, name)
            return 200, obj
        if verb == "update":
            result = self._update(kind, ns, name, self._json(raw), query, h, dry_run)
            self._after_write(kind, ns, name, mark)
            return 200, result
        if verb == "patch":
            body = self._json(raw, allow_list=content_type == JSON_PATCH)
            result = self._patch(kind, ns, name, content_type, body, query, h, dry_run)
            self._after_write(kind, ns, name, mark)
            return 200, result
        if verb == "apply":
            code, result = self._apply(kind, ns, name, raw, query, dry_run)
            self._after_write(kind, ns, name, mark)
            return code, result
        options = self._delete_options(kind, raw, query)
        with self.store.lock:  # the checks and the delete at one state
            self._check_delete(kind, ns, name, options)
            status = self._delete(kind, ns, name, options.get("dryRun") == ["All"])
        self._after_write(kind, ns, name, mark)
        return 200, status

    # ------------------------------------------------------------------ watch

    def _watch(self, h: _Handler, request: _WatchRequest) -> None:
        """Stream watch events, as the API server's watch cache serves them.

        Imitates ``k8s.io/apiserver/pkg/storage/cacher``: ``cacher.go`` ``Watch`` starts the
        stream (200) and, for a ``resourceVersion`` older than the oldest event kept, sends one
        ``ERROR`` event whose object is a 410 ``Expired`` Status ("too old resource version",
        ``watch_cache.go`` ``getAllEventsSinceLocked``) and ends; else it replays the events
        after that version, then follows new ones. ``cacheWatcher.convertToWatchEvent`` filters
        with the object's previous state: matching before and after → MODIFIED, only after →
        ADDED, only before → DELETED. With ``allowWatchBookmarks=true`` an idle stream gets
        ``BOOKMARK`` events carrying only ``metadata.resourceVersion`` (``cacher.go``
        ``dispatchEvents``/bookmark timer; ``bookmark_interval`` seconds here instead of about
        a minute). ``resourceVersion`` unset or "0" first sends the current objects as ADDED
        ("Get State and Start at Most Recent"). ``timeoutSeconds`` ends the stream cleanly.
        """
        kind, query = request.kind, request.query
        try:
            label_match = parse_label_selector(query.get("labelSelector"))
        except SelectorError as e:
            raise bad_request(str(e)) from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        try:
            timeout = float(query.get("timeoutSeconds") or self.watch_timeout)
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds {query['timeoutSeconds']!r}") from None

        requested = query.get("resourceVersion") or "0"
        try:
            since = int(requested)
        except ValueError:
            raise bad_request(f"invalid resourceVersion {requested!r}") from None

        def matches(obj: dict | None) -> bool:
            if obj is None:
                return False
            ns = obj["metadata"].get("namespace") or ""
            if request.namespace is not None and ns != request.namespace:
                return False
            return label_match is None or label_match(obj)

        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()  # the headers go out at once (Go's watch handler Flush()es too)

        def send(event_type: str, obj: dict) -> None:
            line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":"))
            data = line.encode() + b"\n"
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        store = self.store
        deadline = time.monotonic() + timeout
        try:
            with store.lock:
                generation = store.generation
                initial: list[dict] = []
                if since == 0:
                    since = store.rv
                    initial = [o for o in store.items[kind.kind].values() if matches(o)]
                elif since < store.compacted_rv:
                    status = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": f"too old resource version: {since} ({store.compacted_rv})",
                        "reason": "Expired",
                        "code": 410,
                    }
                    initial = []
                    since = -1
            if since < 0:
                send("ERROR", status)
                return
            for obj in initial:
                send("ADDED", obj)
            last_bookmark = time.monotonic()
            while self._server is not None:
                with store.lock:
                    if store.generation != generation:
                        return
                    if since < store.compacted_rv:
                        return  # compacted under an open watch: the client re-watches, gets 410
                    pending = [e for e in store.history if e.rv > since and e.kind == kind.kind]
                    if not pending:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return
                        store.changed.wait(min(remaining, self.bookmark_interval, 0.5))
                        pending = [e for e in store.history if e.rv > since and e.kind == kind.kind]
                    current_rv = store.rv
                for event in pending:
                    since = event.rv
                    now_matches, before = matches(event.obj), matches(event.prev)
                    if event.type == "DELETED":
                        kind_of = "DELETED" if before else None
                    elif now_matches and before:
                        kind_of = "MODIFIED"
                    elif now_matches:
                        kind_of = "ADDED"
                    elif before:
                        kind_of = "DELETED"
                    else:
                        kind_of = None
                    if kind_of is not None:
                        send(kind_of, event.obj)
                if not pending:
                    since = max(since, current_rv)
                if bookmarks and time.monotonic() - last_bookmark >= self.bookmark_interval:
                    last_bookmark = time.monotonic()
                    send(
                        "BOOKMARK",
                        {
                            "kind": kind.kind,
                            "apiVersion": kind.api_version,
                            "metadata": {"resourceVersion": str(since)},
                        },
                    )
                if time.monotonic() >= deadline:
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True
            return
        finally:
            with contextlib.suppress(OSError):
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()

    def _send_metrics(self, h: _Handler) -> None:
        """``GET /metrics``: the request counter in Prometheus text format, as the API server's
        ``apiserver_request_total`` (``k8s.io/apiserver/pkg/endpoints/metrics/metrics.go``,
        ``requestCounter``; its ``verb`` label is upper case, ``APPLY`` for server-side apply,
        as ``cleanVerb`` makes it). Labelled by kind rather than resource and group: enough
        for a benchmark in another process to count requests as ``counts`` does here."""
        with self._meta_lock:
            rows = sorted(self.counts.items())
        lines = [
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each "
            "verb, dry run value, group, version, resource, scope, component, and HTTP response "
            "code.",
            "# TYPE apiserver_request_total counter",
        ]
        for (verb, kind), n in rows:
            label = _METRIC_VERBS.get(verb, verb.upper())
            lines.append(f'apiserver_request_total{{verb="{label}",kind="{kind}"}} {n}')
        payload = ("\n".join(lines) + "\n").encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; version=0.0.4")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    def _count(self, verb: str, kind: str, *, dry_run: bool = False) -> None:
        with self._meta_lock:
            self.counts[(verb, kind)] += 1
            if dry_run and verb in WRITE_VERBS:
                self.dry_run_counts[(verb, kind)] += 1

    def _maybe_fault(
        self, h: _Handler, verb: str, kind: Kind, name: str | None, namespace: str | None
    ) -> None:
        with self._meta_lock:
            rule = next(
                (r for r in self.faults if r.matches(verb, kind.kind, name, namespace)), None
            )
            if rule is None or (rule.probability < 1.0 and self.rng.random() >= rule.probability):
                return
            rule.fired += 1
            wake = self._wake
        if rule.error == "timeout":
            wake.wait(rule.delay)
            raise _Drop
        if rule.error == "reset":
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            raise _Drop
        code = int(rule.error)
        reasons = {
            409: "Conflict",
            429: "TooManyRequests",
            500: "InternalError",
            503: "ServiceUnavailable",
            504: "Timeout",
            404: "NotFound",
            403: "Forbidden",
        }
        headers = {}
        details = _details(kind, name)
        message = f"injected fault {code}"
        if code == 429 and rule.retry_after is not None:
            headers["Retry-After"] = str(rule.retry_after)
            details["retryAfterSeconds"] = rule.retry_after
            message = "Too many requests, please try again later."
        if code == 409:
            message = (
                f'Operation cannot be fulfilled on {kind.resource} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )
        reason = reasons.get(code, "InternalError")
        raise ApiError(code, reason, message, details=details, headers=headers)

    @staticmethod
    def _json(raw: bytes, *, allow_list: bool = False) -> Any:
        try:
            body = json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request(f"the request body is not valid JSON: {e}") from None
        if allow_list and isinstance(body, list):
            return body
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        return body

    # ------------------------------------------------------------------ controllers

    def _after_write(self, kind: Kind, ns: str, name: str, mark: int) -> None:
        """After a write that stored something (the resourceVersion moved past ``mark``): note
        it for the webhooks' lagged view and enqueue the controllers that watch its kind."""
        if self.store.rv <= mark:
            return
        if kind.kind in _KUEUE_WATCHED:
            self.kueue_controller_step()
        if kind.kind != "Queue":
            return
        with self._controller:
            self._queue_writes.append((time.monotonic(), mark + 1))
            if self.store.get("Queue", "", name) is None:
                return
            # queue_controller_handler.go addQueue/updateQueue: the informer's event enqueues
            # a SyncQueueAction request for the queue; a worker handles it later.
            self._pending.setdefault(name, time.monotonic() + self.controller_delay)
            self._controller.notify_all()
        if self.auto_controller and self.controller_delay <= 0:
            self.controller_step(name)

    def kueue_controller_step(self) -> list[tuple[str, str]]:
        """Kueue's ClusterQueue and ResourceFlavor reconcilers, run in the request that changed
        what they watch (no lag, unlike the Volcano queue controller): each adds the
        ``kueue.x-k8s.io/resource-in-use`` finalizer to an object that lacks it and, for one
        being deleted, removes it once nothing uses the object (``kueue.py``
        ``clusterqueue_releasable``, ``resourceflavor_users``), which completes the delete.
        Repeats until nothing changes (a ClusterQueue gone may free a flavor). Returns the
        ``(kind, name)`` of each object it wrote."""
        written: list[tuple[str, str]] = []
        with self.store.lock:
            for _ in range(100):
                step = self._kueue_reconcile_once()
                if step is None:
                    break
                written.append(step)
        return written

    def _kueue_reconcile_once(self) -> tuple[str, str] | None:
        workloads = list(self.store.items["Workload"].values())
        queues = list(self.store.items["ClusterQueue"].values())
        for kind_name, objs in (
            ("ClusterQueue", queues),
            ("ResourceFlavor", list(self.store.items["ResourceFlavor"].values())),
        ):
            for obj in objs:
                name = obj["metadata"]["name"]
                if not obj["metadata"].get("deletionTimestamp"):
                    patch = kueue.finalizer_patch(obj, add=True)
                elif kind_name == "ClusterQueue":
                    releasable = kueue.clusterqueue_releasable(name, workloads)
                    patch = kueue.finalizer_patch(obj, add=False) if releasable else None
                else:
                    in_use = kueue.resourceflavor_users(name, queues)
                    patch = None if in_use else kueue.finalizer_patch(obj, add=False)
                if patch is None:
                    continue
                try:
                    self._patch(
                        BY_KIND[kind_name],
                        "",
                        name,
                        JSON_PATCH,
                        patch,
                        {"fieldManager": kueue.CONTROLLER},
                        None,
                        False,
                    )
                except ApiError as e:
                    log.warning("kueue controller could not update %s %s: %s", kind_name, name, e)
                    continue
                return kind_name, name
        return None

    def controller_step(self, *names: str) -> list[str]:
        """Run the queue controller now for the pending Queues (all of them, or ``names``);
        returns the names it ran for."""
        with self._controller:
            chosen = [n for n in self._pending if not names or n in names]
            for n in chosen:
                del self._pending[n]
        for n in chosen:
            self._sync_queue(n)
        return chosen

    def pending_controller_actions(self) -> list[str]:
        """The Queues the controller has yet to sync (an observable of the controller's lag)."""
        with self._controller:
            return sorted(self._pending)

    def _controller_loop(self) -> None:
        """The background worker: runs the controller for each Queue whose delay has passed."""
        while self._server is not None:
            with self._controller:
                now_ = time.monotonic()
                due = [n for n, t in self._pending.items() if t <= now_]
                if not due or not self.auto_controller:
                    later = [t - now_ for t in self._pending.values() if t > now_]
                    self._controller.wait(min([0.05, *later]))
                    continue
                for n in due:
                    del self._pending[n]
                self._controller_busy += 1
            try:
                for n in due:
                    try:
                        self._sync_queue(n)
                    except Exception:  # pragma: no cover - a controller error must not kill it
                        log.exception("fake queue controller failed on %s", n)
            finally:
                with self._controller:
                    self._controller_busy -= 1
                    self._controller.notify_all()

    def settle_controller(self, timeout: float = 5.0) -> None:
        """Run what the controller still owes now and wait for a step the background worker is
        in the middle of: afterwards no Queue write of the controller is outstanding (tests
        that snapshot resourceVersions call this first)."""
        self.controller_step()
        deadline = time.monotonic() + timeout
        with self._controller:
            while self._controller_busy and time.monotonic() < deadline:
                self._controller.wait(0.01)

    def _sync_queue(self, name: str) -> None:
        """``pkg/controllers/queue/queue_controller_action.go`` ``syncQueue`` for a
        ``SyncQueueAction``: ``updateQueueParent``, then (``state/open.go`` ``openState`` for a
        queue whose state is "" or Open) ``ApplyStatus(state: Open)``."""
        kind = BY_KIND["Queue"]
        with self.store.lock:
            obj = self.store.get("Queue", "", name)
            if obj is None:
                return  # handleQueue: "Queue has been deleted"
            patch = volcano.controller_queue_patch(obj)
            if patch:
                try:
                    self._patch(
                        kind,
                        "",
                        name,
                        JSON_PATCH,
                        patch,
                        {"fieldManager": volcano.CONTROLLER},
                        None,
                        False,
                    )
                except ApiError as e:
                    log.warning("queue controller could not set the parent of %s: %s", name, e)
            obj = self.store.get("Queue", "", name)
            status = volcano.controller_queue_status(obj) if obj is not None else None
            if obj is not None and status is not None:
                new = copy.deepcopy(obj)
                new["status"] = status
                new["metadata"]["resourceVersion"] = self.store.next_rv()
                self.store.put("Queue", new)

    def _discovery(self, segs: list[str]) -> dict | None:
        if segs == ["version"]:
            return {
                "major": "1",
                "minor": "33",
                "gitVersion": "v1.33.0-fairshare-fake",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2025-04-23T00:00:00Z",
                "goVersion": "go1.24.2",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups: dict[str, list[Kind]] = {}
        for k in KINDS:
            if k.group:
                groups.setdefault(k.group, []).append(k)
        if segs == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": ks[0].api_version, "version": ks[0].version}],
                        "preferredVersion": {
                            "groupVersion": ks[0].api_version,
                            "version": ks[0].version,
                        },
                    }
                    for g, ks in groups.items()
                ],
            }
        if segs == ["api", "v1"]:
            return self._resource_list("v1", [k for k in KINDS if not k.group])
        if len(segs) == 3 and segs[0] == "apis":
            kinds = [k for k in groups.get(segs[1], []) if k.version == segs[2]]
            if kinds:
                return self._resource_list(f"{segs[1]}/{segs[2]}", kinds)
        return None

    @staticmethod
    def _resource_list(group_version: str, kinds: list[Kind]) -> dict:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": [
                {
                    "name": k.plural,
                    "singularName": k.kind.lower(),
                    "namespaced": k.namespaced,
                    "kind": k.kind,
                    "shortNames": list(k.short_names),
                    "verbs": ["create", "delete", "get", "list", "patch", "update"],
                }
                for k in kinds
            ],
        }

    # ------------------------------------------------------------------ verbs

    def _list(self, kind: Kind, namespace: str | None, query: dict[str, str]) -> bytes:
        with self._meta_lock:
            self.list_selectors.append((kind.kind, query.get("labelSelector") or ""))
        try:
            label_match = parse_label_selector(query.get("labelSelector"))
            field_match = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as e:
            raise bad_request(str(e)) from None
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit {query['limit']!r}") from None
        token = query.get("continue")
        if token and query.get("resourceVersion") not in (None, "", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        if token and query.get("resourceVersionMatch"):
            raise bad_request("resourceVersionMatch is forbidden when continue is provided")
        start_after = _decode_continue(token) if token else None
        items: list[dict] = []
        next_key = None
        remaining = None
        with self.store.lock:
            keys = self.store.keys(kind.kind)
            bucket = self.store.items[kind.kind]
            lo, hi = 0, len(keys)
            if namespace is not None:
                lo = bisect.bisect_left(keys, (namespace, ""))
                hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
            if start_after is not None:
                lo = max(lo, bisect.bisect_right(keys, start_after))
            i = lo
            while i < hi:
                obj = bucket[keys[i]]
                i += 1
                if label_match is not None and not label_match(obj):
                    continue
                if field_match is not None and not field_match(obj):
                    continue
                if limit and len(items) == limit:
                    # One more match exists: this page is full and there is a next one.
                    next_key = (
                        items[-1]["metadata"].get("namespace") or "",
                        items[-1]["metadata"]["name"],
                    )
                    if label_match is None and field_match is None:
                        remaining = hi - i + 1
                    break
                items.append(obj)
            rv = self.store.rv
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if next_key is not None:
            meta["continue"] = _encode_continue(rv, next_key)
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        # Serialise only this page; the stored dicts are immutable, so no copy is needed.
        head = json.dumps(
            {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta}
        )
        body = json.dumps(items, separators=(",", ":"))
        return (head[:-1] + ',"items":' + body + "}").encode()

    def _manager(self, query: dict[str, str], h: _Handler | None) -> str:
        if query.get("fieldManager"):
            return query["fieldManager"]
        agent = (h.headers.get("User-Agent") if h else None) or "unknown"
        return agent.split("/")[0]

    def _unknown_mode(self, query: dict[str, str]) -> str:
        mode = query.get("fieldValidation")
        if mode in ("Ignore", "Warn"):
            return "drop"
        if mode == "Strict":
            return "reject"
        if mode:
            raise bad_request(f'invalid fieldValidation directive "{mode}"')
        return self.unknown_fields

    def _validate(self, kind: Kind, obj: dict, old: dict | None, query: dict[str, str]) -> None:
        causes = validation.validate(
            kind,
            obj,
            old=old,
            unknown_fields=self._unknown_mode(query),
            strict_quota_names=self.strict_quota_names,
        )
        if causes:
            name = (obj.get("metadata") or {}).get("name") or ""
            raise ApiError(
                422,
                "Invalid",
                f'{kind.qualified} "{name}" is invalid: {validation.message_for(causes)}',
                details=_invalid_details(kind, name, causes),
            )
        self._admit(kind, obj, old)

    def _queues(self) -> dict[str, dict]:
        """The queue lister's view: stored queues by name, as the webhook's informer cache has
        them (see ``webhook_cache_lag``): the Queue events of the last N writes that are
        younger than ``webhook_cache_delay`` are not in it yet (nor anything after them)."""
        with self.store.lock:
            current = {name: obj for (_, name), obj in self.store.items["Queue"].items()}
            boundary = self._lag_boundary()
            if boundary is None or boundary <= self.store.compacted_rv:
                return current
            events = [e for e in self.store.history if e.kind == "Queue" and e.rv >= boundary]
        for event in reversed(events):
            name = event.obj["metadata"]["name"]
            if event.prev is None:
                current.pop(name, None)
            else:
                current[name] = event.prev
        return current

    def _current_queues(self) -> dict[str, dict]:
        return {name: obj for (_, name), obj in self.store.items["Queue"].items()}

    def _lag_boundary(self) -> int | None:
        """The first resourceVersion the lagged view does not hold yet, or None (no lag)."""
        lag = self.webhook_cache_lag
        if lag <= 0:
            return None
        now_ = time.monotonic()
        with self._controller:
            recent = list(self._queue_writes)[-lag:]
        fresh = [rv for at, rv in recent if now_ - at < self.webhook_cache_delay]
        return min(fresh) if fresh else None

    def webhook_view(self) -> dict[str, dict]:
        """Deep copies of the Queues as Volcano's webhooks see them now (lag included)."""
        return copy.deepcopy(self._queues())

    def _note_stale_denial(self, view: dict[str, dict], check: Any) -> None:
        """Count a denial the up-to-date queues would have allowed (only the cache's lag)."""
        if self.webhook_cache_lag <= 0 or view == self._current_queues():
            return
        try:
            check()
        except volcano.Denied:
            return
        with self._meta_lock:
            self.stale_denials += 1

    def _admit(self, kind: Kind, obj: dict, old: dict | None) -> None:
        """Validating admission: Volcano's webhooks and the ``priority`` admission plugin."""
        name = (obj.get("metadata") or {}).get("name") or ""
        webhook = {
            "Queue": "validatequeue.volcano.sh",
            "PodGroup": "validatepodgroup.volcano.sh",
            "Job": "validatejob.volcano.sh",
        }.get(kind.kind)

        def check(queues: dict[str, dict]) -> None:
            if kind.kind == "Queue":
                volcano.validate_queue(obj, old, queues)
            elif kind.kind == "PodGroup" and old is None:
                volcano.validate_podgroup(obj, queues)
            elif kind.kind == "Job" and old is None:
                volcano.admit_job(obj, queues)  # patchDefaultQueue mutates the job

        try:
            if webhook is not None:
                view = self._queues()
                try:
                    check(view)
                except volcano.Denied:
                    self._note_stale_denial(view, lambda: check(self._current_queues()))
                    raise
        except volcano.Denied as e:
            # apiserver webhook errors (ToStatusErr): 400 unless the webhook says otherwise
            raise ApiError(
                400, "BadRequest", f'admission webhook "{webhook}" denied the request: {e}'
            ) from None
        kueue_webhook = kueue.VALIDATING.get(kind.kind)
        if kueue_webhook is not None:
            validate = {
                "ClusterQueue": kueue.validate_clusterqueue,
                "Cohort": kueue.validate_cohort,
                "ResourceFlavor": kueue.validate_resourceflavor,
                "Workload": kueue.validate_workload,
            }[kind.kind]
            try:
                validate(obj, old)
            except kueue.Denied as e:
                # controller-runtime admission.Denied: 403 Forbidden (ToStatusErr keeps it)
                raise ApiError(
                    403,
                    "Forbidden",
                    f'admission webhook "{kueue_webhook}" denied the request: {e}',
                ) from None
        if kind.kind == "PriorityClass" and obj.get("globalDefault"):
            # plugin/pkg/admission/priority/admission.go validatePriorityClass
            for (_, other), existing in self.store.items["PriorityClass"].items():
                if other != name and existing.get("globalDefault"):
                    raise ApiError(
                        403,
                        "Forbidden",
                        f'{kind.resource} "{name}" is forbidden: PriorityClass {other} is '
                        "already marked as default. Only one default can exist",
                        details=_details(kind, name),
                    )

    def _check_type(self, kind: Kind, obj: dict) -> None:
        if obj.get("apiVersion") not in (None, kind.api_version) or obj.get("kind") not in (
            None,
            kind.kind,
        ):
            raise bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) and kind "
                f"({obj.get('kind')}) do not match {kind.api_version} {kind.kind}"
            )
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}

    def _check_namespace(self, kind: Kind, ns: str, obj: dict) -> None:
        meta = obj["metadata"]
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = ns
            if self.store.get("Namespace", "", ns) is None:
                raise not_found(BY_KIND["Namespace"], ns)

    def _server_fields(self, kind: Kind, obj: dict, old: dict | None) -> None:
        """Defaults, mutating webhooks and status handling the real server applies on
        create/update (see defaults.py and volcano.py for the upstream functions)."""
        defaults.apply(kind.kind, obj)
        if old is None and kind.kind == "Queue":
            # mutatequeue.volcano.sh (CREATE): a JSON patch the API server applies
            patched = json_patch(obj, volcano.mutate_queue(obj))
            obj.clear()
            obj.update(patched)
        if old is None and kind.kind in kueue.MUTATING:
            # mclusterqueue.kb.io / mresourceflavor.kb.io / mworkload.kb.io (CREATE): the
            # webhooks' Default (kueue.py)
            {
                "ClusterQueue": kueue.default_clusterqueue,
                "ResourceFlavor": kueue.default_resourceflavor,
                "Workload": kueue.default_workload,
            }[kind.kind](obj)
        if old is None and kind.kind == "PodGroup":
            # mutatepodgroup.volcano.sh (CREATE): route by the namespace annotation
            ns = self.store.get("Namespace", "", obj["metadata"].get("namespace") or "")
            patched = json_patch(obj, volcano.mutate_podgroup(obj, ns))
            obj.clear()
            obj.update(patched)
        if kind.status_subresource:
            if old is not None:
                if "status" in old:
                    obj["status"] = old["status"]
                else:
                    obj.pop("status", None)
            elif kind.kind == "Namespace":
                obj["status"] = {"phase": "Active"}
            elif kind.kind == "Pod":
                obj["status"] = {"phase": "Pending"}
            else:
                obj.pop("status", None)

    def _create(
        self,
        kind: Kind,
        ns: str,
        obj: dict,
        query: dict[str, str],
        h: _Handler | None,
        dry_run: bool,
    ) -> dict:
        self._check_type(kind, obj)
        meta = obj["metadata"]
        # rest.BeforeCreate (k8s.io/apiserver/pkg/registry/rest/create.go) also clears the
        # deletion timestamp and grace period a client sends.
        for key in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            meta.pop(key, None)
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        if kind.namespaced and not meta.get("namespace"):
            meta["namespace"] = ns  # (admission sees the request's namespace)
        self._server_fields(kind, obj, None)
        self._validate(kind, obj, None, query)
        with self.store.lock:
            self._check_namespace(kind, ns, obj)
            if self.store.get(kind.kind, ns, meta["name"]) is not None:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{kind.resource} "{meta["name"]}" already exists',
                    details=_details(kind, meta["name"]),
                )
            if kind.kind == "ResourceClaim":
                self._admit_claim_quota(kind, ns, obj)
            owners = self._take_ownership({}, self._manager(query, h), None, obj)
            return self._store(kind, obj, owners, dry_run, new=True)

    def _admit_claim_quota(self, kind: Kind, ns: str, obj: dict) -> None:
        """The ResourceQuota admission plugin for a ResourceClaim CREATE (``claimquota.py``);
        the caller holds the store lock, so the check and the write see one state."""
        bucket = self.store.items
        quotas = [q for (qns, _), q in sorted(bucket["ResourceQuota"].items()) if qns == ns]
        claims = [c for (cns, _), c in bucket["ResourceClaim"].items() if cns == ns]
        refusal = claimquota.check_create(obj, quotas, claims)
        if refusal is not None:
            name = obj["metadata"]["name"]
            # admission.NewForbidden → errors.NewForbidden: 403 "<resource> "<name>" is forbidden"
            raise ApiError(
                403,
                "Forbidden",
                f'{kind.resource} "{name}" is forbidden: {refusal}',
                details=_details(kind, name),
            )

    def _store(self, kind: Kind, obj: dict, owners: dict, dry_run: bool, *, new: bool) -> dict:
        meta = obj["metadata"]
        if owners:
            meta["managedFields"] = [
                {
                    "manager": manager.split("\x00")[0],
                    "operation": entry["operation"],
                    "apiVersion": kind.api_version,
                    "time": entry["time"],
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _fields_v1(entry["fields"]),
                }
                for manager, entry in sorted(owners.items())
            ]
        else:
            meta.pop("managedFields", None)
        if new:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
        if dry_run:
            meta.setdefault("resourceVersion", str(self.store.rv))
            return obj
        if not new and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # k8s.io/apiserver/pkg/registry/generic/registry/store.go Update:
            # shouldDeleteDuringUpdate → deleteWithoutFinalizers (one DELETED event)
            self.store.remove(kind.kind, meta.get("namespace") or "", meta["name"])
            meta["resourceVersion"] = str(self.store.rv)
            return obj
        meta["resourceVersion"] = self.store.next_rv()
        self.store.put(kind.kind, obj)
        self.store.owners[(kind.kind, meta.get("namespace") or "", meta["name"])] = owners
        return obj

    @staticmethod
    def _take_ownership(owners: dict, manager: str, old: dict | None, new: dict) -> dict:
        """Update-style ownership: the updater owns every field it changed."""
        old_fields = owned_fields(old) if old is not None else {}
        new_fields = owned_fields(new)
        changed = {p for p, v in new_fields.items() if old_fields.get(p, _MISSING) != v}
        gone = set(old_fields) - set(new_fields)
        result: dict[str, dict] = {}
        for mgr, entry in owners.items():
            fields = entry["fields"] - gone - (changed if mgr != manager else set())
            if fields:
                result[mgr] = {**entry, "fields": fields}
        if changed:
            previous = result.get(manager)
            if previous is not None and previous["operation"] == "Update":
                result[manager] = {
                    "operation": "Update",
                    "time": now(),
                    "fields": previous["fields"] | changed,
                }
            else:
                # An Apply entry for the same manager stays separate, as on the real server.
                key = manager if previous is None else f"{manager}\x00update"
                result[key] = {"operation": "Update", "time": now(), "fields": changed}
        return result

    def _existing(self, kind: Kind, ns: str, name: str) -> dict:
        obj = self.store.get(kind.kind, ns, name)
        if obj is None:
            raise not_found(kind, name)
        return obj

    def _conflict(self, kind: Kind, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {kind.resource} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            details=_details(kind, name),
        )

    def _replace(
        self,
        kind: Kind,
        old: dict,
        new: dict,
        query: dict[str, str],
        h: _Handler | None,
        dry_run: bool,
    ) -> dict:
        """Shared tail of PUT and merge PATCH: keep server fields, validate, store if changed."""
        meta, old_meta = new["metadata"], old["metadata"]
        for key in ("uid", "creationTimestamp", "generation"):
            meta[key] = old_meta[key]
        _keep_deletion(meta, old_meta)
        meta["name"] = old_meta["name"]
        if kind.namespaced:
            meta["namespace"] = old_meta["namespace"]
        meta.pop("managedFields", None)
        self._server_fields(kind, new, old)
        self._validate(kind, new, old, query)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if "managedFields" in old_meta:
            meta["managedFields"] = old_meta["managedFields"]
        if new == old:
            return old  # A no-op write does not bump resourceVersion.
        if _spec_changed(old, new):
            meta["generation"] = old_meta["generation"] + 1
        key = (kind.kind, old_meta.get("namespace") or "", old_meta["name"])
        manager = self._manager(query, h)
        owners = self._take_ownership(self.store.owners.get(key, {}), manager, old, new)
        return self._store(kind, new, owners, dry_run, new=False)

    def _update(
        self,
        kind: Kind,
        ns: str,
        name: str,
        obj: dict,
        query: dict[str, str],
        h: _Handler,
        dry_run: bool,
    ) -> dict:
        self._check_type(kind, obj)
        if obj["metadata"].get("name") != name:
            raise bad_request(
                f"the name of the object ({obj['metadata'].get('name')}) does not match the name "
                f"on the URL ({name})"
            )
        with self.store.lock:
            old = self._existing(kind, ns, name)
            rv = obj["metadata"].get("resourceVersion")
            if rv is None and kind.custom:
                raise ApiError(
                    422,
                    "Invalid",
                    f'{kind.qualified} "{name}" is invalid: metadata.resourceVersion: Invalid '
                    "value: 0x0: must be specified for an update",
                    details=_invalid_details(
                        kind,
                        name,
                        [
                            validation.invalid(
                                "metadata.resourceVersion", 0, "must be specified for an update"
                            )
                        ],
                    ),
                )
            if rv is not None and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(kind, name)
            return self._replace(kind, old, obj, query, h, dry_run)

    def _patch(
        self,
        kind: Kind,
        ns: str,
        name: str,
        content_type: str,
        patch: Any,
        query: dict[str, str],
        h: _Handler | None,
        dry_run: bool,
    ) -> dict:
        if content_type not in (MERGE, STRATEGIC, JSON_PATCH) or (
            kind.custom and content_type == STRATEGIC
        ):
            accepted = [JSON_PATCH, MERGE, APPLY]
            if not kind.custom:
                accepted.insert(2, STRATEGIC)
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
            )
        with self.store.lock:
            old = self._existing(kind, ns, name)
            if content_type == JSON_PATCH:
                new = json_patch(old, patch)
                if not isinstance(new, dict):
                    raise bad_request("the JSON patch must leave an object")
                new.setdefault("metadata", {})
                self._check_type(kind, new)
                return self._replace(kind, old, new, query, h, dry_run)
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            if rv is not None and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(kind, name)
            new = merge_patch(old, patch)
            self._check_type(kind, new)
            return self._replace(kind, old, new, query, h, dry_run)

    def _apply(
        self, kind: Kind, ns: str, name: str, raw: bytes, query: dict[str, str], dry_run: bool
    ) -> tuple[int, dict]:
        manager = query.get("fieldManager")
        if not manager:
            raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
        force = query.get("force") in ("true", "1")
        try:
            applied = json.loads(raw)
        except ValueError:
            try:
                applied = yaml.safe_load(raw)
            except yaml.YAMLError as e:
                raise bad_request(f"error decoding YAML: {e}") from None
        if not isinstance(applied, dict):
            raise bad_request("the apply configuration must be an object")
        if applied.get("apiVersion") != kind.api_version or applied.get("kind") != kind.kind:
            raise bad_request(
                f"apply configuration must set apiVersion {kind.api_version} and kind {kind.kind}"
            )
        meta = applied.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != name:
            raise bad_request(
                f"the name of the object ({(meta or {}).get('name')}) does not match the name on "
                f"the URL ({name})"
            )
        if kind.namespaced and meta.get("namespace") not in (None, ns):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        with self.store.lock:
            old = self.store.get(kind.kind, ns, name)
            rv = meta.get("resourceVersion")
            if rv is not None and (old is None or rv != old["metadata"]["resourceVersion"]):
                raise self._conflict(kind, name)
            applied_fields = owned_fields(applied)
            if old is None:
                # ``applied`` was decoded for this request alone and is not used again: it
                # becomes the new object (its metadata is rebuilt, so nothing else is dropped).
                new = applied
                keep = ("name", "labels", "annotations", "finalizers")
                new["metadata"] = {k: v for k, v in new["metadata"].items() if k in keep}
                if kind.namespaced:
                    new["metadata"]["namespace"] = ns
                self._server_fields(kind, new, None)
                self._validate(kind, new, None, query)
                self._check_namespace(kind, ns, new)
                if kind.kind == "ResourceClaim":
                    self._admit_claim_quota(kind, ns, new)
                owners = {
                    manager: {"operation": "Apply", "time": now(), "fields": set(applied_fields)}
                }
                # A manager that owns nothing has no entry (as the update path drops it).
                owners = {m: e for m, e in owners.items() if e["fields"]}
                return 201, self._store(kind, new, owners, dry_run, new=True)

            key = (kind.kind, ns, name)
            owners = {m: dict(e) for m, e in self.store.owners.get(key, {}).items()}
            current = owned_fields(old)
            conflicts = [
                (mgr, path)
                for path, value in applied_fields.items()
                for mgr, entry in owners.items()
                if mgr != manager
                and path in entry["fields"]
                and current.get(path, _MISSING) != value
            ]
            if conflicts and not force:
                causes = [
                    {
                        "reason": "FieldManagerConflict",
                        "message": f'conflict with "{mgr.split(chr(0))[0]}" using '
                        f"{kind.api_version}: .{'.'.join(path)}",
                        "field": "." + ".".join(path),
                    }
                    for mgr, path in conflicts
                ]
                raise ApiError(
                    409,
                    "Conflict",
                    f"Apply failed with {len(conflicts)} conflict(s): "
                    + "; ".join(c["message"] for c in causes),
                    details=_details(kind, name, causes=causes),
                )
            for mgr, path in conflicts:
                owners[mgr]["fields"] = owners[mgr]["fields"] - {path}
            previous = owners.get(manager, {}).get("fields", set())
            others = set().union(*(e["fields"] for m, e in owners.items() if m != manager))
            new = copy.deepcopy(old)
            for path in previous - set(applied_fields) - others:
                _del_path(new, path)
            for path, value in applied_fields.items():
                _set_path(new, path, value)
            owners[manager] = {"operation": "Apply", "time": now(), "fields": set(applied_fields)}
            owners = {m: e for m, e in owners.items() if e["fields"]}
            self._server_fields(kind, new, old)
            new_meta = new["metadata"]
            new_meta.pop("managedFields", None)
            _keep_deletion(new_meta, old["metadata"])
            self._validate(kind, new, old, query)
            unchanged_owners = {m: e["fields"] for m, e in owners.items()} == {
                m: e["fields"] for m, e in self.store.owners.get(key, {}).items()
            }
            if "managedFields" in old["metadata"]:
                new_meta["managedFields"] = old["metadata"]["managedFields"]
            if new == old and unchanged_owners:
                return 200, old  # No-op apply: nothing written, resourceVersion unchanged.
            if _spec_changed(old, new):
                new_meta["generation"] = old["metadata"]["generation"] + 1
            return 200, self._store(kind, new, owners, dry_run, new=False)

    def _delete_options(self, kind: Kind, raw: bytes, query: dict[str, str]) -> dict:
        """The request's DeleteOptions: the body (what kubectl and client-go send) with the
        query parameters folded in, as ``k8s.io/apiserver/pkg/endpoints/handlers/delete.go``
        ``DeleteResource`` decodes them; then ``ValidateDeleteOptions``
        (``k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go``)."""
        options = self._json(raw) if raw.strip() else {}
        if options.get("kind") not in (None, "DeleteOptions"):
            raise bad_request(f"the body of a DELETE must be DeleteOptions, not {options['kind']}")
        if "dryRun" in query:
            options.setdefault("dryRun", [query["dryRun"]])
        if "propagationPolicy" in query:
            options.setdefault("propagationPolicy", query["propagationPolicy"])
        causes = []
        dry_run = options.get("dryRun") or []
        if not isinstance(dry_run, list) or any(v != "All" for v in dry_run):
            # ValidateDryRun: only "All"
            causes.append(validation.unsupported("dryRun", dry_run, ["All"]))
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in PROPAGATION_POLICIES:
            causes.append(
                validation.unsupported("propagationPolicy", policy, list(PROPAGATION_POLICIES))
            )
        if policy is not None and options.get("orphanDependents") is not None:
            causes.append(
                validation.invalid(
                    "propagationPolicy",
                    policy,
                    "orphanDependents and deletionPropagation cannot be both set",
                )
            )
        preconditions = options.get("preconditions") or {}
        if not isinstance(preconditions, dict) or set(preconditions) - {"uid", "resourceVersion"}:
            causes.append(validation.invalid("preconditions", preconditions, "unknown field"))
        if causes:
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: {validation.message_for(causes)}',
                details={"group": "meta.k8s.io", "kind": "DeleteOptions", "causes": causes},
            )
        if dry_run == ["All"] and "dryRun" not in query:
            with self._meta_lock:
                self.dry_run_counts[("delete", kind.kind)] += 1
        return options

    def _mark_deleting(self, kind: Kind, obj: dict, dry_run: bool) -> dict:
        """DELETE of an object with finalizers: ``k8s.io/apiserver/pkg/registry/generic/registry/
        store.go`` ``Delete`` → ``updateForGracefulDeletionAndFinalizers`` → ``markAsDeleting``:
        ``deletionTimestamp`` (kept if already set), ``deletionGracePeriodSeconds: 0`` and, the
        first time, generation + 1; the object stays (200 with the object, not a Status) until
        its finalizers are gone (see ``_store``)."""
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now()
            meta["generation"] = meta.get("generation", 0) + 1
        meta["deletionGracePeriodSeconds"] = 0
        if new == obj or dry_run:
            return new
        meta["resourceVersion"] = self.store.next_rv()
        self.store.put(kind.kind, new)
        return new

    def _check_delete(self, kind: Kind, ns: str, name: str, options: dict) -> None:
        """What refuses a DELETE before Volcano's webhook: NamespaceLifecycle, preconditions."""
        with self.store.lock:
            if kind.kind == "Namespace" and name in IMMORTAL_NAMESPACES:
                # NamespaceLifecycle Admit, before the object is even read
                raise ApiError(
                    403,
                    "Forbidden",
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    details=_details(kind, name),
                )
            obj = self._existing(kind, ns, name)
            # k8s.io/apiserver/pkg/storage/interfaces.go Preconditions.Check, turned into a
            # Conflict by pkg/storage/errors InterpretDeleteError (also in a dry run).
            preconditions = options.get("preconditions") or {}
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = preconditions.get(field)
                have = obj["metadata"].get(field)
                if want is not None and want != have:
                    raise ApiError(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {kind.resource} "{name}": '
                        f"Precondition failed: {label} in precondition: {want}, {label} in "
                        f"object meta: {have}",
                        details=_details(kind, name),
                    )

    def _delete(self, kind: Kind, ns: str, name: str, dry_run: bool) -> dict:
        with self.store.lock:
            obj = self._existing(kind, ns, name)
            if kind.kind == "Queue":
                try:
                    view = self._queues()
                    try:
                        volcano.validate_queue_delete(name, view)
                    except volcano.Denied:
                        self._note_stale_denial(
                            view,
                            lambda: volcano.validate_queue_delete(name, self._current_queues()),
                        )
                        raise
                except volcano.Denied as e:
                    raise ApiError(
                        400,
                        "BadRequest",
                        f'admission webhook "validatequeue.volcano.sh" denied the request: {e}',
                    ) from None
            if obj["metadata"].get("finalizers"):
                return self._mark_deleting(kind, obj, dry_run)
            if not dry_run:
                self.store.remove(kind.kind, ns, name)
                if kind.kind == "Namespace":
                    for k in KINDS:
                        if k.namespaced:
                            for key in [key for key in self.store.items[k.kind] if key[0] == name]:
                                self.store.remove(k.kind, *key)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": _details(kind, name, uid=obj["metadata"].get("uid")),
        }
