"""A pool's numbers (capacity, Kueue reservations, queued GPUs), for `get pools`, `describe pool` and
the API's pools.

A pool's used GPUs are what Kueue reserved there (the ClusterQueues' status.flavorsReservation, one
small list of ClusterQueues that pool viewers may read); free = capacity - used
(gpuctl.domain.pools.gpus_taken / gpus_free). No view reads every pod of the cluster for it: a team
member may not, and it was the slow read of `get pools`. Pod use (`used`, shown as GPU Allocated) is
read only for `describe pool` by a caller who may list every pod, and only shown."""

from __future__ import annotations

from copy import deepcopy

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import SLICES_USED_ANNOTATION, Labels
from gpuctl.domain.gpus import gpu_requests_by_pool, pod_gpus, pod_holds_gpus, workload_gpus
from gpuctl.domain.multicluster import remote_pools
from gpuctl.domain.objects import annotations, identity, name
from gpuctl.domain.pools import gpus_free, gpus_taken, pool_facts, pools_sharing
from gpuctl.domain.sharing import Mode, describe_pool_sharing, slice_view, slices_used
from gpuctl.domain.teams import pool_reservations
from gpuctl.domain.workload import job_pool
from gpuctl.service.access import Permissions
from gpuctl.service.errors import ServiceError
from gpuctl.service.inventory import Inventory
from gpuctl.service.members import worker

POOL_FIELDS = (
    "name",
    "capacity",
    "total",
    "used",
    "reserved",
    "queued",
    "queued_namespaces",
    "nodes",
    "nodes_ready",
    "gpu_types",
    "description",
    "status",
    "clusters",
    "sharing",
    "shared",
    "slices",
)


class PoolUsage:
    """A pool's numbers. (A plain class: a dataclass compiles its generated methods when the module
    loads, and every `get pools` loads this one.) as_dict: the fields in POOL_FIELDS' order, then the
    gpu_* figures."""

    __slots__ = (*POOL_FIELDS, "meta")

    def __init__(
        self,
        name: str,
        capacity: int = 0,
        total: int = 0,
        used: int | None = None,
        reserved: int = 0,
        queued: int = 0,
        queued_namespaces: list[str] | None = None,
        nodes: list[str] | None = None,
        nodes_ready: int = 0,
        gpu_types: list[str] | None = None,
        description: str = "",
        status: str = "active",
        clusters: dict[str, dict] | None = None,
        sharing: str = "none",
        shared: str = "",
        slices: dict[str, dict] | None = None,
    ):
        self.name = name
        self.capacity = capacity  # GPUs of Ready nodes
        self.total = total  # GPUs of all nodes (capacity field), Ready or not
        self.used = used  # GPUs requested by pods bound to the pool's nodes; None: not read
        self.reserved = reserved  # GPUs Kueue reserved for admitted workloads in this pool
        self.queued = queued  # GPUs requested by workloads waiting for this pool (of queued_namespaces)
        self.queued_namespaces = queued_namespaces  # whose waiting work `queued` counts; None: everyone's
        self.nodes: list[str] = nodes if nodes is not None else []
        self.nodes_ready = nodes_ready
        self.gpu_types: list[str] = gpu_types if gpu_types is not None else []
        self.description = description
        self.status = status
        # A pool in worker clusters (docs/multicluster.md): per cluster, its GPUs there (gpu_total,
        # gpu_used by that worker's Kueue, gpu_free, nodes) or the error that kept gpuctl from reading them.
        self.clusters: dict[str, dict] = clusters if clusters is not None else {}
        # docs/sharing.md, "What gpuctl shows": how the Ready nodes share their GPUs (none, mig-mixed,
        # mig-single, time-slicing, mps), one line for people ("6 GPUs + 2 as 14 x 1g.10gb") and per
        # slice kind its resource, total and (with pod use) used and free (gpuctl.domain.sharing.slice_view).
        self.sharing = sharing
        self.shared = shared
        self.slices: dict[str, dict] = slices if slices is not None else {}
        # Its ResourceFlavor's uid, creationTimestamp and labels (gpuctl.domain.objects.identity): what
        # `get pools -o json` prints as the pool's metadata; not in as_dict (the API's shape).
        self.meta: dict = {}

    @property
    def taken(self) -> int:
        """Kueue's count (the same for every caller and every view; pod use is only shown)."""
        return int(gpus_taken(None, self.reserved))

    @property
    def free(self) -> int:
        return int(gpus_free(self.capacity, None, self.reserved))

    def as_dict(self) -> dict:
        d = {k: deepcopy(getattr(self, k)) for k in POOL_FIELDS}  # what dataclasses.asdict gave
        d.update(
            gpu_total=self.capacity,
            gpu_used=self.taken,  # the same figure as `get pools`' GPU USED and the API's gpuUsed
            gpu_allocated=self.used,
            gpu_free=self.free,
            gpu_reserved=self.reserved,
            gpu_queued=self.queued,
        )
        return d


