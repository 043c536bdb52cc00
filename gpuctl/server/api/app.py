"""The REST API as a FastAPI application: `create_app(cluster_factory, auth)`.

It is assembled from gpuctl's service layer and nothing else: every route checks the caller's
Kubernetes permissions (auth.py, perms.py), then calls the same service function as the matching CLI
command in a worker thread (deps.run). Served alone (`python -m gpuctl.server.api`) or mounted into
`gpuctl serve --api` (see `mount`).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from gpuctl import __version__
from gpuctl.cluster import Cluster
from gpuctl.cluster.reader import Reader
from gpuctl.server.api.auth import Authenticator
from gpuctl.server.api.deps import ApiState, AuthMiddleware, BodyLimitMiddleware
from gpuctl.server.api.errors import GuardMiddleware, install
from gpuctl.server.api.routes import health, history, jobs, namespaces, nodes, pools, quotas, usage
from gpuctl.service.prometheus import Prometheus
from gpuctl.spec import SpecConfig

DESCRIPTION = """\
gpuctl's pools, team quotas and jobs over HTTP, with the CLI's rules (the same service layer).

**Authentication**: `Authorization: Bearer <token>` with a Kubernetes token (checked with TokenReview),
or a gpuctl API key (`gpk_...`, as a bearer token or `X-API-Key`).
**Authorisation**: Kubernetes RBAC, through SubjectAccessReview: a request is allowed when the caller
could do the equivalent with kubectl (jobs: `jobs.batch` etc. in the job's namespace; pools:
`resourceflavors.kueue.x-k8s.io` and `patch nodes`; quotas: `clusterqueues.kueue.x-k8s.io`).
**Errors**: `{"error": "..."}` with 400/401/403/404/409/422 for client errors.
**Live logs**: WebSocket `/api/v1/jobs/{jobId}/logs/ws` (not in this document; see docs/api.md).
"""


def create_app(
    cluster_factory: Callable[[], Cluster],
    auth: Authenticator,
    *,
    spec_config: SpecConfig | None = None,
    reader_factory: Callable[[], Reader] | None = None,
    prometheus: Prometheus | None = None,
) -> FastAPI:
    """The API app. `spec_config` (allowed hostPaths) defaults to the server's environment, never the
    caller's. `reader_factory` gives the list views a cached source (see deps.ApiState); without it
    they read the cluster. `prometheus`: where GPU use is read (docs/utilisation.md), None for none."""
    app = FastAPI(
        title="gpuctl API",
        version=__version__,
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.api = ApiState(
        cluster_factory, auth, spec_config or SpecConfig.from_env(), reader_factory, prometheus
    )
    install(app)
    app.include_router(health.router)
    app.include_router(jobs.router)
    app.include_router(jobs.ws_router)
    app.include_router(pools.router)
    app.include_router(nodes.router)
    app.include_router(quotas.router)
    app.include_router(namespaces.router)
    app.include_router(history.router)
    app.include_router(usage.router)
    # Added last = outermost: the guard also catches what authentication raises, and authentication
    # comes before anything reads the body.
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(AuthMiddleware, auth=auth)
    app.add_middleware(GuardMiddleware)
    return app
