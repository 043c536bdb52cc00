"""The cluster state a "when will it run" verdict is judged against (gpuctl.domain.explain): who holds
which GPUs on which node, each team's quota and use, each team's waiting jobs in Kueue's order, and
what one command's verdicts share (memoized). Pure: plain dicts in.

Built once per command by `ClusterSnapshot.build` (per node, from every unfinished pod) or with
`pool_reserved` (by count, from the caller's own pods and the ClusterQueues' reservations); the
verdict itself is gpuctl.domain.explain's, and gpuctl.domain.estimate replays the same state forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Self

from gpuctl.constants import GPU_RESOURCE, GPU_UNITS
from gpuctl.domain.demand import (
    Demand,
    _per_pod,
    pod_demand,
    pod_owner_label,
    workload_demand,
    workload_slices,
)
from gpuctl.domain.gang import fits_in_one, level_domains
from gpuctl.domain.gpus import pod_gpus, pod_spec_gpu_requests, pod_spec_gpu_units
from gpuctl.domain.objects import is_gpuctl_object, meta, name, pod_finished
from gpuctl.domain.pools import node_allocatable, node_gpus, node_pool, node_ready
from gpuctl.domain.sharing import units_to_gpus
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
    # docs/sharing.md, "One budget": budget held in 1/GPU_UNITS GPU (slices count their share), and slices
    # held in its pool (slice resource -> count); what gpuctl.domain.estimate releases at its end.
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
class ClusterSnapshot:
    """The cluster state every verdict is judged against, built once per command
    (gpuctl.domain.explain.Snapshot adds the verdict)."""

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
    # docs/sharing.md: slice resource -> node -> namespace -> slices bound pods hold there.
    slice_use: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # By count: pool -> slice resource -> slices in use, as gpuctl serve counted them (docs/sharing.md).
    slices_published: dict[str, dict[str, int]] = field(default_factory=dict)

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
        now: float | None = None,
    ) -> Self:
        """pods: every unfinished pod bound to a node (GPU use per node, and which job holds it) and the
        pods waiting at Kueue's gate; with pool_reserved (pool -> GPUs Kueue reserved there,
        gpuctl.domain.teams.pool_reservations), only the caller's own pods and Workloads, judged by
        count (the module docstring). workloads: those at hand, not necessarily all (listing every
        Workload costs several times more than listing every pod: CRDs are served as JSON); a waiting
        one orders its team's queue, a holding one adds its TAS placement of pods not bound yet. A
        team's use is its ClusterQueue's status (Kueue's count), else the sum of what its jobs hold. now:
        when the pods were read (a bound pod without a startTime yet ends by now plus its maxRuntime)."""
        holders, waiting, tas_used, known = _from_workloads(workloads)
        pool_of = {name(n): node_pool(n) or "" for n in nodes}
        pods_seen = _from_pods(pods, pool_of, known, now)
        holders += pods_seen.held.values()
        for group in pods_seen.gated.values():
            d = pod_demand(group[0], len(group))
            waiting.setdefault(d.namespace, []).append(d)
        teams = _teams(cluster_queues)
        reserved = team_reserved_units(cluster_queues)
        for ns, t in teams.items():
            units = reserved.get(ns)
            t.used_units = (
                sum(h.units or h.gpus * GPU_UNITS for h in holders if h.namespace == ns)
                if units is None
                else units
            )
            t.used = units_to_gpus(t.used_units)
        bound = pods_seen.bound
        used = {n: max(tas_used.get(n, 0), bound.get(n, 0)) for n in set(tas_used) | set(bound)}
        snap = cls(list(nodes), teams, holders, waiting, used, cohort_budget_gpus(cohort))
        snap.slice_use = pods_seen.slice_use
        if pool_reserved is not None:
            snap.pool_reserved = dict(pool_reserved)
            snap.slices_published = {p: dict(u) for p, u in (slices_published or {}).items() if u is not None}
            snap.team_pools = {
                name(cq): team_usage(cq).pool_gpus for cq in cluster_queues if is_gpuctl_object(cq)
            }
        return snap

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
        """Room for the demand's pods, each on one node; a gang with a required level (docs/distributed.md) in
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


def _from_workloads(
    workloads: Sequence[Mapping[str, Any]],
) -> tuple[list[_Holder], dict[str, list[Demand]], dict[str, int], set[str]]:
    """What the Workloads at hand say: the holders (with their TAS placement), each team's waiting jobs,
    GPUs placed per node by TAS, and the jobs (namespace/owner) they describe."""
    holders: list[_Holder] = []
    waiting: dict[str, list[Demand]] = {}
    tas_used: dict[str, int] = {}
    known: set[str] = set()
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
    return holders, waiting, tas_used, known


@dataclass
class _PodsSeen:
    bound: dict[str, int] = field(default_factory=dict)  # node -> GPUs its unfinished pods request
    held: dict[str, _Holder] = field(
        default_factory=dict
    )  # job -> what its bound pods hold (no Workload at hand)
    gated: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)  # job -> its pods at Kueue's gate
    slice_use: dict[str, dict[str, dict[str, int]]] = field(
        default_factory=dict
    )  # resource -> node -> ns -> n


def _from_pods(
    pods: Sequence[Mapping[str, Any]], pool_of: Mapping[str, str], known: set[str], now: float | None
) -> _PodsSeen:
    """What the unfinished pods say: GPUs bound per node, slices per node and namespace, the holders no
    Workload at hand describes (ending with their last pod's maxRuntime), and the gated pods by job."""
    out = _PodsSeen()
    for p in pods:
        if pod_finished(p):
            continue
        node = (p.get("spec") or {}).get("nodeName")
        label = pod_owner_label(p)
        if not node:
            if is_gated(p) and label not in known:
                out.gated.setdefault(label, []).append(p)
            continue
        ns = meta(p).get("namespace", "")
        slices = {r: n for r, n in pod_spec_gpu_requests(p.get("spec")).items() if r != GPU_RESOURCE}
        for r, n in slices.items():
            by_ns = out.slice_use.setdefault(r, {}).setdefault(node, {})
            by_ns[ns] = by_ns.get(ns, 0) + n
        g = pod_gpus(p)
        out.bound[node] = out.bound.get(node, 0) + g
        if (g or slices) and label not in known:
            h = out.held.get(label)
            if h is None:
                h = out.held[label] = _Holder(
                    label, ns, labelled_priority_value(p), 0, {}, pool_of.get(node, ""), -math.inf
                )
            # A job's end: its last pod's (a pod without a maxRuntime: unknown).
            end = pod_release_deadline(p, now)
            h.ends_by = None if end is None or h.ends_by is None else max(h.ends_by, end)
            h.gpus += g
            if g:
                h.nodes[node] = h.nodes.get(node, 0) + g
            h.units += pod_spec_gpu_units(p.get("spec"))
            for r, n in slices.items():
                h.slices[r] = h.slices.get(r, 0) + n
    return out
