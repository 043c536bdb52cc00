"""Keep-alive HTTP/1.1 connections to one API server, on the standard library's socket and ssl.

Why not urllib3 (gpuctl's transport before this module): every CLI command imported it, ~40-60 ms of a
command that kubectl finishes in 50 (`get jobs -A`, `create -f`), for what gpuctl uses of it here: a
pool of connections to one host, TLS with the kubeconfig's context, a proxy tunnel, timeouts and
streamed bodies. Why not http.client either: importing it loads the `email` package
(its header parser) and the `http` enums, about a fifth of what a `get` costs above the interpreter on
the demo cluster (bench/reads.py), for the part of HTTP/1.1 an API server speaks: a status line,
headers, and a body framed by Content-Length, chunks or the end of the connection. ssl is loaded by any
HTTPS client anyway.

`Pool.request` returns a `Response` with the part of urllib3's response interface gpuctl uses
(`status`, `reason`, `headers`, `data`, `read`, `stream`, `release_conn`, `close`), so a response
body is read, streamed (watches, `logs -f`) or left the same way. Failures are OSErrors (the socket's
own, or `TransportError` for a malformed or cut answer; `ReadTimeout` when a read waited too long), which
every front end already reports as "cannot reach the API server".
"""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

POOL_SIZE = 10  # idle connections kept; more are opened when needed and closed after use
MAX_LINE = 65536  # bytes of a status or header line, as http.client allows
MAX_HEADERS = 100
NO_BODY = (204, 304)


class TransportError(ConnectionError):
    """The API server's answer was cut or not HTTP (an OSError, as the socket's own failures)."""


class ReadTimeout(TimeoutError):
    """No byte for the read timeout."""


class _Closed(TransportError):
    """The server closed the connection before answering (a keep-alive connection it dropped)."""


def _host_bytes(host: str) -> bytes | str:
    """An ASCII host as bytes: the socket and ssl modules then skip the `idna` codec (and the import of
    encodings.idna, stringprep and unicodedata it costs every command); any other name as it is."""
    try:
        return host.encode("ascii")
    except UnicodeEncodeError:
        return host


def _readline(fp) -> bytes:
    line = fp.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise TransportError("a status or header line longer than 64 KiB")
    return line


