"""When will it run? The blocking reason of a waiting job, computed from the cluster state.

Kueue's own `QuotaReserved` message names the last flavor it tried (docs/queueing.md, "Pending
messages"), so gpuctl answers from the objects instead, in the order Kueue admits (gpuctl's design,
docs/queueing.md):

1. **quota**: beyond the team's quota, the job needs idle GPUs of budget to borrow (within the quota's
   borrowingLimit); none idle means it waits for the team's own work to end.
2. **preemption**: a job within its team's quota takes back GPUs that other teams use beyond theirs
   (any priority), and a higher-priority job preempts lower-priority work of its own team (and other
   teams' over-quota medium/low work). Such a job "would start after preempting ...".
3. **capacity / fragmentation**: Topology Aware Scheduling admits a pod only where one node of its pool
   holds it: too few free GPUs in the pool, or enough in total but no node with room for one pod.
4. **priority** (queue order): the team's waiting jobs ahead of it (higher priority, then older) that
   would take the room first.

**Per node or by count.** Who may read every pod (a cluster admin) gets the per-node answer above. A
team member may not (other teams' pod specs are not theirs): its snapshot is built from what it may
read (nodes, the ClusterQueues' reservations, its own namespace's pods and Workloads; `Snapshot.build`
with `pool_reserved`), and the verdict is by count: a pool's free GPUs are its capacity less what
Kueue reserved there, and where the pods would land is Kueue's own word (the QuotaReserved message on
the job's Workload, e.g. Topology Aware Scheduling finding no node). A dry run, which has no Workload
yet, says so instead of guessing (`Verdict.by_count`).

Pure: plain dicts in, a `Verdict` out. The CLI (`describe job`, `get jobs -o wide`, `create
--dry-run=server`) and the API call `blocking_reason` through gpuctl.service.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from gpuctl.constants import BORROW_PREEMPT_THRESHOLD, GPU_RESOURCE, GPU_UNITS
from gpuctl.domain.demand import (
    Demand,
    _per_pod,
    demand_of_pod_template,
    pod_demand,
    pod_owner_label,
    workload_demand,
    workload_slices,
)
from gpuctl.domain.gang import fits_in_one, gang_wait_message, level_domains
from gpuctl.domain.gpus import pod_gpus, pod_spec_gpu_requests, pod_spec_gpu_units
from gpuctl.domain.objects import is_gpuctl_object, meta, name
from gpuctl.domain.pools import node_allocatable, node_gpu_type, node_gpus, node_pool, node_ready
from gpuctl.domain.sharing import profile_of_resource, units_to_gpus
from gpuctl.domain.status import is_gated
from gpuctl.domain.teams import cohort_budget_gpus, team_budgets, team_reserved_units, team_usage
from gpuctl.domain.workload import (
    HOLDING_QUOTA,
    IN_QUEUE,
    labelled_priority_value,
    pod_release_deadline,
    release_deadline,
    topology_nodes,
    workload_state,
)
from gpuctl.quantity import format_bytes, format_quantity

__all__ = [
    "Demand",
    "Snapshot",
    "Verdict",
    "blocking_reason",
    "demand_of_pod_template",
    "pod_demand",
    "workload_demand",
]

QUOTA = "quota"
CAPACITY = "capacity"
FRAGMENTATION = "fragmentation"
PRIORITY = "priority"
PREEMPTION = "preemption"
NO_NODES = "no-nodes"
NONE = ""


@dataclass(frozen=True)
class Verdict:
    starts: bool  # would start now (possibly after preempting `preempts`)
    cause: str  # "" | quota | capacity | fragmentation | priority | no-nodes
    message: str
    position: int | None = None  # 1-based among the team's waiting jobs
    ahead: tuple[str, ...] = ()  # the team's waiting jobs ahead of it, in order
    preempts: tuple[str, ...] = field(default=())
    by_count: str = ""  # judged by count (per-node use unknown to the caller): the caveat to show
    pool: str = ""  # sched-b (issue 23): for a job of no single pool, the pool it would start in

    def summary(self, pool: str) -> str:
        """One line: "would start now on pool P" / "would wait: position N behind ..., because ..."."""
        if self.starts:
            tail = f" after preempting {', '.join(self.preempts)}" if self.preempts else ""
            caveat = f", {self.by_count}" if self.by_count else ""
            on = f"on pool {pool or self.pool}" + ("" if pool else ", the first of its pools with room")
            return f"would start now {on}{tail}{caveat}"
        where = f"position {self.position}" if self.position else "waiting"
        behind = (
            f" behind {', '.join(self.ahead[:3])}{' ...' if len(self.ahead) > 3 else ''}"
            if self.ahead
            else ""
        )
        return f"would wait: {where}{behind}, because {self.message}"


@dataclass
class _Team:
    quota: int | None  # None = unlimited
    borrowing_limit: int | None
    used: int | float = 0  # GPU equivalents of budget held (slices count their share)
    used_units: int = 0  # the same in 1/GPU_UNITS GPU: what the quota check adds up


def _teams(cluster_queues: Iterable[Mapping[str, Any]]) -> dict[str, _Team]:
    """Team -> its GPU quota and borrowing limit, as gpuctl.domain.teams reads its ClusterQueue."""
    return {ns: _Team(t.gpu, t.borrowing_limit) for ns, t in team_budgets(cluster_queues).items()}


@dataclass
class _Holder:
    label: str
    namespace: str
    priority: int
    gpus: int
    nodes: dict[str, int]  # node -> GPUs it holds there
    pool: str
    ends_by: float | None = None  # when Kueue stops it at the latest (its maxRuntime); None: unknown
    # Issue 32: budget held in 1/GPU_UNITS GPU (slices count their share), and slices held in its pool
    # (slice resource -> count); what gpuctl.domain.estimate releases at its end.
    units: int = 0
    slices: dict[str, int] = field(default_factory=dict)


def _fits(free: Mapping[str, int], pods: int, gpus: int) -> bool:
    if gpus <= 0:
        return True
    return sum(max(f, 0) // gpus for f in free.values()) >= pods


def _place(free: dict[str, int], pods: int, gpus: int) -> None:
    """Take pods x gpus from the fullest nodes that hold one (Kueue's TAS packs the same way)."""
    for _ in range(pods):
        fitting = [n for n, f in free.items() if f >= gpus]
        if not fitting:
            return
        n = min(fitting, key=lambda x: (free[x], x))
        free[n] -= gpus


@dataclass
class _Placements:
    after: list[int]  # queue length consumed when placement i was made (0 for the start)
    sims: list[dict[str, int]]  # free GPUs per node after placement i
    labels: list[str]  # the job of placement i (i >= 1)


@dataclass
class Snapshot:
    """The cluster state every verdict is judged against, built once per command."""

    nodes: list[Mapping[str, Any]]
    teams: dict[str, _Team]
    holders: list[_Holder]
    waiting: dict[str, list[Demand]]  # namespace -> its waiting jobs
    used: dict[str, int]  # node -> GPUs held (TAS assignments or bound pods, the larger)
    surplus: int
    _memo: dict = field(default_factory=dict, repr=False)
    # By count (a caller who may not read every pod): pool -> GPUs Kueue reserved there, and team ->
    # pool -> GPUs its ClusterQueue holds there. None: per node (`used` covers every pod).
    pool_reserved: dict[str, int] | None = None
    team_pools: dict[str, dict[str, int]] = field(default_factory=dict)
    # By count: pool -> slice resource -> slices in use, as gpuctl serve counted them (issue 32).
    slices_published: dict[str, dict[str, int]] = field(default_factory=dict)
    # Issue 32: slice resource -> node -> namespace -> slices bound pods hold there.
    slice_use: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        workloads: Sequence[Mapping[str, Any]],
        cluster_queues: Sequence[Mapping[str, Any]],
        cohort: Mapping[str, Any] | None,
        pool_reserved: Mapping[str, int] | None = None,
        slices_published: Mapping[str, Mapping[str, int] | None] | None = None,
    ) -> Snapshot:
        """pods: every unfinished pod bound to a node (GPU use per node, and which job holds it) and the
        pods waiting at Kueue's gate; with pool_reserved (pool -> GPUs Kueue reserved there,
        gpuctl.domain.teams.pool_reservations), only the caller's own pods and Workloads, judged by
        count (the module docstring). workloads: those at hand, not necessarily all (listing every
        Workload costs several times more than listing every pod: CRDs are served as JSON); a waiting
        one orders its team's queue, a holding one adds its TAS placement of pods not bound yet. A
        team's use is its ClusterQueue's status (Kueue's count), else the sum of what its jobs hold."""
        teams = _teams(cluster_queues)
        holders: list[_Holder] = []
        waiting: dict[str, list[Demand]] = {}
        tas_used: dict[str, int] = {}
        known: set[str] = set()  # jobs (namespace/owner) a given Workload already describes
        slice_use: dict[str, dict[str, dict[str, int]]] = {}
        for wl in workloads:
            st = workload_state(wl)
            ns = meta(wl).get("namespace", "")
            if st in HOLDING_QUOTA:
                d = workload_demand(wl)
                placed = {n: c * d.gpus for n, c in topology_nodes(wl).items()}
                for n, g in placed.items():
                    tas_used[n] = tas_used.get(n, 0) + g
                gpus = sum(g * c for c, g in _per_pod(wl))
                units, slices = workload_slices(wl)
                end = release_deadline(wl)
                holders.append(_Holder(d.label, ns, d.priority, gpus, placed, d.pool, end, units, slices))
                known.add(d.label)
            elif st in IN_QUEUE:
                d = workload_demand(wl)
                waiting.setdefault(ns, []).append(d)
                known.add(d.label)
        pool_of = {name(n): node_pool(n) or "" for n in nodes}
        bound: dict[str, int] = {}
        held: dict[str, _Holder] = {}
        gated: dict[str, list[Mapping[str, Any]]] = {}
        for p in pods:
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            node = (p.get("spec") or {}).get("nodeName")
            label = pod_owner_label(p)
            if node:
                slices = {r: n for r, n in pod_spec_gpu_requests(p.get("spec")).items() if r != GPU_RESOURCE}
                for r, n in slices.items():
                    by_ns = slice_use.setdefault(r, {}).setdefault(node, {})
                    ns_p = meta(p).get("namespace", "")
                    by_ns[ns_p] = by_ns.get(ns_p, 0) + n
                g = pod_gpus(p)
                bound[node] = bound.get(node, 0) + g
                if (g or slices) and label not in known:
                    h = held.get(label)
                    if h is None:
                        ns = meta(p).get("namespace", "")
                        h = held[label] = _Holder(
                            label, ns, labelled_priority_value(p), 0, {}, pool_of.get(node, ""), -math.inf
                        )
                    # A job's end: its last pod's (a pod without a maxRuntime: unknown).
                    end = pod_release_deadline(p)
                    h.ends_by = None if end is None or h.ends_by is None else max(h.ends_by, end)
                    h.gpus += g
                    if g:
                        h.nodes[node] = h.nodes.get(node, 0) + g
                    h.units += pod_spec_gpu_units(p.get("spec"))
                    for r, n in slices.items():
                        h.slices[r] = h.slices.get(r, 0) + n
            elif is_gated(p) and label not in known:
                gated.setdefault(label, []).append(p)
        holders += held.values()
        for group in gated.values():
            d = pod_demand(group[0], len(group))
            waiting.setdefault(d.namespace, []).append(d)
        reserved = team_reserved_units(cluster_queues)
        for ns, t in teams.items():
            units = reserved.get(ns)
            t.used_units = (
                sum(h.units or h.gpus * GPU_UNITS for h in holders if h.namespace == ns)
                if units is None
                else units
            )
            t.used = units_to_gpus(t.used_units)
        used = {n: max(tas_used.get(n, 0), bound.get(n, 0)) for n in set(tas_used) | set(bound)}
        snap = cls(list(nodes), teams, holders, waiting, used, cohort_budget_gpus(cohort))
        snap.slice_use = slice_use
        if pool_reserved is not None:
            snap.pool_reserved = dict(pool_reserved)
            snap.slices_published = {p: dict(u) for p, u in (slices_published or {}).items() if u is not None}
            snap.team_pools = {
                name(cq): team_usage(cq).pool_gpus for cq in cluster_queues if is_gpuctl_object(cq)
            }
        return snap

    def verdict(self, demand: Demand) -> Verdict:
        return _verdict(self, demand)

    # What every verdict of one command shares (`get jobs -o wide` asks once per waiting row).
    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def pool_nodes(self, pool: str) -> dict[str, int]:
        """Ready nodes of the pool -> their GPUs."""
        return self.memo(
            ("nodes", pool),
            lambda: {name(n): node_gpus(n) for n in self.nodes if node_pool(n) == pool and node_ready(n)},
        )

    def fits(self, free: Mapping[str, int], demand: Demand) -> bool:
        """Room for the demand's pods, each on one node; a gang with a required level (issue 31) in
        one domain of it (gpuctl.domain.gang.fits_in_one)."""
        if not _fits(free, demand.pods, demand.gpus):
            return False
        return not demand.level or fits_in_one(
            free, self.domains(demand.pool, demand.level), demand.pods, demand.gpus
        )

    def domains(self, pool: str, level: str) -> dict[str, list[str]]:
        """The pool's Ready nodes by their value of the topology level `level`."""
        return self.memo(
            ("domains", pool, level),
            lambda: level_domains((n for n in self.nodes if name(n) in self.pool_nodes(pool)), level),
        )

    def largest(self, pool: str, resource: str) -> Decimal:
        """The most of `resource` (cpu, memory) one Ready node of the pool has allocatable."""
        return self.memo(
            ("largest", pool, resource),
            lambda: max(
                (node_allocatable(n, resource) for n in self.nodes if name(n) in self.pool_nodes(pool)),
                default=Decimal(0),
            ),
        )

    def slices_held(self, pool: str, resource: str) -> tuple[int, dict[str, int]]:
        """How many of a slice resource the pool's Ready nodes offer, and namespace -> how many bound
        pods hold there (every pod's for an admin; by count only the caller's own)."""
        nodes = self.pool_nodes(pool)
        total = int(sum(node_allocatable(n, resource) for n in self.nodes if name(n) in nodes))
        by_ns: dict[str, int] = {}
        for node in nodes:
            for ns, c in self.slice_use.get(resource, {}).get(node, {}).items():
                by_ns[ns] = by_ns.get(ns, 0) + c
        others = self.slices_published.get(pool, {}).get(resource, 0) - sum(by_ns.values())
        if others > 0:  # by count: the rest of what gpuctl serve counted is other teams'
            by_ns["other teams"] = others
        return total, by_ns

    def free(self, pool: str) -> dict[str, int]:
        return self.memo(
            ("free", pool), lambda: {n: cap - self.used.get(n, 0) for n, cap in self.pool_nodes(pool).items()}
        )

    def queue(self, namespace: str) -> tuple[list[tuple[int, str]], list[Demand]]:
        """The team's waiting jobs in Kueue's order, and their sort keys."""

        def build() -> tuple[list[tuple[int, str]], list[Demand]]:
            q = sorted(self.waiting.get(namespace, []), key=lambda d: (-d.priority, d.created))
            return [(-d.priority, d.created) for d in q], q

        return self.memo(("queue", namespace), build)

    def own_below(self, namespace: str, priority: int) -> int:
        """GPUs the team's own work of lower priority holds."""
        return self.memo(
            ("own", namespace, priority),
            lambda: sum(h.gpus for h in self.holders if h.namespace == namespace and h.priority < priority),
        )

    def placements(self, namespace: str, pool: str) -> _Placements:
        """The free GPUs of the pool as the team's queue takes them, job after job (the room left after
        the first k jobs is the same for every job behind them)."""

        def build() -> _Placements:
            _, queue = self.queue(namespace)
            sim = dict(self.free(pool))
            out = _Placements([0], [dict(sim)], [])
            for i, d in enumerate(queue, start=1):
                if d.pool == pool and d.gpus > 0 and _fits(sim, d.pods, d.gpus):
                    _place(sim, d.pods, d.gpus)
                    out.after.append(i)
                    out.sims.append(dict(sim))
                    out.labels.append(d.label)
                    if not any(f > 0 for f in sim.values()):
                        break  # nothing left to take
            return out

        return self.memo(("placements", namespace, pool), build)


