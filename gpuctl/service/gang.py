"""Multi-node jobs (issue 31, docs/distributed.md): the gang's part of `describe job` (size, ranks ->
pods -> nodes -> topology domains), read for one job."""

from __future__ import annotations

from typing import Any

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.domain.gang import (
    gang_nodes,
    gang_pods,
    gang_text,
    group_size,
    pool_topology,
    rank_rows,
    replica_rows,
    replicas_text,
)
from gpuctl.domain.gpus import pod_spec_gpus
from gpuctl.domain.objects import pod_template


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


def replicas_view(obj: dict, workloads: list[dict], pods: list[dict]) -> dict[str, Any] | None:
    """None unless the job is a service of multi-node replicas (a LeaderWorkerSet); else {replicas,
    nodes, gpus_per_node, text ("2 replicas x 2 nodes x 8 GPUs = 32 GPUs"), groups}."""
    size = group_size(obj)
    if size == 1:
        return None
    replicas = int((obj.get("spec") or {}).get("replicas", 1))
    per_node = pod_spec_gpus(pod_template(obj).get("spec") or {})
    return {
        "replicas": replicas,
        "nodes": size,
        "gpus_per_node": per_node,
        "text": replicas_text(replicas, size, per_node),
        "groups": replica_rows(workloads, pods),
    }
