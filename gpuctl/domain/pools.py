"""What a pool is: a gpuctl ResourceFlavor (other than the budget flavor) and the nodes labelled
runwhere.ai/pool=<pool>. A pool's capacity is the allocatable GPUs, CPU and memory of its Ready,
schedulable nodes: a NotReady or cordoned node contributes nothing, since work Kueue admitted
against it could not run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from types import MappingProxyType
from typing import Any, NamedTuple

from gpuctl.constants import (
    BUDGET_FLAVOR,
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPU_TYPE_LABEL_KEYS,
    MAX_FLAVOR_TOLERATIONS,
    MEMORY_RESOURCE,
    POOL_TAINT_EFFECT,
    POOL_TAINT_KEY,
    TRANSIENT_TAINT_KEYS,
    TRANSIENT_TAINT_PREFIXES,
    Labels,
)
from gpuctl.domain.gpus import quantity_gpus
from gpuctl.domain.objects import condition, is_gpuctl_object, labels, name
from gpuctl.domain.sharing import PoolSharing, node_sharing, pool_sharing, slice_resource
from gpuctl.quantity import QuantityError, format_quantity, parse_quantity
from queues import pool_toleration, resource_flavor
from queues.model import PoolCapacity

# Where the GPU model of a node is read from, in order (gpuctl's key, its earlier spelling, then
# the NVIDIA GPU operator's feature-discovery labels).
GPU_TYPE_KEYS = (*GPU_TYPE_LABEL_KEYS, "nvidia.com/gpu.product", "nvidia.com/gpu-type")
NODE_STATES = ("ready", "not_ready", "cordoned")


def gpus_taken(used: float | None, reserved: float) -> float:
    """A pool's GPUs not free to new work: what Kueue has reserved there for admitted Workloads (the
    ClusterQueues' status.flavorsReservation, or the sum of the reserving Workloads: one count). Only
    Kueue-admitted work may hold pool GPUs (the pool taint and admission rules keep the rest off), so
    that is the whole answer for every view (`get pools`, `describe pool`, the API), which reads no
    pod. `used`, what bound pods hold, where the caller counted it (the metrics of `gpuctl serve`, from
    its watch cache): the larger of the two, which is `reserved` in steady state (a reserved job's pods
    may not be bound yet) and more only while a pod outlives its Workload's reservation."""
    return reserved if used is None else max(used, reserved)


def gpus_free(capacity: float, used: float | None, reserved: float) -> float:
    """A pool's GPUs free to new work: capacity (allocatable GPUs of Ready nodes) - gpus_taken."""
    return max(capacity - gpus_taken(used, reserved), 0)


def is_pool_flavor(flavor: Mapping[str, Any]) -> bool:
    """A ResourceFlavor that is a gpuctl pool."""
    return is_gpuctl_object(flavor) and name(flavor) != BUDGET_FLAVOR


