"""TLS for gpuctl's own servers, with hot reload: the admission webhook (admission.server) and the REST API
and /metrics of `gpuctl serve` / `gpuctl api serve` (gpuctl.server).

Why here: both servers need it and the import contract (pyproject.toml) lets gpuctl.server and admission
both import gpuctl.cluster, but not each other. cert-manager (or an operator rotating the Secret) rewrites
the mounted files before the certificate expires; new connections must get the new certificate without a
restart (a restart of every replica at once would be an outage of the webhook with failurePolicy Fail, and
of the API).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

log = logging.getLogger("gpuctl.tls")

CERT_RELOAD_SECONDS: Final = 30.0


class CertReloader:
    """A server-side SSLContext whose certificate is re-read when the files' mtimes change.

    Use `factory` as uvicorn's ssl_context_factory (or call it with a default context maker): it keeps the
    context the server uses, and `check()` (every `interval` seconds from `run()`) loads the new chain into
    that same context, so existing connections keep theirs and new ones get the new one. A half-written
    pair fails to load and is tried again next round; the old certificate stays in use meanwhile.
    """

    def __init__(self, cert: str, key: str, interval: float = CERT_RELOAD_SECONDS) -> None:
        self.cert, self.key, self.interval = cert, key, interval
        self.context: ssl.SSLContext | None = None
        self._stamp = self._mtimes()

    def _mtimes(self) -> tuple[float, float]:
        try:
            return os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime
        except OSError:
            return 0.0, 0.0

    def load(self) -> ssl.SSLContext:
        """A new server context with the files' chain (TLS 1.2 or later); raises OSError or ssl.SSLError
        (a ValueError) naming what is wrong with the files. Checks the files at start-up."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except ssl.SSLError as exc:
            raise ValueError(f"not a matching PEM certificate and key: {exc}") from None
        return ctx

    def factory(self, config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        ctx = default()
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context = ctx
        return ctx

    def check(self) -> bool:
        """Reload if the files changed; True if a new certificate is in use."""
        stamp = self._mtimes()
        if stamp == self._stamp or self.context is None:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:  # half-written files: try again next round
            log.warning("TLS certificate reload failed (keeping the old one): %s", exc)
            return False
        self._stamp = stamp
        log.info("TLS certificate reloaded from %s", self.cert)
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()


Lifespan = Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]


def with_reloader(lifespan: Lifespan, reloader: CertReloader) -> Lifespan:
    """An ASGI app's lifespan (Starlette's `app.router.lifespan_context`) that also runs `reloader` on the
    server's event loop, where the SSLContext's handshakes happen, for as long as the app runs."""

    @contextlib.asynccontextmanager
    async def wrapped(app: Any) -> AsyncIterator[Any]:
        task = asyncio.create_task(reloader.run())
        try:
            async with lifespan(app) as state:
                yield state
        finally:
            task.cancel()

    return wrapped


__all__ = ["CERT_RELOAD_SECONDS", "CertReloader", "with_reloader"]
