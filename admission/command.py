"""`gpuctl admission serve` (and `python -m admission serve`): the webhook's flags, its configuration from
them, and the server it starts (admission.server's AdmissionApp over admission.http, or uvicorn).

    python -m admission serve --tls-cert tls.crt --tls-key tls.key [--port 8443] [--mode enforce|warn]
                              [--kubeconfig K] [--allowed-host-path /data ...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import uvicorn
import uvloop
import yaml

from admission import http as admission_http
from admission.identities import KUEUE_USER
from admission.server import DEFAULT_PORT, KEEP_ALIVE_SECONDS, STALE_WAIT_SECONDS, AdmissionApp
from admission.state import ClusterState, StateSource, StaticState, WatchCache
from admission.tuning import request_sched_slice, tune_gc
from admission.verdict import AdmissionConfig, Mode
from gpuctl.cluster.tls import CertReloader
from gpuctl.constants import (
    DEFAULT_ALLOWED_EXTENDED_RESOURCES,
    EXEMPT_NAMESPACES,
    HOST_PATH_ROOTS,
    MAX_TERMINATION_GRACE_SECONDS,
)
from gpuctl.spec.loader import HOST_PATHS_ENV
from gpuctl.spec.models import normalise_host_path

log = logging.getLogger("gpuctl.admission")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuctl admission serve",
        description="Serve gpuctl's validating admission webhook over HTTPS.",
    )
    p.add_argument("--tls-cert", required=True, help="PEM certificate (chain) the server presents")
    p.add_argument("--tls-key", required=True, help="PEM private key of --tls-cert")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTPS port (default {DEFAULT_PORT})")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default all)")
    p.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=Mode.ENFORCE.value,
        help="enforce: deny violations; warn: allow them with AdmissionReview warnings",
    )
    p.add_argument(
        "--kubeconfig", help="kubeconfig to watch the cluster with (default: in-cluster, then ~/.kube)"
    )
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument(
        "--allowed-host-path",
        action="append",
        default=[],
        metavar="PATH",
        help=f"a data root: writable hostPaths may lie under it besides {', '.join(HOST_PATH_ROOTS)} "
        f"(system locations never; repeatable; also ${HOST_PATHS_ENV}, colon-separated)",
    )
    p.add_argument(
        "--kueue-user",
        default=KUEUE_USER,
        metavar="USER",
        help="Kueue's controller, whose requests are never judged (default "
        f"{KUEUE_USER}; the chart sets it from kueue.namespace and kueue.serviceAccountName)",
    )
    p.add_argument(
        "--exempt-namespace",
        action="append",
        metavar="NS",
        help="a namespace whose pods may run on pool nodes: the isolation rules skip it (repeatable; "
        f"default {', '.join(EXEMPT_NAMESPACES)}; --exempt-namespace= for none; the chart sets it from "
        "exemptNamespaces)",
    )
    p.add_argument(
        "--max-termination-grace",
        type=int,
        default=MAX_TERMINATION_GRACE_SECONDS,
        metavar="SECONDS",
        help="the longest terminationGracePeriodSeconds a team pod may ask (termination-grace; default "
        f"{MAX_TERMINATION_GRACE_SECONDS}; the chart sets it from maxTerminationGraceSeconds)",
    )
    p.add_argument(
        "--allowed-extended-resource",
        action="append",
        metavar="NAME",
        help="an extended resource (NAME, or PREFIX*) a team pod may request though Kueue does not charge it "
        f"(extended-resource; repeatable; default {', '.join(DEFAULT_ALLOWED_EXTENDED_RESOURCES)}; "
        "--allowed-extended-resource= for none; the chart sets it from allowedExtendedResources)",
    )
    p.add_argument(
        "--stale-wait",
        type=float,
        default=STALE_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long a denial that depends on cached state waits for the cache to catch up "
        f"(default {STALE_WAIT_SECONDS}; 0 disables)",
    )
    p.add_argument("--static-state", metavar="FILE", help=argparse.SUPPRESS)  # JSON/YAML objects; benchmarks
    p.add_argument(
        "--http",
        choices=["builtin", "uvicorn"],
        default="builtin",
        help="HTTP server: builtin (admission.http, the fast path) or uvicorn (the reference)",
    )
    p.add_argument(
        "--sched-slice-us",
        type=int,
        default=0,
        metavar="US",
        help="request this scheduling slice (100-100000 us) for the serving thread: Linux 6.12+ lets a "
        "short-slice task preempt its neighbours sooner when a request arrives (normal priority, same CPU "
        "share; 0 = the kernel's default)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def allowed_host_paths(flags: Sequence[str], env: str) -> tuple[str, ...]:
    """Flags plus the colon-separated env value, normalised; ValueError for a relative path."""
    out: list[str] = []
    for raw in [*flags, *env.split(":")]:
        raw = raw.strip()
        if not raw:
            continue
        if not raw.startswith("/"):
            raise ValueError(f"allowed host path {raw!r} is not absolute")
        out.append(normalise_host_path(raw))
    return tuple(dict.fromkeys(out))


def load_static_state(path: str) -> ClusterState:
    """A snapshot from a file of Kubernetes objects (a JSON list, a v1 List, or YAML documents)."""
    text = Path(path).read_text()
    try:
        doc: Any = orjson.loads(text)
        docs = doc.get("items", []) if isinstance(doc, dict) else doc
    except orjson.JSONDecodeError:
        docs = []
        for d in yaml.safe_load_all(text):
            if isinstance(d, dict) and d.get("kind") == "List":
                docs.extend(d.get("items") or [])
            elif d:
                docs.append(d)
    return ClusterState.from_objects(docs)


def main(argv: Sequence[str] | None = None) -> int:
    """`gpuctl admission serve ...` and `python -m admission serve ...`; returns the exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["serve"]:
        args_in = args_in[1:]
    args = _parser().parse_args(args_in)
    # The logging HOWTO's "Optimization" knobs: no caller lookup (a stack walk per record), no thread or
    # process names; the format does not print them. Halves the cost of a denial's log line.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        paths = allowed_host_paths(args.allowed_host_path, os.environ.get(HOST_PATHS_ENV, ""))
    except ValueError as exc:
        print(f"gpuctl admission: {exc}", file=sys.stderr)
        return 2
    for f in (args.tls_cert, args.tls_key):
        if not os.access(f, os.R_OK):
            print(f"gpuctl admission: cannot read {f}", file=sys.stderr)
            return 2
    if not args.kueue_user.startswith("system:serviceaccount:") or args.kueue_user.count(":") != 3:
        print(
            f"gpuctl admission: --kueue-user {args.kueue_user!r} is not a ServiceAccount user name "
            "(system:serviceaccount:NAMESPACE:NAME)",
            file=sys.stderr,
        )
        return 2
    exempt = (
        EXEMPT_NAMESPACES if args.exempt_namespace is None else tuple(n for n in args.exempt_namespace if n)
    )
    if args.max_termination_grace < 0:
        print("gpuctl admission: --max-termination-grace must be 0 or more", file=sys.stderr)
        return 2
    extended = (
        DEFAULT_ALLOWED_EXTENDED_RESOURCES
        if args.allowed_extended_resource is None
        else tuple(a for a in args.allowed_extended_resource if a)
    )
    config = AdmissionConfig(
        mode=Mode(args.mode),
        allowed_host_paths=paths,
        kueue_user=args.kueue_user,
        exempt_namespaces=exempt,
        max_termination_grace=args.max_termination_grace,
        allowed_extended_resources=extended,
    )
    source: StateSource
    if args.static_state:
        source = StaticState(load_static_state(args.static_state))
    else:
        try:
            source = WatchCache.connect(kubeconfig=args.kubeconfig, context=args.context)
        except Exception as exc:  # a bad kubeconfig is a usage error, not a traceback
            print(f"gpuctl admission: cannot load the cluster configuration: {exc}", file=sys.stderr)
            return 2
    reloader = CertReloader(args.tls_cert, args.tls_key)
    app = AdmissionApp(source, config, background=(reloader.run,), stale_wait=max(0.0, args.stale_wait))
    log.info(
        "serving on %s:%d, mode %s, allowed host paths: %s",
        args.host,
        args.port,
        config.mode.value,
        ", ".join(paths) or "none",
    )
    source.start()
    if os.environ.get("GPUCTL_ADMISSION_GC", "tuned") == "tuned":
        tune_gc()
    if args.sched_slice_us:
        why = request_sched_slice(args.sched_slice_us)
        if why:
            log.warning("could not request a %d us scheduling slice: %s", args.sched_slice_us, why)
        else:
            log.info("requested a %d us scheduling slice for the serving thread", args.sched_slice_us)
    try:
        serve(app, args.host, args.port, reloader, log_level=args.log_level, http=args.http)
    finally:
        # Closing a watch's response can block while its informer thread sits in an SSL read (until the
        # watch times out, minutes): stop in the background and give it a second; the threads are daemons.
        stopper = threading.Thread(target=source.stop, name="stop-watches", daemon=True)
        stopper.start()
        stopper.join(1.0)
    return 0


def serve(
    app: AdmissionApp,
    host: str,
    port: int,
    reloader: CertReloader,
    *,
    log_level: str = "info",
    http: str = "builtin",
) -> None:
    """Serve over HTTPS: admission.http's own server (default), or uvicorn (`--http uvicorn`, the
    reference bench/webhook.py compares against)."""
    if http == "builtin":
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(admission_http.run(app, host, port, reloader, keep_alive=KEEP_ALIVE_SECONDS))
        return
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        access_log=False,
        log_level=log_level,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        ssl_certfile=reloader.cert,
        ssl_keyfile=reloader.key,
        ssl_context_factory=reloader.factory,
        server_header=False,
        date_header=False,
    )
    uvicorn.Server(config).run()


__all__ = ["allowed_host_paths", "load_static_state", "main", "serve"]
