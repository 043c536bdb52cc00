"""Defragmentation: which running jobs to move so that a waiting job gets a node (docs/queueing.md,
"Defragmentation").

Kueue admits a pod only where one node of its pool holds it (Topology Aware Scheduling) and never
preempts to consolidate: an 8-GPU pod waits while 4 GPUs are free on each of two 8-GPU nodes. When a
waiting job is within its team's quota and its pool has the GPUs free in total but no node holds a pod
of it, `plan_move` picks one node and the running jobs on it to move away: the fewest jobs, then the
lowest priorities, then the most recently started (the least work lost), and only jobs that fit on the
pool's other nodes' free GPUs once moved (a move is a consolidation, never a preemption: no moved job
is left waiting for room). gpuctl.server.defrag carries it out through Kueue (the Workload is
deactivated, then reactivated: Kueue requeues it and places it again).

Rules (docs/queueing.md, "Defragmentation"):
- only pools where it is enabled, only a waiter within its team's quota that has waited `settle`
  seconds (Kueue had its chance to admit or preempt for it), nothing while a pod of the pool is
  terminating or a job of the pool is being placed (a previous move or preemption is not over);
- movable: a training job (batch Job) admitted and running, of priority at most the waiter's, that is
  not the waiter's own; never another team's work within its quota to make room for work beyond the
  waiter's team quota (the waiter is within quota by the first rule, the check is kept explicit);
- at most `cap` jobs moved per window (one hour) in all, a plan that would pass it is not made;
- not steerable by one tenant against another (docs/security.md, the attacks before and after): a job
  moved within the window is not moved again (each move restarts it), and the waiters of one team cause
  at most `team_cap` moves per window (the team a move was made for is on the moved Workload), so one
  team's submissions can neither move another team's job again and again nor use up the cap of every
  team.

Pure: plain dataclasses in, a Plan (or None with why) out; `inputs_from_objects` builds them from
Kubernetes objects (Nodes, Pods, Workloads, ClusterQueues).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuctl.constants import (
    DEFRAG_MAX_VICTIMS,
    DEFRAG_MOVED_ANNOTATION,
    DEFRAG_MOVED_AT_ANNOTATION,
    DEFRAG_MOVED_FOR_TEAM_ANNOTATION,
    DEFRAG_MOVES_PER_TEAM_PER_HOUR,
    DEFRAG_REACTIVATE_ANNOTATION,
    DEFRAG_WINDOW_SECONDS,
    KUEUE_WORKLOAD_ANNOTATION,
)
from gpuctl.domain.gpus import pod_gpus, pod_holds_gpus, pod_spec_gpus
from gpuctl.domain.objects import annotations, condition, meta, name, namespace, owner_ref, parse_time
from gpuctl.domain.pools import node_gpus, node_pool, node_ready
from gpuctl.domain.teams import team_budgets, team_reserved_gpus
from gpuctl.domain.workload import (
    HOLDING_QUOTA,
    IN_QUEUE,
    job_pool,
    priority_value,
    quota_reserved_at,
    workload_state,
)


@dataclass(frozen=True)
class Running:
    """An admitted job holding GPUs on nodes."""

    key: str  # namespace/workload
    job: str  # namespace/job name, for messages
    team: str
    priority: int
    started: float  # when Kueue admitted it (quota reserved)
    gpus_by_node: Mapping[str, int]
    pod_gpus: tuple[int, ...]  # GPUs of each of its pods (what must fit elsewhere)
    movable: bool = True
    team_within_quota: bool = False  # its team uses no more than its quota
    moved_at: float | None = None  # when defragmentation last moved it (runwhere.ai/moved-at)


@dataclass(frozen=True)
class Waiting:
    key: str
    job: str
    team: str
    priority: int
    pool: str
    pods: tuple[int, ...]  # GPUs of each pod
    since: float
    within_quota: bool  # its team's usage plus it fit the team's quota


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    gpus: int  # allocatable, 0 when not Ready


@dataclass
class Inputs:
    nodes: list[Node] = field(default_factory=list)
    running: list[Running] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    busy_pools: set[str] = field(default_factory=set)  # a pod terminating / a job being placed


@dataclass(frozen=True)
class Plan:
    waiter: Waiting
    pool: str
    node: str
    victims: tuple[Running, ...]

    def reason(self) -> str:
        """What a moved job's users read (`describe job`)."""
        need = sum(self.waiter.pods)
        return (
            f"moved to make room for {self.waiter.job} ({need} GPUs, {len(self.waiter.pods)} pod(s)) on "
            f"{self.node} in pool {self.pool}: its pool's free GPUs were spread over several nodes"
        )


