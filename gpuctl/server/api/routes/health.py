"""/, /health (no authentication: probes and load balancers call them) and /api/v1/whoami."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from gpuctl import __version__
from gpuctl.server.api.auth import Caller
from gpuctl.server.api.deps import current_caller
from gpuctl.server.api.documents import now

router = APIRouter(tags=["health"])


@router.get("/", summary="Name and version")
async def root() -> dict:
    return {"message": "GPU Control API", "version": __version__}


@router.get("/health", summary="Liveness (does not call the cluster)")
async def health() -> dict:
    return {"status": "healthy", "timestamp": now()}


@router.get("/api/v1/whoami", summary="Who the API thinks you are (from your token)")
async def whoami(caller: Annotated[Caller, Depends(current_caller)]) -> dict:
    return {"username": caller.username, "uid": caller.uid, "groups": list(caller.groups), "via": caller.via}
