"""Kubernetes name syntaxes gpuctl checks before talking to the API server.

A job name becomes a controller, pod and Service name; a pool name a label value; a quota namespace key a
Namespace. Checking them here gives an error that names the YAML field instead of a 422 later, possibly
after other objects were already created.
"""

from __future__ import annotations

import re

__all__ = [
    "DNS_LABEL_MAX",
    "DNS_SUBDOMAIN_MAX",
    "LABEL_VALUE_MAX",
    "is_dns_label",
    "is_dns_subdomain",
    "is_env_name",
    "is_label_key",
    "is_label_value",
]

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63

_DNS_LABEL_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE_RE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
# Kubernetes' relaxed env var name rule (any printable ASCII except '=' is allowed since 1.30, but older
# clusters and most shells want this C-identifier-like form).
_ENV_NAME_RE = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def is_dns_label(s: str) -> bool:
    """RFC 1123 label: lowercase alphanumerics and '-', alphanumeric at both ends, at most 63 characters."""
    return len(s) <= DNS_LABEL_MAX and _DNS_LABEL_RE.fullmatch(s) is not None


def is_dns_subdomain(s: str) -> bool:
    """RFC 1123 subdomain: dot-separated labels, at most 253 characters (node and Secret names)."""
    return len(s) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN_RE.fullmatch(s) is not None


def is_label_value(s: str) -> bool:
    """Kubernetes label value: empty, or alphanumerics with '-', '_', '.' inside, at most 63 characters."""
    return len(s) <= LABEL_VALUE_MAX and _LABEL_VALUE_RE.fullmatch(s) is not None


def is_env_name(s: str) -> bool:
    """Environment variable name as Kubernetes validated it before 1.30: `[-._a-zA-Z][-._a-zA-Z0-9]*`."""
    return _ENV_NAME_RE.fullmatch(s) is not None


def is_label_key(s: str) -> bool:
    """Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name of at most 63
    alphanumerics with '-', '_', '.' inside (example.com/rack, topology.kubernetes.io/zone)."""
    prefix, _, key = s.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return bool(key) and is_label_value(key)
