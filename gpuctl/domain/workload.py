"""A Kueue Workload's state, pool, priority and reservations: one reading for every consumer.

State follows Kueue's own order (pkg/workload/workload.go `Status`): Finished > Admitted >
QuotaReserved > Pending. gpuctl splits Pending three ways because users act differently on each:
Inactive (spec.active=false: Kueue will not consider it), Preempted (pending again after Kueue
evicted it to make room) and plain Pending (waiting for quota).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from gpuctl.constants import (
    BUDGET_FLAVOR,
    CPU_RESOURCE,
    DEACTIVATED_MAX_RUNTIME,
    DEACTIVATED_REQUEUE_LIMIT,
    GPU_RESOURCE,
    GPU_TYPE_LABEL_KEYS,
    MAX_EXEC_TIME_LABEL,
    PRIORITY_CLASS,
    PRIORITY_VALUE,
    SERVING_CLASS,
    SERVING_VALUE,
    Labels,
    Priority,
)
from gpuctl.domain.gpus import quantity_gpus
from gpuctl.domain.objects import condition, is_true, labels, meta, parse_time, pod_templates


class WorkloadState(StrEnum):
    PENDING = "Pending"
    PREEMPTED = "Preempted"
    INACTIVE = "Inactive"
    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    FINISHED = "Finished"


# The one definition of "waiting" (gpuctl.domain.status.WAITING_STATES is its status words):
# IN_QUEUE: in Kueue's queue, so ordered, given a position and counted as demand (an Inactive Workload
# is in no queue: Kueue will not consider it until reactivated);
# WAITING: holds no quota and has not finished: in the queue, or deactivated.
IN_QUEUE = frozenset({WorkloadState.PENDING, WorkloadState.PREEMPTED})
WAITING = IN_QUEUE | {WorkloadState.INACTIVE}
HOLDING_QUOTA = frozenset({WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED})

NO_PRIORITY = "none"
PRIORITIES = frozenset(p.value for p in Priority)
_CLASS_TO_PRIORITY = {cls: p.value for p, cls in PRIORITY_CLASS.items()}
# An autoscaled service's tiers (docs/serving.md): their classes' values, and the word they show.
_SERVING_CLASS_VALUE = {cls: SERVING_VALUE[tier] for tier, cls in SERVING_CLASS.items()}
_SERVING_CLASS_TIER = {cls: tier.value for tier, cls in SERVING_CLASS.items()}


def workload_state(wl: Mapping[str, Any] | None) -> WorkloadState | None:
    """Kueue's view of a Workload, or None when there is no Workload (yet)."""
    if not wl:
        return None
    if is_true(wl, "Finished"):
        return WorkloadState.FINISHED
    if is_true(wl, "Admitted"):
        return WorkloadState.ADMITTED
    if is_true(wl, "QuotaReserved"):
        return WorkloadState.QUOTA_RESERVED
    if (wl.get("spec") or {}).get("active") is False:
        return WorkloadState.INACTIVE
    if was_preempted(wl):
        return WorkloadState.PREEMPTED
    return WorkloadState.PENDING


def was_preempted(wl: Mapping[str, Any]) -> bool:
    """Evicted to make room for other work (and not holding quota again since)."""
    ev = condition(wl, "Evicted")
    if ev.get("status") == "True" and ev.get("reason") == "Preempted":
        return True
    return is_true(wl, "Preempted")


def finished_failed(wl: Mapping[str, Any]) -> bool:
    return condition(wl, "Finished").get("reason") == "Failed"


def metric_state(wl: Mapping[str, Any]) -> str | None:
    """The `state` label of gpuctl_workloads: queued | preempted | inactive | admitted | running;
    None for finished Workloads (not counted). `admitted` means holding quota (QuotaReserved or
    Admitted); `running` adds that its pods are ready (PodsReady)."""
    st = workload_state(wl)
    if st is None or st == WorkloadState.FINISHED:
        return None
    if st in HOLDING_QUOTA:
        return "running" if is_true(wl, "PodsReady") else "admitted"
    return {WorkloadState.PENDING: "queued", WorkloadState.PREEMPTED: "preempted"}.get(st, "inactive")