def fits(pods: Iterable[int], room: Mapping[str, int]) -> dict[str, int] | None:
    """Place `pods` (GPUs each), largest first, each on the fullest node that still holds it (as TAS
    places them); the room left, or None when one does not fit."""
    left = dict(room)
    for g in sorted(pods, reverse=True):
        if g <= 0:
            continue
        best = min((n for n, r in left.items() if r >= g), key=lambda n: (left[n], n), default=None)
        if best is None:
            return None
        left[best] -= g
    return left


def _free(nodes: Sequence[Node], running: Sequence[Running]) -> dict[str, int]:
    free = {n.name: n.gpus for n in nodes}
    for r in running:
        for node, g in r.gpus_by_node.items():
            if node in free:
                free[node] -= g
    return {n: max(v, 0) for n, v in free.items()}


def _may_move(v: Running, w: Waiting) -> bool:
    if not v.movable or v.key == w.key or v.priority > w.priority:
        return False
    # Never another team's within-quota work for work beyond its own team's quota.
    return not (v.team != w.team and v.team_within_quota and not w.within_quota)


def _cost(victims: Sequence[Running]) -> tuple:
    """Fewest, then lowest priority, then most recently started (least lost work), then fewest GPUs."""
    return (
        len(victims),
        max((v.priority for v in victims), default=0),
        sum(v.priority for v in victims),
        -min((v.started for v in victims), default=0.0),
        sum(sum(v.pod_gpus) for v in victims),
    )


def plan_for(w: Waiting, nodes: Sequence[Node], running: Sequence[Running]) -> Plan | None:
    """The cheapest plan that frees one node of `w.pool` for `w`, or None."""
    pool_nodes = [n for n in nodes if n.pool == w.pool and n.gpus > 0]
    names = {n.name for n in pool_nodes}
    here = [r for r in running if names & set(r.gpus_by_node)]
    free = _free(pool_nodes, here)
    if fits(w.pods, free) is not None:
        return None  # it fits: Kueue admits it, nothing to move
    if sum(free.values()) < sum(w.pods):
        return None  # not fragmentation: the pool lacks the GPUs
    best: tuple[tuple, Plan] | None = None
    for node in sorted(names):
        candidates = [r for r in here if r.gpus_by_node.get(node) and _may_move(r, w)]
        candidates.sort(key=lambda r: (r.priority, -r.started, r.key))
        for k in range(1, min(len(candidates), DEFRAG_MAX_VICTIMS) + 1):
            found: tuple[tuple, Plan] | None = None
            for victims in itertools.combinations(candidates, k):
                cost = _cost(victims)
                if found is not None and cost >= found[0]:
                    continue
                room = dict(free)
                for v in victims:
                    for n, g in v.gpus_by_node.items():
                        if n in room:
                            room[n] += g
                # The moved jobs go back on the other nodes (Kueue places them on the fullest node
                # that holds them), then the waiter must fit on what is left, this node included.
                left = fits(
                    [g for v in victims for g in v.pod_gpus], {n: r for n, r in room.items() if n != node}
                )
                if left is None or fits(w.pods, {**left, node: room[node]}) is None:
                    continue
                found = (cost, Plan(w, w.pool, node, tuple(victims)))
            if found is not None:
                if best is None or found[0] < best[0]:
                    best = found
                break  # more victims on this node only cost more
    return best[1] if best else None


