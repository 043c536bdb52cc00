"""/api/v1/namespaces: gpuctl's team namespaces (labelled runwhere.ai/namespace=true).

Listing shows only the namespaces the caller may `get` (all of them for whoever may list namespaces);
deleting goes through the CLI's `delete ns` (gpuctl.service.lifecycle), which refuses namespaces gpuctl
did not create and removes the team's quota first, so it needs RBAC for both.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from gpuctl.domain.objects import short_age
from gpuctl.server.api import perms
from gpuctl.server.api.auth import Caller
from gpuctl.server.api.deps import current_caller, permissions, require, run, state
from gpuctl.server.api.documents import delete_named, deleted
from gpuctl.server.api.errors import JSON
from gpuctl.server.api.models import DryRunQ, NamespaceP, dry_run_mode
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service import views
from gpuctl.service.views import NamespaceRow, describe_namespace

router = APIRouter(prefix="/api/v1/namespaces", tags=["namespaces"])
Me = Annotated[Caller, Depends(current_caller)]


def ns_item(r: NamespaceRow) -> dict:
    """A row of `gpuctl get ns -o json`, plus the earlier API's age string and camelCase time."""
    return {**r.as_dict(), "age": short_age(r.age), "ageSeconds": r.age, "createdAt": r.created_at}


@router.get("", responses=COMMON_ERRORS, summary="gpuctl's team namespaces (as `gpuctl get ns`)")
async def list_namespaces(request: Request, caller: Me) -> JSON:
    """Every team namespace for whoever may list namespaces, else those the caller may `get` (the
    CLI's rule: gpuctl.service.views.list_namespaces with the caller's permissions)."""
    items = await run(views.list_namespaces, state(request).cluster(), permissions(request, caller))
    rows = [ns_item(n) for n in items]
    return JSON({"total": len(rows), "items": rows})


@router.get("/{namespaceName}", responses=COMMON_ERRORS, summary="A namespace with its labels and quota")
async def get_namespace(request: Request, caller: Me, namespaceName: NamespaceP) -> JSON:
    await require(request, caller, perms.namespaces("get", namespaceName))
    d = await run(describe_namespace, state(request).cluster(), namespaceName)
    return JSON({**ns_item(d.namespace), "labels": d.namespace.labels, "quota": d.quota})


@router.delete(
    "/{namespaceName}", responses=COMMON_ERRORS, summary="Delete a namespace gpuctl created, and its quota"
)
async def delete_namespace(
    request: Request,
    caller: Me,
    namespaceName: NamespaceP,
    dryRun: DryRunQ = False,
) -> JSON:
    mode = dry_run_mode(dryRun)
    await require(
        request, caller, perms.namespaces("delete", namespaceName), perms.quotas("delete", namespaceName)
    )
    results = await delete_named(request, "namespace", namespaceName, mode, namespace=None)
    return deleted(namespaceName, mode, results)
