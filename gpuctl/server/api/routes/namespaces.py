"""/api/v1/namespaces: gpuctl's team namespaces (labelled runwhere.ai/namespace=true).

Listing shows only the namespaces the caller may `get` (all of them for whoever may list namespaces);
deleting goes through the CLI's `delete ns` (gpuctl.service.lifecycle), which refuses namespaces gpuctl
did not create and removes the team's quota first, so it needs RBAC for both.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gpuctl.cli.output import age
from gpuctl.cluster import Cluster, path
from gpuctl.constants import Labels
from gpuctl.server.api import perms
from gpuctl.server.api.auth import Caller
from gpuctl.server.api.deps import allowed, current_caller, require, run, state
from gpuctl.server.api.documents import check_results
from gpuctl.server.api.errors import JSON
from gpuctl.server.api.models import NamespaceP
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service.errors import NotFound
from gpuctl.service.jobs import age_seconds
from gpuctl.service.lifecycle import delete_by_name
from gpuctl.service.quotas import quota_rows

router = APIRouter(prefix="/api/v1/namespaces", tags=["namespaces"])
Me = Annotated[Caller, Depends(current_caller)]


def ns_item(n: dict) -> dict:
    """A row of `gpuctl get ns -o json`, plus the earlier API's age string."""
    seconds = age_seconds(n)
    return {
        "name": n["metadata"]["name"],
        "status": (n.get("status") or {}).get("phase", ""),
        "quota": (n["metadata"].get("labels") or {}).get(Labels.QUOTA, ""),
        "age": age(seconds),
        "ageSeconds": seconds,
        "createdAt": n["metadata"].get("creationTimestamp"),
    }


def _team_namespaces(cluster: Cluster) -> list[dict]:
    return cluster.list(path("Namespace"), label_selector=f"{Labels.NAMESPACE}=true")


@router.get("", responses=COMMON_ERRORS, summary="gpuctl's team namespaces (as `gpuctl get ns`)")
async def list_namespaces(request: Request, caller: Me) -> JSON:
    items = await run(_team_namespaces, state(request).cluster())
    auth = state(request).auth
    if not await allowed(auth, caller, perms.namespaces("list")):
        items = [
            n for n in items if await allowed(auth, caller, perms.namespaces("get", n["metadata"]["name"]))
        ]
    rows = [ns_item(n) for n in items]
    return JSON({"total": len(rows), "items": rows})


def _describe(cluster: Cluster, name: str) -> dict:
    n = cluster.get_or_none(path("Namespace", name))
    if n is None:
        raise NotFound(f"namespace {name} not found")
    quota = quota_rows(cluster, name)
    return {**ns_item(n), "labels": n["metadata"].get("labels") or {}, "quota": quota[0] if quota else None}


@router.get("/{namespaceName}", responses=COMMON_ERRORS, summary="A namespace with its labels and quota")
async def get_namespace(request: Request, caller: Me, namespaceName: NamespaceP) -> JSON:
    await require(request, caller, perms.namespaces("get", namespaceName))
    return JSON(await run(_describe, state(request).cluster(), namespaceName))


@router.delete(
    "/{namespaceName}", responses=COMMON_ERRORS, summary="Delete a namespace gpuctl created, and its quota"
)
async def delete_namespace(
    request: Request,
    caller: Me,
    namespaceName: NamespaceP,
    dryRun: Annotated[bool, Query(description="server-side dry run")] = False,
) -> JSON:
    await require(
        request, caller, perms.namespaces("delete", namespaceName), perms.quotas("delete", namespaceName)
    )
    results = await run(
        delete_by_name,
        state(request).cluster(),
        "namespace",
        [namespaceName],
        namespace=None,
        dry_run="server" if dryRun else "none",
    )
    check_results(results)
    return JSON(
        {"name": namespaceName, "status": "deleted", "dryRun": dryRun, "message": "; ".join(results[0].lines)}
    )