def plan_move(
    inputs: Inputs,
    *,
    pools: Iterable[str] | None,
    now: float,
    settle: float,
    moved_in_window: int,
    cap: int,
    moved_for_team: Mapping[str, int] | None = None,
    team_cap: int = DEFRAG_MOVES_PER_TEAM_PER_HOUR,
    window: float = DEFRAG_WINDOW_SECONDS,
) -> tuple[Plan | None, str]:
    """At most one move (one node freed) per call: (plan, "") or (None, why not). `pools`: where it is
    enabled (None: every pool); moved_for_team: moves made for each team's waiters within the window."""
    enabled = None if pools is None else set(pools)
    for_team = moved_for_team or {}
    why = "no job waits for a node"
    rested = [
        replace(r, movable=False) if r.moved_at is not None and now - r.moved_at < window else r
        for r in inputs.running
    ]
    order = sorted(inputs.waiting, key=lambda w: (-w.priority, w.since, w.key))
    for w in order:
        if enabled is not None and w.pool not in enabled:
            why = f"defragmentation is off in pool {w.pool}"
            continue
        if not w.within_quota:
            why = f"{w.job} is beyond its team's quota"
            continue
        if now - w.since < settle:
            why = f"{w.job} has waited less than {settle:g} s"
            continue
        if w.pool in inputs.busy_pools:
            why = f"pool {w.pool} is still settling (a pod terminating or a job being placed)"
            continue
        plan = plan_for(w, inputs.nodes, rested)
        if plan is None:
            why = f"no node of {w.pool} can be freed for {w.job} by moving jobs that fit elsewhere"
            why += " (a job moved within the hour is not moved again)" if rested != inputs.running else ""
            continue
        if for_team.get(w.team, 0) + len(plan.victims) > team_cap:
            why = f"team {w.team}'s jobs had {for_team.get(w.team, 0)} of their {team_cap} moves this hour"
            continue
        if moved_in_window + len(plan.victims) > cap:
            return None, f"cap reached: {moved_in_window} of {cap} moves this hour"
        return plan, ""
    return None, why


# ----------------------------------------------------------------------------- from objects
def _team_within(cluster_queues: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, int | None]]:
    used = team_reserved_gpus(cluster_queues)
    quota = {ns: q.gpu for ns, q in team_budgets(cluster_queues).items()}
    return used, quota


def _workload_key(wl: Mapping[str, Any]) -> str:
    return f"{namespace(wl)}/{name(wl)}"


def _job_name(wl: Mapping[str, Any]) -> str:
    owner = owner_ref(wl)
    return f"{namespace(wl)}/{owner.get('name')}" if owner else _workload_key(wl)


def _owner_kind(wl: Mapping[str, Any]) -> str:
    return str((owner_ref(wl) or {}).get("kind") or "")


def _pod_set_gpus(wl: Mapping[str, Any]) -> tuple[int, ...]:
    out: list[int] = []
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        g = pod_spec_gpus(((ps.get("template") or {}).get("spec")) or {})
        out += [g] * int(ps.get("count") or 1)
    return tuple(out)


def inputs_from_objects(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    cluster_queues: Sequence[Mapping[str, Any]],
) -> Inputs:
    """Inputs from the cluster's objects (serve's watch cache or plain lists)."""
    out = Inputs()
    pool_of: dict[str, str] = {}
    for n in nodes:
        pool = node_pool(n)
        if pool:
            pool_of[name(n)] = pool
            out.nodes.append(Node(name(n), pool, node_gpus(n) if node_ready(n) else 0))
    used, quota = _team_within(cluster_queues)
    workloads = list(workloads)
    held, pods_of = _gpus_held(pods, pool_of, out.busy_pools)
    wl_by_key = {_workload_key(w): w for w in workloads}
    for key, by_node in held.items():
        team = key.split("/", 1)[0]
        q = quota.get(team)
        out.running.append(
            _running(
                key,
                wl_by_key.get(key),
                team,
                by_node,
                tuple(pods_of[key]),
                q is None or used.get(team, 0) <= q,
            )
        )
    for wl in workloads:
        state = workload_state(wl)
        pool = job_pool(wl)
        if state in HOLDING_QUOTA and _workload_key(wl) not in held and pool and any(_pod_set_gpus(wl)):
            out.busy_pools.add(pool)  # admitted, pods not bound yet
            continue
        waiting = _waiting(wl, pool, used, quota)
        if waiting is not None:
            out.waiting.append(waiting)
    return out


