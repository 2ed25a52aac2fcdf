"""The client's address, as the sign-in throttle and the API's anonymous throttle see it.

Behind a reverse proxy every request's ``REMOTE_ADDR`` is the proxy's, so keying anything on it
puts every user in one bucket. A proxy header, on the other hand, is whatever the client sent
unless a proxy we trust overwrote or appended to it. So the header is read only when the
operator names it (``FAIRSHARE_CLIENT_IP_HEADER``), and only the entry our own proxies wrote:

* ``X-Forwarded-For``-style lists (``client, proxy1, proxy2``): each trusted proxy appends the
  address it received the request from, so with ``FAIRSHARE_TRUSTED_PROXY_HOPS=N`` the client
  is the N-th entry from the right; anything left of it is the client's own claim and is
  ignored. A list shorter than N means the request did not come through the proxies: the
  header is ignored (Werkzeug's ``ProxyFix`` follows the same rule).
* Single-value headers (``X-Real-IP``) are the one-entry case of the same rule.
* ``FAIRSHARE_TRUSTED_PROXIES`` (optional, addresses or CIDR networks): the header is read only
  when ``REMOTE_ADDR`` is one of them, so a client that reaches the web server directly cannot
  choose its address.

Anything that is not an IP address falls back to ``REMOTE_ADDR``.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings


def _meta_key(header: str) -> str:
    return "HTTP_" + header.strip().upper().replace("-", "_")


def _address(text: str) -> str | None:
    """The canonical IP address in ``text`` ("[::1]:80" and "1.2.3.4:80" too), or None."""
    value = text.strip().strip('"')
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:  # IPv4 with a port; IPv6 has several colons
        value = value.partition(":")[0]
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries)


def _from_trusted_proxy(remote: str | None) -> bool:
    trusted = tuple(getattr(settings, "FAIRSHARE_TRUSTED_PROXIES", ()) or ())
    if not trusted:
        return True
    if remote is None:
        return False
    address = ipaddress.ip_address(remote)
    return any(address in network for network in _networks(trusted))


def client_ip(request) -> str:
    """The client's IP address for ``request`` (see the module docstring); "" if unknown."""
    if request is None:
        return ""
    remote = _address(request.META.get("REMOTE_ADDR", "") or "")
    header = getattr(settings, "FAIRSHARE_CLIENT_IP_HEADER", "") or ""
    if header and _from_trusted_proxy(remote):
        raw = request.META.get(_meta_key(header), "")
        entries = [entry for entry in raw.split(",") if entry.strip()] if raw else []
        hops = max(1, int(getattr(settings, "FAIRSHARE_TRUSTED_PROXY_HOPS", 1)))
        if len(entries) >= hops:
            claimed = _address(entries[-hops])
            if claimed is not None:
                return claimed
    return remote or ""
