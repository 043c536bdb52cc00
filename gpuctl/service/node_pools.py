"""A node's pool membership: its pool label and the pool taint (runwhere.ai/pool=<pool>:NoSchedule)
change together, in one merge patch. Joining a pool taints the node (only Kueue-admitted work, whose pods
get the pool flavor's toleration, lands there from then on; NoSchedule evicts nothing already running),
leaving it removes gpuctl's taint and no other. `spec.taints` is one list (a merge patch replaces it
whole), so a patch that changes it carries the resourceVersion it was computed from: a concurrent change
of the node (a cordon, the GPU operator's taint, a kubelet update) fails it with 409 and it is recomputed
on a fresh read instead of overwriting that change."""

from __future__ import annotations

from collections.abc import Mapping

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import POOL_TAINT_EFFECT, POOL_TAINT_KEY, Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.pools import node_pool, pool_node_taints

LEFT_POOL = {Labels.POOL: None, Labels.GPU_TYPE: None}  # a node's labels once it leaves its pool
NODE_PATCH_ATTEMPTS = 5


def _labels_after(node: Mapping, labels: Mapping[str, str | None]) -> dict[str, str]:
    merged = {**(node.get("metadata", {}).get("labels") or {}), **labels}
    return {k: v for k, v in merged.items() if v is not None}


def pool_taint_change(node: Mapping, labels: Mapping[str, str | None]) -> str | None:
    """What patching `labels` onto the node does to its pool taint, in kubectl's words, or None."""
    pool = _labels_after(node, labels).get(Labels.POOL)
    if pool_node_taints(node, pool) is None:
        return None
    if pool:
        return f"tainted {POOL_TAINT_KEY}={pool}:{POOL_TAINT_EFFECT}"
    return f"untainted {POOL_TAINT_KEY}:{POOL_TAINT_EFFECT}"


def patch_node_pool(
    cluster: Cluster, node: dict, labels: Mapping[str, str | None], *, dry_run: DryRun = DryRun.NONE
) -> str | None:
    """Merge-patch `labels` (None removes one) onto `node`, with the pool taint following the pool label
    the node ends up with. Returns pool_taint_change's text (None: the taints were already right).
    CLIENT writes nothing; SERVER sends the patch with dryRun=All."""
    dry_run = DryRun(dry_run)
    name = node["metadata"]["name"]
    for attempt in range(NODE_PATCH_ATTEMPTS):
        change = pool_taint_change(node, labels)
        if not dry_run.writes:
            return change
        taints = pool_node_taints(node, _labels_after(node, labels).get(Labels.POOL))
        meta: dict = {"labels": dict(labels)} if labels else {}
        patch: dict = {"metadata": meta}
        if taints is not None:
            if node["metadata"].get("resourceVersion"):
                meta["resourceVersion"] = node["metadata"]["resourceVersion"]
            patch["spec"] = {"taints": taints or None}
        elif not labels:
            return None
        try:
            cluster.merge_patch(path("Node", name), patch, dry_run=dry_run is DryRun.SERVER)
        except ApiError as e:
            if e.status != 409 or attempt == NODE_PATCH_ATTEMPTS - 1:
                raise
            node = cluster.get(path("Node", name))
            continue
        return change
    return None  # not reached: the last attempt returns or raises


def untaint_nodes(cluster: Cluster, names: list[str], *, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Remove the pool taint from nodes that are in no pool any more (only gpuctl's taint)."""
    lines = []
    for n in names:
        node = cluster.get_or_none(path("Node", n))
        if node is None or node_pool(node) is not None:
            continue
        if change := patch_node_pool(cluster, node, {}, dry_run=dry_run):
            lines.append(f"node/{n} {change} (in no pool)")
    return lines
