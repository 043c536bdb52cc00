"""Keep-alive HTTP(S) connections to one API server, on the standard library's http.client.

Why not urllib3 (gpuctl's transport before this module): every CLI command imported it, ~40-60 ms of a
command that kubectl finishes in 50 (`get jobs -A`, `create -f`), for what gpuctl uses of it here: a
pool of connections to one host, TLS with the kubeconfig's context, a proxy tunnel, timeouts and
streamed bodies. http.client and ssl are loaded by any HTTPS client anyway.

`Pool.request` returns a `Response` with the part of urllib3's response interface gpuctl uses
(`status`, `reason`, `headers`, `data`, `read`, `stream`, `release_conn`, `close`), so a response
body is read, streamed (watches, `logs -f`) or left the same way. Failures are OSErrors (the socket's
own, or `TransportError` for a malformed or cut answer; `ReadTimeout` when a read waited too long), which
every front end already reports as "cannot reach the API server".
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

POOL_SIZE = 10  # idle connections kept; more are opened when needed and closed after use


class TransportError(ConnectionError):
    """The API server's answer was cut or not HTTP (http.client.HTTPException, as an OSError)."""


class ReadTimeout(TimeoutError):
    """No byte for the read timeout."""


class _HTTPSConnection(http.client.HTTPSConnection):
    """TLS with the kubeconfig's context, and its tls-server-name for SNI and the hostname check."""

    def __init__(self, host: str, port: int | None, *, context: ssl.SSLContext, server_hostname: str | None):
        super().__init__(host, port, context=context)
        self._server_hostname = server_hostname

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, and the proxy's CONNECT when tunnelling
        name = self._server_hostname or self._tunnel_host or self.host
        self.sock = self._context.wrap_socket(self.sock, server_hostname=name)


def _dropped(conn: http.client.HTTPConnection) -> bool:
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
    """One answer; its connection goes back to the pool when its body has been read."""

    def __init__(self, pool: Pool, conn: http.client.HTTPConnection, raw: http.client.HTTPResponse):
        self._pool, self._conn, self._raw = pool, conn, raw
        self.status: int = raw.status
        self.reason: str = raw.reason
        self.headers = raw.headers
        self._data: bytes | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = self.read()
        return self._data

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A failed read closes the response and surfaces as the transport's own errors."""
        try:
            yield
        except http.client.HTTPException as e:
            self.close()
            raise TransportError(f"{type(e).__name__}: {e}") from e
        except TimeoutError as e:
            self.close()
            raise ReadTimeout(str(e) or "read timed out") from e

    def read(self, amt: int | None = None) -> bytes:
        with self._reading():
            out = self._raw.read(amt)
        if amt is None or self._raw.isclosed():
            self.release_conn()
        return out

    def stream(self, amt: int = 65536, decode_content: bool = True) -> Iterator[bytes]:
        """The body as it arrives, in chunks of at most `amt` bytes (a watch's events, `logs -f`)."""
        while True:
            with self._reading():
                chunk = self._raw.read1(amt)
            if not chunk:
                self.release_conn()
                return
            yield chunk

    def release_conn(self) -> None:
        """Back to the pool when the body was read to its end; else the connection is closed."""
        if self._conn is not None and self._raw.isclosed() and not self._raw.will_close:
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
        self._raw.close()
        if conn is not None:
            conn.close()


class _Headers(dict):
    """Request headers where a list is one header line per value (Impersonate-Group: a, then b):
    http.client sends what items() gives."""

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
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _proxy_headers(self) -> dict[str, str]:
        """Proxy-Authorization from the proxy URL's user:password (http://user:pass@proxy:3128)."""
        p = self.proxy
        if p is None or p.username is None:
            return {}
        cred = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        return {"Proxy-Authorization": "Basic " + base64.b64encode(cred).decode()}

    def _new(self) -> http.client.HTTPConnection:
        if self.proxy is not None:
            phost = self.proxy.hostname or ""
            pport = self.proxy.port or (443 if self.proxy.scheme == "https" else 80)
            if self.scheme == "https":
                # An http:// proxy is asked to CONNECT (a tunnel; TLS to the API server inside it). An
                # https:// proxy would need TLS to the proxy too, which http.client does not nest.
                assert self.ssl_context is not None
                conn: http.client.HTTPConnection = _HTTPSConnection(
                    phost, pport, context=self.ssl_context, server_hostname=self.server_hostname or self.host
                )
                conn.set_tunnel(self.host, self.port, headers=self._proxy_headers())
                return conn
            return http.client.HTTPConnection(phost, pport)
        if self.scheme == "https":
            assert self.ssl_context is not None
            return _HTTPSConnection(
                self.host, self.port, context=self.ssl_context, server_hostname=self.server_hostname
            )
        return http.client.HTTPConnection(self.host, self.port)

    def _get(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection the server has not closed (reused=True), else a new one."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn, True
                conn.close()
        return self._new(), False

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def _target(self, path: str) -> str:
        if self.proxy is not None and self.scheme == "http":
            return f"http://{self.host}:{self.port}{self.prefix}{path}"  # a plain proxy: the whole URL
        return self.prefix + path

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
        for attempt in (0, 1):
            conn, reused = self._get()
            try:
                if conn.sock is None:
                    conn.timeout = connect_timeout
                    conn.connect()
                assert conn.sock is not None
                conn.sock.settimeout(read_timeout)
                conn.request(method, self._target(path), body=body, headers=_Headers(headers or {}))
                raw = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise TransportError(f"{type(e).__name__}: {e}") from e
            except http.client.HTTPException as e:
                conn.close()
                raise TransportError(f"{type(e).__name__}: {e}") from e
            except TimeoutError as e:
                conn.close()
                raise ReadTimeout(str(e) or "timed out") from e
            except BaseException:
                conn.close()
                raise
            return Response(self, conn, raw)
        raise AssertionError("unreachable")

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


__all__ = ["POOL_SIZE", "Pool", "ReadTimeout", "Response", "TransportError"]
