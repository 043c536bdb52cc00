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
sends Content-Length); malformed request lines or headers (a line that is not `token: value`, conflicting
Content-Lengths) get 400 and a close. HTTP/1.1 only: the API server never offers h2 to a Service webhook
(k8s.io/apiserver pkg/util/webhook/client.go pins NextProtos to http/1.1). Routes: POST /validate,
POST /isolation, GET /healthz, /readyz, /metrics. A denial that only cache-dependent rules made is
re-checked as the cache moves (AdmissionApp.recheck), off the event loop's fast path: that connection
stops reading meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

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
# POST routes -> the route name AdmissionApp.evaluate takes (admission.server.ROUTES).
_ROUTES: Final = {b"/validate": "/validate", b"/isolation": "/isolation"}


# A header block (after the request line, lower-cased): every line `name: value`, the name an RFC 9110 token.
# Possessive quantifiers: the same language as the plain pattern, without the backtracking bookkeeping.
_HEADER_BLOCK: Final = re.compile(rb"(?:\r\n[!#$%&'*+\-.^_`|~0-9a-z]++:[^\r\n]*+)*+")
# The headers that frame a request, found in one pass: (name, raw value) in order.
_FRAMING: Final = re.compile(rb"\r\n(content-length|transfer-encoding|connection|expect):([^\r\n]*)")
_OK_JSON: Final = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"


class Head(NamedTuple):
    """A parsed request head: what the server needs of it."""

    method: bytes
    path: bytes
    length: int  # body bytes that follow
    close: bool  # Connection: close, or HTTP/1.0 without keep-alive
    expect: bool  # Expect: 100-continue
    size: int  # bytes of the head, blank line included


class HttpError(Exception):
    def __init__(self, status: int, text: bytes) -> None:
        super().__init__(status, text)
        self.status, self.text = status, text


def _header(found: dict[bytes, list[bytes]], name: bytes) -> bytes | None:
    """The (stripped) value of header `name` among the framing headers found; HttpError if a second one
    says something else."""
    values = found.get(name)
    if values is None:
        return None
    value = values[0].strip()
    if len(values) > 1 and values[1].strip() != value:
        raise HttpError(400, b"conflicting " + name + b" headers\n")
    return value


def parse_head(buf: bytes | bytearray, max_body: int) -> Head | None:
    """The head at the start of `buf`, None while it is incomplete, HttpError for what gets an error answer.

    C-level scans (find, lower, a fullmatch and a findall) rather than a loop over header lines: the API
    server sends six or seven headers per request, and a Python loop over them cost more than the JSON
    decode.
    """
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise HttpError(431, b"request headers too large\n")
        return None
    nl = buf.find(b"\r\n", 0, end)
    if nl < 0:
        nl = end
    parts = bytes(buf[:nl]).split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(400, b"bad request line\n")
    method, target, version = parts
    block = bytes(buf[nl:end]).lower()
    if _HEADER_BLOCK.fullmatch(block) is None:
        raise HttpError(400, b"bad header line\n")
    length = 0
    close = version == b"HTTP/1.0"
    expect = False
    framing = _FRAMING.findall(block)
    if framing:
        found: dict[bytes, list[bytes]] = {}
        for name, value in framing:
            found.setdefault(name, []).append(value)
        cl = _header(found, b"content-length")
        if cl is not None:
            if not cl.isdigit():
                raise HttpError(400, b"bad content-length\n")
            length = int(cl)
        if b"transfer-encoding" in found:
            raise HttpError(411, b"send a Content-Length, not a Transfer-Encoding\n")
        conn = _header(found, b"connection")
        if conn is not None:
            tokens = {t.strip() for t in conn.split(b",")}
            if b"close" in tokens:
                close = True
            elif b"keep-alive" in tokens:
                close = False
        expect = _header(found, b"expect") == b"100-continue"
    if length > max_body:
        raise HttpError(413, b"request body too large\n")
    q = target.find(b"?")
    return Head(method, target if q < 0 else target[:q], length, close, expect, end + 4)


class HeadShape(NamedTuple):
    """A connection's last request head, cut around its Content-Length value: the API server sends the same
    head every time but for that number, so the next head is checked against this one with two prefix
    comparisons instead of parsing it again (parse_same_shape)."""

    before: bytes  # the request line and headers through "Content-Length:" (as sent, not lower-cased)
    after: bytes  # from the line break after the value through the blank line
    method: bytes
    path: bytes
    close: bool


_CONTENT_LENGTH: Final = b"\r\ncontent-length:"
_OTHER_FRAMING: Final = (b"\r\ntransfer-encoding:", b"\r\nconnection:", b"\r\nexpect:")


def head_shape(buf: bytes | bytearray, head: Head) -> HeadShape | None:
    """The shape of a head parse_head accepted, when Content-Length is its only framing header (what the
    API server sends); else None."""
    block = bytes(buf[: head.size]).lower()
    i = block.find(_CONTENT_LENGTH)
    if i < 0 or block.find(_CONTENT_LENGTH, i + 2) >= 0 or any(h in block for h in _OTHER_FRAMING):
        return None
    start = i + len(_CONTENT_LENGTH)
    j = block.find(b"\r\n", start)
    return HeadShape(bytes(buf[:start]), bytes(buf[j : head.size]), head.method, head.path, head.close)


