"""The webhook's HTTPS server: a bare ASGI app under uvicorn (httptools, uvloop), TLS with hot reload.

Why not FastAPI: on this path every microsecond is paid by every pod creation in the cluster, and the app
has four fixed routes; a bare ASGI callable skips routing, dependency injection and response models
(measured: bench/webhook.py). Evaluation runs inline on the event loop — it is pure CPU work of tens of
microseconds, so a thread hop would cost more than it saves.

    python -m admission serve --tls-cert tls.crt --tls-key tls.key [--port 8443] [--mode enforce|warn]
                              [--kubeconfig K] [--allowed-host-path /data ...]

Routes: POST /validate (AdmissionReview v1; team namespaces and Nodes, admission.rules), POST /isolation
(every other namespace, admission.isolation), GET /healthz (process alive), GET /readyz (caches synced:
the Service only routes to replicas that can answer correctly), GET /metrics (Prometheus).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
import uvicorn
import uvloop
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from admission import http as admission_http
from admission.identities import KUEUE_USER
from admission.isolation import review_isolation
from admission.metrics import Metrics
from admission.rules import review
from admission.state import ClusterState, StateSource, StaticState, WatchCache
from admission.tuning import request_sched_slice, tune_gc
from admission.verdict import AdmissionConfig, Malformed, Mode, Verdict
from gpuctl.cluster.tls import CERT_RELOAD_SECONDS, CertReloader
from gpuctl.constants import (
    DEFAULT_ALLOWED_EXTENDED_RESOURCES,
    EXEMPT_NAMESPACES,
    HOST_PATH_ROOTS,
    MAX_TERMINATION_GRACE_SECONDS,
)
from gpuctl.spec.loader import HOST_PATHS_ENV
from gpuctl.spec.models import normalise_host_path

log = logging.getLogger("gpuctl.admission")

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
DEFAULT_PORT: Final = 8443
# The API server sends objects of at most ~1.5 MB each (etcd's limit), twice for an UPDATE.
MAX_BODY_BYTES: Final = 16 * 1024 * 1024
# Longer than Go's idle-connection timeout (90 s) in the API server's webhook client, so the client always
# closes idle connections first: a server-side close racing a reused connection fails that admission call.
KEEP_ALIVE_SECONDS: Final = 120
# How long a cache-dependent denial waits for the cache to catch up (handle_async), and how often it looks.
STALE_WAIT_SECONDS: Final = 1.0
STALE_POLL_SECONDS: Final = 0.01
# Bounded label values: request kinds come from the (untrusted) body.
_KINDS: Final = frozenset(
    {
        "Pod",
        "Job",
        "Deployment",
        "StatefulSet",
        "ReplicaSet",
        "JobSet",
        "LeaderWorkerSet",
        "Node",
        "DaemonSet",
        "CronJob",
        "ReplicationController",
    }
)
# The webhook entries and the evaluator each one is answered by: team namespaces and Nodes (admission.rules),
# every other namespace (admission.isolation, the isolation.admission.runwhere.ai entry).
VALIDATE_PATH: Final = "/validate"
ISOLATION_PATH: Final = "/isolation"
ROUTES: Final = (VALIDATE_PATH, ISOLATION_PATH)
_OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON: Final = b"application/json"
_TEXT: Final = b"text/plain; charset=utf-8"


_NO_REQUEST: Final[dict[str, Any]] = {}  # never mutated: needs_recheck only asks whether it is empty


class _Result:
    """One request on its way through evaluate, recheck and finish."""

    __slots__ = ("dry", "error", "kind", "op", "request", "route", "t0", "uid", "verdict")

    def __init__(self, t0: float, route: str = VALIDATE_PATH) -> None:
        self.t0 = t0
        self.route = route
        self.uid = ""
        self.request: dict[str, Any] = _NO_REQUEST
        self.kind = "unknown"
        self.op = "unknown"
        self.dry = "false"
        self.verdict: Verdict | None = None
        self.error = ""


class BadRequest(Exception):
    """Answered with HTTP 400 and this text."""


def parse_review(body: bytes) -> tuple[str, dict[str, Any]]:
    """(uid, request) of an AdmissionReview v1 body, or BadRequest saying what is wrong with it."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if type(doc) is not dict:
        raise BadRequest("body must be a JSON object (an AdmissionReview)")
    if doc.get("apiVersion") != ADMISSION_API_VERSION or doc.get("kind") != "AdmissionReview":
        raise BadRequest(
            f"expected apiVersion {ADMISSION_API_VERSION}, kind AdmissionReview; got "
            f"{str(doc.get('apiVersion'))[:80]!r}, {str(doc.get('kind'))[:80]!r}"
        )
    request = doc.get("request")
    if type(request) is not dict:
        raise BadRequest("AdmissionReview.request must be an object")
    uid = request.get("uid")
    if type(uid) is not str or not uid:
        raise BadRequest("AdmissionReview.request.uid must be a non-empty string")
    return uid, request