def pool_names(flavors: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted(name(f) for f in flavors if is_pool_flavor(f))


def node_pool(node: Mapping[str, Any]) -> str | None:
    return labels(node).get(Labels.POOL)


def node_ready(node: Mapping[str, Any]) -> bool:
    """Whether a node counts in its pool: the one answer to "which nodes of a pool count", for the pool's
    capacity (`get pools`, `describe pool`, the API, the Cohort, the metrics), gang fit (`gpuctl create`'s
    precheck and the webhook's `gang-fits`, through `admission.state.CachedNode.ready`), the pool's sharing
    mode and slices (`pools_sharing`: `gpu-share`, `get pools`, serve's slices in use), the set-aside and
    defragmentation. A node counts when its condition Ready is True and it is not cordoned
    (`spec.unschedulable` unset): kube-scheduler places nothing on it otherwise, and Kueue's Topology Aware
    Scheduling leaves it out. Taints do not matter here: the pool taint and the set-aside taint are
    gpuctl's own (tolerated by what they are for), and the node controller's NotReady/unreachable taints
    follow the Ready condition. A NotReady or cordoned node is still listed in its pool
    (`node_state`), it holds nothing until it is back."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return condition(node, "Ready").get("status") == "True"


def counted_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Pool -> its nodes that count (`node_ready`), for every pool with one."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for n in nodes:
        pool = node_pool(n)
        if pool and node_ready(n):
            out.setdefault(pool, []).append(n)
    return out


def pools_sharing(nodes: Iterable[Mapping[str, Any]]) -> dict[str, PoolSharing]:
    """Pool -> how its counted nodes (`node_ready`) share their GPUs (gpuctl.domain.sharing.pool_sharing),
    for every pool with a counted node; a pool absent here shares nothing (`PoolSharing()`). The one
    reading of a pool's sharing mode: `gpu-share` at submission, `get pools` / `describe pool`, and the
    slices in use `gpuctl serve` writes."""
    return {p: pool_sharing(ns) for p, ns in sorted(counted_nodes(nodes).items())}


def node_state(node: Mapping[str, Any]) -> str:
    """ready | cordoned (Ready but unschedulable) | not_ready."""
    if node_ready(node):
        return "ready"
    return "cordoned" if condition(node, "Ready").get("status") == "True" else "not_ready"


def node_gpus(node: Mapping[str, Any], field: str = "allocatable") -> int:
    v = ((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE)
    try:
        return quantity_gpus(v) if v is not None else 0
    except ValueError:
        return 0


def node_gpu_type(node: Mapping[str, Any]) -> str:
    lb = labels(node)
    for key in GPU_TYPE_KEYS:
        if lb.get(key):
            return lb[key]
    return ""


# ----------------------------------------------------------------------------- taints
# A pool carries the taints of its nodes: its flavor tolerates every NoSchedule/NoExecute taint any of
# its nodes has (except the transient ones in constants), and Kueue adds those tolerations to the pods
# it admits there. The union, not the intersection: a pool mixing tainted GPU nodes and untainted CPU
# nodes must still run GPU work. To keep work off one node of a pool, cordon it or move it out of the
# pool. The flavor's nodeTaints stay unset: Kueue only uses them to refuse work that does not tolerate
# them, and the flavor's own tolerations cover every taint it would list.
#
# The pool taint (docs/adoption.md): every node of pool P carries `runwhere.ai/pool=P:NoSchedule` (gpuctl sets
# it with the label, pool_node_taints), and P's flavor always tolerates it, first, whatever its nodes
# carry now: a flavor is created with it and never has to be re-created for it (a Topology Aware
# Scheduling flavor is immutable in Kueue). Kueue checks a TAS flavor's tolerations against the nodes'
# taints when it places a pod set (v0.19.2 pkg/cache/scheduler/tas_flavor_snapshot.go appends the
# flavor's tolerations to the pod set's, scheduling_simulator_default.go excludes nodes with an
# untolerated NoSchedule/NoExecute taint) and adds them to the pods it admits (podset.Merge). Pool
# taints on a node are never mirrored: a node of pool P carrying another pool's taint is repaired.
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def is_transient_taint(taint: Mapping[str, Any]) -> bool:
    key = str(taint.get("key") or "")
    return key in TRANSIENT_TAINT_KEYS or key.startswith(TRANSIENT_TAINT_PREFIXES)


def is_pool_taint(taint: Mapping[str, Any]) -> bool:
    """A taint gpuctl sets for pools (key runwhere.ai/pool, effect NoSchedule), whatever its value."""
    return taint.get("key") == POOL_TAINT_KEY and taint.get("effect") == POOL_TAINT_EFFECT


def pool_taint(pool: str) -> dict:
    """The taint every node of `pool` carries."""
    return {"key": POOL_TAINT_KEY, "value": pool, "effect": POOL_TAINT_EFFECT}


def tolerates_pool_taint(t: Mapping[str, Any], pool: str | None = None) -> bool:
    """Whether toleration `t` tolerates the taint of `pool` (None: of some pool, whatever its name), by
    Kubernetes' rule (k8s.io/api core/v1 Toleration.ToleratesTaint): its effect is empty or NoSchedule,
    and it is key-less with `operator: Exists` (tolerates every taint), or has key runwhere.ai/pool with
    `Exists` or the pool's name as value. The one definition used by the admission rules outside team
    namespaces (admission/isolation.py, and its CEL in admission/policies/isolation.py) and by adopt."""
    if t.get("effect") not in (None, "", POOL_TAINT_EFFECT):
        return False
    key, op = t.get("key") or "", t.get("operator") or "Equal"
    if not key:
        return op == "Exists"
    if key != POOL_TAINT_KEY:
        return False
    return op == "Exists" or pool is None or (t.get("value") or "") == pool


def node_taints(node: Mapping[str, Any]) -> list[dict]:
    """The node's taints that keep pods away (NoSchedule, NoExecute), transient ones and the pool taint
    left out (a flavor tolerates its own pool's taint anyway, never another pool's)."""
    out = []
    for t in (node.get("spec") or {}).get("taints") or []:
        if (
            t.get("key")
            and t.get("effect") in SCHEDULING_EFFECTS
            and not is_transient_taint(t)
            and t.get("key") != POOL_TAINT_KEY
        ):
            out.append({"key": t["key"], "value": t.get("value") or "", "effect": t["effect"]})
    return out


def pool_node_taints(node: Mapping[str, Any], pool: str | None) -> list[dict] | None:
    """The node's `spec.taints` once it is in `pool` (None: in no pool), or None when they already are:
    every other taint kept as it is, the pool taint (runwhere.ai/pool, NoSchedule: unique per key and
    effect on a Node) set to `pool` or removed. A pool taint of another effect is not gpuctl's and stays."""
    current = list((node.get("spec") or {}).get("taints") or [])
    ours = [t for t in current if is_pool_taint(t)]
    if (not ours and pool is None) or (len(ours) == 1 and pool is not None and ours[0].get("value") == pool):
        return None
    kept = [t for t in current if not is_pool_taint(t)]
    return [*kept, pool_taint(pool)] if pool else kept


def node_pool_taint_missing(node: Mapping[str, Any]) -> bool:
    """The node's pool taint is not what its pool label says (missing, another pool's, or left behind)."""
    return pool_node_taints(node, node_pool(node)) is not None


def toleration(taint: Mapping[str, Any]) -> dict:
    """The toleration of exactly this taint (Kueue refuses a value with operator Exists)."""
    if taint.get("value"):
        return {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}
    return {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}


def _tolerations(pool: str, taints: set[tuple[str, str, str]]) -> list[dict]:
    """The pool's own toleration first, then its nodes' taints; at most MAX_FLAVOR_TOLERATIONS in all."""
    room = MAX_FLAVOR_TOLERATIONS - 1
    tols = [toleration({"key": k, "value": v, "effect": e}) for k, v, e in sorted(taints)]
    if len(tols) > room:
        keys = sorted({(k, e) for k, _, e in taints})
        tols = [{"key": k, "operator": "Exists", "effect": e} for k, e in keys][:room]
    return [pool_toleration(pool), *tols]


def all_pool_tolerations(nodes: Iterable[Mapping[str, Any]]) -> dict[str, list[dict]]:
    """Pool -> its tolerations (pool_tolerations) for every pool that has nodes, in one pass."""
    taints: dict[str, set[tuple[str, str, str]]] = {}
    for n in nodes:
        pool = node_pool(n)
        if pool is not None:
            taints.setdefault(pool, set()).update((t["key"], t["value"], t["effect"]) for t in node_taints(n))
    return {pool: _tolerations(pool, t) for pool, t in taints.items()}


def pool_tolerations(nodes: Iterable[Mapping[str, Any]], pool: str) -> list[dict]:
    """The pool's own toleration (pool_toleration), then those of the taints its nodes carry, sorted; at
    most MAX_FLAVOR_TOLERATIONS (past that, one `Exists` toleration per key and effect)."""
    return all_pool_tolerations(n for n in nodes if node_pool(n) == pool).get(pool) or _tolerations(
        pool, set()
    )


def desired_flavor(pool: str, nodes: Iterable[Mapping[str, Any]], levels: Sequence[str] = ()) -> dict:
    """The ResourceFlavor of a pool as its nodes are now (tolerations follow the nodes' taints); `levels`:
    its network topology above the node (gpuctl.domain.gang)."""
    return resource_flavor(pool, pool_tolerations(nodes, pool), levels)


def flavor_tolerations(flavor: Mapping[str, Any] | None) -> list[dict]:
    return list(((flavor or {}).get("spec") or {}).get("tolerations") or [])


def flavor_immutable(flavor: Mapping[str, Any] | None) -> bool:
    """Kueue forbids any change of a flavor's spec once it has a topologyName (TAS)."""
    return bool(((flavor or {}).get("spec") or {}).get("topologyName"))


def stale_flavors(
    flavors: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]
) -> dict[str, list[dict]]:
    """Pool flavor name -> the tolerations it should have, for each gpuctl pool flavor whose
    tolerations no longer match its nodes' taints. A TAS flavor (flavor_immutable) cannot be patched:
    its writer re-creates it (gpuctl.service.pool_sync.set_flavor_tolerations)."""
    by_pool = all_pool_tolerations(nodes)
    out = {}
    for f in flavors:
        if not is_pool_flavor(f):
            continue
        want = by_pool.get(name(f)) or _tolerations(name(f), set())
        if flavor_tolerations(f) != want:
            out[name(f)] = want
    return out


