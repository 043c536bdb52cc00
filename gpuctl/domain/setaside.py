"""No starvation for multi-node jobs (docs/distributed.md, "No starvation"): which nodes to set
aside for the oldest waiting gang of a pool, and which to give back. Pure: objects in, a plan out;
gpuctl.server.setaside carries it out in `gpuctl serve --defrag POOLS`.

Kueue admits a smaller job past a gang that does not fit (BestEffortFIFO, and other teams' queues in any
case), so a stream of 1-GPU jobs can keep two whole nodes from ever being free at once. Setting nodes aside
stops that without preempting anything:

- **Who.** Per pool, the first waiting gang (a Workload in Kueue's queue whose pod set counts more than one
  pod) in Kueue's own order (priority, then age), that has waited `settle` seconds, whose pods tolerate
  its own set-aside, and that Kueue could admit on its team's own quota for every resource it charges:
  GPU equivalents, CPU and memory (a gang within its GPU quota but over its CPU quota can never be
  admitted, yet it held a whole pool). A team holds back others only for work its quota entitles it to.
  One gang per pool at a time; nothing for a gang that no domain of its pool could ever hold.
- **Which nodes.** N Ready nodes with room for one pod each when empty, inside one domain of the gang's
  required level (else of the smallest level that has N, else anywhere in the pool), those that become free
  first: the latest known end (maxRuntime) of what runs there, then the fewest GPUs in use, then by name.
- **What it does.** Two NoSchedule taints naming that one gang (runwhere.ai/set-aside=<namespace>,
  runwhere.ai/set-aside-job=<job>: gpuctl.domain.gang.set_aside_taints) that only its own pods tolerate:
  Kueue admits no other work there, another gang included, what runs there runs to its end, and
  the gang is admitted as soon as they are free.
- **Given back** when the gang holds quota, is deleted or stopped. A gang that comes first later (a higher
  priority) waits for the set-aside to end, as every other gang does (a high-priority 2 x 1-GPU
  gang that no free domain could hold displaced a 2 x 8 gang's set-aside and was admitted onto its nodes).
- **Ended** when its nodes have been free of other GPU work for `idle` seconds and Kueue still
  did not admit the gang (something else keeps it waiting), or when it has lasted `max_hold` seconds; the
  gang then gets no set-aside for `cooldown` seconds (its Workload's runwhere.ai/set-aside-ended), so the
  next gang and other work get their turn. Both ends are said: an Event on the Workload, its audit trail.
- **Stranded jobs requeued.** Kueue may admit a job onto a node in the moment the taint is being set (its
  scheduler decides from a cache the node's update reaches a little later), or have admitted it just
  before without its pod bound yet. Such a pod is pinned to the node (Kueue's nodeSelector) and can never
  be scheduled there while the taint stays, and its Workload holds that node's capacity in Kueue's books:
  the gang would wait for it and it for the gang, until its maxRuntime or waitForPodsReady's timeout.
  A pod that is unbound, pinned to a set-aside node, does not tolerate that gang's taints and is reported
  Unschedulable by the scheduler therefore has its Workload requeued (`stranded`): it never started,
  nothing is lost, it keeps its place. Another gang's pods included.
- **Squatters moved.** A pod holding GPUs on a node set aside for a gang that tolerates that
  gang's taints without being that gang's (a toleration of every set-aside, from before per-gang taints or
  past admission) has its Workload requeued the same way, whatever its priority (`squatters`).

**Any job shown a bound (docs/queueing.md "A bound gpuctl keeps").** A one-pod Job whose
Workload carries the start bound it was shown (runwhere.ai/starts-by) is held the same way from `lead`
seconds before that bound (not after `settle`): one node, the one where room for its pod comes first by the
known ends of what runs there. Same rules: one set-aside per pool at a time, in Kueue's order, its team's
quota must take it, the same ends (admitted, `idle`, `max_hold`, cooldown).

The bound: a gang starts at most `settle` + one reconcile interval + the longest remaining run time of the
jobs on the chosen nodes after it became the first waiting gang of its pool (plus Kueue's admission step),
within `max_hold`; jobs without a maxRuntime make that bound unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuctl.constants import (
    HOSTNAME_LABEL,
    KUEUE_WORKLOAD_ANNOTATION,
    QUOTA_CPU,
    QUOTA_CPU_PER_CORE,
    QUOTA_GPU,
    QUOTA_MEMORY,
    SET_ASIDE_BOUND_LEAD_SECONDS,
    SET_ASIDE_COOLDOWN_SECONDS,
    SET_ASIDE_ENDED_ANNOTATION,
    SET_ASIDE_IDLE_SECONDS,
    SET_ASIDE_MAX_SECONDS,
    SET_ASIDE_SINCE_ANNOTATION,
    TAS_REQUIRED,
)
from gpuctl.domain.backfill import held_bounds, ran_in_time
from gpuctl.domain.demand import job_label
from gpuctl.domain.gang import (
    level_domains,
    own_set_aside_tolerations,
    set_aside_for,
    tolerates_gangs_set_aside,
    workload_gang,
)
from gpuctl.domain.gpus import pod_gpus, pod_spec_gpu_units, pod_spec_gpus, pod_spec_request
from gpuctl.domain.objects import (
    annotations,
    condition,
    meta,
    name,
    namespace,
    owner_ref,
    owner_refs,
    parse_time,
    pod_finished,
)
from gpuctl.domain.pools import node_gpus, node_pool, node_ready
from gpuctl.domain.promise import one_pod_job, starts_by_of
from gpuctl.domain.teams import budget_shortfall, team_queues
from gpuctl.domain.workload import (
    HOLDING_QUOTA,
    IN_QUEUE,
    job_pool,
    pod_release_deadline,
    priority_value,
    topology_nodes,
    workload_state,
)


@dataclass(frozen=True)
class Gang:
    """A waiting multi-node Workload."""

    key: str  # namespace/job, as the node annotation records it
    namespace: str
    pool: str
    pods: int
    gpus: int  # per pod
    priority: int
    since: float
    level: str = ""  # required topology level ("": none)
    workload: str = ""  # namespace/name of its Workload
    blocked: str = ""  # why it gets no set-aside ("": it may)
    by: float | None = None  # a one-pod job: the start bound it was shown (runwhere.ai/starts-by)

    def ready(self, now: float, settle: float, lead: float) -> bool:
        """May it be held now: a gang once it has waited `settle`, a job shown a bound from `lead` before."""
        return now - self.since >= settle if self.by is None else now >= self.by - lead


@dataclass(frozen=True)
class Plan:
    hold: dict[str, str]  # node -> gang key: nodes to set aside (already or newly)
    release: tuple[str, ...]  # nodes set aside for a gang that no longer needs them
    why: dict[str, str]  # pool -> the decision, for logs and the metric
    requeue: dict[str, str] = field(default_factory=dict)  # Workload ns/name -> why (stranded, squatters)
    started: dict[str, tuple[str, ...]] = field(default_factory=dict)  # gang Workload ns/name -> new nodes
    ended: dict[str, str] = field(default_factory=dict)  # gang Workload ns/name -> why its set-aside ended
    idle_since: dict[str, float] = field(default_factory=dict)  # held gang -> since when its nodes are free
    since: dict[str, float] = field(default_factory=dict)  # held gang -> when its set-aside began


def ended_at(wl: Mapping[str, Any]) -> float | None:
    """When the Workload's last set-aside ended (runwhere.ai/set-aside-ended: "<RFC 3339> <why>")."""
    return parse_time((annotations(wl).get(SET_ASIDE_ENDED_ANNOTATION) or "").split(" ", 1)[0])


