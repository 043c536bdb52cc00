"""gpuctl's REST API: `create_app(cluster_factory, auth)`, and `mount(app, ctx)` for `gpuctl serve --api`.

Run alone with `python -m gpuctl.server.api --port 8080`; docs/api.md describes routes, authentication
and deployment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.server.api import deps
from gpuctl.server.api.app import create_app
from gpuctl.server.api.auth import ApiKeys, Authenticator
from gpuctl.server.cache import CacheReader
from gpuctl.service.prometheus import configured

if TYPE_CHECKING:
    from fastapi import FastAPI

    from gpuctl.server.main import ServerContext


def mount(app: FastAPI, ctx: ServerContext) -> None:
    """The hook `gpuctl serve --api` calls: serve the API from the same process and port, with the
    service's cluster connection, and answer the list views (jobs, pools, nodes, quotas) from the
    service's watch cache (gpuctl.server.wiring adds the job controllers to it with --api). API keys
    come from serve's API flags, the same as `python -m gpuctl.server.api`'s (gpuctl.server.flags:
    --api-keys-file, default $GPUCTL_API_KEYS_FILE, --auth-cache-seconds, --audience, --threads)."""
    opts = ctx.options
    keys_file = getattr(opts, "api_keys_file", None)
    deps.THREADS = getattr(opts, "threads", deps.THREADS)
    auth = Authenticator(
        lambda: ctx.cluster,
        api_keys=ApiKeys(keys_file) if keys_file else None,
        ttl=getattr(opts, "auth_cache_seconds", 10.0),
        audiences=getattr(opts, "audience", []),
    )
    reader = CacheReader(ctx.cache, ctx.cluster)
    # Mounted at the root after serve's own routes (/metrics, /healthz, /readyz), which keep priority.
    # serve's --prometheus-url (docs/utilisation.md)
    prometheus = configured(getattr(opts, "prometheus_url", None))
    app.mount("", create_app(lambda: ctx.cluster, auth, reader_factory=lambda: reader, prometheus=prometheus))


__all__ = ["ApiKeys", "Authenticator", "create_app", "mount"]
