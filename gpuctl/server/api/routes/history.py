"""/api/v1/history/{namespace}: a team's audit trail (as `gpuctl history -n NS -o json`).

The records `gpuctl serve` keeps in the namespace's ConfigMap gpuctl-history (gpuctl.service.history).
Authorised as the CLI is: the caller must be allowed to `get` that ConfigMap in the namespace, which
gpuctl-user grants by name through the team's RoleBinding and nothing grants another team's member.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gpuctl.constants import HISTORY_CONFIGMAP, ROLE_USER
from gpuctl.server.api import perms
from gpuctl.server.api.auth import AuthError, Caller
from gpuctl.server.api.deps import allowed, current_caller, run, state
from gpuctl.server.api.errors import JSON
from gpuctl.server.api.models import DNS_LABEL, NamespaceP
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service import history

router = APIRouter(prefix="/api/v1/history", tags=["history"])
Me = Annotated[Caller, Depends(current_caller)]
JobQ = Annotated[str | None, Query(max_length=63, pattern=DNS_LABEL, description="only this job (job.name)")]


@router.get(
    "/{namespaceName}",
    responses=COMMON_ERRORS,
    summary="A team's audit trail: who submitted, stopped, preempted, moved or deleted which job",
)
async def get_history(request: Request, caller: Me, namespaceName: NamespaceP, job: JobQ = None) -> JSON:
    access = perms.on_kind("get", "ConfigMap", namespaceName, HISTORY_CONFIGMAP)
    if not await allowed(state(request).auth, caller, access):
        raise AuthError(
            403,
            f"forbidden: {caller.username} may not read the history of namespace {namespaceName}: that "
            f"needs {ROLE_USER} in {namespaceName} (a RoleBinding there); the history is the team's own",
        )
    records = await run(history.read, state(request).cluster(), namespaceName, job)
    return JSON({"namespace": namespaceName, "total": len(records), "items": [r.as_dict() for r in records]})