def ended_note(at: float, why: str, rfc3339: Any) -> str:
    """The runwhere.ai/set-aside-ended value (`ended_at` reads its time back)."""
    return f"{rfc3339(at)} {why}"


def _last_end(wl: Mapping[str, Any], ended: Mapping[str, float] | None) -> float | None:
    times = [t for t in (ended_at(wl), (ended or {}).get(f"{namespace(wl)}/{name(wl)}")) if t is not None]
    return max(times) if times else None


def gang_budget(pods: int, spec: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """What Kueue charges a team's budget for `pods` pods of this spec, in the ClusterQueue's units (the
    Kueue configuration's transformations: GPU equivalents in 1/840 GPU, milli-CPU, bytes)."""
    return {
        QUOTA_GPU: Decimal(pods * pod_spec_gpu_units(spec)),
        QUOTA_CPU: pods * pod_spec_request(spec, "cpu") * QUOTA_CPU_PER_CORE,
        QUOTA_MEMORY: pods * pod_spec_request(spec, "memory"),
    }


def waiting_gangs(
    workloads: Iterable[Mapping[str, Any]],
    cluster_queues: Sequence[Mapping[str, Any]],
    *,
    now: float | None = None,
    cooldown: float = SET_ASIDE_COOLDOWN_SECONDS,
    ended: Mapping[str, float] | None = None,
) -> list[Gang]:
    """Waiting gangs in Kueue's order, each with why it may get no set-aside (`Gang.blocked`): its pods do
    not tolerate its own set-aside, its team's quota cannot take it (any resource), or its last set-aside
    ended less than `cooldown` seconds before `now` (its Workload's annotation, or `ended`: Workload
    ns/name -> when)."""
    teams = team_queues(cluster_queues)
    out = []
    for wl in workloads:
        gang = workload_gang(wl)
        by = promised(wl) if gang is None else None
        if by is not None:
            gang = 1, pod_spec_gpus((wl["spec"]["podSets"][0].get("template") or {}).get("spec") or {})
        if workload_state(wl) not in IN_QUEUE or gang is None:
            continue
        template = wl["spec"]["podSets"][0].get("template") or {}
        pods, gpus = gang
        if gpus <= 0:
            continue
        ns = namespace(wl)
        job = (owner_ref(wl) or {}).get("name") or name(wl)
        blocked = ""
        if not own_set_aside_tolerations(template.get("spec"), ns, job):
            blocked = "its pods do not tolerate its own set-aside (a raw Indexed Job the policy missed)"
        elif short := budget_shortfall(teams.get(ns), gang_budget(pods, template.get("spec"))):
            blocked = f"over its team's quota, {short}: Kueue cannot admit it on its quota"
        elif now is not None and (t := _last_end(wl, ended)) is not None and now < t + cooldown:
            blocked = f"its last set-aside ended {now - t:.0f}s ago; none again for {cooldown:.0f}s"
        since = parse_time(meta(wl).get("creationTimestamp")) or 0.0
        level = annotations(template).get(TAS_REQUIRED, "")
        out.append(
            Gang(
                f"{ns}/{job}",
                ns,
                job_pool(wl) or "",
                pods,
                gpus,
                priority_value(wl),
                since,
                level,
                f"{ns}/{name(wl)}",
                blocked,
                by,
            )
        )
    return sorted(out, key=lambda g: (-g.priority, g.since, g.key))


def promised(wl: Mapping[str, Any]) -> float | None:
    """The start bound a one-pod Job's Workload was shown (runwhere.ai/starts-by), else None: what serve
    holds a node for (module docstring). Only a Job of one pod set of one pod: a Deployment's or a
    StatefulSet's pods do not tolerate a set-aside."""
    if not one_pod_job(wl):
        return None
    return starts_by_of(wl)


def _node_cost(node: str, pods_on: Mapping[str, list[Mapping[str, Any]]]) -> tuple[float, int, str]:
    """When the node is free at the latest (inf: unknown), then GPUs in use, then its name."""
    holding = [p for p in pods_on.get(node, []) if pod_gpus(p)]
    ends = [pod_release_deadline(p) for p in holding]
    end = 0.0 if not holding else (math.inf if None in ends else max(e for e in ends if e is not None))
    return end, sum(pod_gpus(p) for p in holding), node


def _room_at(node: Mapping[str, Any], gpus: int, pods_on: Mapping[str, list]) -> tuple[float, int, str]:
    """When `gpus` GPUs are free on the node at the latest (inf: unknown), by the known ends of what runs
    there (earliest first), then GPUs in use, then its name: a one-pod job's node."""
    holding = [p for p in pods_on.get(name(node), []) if pod_gpus(p)]
    free = node_gpus(node) - sum(pod_gpus(p) for p in holding)
    at = 0.0
    for end, g in sorted(
        ((e if e is not None else math.inf), pod_gpus(p)) for p in holding for e in [pod_release_deadline(p)]
    ):
        if free >= gpus:
            break
        free, at = free + g, end
    return at, node_gpus(node) - free, name(node)


def choose_nodes(
    gang: Gang, nodes: Sequence[Mapping[str, Any]], levels: Sequence[str], pods_on: Mapping[str, list]
) -> list[str] | None:
    """The gang's N nodes (module docstring), or None when no domain could ever hold it; a one-pod job's
    node: where room for it comes first (`_room_at`)."""
    fit = [n for n in nodes if node_gpus(n) >= gang.gpus]
    if gang.pods == 1:
        return [min(_room_at(n, gang.gpus, pods_on) for n in fit)[2]] if fit else None
    # The levels a domain may be taken from, smallest first: inside the required level, else any.
    if gang.level:
        ladder = list(levels[levels.index(gang.level) :][::-1]) if gang.level in levels else [gang.level]
    else:
        ladder = [*levels[::-1], ""]
    for level in ladder:
        domains = level_domains(fit, level) if level else {"": [name(n) for n in fit]}
        best: list[tuple[tuple, ...]] = []
        for members in domains.values():
            if len(members) >= gang.pods:
                costs = sorted(_node_cost(n, pods_on) for n in members)[: gang.pods]
                best.append((max(costs), tuple(c[2] for c in costs)))
        if best:
            return sorted(min(best)[1])
    return None


def _held_since(
    nodes: Sequence[Mapping[str, Any]], marked: Mapping[str, str], now: float
) -> dict[str, float]:
    """Gang -> when its set-aside began: the earliest runwhere.ai/set-aside-since of its nodes (a node set
    aside before that annotation existed counts from now)."""
    out: dict[str, float] = {}
    for n in nodes:
        gang = marked.get(name(n))
        if gang is not None:
            t = parse_time(annotations(n).get(SET_ASIDE_SINCE_ANNOTATION)) or now
            out[gang] = min(out.get(gang, t), t)
    return out


def plan_set_aside(
    nodes: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
    cluster_queues: Sequence[Mapping[str, Any]],
    levels: Mapping[str, Sequence[str]],
    *,
    pools: Sequence[str] | None,
    now: float,
    settle: float,
    idle: float = SET_ASIDE_IDLE_SECONDS,
    max_hold: float = SET_ASIDE_MAX_SECONDS,
    cooldown: float = SET_ASIDE_COOLDOWN_SECONDS,
    idle_since: Mapping[str, float] | None = None,
    recently_ended: Mapping[str, float] | None = None,
    lead: float = SET_ASIDE_BOUND_LEAD_SECONDS,
    bounds: bool = True,
) -> Plan:
    """Which nodes to hold for which gang, and which to give back (module docstring). `levels`: each
    pool's topology levels above the node (gpuctl.domain.gang.pool_topology); `pools`: None for all;
    `idle_since`: the last plan's (gang -> since when its held nodes are free: the caller keeps it);
    `recently_ended`: Workload ns/name -> when the caller ended its set-aside (its annotation may not have
    reached the caller's cache yet); `bounds`: also hold for one-pod jobs shown a bound (`lead` before it)."""
    pods_on: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:  # by node; "" holds the pods not bound yet
        if not pod_finished(p):
            pods_on.setdefault((p.get("spec") or {}).get("nodeName") or "", []).append(p)
    # Only its pools' nodes: another serve (other --defrag pools) holds the others.
    marked = {
        name(n): g for n in nodes if (g := set_aside_for(n)) and (pools is None or node_pool(n) in pools)
    }
    began = _held_since(nodes, marked, now)
    arriving = _arriving(workloads, pods_on)
    by_pool: dict[str, list[Gang]] = {}
    refused: dict[str, Gang] = {}
    for g in waiting_gangs(workloads, cluster_queues, now=now, cooldown=cooldown, ended=recently_ended):
        if g.pool and (pools is None or g.pool in pools) and (bounds or g.by is None):
            if g.blocked:
                refused.setdefault(g.pool, g)
            else:
                by_pool.setdefault(g.pool, []).append(g)
    hold: dict[str, str] = {}
    why: dict[str, str] = {
        pool: f"{g.key} gets no set-aside: {g.blocked}" for pool, g in refused.items() if pool not in by_pool
    }
    started: dict[str, tuple[str, ...]] = {}
    ended: dict[str, str] = {}
    idle_now: dict[str, float] = {}
    # Gangs and one-pod jobs shown a bound apart: one set-aside of each per pool (a stream of one-pod holds
    # must not keep a gang from its nodes, nor a gang's a job from its bound), gangs' first.
    groups: dict[tuple[str, bool], list[Gang]] = {}
    for pool, gangs in by_pool.items():
        for g in gangs:
            groups.setdefault((pool, g.by is not None), []).append(g)
    for (pool, bound), gangs in sorted(groups.items()):
        at = f"{pool} (start bounds)" if bound else pool  # the decision's key in `why`
        ready = [g for g in gangs if g.ready(now, settle, lead)]
        if not ready:
            g = gangs[0]
            why[at] = (
                f"{g.key} waits {now - g.since:.0f}s of {settle:.0f}s before nodes are set aside"
                if g.by is None
                else f"{g.key} is held from {lead:.0f}s before its start bound, in {g.by - lead - now:.0f}s"
            )
            continue
        # A set-aside, once made, is its gang's until it ends: a gang that comes first later (a higher
        # priority) waits for that, as every other gang does (no gang takes another's nodes).
        holder = next((g for g in ready if sum(1 for k in marked.values() if k == g.key) >= g.pods), None)
        if holder is not None:
            kept = sorted(n for n, k in marked.items() if k == holder.key)
            end = _end(
                holder, kept, pods_on, now, began.get(holder.key, now), idle, max_hold, idle_since or {},
                idle_now, {name(n): node_gpus(n) for n in nodes},
            )  # fmt: skip
            if not end:
                hold.update(dict.fromkeys(kept, holder.key))
                first = "" if ready[0] is holder else f"; {ready[0].key}, first in Kueue's order, waits"
                why[at] = f"holding {', '.join(kept)} for {holder.key}{first}"
                continue
            ended[holder.workload] = end
            why[at] = f"set-aside of {', '.join(kept)} for {holder.key} ended: {end}"
            continue
        for g in ready:  # the first gang some domain of the pool can hold, in Kueue's order
            candidates = [
                n
                for n in nodes
                if node_pool(n) == pool
                and node_ready(n)
                and marked.get(name(n)) in (None, g.key)
                and hold.get(name(n)) in (None, g.key)
                and (name(n) not in arriving or marked.get(name(n)) == g.key)
            ]
            chosen = choose_nodes(g, candidates, levels.get(pool, ()), pods_on)
            if chosen is None:
                why.setdefault(
                    at, f"no domain of {pool} can hold {g.key} ({g.pods} nodes with {g.gpus} GPUs)"
                )
                continue
            hold.update(dict.fromkeys(chosen, g.key))
            started[g.workload] = tuple(chosen)
            began[g.key] = now
            why[at] = f"set aside {', '.join(chosen)} for {g.key}"
            break
    release = tuple(sorted(n for n in marked if n not in hold))
    held = {n: g for n, g in marked.items() if hold.get(n) == g}
    requeue = {**squatters(pods_on, workloads, held), **stranded(pods_on.get("", []), workloads, held)}
    since = {g: t for g, t in began.items() if g in hold.values()}
    return Plan(hold, release, why, requeue, started, ended, idle_now, since)


def _arriving(
    workloads: Iterable[Mapping[str, Any]], pods_on: Mapping[str, list[Mapping[str, Any]]]
) -> set[str]:
    """Nodes where Kueue placed pods of a gang's Workload holding quota (its topology assignment) that are not
    bound there yet: they look free, but a set-aside made there now would keep those pods off (a gang
    admitted the moment its own set-aside was given back would be stranded by the next gang's). One-pod
    work is not waited for: a stream of it would keep every node "arriving" (test_starvation saw the
    gang's nodes split over two racks); such a pod, if stranded, is requeued before it started."""
    bound: dict[tuple[str, str], int] = {}
    for node, ps in pods_on.items():
        for p in ps if node else ():
            key = (f"{namespace(p)}/{annotations(p).get(KUEUE_WORKLOAD_ANNOTATION)}", node)
            bound[key] = bound.get(key, 0) + 1
    out = set()
    for w in workloads:
        if workload_state(w) in HOLDING_QUOTA and workload_gang(w) is not None:
            wkey = f"{namespace(w)}/{name(w)}"
            out.update(n for n, count in topology_nodes(w).items() if bound.get((wkey, n), 0) < count)
    return out


def _end(
    g: Gang,
    kept: Sequence[str],
    pods_on: Mapping[str, list[Mapping[str, Any]]],
    now: float,
    began: float,
    idle: float,
    max_hold: float,
    idle_since: Mapping[str, float],
    idle_now: dict[str, float],
    capacity: Mapping[str, int] | None = None,
) -> str:
    """Why gang g's set-aside of `kept` ends now ("" while it holds); notes in `idle_now` since when its
    nodes are free of other GPU work (a one-pod job's: have room for it; `capacity`: node -> GPUs)."""
    capacity = capacity or {}
    if now - began >= max_hold:
        return f"it lasted {now - began:.0f}s, the most a set-aside lasts ({max_hold:.0f}s)"
    if g.pods == 1:  # a one-pod job's node: room for it, not free of all work
        node_gpus_of = {n: sum(pod_gpus(p) for p in pods_on.get(n, [])) for n in kept}
        if any(capacity.get(n, 0) - used < g.gpus for n, used in node_gpus_of.items()):
            return ""
    elif any(pod_gpus(p) for n in kept for p in pods_on.get(n, [])):
        return ""
    free_from = idle_now[g.key] = idle_since.get(g.key, now)
    if now - free_from >= idle:
        return (
            f"its nodes were free for {now - free_from:.0f}s and Kueue did not admit it (something else "
            "keeps it waiting: see `gpuctl describe job`)"
        )
    return ""


def _workload_of(pod: Mapping[str, Any], by_key: Mapping[str, Mapping[str, Any]], by_owner: Mapping) -> Any:
    """The Workload a pod runs for: Kueue's annotation (TAS), else its controller's Workload."""
    ns = namespace(pod)
    wl = by_key.get(f"{ns}/{annotations(pod).get(KUEUE_WORKLOAD_ANNOTATION)}")
    if wl is None:
        for o in owner_refs(pod):
            wl = by_owner.get((ns, o.get("uid")))
            if wl is not None:
                break
    return wl


def squatters(
    pods_on: Mapping[str, list[Mapping[str, Any]]],
    workloads: Iterable[Mapping[str, Any]],
    held: Mapping[str, str],
) -> dict[str, str]:
    """Workloads (ns/name -> why) holding quota whose pod holds GPUs on a node set aside for a gang (`held`:
    node -> gang) and tolerates that gang's taints without being that gang's: moved, whatever its priority
    (module docstring, "Squatters moved"), but for backfill serve granted onto a node held for a start bound
    that ends by it (gpuctl.domain.backfill.ran_in_time). Pods that do not tolerate the taints ran there
    before the set-aside: they run to their end."""
    wls = list(workloads)
    bounds = held_bounds(wls, held)
    by_key = {f"{namespace(w)}/{name(w)}": w for w in wls}
    by_owner = {(namespace(w), o.get("uid")): w for w in wls for o in owner_refs(w)}
    out: dict[str, str] = {}
    for node, gang in held.items():
        for p in pods_on.get(node, []):
            if not pod_gpus(p) or not tolerates_gangs_set_aside(p.get("spec"), gang):
                continue
            wl = _workload_of(p, by_key, by_owner)
            if wl is None or job_label(wl) == gang or workload_state(wl) not in HOLDING_QUOTA:
                continue
            if gang in bounds and ran_in_time(wl, bounds[gang][1]):  # backfill: ends before the bound
                continue
            out[f"{namespace(wl)}/{name(wl)}"] = (
                f"requeued by gpuctl: its pod {name(p)} ran on {node}, set aside for {gang}, whose taints it "
                "tolerates without being that job's; it keeps its place in the queue"
            )
    return out


def stranded(
    pods: Iterable[Mapping[str, Any]], workloads: Iterable[Mapping[str, Any]], held: Mapping[str, str]
) -> dict[str, str]:
    """Workloads (ns/name -> why) holding quota whose pod Kueue pinned to a node set aside (`held`: node ->
    gang), that the scheduler reports Unschedulable there and that does not tolerate that gang's taints
    (another gang's pods included), never started. Requeuing them is the only way out (module docstring,
    "Stranded jobs requeued")."""
    by_key = {f"{namespace(w)}/{name(w)}": w for w in workloads}
    out: dict[str, str] = {}
    for p in pods:
        node = ((p.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME_LABEL)
        wl = by_key.get(f"{namespace(p)}/{annotations(p).get(KUEUE_WORKLOAD_ANNOTATION)}")
        scheduled = condition(p, "PodScheduled")
        if (
            node not in held
            or (p.get("spec") or {}).get("nodeName")
            or wl is None
            or workload_state(wl) not in HOLDING_QUOTA
            or scheduled.get("status") != "False"
            or scheduled.get("reason") != "Unschedulable"
            or tolerates_gangs_set_aside(p.get("spec"), held[node])
        ):
            continue
        out[f"{namespace(wl)}/{name(wl)}"] = (
            f"requeued by gpuctl: admitted onto {node} as it was set aside for {held[node]}, "
            "where its pod cannot start; it never ran and keeps its place in the queue"
        )
    return out
