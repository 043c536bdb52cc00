"""/api/v1/nodes and /api/v1/labels: node listing and kubectl-style labelling (gpuctl.service.nodes).

Reading nodes needs `list`/`get nodes`, labelling `patch nodes` (cluster-scoped: admins). Putting a
node into or out of a pool also changes the pool's capacity, so it needs `update resourceflavors` as
well, like any other pool change. Keys go through the CLI's normalize_key (`pool` is
runwhere.ai/pool), and the service's rules apply: kubectl's --overwrite semantics, and a pool label
must name an existing pool.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gpuctl.constants import Labels
from gpuctl.server.api import perms
from gpuctl.server.api.auth import Access, Caller
from gpuctl.server.api.deps import current_caller, permissions, require, run, state
from gpuctl.server.api.errors import JSON
from gpuctl.server.api.models import (
    DNS_LABEL,
    LABEL_KEY,
    BatchLabel,
    DryRun,
    DryRunQ,
    LabelBody,
    LabelKeyP,
    LabelValueBody,
    NodeName,
    NodePool,
    Page,
    PageSize,
    PoolName,
    dry_run_mode,
    paged,
)
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service.errors import NotFound
from gpuctl.service.nodes import describe_node, label_nodes, list_nodes, node_labels, normalize_key

router = APIRouter(tags=["nodes"])
Me = Annotated[Caller, Depends(current_caller)]


def node_item(r: dict) -> dict:
    """A row of `gpuctl get nodes -o json` in the earlier API's keys."""
    return {
        "nodeName": r["name"],
        "status": r["status"],
        "gpuTotal": r["gpu_total"],
        "gpuUsed": r["gpu_used"],
        "gpuFree": r["gpu_free"],
        "gpuType": r["gpu_type"],
        "ip": r["ip"],
        "pool": r["pool"],
        "boundPools": [r["pool"]] if r["pool"] else [],
    }


def _label_accesses(changes: dict[str, str | None], nodes: list[str]) -> list[Access]:
    needs = [perms.nodes("patch", n) for n in nodes]
    if Labels.POOL in changes:
        needs.append(perms.pools("update"))
    return needs


async def _label(
    request: Request,
    caller: Caller,
    nodes: list[str],
    changes: dict[str, str | None],
    *,
    overwrite: bool,
    dry_run: DryRun,
) -> list[str]:
    """label_nodes; client: its checks (reads only) and lines, server: the patches with dryRun=All."""
    await require(request, caller, *_label_accesses(changes, nodes))
    lines = await run(
        label_nodes,
        state(request).cluster(),
        nodes,
        changes,
        overwrite=overwrite,
        dry_run=dry_run,
    )
    return [line + dry_run.suffix() for line in lines]


# ----------------------------------------------------------------------------- listing (static paths first)
@router.get(
    "/api/v1/nodes", responses=COMMON_ERRORS, summary="List nodes with their GPUs (as `gpuctl get nodes`)"
)
async def get_nodes(
    request: Request,
    caller: Me,
    pool: Annotated[str | None, Query(max_length=63, pattern=DNS_LABEL)] = None,
    gpu_type: Annotated[str | None, Query(alias="gpuType", max_length=63)] = None,
    page: Page = 1,
    page_size: PageSize = 20,
) -> JSON:
    await require(request, caller, perms.nodes("list"))
    rows = await run(
        list_nodes, state(request).reader(), pool=pool, gpu_type=gpu_type, perms=permissions(request, caller)
    )
    return JSON(paged([node_item(r) for r in rows], page, page_size))


@router.get(
    "/api/v1/nodes/labels", responses=COMMON_ERRORS, summary="Nodes carrying a label key, with its value"
)
async def nodes_with_label(
    request: Request,
    caller: Me,
    key: Annotated[str, Query(max_length=317, pattern=LABEL_KEY)],
    page: Page = 1,
    page_size: PageSize = 20,
) -> JSON:
    await require(request, caller, perms.nodes("list"))
    k = normalize_key(key)
    rows = await run(node_labels, state(request).cluster(), None, k)
    items = [
        {"nodeName": r["node"], "labelKey": k, "labelValue": r["labels"][k]} for r in rows if k in r["labels"]
    ]
    return JSON(paged(items, page, page_size))


@router.get("/api/v1/nodes/labels/all", responses=COMMON_ERRORS, summary="gpuctl's labels of every node")
async def all_node_labels(request: Request, caller: Me, page: Page = 1, page_size: PageSize = 20) -> JSON:
    await require(request, caller, perms.nodes("list"))
    rows = await run(node_labels, state(request).cluster(), None, None)
    items = [
        {
            "nodeName": r["node"],
            "labels": r["labels"],
            "boundPools": [r["labels"][Labels.POOL]] if Labels.POOL in r["labels"] else [],
        }
        for r in rows
    ]
    return JSON(paged(items, page, page_size))


@router.post(
    "/api/v1/nodes/labels/batch", responses=COMMON_ERRORS, summary="Label several nodes at once (all or none)"
)
async def label_batch(request: Request, caller: Me, body: BatchLabel) -> JSON:
    key = normalize_key(body.key)
    nodes = list(dict.fromkeys(body.nodeNames))
    lines = await _label(
        request, caller, nodes, {key: body.value}, overwrite=body.overwrite, dry_run=dry_run_mode(body.dryRun)
    )
    return JSON({"success": nodes, "failed": [], "message": "; ".join(lines)})


