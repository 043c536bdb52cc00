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

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuctl.constants import BORROW_PREEMPT_THRESHOLD, GPU_UNITS
from gpuctl.domain.demand import Demand, demand_of_pod_template, pod_demand, workload_demand
from gpuctl.domain.gang import gang_wait_message
from gpuctl.domain.pools import node_gpu_type, node_gpus, node_pool
from gpuctl.domain.sharing import profile_of_resource, units_to_gpus
from gpuctl.domain.snapshot import ClusterSnapshot, _fits, _Holder, _place, _Team
from gpuctl.quantity import format_bytes, format_quantity

__all__ = [
    "ClusterSnapshot",
    "Demand",
    "Snapshot",
    "Verdict",
    "_fits",
    "_place",
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
    # docs/queueing.md, "Jobs that may run in any pool": for a job of no single pool, the pool it would start
    # in
    pool: str = ""

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


class Snapshot(ClusterSnapshot):
    """The cluster state (gpuctl.domain.snapshot) with the verdict for a demand."""

    def verdict(self, demand: Demand) -> Verdict:
        return _verdict(self, demand)


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
        borrowed = max(team.used_units - quota, 0)
        if not borrowed:
            may = f"may borrow {team.borrowing_limit}"
        else:  # what it borrows already, and so how much more it may: never the limit as if none were used
            more = max(team.borrowing_limit * GPU_UNITS - borrowed, 0)
            may = f"borrows {gpus(borrowed)} of the {team.borrowing_limit} it may borrow ({gpus(more)} more)"
        used = f"{demand.namespace} uses {team.used} of its {team.quota} GPUs"
        return f"{used} and {may}; this job needs {gpus(need)}"
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
    # Units each team holds beyond its quota: another team's work is a candidate only while its team is
    # still beyond (Kueue re-checks after every victim: classical/candidate_generator.go, candidateIsValid).
    excess = {
        ns: t.used_units - t.quota * GPU_UNITS
        for ns, t in snap.teams.items()
        if t.quota is not None and t.used_units > t.quota * GPU_UNITS
    }
    over_teams = set(excess)
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
    chosen: list[_Holder] = []
    for h in victims:
        if h.namespace != demand.namespace:
            if excess.get(h.namespace, 0) <= 0:
                continue  # its team is back within its quota: Kueue takes no more of it
            excess[h.namespace] -= h.units or h.gpus * GPU_UNITS
        _give(sim, h, +1)
        chosen.append(h)
        if snap.fits(sim, demand):
            # Kueue's fill-back (preemption.go, fillBackWorkloads): each victim but the last, newest choice
            # first, stays when the job fits without its GPUs.
            for v in reversed(chosen[:-1]):
                _give(sim, v, -1)
                if snap.fits(sim, demand):
                    chosen.remove(v)
                else:
                    _give(sim, v, +1)
            return PREEMPTION, "", tuple(v.label for v in chosen)

    # 4. Capacity or fragmentation; a gang (docs/distributed.md) says how many nodes it needs and how many
    # have room.
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


def _give(free: dict[str, int], h: _Holder, sign: int) -> None:
    """Free (sign +1) or take back (-1) the GPUs a holder has on the nodes in `free`."""
    for n, g in h.nodes.items():
        if n in free:
            free[n] += sign * g


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