def _gpus_held(
    pods: Iterable[Mapping[str, Any]], pool_of: Mapping[str, str], busy_pools: set[str]
) -> tuple[dict[str, dict[str, int]], dict[str, list[int]]]:
    """GPUs held on pool nodes, by Workload key ("ns/workload", or "ns/pod:NAME" for a pod Kueue does not
    manage): {key: {node: GPUs}} and {key: [GPUs of each pod]}. A pool with a terminating pod is busy."""
    held: dict[str, dict[str, int]] = {}
    pods_of: dict[str, list[int]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        g = pod_gpus(p)
        if not node or node not in pool_of or not g or not pod_holds_gpus(p):
            continue
        if meta(p).get("deletionTimestamp"):
            busy_pools.add(pool_of[node])
        wl_name = annotations(p).get(KUEUE_WORKLOAD_ANNOTATION)
        key = f"{namespace(p)}/{wl_name}" if wl_name else f"{namespace(p)}/pod:{name(p)}"
        held.setdefault(key, {})
        held[key][node] = held[key].get(node, 0) + g
        pods_of.setdefault(key, []).append(g)
    return held, pods_of


def _running(
    key: str,
    wl: Mapping[str, Any] | None,
    team: str,
    by_node: dict[str, int],
    pods: tuple[int, ...],
    within: bool,
) -> Running:
    """A holder of GPUs; movable only when it is an admitted, active Kueue Job."""
    if wl is None:  # not Kueue's: it holds GPUs and cannot be moved
        return Running(key, key, team, 1 << 62, 0.0, by_node, pods, False, True)
    admitted = workload_state(wl) in HOLDING_QUOTA
    movable = (
        admitted and _owner_kind(wl) == "Job" and (wl.get("spec") or {}).get("active", True) is not False
    )
    return Running(
        key,
        _job_name(wl),
        team,
        priority_value(wl),
        quota_reserved_at(wl) or parse_time(meta(wl).get("creationTimestamp")) or 0.0,
        by_node,
        pods,
        movable,
        within,
        moved_at(wl),
    )


def _waiting(
    wl: Mapping[str, Any], pool: str | None, used: Mapping[str, int], quota: Mapping[str, int | None]
) -> Waiting | None:
    """A queued, active Workload asking GPUs in a pool (None otherwise), waiting since its creation or its
    last eviction."""
    if workload_state(wl) not in IN_QUEUE or (wl.get("spec") or {}).get("active", True) is False or not pool:
        return None
    gpus = _pod_set_gpus(wl)
    if not any(gpus):
        return None
    team = namespace(wl)
    q = quota.get(team)
    evicted = condition(wl, "Evicted")
    since = parse_time(meta(wl).get("creationTimestamp")) or 0.0
    if evicted.get("status") == "True":
        since = max(since, parse_time(evicted.get("lastTransitionTime")) or since)
    within = q is None or used.get(team, 0) + sum(gpus) <= q
    return Waiting(_workload_key(wl), _job_name(wl), team, priority_value(wl), pool, gpus, since, within)


def moved_reason(wl: Mapping[str, Any]) -> str | None:
    """The reason a Workload was moved by defragmentation (its annotation), for `describe job`."""
    return annotations(wl).get(DEFRAG_MOVED_ANNOTATION) or None


def moved_at(wl: Mapping[str, Any]) -> float | None:
    return parse_time(annotations(wl).get(DEFRAG_MOVED_AT_ANNOTATION))


def moved_for_team(workloads: Iterable[Mapping[str, Any]], since: float) -> dict[str, int]:
    """Moves made since `since` for each team's waiters, from the moved Workloads' annotations (an
    earlier leader's moves count too)."""
    out: dict[str, int] = {}
    for w in workloads:
        team = annotations(w).get(DEFRAG_MOVED_FOR_TEAM_ANNOTATION)
        at = moved_at(w)
        if team and at is not None and at > since:
            out[team] = out.get(team, 0) + 1
    return out


def to_reactivate(wl: Mapping[str, Any]) -> bool:
    """A Workload gpuctl deactivated to move it, now evicted (its pods gone, quota released): time to
    make it active again so Kueue requeues it. Only while gpuctl's marker is on it, so a job a user
    stopped (the same spec.active) is never resumed by this."""
    spec = wl.get("spec") or {}
    if spec.get("active", True) is not False or not annotations(wl).get(DEFRAG_REACTIVATE_ANNOTATION):
        return False
    return (
        condition(wl, "Evicted").get("status") == "True"
        and condition(wl, "QuotaReserved").get("status") != "True"
    )
