"""Nodes: listing with GPU use, and kubectl-style labelling that keeps pool capacity in sync.

Node objects (capacity, pool, status) are what pool viewers read. Per-node GPU use is summed from the
pods bound there, so it is shown only to a caller who may list every pod; anyone else sees it as
unknown (None: `-` in tables) rather than a guess, and `describe node` lists the pods it may read.
"""

from __future__ import annotations

import re

from gpuctl.cluster import Cluster, path
from gpuctl.constants import Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gpus import pod_gpus, pod_holds_gpus
from gpuctl.domain.objects import identity
from gpuctl.domain.pools import node_gpu_type, node_gpus, node_pool, node_ready
from gpuctl.service.access import Permissions, permissions_of
from gpuctl.service.errors import Conflict, NotFound, ServiceError, require
from gpuctl.service.inventory import UNFINISHED, Inventory
from gpuctl.service.node_pools import patch_node_pool
from gpuctl.service.pool_sync import sync_cohort, sync_flavors


def gpus_by_node(pods: list[dict]) -> dict[str, int]:
    """GPUs held by bound, unfinished pods, per node."""
    used: dict[str, int] = {}
    for pod in pods:
        if pod_holds_gpus(pod):
            node = pod["spec"]["nodeName"]
            used[node] = used.get(node, 0) + pod_gpus(pod)
    return used


def _internal_ip(node: dict) -> str:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP":
            return a.get("address", "")
    return ""


def node_row(node: dict, used: int | None) -> dict:
    """A node's row; used None: the caller may not read every pod, so its GPU use is unknown."""
    total = node_gpus(node, "capacity")
    return {
        "name": node["metadata"]["name"],
        "status": "active" if node_ready(node) else "not_ready",
        "gpu_total": total,
        "gpu_used": used,
        "gpu_free": None if used is None else max(node_gpus(node) - used, 0),
        "gpu_type": node_gpu_type(node),
        "ip": _internal_ip(node),
        "pool": node_pool(node) or "",
    }


def list_nodes(
    cluster: Cluster,
    *,
    pool: str | None = None,
    gpu_type: str | None = None,
    perms: Permissions | None = None,
    metadata: bool = False,
) -> list[dict]:
    """`get nodes`' rows; metadata=True adds each node's uid, creationTimestamp and labels (`metadata`:
    gpuctl.domain.objects.identity), what `get nodes -o json` prints."""
    inv = Inventory(cluster, perms=perms)
    used = gpus_by_node(inv.bound_pods) if inv.sees_every_pod else None
    rows = [node_row(n, None if used is None else used.get(n["metadata"]["name"], 0)) for n in inv.nodes]
    if metadata:
        for r, n in zip(rows, inv.nodes, strict=True):
            r["metadata"] = identity(n)
    if pool:
        rows = [r for r in rows if r["pool"] == pool]
    if gpu_type:
        rows = [r for r in rows if r["gpu_type"] == gpu_type]
    return sorted(rows, key=lambda r: r["name"])


def get_node(cluster: Cluster, name: str) -> dict:
    node = cluster.get_or_none(path("Node", name))
    if node is None:
        raise NotFound(f"node {name} not found", resource="nodes", name=name)
    return node


def describe_node(cluster: Cluster, name: str, perms: Permissions | None = None) -> dict:
    """The node, its GPU use and the jobs' pods on it: every pod's for a caller who may list them all,
    else only those of the namespaces it may read (`pods_namespaces`) and no GPU use."""
    node = get_node(cluster, name)
    inv = Inventory(cluster, perms=perms)
    on_node = f"spec.nodeName={name},{UNFINISHED}"
    spaces = None if inv.sees_every_pod else inv.readable_namespaces("pods")
    if spaces is None:
        pods = cluster.list(path("Pod"), field_selector=on_node)
    else:
        pods = [p for ns in spaces for p in cluster.list(path("Pod", namespace=ns), field_selector=on_node)]
    row = node_row(node, gpus_by_node(pods).get(name, 0) if spaces is None else None)
    st = node.get("status") or {}
    row.update(
        labels=node["metadata"].get("labels") or {},
        capacity=st.get("capacity") or {},
        allocatable=st.get("allocatable") or {},
        conditions=[
            {"type": c["type"], "status": c["status"], "reason": c.get("reason", "")}
            for c in st.get("conditions") or []
        ],
        taints=(node.get("spec") or {}).get("taints") or [],
        pods_namespaces=spaces,
        jobs=[
            {
                "pod": p["metadata"]["name"],
                "namespace": p["metadata"]["namespace"],
                "job": (p["metadata"].get("labels") or {}).get(Labels.APP)
                or (p["metadata"].get("labels") or {}).get(Labels.JOB_NAME, ""),
                "kind": (p["metadata"].get("labels") or {}).get(Labels.JOB_TYPE, ""),
            }
            for p in pods
        ],
    )
    return row


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def normalize_key(key: str) -> str:
    """`pool` -> runwhere.ai/pool; `gpuType` -> runwhere.ai/gpu-type; prefixed keys stay as they are."""
    if "/" in key:
        return key
    return Labels.PREFIX + _CAMEL.sub("-", key).lower()


