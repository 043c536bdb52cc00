"""The one loop of serve's periodic parts (defragmentation, set-aside, the gang Service mirror): `step()`
every `interval` seconds in a daemon thread until serve stops; a failed step is logged with its traceback
and the next one runs on time (each step re-reads the cache, so nothing is carried over)."""

from __future__ import annotations

import logging
import threading
from typing import ClassVar

log = logging.getLogger("gpuctl.server")


class Periodic:
    """Mixin: a part with `interval` and `step()`; `start(stop)` runs it (serve's main starts every part)."""

    thread_name: ClassVar[str] = "periodic"
    interval: float

    def step(self) -> None:
        raise NotImplementedError

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name=self.thread_name, daemon=True)
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("%s step failed", self.thread_name)
            stop.wait(self.interval)