def blocking_reason(
    demand: Demand,
    *,
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
    cluster_queues: Sequence[Mapping[str, Any]],
    cohort: Mapping[str, Any] | None,
) -> Verdict:
    """Would `demand` start now, and if not, what blocks it (see the module docstring)."""
    snap = Snapshot.build(
        nodes=nodes, pods=pods, workloads=workloads, cluster_queues=cluster_queues, cohort=cohort
    )
    return snap.verdict(demand)


def _larger_than_every_node(snap: Snapshot, demand: Demand) -> str:
    """Why no Ready node of the pool can ever hold one pod of `demand` on CPU or memory ("" if one can)."""
    for resource, asked, unit, field_ in (
        ("cpu", demand.cpu, "CPUs", "resources.cpu"),
        ("memory", demand.memory, "memory", "resources.memory"),
    ):
        if not asked:
            continue
        largest = snap.largest(demand.pool, resource)
        if asked > largest:
            fmt = format_bytes if resource == "memory" else format_quantity
            shown = (fmt(asked), fmt(largest))
            return (
                f"no node in {demand.pool} has {shown[0]} {unit} for one pod (largest: {shown[1]}); "
                f"lower {field_} or add bigger nodes"
            )
    return ""


def _any_pool_verdict(snap: Snapshot, demand: Demand) -> Verdict:
    """A job of no single pool: Kueue tries its pools in the team queue's order (by name) and takes the
    first with room; so does this. If none has room, the first pool's reason, naming the others."""
    pools = demand.any_of or tuple(
        sorted(
            {
                p
                for n in snap.nodes
                if (p := node_pool(n))
                and (node_gpus(n) or not demand.gpus)
                and (not demand.gpu_types or node_gpu_type(n) in demand.gpu_types)
            }
        )
    )
    if not pools:
        return Verdict(False, NO_NODES, f"no pool has a Ready node of GPU type {', '.join(demand.gpu_types)}")
    verdicts = [(p, _verdict(snap, replace(demand, pool=p))) for p in sorted(pools)]
    for p, v in verdicts:
        if v.starts:
            return replace(v, pool=p)
    v = verdicts[0][1]
    rest = [q for q, _ in verdicts[1:]]
    others = (
        f" (and no room in {', '.join(rest)})"
        if rest and v.cause in (CAPACITY, FRAGMENTATION, NO_NODES)
        else ""
    )
    return replace(v, message=f"{v.message}{others}")


