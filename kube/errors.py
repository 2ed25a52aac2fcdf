"""Our error hierarchy at the Kubernetes edge.

Nothing outside ``kube`` catches ``kubernetes.client.ApiException`` or urllib3 errors:
every call into the client runs inside ``translated()``, which re-raises them as one of

* ``K8sNotFound`` (404),
* ``K8sConflict`` (409: stale resourceVersion, AlreadyExists, server-side apply conflicts),
* ``K8sTransient`` (429, 5xx, 410 Expired, timeouts, refused or reset connections) — worth
  retrying, with the server's ``Retry-After`` in ``retry_after`` when it sent one,
* ``K8sPermanent`` (any other 4xx, and client-side failures such as TLS errors) — retrying will not
  help; ``status``, ``reason`` and the Status ``causes`` (field paths) say why.

The original exception is chained (``from e``) and any response body kept or shown is cut to
about 1 KB, as kopf's ``clients/errors.py`` does.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

BODY_LIMIT = 1024


def truncate(text: str | None, limit: int = BODY_LIMIT) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was dropped."""
    if not text:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class DomainError(Exception):
    """Base of every error the Kubernetes edge raises on purpose. Not an app's ``DomainError``
    (this package imports no app): callers catch it next to their own."""


class K8sError(DomainError):
    """A Kubernetes API call failed.

    ``status`` is the HTTP status (None when no answer came back), ``reason`` the Status reason
    (``NotFound``, ``Invalid``, ...), ``body`` the response body cut to ~1 KB.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        body: str = "",
        causes: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body = truncate(body)
        self.causes = causes or []


class K8sConfigError(K8sError):
    """No API client can be built: disabled, unknown mode, missing or broken kubeconfig."""


class K8sNotFound(K8sError):
    """The object (or its namespace) does not exist."""


class K8sConflict(K8sError):
    """The object changed under us, already exists, or another field manager owns the field."""


class K8sTransient(K8sError):
    """Throttled, server error or unreachable: the same call may succeed later."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class K8sPermanent(K8sError):
    """Rejected for good (422 Invalid, 403 Forbidden, 400 BadRequest, ...)."""


def _status_body(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) and data.get("kind") == "Status" else {}


def _retry_after(headers: Any, status: dict[str, Any]) -> float | None:
    value = None
    if headers is not None:
        try:
            value = headers.get("Retry-After")
        except AttributeError:
            value = None
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass  # An HTTP-date; fall back to the Status details.
    seconds = (status.get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) else None


def wrap(e: BaseException, context: str = "") -> K8sError:
    """Return our error for a client exception (the caller raises it ``from e``).

    ``context`` (``"PATCH queues/team-a"``) starts the message.
    """
    prefix = f"{context}: " if context else ""
    if isinstance(e, ApiException):
        raw = e.body if isinstance(e.body, str) else ""
        status = _status_body(raw)
        reason = status.get("reason") or (e.reason or "")
        text = status.get("message") or truncate(raw) or (e.reason or "")
        code = int(e.status or 0)
        kwargs: dict[str, Any] = {
            "status": code or None,
            "reason": str(reason),
            "body": raw,
            "causes": (status.get("details") or {}).get("causes") or [],
        }
        message = truncate(f"{prefix}HTTP {code} {reason}: {text}")
        if code == 404:
            return K8sNotFound(message, **kwargs)
        if code == 409:
            return K8sConflict(message, **kwargs)
        if code in (410, 429) or (code >= 500 and code != 501):
            retry_after = _retry_after(e.headers, status)
            return K8sTransient(message, retry_after=retry_after, **kwargs)
        if code == 0:
            # The client gave up before any answer: TLS failure or an unusable request.
            return K8sPermanent(truncate(f"{prefix}{e.reason}"), reason=str(e.reason or ""))
        return K8sPermanent(message, **kwargs)
    if isinstance(e, urllib3.exceptions.HTTPError | http.client.HTTPException | OSError):
        # No answer: refused, reset, closed mid-answer, timed out, a TLS failure, an unknown
        # host (urllib3 wraps each of these socket errors in one of its own).
        kind = "timed out" if _is_timeout(e) else "unreachable"
        return K8sTransient(truncate(f"{prefix}Kubernetes API {kind}: {e}"))
    return K8sPermanent(truncate(f"{prefix}{type(e).__name__}: {e}"))


def _is_timeout(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        # NewConnectionError subclasses ConnectTimeoutError, but "refused" is not a timeout.
        if isinstance(seen, urllib3.exceptions.NewConnectionError):
            return False
        if isinstance(seen, urllib3.exceptions.TimeoutError | TimeoutError):
            return True
        reason = getattr(seen, "reason", None)
        seen = reason if isinstance(reason, BaseException) else seen.__cause__
    return False


@contextmanager
def translated(context: str = "") -> Iterator[None]:
    """Re-raise client, urllib3, http.client and socket errors inside the block as
    ``K8sError``s."""
    try:
        yield
    except (ApiException, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
        raise wrap(e, context) from e


def is_webhook_denial(error: BaseException) -> bool:
    """True for a write an admission webhook refused: the API server's ``ToStatusErr``
    (``k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go``) answers a 4xx
    whose message reads ``admission webhook "<name>" denied the request: ...``. Volcano's
    webhooks validate against an informer cache that can lag the writes just made, so such a
    denial may pass a moment later (retried within the same sync)."""
    return (
        isinstance(error, K8sPermanent)
        and error.status is not None
        and 400 <= error.status < 500
        and "admission webhook" in str(error)
        and "denied the request" in str(error)
    )