# The AdmissionReview of a plain "allowed" (most answers), up to the uid: orjson's own output for the dict
# below, without building the dicts (tests/unit/test_admission_server.py compares the two).
_ALLOW_PREFIX: Final = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'


def response_body(uid: str, verdict: Verdict, message: str | None = None) -> bytes:
    """The AdmissionReview answer; `message` is verdict.message() if the caller has it already."""
    if verdict.allowed and not verdict.warnings:
        return b'%s%s,"allowed":true}}' % (_ALLOW_PREFIX, orjson.dumps(uid))
    resp: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        reason = "ServiceUnavailable" if verdict.code == 503 else "Forbidden"
        text = verdict.message() if message is None else message
        resp["status"] = {"code": verdict.code, "reason": reason, "message": text}
    if verdict.warnings:
        resp["warnings"] = list(verdict.warnings)
    return orjson.dumps({"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": resp})


class AdmissionApp:
    """The ASGI application. `handle(body)` is the synchronous core, callable without a server."""

    def __init__(
        self,
        source: StateSource,
        config: AdmissionConfig,
        *,
        registry: CollectorRegistry | None = None,
        background: Sequence[Callable[[], Awaitable[None]]] = (),
        max_body: int = MAX_BODY_BYTES,
        stale_wait: float = STALE_WAIT_SECONDS,
    ) -> None:
        self.stale_wait = stale_wait
        self.source = source
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.max_body = max_body
        self._background = background
        self._tasks: list[asyncio.Task] = []
        self.metrics.observe_state(source.state)
        if isinstance(source, WatchCache):
            source.add_listener(self.metrics.observe_state)

    # -- the core
    def handle(self, body: bytes, route: str = VALIDATE_PATH) -> tuple[int, bytes, bytes]:
        """(HTTP status, body, content type) for one POST /validate (or /isolation) body, judged on the
        current snapshot."""
        return self._finish(self._evaluate(body, route))

    async def handle_async(self, body: bytes, route: str = VALIDATE_PATH) -> tuple[int, bytes, bytes]:
        """handle(), except that a denial only cache-dependent rules made is re-checked when the cache moves,
        for up to `stale_wait` seconds: a pool created just before its nodes are labelled (gpuctl does
        exactly that) may not have reached this replica's watch yet, and a false denial would roll the
        whole pool creation back. Genuine mistakes are still denied, just that much later."""
        result = self._evaluate(body, route)
        if self.needs_recheck(result):
            result = await self.recheck(result)
        return self._finish(result)

    # The pieces of handle_async, for admission.http's server (which answers most requests synchronously).
    def evaluate(self, body: bytes, route: str = VALIDATE_PATH) -> _Result:
        return self._evaluate(body, route)

    def needs_recheck(self, result: _Result) -> bool:
        v = result.verdict
        return v is not None and v.cache_dependent and self.stale_wait > 0 and bool(result.request)

    async def recheck(self, result: _Result) -> _Result:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stale_wait
        seen = self.source.state.generation
        while loop.time() < deadline:
            await asyncio.sleep(STALE_POLL_SECONDS)
            state = self.source.state
            if state.generation == seen:
                continue
            seen = state.generation
            result = self._evaluate_request(result, state)
            if result.verdict is None or not result.verdict.cache_dependent:
                break
        return result

    def finish(self, result: _Result) -> tuple[int, bytes, bytes]:
        return self._finish(result)

    @property
    def background(self) -> Sequence[Callable[[], Awaitable[None]]]:
        return self._background

    def _evaluate(self, body: bytes, route: str = VALIDATE_PATH) -> _Result:
        r = _Result(time.perf_counter(), route)
        try:
            r.uid, r.request = parse_review(body)
            k = r.request.get("kind")
            r.kind = k.get("kind") if type(k) is dict and k.get("kind") in _KINDS else "other"
            op = r.request.get("operation")
            r.op = op if op in _OPERATIONS else "other"
            r.dry = "true" if r.request.get("dryRun") is True else "false"
        except BadRequest as exc:
            r.error = f"bad AdmissionReview: {exc}"
            return r
        return self._evaluate_request(r, self.source.state)

    def _evaluate_request(self, r: _Result, state: ClusterState) -> _Result:
        try:
            judge = review_isolation if r.route == ISOLATION_PATH else review
            r.verdict = judge(r.request, state, self.config)
        except Malformed as exc:
            r.error = f"bad AdmissionReview: {exc}"
        except Exception as exc:  # a bug must not become a 500 that blocks every pod
            log.exception("could not evaluate a request")
            r.error = f"could not evaluate this AdmissionReview: {type(exc).__name__}: {exc}"
        return r

    def _finish(self, r: _Result) -> tuple[int, bytes, bytes]:
        if r.verdict is None:
            self.metrics.count(r.kind, r.op, "error", "", r.dry)
            log.info("400: %s", r.error)
            return 400, f"{r.error}\n".encode(), _TEXT
        verdict = r.verdict
        stats = self.metrics.stats
        if verdict.violations:
            message = verdict.message()
            out = response_body(r.uid, verdict, message)
            decision = "warn" if verdict.allowed else "deny"
            stats.count((r.kind, r.op, decision, verdict.violations[0].rule, r.dry))
            log.info("%s %s (dryRun=%s uid=%s): %s", decision, verdict.subject, r.dry, r.uid, message)
        else:
            out = response_body(r.uid, verdict)
            stats.count((r.kind, r.op, "allow", "", r.dry))
        stats.observe(r.kind, r.op, time.perf_counter() - r.t0)
        return 200, out, _JSON

    def ready(self) -> tuple[bool, str]:
        if self.source.state.synced:
            return True, "ok\n"
        return False, "caches not synced yet\n"

    # -- ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t = scope["type"]
        if t == "http":
            await self._http(scope, receive, send)
        elif t == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path in ROUTES:
            if method != "POST":
                await _reply(send, 405, b"use POST\n", _TEXT, ((b"allow", b"POST"),))
                return
            body = await _read_body(receive, self.max_body)
            if body is None:
                await _reply(send, 413, b"request body too large\n", _TEXT)
                return
            status, out, ctype = await self.handle_async(body, path)
            await _reply(send, status, out, ctype)
        elif path == "/healthz":
            await _reply(send, 200, b"ok\n", _TEXT)
        elif path == "/readyz":
            ok, text = self.ready()
            await _reply(send, 200 if ok else 503, text.encode(), _TEXT)
        elif path == "/metrics":
            self.metrics.observe_state(self.source.state)
            await _reply(send, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST.encode())
        else:
            await _reply(send, 404, b"not found\n", _TEXT)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._tasks = [asyncio.create_task(fn()) for fn in self._background]
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for task in self._tasks:
                    task.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        return body if len(body) <= limit else None
    chunks = [body]
    size = len(body)
    while message.get("more_body"):
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _reply(
    send: Send, status: int, body: bytes, ctype: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------------------------------------
# TLS with hot reload: gpuctl.cluster.tls.CertReloader (cert-manager rewrites the mounted Secret before the
# certificate expires; new connections get the new certificate without a restart). It lives there because
# gpuctl serve's REST API reloads its certificate the same way; imported above and re-exported here.


# ---------------------------------------------------------------------------------------------------------
# Command line.


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


__all__ = [
    "CERT_RELOAD_SECONDS",
    "AdmissionApp",
    "BadRequest",
    "CertReloader",
    "main",
    "parse_review",
    "response_body",
    "serve",
]