def _qty(v: Any) -> Decimal:
    try:
        return parse_quantity(str(v)) if v is not None else Decimal(0)
    except QuantityError:
        return Decimal(0)


def node_allocatable(node: Mapping[str, Any], resource: str) -> Decimal:
    """A node's allocatable amount of `resource` (cpu in cores, memory in bytes); 0 if unset."""
    return _qty(((node.get("status") or {}).get("allocatable") or {}).get(resource))


# ----------------------------------------------------------------------------- a pool's facts
class NodeFacts(NamedTuple):
    """What one node says about its pool, read once: `gpuctl serve` keeps one per node in its watch cache
    (refreshed on the node's events), the CLI and the API read them from the nodes they list."""

    name: str
    pool: str | None
    state: str  # node_state: ready | not_ready | cordoned
    capacity_gpus: int  # status.capacity, ready or not
    allocatable_gpus: int  # status.allocatable of a Ready, schedulable node (node_ready), else 0
    cpu: Decimal  # allocatable cores, 0 unless node_ready
    memory: Decimal  # allocatable bytes, 0 unless node_ready
    gpu_type: str
    # Its pool taint is not what its pool label says (labelled by kubectl, not by gpuctl): pods from outside
    # Kueue can land there until `gpuctl apply -f` of the pool or `gpuctl adopt` taints it.
    untainted: bool = False
    # docs/sharing.md: slices of its GPUs a Ready node offers, (profile or "shared", resource, count)
    # (gpuctl.domain.sharing.node_sharing, what `describe pool` sums).
    slices: tuple[tuple[str, str, int], ...] = ()


