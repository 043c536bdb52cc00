"""The flags `gpuctl serve` and `python -m gpuctl.server.api` share, defined once: the same
flag has the same spelling, default, help and `dest` in both, so a value read from either parser means
the same thing. Each function adds one group; gpuctl.server.main and gpuctl.server.api.__main__ call them.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpuctl.cluster.tls import CertReloader
from gpuctl.constants import PROMETHEUS_URL_ENV

API_KEYS_ENV = "GPUCTL_API_KEYS_FILE"
API_THREADS = 64  # worker threads for the API's cluster calls (gpuctl.server.api.deps.THREADS)


def add_cluster(p: argparse.ArgumentParser) -> None:
    """--kubeconfig, --context: how to reach the cluster."""
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")


def add_listener(p: argparse.ArgumentParser, port: int, *names: str) -> None:
    """--address and the port (`names`, first the canonical one; dest `port`)."""
    p.add_argument("--address", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    p.add_argument(*(names or ("--port",)), dest="port", type=int, default=port, help=f"listen port ({port})")


def add_tls(p: argparse.ArgumentParser) -> None:
    """--tls-cert, --tls-key (dests tls_cert, tls_key): HTTPS only, the files re-read when they change."""
    p.add_argument(
        "--tls-cert",
        "--tls-cert-file",
        dest="tls_cert",
        help="serve HTTPS with this PEM certificate (chain); re-read when the file changes",
    )
    p.add_argument("--tls-key", "--tls-key-file", dest="tls_key", help="... and this PEM key")


def add_api_auth(p: argparse.ArgumentParser) -> None:
    """How the REST API authenticates and how many threads call the cluster for it."""
    p.add_argument(
        "--api-keys-file",
        default=os.environ.get(API_KEYS_ENV) or None,
        help=f"YAML file of hashed static API keys (default ${API_KEYS_ENV}; docs/api.md)",
    )
    p.add_argument(
        "--auth-cache-seconds",
        type=float,
        default=10.0,
        help="how long TokenReview and SubjectAccessReview answers are reused (default 10; 0 = never)",
    )
    p.add_argument(
        "--audience", action="append", default=[], help="tokens must be issued for this audience (repeatable)"
    )
    p.add_argument(
        "--threads", type=int, default=API_THREADS, help=f"worker threads for cluster calls ({API_THREADS})"
    )


def add_prometheus(p: argparse.ArgumentParser) -> None:
    """--prometheus-url (dest prometheus_url): the Prometheus that scrapes dcgm-exporter, where the REST
    API reads GPU use and `gpuctl serve --idle` its evidence (docs/utilisation.md)."""
    p.add_argument(
        "--prometheus-url",
        default=os.environ.get(PROMETHEUS_URL_ENV) or None,
        metavar="URL",
        help=f"the Prometheus that scrapes dcgm-exporter (default ${PROMETHEUS_URL_ENV}): the API's GPU use, "
        "evidence for --idle",
    )


def add_log_level(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def tls_reloader(args: argparse.Namespace) -> tuple[CertReloader | None, int]:
    """The certificate reloader of --tls-cert/--tls-key (None without them) and 0; or None and the exit
    code after printing why: 2 when only one of the pair is given, 1 when the files do not load."""
    if bool(args.tls_cert) != bool(args.tls_key):
        print("error: --tls-cert and --tls-key go together", file=sys.stderr)
        return None, 2
    if not args.tls_cert:
        return None, 0
    reloader = CertReloader(args.tls_cert, args.tls_key)
    try:
        reloader.load()
    except (OSError, ValueError) as e:
        print(f"error: --tls-cert {args.tls_cert} / --tls-key {args.tls_key}: {e}", file=sys.stderr)
        return None, 1
    return reloader, 0
