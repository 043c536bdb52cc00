"""Why a job waits and when it would start: the one-line reason of `describe job` and of `get jobs`'
REASON column, and the cluster snapshot both are judged against (gpuctl.domain.explain, .estimate),
read once per command and kept with its Inventory."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from gpuctl.cluster import Cluster
from gpuctl.constants import SLICES_USED_ANNOTATION
from gpuctl.domain.objects import annotations, condition, name
from gpuctl.domain.sharing import slices_used
from gpuctl.domain.status import State, pod_status, unschedulable_message
from gpuctl.domain.teams import pool_reservations
from gpuctl.domain.workload import IN_QUEUE, stop_reason, workload_state
from gpuctl.service.access import Permissions
from gpuctl.service.inventory import Inventory

if TYPE_CHECKING:  # a table of running jobs never loads the explain and estimate models
    from gpuctl.domain.estimate import Estimate
    from gpuctl.domain.explain import Demand, Snapshot, Verdict
    from gpuctl.service.jobs import Job


def explain(job: Job, inv: Inventory) -> str:
    """One line answering "why is it not running?" (empty when it runs or ran), from the command's
    Inventory (snapshot_inventory's: the pools, the team queues and, for a queued job, the snapshot)."""
    pool = job.pool or ""
    if job.status in (State.RUNNING, State.SUCCEEDED):
        return ""
    if pool and pool not in inv.pools:
        return f"pool {pool} does not exist: create it (kind: pool) or change resources.pool"
    if job.workload is None:
        if job.namespace not in inv.team_queues:
            return (
                f"namespace {job.namespace} has no quota: create one (kind: quota) so Kueue queues its work"
            )
        return "waiting for Kueue to create its Workload"
    if job.status == State.PREEMPTED:
        msg = condition(job.workload, "Preempted").get("message") or condition(job.workload, "Evicted").get(
            "message"
        )
        return f"preempted by higher-priority work, back in the queue{': ' + msg if msg else ''}"
    stopped = stop_reason(job.workload)
    if stopped:
        return stopped
    if job.status == State.QUOTA_RESERVED:
        return "quota reserved; Kueue admits it once its admission checks pass"
    if job.status == State.QUEUED:
        msg = condition(job.workload, "QuotaReserved").get("message", "")
        pos = f", {_ordinal(job.position)} in queue" if job.position else ""
        if (
            "doesn't exist" in msg
            or "is inactive" in msg
            or "Inadmissible" in condition(job.workload, "QuotaReserved").get("reason", "")
        ):
            return msg
        # Computed from the cluster state, not from Kueue's last flavor message.
        from gpuctl.domain.explain import workload_demand  # noqa: PLC0415 - lazy: waiting jobs only

        v = when(inv, workload_demand(job.workload))
        if v.starts:
            tail = f" after preempting {', '.join(v.preempts)}" if v.preempts else ""
            caveat = f" ({v.by_count})" if v.by_count else ""
            return f"fits now: Kueue is admitting it{tail}{caveat}{pos}"
        return f"{v.message}{pos}"
    for pod in job.pods:
        un = unschedulable_message(pod)
        if un:
            return f"pod {pod['metadata']['name']} cannot be scheduled: {un}"
        st = pod_status(pod)
        if st not in ("Running", "Succeeded", "Pending", "Queued"):
            return f"pod {pod['metadata']['name']}: {st}"
    if job.status == State.ADMITTED:
        return "admitted by Kueue; pods are starting"
    return job.reason


def snapshot_inventory(
    cluster: Cluster,
    namespace: str | None = None,
    perms: Permissions | None = None,
    *,
    cluster_queues: list[dict] | None = None,
    known: Inventory | None = None,
) -> Inventory:
    """What "when will it run" answers read, for a command that has no listing of its own: every
    namespace, gpuctl's pods in full, and of the Workloads only the suspended Jobs' (a job without
    pods is known by its Workload alone; the rest comes from pods and ClusterQueue status). A caller
    who may not list every pod (a team member) reads the job's own `namespace` instead, and gets the
    verdict by count (snapshot). cluster_queues: gpuctl's ClusterQueues when the caller has just read
    them (a server dry run's pre-checks), so they are not listed again; known: an Inventory the command
    has read already (`describe job`'s of its job), whose cluster-scoped lists are reused."""
    inv = Inventory(cluster, None, perms=perms)
    if namespace and not inv.sees_every_pod:
        inv = Inventory(cluster, namespace, perms=inv.perms)
    if cluster_queues is not None:
        inv.__dict__["cluster_queues"] = cluster_queues  # the cached_property, already read
    if known is not None:
        inv.reuse(known)
    inv.use_workloads_of_suspended_jobs()
    return inv


_SNAPSHOTS: WeakKeyDictionary[Inventory, Snapshot] = WeakKeyDictionary()


def snapshot(inv: Inventory) -> Snapshot:
    """The cluster state "when will it run" answers are computed from (one per command, kept with its
    Inventory: the reason and the estimate of `describe job` share it): per node for a caller who may
    list every pod; else its namespace's pods and Workloads with the pools' use as Kueue counts it (the
    ClusterQueues' reservations), judged by count (gpuctl.domain.explain)."""
    snap = _SNAPSHOTS.get(inv)
    if snap is None:
        snap = _SNAPSHOTS[inv] = _build_snapshot(inv)
    return snap


def _build_snapshot(inv: Inventory) -> Snapshot:
    from gpuctl.domain.explain import Snapshot  # noqa: PLC0415 - lazy: only a waiting job is judged

    every = inv.sees_every_pod  # per node; else by count, with the pools' use as Kueue reserved it
    return Snapshot.build(
        now=time.time(),
        nodes=inv.nodes,
        pods=inv.snapshot_pods if every else inv.pods,
        workloads=inv.workloads,
        cluster_queues=inv.cluster_queues,
        cohort=inv.cohort,
        pool_reserved=None if every else pool_reservations(inv.all_cluster_queues),
        # The slices in use per pool as `gpuctl serve` publishes them, for a caller who counts.
        slices_published=None
        if every
        else {name(f): slices_used(annotations(f).get(SLICES_USED_ANNOTATION)) for f in inv.flavors},
    )


def when(inv: Inventory, demand: Demand) -> Verdict:
    """Would this demand start now, or what blocks it (gpuctl.domain.explain)."""
    return snapshot(inv).verdict(demand)


def job_estimate(inv: Inventory, job: Job, now: float | None = None) -> Estimate | None:
    """When a job waiting in Kueue's queue starts at the latest, with its basis (gpuctl.domain.estimate),
    from the snapshot its reason was judged against: no request of its own. None for a job that is not
    in the queue (running, finished, stopped, or without a Workload yet)."""
    return workload_estimate(inv, job.workload, now)


def workload_estimate(inv: Inventory, wl: dict | None, now: float | None = None) -> Estimate | None:
    """job_estimate of one Workload (an autoscaled service's waiting replica has its own)."""
    if wl is None or workload_state(wl) not in IN_QUEUE:
        return None
    from gpuctl.domain.estimate import estimate  # noqa: PLC0415 - lazy: describe of a waiting job
    from gpuctl.domain.explain import workload_demand  # noqa: PLC0415

    demand = workload_demand(wl)
    snap = snapshot(inv)
    return estimate(snap, demand, now=time.time() if now is None else now, verdict=snap.verdict(demand))


def waiting_workload(inv: Inventory, wl: dict) -> tuple[str, str | None]:
    """What one waiting Workload (an autoscaled service's replica, a LeaderWorkerSet's group) waits for
    and when it runs at the latest (Estimate.summary; None without a bound), from the command's snapshot."""
    from gpuctl.domain.explain import workload_demand  # noqa: PLC0415 - lazy: waiting replicas only

    est = workload_estimate(inv, wl)
    reason = when(inv, workload_demand(wl)).message or "being admitted"
    return reason, est.summary() if est is not None else None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
