"""No starvation for multi-node jobs (docs/distributed.md, "No starvation"): which nodes to set
aside for the oldest waiting gang of a pool, and which to give back. Pure: objects in, a plan out;
gpuctl.server.setaside carries it out in `gpuctl serve --defrag POOLS`.

Kueue admits a smaller job past a gang that does not fit (BestEffortFIFO, and other teams' queues in any
case), so a stream of 1-GPU jobs can keep two whole nodes from ever being free at once. Setting nodes aside
stops that without preempting anything:

- **Who.** Per pool, the first waiting gang (a Workload in Kueue's queue whose pod set counts more than one
  pod) in Kueue's own order (priority, then age), that has waited `settle` seconds and whose team is within
  its GPU quota with it (a team can hold back others only for work its quota entitles it to). One gang per
  pool at a time; nothing for a gang that no domain of its pool could ever hold.
- **Which nodes.** N Ready nodes with room for one pod each when empty, inside one domain of the gang's
  required level (else of the smallest level that has N, else anywhere in the pool), those that become free
  first: the latest known end (maxRuntime) of what runs there, then the fewest GPUs in use, then by name.
- **What it does.** A NoSchedule taint (runwhere.ai/set-aside) that only gangs tolerate: Kueue admits no new
  non-gang work there, what runs there runs to its end, and the gang is admitted as soon as they are free.
- **Given back** when the gang holds quota, is deleted or stopped, or another gang now comes first.
- **Stranded jobs requeued.** Kueue may admit a job onto a node in the moment the taint is being set (its
  scheduler decides from a cache the node's update reaches a little later), or have admitted it just
  before without its pod bound yet. Such a pod is pinned to the node (Kueue's nodeSelector) and can never
  be scheduled there while the taint stays, and its Workload holds that node's capacity in Kueue's books:
  the gang would wait for it and it for the gang, until its maxRuntime or waitForPodsReady's timeout.
  A non-gang pod that is unbound, pinned to a set-aside node and reported Unschedulable by the scheduler
  therefore has its Workload requeued (`stranded`): it never started, nothing is lost, it keeps its place.

The bound: a gang starts at most `settle` + one reconcile interval + the longest remaining run time of the
jobs on the chosen nodes after it became the first waiting gang of its pool (plus Kueue's admission step);
jobs without a maxRuntime make that bound unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.constants import (
    HOSTNAME_LABEL,
    KUEUE_WORKLOAD_ANNOTATION,
    TAS_REQUIRED,
)
from gpuctl.domain.gang import level_domains, set_aside_for, tolerates_set_aside, workload_gang
from gpuctl.domain.gpus import pod_gpus
from gpuctl.domain.objects import (
    annotations,
    condition,
    meta,
    name,
    namespace,
    owner_ref,
    parse_time,
    pod_finished,
)
from gpuctl.domain.pools import node_gpus, node_pool, node_ready
from gpuctl.domain.teams import team_budgets, team_reserved_gpus
from gpuctl.domain.workload import (
    HOLDING_QUOTA,
    IN_QUEUE,
    job_pool,
    pod_release_deadline,
    priority_value,
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


@dataclass(frozen=True)
class Plan:
    hold: dict[str, str]  # node -> gang key: nodes to set aside (already or newly)
    release: tuple[str, ...]  # nodes set aside for a gang that no longer needs them
    why: dict[str, str]  # pool -> the decision, for logs and the metric
    requeue: dict[str, str] = field(default_factory=dict)  # Workload ns/name -> why (`stranded`)


def waiting_gangs(
    workloads: Iterable[Mapping[str, Any]], cluster_queues: Sequence[Mapping[str, Any]]
) -> list[Gang]:
    """Waiting gangs whose team is within its GPU quota with them, in Kueue's order."""
    budgets, used = team_budgets(cluster_queues), team_reserved_gpus(cluster_queues)
    out = []
    for wl in workloads:
        gang = workload_gang(wl)
        if workload_state(wl) not in IN_QUEUE or gang is None:
            continue
        template = wl["spec"]["podSets"][0].get("template") or {}
        if not tolerates_set_aside(template.get("spec")):
            continue  # its pods could not use the nodes set aside (a raw Indexed Job the policy missed)
        pods, gpus = gang
        ns = meta(wl).get("namespace", "")
        quota = budgets[ns].gpu if ns in budgets else 0
        if gpus <= 0 or (quota is not None and used.get(ns, 0) + pods * gpus > quota):
            continue
        key = f"{ns}/{(owner_ref(wl) or {}).get('name') or name(wl)}"
        since = parse_time(meta(wl).get("creationTimestamp")) or 0.0
        level = annotations(template).get(TAS_REQUIRED, "")
        out.append(Gang(key, ns, job_pool(wl) or "", pods, gpus, priority_value(wl), since, level))
    return sorted(out, key=lambda g: (-g.priority, g.since, g.key))


