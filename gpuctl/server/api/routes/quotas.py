"""/api/v1/quotas: team quotas (gpuctl.service.quotas through lifecycle.submit).

A quota is a Kueue ClusterQueue per team namespace, cluster-scoped, so writing one needs RBAC on
clusterqueues (admins). Reading is allowed to whoever may read the ClusterQueue (gpuctl-pool-viewer:
quotas describe capacity, and "why is my job waiting" needs every team's), and to members of the team,
who may read the LocalQueue in their own namespace. As `gpuctl get quotas -A`, the list holds every
quota the caller may read; `gpuctl get quotas` in a team's context is `?namespace=` here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gpuctl.cluster import Cluster, path
from gpuctl.constants import ROLE_POOL_VIEWER, ROLE_USER, Kind
from gpuctl.server.api import perms
from gpuctl.server.api.auth import AuthError, Caller
from gpuctl.server.api.deps import allowed, current_caller, require, run, state
from gpuctl.server.api.documents import load, message, only_kinds, submit_cluster_documents
from gpuctl.server.api.errors import JSON
from gpuctl.server.api.models import DryRunQ, NamespaceP, NamespaceQ, QuotaBody, dry_run_mode
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service.errors import NotFound
from gpuctl.service.quotas import delete_quota, quota_rows

router = APIRouter(prefix="/api/v1/quotas", tags=["quotas"])
Me = Annotated[Caller, Depends(current_caller)]


async def can_read(request: Request, caller: Caller, namespace: str) -> bool:
    auth = state(request).auth
    return await allowed(auth, caller, perms.quotas("get", namespace)) or await allowed(
        auth, caller, perms.team_queue("get", namespace)
    )


def _unreadable(caller: Caller, namespace: str) -> AuthError:
    return AuthError(
        403,
        f"forbidden: {caller.username} may not read the quota of namespace {namespace}: that needs "
        f"{ROLE_POOL_VIEWER} (bind it with a ClusterRoleBinding) or {ROLE_USER} in {namespace} (a "
        "RoleBinding there)",
    )


@router.get("", responses=COMMON_ERRORS, summary="Team quotas and their use (as `gpuctl get quotas`)")
async def list_quotas(request: Request, caller: Me, namespace: NamespaceQ = None) -> JSON:
    if namespace and not await can_read(request, caller, namespace):
        raise _unreadable(caller, namespace)
    rows = await run(quota_rows, state(request).reader(), namespace)
    if not namespace and not await allowed(state(request).auth, caller, perms.quotas("list")):
        rows = [q for q in rows if await can_read(request, caller, q["namespace"])]
    return JSON({"total": len(rows), "items": rows})


@router.get("/{namespaceName}", responses=COMMON_ERRORS, summary="The quota of one team namespace")
async def get_quota(request: Request, caller: Me, namespaceName: NamespaceP) -> JSON:
    if not await can_read(request, caller, namespaceName):
        raise _unreadable(caller, namespaceName)
    rows = await run(quota_rows, state(request).cluster(), namespaceName)
    if not rows:
        raise NotFound(f"namespace {namespaceName} has no gpuctl quota")
    return JSON(rows[0])


def _existing_namespaces(cluster: Cluster, names: list[str]) -> set[str]:
    return {n for n in names if cluster.get_or_none(path("Namespace", n)) is not None}


async def _write(request: Request, caller: Caller, body: QuotaBody, action: str) -> JSON:
    docs = await run(load, body.yamlContent, state(request).spec_config, strict=body.strict)
    only_kinds(docs, [Kind.QUOTA], "/api/v1/quotas")
    verb = "create" if action == "create" else "update"
    spaces = sorted({ns for d in docs for ns in d.spec.entries()})
    await require(request, caller, *[perms.quotas(verb, ns) for ns in spaces] or [perms.quotas(verb)])
    # A quota also creates its team namespace, or labels it when it exists: RBAC must allow that too.
    existing = await run(_existing_namespaces, state(request).cluster(), spaces)
    await require(
        request,
        caller,
        *[perms.namespaces("patch", ns) if ns in existing else perms.namespaces("create") for ns in spaces],
    )
    return await submit_cluster_documents(request, docs, body.dryRun, action)


@router.post("", status_code=201, responses=COMMON_ERRORS, summary="Create team quotas from YAML (admins)")
async def create_quota(request: Request, caller: Me, body: QuotaBody) -> JSON:
    return await _write(request, caller, body, "create")


@router.put(
    "", responses=COMMON_ERRORS, summary="Create or change team quotas from YAML (admins; as `apply -f`)"
)
async def apply_quota(request: Request, caller: Me, body: QuotaBody) -> JSON:
    return await _write(request, caller, body, "apply")


@router.delete(
    "/{namespaceName}", responses=COMMON_ERRORS, summary="Remove a team namespace's quota (admins)"
)
async def remove_quota(
    request: Request,
    caller: Me,
    namespaceName: NamespaceP,
    deleteNamespace: Annotated[
        bool, Query(description="also delete the namespace, if gpuctl created it")
    ] = False,
    dryRun: DryRunQ = False,
) -> JSON:
    mode = dry_run_mode(dryRun)
    needs = [perms.quotas("delete", namespaceName)]
    if deleteNamespace:
        needs.append(perms.namespaces("delete", namespaceName))
    await require(request, caller, *needs)
    cluster = state(request).cluster()
    rows = await run(quota_rows, cluster, namespaceName)
    if not rows:
        raise NotFound(f"namespace {namespaceName} has no gpuctl quota")
    lines = await run(
        delete_quota,
        cluster,
        rows[0]["name"],
        delete_namespace=deleteNamespace,
        dry_run=mode,
        namespaces=[namespaceName],
    )
    return JSON(
        {
            "namespace": namespaceName,
            "quota": rows[0]["name"],
            "status": "deleted",
            "dryRun": not mode.persists,
            "message": message(lines, mode),
        }
    )