def _node_slices(node: Mapping[str, Any]) -> tuple[tuple[str, str, int], ...]:
    ns = node_sharing(node)
    return tuple((p, slice_resource(ns.mode, p), n) for p, n in sorted(ns.slices.items()))


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    ready = node_ready(node)
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return NodeFacts(
        name=name(node),
        pool=node_pool(node),
        state=node_state(node),
        capacity_gpus=node_gpus(node, "capacity"),
        allocatable_gpus=node_gpus(node) if ready else 0,
        cpu=_qty(alloc.get(CPU_RESOURCE)) if ready else Decimal(0),
        memory=_qty(alloc.get(MEMORY_RESOURCE)) if ready else Decimal(0),
        gpu_type=node_gpu_type(node),
        untainted=node_pool_taint_missing(node),
        slices=_node_slices(node) if ready else (),
    )


class ResourceFacts(NamedTuple):
    """One schedulable resource of a pool besides whole GPUs (a GPU slice, docs/sharing.md): how much its
    nodes offer and how much is used."""

    capacity: float
    used: float


_NO_RESOURCES: Mapping[str, ResourceFacts] = MappingProxyType({})


class PoolFacts(NamedTuple):
    """A pool's facts, aggregated once from its nodes (`pool_facts`) and, given by the caller, what Kueue
    reserved there: the one source of `get pools`, `describe pool`, the API's pools, the Cohort's capacity
    (`pool_capacities`) and the metrics' pool gauges, which only print it.

    Extending it: a new kind of schedulable resource (GPU slices: docs/sharing.md) goes in `resources`,
    resource name -> ResourceFacts(capacity, used), filled where the nodes' facts are summed; views and gauges
    iterate the mapping, so a resource added is a key, not a new field every consumer must learn."""

    name: str
    registered: bool = True  # a gpuctl pool flavor exists (else only nodes are labelled with it)
    nodes: tuple[str, ...] = ()  # every node labelled into the pool, sorted
    node_states: Mapping[str, int] = MappingProxyType({})  # ready | not_ready | cordoned -> nodes
    capacity_gpus: int = 0  # installed (status.capacity), Ready or not
    allocatable_gpus: int = 0  # of Ready, schedulable nodes: the pool's Kueue capacity
    cpu: Decimal = Decimal(0)  # allocatable cores of Ready nodes
    memory: Decimal = Decimal(0)  # allocatable bytes of Ready nodes
    gpu_types: tuple[str, ...] = ()  # of its nodes, sorted
    untainted_nodes: int = 0  # nodes without the pool taint (NodeFacts.untainted)
    reserved_gpus: float = 0  # what Kueue reserved there (the caller's count: ClusterQueues' or Workloads')
    # docs/sharing.md: (MIG profile or "shared", resource) -> slices its Ready nodes offer (NodeFacts.slices).
    slices: Mapping[tuple[str, str], int] = MappingProxyType({})
    resources: Mapping[str, ResourceFacts] = _NO_RESOURCES

    @property
    def nodes_ready(self) -> int:
        return self.node_states.get("ready", 0)

    @property
    def status(self) -> str:
        """empty (no node) | degraded (some node not ready) | active."""
        if not self.nodes:
            return "empty"
        return "degraded" if self.nodes_ready < len(self.nodes) else "active"

    def free(self, used: float | None = None) -> float:
        """GPUs free to new work (gpus_free); `used`: what bound pods hold, where the caller counted it."""
        return gpus_free(self.allocatable_gpus, used, self.reserved_gpus)


