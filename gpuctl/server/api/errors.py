"""Every failure becomes a JSON answer `{"error": "..."}` with the right status; never a stack trace.

Why one place: the service layer raises ServiceError (its `.status` says 400/403/404/409), the spec
loader SpecError (a user's YAML: 400), the cluster client ApiError (the API server's own status), and
anything else is a bug. Client errors must say what to fix; a bug must answer 500 without internals
(logged here with a reference the user can quote) — which schemathesis checks never happens.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson
import urllib3.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuctl.cluster import ApiError
from gpuctl.server.api.auth import AuthError
from gpuctl.service.errors import ServiceError
from gpuctl.spec import SpecError

log = logging.getLogger("gpuctl.api")


class JSON(Response):
    """orjson-encoded JSON: the lists of a big cluster encode several times faster than json."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS, default=str)


class ApiProblem(Exception):
    """A client error raised by a route: status and message go to the caller as they are."""

    def __init__(self, status: int, message: str, **extra: Any):
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def error(status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> JSON:
    return JSON({"error": message, **extra}, status_code=status, headers=headers)


def api_error_status(e: ApiError) -> int:
    """The API server's 4xx is the caller's problem as much as ours (invalid object, conflict, webhook
    denial): pass it on. Its 5xx, or anything odd, means the cluster failed: 502."""
    return e.status if 400 <= e.status < 500 else 502


def _validation_message(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid request: " + "; ".join(parts) + more


def validation_error(errors: list[dict]) -> JSON:
    """422 for invalid parameters or bodies, naming each field (the WebSocket logs route sends the same)."""
    return error(422, _validation_message(errors), detail=_jsonable_errors(errors))


def _jsonable_errors(errors: list[dict]) -> list[dict]:
    """Pydantic's error dicts may hold the offending input or an exception (ctx): keep plain fields."""
    return [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in errors
    ]


def install(app: FastAPI) -> None:
    """Register the handlers; `GuardMiddleware` (added by the app) catches what they do not."""

    @app.exception_handler(ServiceError)
    async def _service(_: Request, e: ServiceError) -> Response:
        return error(getattr(e, "status", 400) or 400, str(e))

    @app.exception_handler(SpecError)
    async def _spec(_: Request, e: SpecError) -> Response:
        return error(400, str(e), issues=[str(i) for i in e.issues], warnings=list(e.warnings))

    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> Response:
        return error(api_error_status(e), f"Kubernetes: {e.message or e}")

    @app.exception_handler(AuthError)
    async def _auth(_: Request, e: AuthError) -> Response:
        headers = {"WWW-Authenticate": 'Bearer realm="gpuctl"'} if e.status == 401 else None
        return error(e.status, e.message, headers=headers)

    @app.exception_handler(ApiProblem)
    async def _problem(_: Request, e: ApiProblem) -> Response:
        return error(e.status, e.message, **e.extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> Response:
        return error(e.status_code, str(e.detail), headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> Response:
        return validation_error(list(e.errors()))

    @app.exception_handler(ConnectionError)
    async def _unreachable(_: Request, e: ConnectionError) -> Response:
        return error(503, f"cannot reach the Kubernetes API server: {e}")


UNREACHABLE = (OSError, TimeoutError)


class GuardMiddleware:
    """The last line: any exception the handlers did not map answers a plain 500 (or 503 when the
    cluster cannot be reached), logged with a reference. Pure ASGI, so it costs nothing per request."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:
            if started:
                log.exception(
                    "error after the response started: %s %s", scope.get("method"), scope.get("path")
                )
                return
            if isinstance(e, (*UNREACHABLE, urllib3.exceptions.HTTPError)):
                log.warning("cluster unreachable: %s %s: %s", scope.get("method"), scope.get("path"), e)
                response = error(503, f"cannot reach the Kubernetes API server: {type(e).__name__}")
            else:
                ref = uuid.uuid4().hex[:12]
                log.exception("internal error %s: %s %s", ref, scope.get("method"), scope.get("path"))
                response = error(500, f"internal error (reference {ref}; the server log has the details)")
            await response(scope, receive, send)
