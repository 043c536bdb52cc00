"""One response model per view, used by the CLI's printers and the REST API's routes alike.

Each model is a dataclass whose `as_dict()` is the JSON both print (`gpuctl describe job -o json`
and `GET /api/v1/jobs/{name}` give the same keys); the functions here are the only place the view's
data is assembled.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    DEFRAG_MOVED_AT_ANNOTATION,
    GPU_RESOURCE,
    LWS_NAME_LABEL,
    SET_ASIDE_ENDED_ANNOTATION,
    Labels,
)
from gpuctl.domain.defrag import moved_reason
from gpuctl.domain.gang import (
    asked_text,
    gang_nodes,
    gang_pods,
    gang_text,
    group_size,
    pool_topology,
    rank_rows,
    replica_rows,
    replicas_text,
)
from gpuctl.domain.gpus import controller_asks, pod_spec_gpu_requests, pod_spec_gpus
from gpuctl.domain.multicluster import placement
from gpuctl.domain.objects import age_seconds, labels, meta, owner_refs, pod_template
from gpuctl.domain.promise import RecordedBound, recorded_bound
from gpuctl.domain.serving import tier
from gpuctl.domain.sharing import units_to_gpus
from gpuctl.domain.status import State
from gpuctl.domain.workload import IN_QUEUE, max_runtime_seconds, workload_state
from gpuctl.service.access import Permissions, permissions_of, readable_namespaces
from gpuctl.service.errors import NotFound, ServiceError
from gpuctl.service.gpu_use import job_use_now
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import Job, find_job, read_worker_pods
from gpuctl.service.lifetime import lifetime, read_events
from gpuctl.service.prometheus import Prometheus
from gpuctl.service.quotas import quota_rows
from gpuctl.service.serving import autoscaling_view
from gpuctl.service.waiting import explain, job_estimate, snapshot_inventory, waiting_workload


# ----------------------------------------------------------------------------- a gang's part
def gang_view(cluster: Cluster, obj: dict, pods: list[dict], pool: str | None) -> dict[str, Any] | None:
    """None for a job of one pod; else {nodes, gpus_per_node, slices_per_node, text, topology, ranks}
    (slices_per_node: a pod's GPU resources other than whole GPUs, e.g. {"nvidia.com/mig-1g.10gb": 1}).
    The pool's levels and the pods' nodes are read when the caller may (a team member may not read
    nodes: domains show "-")."""
    nodes = gang_nodes(obj)
    if nodes == 1:
        return None
    per_node = pod_spec_gpu_requests(obj["spec"]["template"].get("spec") or {})
    levels: tuple[str, ...] = ()
    node_objs: dict[str, dict] = {}
    try:
        if pool:
            levels = pool_topology(cluster.get_or_none(path("ResourceFlavor", pool)))
        for name in sorted({(p.get("spec") or {}).get("nodeName") for p in pods} - {None}):
            node = cluster.get_or_none(path("Node", name))
            if node is not None:
                node_objs[name] = node
    except ApiError as e:
        if e.status not in (401, 403):
            raise
    return {
        "nodes": nodes,
        "gpus_per_node": per_node.get(GPU_RESOURCE, 0),
        "slices_per_node": {r: n for r, n in per_node.items() if r != GPU_RESOURCE},
        "text": gang_text(nodes, per_node),
        "topology": list(levels),
        "ranks": rank_rows(gang_pods(obj, pods) or pods, node_objs, levels),
    }


def replicas_view(
    obj: dict,
    workloads: list[dict],
    pods: list[dict],
    inv: Inventory | None = None,
    burst: dict | None = None,
) -> dict[str, Any] | None:
    """None unless the job is a service of multi-node replicas (a LeaderWorkerSet, docs/serving.md); else
    {replicas, nodes, gpus_per_node, text ("2 replicas x 2 nodes x 8 GPUs = 32 GPUs"), groups: per replica
    its Workload's word and its pods by rank, and for a replica waiting in Kueue's queue what it waits for
    and when it runs at the latest (`waits_for`, `runs_by`; judged against the command's snapshot `inv`)}.
    An autoscaled one (`burst`: its burst LeaderWorkerSet) lists the floor's groups, then the burst's,
    numbered on (each row says its `tier`)."""
    size = group_size(obj)
    if size == 1:
        return None
    sets = [obj] if burst is None else [obj, burst]
    replicas = sum(int((o.get("spec") or {}).get("replicas", 1)) for o in sets)
    per_node = pod_spec_gpus(pod_template(obj).get("spec") or {})
    groups: list[dict] = []
    for o in sets:
        uid, own = meta(o).get("uid"), meta(o).get("name")
        rows = replica_rows(
            [w for w in workloads if any(r.get("uid") == uid for r in owner_refs(w))] if burst else workloads,
            [p for p in pods if labels(p).get(LWS_NAME_LABEL) == own] if burst else pods,
        )
        for r in rows:
            if burst is not None:
                r = {**r, "replica": len(groups), "tier": str(tier(o) or "")}
            groups.append(r)
    by_name = {meta(w).get("name"): w for w in workloads}
    for g in groups:
        wl = by_name.get(g["workload"])
        if inv is not None and wl is not None and workload_state(wl) in IN_QUEUE:
            g["waits_for"], g["runs_by"] = waiting_workload(inv, wl)
    return {
        "replicas": replicas,
        "nodes": size,
        "gpus_per_node": per_node,
        "text": replicas_text(replicas, size, per_node),
        "groups": groups,
    }


# ----------------------------------------------------------------------------- describe job
@dataclass
class JobDescription:
    job_id: str
    name: str
    namespace: str
    kind: str
    resource_type: str
    status: str
    reason: str
    why: str
    position: int | None
    pool: str | None
    priority: str | None
    queue: str | None
    image: str | None
    resources: dict[str, Any]
    gpus: int | float  # what its team's quota is charged for it, slices at their share (get jobs' spec.gpus)
    workload: str | None
    conditions: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    env: list[dict[str, Any]]
    service: dict[str, Any] | None
    created_at: str | None
    max_runtime: int | None = None  # seconds (job.maxRuntime); None: no limit
    # "When will it run" for a job in Kueue's queue (gpuctl.domain.estimate.Estimate.as_dict): the latest
    # start and its basis, or why there is no bound; None for a job that is not waiting in the queue.
    estimate: dict[str, Any] | None = None
    # Why defragmentation last moved it (gpuctl.domain.defrag.moved_reason) and when; None if never.
    moved: str | None = None
    # A MultiKueue manager's job (docs/multicluster.md): the worker cluster running it (or the clusters it is
    # offered to), and the manager's MultiKueue check: its state and message.
    cluster: str | None = None
    multikueue: dict[str, Any] | None = None
    # Why the pods of a job in a worker cluster were not read (no context for it, unreachable); None: read.
    pods_error: str | None = None
    # A multi-node job (docs/distributed.md; gang_view): its size and ranks; None for one pod.
    gang: dict[str, Any] | None = None
    # A service of multi-node replicas (docs/serving.md, a LeaderWorkerSet): {replicas, nodes, gpus_per_node,
    # text, groups: per replica its Workload's word and its pods by rank}; None for other jobs.
    replicas: dict[str, Any] | None = None
    # An autoscaled service (docs/serving.md, gpuctl.service.serving.autoscaling_view): floor, burst,
    # desired, running and waiting replicas, the HPA's metric and target, each waiting replica's reason.
    autoscaling: dict[str, Any] | None = None
    # When and why the nodes `gpuctl serve --defrag` set aside for it were given back by the set-aside's
    # time limits (runwhere.ai/set-aside-ended, docs/distributed.md); None if that never happened.
    set_aside_ended: str | None = None
    # The start bound it was first shown, which `gpuctl serve --defrag` keeps by setting a node aside for it
    # (runwhere.ai/starts-by, RFC 3339; docs/queueing.md "A bound gpuctl keeps"); None: none recorded.
    # bound: Pending, Kept or Missed (gpuctl.domain.promise.recorded_bound, as `get jobs -o wide`).
    starts_by: str | None = None
    bound: str | None = None
    # GPU use (docs/utilisation.md, gpuctl.domain.utilisation.JobUse.as_dict: per pod and device) when a
    # Prometheus is
    # configured; gpu_use_error: why it was not read (Prometheus down or refusing).
    gpu_use: dict[str, Any] | None = None
    gpu_use_error: str | None = None
    # describe's GPUs line: the charge, then what it is of ("3 (3 replicas x 1 GPUs)", gpuctl.domain.gang).
    gpus_text: str = ""
    # Every Kueue Workload of the job (a Deployment's: one per pod; a LeaderWorkerSet's: one per replica);
    # `workload` is the one whose conditions describe shows.
    workloads: list[str] = field(default_factory=list)
    # When it started and ended, how its containers last ended (gpuctl.service.lifetime.lifetime), and the
    # Events about it, oldest first (read_events; None: not asked for); events_error: why not read.
    started: str | None = None
    ended: str | None = None
    exit: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None
    events_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gpu_use(job: Job, prom: Prometheus | None) -> tuple[dict[str, Any] | None, str | None]:
    """The job's GPU use and, when Prometheus could not be read, why (describe still answers)."""
    if prom is None:
        return None, None
    try:
        return job_use_now(job, prom).as_dict(), None
    except ServiceError as e:
        return None, str(e)


def _moved(wl: dict | None) -> str | None:
    reason = moved_reason(wl) if wl else None
    if not reason:
        return None
    at = (meta(wl).get("annotations") or {}).get(DEFRAG_MOVED_AT_ANNOTATION)
    return f"{reason} (at {at})" if at else reason


def describe_job(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    perms: Permissions | None = None,
    *,
    job: Job | None = None,
    prom: Prometheus | None = None,
    events: bool = False,
) -> JobDescription:
    """A job found by its name (or the name of one of its pods, as `get jobs` prints them), with
    the one-line answer to "why is it not running" (per node, or by count for a caller who may not
    list every pod: gpuctl.service.waiting.snapshot). job: the job when the caller has just found it
    (the API finds it first to check who may read it), so it is not read again. prom: where to read its
    GPU use (gpuctl.service.gpu_use), when one is configured. events: read the Events about it too
    (`describe job`; the REST API's describe leaves them out)."""
    found = None
    if job is None:
        found = Inventory(cluster, namespace, perms=perms)
        found.use_job_named(name)  # its own objects only, not every job's
        job = find_job(cluster, name, namespace, inventory=found)
    pods_error = None
    try:
        read_worker_pods(cluster, job)
    except ServiceError as e:
        pods_error = str(e)
    # A running or finished job has nothing to explain: no snapshot is read for it.
    waits = job.status not in (State.RUNNING, State.SUCCEEDED)
    inv = snapshot_inventory(cluster, job.namespace, perms, known=found) if waits else None
    why = explain(job, inv) if inv is not None else ""
    est = job_estimate(inv, job) if inv is not None else None
    lb = job.labels
    tmpl = pod_template(job.obj).get("spec") or {}
    c = tmpl["containers"][0]
    wl = job.workload
    where = placement(wl)
    use, use_error = _gpu_use(job, prom)
    evs, evs_error = read_events(cluster, job) if events else (None, None)
    gpus, gpus_text = _asked(job, tmpl)
    bound = RecordedBound.fields(recorded_bound(wl, time.time()))
    return JobDescription(
        job_id=job.name,
        name=job.name,
        namespace=job.namespace,
        kind=job.kind,
        resource_type=job.resource,
        status=job.status,
        reason=job.reason,
        why=why,
        position=job.position,
        pool=job.pool,
        priority=lb.get(Labels.PRIORITY),
        queue=lb.get(Labels.KUEUE_QUEUE),
        image=c.get("image"),
        resources=(c.get("resources") or {}).get("requests") or {},
        gpus=gpus,
        gpus_text=gpus_text,
        workload=wl["metadata"]["name"] if wl else None,
        workloads=sorted(
            {meta(w).get("name") for w in (wl, *job.replica_workloads, *job.pod_workloads.values()) if w}
        ),
        conditions=[
            {k: cond.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for cond in ((wl or {}).get("status") or {}).get("conditions") or []
        ],
        pods=[
            {
                "name": p["metadata"]["name"],
                "node": p["spec"].get("nodeName"),
                "phase": (p.get("status") or {}).get("phase"),
            }
            for p in job.pods
        ],
        env=c.get("env") or [],
        service=_service(job.service),
        created_at=meta(job.obj).get("creationTimestamp"),
        max_runtime=max_runtime_seconds(wl) if wl else max_runtime_seconds(job.obj),
        estimate=est.as_dict() if est is not None else None,
        moved=_moved(wl),
        set_aside_ended=(meta(wl).get("annotations") or {}).get(SET_ASIDE_ENDED_ANNOTATION) if wl else None,
        starts_by=bound["startsBy"],
        bound=bound["bound"],
        cluster=where.text if where else None,
        multikueue={"state": where.state, "message": where.message} if where else None,
        pods_error=pods_error,
        gang=gang_view(job.member or cluster, job.obj, job.pods, job.pool),
        replicas=replicas_view(job.obj, job.replica_workloads, job.pods, inv, job.burst),
        autoscaling=autoscaling_view(job, inv),
        gpu_use=use,
        gpu_use_error=use_error,
        **lifetime(job),
        events=evs,
        events_error=evs_error,
    )


def _asked(job: Job, tmpl: dict) -> tuple[int | float, str]:
    """What the job asks, as GPUs its team's quota is charged (slices at their share; get jobs' spec.gpus,
    gpuctl.domain.gpus.controller_asks) and as describe's words (every replica counted). An autoscaled
    service: its floor's and its burst's replicas, whole GPUs (docs/serving.md; its Autoscaling section)."""
    if job.burst is not None:
        n = pod_spec_gpus(tmpl) * _replicas(job)
        return n, str(n)
    units, _, pods = controller_asks(job.resource, job.obj)
    charged = units_to_gpus(units)
    word = "pods" if job.resource == "Job" else "replicas"
    return charged, asked_text(pods, pod_spec_gpu_requests(tmpl), charged, word)


def _replicas(job: Job) -> int:
    """Pods the job asks for: a Job's parallelism, a controller's replicas (times a LeaderWorkerSet's
    group size)."""
    spec = job.obj["spec"]
    if job.burst is not None:  # an autoscaled service: its floor's and its burst's (pods of their groups)
        burst = int((job.burst.get("spec") or {}).get("replicas") or 0)
        return (int(spec.get("replicas") or 0) + burst) * group_size(job.obj)
    if job.resource == "Job":
        return int(spec.get("parallelism") or 1)
    return (int(spec["replicas"]) if spec.get("replicas") is not None else 1) * group_size(job.obj)


def _service(svc: dict | None) -> dict | None:
    """A job's Service as `describe job` shows it (its first port)."""
    if not svc:
        return None
    port = svc["spec"]["ports"][0]
    return {
        "name": svc["metadata"]["name"],
        "type": svc["spec"].get("type"),
        "clusterIP": svc["spec"].get("clusterIP"),
        "port": port.get("port"),
        "targetPort": port.get("targetPort"),
        "nodePort": port.get("nodePort"),
    }


# ----------------------------------------------------------------------------- namespaces
@dataclass
class NamespaceRow:
    name: str
    status: str
    quota: str
    age: float | None
    created_at: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    uid: str = ""  # not in as_dict (the API's shape); `get ns -o json` prints it

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "quota": self.quota,
            "age": self.age,
            "created_at": self.created_at,
        }


def _namespace_row(n: dict) -> NamespaceRow:
    return NamespaceRow(
        name=n["metadata"]["name"],
        status=(n.get("status") or {}).get("phase", ""),
        quota=labels(n).get(Labels.QUOTA, ""),
        age=age_seconds(n),
        created_at=meta(n).get("creationTimestamp"),
        labels=dict(labels(n)),
        uid=meta(n).get("uid", ""),
    )


def list_namespaces(cluster: Cluster, perms: Permissions | None = None) -> list[NamespaceRow]:
    """gpuctl's team namespaces (labelled runwhere.ai/namespace=true), by name. A caller who may not
    list namespaces (a team member) gets the team namespaces it may `get` (the teams are known from
    their ClusterQueues, which pool viewers read)."""
    perms = permissions_of(cluster, perms)
    if perms.allows("list", "namespaces"):
        items = cluster.list(path("Namespace"), label_selector=f"{Labels.NAMESPACE}=true")
    else:
        teams = Inventory(cluster, None, perms=perms).team_queues
        spaces = readable_namespaces(perms, "get", "namespaces", "", teams)
        spaces = sorted(teams) if spaces is None else spaces
        found = (cluster.get_or_none(path("Namespace", ns)) for ns in spaces)
        items = [n for n in found if n is not None and labels(n).get(Labels.NAMESPACE) == "true"]
    return sorted((_namespace_row(n) for n in items), key=lambda r: r.name)


@dataclass
class NamespaceDescription:
    namespace: NamespaceRow
    quota: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {**self.namespace.as_dict(), "labels": self.namespace.labels, "quota": self.quota}


def describe_namespace(cluster: Cluster, name: str) -> NamespaceDescription:
    n = cluster.get_or_none(path("Namespace", name))
    if n is None:
        raise NotFound(f"namespace {name} not found", resource="namespaces", name=name)
    rows = quota_rows(cluster, name)
    return NamespaceDescription(_namespace_row(n), rows[0] if rows else None)


# ----------------------------------------------------------------------------- quotas
def describe_quota(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The teams of a quota, found by quota name or by team namespace."""
    rows = [q for q in quota_rows(cluster) if name in (q["namespace"], q["name"])]
    if not rows:
        raise NotFound(
            f"quota {name} not found (give a team namespace or a quota name)", resource="quotas", name=name
        )
    return rows
