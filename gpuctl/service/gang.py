"""Multi-node jobs (issue 31, docs/distributed.md): the gang's part of `describe job` (size, ranks ->
pods -> nodes -> topology domains), read for one job."""

from __future__ import annotations

from typing import Any

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.domain.gang import gang_nodes, gang_pods, gang_text, pool_topology, rank_rows
from gpuctl.domain.gpus import pod_spec_gpus


def gang_view(cluster: Cluster, obj: dict, pods: list[dict], pool: str | None) -> dict[str, Any] | None:
    """None for a job of one pod; else {nodes, gpus_per_node, text, topology, ranks}. The pool's levels and
    the pods' nodes are read when the caller may (a team member may not read nodes: domains show "-")."""
    nodes = gang_nodes(obj)
    if nodes == 1:
        return None
    per_node = pod_spec_gpus(obj["spec"]["template"].get("spec") or {})
    levels: tuple[str, ...] = ()
    node_objs: dict[str, dict] = {}
    try:
        if pool:
            levels = pool_topology(cluster.get_or_none(path("ResourceFlavor", pool)))
        for name in sorted({(p.get("spec") or {}).get("nodeName") for p in pods} - {None}):
            node = cluster.get_or_none(path("Node", name))
            if node is not None:
                node_objs[name] = node
    except ApiError as e:
        if e.status not in (401, 403):
            raise
    return {
        "nodes": nodes,
        "gpus_per_node": per_node,
        "text": gang_text(nodes, per_node),
        "topology": list(levels),
        "ranks": rank_rows(gang_pods(obj, pods) or pods, node_objs, levels),
    }