def pool_facts(
    nodes: Iterable[Mapping[str, Any] | NodeFacts],
    pools: Iterable[str] = (),
    reserved: Mapping[str, float] | None = None,
) -> dict[str, PoolFacts]:
    """Pool -> its facts, for every pool named in `pools` (its flavors: registered) and every pool a node
    is labelled with (not registered unless named). `nodes`: Node objects or their NodeFacts. `reserved`:
    pool -> GPUs Kueue reserved there (gpuctl.domain.teams.pool_reservations, or the Workloads' terms)."""
    named = set(pools)
    acc: dict[str, dict[str, Any]] = {p: {"nodes": [], "states": {}, "types": set()} for p in named}
    sums: dict[str, list] = {p: [0, 0, Decimal(0), Decimal(0), 0] for p in named}
    for n in nodes:
        f = n if isinstance(n, NodeFacts) else node_facts(n)
        if f.pool is None:
            continue
        a = acc.setdefault(f.pool, {"nodes": [], "states": {}, "types": set()})
        t = sums.setdefault(f.pool, [0, 0, Decimal(0), Decimal(0), 0])
        a["nodes"].append(f.name)
        a["states"][f.state] = a["states"].get(f.state, 0) + 1
        if f.gpu_type:
            a["types"].add(f.gpu_type)
        for prof, res, count in f.slices:
            a.setdefault("slices", {})[(prof, res)] = a.get("slices", {}).get((prof, res), 0) + count
        t[0] += f.capacity_gpus
        t[1] += f.allocatable_gpus
        t[2] += f.cpu
        t[3] += f.memory
        t[4] += 1 if f.untainted else 0
    reserved = reserved or {}
    return {
        p: PoolFacts(
            name=p,
            registered=p in named,
            nodes=tuple(sorted(a["nodes"])),
            node_states=MappingProxyType(a["states"]),
            capacity_gpus=sums[p][0],
            allocatable_gpus=sums[p][1],
            cpu=sums[p][2],
            memory=sums[p][3],
            gpu_types=tuple(sorted(a["types"])),
            untainted_nodes=sums[p][4],
            reserved_gpus=reserved.get(p, 0),
            slices=MappingProxyType(dict(sorted(a.get("slices", {}).items()))),
        )
        for p, a in sorted(acc.items())
    }


def pool_capacities(nodes: Iterable[Mapping[str, Any]], pools: Iterable[str]) -> list[PoolCapacity]:
    """Capacity of each named pool (pools without nodes have 0), from Node objects: the Cohort's
    (queues.model.PoolCapacity), read from pool_facts."""
    named = list(pools)
    facts = pool_facts(nodes, named)
    return [
        PoolCapacity(
            name=f.name,
            gpu=f.allocatable_gpus,
            cpu=format_quantity(f.cpu),
            memory=format_quantity(f.memory),
            nodes=f.nodes,
        )
        for f in (facts[p] for p in sorted(set(named)))
    ]
