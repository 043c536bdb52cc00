"""The proxy of the environment, as Go's http.ProxyFromEnvironment (so kubectl) picks it.

HTTPS_PROXY for https servers, HTTP_PROXY for http ones, upper or lower case (upper wins), unless
NO_PROXY names the host: golang.org/x/net/http/httpproxy's matching (`*`, a name and its subdomains,
`.domain` / `*.domain` for subdomains, an IP, a CIDR, each with an optional :port). `localhost` and
loopback IPs are never proxied, whatever the environment says (Go's rule). A kubeconfig cluster's
`proxy-url` wins over all of it (gpuctl.cluster.config).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

_HOST_PORT = re.compile(r"^(.*):(\d+)$")


def _no_proxy_matches(host: str, port: int, no_proxy: str) -> bool:
    """NO_PROXY as golang.org/x/net/http/httpproxy reads it."""
    host = host.lower().strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:  # a CIDR
            with contextlib.suppress(ValueError):
                if ip is not None and ip in ipaddress.ip_network(entry, strict=False):
                    return True
            continue
        name, eport = entry, None
        m = _HOST_PORT.match(entry)
        if m and _not_ipv6(entry):
            name, eport = m.group(1), int(m.group(2))
        name = name.strip("[]")
        if eport is not None and eport != port:
            continue
        try:
            if ip is not None and ip == ipaddress.ip_address(name):
                return True
            ipaddress.ip_address(name)
            continue  # an IP entry matches that IP only
        except ValueError:
            pass
        if name.startswith("*."):
            name = name[1:]
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def _not_ipv6(entry: str) -> bool:
    """An entry with a port: `host:port` or `[v6]:port`, not a bare IPv6 address."""
    if entry.startswith("["):
        return "]:" in entry
    try:
        ipaddress.IPv6Address(entry)
        return False
    except ValueError:
        return True


def proxy_from_environment(url: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The proxy Go's http.ProxyFromEnvironment (kubectl's) uses for `url`, or None."""
    u = urlsplit(url)
    host = (u.hostname or "").lower()
    scheme = u.scheme or "https"
    port = u.port or (443 if scheme == "https" else 80)

    def env(name: str) -> str:
        return environ.get(name.upper()) or environ.get(name.lower()) or ""

    proxy = env("https_proxy") if scheme == "https" else env("http_proxy")
    if not proxy or host == "localhost":
        return None
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return None
    if _no_proxy_matches(host, port, env("no_proxy")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"
