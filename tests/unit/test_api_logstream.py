"""Log following: every line once, in order, whatever the chunking; the reader stops with the client."""

from __future__ import annotations

import itertools
import threading
import time

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.server.api.logstream import LineSplitter, pump, start_reader

LINES = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=["Cs"]), max_size=40),
    max_size=40,
)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(
    lines=LINES,
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
    final_newline=st.booleans(),
)
def test_split_anywhere_gives_back_the_lines(lines, cuts, final_newline):
    # Multi-byte characters may be cut in the middle: only whole lines are decoded.
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    data = text.encode()
    splitter = LineSplitter()
    out = []
    for chunk in _chunks(data, cuts):
        out += splitter.feed(chunk)
    out += splitter.flush()
    expected = text.split("\n")
    if expected and expected[-1] == "":
        expected.pop()
    assert out == expected


class FakeResponse:
    """A streaming response: yields `chunks` with a pause, then blocks until shut down if `hang`."""

    def __init__(self, chunks: list[bytes], hang: bool = False, pause: float = 0.0):
        self.chunks = chunks
        self.hang = hang
        self.pause = pause
        self.released = threading.Event()
        self.shut = threading.Event()

    def stream(self, amt: int, decode_content: bool = True):
        for c in self.chunks:
            if self.shut.is_set():
                raise ConnectionError("closed")
            time.sleep(self.pause)
            yield c
        if self.hang:  # like `follow=true` on a pod that keeps running
            self.shut.wait(10)
            raise ConnectionError("closed")

    def shutdown(self) -> None:
        self.shut.set()

    def release_conn(self) -> None:
        self.released.set()


def test_pump_emits_lines_in_order_and_releases_the_connection():
    resp = FakeResponse([b"a\nb", b"b\n", b"\xc3", b"\xa9t\xc3\xa9\nlast"])
    got: list[str] = []
    pump(resp, got.append)
    assert got == ["a", "bb", "été", "last"]
    assert resp.released.is_set()


def test_reader_delivers_everything_then_end():
    lines = [f"line {i} " + "x" * (i % 50) for i in range(3000)]
    data = ("\n".join(lines) + "\n").encode()
    resp = FakeResponse([data[i : i + 777] for i in range(0, len(data), 777)])

    async def main() -> list:
        events, stop = start_reader(resp)
        got = []
        async with events:
            async for kind, value in events:
                got.append((kind, value))
                if len(got) % 500 == 0:
                    await anyio.sleep(0.01)  # a slow client: the reader waits (bounded buffer)
        stop()
        return got

    got = anyio.run(main)
    assert got == [("log", line) for line in lines] + [("end", None)]


def test_reader_stops_when_the_client_leaves():
    resp = FakeResponse([b"one\n", b"two\n"], hang=True)

    async def main() -> list:
        events, stop = start_reader(resp)
        got = []
        async with events:
            async for _, value in events:
                got.append(value)
                if len(got) == 2:
                    break
        stop()
        return got

    before = {t.ident for t in threading.enumerate()}
    assert anyio.run(main) == ["one", "two"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        t.name == "gpuctl-log-follow" and t.ident not in before for t in threading.enumerate()
    ):
        time.sleep(0.02)
    assert not [t for t in threading.enumerate() if t.name == "gpuctl-log-follow" and t.ident not in before]
    assert resp.shut.is_set() and resp.released.is_set()


def test_reader_reports_a_broken_stream():
    class Broken(FakeResponse):
        def stream(self, amt: int, decode_content: bool = True):
            yield b"ok\npart"
            raise OSError("connection reset")

    async def main() -> list:
        events, stop = start_reader(Broken([]), lambda e: f"boom: {e}")
        async with events:
            got = [e async for e in events]
        stop()
        return got

    assert anyio.run(main) == [("log", "ok"), ("error", "boom: connection reset")]
