"""admission.http's HTTP/1.1 protocol, driven with bytes through a fake transport (no sockets, no TLS).

The real HTTPS server (`python -m admission serve`, which uses it by default) is exercised in
test_admission_server.py; here: keep-alive, pipelining and split packets, the errors and their closes,
Expect: 100-continue, HTTP/1.0, and the re-check of a cache-dependent denial holding the connection.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.http import HttpError, HttpProtocol, head_shape, parse_head, parse_same_shape
from admission.rules import AdmissionConfig
from admission.server import AdmissionApp
from admission.state import ClusterState, StaticState
from tests.unit.test_admission_fixtures import cluster_objects, queued_pod, raw_pod, review, state


class Transport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def request(body: bytes, path: str = "/validate?timeout=3s", method: str = "POST", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    buf = bytes(raw)
    while buf:
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        buf = rest[n:]
    return out


def run(app: AdmissionApp, *chunks: bytes, wait: float = 0.0) -> tuple[Transport, list]:
    async def go() -> Transport:
        t = Transport()
        p = HttpProtocol(app, set(), keep_alive=120)
        p.connection_made(t)  # type: ignore[arg-type]
        for c in chunks:
            p.data_received(c)
        if wait:
            await asyncio.sleep(wait)
        p.connection_lost(None)
        return t

    t = asyncio.run(go())
    return t, responses(t.out)


def app(st: ClusterState | None = None, **kw) -> AdmissionApp:
    return AdmissionApp(StaticState(st or state()), AdmissionConfig(), **kw)


def test_keep_alive_pipelined_and_split_requests_are_answered_in_order():
    ok, bad = orjson.dumps(review(queued_pod())), orjson.dumps(review(raw_pod(gpus=1)))
    stream = request(ok) + request(bad) + request(b"", "/healthz", "GET")
    # Split mid-header and mid-body, one byte at a time for a stretch.
    chunks = [stream[:10], *(stream[i : i + 1] for i in range(10, 60)), stream[60:500], stream[500:]]
    t, rs = run(app(stale_wait=0), *chunks)
    assert [r[0] for r in rs] == [200, 200, 200]
    assert orjson.loads(rs[0][2])["response"]["allowed"] is True
    assert orjson.loads(rs[1][2])["response"]["allowed"] is False
    assert rs[2][2] == b"ok\n" and not t.closed


def test_errors_answer_and_close():
    for raw, status in (
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /validate HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"POST /validate HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /validate HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\nxx", 400),
        (b"POST /validate HTTP/1.1\r\nContent-Length : 1\r\n\r\nx", 400),
        (b"POST /validate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (b"POST /validate HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * 70_000, 431),
    ):
        t, rs = run(app(max_body=1000), raw)
        assert [r[0] for r in rs] == [status], raw[:40]
        assert rs[0][1]["connection"] == "close" and t.closed


def test_routes_methods_and_the_400_of_a_bad_review():
    t, rs = run(
        app(),
        request(b"", "/validate", "GET"),
        request(b"", "/nope", "GET"),
        request(b"", "/readyz", "GET"),
        request(b"", "/metrics", "GET"),
        request(b"\x00\x01"),
    )
    assert [r[0] for r in rs] == [405, 404, 200, 200, 400]
    assert rs[0][1]["allow"] == "POST"
    assert b"gpuctl_webhook_requests" in rs[3][2]
    assert not t.closed


def test_connection_close_http10_and_100_continue():
    body = orjson.dumps(review(queued_pod()))
    t, rs = run(app(), request(body, extra="Connection: close\r\n"), request(body))
    assert len(rs) == 1 and t.closed  # nothing after a Connection: close
    t, rs = run(app(), request(body, extra="Connection: keep-alive, Close\r\n"), request(body))
    assert len(rs) == 1 and rs[0][1]["connection"] == "close" and t.closed
    raw = b"POST /validate HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    t, rs = run(app(), raw)
    assert rs[0][0] == 200 and t.closed
    head = request(body, extra="Expect: 100-continue\r\n")
    split = head.index(b"\r\n\r\n") + 4
    t, rs = run(app(), head[:split], head[split:])
    assert [r[0] for r in rs] == [100, 200]


def test_cache_dependent_denial_is_rechecked_and_later_requests_wait_their_turn():
    st = ClusterState.from_objects(o for o in cluster_objects() if o["metadata"]["name"] != "a100")
    a = app(st, stale_wait=0.3)
    waits = orjson.dumps(review(queued_pod()))  # pool a100 unknown to this cache: re-checked for 0.3 s
    quick = orjson.dumps(review(raw_pod(labels={"runwhere.ai/poool": "x"})))
    t0 = time.monotonic()
    t, rs = run(a, request(waits) + request(quick), wait=0.6)
    assert [r[0] for r in rs] == [200, 200]
    first, second = (orjson.loads(r[2])["response"] for r in rs)
    assert first["allowed"] is False and "[pool-exists]" in first["status"]["message"]
    assert second["allowed"] is False and "[unknown-key]" in second["status"]["message"]
    assert time.monotonic() - t0 >= 0.3 and not t.paused


# parse_head's two regex scans against what a line-by-line parser would say (the cases the scans could get
# wrong: CR or LF alone, names that are not tokens, framing headers repeated, a name that ends in one).
@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"POST /v HTTP/1.1\r\nHost: x\r\nContent-Length: 5", ("ok", 5, False, False)),
        (b"POST /v HTTP/1.1\r\ncontent-length:5\r\nconnection: Keep-Alive, Upgrade", ("ok", 5, False, False)),
        (b"POST /v HTTP/1.0\r\nContent-Length: 5", ("ok", 5, True, False)),
        (b"POST /v HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0", ("ok", 0, False, False)),
        (b"POST /v HTTP/1.1\r\nConnection: TE, close\r\nContent-Length: 1", ("ok", 1, True, False)),
        (b"POST /v HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2", ("ok", 2, False, True)),
        (b"POST /v HTTP/1.1\r\nContent-Length: 5\r\nContent-Length:  5 ", ("ok", 5, False, False)),
        (b"POST /v HTTP/1.1\r\nX-Content-Length: 9\r\nContent-Length: 5", ("ok", 5, False, False)),
        (b"POST /v HTTP/1.1\r\nX-A: content-length: 9\r\nContent-Length: 5", ("ok", 5, False, False)),
        (b"POST /v HTTP/1.1", ("ok", 0, False, False)),
        (b"POST /v HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6", (400, b"conflicting content-length")),
        (
            b"POST /v HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive",
            (400, b"conflicting connection"),
        ),
        (b"POST /v HTTP/1.1\r\nContent-Length: -5", (400, b"bad content-length")),
        (
            b"POST /v HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked",
            (411, b"send a Content-Length"),
        ),
        (b"POST /v HTTP/1.1\r\nHost: a\nb: c\r\nContent-Length: 5", (400, b"bad header line")),
        (b"POST /v HTTP/1.1\r\nHost: a\rb\r\nContent-Length: 5", (400, b"bad header line")),
        (b"POST /v HTTP/1.1\r\nBad Name: x\r\nContent-Length: 5", (400, b"bad header line")),
        (b"POST /v HTTP/1.1\r\nContent-Length 5", (400, b"bad header line")),
        (b"POST /v HTTP/1.1\r\n: x", (400, b"bad header line")),
        (b"POST /v HTTP/2\r\nContent-Length: 5", (400, b"bad request line")),
    ],
)
def test_parse_head_framing(head: bytes, expected: tuple) -> None:
    try:
        h = parse_head(head + b"\r\n\r\n", 1000)
        got: tuple = ("ok", h.length, h.close, h.expect)
    except HttpError as exc:
        got = (exc.status, exc.text[: len(expected[1])])
    assert got == expected


# A head shaped like the connection's last one is read without parsing (parse_same_shape): it must give
# parse_head's answer whenever it answers at all, and answer for what the API server sends.
_NAMES = st.sampled_from(
    [
        b"Content-Length",
        b"content-length",
        b"Connection",
        b"Expect",
        b"Transfer-Encoding",
        b"Host",
        b"X-A",
        b"A b",
    ]
)
_VALUES = st.sampled_from(
    [
        b" 12",
        b"12",
        b" 12 ",
        b"\t7",
        b"x",
        b" close",
        b" 100-continue",
        b"",
        b"a\nb",
        b"a\rb",
        b" 2000",
        b"1\r",
    ]
)
_LINES = st.lists(st.tuples(_NAMES, st.sampled_from([b":", b": "]), _VALUES).map(b"".join), max_size=5)
_REQUEST_LINES = st.sampled_from(
    [b"POST /validate HTTP/1.1", b"POST /validate?timeout=10s HTTP/1.0", b"GET / HTTP/2"]
)


def _head(request_line: bytes, lines: list[bytes]) -> bytes:
    return request_line + b"".join(b"\r\n" + line for line in lines) + b"\r\n\r\n"


def _parsed(buf: bytes) -> tuple:
    try:
        return ("head", parse_head(buf, 1000))
    except HttpError as exc:
        return ("error", exc.status)


_FILLER = st.lists(
    st.tuples(
        st.sampled_from([b"Host", b"User-Agent", b"Accept", b"X-A", b"A b", b"Content-Length", b"Expect"]),
        st.sampled_from([b":", b": "]),
        _VALUES,
    ).map(b"".join),
    max_size=3,
)


@settings(max_examples=1000, deadline=None)
@given(_REQUEST_LINES, _FILLER, _FILLER, _VALUES, _LINES, st.binary(max_size=8))
def test_a_head_of_the_same_shape_is_read_exactly_as_parse_head_reads_it(
    rl, above, below, value, other, body
):
    def head(cl: bytes) -> bytes:
        return _head(rl, [*above, b"Content-Length:" + cl, *below])

    old = head(b" 5")
    parsed = _parsed(old)
    shape = head_shape(old, parsed[1]) if parsed[0] == "head" else None
    if shape is None:
        return
    # The same head with another Content-Length value, and an unrelated one.
    for buf in (head(value) + body, _head(rl, other) + body):
        fast = parse_same_shape(buf, shape, 1000)
        if fast is not None:
            assert _parsed(buf) == ("head", fast)


def test_the_api_servers_heads_are_read_by_shape():
    def head(n: int) -> bytes:
        return (
            b"POST /validate?timeout=10s HTTP/1.1\r\nHost: gpuctl-webhook.gpuctl-system.svc:443\r\n"
            b"User-Agent: kube-apiserver-admission\r\nContent-Length: %d\r\nAccept: application/json, */*\r\n"
            b"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n" % n
        )

    shape = head_shape(head(5), parse_head(head(5), 10_000))
    assert shape is not None
    for n in (0, 7, 1234, 9999):
        assert parse_same_shape(head(n) + b"{}", shape, 10_000) == parse_head(head(n) + b"{}", 10_000)
    assert parse_same_shape(head(10_001), shape, 10_000) is None  # parse_head answers the 413
    assert parse_same_shape(head(5).replace(b"gzip", b"br"), shape, 10_000) is None
