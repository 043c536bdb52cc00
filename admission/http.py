"""The webhook's own HTTP/1.1 server: an asyncio Protocol on uvloop with TLS, and nothing else.

Why not uvicorn: the webhook answers one kind of request — a POST of one AdmissionReview on a keep-alive
connection from the API server — and uvicorn's general machinery (ASGI scope and message dicts, header
lists, flow control, the httptools callbacks) cost about three times the rules themselves per request
(bench/webhook.py measures both servers in the same run: `--http uvicorn`). This server parses what the
API server sends (a request line, headers, a Content-Length body), calls the same AdmissionApp core, and
writes the response in one call. The ASGI app (AdmissionApp.__call__) stays for uvicorn and the tests.

What it implements: HTTP/1.1 keep-alive (idle connections closed after KEEP_ALIVE_SECONDS, longer than
the API server's own idle timeout) and HTTP/1.0; `Connection: close`; `Expect: 100-continue`; requests
handled strictly in order on a connection (pipelining is answered in order); bodies up to `max_body`
(else 413 and the connection is closed); `Transfer-Encoding` is refused with 411 (the API server always
sends Content-Length); malformed request lines or headers get 400 and a close. Routes: POST /validate,
GET /healthz, /readyz, /metrics. A denial that only cache-dependent rules made is re-checked as the cache
moves (AdmissionApp.recheck), off the event loop's fast path: that connection stops reading meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from admission.server import AdmissionApp, CertReloader

log = logging.getLogger("gpuctl.admission")

MAX_HEAD: Final = 64 * 1024
_REASONS: Final = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    411: b"Length Required",
    413: b"Payload Too Large",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}
_TEXT: Final = b"text/plain; charset=utf-8"


class HttpProtocol(asyncio.Protocol):
    def __init__(self, app: AdmissionApp, conns: set[HttpProtocol], keep_alive: float) -> None:
        self.app = app
        self.conns = conns
        self.keep_alive = keep_alive
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closing = False
        self.continued = False
        self.idle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task | None = None

    # -- connection
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conns.add(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns.discard(self)
        self.closing = True
        if self.idle is not None:
            self.idle.cancel()
        if self.task is not None:
            self.task.cancel()

    def _arm(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(self.keep_alive, self._on_idle)

    def _on_idle(self) -> None:
        if not self.busy and not self.buf:
            self.close()
        else:
            self._arm()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def close_if_idle(self) -> None:
        if not self.busy and not self.buf:
            self.close()

    # -- requests
    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy and not self.closing and self.buf:
            req = self._parse()
            if req is None:
                return
            self._dispatch(*req)
        if not self.closing:
            self._arm()

    def _parse(self) -> tuple[bytes, bytes, bool, bytes] | None:
        """(method, path, close after, body) of the next complete request; None to wait for more."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._error(431, b"request headers too large\n")
            return None
        lines = bytes(buf[:end]).split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
            self._error(400, b"bad request line\n")
            return None
        method, target, version = parts
        length = -1
        close = version == b"HTTP/1.0"
        expect = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                self._error(400, b"bad header line\n")
                return None
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                if not value.isdigit() or (length >= 0 and int(value) != length):
                    self._error(400, b"bad content-length\n")
                    return None
                length = int(value)
            elif name == b"transfer-encoding":
                self._error(411, b"send a Content-Length, not a Transfer-Encoding\n")
                return None
            elif name == b"connection":
                v = value.lower()
                if v == b"close":
                    close = True
                elif v == b"keep-alive":
                    close = False
            elif name == b"expect" and value.lower() == b"100-continue":
                expect = True
        length = max(length, 0)
        if length > self.app.max_body:
            self._error(413, b"request body too large\n")
            return None
        total = end + 4 + length
        if len(buf) < total:
            if expect and not self.continued and self.transport is not None:
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        body = bytes(buf[end + 4 : total])
        del buf[:total]
        self.continued = False
        path = target.split(b"?", 1)[0]
        return method, path, close, body

    def _dispatch(self, method: bytes, path: bytes, close: bool, body: bytes) -> None:
        app = self.app
        if path == b"/validate":
            if method != b"POST":
                self._reply(405, b"use POST\n", _TEXT, close, b"allow: POST\r\n")
                return
            result = app.evaluate(body)
            if app.needs_recheck(result):
                self.busy = True
                if self.transport is not None:
                    self.transport.pause_reading()
                self.task = asyncio.get_running_loop().create_task(self._recheck(result, close))
                return
            status, out, ctype = app.finish(result)
            self._reply(status, out, ctype, close)
        elif path == b"/healthz":
            self._reply(200, b"ok\n", _TEXT, close)
        elif path == b"/readyz":
            ok, text = app.ready()
            self._reply(200 if ok else 503, text.encode(), _TEXT, close)
        elif path == b"/metrics":
            app.metrics.observe_state(app.source.state)
            self._reply(200, generate_latest(app.registry), CONTENT_TYPE_LATEST.encode(), close)
        else:
            self._reply(404, b"not found\n", _TEXT, close)

    async def _recheck(self, result: Any, close: bool) -> None:
        result = await self.app.recheck(result)
        status, out, ctype = self.app.finish(result)
        self.busy = False
        self.task = None
        self._reply(status, out, ctype, close)
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()
            self._process()

    def _reply(self, status: int, body: bytes, ctype: bytes, close: bool, extra: bytes = b"") -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        t.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n%s"
            % (
                status,
                _REASONS.get(status, b""),
                ctype,
                len(body),
                extra,
                b"connection: close\r\n" if close else b"",
                body,
            )
        )
        if close:
            self.close()

    def _error(self, status: int, text: bytes) -> None:
        self.buf.clear()
        self._reply(status, text, _TEXT, True)


def tls_context(reloader: CertReloader) -> ssl.SSLContext:
    def default() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(reloader.cert, reloader.key)
        return ctx

    return reloader.factory(None, default)


async def run(
    app: AdmissionApp,
    host: str,
    port: int,
    reloader: CertReloader,
    *,
    keep_alive: float,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; then stop accepting, let in-flight requests finish (up to 5 s)."""
    loop = asyncio.get_running_loop()
    conns: set[HttpProtocol] = set()
    server = await loop.create_server(
        lambda: HttpProtocol(app, conns, keep_alive), host, port, ssl=tls_context(reloader), backlog=1024
    )
    tasks = [asyncio.create_task(fn()) for fn in app.background]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    log.info("listening on https://%s:%d", host, bound)
    if ready is not None:
        ready(bound)
    try:
        await stop.wait()
    finally:
        server.close()
        for _ in range(50):
            for c in list(conns):
                c.close_if_idle()
            if not conns:
                break
            await asyncio.sleep(0.1)
        for c in list(conns):
            c.close()
        for t in tasks:
            t.cancel()
        log.info("stopped")
