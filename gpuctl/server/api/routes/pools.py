"""/api/v1/pools: list, describe, create, update, delete — gpuctl.service.pools through lifecycle.submit.

A pool is a Kueue ResourceFlavor plus a label on its nodes, both cluster-scoped: changing one needs
RBAC on resourceflavors and `patch nodes`, which only cluster admins have. The earlier API's JSON body
({name, description, nodes, gpuType}) is turned into a `kind: pool` document and loaded by the same
loader as a YAML file, so both forms meet the same validation.
"""

from __future__ import annotations

from typing import Annotated

import yaml
from fastapi import APIRouter, Depends, Request

from gpuctl.constants import Kind
from gpuctl.server.api import perms
from gpuctl.server.api.auth import Caller
from gpuctl.server.api.deps import current_caller, permissions, require, run, state
from gpuctl.server.api.documents import (
    delete_named,
    deleted,
    load,
    only_kinds,
    submit_cluster_documents,
)
from gpuctl.server.api.errors import JSON, ApiProblem
from gpuctl.server.api.models import DryRunQ, PoolBody, PoolName, dry_run_mode
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service.pools import PoolUsage, describe_pool, list_pools
from gpuctl.spec import Document

router = APIRouter(prefix="/api/v1/pools", tags=["pools"])
Me = Annotated[Caller, Depends(current_caller)]


def pool_item(p: PoolUsage) -> dict:
    """A row of `gpuctl get pools -o json` in the earlier API's keys (gpuTotal, gpuType...)."""
    return {
        "name": p.name,
        "description": p.description,
        "status": p.status,
        "gpuTotal": p.capacity,
        "gpuUsed": p.taken,
        "gpuFree": p.free,
        "gpuReserved": p.reserved,
        "gpuQueued": p.queued,
        "gpuQueuedNamespaces": p.queued_namespaces,
        "gpuType": p.gpu_types,
        "nodes": p.nodes,
        "nodeCount": len(p.nodes),
        # docs/sharing.md, What gpuctl shows: none | mig-mixed | mig-single | time-slicing | mps
        "sharing": p.sharing,
        "gpuShared": p.shared,
        "slices": p.slices,
    }


@router.get("", responses=COMMON_ERRORS, summary="List pools (as `gpuctl get pools`)")
async def get_pools(request: Request, caller: Me) -> JSON:
    await require(request, caller, perms.pools("list"))
    pools = await run(list_pools, state(request).reader(), permissions(request, caller))
    return JSON([pool_item(p) for p in pools])


@router.get(
    "/{poolName}", responses=COMMON_ERRORS, summary="Describe a pool (as `gpuctl describe pool -o json`)"
)
async def get_pool(request: Request, caller: Me, poolName: PoolName) -> JSON:
    await require(request, caller, perms.pools("get", poolName))
    return JSON(await run(describe_pool, state(request).cluster(), poolName, permissions(request, caller)))


def _document(body: PoolBody, name: str) -> str:
    """The earlier API's JSON as a `kind: pool` YAML document."""
    types = body.gpuType
    if isinstance(types, list):
        if len(types) == 1:
            types = types[0]
        elif len(types) != len(body.nodes):
            raise ApiProblem(
                400, "gpuType: give one type for all nodes, or one per node in the order of nodes"
            )
    per_node = types if isinstance(types, list) else [types] * len(body.nodes)
    doc = {
        "kind": "pool",
        "pool": {"name": name, **({"description": body.description} if body.description else {})},
        "nodes": {n: ({"gpu-type": t} if t else {}) for n, t in zip(body.nodes, per_node, strict=True)},
    }
    return yaml.safe_dump(doc, sort_keys=False)


async def _docs(request: Request, body: PoolBody, name: str | None) -> list[Document]:
    if body.yamlContent is None and not (name or body.name):
        raise ApiProblem(400, "give the pool as `name` (with `nodes`) or as `yamlContent`")
    text = body.yamlContent if body.yamlContent is not None else _document(body, name or body.name or "")
    docs = await run(load, text, state(request).spec_config)
    only_kinds(docs, [Kind.POOL], "/api/v1/pools")
    if name is not None and [d.spec.pool.name for d in docs] != [name]:
        raise ApiProblem(400, f"PUT /api/v1/pools/{name} takes one pool document named {name}")
    return docs


async def _write(request: Request, caller: Caller, body: PoolBody, name: str | None, action: str) -> JSON:
    docs = await _docs(request, body, name)
    verb = "create" if action == "create" else "update"
    await require(request, caller, *[perms.pools(verb, d.spec.pool.name) for d in docs], perms.nodes("patch"))
    return await submit_cluster_documents(request, docs, body.dryRun, action)


@router.post("", status_code=201, responses=COMMON_ERRORS, summary="Create a pool (admins)")
async def create_pool(request: Request, caller: Me, body: PoolBody) -> JSON:
    return await _write(request, caller, body, None, "create")


@router.put("/{poolName}", responses=COMMON_ERRORS, summary="Change a pool's nodes or description (admins)")
async def update_pool(request: Request, caller: Me, poolName: PoolName, body: PoolBody) -> JSON:
    return await _write(request, caller, body, poolName, "apply")


@router.delete(
    "/{poolName}",
    responses=COMMON_ERRORS,
    summary="Delete a pool no job uses, or with keepRunning=true one whose jobs keep running (admins)",
)
async def remove_pool(
    request: Request,
    caller: Me,
    poolName: PoolName,
    dryRun: DryRunQ = False,
    keepRunning: bool = False,
) -> JSON:
    mode = dry_run_mode(dryRun)
    await require(request, caller, perms.pools("delete", poolName), perms.nodes("patch"))
    results = await delete_named(request, "pool", poolName, mode, namespace=None, keep_running=keepRunning)
    return deleted(poolName, mode, results)