def parse_same_shape(buf: bytes | bytearray, shape: HeadShape, max_body: int) -> Head | None:
    """parse_head's answer for a head that is `shape`'s but for the Content-Length digits; None for any
    other head (parse_head then decides). Exact: the request line and every other header are the bytes
    parse_head accepted, and the value is ASCII digits between spaces or tabs, so the head ends where the
    old one did, relative to the value, and nothing parse_head checks can differ."""
    before = shape.before
    if not buf.startswith(before):
        return None
    n = len(before)
    j = buf.find(b"\r\n", n, n + 32)
    if j < 0:
        return None
    value = buf[n:j].strip(b" \t")
    if not value.isdigit() or not buf.startswith(shape.after, j):
        return None
    length = int(value)
    if length > max_body:
        return None  # parse_head answers the 413
    return Head(shape.method, shape.path, length, shape.close, False, j + len(shape.after))


def ok_json(body: bytes) -> bytes:
    """A whole 200 response with a JSON body (the answer to almost every request)."""
    return _OK_JSON % len(body) + body


def response(status: int, body: bytes, ctype: bytes, close: bool, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n%s" % (
        status,
        _REASONS.get(status, b""),
        ctype,
        len(body),
        extra,
        b"connection: close\r\n" if close else b"",
        body,
    )


class HttpProtocol(asyncio.Protocol):
    def __init__(self, app: AdmissionApp, conns: set[HttpProtocol], keep_alive: float) -> None:
        self.app = app
        self.conns = conns
        self.keep_alive = keep_alive
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.buf = bytearray()
        self.busy = False
        self.closing = False
        self.continued = False
        self.last = 0.0  # loop time of the last request (the idle timer looks at it)
        self.idle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task | None = None
        self.shape: HeadShape | None = None  # the last head read in one piece (parse_same_shape)

    # -- connection
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()
        self.conns.add(self)
        self.last = self.loop.time()
        self.idle = self.loop.call_later(self.keep_alive, self._on_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns.discard(self)
        self.closing = True
        if self.idle is not None:
            self.idle.cancel()
        if self.task is not None:
            self.task.cancel()

    def _on_idle(self) -> None:
        """One timer per connection, re-armed only when it fires (not per request): close after keep_alive
        seconds without a request."""
        assert self.loop is not None
        quiet = self.loop.time() - self.last
        if not self.busy and not self.buf and quiet >= self.keep_alive:
            self.close()
        else:
            self.idle = self.loop.call_later(max(0.1, self.keep_alive - quiet), self._on_idle)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def close_if_idle(self) -> None:
        if not self.busy and not self.buf:
            self.close()

    # -- requests
    def data_received(self, data: bytes) -> None:
        if self.loop is not None:
            self.last = self.loop.time()
        if not self.buf and not self.busy:
            # The usual case: one whole request in one read. Parse it where it is, no buffer copies; a head
            # shaped like this connection's last one needs no parsing at all.
            shape = self.shape
            head = None if shape is None else parse_same_shape(data, shape, self.app.max_body)
            if head is None:
                try:
                    head = parse_head(data, self.app.max_body)
                except HttpError as exc:
                    self._error(exc.status, exc.text)
                    return
                if head is not None:
                    self.shape = head_shape(data, head)
            if head is not None and head.size + head.length == len(data) and not head.expect:
                self._dispatch(head.method, head.path, head.close, data[head.size :])
                return
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy and not self.closing and self.buf:
            req = self._parse()
            if req is None:
                return
            self._dispatch(*req)

    def _parse(self) -> tuple[bytes, bytes, bool, bytes] | None:
        """(method, path, close after, body) of the next complete request in the buffer; None to wait."""
        buf = self.buf
        try:
            head = parse_head(buf, self.app.max_body)
        except HttpError as exc:
            self._error(exc.status, exc.text)
            return None
        if head is None:
            return None
        total = head.size + head.length
        if len(buf) < total:
            if head.expect and not self.continued and self.transport is not None:
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        body = bytes(buf[head.size : total])
        del buf[:total]
        self.continued = False
        return head.method, head.path, head.close, body

    def _dispatch(self, method: bytes, path: bytes, close: bool, body: bytes) -> None:
        app = self.app
        route = _ROUTES.get(path)
        if route is not None:
            if method != b"POST":
                self._reply(405, b"use POST\n", _TEXT, close, b"allow: POST\r\n")
                return
            result = app.evaluate(body, route)
            if app.needs_recheck(result):
                self.busy = True
                if self.transport is not None:
                    self.transport.pause_reading()
                assert self.loop is not None
                self.task = self.loop.create_task(self._recheck(result, close))
                return
            status, out, ctype = app.finish(result)
            if status == 200 and not close:
                t = self.transport
                if t is not None and not t.is_closing():
                    t.write(ok_json(out))
                return
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
        t.write(response(status, body, ctype, close, extra))
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