@router.get(
    "/api/v1/labels", responses=COMMON_ERRORS, summary="Every gpuctl label key on the nodes, with its values"
)
async def label_values(request: Request, caller: Me) -> JSON:
    await require(request, caller, perms.nodes("list"))
    rows = await run(node_labels, state(request).cluster(), None, None)
    values: dict[str, set[str]] = {}
    for r in rows:
        for k, v in r["labels"].items():
            values.setdefault(k, set()).add(v)
    return JSON({k: sorted(v) for k, v in sorted(values.items())})


# ----------------------------------------------------------------------------- one node
@router.get(
    "/api/v1/nodes/{nodeName}",
    responses=COMMON_ERRORS,
    summary="Describe a node (as `gpuctl describe node -o json`)",
)
async def get_node(request: Request, caller: Me, nodeName: NodeName) -> JSON:
    await require(request, caller, perms.nodes("get", nodeName))
    return JSON(await run(describe_node, state(request).cluster(), nodeName, permissions(request, caller)))


@router.post(
    "/api/v1/nodes/{nodeName}/pools", responses=COMMON_ERRORS, summary="Put a node into a pool (admins)"
)
async def add_to_pool(request: Request, caller: Me, nodeName: NodeName, body: NodePool) -> JSON:
    lines = await _label(
        request,
        caller,
        [nodeName],
        {Labels.POOL: body.pool},
        overwrite=body.overwrite,
        dry_run=dry_run_mode(body.dryRun),
    )
    return JSON({"node": nodeName, "pool": body.pool, "message": "; ".join(lines)})


@router.delete(
    "/api/v1/nodes/{nodeName}/pools/{poolName}",
    responses=COMMON_ERRORS,
    summary="Take a node out of its pool (admins)",
)
async def remove_from_pool(
    request: Request,
    caller: Me,
    nodeName: NodeName,
    poolName: PoolName,
    dryRun: DryRunQ = False,
) -> JSON:
    await require(request, caller, perms.nodes("get", nodeName))
    rows = await run(node_labels, state(request).cluster(), nodeName, None)
    if rows[0]["labels"].get(Labels.POOL) != poolName:
        raise NotFound(f"node {nodeName} is not in pool {poolName}")
    # The GPU type label goes with the pool (as when `apply` drops a node from a pool).
    lines = await _label(
        request,
        caller,
        [nodeName],
        {Labels.POOL: None, Labels.GPU_TYPE: None},
        overwrite=True,
        dry_run=dry_run_mode(dryRun),
    )
    return JSON({"node": nodeName, "pool": poolName, "message": "; ".join(lines)})


@router.get("/api/v1/nodes/{nodeName}/labels", responses=COMMON_ERRORS, summary="gpuctl's labels of a node")
async def get_node_labels(request: Request, caller: Me, nodeName: NodeName) -> JSON:
    await require(request, caller, perms.nodes("get", nodeName))
    rows = await run(node_labels, state(request).cluster(), nodeName, None)
    return JSON({"nodeName": nodeName, "labels": rows[0]["labels"]})


@router.post("/api/v1/nodes/{nodeName}/labels", responses=COMMON_ERRORS, summary="Set a label on a node")
async def set_node_label(request: Request, caller: Me, nodeName: NodeName, body: LabelBody) -> JSON:
    key = normalize_key(body.key)
    lines = await _label(
        request,
        caller,
        [nodeName],
        {key: body.value},
        overwrite=body.overwrite,
        dry_run=dry_run_mode(body.dryRun),
    )
    return JSON({"nodeName": nodeName, "label": {key: body.value}, "message": "; ".join(lines)})


@router.get(
    "/api/v1/nodes/{nodeName}/labels/{key:path}", responses=COMMON_ERRORS, summary="One label of a node"
)
async def get_node_label(request: Request, caller: Me, nodeName: NodeName, key: LabelKeyP) -> JSON:
    await require(request, caller, perms.nodes("get", nodeName))
    rows = await run(node_labels, state(request).cluster(), nodeName, key)
    k, v = next(iter(rows[0]["labels"].items()))
    return JSON({"nodeName": nodeName, "label": {"key": k, "value": v}})


@router.put(
    "/api/v1/nodes/{nodeName}/labels/{key:path}", responses=COMMON_ERRORS, summary="Set or change a label"
)
async def put_node_label(
    request: Request, caller: Me, nodeName: NodeName, key: LabelKeyP, body: LabelValueBody
) -> JSON:
    k = normalize_key(key)
    lines = await _label(
        request, caller, [nodeName], {k: body.value}, overwrite=True, dry_run=dry_run_mode(body.dryRun)
    )
    return JSON({"nodeName": nodeName, "label": {k: body.value}, "message": "; ".join(lines)})


@router.delete(
    "/api/v1/nodes/{nodeName}/labels/{key:path}", responses=COMMON_ERRORS, summary="Remove a label"
)
async def delete_node_label(
    request: Request,
    caller: Me,
    nodeName: NodeName,
    key: LabelKeyP,
    dryRun: DryRunQ = False,
) -> JSON:
    k = normalize_key(key)
    await require(request, caller, perms.nodes("get", nodeName))
    await run(node_labels, state(request).cluster(), nodeName, k)  # 404 when the node lacks it
    lines = await _label(request, caller, [nodeName], {k: None}, overwrite=True, dry_run=dry_run_mode(dryRun))
    return JSON({"nodeName": nodeName, "label": k, "message": "; ".join(lines)})
