"""gpuctl.cluster.transport against a real HTTP server on loopback: keep-alive reuse, a connection the
server closed replaced once, streamed bodies as they arrive, timeouts and cut answers as OSErrors."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuctl.cluster.transport import Pool, ReadTimeout, TransportError


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[tuple] = set()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        Handler.connections.add(self.client_address)  # (host, port): one per connection
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                line = f'{{"n": {i}}}\n'.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/slow":
            time.sleep(1.0)
        if self.path == "/hang":  # the headers, then a body that comes late (a quiet watch)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.flush()
            time.sleep(3.0)
            self.wfile.write(b"{}")
            return
        if self.path == "/until-close":  # no length, no chunks: the body ends with the connection
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b'{"all": "of it"}')
            self.close_connection = True
            return
        if self.path == "/chunks":  # a chunk extension and a trailer, then a header given twice
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Twice", "first")
            self.send_header("x-twice", "second")
            self.end_headers()
            self.wfile.write(b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n")
            return
        if self.path == "/cut":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"short")
            self.close_connection = True
            return
        body = b'{"ok": true}' if self.path != "/missing" else b'{"message": "nope"}'
        self.send_response(200 if self.path != "/missing" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.handle_error = lambda request, address: None  # type: ignore[method-assign] # a client that left
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    Handler.connections = set()
    yield srv
    srv.shutdown()
    srv.server_close()


def url(srv: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_answers_reuse_one_connection(server) -> None:
    pool = Pool(url(server))
    for _ in range(5):
        r = pool.request("GET", "/x")
        assert (r.status, r.data) == (200, b'{"ok": true}')
    r = pool.request("POST", "/echo", body="ü".encode(), headers={"Content-Type": "text/plain"})
    assert (r.status, r.data) == (201, "ü".encode())
    assert len(Handler.connections) == 1


def test_an_error_answer_has_its_body(server) -> None:
    r = Pool(url(server)).request("GET", "/missing")
    assert (r.status, r.data) == (404, b'{"message": "nope"}')
    assert r.headers.get("content-type") == "application/json"


def test_bodies_framed_by_chunks_or_by_the_end_of_the_connection(server) -> None:
    pool = Pool(url(server))
    r = pool.request("GET", "/chunks")
    assert (r.data, r.headers.get("X-TWICE"), "x-twice" in r.headers) == (b"abcde", "first", True)
    assert len(pool._idle) == 1  # read to its end (trailer included): the connection is kept
    r = pool.request("GET", "/until-close")
    assert r.data == b'{"all": "of it"}'
    assert pool._idle == []  # the server closed it: not reused
    assert pool.request("GET", "/x").data == b'{"ok": true}'
    assert len(Handler.connections) == 2


def test_a_target_or_header_that_would_split_the_request_is_refused(server) -> None:
    pool = Pool(url(server))
    with pytest.raises(ValueError, match="space or control"):
        pool.request("GET", "/x HTTP/1.1\r\nX-Evil: 1")
    with pytest.raises(ValueError, match="line break"):
        pool.request("GET", "/x", headers={"Authorization": "Bearer t\r\nX-Evil: 1"})
    assert Handler.connections == set()  # nothing was sent


def test_a_connection_the_server_closed_is_replaced(server) -> None:
    pool = Pool(url(server))
    pool.request("GET", "/x").data  # noqa: B018
    (idle,) = pool._idle
    assert idle.sock is not None
    idle.sock.shutdown(socket.SHUT_RDWR)  # as when the server drops an idle keep-alive connection
    assert pool.request("GET", "/x").data == b'{"ok": true}'


def test_a_stream_yields_lines_as_they_come(server) -> None:
    r = Pool(url(server)).request("GET", "/stream")
    seen = []
    t0 = time.monotonic()
    for chunk in r.stream(65536):
        seen.append((chunk, time.monotonic() - t0))
    assert b"".join(c for c, _ in seen) == b'{"n": 0}\n{"n": 1}\n{"n": 2}\n'
    assert seen[0][1] < 0.1  # the first event before the last was written


def test_timeouts_and_cut_answers_are_os_errors(server) -> None:
    pool = Pool(url(server))
    with pytest.raises(ReadTimeout) as e:
        pool.request("GET", "/slow", read_timeout=0.2).data  # noqa: B018
    assert isinstance(e.value, OSError)
    with pytest.raises(TransportError) as cut:
        pool.request("GET", "/cut").data  # noqa: B018
    assert isinstance(cut.value, OSError)
    with pytest.raises(OSError):
        Pool("http://127.0.0.1:1").request("GET", "/x", connect_timeout=1)


def test_shutdown_ends_a_read_blocked_in_another_thread(server) -> None:
    """A log follow or a watch whose reader left: the event loop ends the blocked read at once."""
    r = Pool(url(server)).request("GET", "/hang", read_timeout=None)
    done = threading.Event()

    def reader() -> None:
        try:
            r.data  # noqa: B018
        except OSError:
            pass
        finally:
            done.set()

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(0.1)
    t0 = time.monotonic()
    r.close()
    assert done.wait(0.5) and time.monotonic() - t0 < 0.5