def _verdict(snap: Snapshot, demand: Demand) -> Verdict:
    if not demand.pool:
        return _any_pool_verdict(snap, demand)
    pool_nodes = snap.pool_nodes(demand.pool)
    if not pool_nodes:
        return Verdict(False, NO_NODES, f"pool {demand.pool} has no Ready nodes")
    if demand.gpus and max(pool_nodes.values()) < demand.gpus:
        return Verdict(
            False,
            CAPACITY,
            f"no node in {demand.pool} has {demand.gpus} GPUs (largest: {max(pool_nodes.values())}); "
            "lower resources.gpu or add bigger nodes",
        )
    too_big = _larger_than_every_node(snap, demand)
    if too_big:
        return Verdict(False, CAPACITY, too_big)

    # Queue order inside the team: higher priority first, then older (BestEffortFIFO). A job's own
    # entry has its own key, never a smaller one, so the jobs ahead are a prefix of the sorted queue.
    keys, queue = snap.queue(demand.namespace)
    k = bisect_left(keys, (-demand.priority, demand.created or "~"))
    ahead = tuple(d.label for d in queue[:k] if d.label != demand.label)
    position = len(ahead) + 1

    # 1. Quota: within it, or how much can be borrowed.
    team = snap.teams.get(demand.namespace)
    if team is None:
        return Verdict(False, QUOTA, f"namespace {demand.namespace} has no quota", position, ahead)
    within = _quota_check(snap, team, demand)
    if isinstance(within, str):
        return Verdict(False, QUOTA, within, position, ahead)
    no_slice = _slices_free(snap, demand) if demand.slice else ""
    if no_slice:
        return Verdict(False, CAPACITY, no_slice, position, ahead)

    if snap.pool_reserved is not None:
        return _by_count(snap, demand, within, queue[:k], position, ahead)

    # 2. Queue order: jobs ahead in the same pool take room first (simulated in order).
    free = snap.free(demand.pool)
    steps = snap.placements(demand.namespace, demand.pool)
    done = bisect_right(steps.after, k) - 1  # placements made by the first k jobs of the queue
    if snap.fits(steps.sims[done], demand):
        return Verdict(True, NONE, "", position, ahead)
    if done and snap.fits(free, demand):
        # Name the jobs that took the room, up to the one after which this job no longer fits.
        last = next(i for i in range(1, done + 1) if not snap.fits(steps.sims[i], demand))
        return Verdict(
            False,
            PRIORITY,
            f"{_names(steps.labels[:last])} (ahead in {demand.namespace}'s queue) take the free GPUs "
            f"of {demand.pool} first",
            position,
            ahead,
        )
    cause, message, preempts = snap.memo(
        ("after-queue", demand.namespace, demand.pool, demand.priority, within, demand.pods, demand.gpus),
        lambda: _preempt_or_capacity(snap, demand, within, free, pool_nodes),
    )
    return Verdict(cause == PREEMPTION, cause, message, position, ahead, preempts)


