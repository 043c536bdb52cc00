"""The webhook's HTTPS server: a bare ASGI app under uvicorn (httptools, uvloop), TLS with hot reload.

Why not FastAPI: on this path every microsecond is paid by every pod creation in the cluster, and the app
has four fixed routes; a bare ASGI callable skips routing, dependency injection and response models
(measured: bench/webhook.py). Evaluation runs inline on the event loop — it is pure CPU work of tens of
microseconds, so a thread hop would cost more than it saves.

Started by `python -m admission serve` / `gpuctl admission serve` (admission.command: flags and start-up).

Routes: POST /validate (AdmissionReview v1; team namespaces and Nodes, admission.rules), POST /isolation
(every other namespace, admission.isolation), GET /healthz (process alive), GET /readyz (caches synced:
the Service only routes to replicas that can answer correctly), GET /metrics (Prometheus).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from admission.isolation import review_isolation
from admission.metrics import Metrics
from admission.rules import review
from admission.state import ClusterState, StateSource, WatchCache
from admission.verdict import AdmissionConfig, Malformed, Verdict
from gpuctl.cluster.tls import CERT_RELOAD_SECONDS, CertReloader

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


__all__ = [
    "CERT_RELOAD_SECONDS",
    "AdmissionApp",
    "BadRequest",
    "CertReloader",
    "parse_review",
    "response_body",
]