def _node_cost(node: str, pods_on: Mapping[str, list[Mapping[str, Any]]]) -> tuple[float, int, str]:
    """When the node is free at the latest (inf: unknown), then GPUs in use, then its name."""
    holding = [p for p in pods_on.get(node, []) if pod_gpus(p)]
    ends = [pod_release_deadline(p) for p in holding]
    end = 0.0 if not holding else (math.inf if None in ends else max(e for e in ends if e is not None))
    return end, sum(pod_gpus(p) for p in holding), node


def choose_nodes(
    gang: Gang, nodes: Sequence[Mapping[str, Any]], levels: Sequence[str], pods_on: Mapping[str, list]
) -> list[str] | None:
    """The gang's N nodes (module docstring), or None when no domain could ever hold it."""
    fit = [n for n in nodes if node_gpus(n) >= gang.gpus]
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
) -> Plan:
    """Which nodes to hold for which gang, and which to give back (module docstring). `levels`: each
    pool's topology levels above the node (gpuctl.domain.gang.pool_topology); `pools`: None for all."""
    pods_on: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:  # by node; "" holds the pods not bound yet
        if not pod_finished(p):
            pods_on.setdefault((p.get("spec") or {}).get("nodeName") or "", []).append(p)
    marked = {name(n): g for n in nodes if (g := set_aside_for(n))}
    first: dict[str, Gang] = {}
    for g in waiting_gangs(workloads, cluster_queues):
        if g.pool and (pools is None or g.pool in pools):
            first.setdefault(g.pool, g)
    hold: dict[str, str] = {}
    why: dict[str, str] = {}
    for pool, g in sorted(first.items()):
        if now - g.since < settle:
            why[pool] = f"{g.key} waits {now - g.since:.0f}s of {settle:.0f}s before nodes are set aside"
            continue
        kept = [n for n, k in marked.items() if k == g.key]
        if len(kept) >= g.pods:
            hold.update(dict.fromkeys(kept, g.key))
            why[pool] = f"holding {', '.join(sorted(kept))} for {g.key}"
            continue
        candidates = [
            n
            for n in nodes
            if node_pool(n) == pool and node_ready(n) and marked.get(name(n)) in (None, g.key)
        ]
        chosen = choose_nodes(g, candidates, levels.get(pool, ()), pods_on)
        if chosen is None:
            why[pool] = f"no domain of {pool} can hold {g.key} ({g.pods} nodes with {g.gpus} GPUs)"
            continue
        hold.update(dict.fromkeys(chosen, g.key))
        why[pool] = f"set aside {', '.join(chosen)} for {g.key}"
    release = tuple(sorted(n for n in marked if n not in hold))
    held = {n: g for n, g in marked.items() if hold.get(n) == g}
    return Plan(hold, release, why, stranded(pods_on.get("", []), workloads, held))


def stranded(
    pods: Iterable[Mapping[str, Any]], workloads: Iterable[Mapping[str, Any]], held: Mapping[str, str]
) -> dict[str, str]:
    """Workloads (ns/name -> why) holding quota whose pod Kueue pinned to a node set aside (`held`: node ->
    gang), that the scheduler reports Unschedulable there: not a gang (gangs tolerate the taint), never
    started. Requeuing them is the only way out (module docstring, "Stranded jobs requeued")."""
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
            or workload_gang(wl) is not None
        ):
            continue
        out[f"{namespace(wl)}/{name(wl)}"] = (
            f"requeued by gpuctl: admitted onto {node} as it was set aside for {held[node]}, "
            "where its pod cannot start; it never ran and keeps its place in the queue"
        )
    return out
