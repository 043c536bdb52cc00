"""A pool's numbers (capacity, Kueue reservations, queued GPUs), for `get pools`, `describe pool` and
the API's pools.

A pool's used GPUs are what Kueue reserved there (the ClusterQueues' status.flavorsReservation, one
small list of ClusterQueues that pool viewers may read); free = capacity - used
(gpuctl.domain.pools.gpus_taken / gpus_free). No view reads every pod of the cluster for it: a team
member may not, and it was the slow read of `get pools`. Pod use (`used`, shown as GPU Allocated) is
read only for `describe pool` by a caller who may list every pod, and only shown."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpuctl.constants import SLICES_USED_ANNOTATION, Labels
from gpuctl.domain.gpus import gpu_requests_by_pool, pod_gpus, pod_holds_gpus, workload_gpus
from gpuctl.domain.objects import annotations, name
from gpuctl.domain.pools import gpus_free, gpus_taken, pool_facts, pools_sharing
from gpuctl.domain.sharing import Mode, describe_pool_sharing, slice_view, slices_used
from gpuctl.domain.teams import pool_reservations
from gpuctl.domain.workload import job_pool
from gpuctl.service.inventory import Inventory


@dataclass
class PoolUsage:
    name: str
    capacity: int = 0  # GPUs of Ready nodes
    total: int = 0  # GPUs of all nodes (capacity field), Ready or not
    used: int | None = None  # GPUs requested by pods bound to the pool's nodes; None: not read
    reserved: int = 0  # GPUs Kueue reserved for admitted workloads in this pool
    queued: int = 0  # GPUs requested by workloads waiting for this pool (of queued_namespaces)
    queued_namespaces: list[str] | None = None  # whose waiting work `queued` counts; None: everyone's
    nodes: list[str] = field(default_factory=list)
    nodes_ready: int = 0
    gpu_types: list[str] = field(default_factory=list)
    description: str = ""
    status: str = "active"
    # A pool in worker clusters (docs/multicluster.md): per cluster, its GPUs there (gpu_total, gpu_used by
    # that worker's Kueue, gpu_free, nodes) or the error that kept gpuctl from reading them.
    clusters: dict[str, dict] = field(default_factory=dict)
    # docs/sharing.md, "What gpuctl shows": how the Ready nodes share their GPUs (none, mig-mixed, mig-single,
    # time-slicing, mps), one line for people ("6 GPUs + 2 as 14 x 1g.10gb") and per slice kind its
    # resource, total and (with pod use) used and free (gpuctl.domain.sharing.slice_view).
    sharing: str = "none"
    shared: str = ""
    slices: dict[str, dict] = field(default_factory=dict)

    @property
    def taken(self) -> int:
        """Kueue's count (the same for every caller and every view; pod use is only shown)."""
        return int(gpus_taken(None, self.reserved))

    @property
    def free(self) -> int:
        return int(gpus_free(self.capacity, None, self.reserved))

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(
            gpu_total=self.capacity,
            gpu_used=self.taken,  # the same figure as `get pools`' GPU USED and the API's gpuUsed
            gpu_allocated=self.used,
            gpu_free=self.free,
            gpu_reserved=self.reserved,
            gpu_queued=self.queued,
        )
        return d


def pool_usage(inv: Inventory, *, with_pods: bool = False) -> dict[str, PoolUsage]:
    """Per pool: its facts (gpuctl.domain.pools.pool_facts: capacity of Ready nodes, nodes, GPU types,
    status, and Kueue's reservations from the ClusterQueues' status), queued GPUs (the waiting Workloads
    the caller may read) and, with_pods, what bound pods hold (one more list of every unfinished pod:
    only for a caller who may). No list of every Workload unless many wait (Inventory.waiting_workloads)."""
    pools = list(inv.pools)
    facts = pool_facts(inv.nodes, pools, reserved=pool_reservations(inv.all_cluster_queues))
    descr = {name(f): annotations(f).get(Labels.DESCRIPTION, "") for f in inv.flavors}
    out = {
        p: PoolUsage(
            name=p,
            capacity=facts[p].allocatable_gpus,
            total=facts[p].capacity_gpus,
            reserved=int(facts[p].reserved_gpus),
            nodes=list(facts[p].nodes),
            nodes_ready=facts[p].nodes_ready,
            gpu_types=list(facts[p].gpu_types),
            description=descr.get(p, ""),
            status=facts[p].status,
        )
        for p in pools
    }
    # Slices in use: counted from every pod by a caller who may list them, else as gpuctl serve counted
    # them (the pool flavor's SLICES_USED_ANNOTATION; docs/sharing.md), else unknown (totals only).
    held: dict[str, dict[str, int] | None] = {
        name(f): slices_used(annotations(f).get(SLICES_USED_ANNOTATION)) for f in inv.flavors
    }
    if with_pods:
        node_to_pool = {n: p for p in pools for n in facts[p].nodes}
        held = {p: {} for p in pools} | gpu_requests_by_pool(inv.bound_pods, node_to_pool)
        for u in out.values():
            u.used = 0
        for pod in inv.bound_pods:
            p = node_to_pool.get((pod.get("spec") or {}).get("nodeName") or "")
            if p and pod_holds_gpus(pod):
                out[p].used = (out[p].used or 0) + pod_gpus(pod)
    sharing = pools_sharing(inv.nodes)
    for p, u in out.items():
        ps = sharing.get(p)
        if ps is not None and ps.mode is not Mode.NONE:
            u.sharing, u.shared = str(ps.mode), describe_pool_sharing(ps)
            u.slices = slice_view(ps, held.get(p))
    for wl in inv.waiting_workloads:
        p = job_pool(wl)
        if p in out:
            out[p].queued += workload_gpus(wl)
    spaces = inv.waiting_namespaces
    for u in out.values():
        u.queued_namespaces = spaces
    return out