def _slices_free(snap: Snapshot, demand: Demand) -> str:
    """Why a slice job cannot start for want of free slices in its pool ("" if enough are free): the
    pool's Ready nodes' allocatable of the slice less what bound pods hold (known only to a caller who
    reads every pod; by count nothing is held). "no free 1g.10gb in dev-pool (14 in all; 3 in use by
    team-b)"."""
    total, by_ns = snap.slices_held(demand.pool, demand.slice)
    if total - sum(by_ns.values()) >= demand.pods:
        return ""
    kind = profile_of_resource(demand.slice) or "shared GPU replica"
    if not total:
        return f"no node of {demand.pool} offers {kind} ({demand.slice})"
    held = ", ".join(f"{c} in use by {ns}" for ns, c in sorted(by_ns.items(), key=lambda kv: -kv[1]))
    return f"no free {kind} in {demand.pool} ({total} in all; {held})"


def _quota_check(snap: Snapshot, team: _Team, demand: Demand) -> bool | str:
    """Step 1, in 1/GPU_UNITS GPU so that slices count their share (docs/sharing.md): whether the job is
    within its team's quota, or why it cannot borrow (the message)."""
    need = demand.total_units
    budget_total = (snap.surplus + sum(t.quota or 0 for t in snap.teams.values())) * GPU_UNITS
    budget_used = sum(t.used_units if t.quota is not None else 0 for t in snap.teams.values())
    quota = None if team.quota is None else team.quota * GPU_UNITS
    within = quota is None or team.used_units + need <= quota
    # The team's own lower-priority work can make room in its budget too (withinClusterQueue).
    own = snap.own_below(demand.namespace, demand.priority) * GPU_UNITS
    if within or quota is None or team.used_units - own + need <= quota:
        return within
    over = team.used_units - own + need - quota
    gpus = units_to_gpus
    if team.borrowing_limit is not None and over > team.borrowing_limit * GPU_UNITS:
        return (
            f"{demand.namespace} uses {team.used} of its {team.quota} GPUs and may borrow "
            f"{team.borrowing_limit}; this job needs {gpus(need)}"
        )
    idle = budget_total - budget_used + own
    if idle < need - max(quota - team.used_units + own, 0):
        return (
            f"{demand.namespace} uses {team.used} of its {team.quota} GPUs and other teams use "
            "theirs: no idle GPUs to borrow"
        )
    return within