def reserved_pools(wl: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(pool, GPUs) per pod set Kueue assigned, from the Workload's own status.admission (a
    ClusterQueue's status lags it). The pool is the flavor assigned for nvidia.com/gpu, or for cpu
    when the pod set has no GPUs. Empty unless the Workload holds quota."""
    if workload_state(wl) not in HOLDING_QUOTA:
        return []
    out = []
    for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        flavors = a.get("flavors") or {}
        pool = flavors.get(GPU_RESOURCE) or flavors.get(CPU_RESOURCE)
        if pool and pool != BUDGET_FLAVOR:
            used = (a.get("resourceUsage") or {}).get(GPU_RESOURCE)
            out.append((pool, quantity_gpus(str(used)) if used is not None else 0))
    return out


def reserved_gpus(wl: Mapping[str, Any]) -> dict[str, int]:
    """GPUs the Workload holds, per pool."""
    out: dict[str, int] = {}
    for pool, gpus in reserved_pools(wl):
        out[pool] = out.get(pool, 0) + gpus
    return out


def assigned_flavors(wl: Mapping[str, Any]) -> set[str]:
    """Every flavor named in the Workload's admission (whatever it holds)."""
    out: set[str] = set()
    for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        out.update((a.get("flavors") or {}).values())
    return out


def _pod_specs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod specs of any job object: a Workload's pod sets, a controller's template, a pod
    template's or a pod's own spec."""
    spec = obj.get("spec") or {}
    if "podSets" in spec:
        return [(ps.get("template") or {}).get("spec") or {} for ps in spec.get("podSets") or []]
    if "template" in spec or "leaderWorkerTemplate" in spec:
        return [t.get("spec") or {} for t in pod_templates(obj)]
    return [spec]


def job_pool(*objects: Mapping[str, Any] | None) -> str | None:
    """The pool of a job, from whichever of its objects are at hand (its controller, its Workload, its
    pods, a pod template; in any order, None skipped): the one rule behind `get jobs` and its `--pool`,
    `describe job`, `describe pool`, `delete pool`'s in-use check, the API, the metrics and explain.
    In this order of authority, over all the objects given:

    1. runwhere.ai/pool on any of them: the single pool the job names (gpuctl puts it on each of its
       objects, Kueue copies it to the Workload: labelKeysToCopy);
    2. else the pool Kueue admitted a Workload to (the flavor of its GPUs, status.admission): where a job
       of several pools (`pool: [P, Q]`, no label; docs/queueing.md) runs while it holds quota;
    3. else the pool a pod spec selects (nodeSelector runwhere.ai/pool): what gpuctl's builders write
       for a single pool, and what Kueue writes from the admitted flavor's nodeLabels into an admitted
       Job's template and into the pods it ungates (so a Job read without its Workload, or such a pod,
       still names the pool of a job of several pools).

    None when none says: a job of several pools not admitted (yet, or any more) may land in any of
    them. A Deployment of several pools whose replicas Kueue admitted to different pools (one Workload
    per pod) has the pool of the first object that names one."""
    objs = [o for o in objects if o]
    for o in objs:
        p = labels(o).get(Labels.POOL)
        if p:
            return p
    for o in objs:
        assigned = reserved_pools(o) if "podSets" in (o.get("spec") or {}) else []
        if assigned:
            return assigned[0][0]
    for o in objs:
        for spec in _pod_specs(o):
            selected = (spec.get("nodeSelector") or {}).get(Labels.POOL)
            if selected:
                return selected
    return None


def pool_choice(obj: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """For a job that names no single pool (docs/queueing.md, "Jobs that may run in any pool"): the pools its
    required node affinity lists (`runwhere.ai/pool In [...]`, gpuctl's `pool: [P, Q]`) and the GPU types it
    asks for (any of gpuctl's GPU type keys), in order; empty tuples when it says none."""
    pools: list[str] = []
    types: list[str] = []
    for spec in _pod_specs(obj):
        req = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in req:
            for e in term.get("matchExpressions") or []:
                if e.get("operator") != "In":
                    continue
                target = (
                    pools
                    if e.get("key") == Labels.POOL
                    else types
                    if e.get("key") in GPU_TYPE_LABEL_KEYS
                    else None
                )
                if target is not None:
                    target.extend(v for v in e.get("values") or [] if v not in target)
    return tuple(pools), tuple(types)


def workload_priority(wl: Mapping[str, Any]) -> str:
    """high | medium | low from runwhere.ai/priority or the WorkloadPriorityClass, floor | burst for an
    autoscaled service's replicas; `none` otherwise."""
    p = labels(wl).get(Labels.PRIORITY)
    if p in PRIORITIES:
        return p
    ref = ((wl.get("spec") or {}).get("priorityClassRef") or {}).get("name")
    return _CLASS_TO_PRIORITY.get(ref) or _SERVING_CLASS_TIER.get(ref, NO_PRIORITY)


def priority_value(wl: Mapping[str, Any]) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def labelled_priority_value(obj: Mapping[str, Any]) -> int:
    """The Kueue priority of a pod (or any object) from its labels: gpuctl's WorkloadPriorityClass
    (kueue.x-k8s.io/priority-class), else runwhere.ai/priority, else spec.priority, else 0."""
    lab = labels(obj)
    cls = lab.get(Labels.KUEUE_PRIORITY, "")
    if cls in _SERVING_CLASS_VALUE:
        return _SERVING_CLASS_VALUE[cls]
    p = _CLASS_TO_PRIORITY.get(cls) or lab.get(Labels.PRIORITY)
    if p in PRIORITIES:
        return PRIORITY_VALUE[Priority(p)]
    return int((obj.get("spec") or {}).get("priority") or 0)


def pending_since(wl: Mapping[str, Any]) -> float | None:
    """When a waiting Workload started waiting: its creation, or its last eviction if later."""
    if workload_state(wl) not in IN_QUEUE:
        return None
    created = parse_time(meta(wl).get("creationTimestamp")) or 0.0
    ev = condition(wl, "Evicted")
    if ev.get("status") == "True":
        return max(created, parse_time(ev.get("lastTransitionTime")) or created)
    return created


def quota_reserved_at(wl: Mapping[str, Any]) -> float | None:
    c = condition(wl, "QuotaReserved")
    return parse_time(c.get("lastTransitionTime")) if c.get("status") == "True" else None


def preemptions(wl: Mapping[str, Any]) -> tuple[int, str]:
    """How often the Workload was preempted, and the latest reason (InClusterQueue, InCohort...)."""
    n = sum(
        int(e.get("count") or 0)
        for e in ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        if e.get("reason") == "Preempted"
    )
    if n == 0 and was_preempted(wl):
        n = 1
    return n, condition(wl, "Preempted").get("reason") or "Preempted"


def queue_positions(workloads: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Workload UID -> 1-based position among its ClusterQueue's waiting Workloads.

    Kueue's BestEffortFIFO order: higher priority first, then older (eviction time when requeued).
    A gpuctl team's ClusterQueue is named after its namespace, so the namespace keys the queue.
    """
    queues: dict[str, list[tuple[int, str, str]]] = {}
    for wl in workloads:
        if workload_state(wl) not in IN_QUEUE:
            continue
        m = meta(wl)
        ev = condition(wl, "Evicted")
        ts = (ev.get("lastTransitionTime") if ev.get("status") == "True" else None) or m.get(
            "creationTimestamp", ""
        )
        queues.setdefault(m.get("namespace", ""), []).append((-priority_value(wl), ts, m.get("uid", "")))
    out = {}
    for entries in queues.values():
        for i, (_, _, uid) in enumerate(sorted(entries), start=1):
            out[uid] = i
    return out


def _slice_values(level: Mapping[str, Any], count: int) -> list[str]:
    if level.get("universal") is not None:
        return [str(level["universal"])] * count
    ind = level.get("individual") or {}
    prefix, suffix = ind.get("prefix") or "", ind.get("suffix") or ""
    return [f"{prefix}{r}{suffix}" for r in ind.get("roots") or []]


def topology_nodes(wl: Mapping[str, Any]) -> dict[str, int]:
    """Node -> pods Kueue's Topology Aware Scheduling placed there (status.admission, v1beta2's
    sliced encoding; the last topology level is the node). Empty without a topology assignment."""
    out: dict[str, int] = {}
    for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        ta = a.get("topologyAssignment") or {}
        for sl in ta.get("slices") or []:
            n = int(sl.get("domainCount") or 0)
            levels = sl.get("valuesPerLevel") or []
            if not levels or n <= 0:
                continue
            nodes = _slice_values(levels[-1], n)
            counts = sl.get("podCounts") or {}
            if counts.get("universal") is not None:
                pods = [int(counts["universal"])] * len(nodes)
            else:
                pods = [int(c) for c in counts.get("individual") or []]
            for node, c in zip(nodes, pods, strict=False):
                out[node] = out.get(node, 0) + c
    return out


# ----------------------------------------------------------------------------- stop, maxRuntime
def max_runtime_seconds(obj: Mapping[str, Any]) -> int | None:
    """A job's declared maxRuntime in seconds, read from any of its objects: a Workload's
    spec.maximumExecutionTimeSeconds (what Kueue enforces), else Kueue's max-exec-time label on a
    controller, pod template or pod (what Kueue builds the Workload from). None when none says, or the
    label is not a positive integer (Kueue ignores such a label too)."""
    spec = obj.get("spec") or {}
    raw = spec.get("maximumExecutionTimeSeconds") if "podSets" in spec else None
    if raw is None:
        raw = labels(obj).get(MAX_EXEC_TIME_LABEL)
    try:
        value = int(str(raw)) if raw is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


def admitted_at(wl: Mapping[str, Any]) -> float | None:
    c = condition(wl, "Admitted")
    return parse_time(c.get("lastTransitionTime")) if c.get("status") == "True" else None


def release_deadline(wl: Mapping[str, Any]) -> float | None:
    """When Kueue stops an admitted Workload at the latest: its admission time plus its maximum
    execution time, less what earlier admissions used (Kueue's reconcileMaxExecutionTime,
    pkg/controller/core/workload_controller.go). None without a maxRuntime, or when not admitted."""
    limit = max_runtime_seconds(wl)
    since = admitted_at(wl)
    if limit is None or since is None:
        return None
    past = int((wl.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
    return since + limit - past


def pod_release_deadline(pod: Mapping[str, Any], now: float | None = None) -> float | None:
    """The latest end of a running pod's job, from the pod alone: its start (a pod starts after its
    Workload's admission, so this is never earlier than Kueue's deadline) plus the maxRuntime label
    gpuctl puts on every pod template. A pod bound to a node that has no startTime yet (the kubelet has
    not reported it) starts after `now`, and was admitted before it: `now` plus the limit then, when given."""
    limit = max_runtime_seconds(pod)
    started = parse_time((pod.get("status") or {}).get("startTime"))
    if started is None and now is not None and (pod.get("spec") or {}).get("nodeName"):
        started = now
    if limit is None or started is None:
        return None
    return started + limit


def stop_reason(wl: Mapping[str, Any] | None) -> str | None:
    """Why a job is stopped (its Workload's spec.active is false and it holds no quota), in users' words;
    None when it is not stopped. The one rule behind `get jobs -o wide` REASON, `describe job` and the API:
    a stopped job is in no queue, so it has no position and no "when will it run"."""
    if workload_state(wl) != WorkloadState.INACTIVE:
        return None
    assert wl is not None
    reason = condition(wl, "Evicted").get("reason") or ""
    if reason == DEACTIVATED_MAX_RUNTIME:
        limit = max_runtime_seconds(wl)
        ran = f" of {format_duration(limit)}" if limit else ""
        return f"stopped: it ran its maxRuntime{ran} (Kueue stopped it); `gpuctl resume` runs it again"
    if reason == DEACTIVATED_REQUEUE_LIMIT:
        return (
            "stopped: Kueue gave up after requeueing it too often (its pods never all became ready); "
            "fix the job, then `gpuctl resume` it"
        )
    return "stopped (spec.active=false); `gpuctl resume` requeues it"


def format_duration(seconds: float) -> str:
    """2h, 90m, 1h30m, 45s: the largest units that say it exactly (maxRuntime's own syntax)."""
    s = int(seconds)
    if s <= 0:
        return "0s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out
