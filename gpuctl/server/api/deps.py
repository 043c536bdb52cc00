"""What every route shares: the thread pool for blocking service calls, the caller, permission checks.

Why a thread pool: the service layer and the cluster client are synchronous (the CLI uses them too),
and an `async def` route that called them directly would stop every other request while the API
server answers. `run()` moves each call to a worker thread of a bounded pool. Authentication and
authorisation first try their caches on the event loop, so a warm request costs no thread hop for
them.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuctl.cluster import Cluster
from gpuctl.cluster.reader import Reader
from gpuctl.server.api.auth import MISS, Access, Authenticator, AuthError, Caller, bearer_token
from gpuctl.server.api.errors import error
from gpuctl.server.flags import API_THREADS
from gpuctl.service.access import forbidden_message
from gpuctl.service.prometheus import Prometheus
from gpuctl.spec import SpecConfig

T = TypeVar("T")

# Worker threads for blocking calls. The cluster client's connection pool is sized to match.
THREADS = API_THREADS  # set from --threads
# One limiter per event loop: a limiter belongs to the loop it waits on (tests run several loops).
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    lim = _limiters.get(loop)
    if lim is None:
        lim = _limiters[loop] = anyio.CapacityLimiter(THREADS)
    return lim


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a blocking function in the worker pool and await its result."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=limiter())


@dataclass
class ApiState:
    """Held by `app.state.api`: how to reach the cluster, who checks callers, the site's YAML rules,
    and where list views read from.

    `reader_factory` is the source of reads that may be served from a watch cache (inside
    `gpuctl serve --api`: a gpuctl.server.cache.CacheReader); without one, reads go to the cluster.
    Writes, and reads that must see the full object (describe, logs), always use `cluster()`."""

    cluster_factory: Callable[[], Cluster]
    auth: Authenticator
    spec_config: SpecConfig
    reader_factory: Callable[[], Reader] | None = None
    # Where GPU use is read (docs/utilisation.md: --prometheus-url); None: the API shows none.
    prometheus: Prometheus | None = None

    def cluster(self) -> Cluster:
        return self.cluster_factory()

    def reader(self) -> Reader | Cluster:
        """What service read functions (list_job_rows, list_pools, list_nodes, quota_rows) get: the
        cache's reader when there is one, else the cluster (gpuctl.service.inventory accepts both)."""
        return self.reader_factory() if self.reader_factory is not None else self.cluster_factory()


def state(request: Request) -> ApiState:
    return request.app.state.api


# ----------------------------------------------------------------------------- authentication
bearer_scheme = HTTPBearer(
    auto_error=False,
    description="A Kubernetes bearer token (ServiceAccount token, OIDC id token...) or a gpuctl API key "
    "(gpk_...). RBAC decides what it may do.",
)