class Headers:
    """An answer's headers: `get` and `in` by name, whatever its case (the first value of a repeated
    header, as http.client's message gives)."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self.pairs = pairs
        self._first: dict[str, str] = {}
        for k, v in pairs:
            self._first.setdefault(k.lower(), v)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def items(self) -> list[tuple[str, str]]:
        return list(self.pairs)


def _read_head(fp, *, upgrade: bool = False) -> tuple[str, int, str, Headers]:
    """(version, status, reason, headers) of one answer; 1xx interim answers are skipped, but for an
    `upgrade` request's 101 Switching Protocols (gpuctl.cluster.streaming's WebSocket)."""
    while True:
        line = _readline(fp)
        if not line:
            raise _Closed("the server closed the connection without an answer")
        version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or not code.isdigit() or len(code) != 3:
            raise TransportError(f"not an HTTP status line: {line[:80]!r}")
        pairs: list[tuple[str, str]] = []
        while True:
            h = _readline(fp)
            if h in (b"\r\n", b"\n", b""):
                break
            if len(pairs) >= MAX_HEADERS:
                raise TransportError(f"more than {MAX_HEADERS} headers")
            name, sep, value = h.decode("latin-1").partition(":")
            if sep:
                pairs.append((name.strip(), value.strip()))
        if not 100 <= int(code) < 200 or (upgrade and int(code) == 101):
            return version, int(code), reason.strip(), Headers(pairs)


class Connection:
    """One HTTP/1.1 connection to the API server: TCP, the proxy's CONNECT when tunnelling, TLS with the
    kubeconfig's context and its tls-server-name (SNI and the hostname check). `sock` is None until
    `open`."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self.sock: socket.socket | None = None
        self.fp = None

    def open(self, timeout: float | None) -> None:
        pool, proxy = self.pool, self.pool.proxy
        host, port = pool.host, pool.port
        if proxy is not None:
            host, port = proxy.hostname or "", proxy.port or (443 if proxy.scheme == "https" else 80)
        sock = socket.create_connection((_host_bytes(host), port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if pool.scheme == "https":
                if proxy is not None:
                    # An http:// proxy is asked to CONNECT (a tunnel; TLS to the API server inside it).
                    # An https:// proxy would need TLS to the proxy too, which is not nested here.
                    self._tunnel(sock)
                name = pool.server_hostname or pool.host
                assert pool.ssl_context is not None
                sock = pool.ssl_context.wrap_socket(sock, server_hostname=_host_bytes(name))
        except BaseException:
            sock.close()
            raise
        self.sock, self.fp = sock, sock.makefile("rb")

    def _tunnel(self, sock: socket.socket) -> None:
        target = f"{self.pool.host_header(always_port=True)}"
        head = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
        head += [f"{k}: {v}" for k, v in self.pool._proxy_headers().items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        fp = sock.makefile("rb")
        try:
            _, status, reason, _ = _read_head(fp)
        finally:
            fp.close()
        if status != 200:
            raise OSError(f"Tunnel connection failed: {status} {reason}")

    def close(self) -> None:
        fp, sock, self.fp, self.sock = self.fp, self.sock, None, None
        if fp is not None:
            fp.close()
        if sock is not None:
            sock.close()


def _dropped(conn: Connection) -> bool:
    """An idle keep-alive connection the server closed (readable with nothing to read), or none."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Response:
    """One answer; its connection goes back to the pool when its body has been read. The body is
    framed by Content-Length, by chunks (Transfer-Encoding: chunked: lists, watches, log follows) or by
    the end of the connection."""

    def __init__(self, pool: Pool, conn: Connection, method: str, head: tuple[str, int, str, Headers]):
        version, self.status, self.reason, self.headers = head
        self._pool, self._conn = pool, conn
        self._fp = conn.fp
        self._data: bytes | None = None
        te = (self.headers.get("transfer-encoding") or "").lower()
        self._chunked = "chunked" in te
        length = self.headers.get("content-length")
        self._left: int | None = None  # bytes left of the body (or of the current chunk when chunked)
        self._done = False
        if method == "HEAD" or self.status in NO_BODY:
            self._done = True
        elif self._chunked:
            self._left = 0
        elif length is not None:
            try:
                self._left = int(length)
            except ValueError:
                raise TransportError(f"a Content-Length that is no number: {length!r}") from None
            self._done = self._left == 0
        connection = (self.headers.get("connection") or "").lower()
        self.will_close = (
            "close" in connection
            or (version == "HTTP/1.0" and "keep-alive" not in connection)
            or (not self._chunked and self._left is None and not self._done)
        )

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = self.read()
        return self._data

    def isclosed(self) -> bool:
        """The body was read to its end."""
        return self._done

    def _failed(self, e: BaseException) -> OSError:
        self.close()
        if isinstance(e, TimeoutError):
            return ReadTimeout(str(e) or "read timed out")
        if isinstance(e, TransportError):
            return e
        return TransportError(f"{type(e).__name__}: {e}")

    def _chunk(self) -> bool:
        """Move to the next chunk of a chunked body; False at its end (the trailer read)."""
        if self._left == 0 and not self._done:
            line = _readline(self._fp)
            size = line.split(b";", 1)[0].strip()
            try:
                self._left = int(size, 16)
            except ValueError:
                raise TransportError(f"a chunk size that is no number: {line[:40]!r}") from None
            if self._left == 0:
                while _readline(self._fp) not in (b"\r\n", b"\n", b""):
                    pass  # trailer headers
                self._done = True
        return not self._done

    def _take(self, amt: int, some: bool) -> bytes:
        """Up to `amt` bytes of the body: all of them unless `some` (then what has arrived, at least one)."""
        fp = self._fp
        if self._done or fp is None:
            return b""
        if self._left is None:  # to the end of the connection
            out = fp.read1(amt) if some else fp.read(amt)
            if not out:
                self._done = True
            return out
        if self._chunked and not self._chunk():
            return b""
        want = min(amt, self._left)
        out = fp.read1(want) if some else fp.read(want)
        if not out:
            raise TransportError(f"the answer was cut: {self._left} bytes of it missing")
        self._left -= len(out)
        if self._chunked:
            if self._left == 0 and _readline(self._fp) not in (b"\r\n", b"\n"):
                raise TransportError("a chunk without its line end")
        elif self._left == 0:
            self._done = True
        return out

    def read(self, amt: int | None = None) -> bytes:
        """The rest of the body (or at most `amt` bytes of it); the connection goes back to the pool
        when the body has been read to its end."""
        parts: list[bytes] = []
        want = amt if amt is not None else -1
        try:
            while not self._done and want != 0:
                step = want if want > 0 else 1 << 20
                if self._left is not None and not self._chunked:
                    step = self._left if want < 0 else min(step, self._left)
                out = self._take(step, some=False)
                if not out:
                    break
                parts.append(out)
                if want > 0:
                    want -= len(out)
        except (OSError, ValueError) as e:
            raise self._failed(e) from e
        if amt is None or self._done:
            self.release_conn()
        return b"".join(parts)

    def stream(self, amt: int = 65536, decode_content: bool = True) -> Iterator[bytes]:
        """The body as it arrives, in chunks of at most `amt` bytes (a watch's events, `logs -f`)."""
        while True:
            try:
                chunk = self._take(amt, some=True)
            except (OSError, ValueError) as e:
                raise self._failed(e) from e
            if not chunk:
                self.release_conn()
                return
            yield chunk

    def release_conn(self) -> None:
        """Back to the pool when the body was read to its end; else the connection is closed."""
        if self._conn is not None and self._done and not self.will_close:
            conn, self._conn = self._conn, None
            self._pool._put(conn)
            return
        self.close()

    def shutdown(self) -> None:
        """End a read blocked in another thread (a watch or a log follow whose reader left): the
        socket is shut down, so that thread's read returns at once and the connection is dropped."""
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Drop the connection (safe from another thread while one reads: shut down first, since
        closing the buffered body waits for its reader)."""
        self.shutdown()
        conn, self._conn = self._conn, None
        self._done = True
        if conn is not None:
            conn.close()


class _Headers(dict):
    """Request headers where a list is one header line per value (Impersonate-Group: a, then b): the
    request sends what items() gives."""

    def items(self):  # type: ignore[override]
        for k, v in super().items():
            for one in v if isinstance(v, list) else [v]:
                yield k, one


class Pool:
    """Connections to one API server (`https://host:port`), thread-safe; at most `maxsize` kept idle."""

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        proxy: str | None = None,
        maxsize: int = POOL_SIZE,
    ):
        u = urlsplit(base_url)
        self.scheme = u.scheme or "https"
        self.host = u.hostname or ""
        self.port = u.port or (443 if self.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.ssl_context = ssl_context
        if self.scheme == "https" and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        self.server_hostname = server_hostname
        self.proxy = urlsplit(proxy) if proxy else None
        self.maxsize = maxsize
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def host_header(self, *, always_port: bool = False) -> str:
        """host[:port] of the API server, as the Host header and a CONNECT name it (IPv6 bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = self.port == (443 if self.scheme == "https" else 80)
        return host if default and not always_port else f"{host}:{self.port}"

    def _proxy_headers(self) -> dict[str, str]:
        """Proxy-Authorization from the proxy URL's user:password (http://user:pass@proxy:3128)."""
        p = self.proxy
        if p is None or p.username is None:
            return {}
        cred = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        return {"Proxy-Authorization": "Basic " + base64.b64encode(cred).decode()}

    def _get(self) -> tuple[Connection, bool]:
        """An idle connection the server has not closed (reused=True), else a new one."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn, True
                conn.close()
        return Connection(self), False

    def _put(self, conn: Connection) -> None:
        with self._lock:
            if len(self._idle) < self.maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def _target(self, path: str) -> str:
        if self.proxy is not None and self.scheme == "http":
            return f"http://{self.host_header(always_port=True)}{self.prefix}{path}"  # a plain proxy: the URL
        return self.prefix + path

    def _head(self, method: str, path: str, body: bytes | None, headers: dict[str, str | list[str]]) -> bytes:
        """The request line and headers (Host, Accept-Encoding: identity and Content-Length, as
        http.client adds them); a control character or space in the target, or a line break in a
        header, is refused (ValueError) rather than sent."""
        target = self._target(path)
        if any(c <= " " or c == "\x7f" for c in target):
            raise ValueError(f"a request target with a space or control character: {target[:200]!r}")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header()}", "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in _Headers(headers).items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = "\r\n".join(lines)
        if head.count("\n") != len(lines) - 1 or head.count("\r") != len(lines) - 1:
            raise ValueError(f"a header with a line break: {head[:200]!r}")
        return (head + "\r\n\r\n").encode("latin-1")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | str | None = None,
        headers: dict[str, str | list[str]] | None = None,
        connect_timeout: float | None = 10,
        read_timeout: float | None = 30,
    ) -> Response:
        """Send one request (path and query, below the server's URL); the answer's headers are read,
        its body is left to the Response. A keep-alive connection the server closed meanwhile is
        replaced once, as every HTTP client does, before anything of the answer was read."""
        data = body.encode() if isinstance(body, str) else body
        message = self._head(method, path, data, headers or {}) + (data or b"")
        for attempt in (0, 1):
            conn, reused = self._get()
            try:
                if conn.sock is None:
                    conn.open(connect_timeout)
                assert conn.sock is not None
                conn.sock.settimeout(read_timeout)
                conn.sock.sendall(message)
                head = _read_head(conn.fp)
            except (_Closed, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise TransportError(f"{type(e).__name__}: {e}") from e
            except TimeoutError as e:
                conn.close()
                raise ReadTimeout(str(e) or "timed out") from e
            except BaseException:
                conn.close()
                raise
            return Response(self, conn, method, head)
        raise AssertionError("unreachable")

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


__all__ = ["POOL_SIZE", "Headers", "Pool", "ReadTimeout", "Response", "TransportError"]