def _preempt_or_capacity(
    snap: Snapshot, demand: Demand, within: bool, free: Mapping[str, int], pool_nodes: Mapping[str, int]
) -> tuple[str, str, tuple[str, ...]]:
    # 3. Preemption: what Kueue may evict for it (docs/queueing.md, rules 3 and 4).
    over_teams = {ns for ns, t in snap.teams.items() if t.quota is not None and t.used > t.quota}
    victims = []
    for h in snap.holders:
        if h.pool != demand.pool:
            continue
        if h.namespace == demand.namespace:
            ok = h.priority < demand.priority
        elif within:
            ok = h.namespace in over_teams
        else:
            ok = (
                h.namespace in over_teams
                and h.priority < demand.priority
                and h.priority <= BORROW_PREEMPT_THRESHOLD
            )
        if ok:
            victims.append(h)
    victims.sort(key=lambda h: (h.namespace == demand.namespace, h.priority, -h.gpus))
    sim = dict(free)
    chosen: list[str] = []
    for h in victims:
        for n, g in h.nodes.items():
            if n in sim:
                sim[n] += g
        chosen.append(h.label)
        if snap.fits(sim, demand):
            return PREEMPTION, "", tuple(chosen)

    # 4. Capacity or fragmentation; a gang (issue 31) says how many nodes it needs and how many have room.
    total_free = sum(max(f, 0) for f in free.values())
    if demand.pods > 1 and demand.gpus:
        domains = snap.domains(demand.pool, demand.level) if demand.level else None
        message = gang_wait_message(demand.pool, demand.pods, demand.gpus, free, demand.level, domains)
        return (CAPACITY if total_free < demand.total else FRAGMENTATION), message, ()
    if total_free < demand.total:
        return (
            CAPACITY,
            f"{demand.pool} has {total_free} of {sum(pool_nodes.values())} GPUs free, this job needs "
            f"{demand.total} (used by work within its teams' quotas)",
            (),
        )
    best = max(sorted(free), key=lambda n: free[n])
    return (
        FRAGMENTATION,
        f"no node in {demand.pool} has {demand.gpus} free GPUs (largest free: {free[best]} on {best}); "
        f"{total_free} free in all",
        (),
    )


