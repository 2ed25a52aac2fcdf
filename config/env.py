"""Small typed parsers for environment settings.

Each helper reads one variable, returns a typed value or the default, and raises
``ImproperlyConfigured`` naming the variable when the value makes no sense, so a bad deployment
stops at start-up instead of misbehaving later. ``env_secret`` also reads ``NAME_FILE``
(Docker/Kubernetes secrets mounted as files).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    source = os.environ if environ is None else environ
    value = source.get(name)
    return None if value is None else value.strip()


def env_str(name: str, default: str = "", *, environ: Mapping[str, str] | None = None) -> str:
    value = _raw(name, environ)
    return default if value is None else value


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean: use one of true/false, yes/no, on/off, 1/0."
    )


def env_int(
    name: str,
    default: int,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    value = _raw(name, environ)
    if value is None or value == "":
        result = default
    else:
        try:
            result = int(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if min_value is not None and result < min_value:
        raise ImproperlyConfigured(f"{name}={result} must be at least {min_value}.")
    if max_value is not None and result > max_value:
        raise ImproperlyConfigured(f"{name}={result} must be at most {max_value}.")
    return result


def env_decimal(
    name: str,
    default: str,
    *,
    min_value: Decimal | None = None,
    max_value: Decimal | None = None,
    environ: Mapping[str, str] | None = None,
) -> Decimal:
    value = _raw(name, environ)
    text = default if value is None or value == "" else value
    try:
        result = Decimal(text)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name}={text!r} is not a number.") from None
    if not result.is_finite():
        raise ImproperlyConfigured(f"{name}={text!r} must be a finite number.")
    if min_value is not None and result < min_value:
        raise ImproperlyConfigured(f"{name}={text} must be at least {min_value}.")
    if max_value is not None and result > max_value:
        raise ImproperlyConfigured(f"{name}={text} must be at most {max_value}.")
    return result


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> int:
    """``"7d"``, ``"36h"``, ``"1d12h"``, ``"90m"``, ``"0"`` → whole seconds.

    Units: s, m, h, d, w. Raises ValueError naming the rule for anything else."""
    text = text.strip().lower()
    if text in ("", "0"):
        return 0
    pos, total = 0, Decimal(0)
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += Decimal(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(
            f"{text!r} is not a duration: give a number and a unit (s, m, h, d, w), "
            "such as 7d, 36h or 1d12h; 0 turns it off."
        )
    return int(total)


def env_duration(name: str, default: str = "0", *, environ: Mapping[str, str] | None = None) -> int:
    """A duration variable (``parse_duration``) in seconds; unset or empty: ``default``."""
    value = _raw(name, environ)
    try:
        return parse_duration(default if value is None or value == "" else value)
    except ValueError as e:
        raise ImproperlyConfigured(f"{name}: {e}") from None


def env_list(
    name: str, default: Iterable[str] = (), *, environ: Mapping[str, str] | None = None
) -> list[str]:
    value = _raw(name, environ)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(
    name: str, default: str, choices: Iterable[str], *, environ: Mapping[str, str] | None = None
) -> str:
    allowed = list(choices)
    value = _raw(name, environ)
    result = default if value is None or value == "" else value
    if result not in allowed:
        raise ImproperlyConfigured(f"{name}={result!r} is not one of: {', '.join(allowed)}.")
    return result


def env_secret(
    name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """Return ``NAME``, or the contents of the file named by ``NAME_FILE``; both set is an error."""
    value = _raw(name, environ)
    file_name = _raw(f"{name}_FILE", environ)
    if value and file_name:
        raise ImproperlyConfigured(f"Set only one of {name} and {name}_FILE.")
    if file_name:
        try:
            with open(file_name, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as e:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {e}") from e
    return value if value else default


def env_cluster(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """Parse FAIRSHARE_CLUSTER: ``kubeconfig``, ``kubeconfig:PATH``, ``in-cluster``,
    ``snapshot:PATH`` or ``disabled``."""
    value = _raw(name, environ)
    result = default if value is None or value == "" else value
    mode, _, arg = result.partition(":")
    if mode in {"in-cluster", "disabled"} and not arg:
        return result
    if mode == "kubeconfig":
        return result
    if mode == "snapshot" and arg:
        return result
    raise ImproperlyConfigured(
        f"{name}={result!r} is not valid: use kubeconfig[:PATH], in-cluster, snapshot:PATH "
        "or disabled."
    )


def env_networks(name: str, *, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list of IP addresses or CIDR networks (``10.0.0.0/8, 192.0.2.1``)."""
    result = []
    for item in env_list(name, (), environ=environ):
        try:
            result.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an IP address or network (e.g. 10.0.0.0/8)."
            ) from None
    return result


SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def env_own_namespace(
    name: str,
    cluster: str,
    *,
    environ: Mapping[str, str] | None = None,
    namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE,
) -> str:
    """The namespace Fairshare itself runs in: ``NAME`` if set, else ``POD_NAMESPACE`` (the
    downward API), else, in-cluster (``cluster`` is ``in-cluster``), the service account's
    namespace file that the kubelet mounts into every pod; "" when none says."""
    value = _raw(name, environ) or _raw("POD_NAMESPACE", environ)
    if value:
        return value
    if cluster.partition(":")[0] == "in-cluster":
        try:
            with open(namespace_file, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError:
            return ""
    return ""