def pool_usage(inv: Inventory, *, with_pods: bool = False, queued: bool = True) -> dict[str, PoolUsage]:
    """Per pool: its facts (gpuctl.domain.pools.pool_facts: capacity of Ready nodes, nodes, GPU types,
    status, and Kueue's reservations from the ClusterQueues' status), queued GPUs (the waiting Workloads
    the caller may read) and, with_pods, what bound pods hold (one more list of every unfinished pod:
    only for a caller who may). No list of every Workload unless many wait (Inventory.waiting_workloads).
    queued=False leaves `queued` at 0 and reads no waiting Workload (no access review, no visibility
    request): for a view that does not show it (the plain `get pools` table)."""
    pools = list(inv.pools)
    facts = pool_facts(inv.nodes, pools, reserved=pool_reservations(inv.all_cluster_queues))
    descr = {name(f): annotations(f).get(Labels.DESCRIPTION, "") for f in inv.flavors}
    ids = {name(f): identity(f) for f in inv.flavors}
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
    for p, u in out.items():
        u.meta = ids.get(p) or {}
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
    if not queued:
        return out
    for wl in inv.waiting_workloads:
        p = job_pool(wl)
        if p in out:
            out[p].queued += workload_gpus(wl)
    spaces = inv.waiting_namespaces
    for u in out.values():
        u.queued_namespaces = spaces
    return out


def list_pools(
    cluster: Cluster, perms: Permissions | None = None, inv: Inventory | None = None, *, queued: bool = True
) -> list[PoolUsage]:
    """`get pools`: nodes, flavors and ClusterQueues (what pool viewers read), and the waiting
    Workloads the caller may read (unless not `queued`); no pod. `inv`: the caller's cluster-wide
    inventory, when it has one."""
    usage = pool_usage(inv or Inventory(cluster, None, perms=perms), queued=queued)
    return [usage[p] for p in sorted(usage)]


def list_pools_everywhere(
    cluster: Cluster, perms: Permissions | None = None, *, queued: bool = True
) -> list[PoolUsage]:
    """`get pools`: on a manager, a pool in worker clusters has their nodes' GPUs (capacity and nodes
    summed, and per cluster in `clusters`), read through the caller's context of each worker; what the
    manager's Kueue reserved there (the team quotas' view) stays its used GPUs. A worker gpuctl cannot
    read leaves its figures out and says why, the pool shows degraded. (The writes of MultiKueue pools
    are gpuctl.service.multicluster's: a read does not import them.)"""
    inv = Inventory(cluster, None, perms=perms)
    pools = list_pools(cluster, perms, inv, queued=queued)
    remote = remote_pools(inv.flavors)
    if not remote:
        return pools
    seen: dict[str, dict[str, PoolUsage] | str] = {}
    down = kueue_disconnected(cluster)
    for c in sorted({c for cs in remote.values() for c in cs}):
        try:
            seen[c] = pool_usage(Inventory(worker(cluster, c), None), queued=queued)
        except (ServiceError, ApiError, OSError) as e:
            seen[c] = str(e)
    for u in pools:
        for c in remote.get(u.name, []):
            there = seen[c]
            if isinstance(there, str):
                u.clusters[c] = {"error": there}
                continue
            w = there.get(u.name)
            if w is None:
                u.clusters[c] = {"error": f"pool {u.name} not found in cluster {c}"}
                continue
            u.capacity += w.capacity
            u.total += w.total
            u.nodes_ready += w.nodes_ready
            u.nodes += [f"{c}/{n}" for n in w.nodes]
            u.gpu_types += [t for t in w.gpu_types if t not in u.gpu_types]
            u.clusters[c] = {
                "gpu_total": w.capacity,
                "gpu_used": w.taken,
                "gpu_free": w.free,
                "nodes": len(w.nodes),
            }
            if c in down:  # its nodes are there, but no job reaches them
                u.clusters[c]["disconnected"] = f"the manager's Kueue cannot reach it: {down[c]}"
        if u.name in remote:
            unreadable = any("error" in v or "disconnected" in v for v in u.clusters.values())
            u.status = (
                "empty"
                if not u.nodes and not unreadable
                else "degraded"
                if unreadable or u.nodes_ready < len(u.nodes)
                else "active"
            )
    return pools


def kueue_disconnected(cluster: Cluster) -> dict[str, str]:
    """Worker -> why the manager's Kueue is not connected to it (its MultiKueueCluster's Active condition:
    an outage, a rotated or wrong credential). Empty for a caller who may not read MultiKueueClusters."""
    try:
        found = cluster.list(path("MultiKueueCluster"), label_selector=f"{Labels.MANAGED_BY}=gpuctl")
    except ApiError:
        return {}
    out = {}
    for m in found:
        cond = next(
            (c for c in (m.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None
        )
        if cond is not None and cond.get("status") != "True":
            out[m["metadata"]["name"]] = f"{cond.get('reason', '')}: {cond.get('message', '')}"
    return out
