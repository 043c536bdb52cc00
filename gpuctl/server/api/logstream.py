"""Following a pod's log for a WebSocket: complete lines, in order, each exactly once.

Why not re-read with tail every few seconds (the earlier gpuctl): two reads overlap or leave a gap
whenever the pod writes between them, so lines repeat or vanish. Here one `follow=true` request to the
API server is read to its end by a thread; the bytes are cut at newlines (a line split across chunks,
or a UTF-8 character split across chunks, waits for its end) and handed to the event loop through a
bounded channel, so a slow WebSocket client slows the read instead of growing memory.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

log = logging.getLogger("gpuctl.api.logs")

CHUNK = 64 * 1024
BUFFER_LINES = 1024


class LineSplitter:
    """Bytes in, whole lines out (without the newline); the unfinished tail waits for the next chunk."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._rest + chunk
        *lines, self._rest = data.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in lines]

    def flush(self) -> list[str]:
        """The last line when the stream ended without a newline."""
        rest, self._rest = self._rest, b""
        return [rest.decode("utf-8", errors="replace")] if rest else []


class StreamingResponse(Protocol):
    def stream(self, amt: int, decode_content: bool = ...) -> Iterable[bytes]: ...

    def release_conn(self) -> None: ...


def pump(resp: StreamingResponse, emit: Callable[[str], None]) -> None:
    """Read `resp` to its end, calling emit(line) for every line in order."""
    splitter = LineSplitter()
    try:
        for chunk in resp.stream(CHUNK, decode_content=True):
            for line in splitter.feed(chunk):
                emit(line)
        for line in splitter.flush():
            emit(line)
    finally:
        with contextlib.suppress(Exception):
            resp.release_conn()


Event = tuple[str, Any]  # ("log", line) | ("end", None) | ("error", message)


def start_reader(
    resp: Any, describe_error: Callable[[BaseException], str] = str
) -> tuple[MemoryObjectReceiveStream[Event], Callable[[], None]]:
    """Read `resp` in a thread; return (events, stop). Must be called from the event loop.

    stop() closes the connection to the API server, which ends the thread's blocking read; closing
    the receive side also ends it (its next send fails).
    """
    send: MemoryObjectSendStream[Event]
    send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=BUFFER_LINES)
    token = anyio.lowlevel.current_token()
    stopped = threading.Event()

    def put(event: Event) -> None:
        # After stop() nobody reads, and the event loop may be gone: never wait on it then.
        if stopped.is_set():
            raise anyio.ClosedResourceError
        anyio.from_thread.run(send.send, event, token=token)

    def worker() -> None:
        try:
            pump(resp, lambda line: put(("log", line)))
            put(("end", None))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the client went away
        except Exception as e:
            with contextlib.suppress(Exception):
                put(("error", describe_error(e)))
        finally:
            with contextlib.suppress(Exception):
                if stopped.is_set():
                    send.close()
                else:
                    anyio.from_thread.run_sync(send.close, token=token)

    def stop() -> None:
        stopped.set()
        shutdown = getattr(resp, "shutdown", None)
        with contextlib.suppress(Exception):
            if shutdown is not None:
                shutdown()
            else:
                resp.close()

    threading.Thread(target=worker, name="gpuctl-log-follow", daemon=True).start()
    return receive, stop