def credential(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The token of `Authorization: Bearer` or, for API keys, `X-API-Key`."""
    authz = api_key = None
    for k, v in headers:
        if k == b"authorization":
            authz = v.decode("latin-1")
        elif k == b"x-api-key":
            api_key = v.decode("latin-1").strip() or None
    return bearer_token(authz) or api_key


async def authenticate(auth: Authenticator, token: str | None) -> Caller:
    """The caller behind a token, from the cache when possible; AuthError(401/503) otherwise."""
    if not token:
        raise AuthError(401, "authentication required: send Authorization: Bearer <Kubernetes token>")
    cached = auth.cached_caller(token)
    if isinstance(cached, Caller):
        return cached
    if cached is None:
        raise AuthError(401, "invalid or expired token")
    return await run(auth.authenticate, token)


class AuthMiddleware:
    """Authenticate every /api/ request before anything else reads it (so an anonymous request gets
    401, whatever its body). The caller is left in the request's state for the routes."""

    def __init__(self, app: ASGIApp, auth: Authenticator, prefix: str = "/api/"):
        self.app = app
        self.auth = auth
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        try:
            caller = await authenticate(self.auth, credential(scope["headers"]))
        except AuthError as e:
            headers = {"WWW-Authenticate": 'Bearer realm="gpuctl"'} if e.status == 401 else None
            await error(e.status, e.message, headers=headers)(scope, receive, send)
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


MAX_BODY = 8 * 1024 * 1024


class BodyLimitMiddleware:
    """Refuse request bodies over `limit` bytes (413) before they are read into memory: the routes
    validate sizes (1 MiB of YAML), but only after FastAPI has read the whole body."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await error(413, f"request body over {self.limit} bytes")(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:  # chunked bodies have no Content-Length
                    raise HTTPException(413, f"request body over {self.limit} bytes")
            return message

        await self.app(scope, limited, send)


async def current_caller(
    request: Request, _: HTTPAuthorizationCredentials | None = Security(bearer_scheme)
) -> Caller:
    """The authenticated caller (AuthMiddleware did the work; the Security() documents it in OpenAPI)."""
    caller = getattr(request.state, "caller", None)
    if caller is None:  # a route outside the middleware's prefix asked for a caller: a wiring bug
        raise AuthError(401, "authentication required")
    return caller


# ----------------------------------------------------------------------------- authorisation
async def allowed(auth: Authenticator, caller: Caller, access: Access) -> bool:
    cached = auth.cached_decision(caller, access)
    if cached is not None:
        return cached
    return await run(auth.allowed, caller, access)


class CallerPermissions:
    """gpuctl.service.access.Permissions of an API caller: what the service layer may show it, asked
    with SubjectAccessReviews (the Authenticator's cache), so a view gives the caller what the CLI
    gives it with its own credential. Called from worker threads (blocking)."""

    def __init__(self, auth: Authenticator, caller: Caller):
        self.auth = auth
        self.caller = caller

    def allows(self, verb: str, resource: str, group: str = "", namespace: str | None = None) -> bool:
        res, _, sub = resource.partition("/")
        return self.auth.allowed(self.caller, Access(verb, res, group, namespace, None, sub or None))


def permissions(request: Request, caller: Caller) -> CallerPermissions:
    return CallerPermissions(state(request).auth, caller)


def refusal(caller: Caller, access: Access) -> AuthError:
    """The 403 of a refused access: what, and the role to bind (gpuctl.service.access)."""
    resource = access.resource + (f"/{access.subresource}" if access.subresource else "")
    role = forbidden_message(access.verb, resource, access.group, access.namespace)
    return AuthError(
        403, f"forbidden: {caller.username} may not {access.describe()} (Kubernetes RBAC): {role}"
    )


async def require(request: Request, caller: Caller, *accesses: Access) -> None:
    """403 unless RBAC allows the caller every one of `accesses` (checked in order, cached)."""
    auth = state(request).auth
    for access in dict.fromkeys(accesses):
        if not await allowed(auth, caller, access):
            raise refusal(caller, access)


async def visible(request: Request, caller: Caller, access: Access, namespaces: Iterable[str]) -> set[str]:
    """Of `namespaces`, those where the caller has `access` (its namespace field is replaced).

    One cluster-wide check first: a cluster admin costs one review, a team member one per namespace
    that holds something (cached).
    """
    auth = state(request).auth
    spaces = set(namespaces)
    if await allowed(auth, caller, replace(access, namespace=None)):
        return spaces
    out: set[str] = set()

    async def check(ns: str) -> None:
        if await allowed(auth, caller, replace(access, namespace=ns)):
            out.add(ns)

    # Concurrently: a cold cache with many namespaces would otherwise cost one round trip after another.
    async with anyio.create_task_group() as tg:
        for ns in sorted(spaces):
            tg.start_soon(check, ns)
    return out


__all__ = [
    "MISS",
    "ApiState",
    "AuthMiddleware",
    "BodyLimitMiddleware",
    "CallerPermissions",
    "allowed",
    "authenticate",
    "credential",
    "current_caller",
    "permissions",
    "refusal",
    "require",
    "run",
    "state",
    "visible",
]