def _names(labels: Sequence[str]) -> str:
    return ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")


def _by_count(
    snap: Snapshot,
    demand: Demand,
    within: bool,
    queued_ahead: Sequence[Demand],
    position: int,
    ahead: tuple[str, ...],
) -> Verdict:
    """Steps 2-4 for a caller who knows a pool's use only as Kueue counts it (Snapshot.pool_reserved):
    free = capacity - reserved; the team's jobs ahead take theirs in order; preemption counts the
    team's own lower-priority work and, within quota, what teams beyond their quota hold in the pool;
    whether one node holds each pod is Kueue's word (its message on the job's Workload)."""
    pool = demand.pool
    assert snap.pool_reserved is not None
    capacity = sum(snap.pool_nodes(pool).values())
    free = max(capacity - snap.pool_reserved.get(pool, 0), 0)
    left, took = free, []
    for d in queued_ahead:
        if d.label == demand.label or d.pool != pool or d.gpus <= 0 or d.total > left:
            continue
        left -= d.total
        took.append(d.label)
        if demand.total > left:
            if demand.total <= free:
                return Verdict(
                    False,
                    PRIORITY,
                    f"{_names(took)} (ahead in {demand.namespace}'s queue) take the free GPUs of "
                    f"{pool} first",
                    position,
                    ahead,
                )
            break
    if demand.total <= left:
        if demand.kueue_message:
            return Verdict(
                False,
                FRAGMENTATION,
                f"{free} of {capacity} GPUs of {pool} are free, enough in number, but Kueue has not placed "
                f"it: {demand.kueue_message}",
                position,
                ahead,
            )
        caveat = (
            f"if one node has {demand.gpus} free GPUs ({free} free in {pool}; per-node use needs a role "
            "that may list every pod)"
            if demand.gpus and demand.pods
            else ""
        )
        return Verdict(True, NONE, "", position, ahead, by_count=caveat)
    own = sorted(
        (h for h in snap.holders if h.namespace == demand.namespace and h.pool == pool),
        key=lambda h: (h.priority, -h.gpus),
    )
    victims = [h for h in own if h.priority < demand.priority]
    room = free + sum(h.gpus for h in victims)
    preempts = [h.label for h in victims]
    if within:
        for ns, t in sorted(snap.teams.items()):
            held = snap.team_pools.get(ns, {}).get(pool, 0)
            if ns != demand.namespace and t.quota is not None and t.used > t.quota and held:
                room += held
                preempts.append(f"{ns}'s work beyond its quota")
    if preempts and room >= demand.total:
        return Verdict(True, PREEMPTION, "", position, ahead, tuple(preempts))
    return Verdict(
        False,
        CAPACITY,
        f"{pool} has {free} of {capacity} GPUs free, this job needs {demand.total} "
        "(used by work within its teams' quotas)",
        position,
        ahead,
    )