def parse_label_args(args: list[str], deletes: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """`[node] NODE... KEY=VALUE... KEY-` -> (nodes, {key: value or None to remove})."""
    items = list(args)
    if items and items[0] in ("node", "nodes", "no"):
        items = items[1:]
    nodes, changes = [], {}
    for a in items:
        if "=" in a:
            k, v = a.split("=", 1)
            changes[normalize_key(k)] = v
        elif a.endswith("-") and len(a) > 1 and (changes or nodes):
            changes[normalize_key(a[:-1])] = None
        else:
            if changes:
                raise ServiceError(f"unexpected {a!r} after labels: give nodes first, then KEY=VALUE")
            nodes.append(a)
    for k in deletes:
        changes[normalize_key(k)] = None
    if not nodes:
        raise ServiceError("no node given: gpuctl label node NODE KEY=VALUE")
    if not changes:
        raise ServiceError("no label given: gpuctl label node NODE KEY=VALUE (or KEY- to remove)")
    return nodes, changes


def label_nodes(
    cluster: Cluster,
    nodes: list[str],
    changes: dict[str, str | None],
    *,
    overwrite: bool,
    dry_run: DryRun = DryRun.NONE,
    perms: Permissions | None = None,
) -> list[str]:
    """kubectl label semantics; a pool label must name an existing pool, and capacity follows.

    CLIENT: the checks and the lines, no write; SERVER: the patches with dryRun=All. A caller who may
    not patch nodes is told the role first (gpuctl-admin)."""
    dry_run = DryRun(dry_run)
    if dry_run is not DryRun.CLIENT:
        require(permissions_of(cluster, perms), "patch", "nodes")
    inv = Inventory(cluster)
    objs = {}
    for n in nodes:
        objs[n] = get_node(cluster, n)
    if changes.get(Labels.POOL) and changes[Labels.POOL] not in inv.pools:
        raise NotFound(f"pool {changes[Labels.POOL]} does not exist; create it first (kind: pool)")
    for n, obj in objs.items():
        labels = obj["metadata"].get("labels") or {}
        for k, v in changes.items():
            if v is not None and k in labels and labels[k] != v and not overwrite:
                raise Conflict(f"node {n} already has {k}={labels[k]}; pass --overwrite to change it")
    lines = []
    for n in nodes:
        # The pool taint follows the pool label in the same patch (gpuctl.service.node_pools.patch_node_pool):
        # a node put into a pool takes only Kueue-admitted work from then on; one taken out is untainted.
        taint = None
        if Labels.POOL in changes:
            taint = patch_node_pool(cluster, objs[n], changes, dry_run=dry_run)
        elif dry_run.writes:
            cluster.merge_patch(
                path("Node", n), {"metadata": {"labels": changes}}, dry_run=dry_run is DryRun.SERVER
            )
        for k, v in changes.items():
            lines.append(f"node/{n} {'labeled ' + k + '=' + v if v is not None else 'unlabeled ' + k}")
        if taint:
            lines.append(f"node/{n} {taint}")
    if dry_run.persists and Labels.POOL in changes:
        after = Inventory(cluster)  # one read of the relabelled nodes for both
        sync_cohort(cluster, inv=after)
        sync_flavors(cluster, inv=after)
    return lines


def node_labels(cluster: Cluster, node: str | None, key: str | None) -> list[dict]:
    nodes = [get_node(cluster, node)] if node else Inventory(cluster).nodes
    out = []
    for n in nodes:
        labels = n["metadata"].get("labels") or {}
        if key:
            k = normalize_key(key)
            sel = {k: labels[k]} if k in labels else {}
        else:
            sel = {k: v for k, v in labels.items() if k.startswith(Labels.PREFIX)}
        out.append({"node": n["metadata"]["name"], "labels": sel})
    if node and key and not out[0]["labels"]:
        raise NotFound(f"label {normalize_key(key)} not found on node {node}")
    return out
