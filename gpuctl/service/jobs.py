"""Jobs: listing (`get jobs` rows), finding by job.name. Shared by the CLI and the API. Deleting one:
gpuctl.service.jobs_delete; why a job waits: gpuctl.service.waiting; its logs: gpuctl.service.logs."""

from __future__ import annotations

import re
import time

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import SERVICE_PREFIX, SERVICE_STOPPED_ANNOTATION, Kind, Labels, Tier
from gpuctl.domain.gang import by_rank, gang_nodes, gang_pods, groups_gpus, groups_waiting, replica_groups
from gpuctl.domain.gpus import controller_asks, pod_gpus, slices_held, workload_gpus, workload_slices
from gpuctl.domain.multicluster import placement
from gpuctl.domain.objects import age_seconds, owner_refs, pod_finished
from gpuctl.domain.promise import recorded_bound
from gpuctl.domain.serving import combined, is_burst, scale, service_of, tier, tier_groups
from gpuctl.domain.status import (
    WAITING_STATES,
    JobStatus,
    State,
    gang_ready,
    gang_status,
    is_gated,
    job_status,
    pod_ip,
    pod_node,
    pod_ready,
    pod_status,
    workload_word,
)
from gpuctl.domain.workload import IN_QUEUE, job_pool, stop_reason, workload_state
from gpuctl.service.access import Permissions
from gpuctl.service.errors import NotFound, ServiceError
from gpuctl.service.inventory import PER_REPLICA_KINDS, Inventory, least_advanced
from gpuctl.service.members import worker
from gpuctl.service.waiting import job_estimate, snapshot

# JobRow and Job are plain classes: a dataclass compiles its generated methods when the module loads,
# and every `get jobs` loads this one (bench/reads.py).
ROW_FIELDS = (
    "job_id",
    "name",
    "namespace",
    "kind",
    "status",
    "ready",
    "node",
    "ip",
    "age",
    "pool",
    "priority",
    "queue",
    "position",
    "gpus",
    "slices",
    "reason",
    "cluster",
    "labels",
    "replicas",
)


class JobRow:
    """One row of `get jobs`: a pod, or a job that has no pod yet (queued). Earlier gpuctl's JSON keys
    (ROW_FIELDS, in their order)."""

    # owner: the facts of the job the row belongs to (JobFacts: its object's uid and creationTimestamp,
    # what it asked), shared by a job's rows; not a row field (the API's and --json's rows leave it out).
    __slots__ = (*ROW_FIELDS, "owner", "created")

    def __init__(
        self,
        job_id: str,
        name: str,
        namespace: str,
        kind: str,
        status: str,
        ready: str,
        node: str,
        ip: str,
        age: float | None,
        pool: str = "",
        priority: str = "",
        queue: str = "",
        position: int | None = None,
        gpus: int | None = 0,
        slices: dict[str, int] | None = None,
        reason: str = "",
        cluster: str = "",
        labels: dict[str, str] | None = None,
        replicas: dict | None = None,
    ):
        self.job_id, self.name, self.namespace, self.kind = job_id, name, namespace, kind
        self.status, self.ready, self.node, self.ip, self.age = status, ready, node, ip, age
        self.pool, self.priority, self.queue, self.position = pool, priority, queue, position
        self.gpus = gpus  # None: not read (list_job_rows(gpus=False))
        # GPU slices beside the whole GPUs (MIG instances, shared replicas: {"nvidia.com/mig-1g.10gb": 2}),
        # read with the GPUs: a job of slices holds 0 whole GPUs.
        self.slices = slices
        # Why a waiting job waits (gpuctl.domain.explain), when positions are computed (-o wide/json).
        self.reason = reason
        # A MultiKueue manager's job: the worker cluster running it, or the clusters it is offered to.
        self.cluster = cluster
        # The job's own labels (its controller's), what -l selects on and --show-labels prints.
        self.labels: dict[str, str] = labels if labels is not None else {}
        # An autoscaled service's own row (gpuctl.domain.serving.Scale.as_dict: minReplicas, maxReplicas,
        # desired, ready, running, waiting); None on every other row.
        self.replicas = replicas
        self.owner: JobFacts | None = None
        self.created: str | None = None  # a pod's row: the pod's creationTimestamp

    def as_dict(self) -> dict:
        """Its fields in order (the earlier gpuctl's JSON keys), what dataclasses.asdict gave."""
        d = {k: getattr(self, k) for k in ROW_FIELDS}
        d["labels"] = dict(self.labels)
        for k in ("slices", "replicas"):
            if d[k] is not None:
                d[k] = dict(d[k])
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRow) and all(getattr(self, k) == getattr(other, k) for k in ROW_FIELDS)

    def __repr__(self) -> str:
        return f"JobRow({', '.join(f'{k}={getattr(self, k)!r}' for k in ROW_FIELDS)})"


class JobFacts:
    """What every row of one job shares (what `get jobs -o json` prints per job, gpuctl.cli.objects):
    its object's uid and creationTimestamp, its resource (Job, Deployment, StatefulSet, LeaderWorkerSet),
    what it asked (GPUs as budget units, whole GPUs and slices alike; nodes of a gang; replicas), its
    status word and reason, its start bound (an Estimate's startsBy when asked; serve's recorded one)."""

    __slots__ = (
        "bound",
        "created",
        "nodes",
        "position",
        "replicas",
        "resource",
        "starts_by",
        "status",
        "uid",
        "units",
    )

    def __init__(self, job: Job, starts_by: str | None = None, now: float | None = None):
        m = job.obj["metadata"]
        self.bound = recorded_bound(job.workload, time.time() if now is None else now)
        self.uid, self.created, self.resource = m.get("uid", ""), m.get("creationTimestamp"), job.resource
        self.units, self.nodes, self.replicas = controller_asks(job.resource, job.obj)
        self.status, self.position, self.starts_by = job.status, job.position, starts_by


class Job:
    """A gpuctl job: its controller, Kueue Workload, pods, Service."""

    def __init__(
        self,
        kind: str,  # training | inference | notebook | compute
        resource: str,  # Job | Deployment | StatefulSet | LeaderWorkerSet
        obj: dict,
        workload: dict | None,
        pods: list[dict],
        status: str,
        reason: str = "",
        position: int | None = None,
        service: dict | None = None,
        cluster: str | None = None,
        member: Cluster | None = None,
        pod_words: dict[str, str] | None = None,
        replica_workloads: list[dict] | None = None,
        burst: dict | None = None,
        autoscaler: dict | None = None,
        pod_workloads: dict[str, dict | None] | None = None,
    ):
        self.kind, self.resource, self.obj, self.workload, self.pods = kind, resource, obj, workload, pods
        self.status, self.reason, self.position, self.service = status, reason, position, service
        # The worker cluster that runs it (a MultiKueue manager's job, docs/multicluster.md) and the
        # connection its pods were read through (find_job); None: this cluster.
        self.cluster, self.member = cluster, member
        # Pod uid -> its status word (pod_status with the pod's own Workload), computed once per pod.
        self.pod_words: dict[str, str] = pod_words if pod_words is not None else {}
        # A LeaderWorkerSet's Workloads, one per replica (group); [] for other kinds.
        self.replica_workloads: list[dict] = replica_workloads if replica_workloads is not None else []
        # An autoscaled service (docs/serving.md): `obj` is its floor Deployment, this its burst Deployment
        # (its pods are among `pods`: both tiers carry app=<name>); the HPA when read (find_job).
        self.burst, self.autoscaler = burst, autoscaler
        # Pod uid -> the Workload it is judged by (a Deployment's pod: its own).
        self.pod_workloads: dict[str, dict | None] = pod_workloads if pod_workloads is not None else {}

    @property
    def autoscaled(self) -> bool:
        return tier(self.obj) is Tier.FLOOR

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]

    @property
    def labels(self) -> dict:
        return self.obj["metadata"].get("labels") or {}

    @property
    def pool(self) -> str | None:
        """The job's pool (gpuctl.domain.workload.job_pool over its controller, Workload and pods)."""
        return job_pool(self.obj, self.workload, *self.pods)


# ----------------------------------------------------------------------------- building Jobs
def _kind_of(obj: dict) -> str:
    return (obj["metadata"].get("labels") or {}).get(Labels.JOB_TYPE, "")


def collect_jobs(inv: Inventory, *, positions: bool = True) -> list[Job]:
    """One Job per gpuctl job; an autoscaled service's burst (Deployment, or LeaderWorkerSet of multi-node
    replicas) is part of its floor's job."""
    bursts = {
        (kind, o["metadata"]["namespace"], service_of(o)): o
        for kind, o in inv.controllers
        if kind in PER_REPLICA_KINDS and is_burst(o)
    }
    jobs = []
    for resource, obj in inv.controllers:
        if resource in PER_REPLICA_KINDS and is_burst(obj):
            continue
        pods = inv.pods_of(resource, obj)
        key = (resource, obj["metadata"]["namespace"], obj["metadata"]["name"])
        burst = bursts.get(key) if tier(obj) else None
        # A LeaderWorkerSet's groups' Workloads (and its burst's: a set of their own).
        sets = [] if resource != "LeaderWorkerSet" else [o for o in (obj, burst) if o is not None]
        groups_wls = [w for o in sets for w in inv.workloads_of(resource, o, pods)]
        wl = least_advanced(groups_wls) if burst and groups_wls else inv.workload_of(resource, obj, pods)
        pod_wls = {p["metadata"]["uid"]: inv.pod_workload(p, wl) for p in pods}
        words = {uid: pod_status(p, pod_wls[uid]) for p in pods for uid in [p["metadata"]["uid"]]}
        seen = combined(obj, burst) if tier(obj) else obj
        st = job_status(resource, seen, wl, pods, list(words.values()))
        if tier(obj) and SERVICE_STOPPED_ANNOTATION in (obj["metadata"].get("annotations") or {}):
            st = JobStatus(State.INACTIVE, "stopped: gpuctl resume starts it again")
        pos = _position(inv, wl) if positions else None
        job = Job(
            _kind_of(obj), resource, obj, wl, pods, st.state, st.reason, pos, pod_words=words, burst=burst
        )
        job.pod_workloads = pod_wls
        job.replica_workloads = groups_wls
        jobs.append(job)
    return jobs


def _position(inv: Inventory, wl: dict | None) -> int | None:
    """The queue position of a Workload in the queue (IN_QUEUE: an Inactive one is in none), through its
    owner (inv.positions is keyed by owner)."""
    if workload_state(wl) not in IN_QUEUE:
        return None
    return next((inv.positions[r["uid"]] for r in owner_refs(wl) if r.get("uid") in inv.positions), None)


def list_job_rows(
    cluster: Cluster,
    namespace: str | None,
    *,
    pool: str | None = None,
    kind: str | None = None,
    selector: str | None = None,
    inventory: Inventory | None = None,
    positions: bool = True,
    gpus: bool = True,
    reasons: bool = True,
    perms: Permissions | None = None,
    estimates: bool = False,
) -> list[JobRow]:
    """Rows of `get jobs`: every pod of every gpuctl job, plus one row per job without pods.

    positions=False skips the queue positions, and with them the list of every Workload (the cost of
    `get jobs` at scale): the plain table does not show them. gpus=False leaves the rows' GPU counts
    unset (None) and reads pods as Table rows without their specs, a fifth of the bytes.
    reasons=False leaves REASON empty, for a caller that does not print it (the API's rows): no
    snapshot of the cluster is built to judge why each waiting job waits. inventory: the command's
    reading of the cluster, when the caller has one (else one is made here, read as the table needs).
    Every row carries its job's JobFacts (`owner`); estimates=True adds when a waiting job starts at the
    latest (gpuctl.service.waiting.job_estimate, against the snapshot its reason was judged on)."""
    inv = inventory or _rows_inventory(cluster, namespace, positions=positions, gpus=gpus, perms=perms)
    wanted = _selector_filter(selector)
    why = _Reasons(inv, enabled=positions and reasons)
    rows: list[JobRow] = []
    now = time.time()  # one instant for every job's bound
    for job in collect_jobs(inv, positions=positions):
        if (kind and job.kind != kind) or (pool and (job.pool or "") != pool) or not wanted(job.labels):
            continue
        mine = _job_rows(inv, job, why, positions=positions, gpus=gpus)
        facts = JobFacts(job, _starts_by(inv, job) if estimates else None, now)
        for r in mine:
            r.owner = facts
        rows += mine
    rows.sort(key=lambda r: (r.namespace, r.name, r.job_id))
    return rows


def _starts_by(inv: Inventory, job: Job) -> str | None:
    est = job_estimate(inv, job)
    return None if est is None else est.as_dict()["startsBy"]


def _rows_inventory(
    cluster: Cluster, namespace: str | None, *, positions: bool, gpus: bool, perms: Permissions | None
) -> Inventory:
    """A `get jobs` table's reading: no GPU counts, pods as Table rows, only the Workloads a status word
    needs (-o wide: every one, for BOUND: each job's recorded bound); positions come from Kueue."""
    inv = Inventory(cluster, namespace, pod_rows=not gpus, perms=perms)
    if not gpus and not positions:
        inv.use_workloads_of_suspended_jobs()
    if not gpus and positions and inv.positions:
        # Some job waits: its REASON needs every pod's spec (GPUs per node, the gated pods' demands),
        # so gpuctl's pods come in full once instead of as Table rows and then in full again.
        inv.pod_rows = False
    return inv


class _Reasons:
    """REASON of a row: why its job waits (gpuctl.domain.explain), judged against one snapshot of the
    cluster built on the first waiting row; a stopped job's stop reason; empty otherwise or when not
    `enabled`."""

    def __init__(self, inv: Inventory, *, enabled: bool):
        self.inv, self.enabled = inv, enabled

    def __call__(self, wl: dict | None, status: str, pod: dict | None = None) -> str:
        if not self.enabled:
            return ""
        stopped = stop_reason(wl)
        if stopped:  # in no queue, nothing to judge (its pods may still be terminating)
            return stopped
        if status not in WAITING_STATES:
            return ""
        from gpuctl.domain.explain import pod_demand, workload_demand  # noqa: PLC0415 - lazy: waiting rows only

        if wl is not None:
            demand = workload_demand(wl)
        elif pod is not None and "spec" in pod and is_gated(pod):
            demand = pod_demand(pod)  # a Deployment's pod whose own Workload was not read
        else:
            return ""
        return snapshot(self.inv).verdict(demand).message or "being admitted"


def _job_rows(inv: Inventory, job: Job, why: _Reasons, *, positions: bool, gpus: bool) -> list[JobRow]:
    """A job's rows: one per shown pod (a Job's every pod, else its live ones); one for a job without
    pods (queued, or running in a worker cluster) and one for a multi-node job (READY k/N, its nodes in
    rank order)."""
    labels = job.labels
    common = {
        "name": job.name,
        "namespace": job.namespace,
        "kind": job.kind,
        "pool": job.pool or "",
        "priority": labels.get(Labels.PRIORITY, ""),
        "queue": labels.get(Labels.KUEUE_QUEUE, ""),
        "labels": dict(labels),
    }
    live = [p for p in job.pods if not pod_finished(p)]
    shown = job.pods if job.resource == "Job" else (live or job.pods)
    where = placement(job.workload)
    if where is not None:
        common["cluster"] = where.text
    one = {"job_id": job.name, "age": age_seconds(job.obj), "position": job.position, **common}
    if not shown:
        ready = _remote_ready(job) if where is not None else "0/0"
        count = (workload_gpus(job.workload) if job.workload else 0) if gpus else None
        held = workload_slices(job.workload) if gpus else None
        reason = why(job.workload, job.status)
        return [
            JobRow(
                status=job.status,
                ready=ready,
                node="<none>",
                ip="<none>",
                gpus=count,
                slices=held,
                reason=reason,
                **one,
            )
        ]
    if job.resource == "LeaderWorkerSet":
        return [_lws_row(job, live, why, gpus=gpus, one=one)]
    if gang_nodes(job.obj) > 1:
        ranked = gang_pods(job.obj, shown) or by_rank(shown)
        return [
            JobRow(
                status=gang_status(job.status, [job.pod_words[p["metadata"]["uid"]] for p in ranked]),
                ready=gang_ready(ranked, gang_nodes(job.obj)),
                node=",".join(dict.fromkeys(n for p in ranked if (n := pod_node(p)))) or "<none>",
                ip=pod_ip(ranked[0]) or "<none>",
                gpus=sum(pod_gpus(p) for p in ranked) if gpus else None,
                slices=slices_held((p.get("spec"), 1) for p in ranked) if gpus else None,
                reason=why(job.workload, job.status),
                **one,
            )
        ]
    rows = [
        _pod_row(inv, job, pod, why, positions=positions, gpus=gpus, common=common)
        for pod in sorted(shown, key=lambda p: p["metadata"]["name"])
    ]
    if job.autoscaled:
        return [_service_row(job, one, gpus=gpus, pod_rows=rows), *rows]
    return rows


def _service_row(job: Job, one: dict, *, gpus: bool, pod_rows: list[JobRow]) -> JobRow:
    """An autoscaled service's own row above its replicas' (docs/serving.md): READY ready/desired (the
    floor's replicas and what the HPA set for the burst), its status, and in REASON how many replicas
    wait at Kueue's gate (each replica's row says why and until when)."""
    sc = scale(job.obj, job.burst, job.pods)
    waiting = f"{sc.waiting} of {sc.desired} replicas waiting for GPUs" if sc.waiting else ""
    return JobRow(
        status=job.status,
        ready=f"{sc.ready}/{sc.desired}",
        node="-",
        ip="-",
        gpus=sum(r.gpus or 0 for r in pod_rows if r.status not in WAITING_STATES) if gpus else None,
        reason=waiting,
        replicas=sc.as_dict(),
        **{**one, "position": None},
    )


def _lws_row(job: Job, live: list[dict], why: _Reasons, *, gpus: bool, one: dict) -> JobRow:
    """The one row of a service of multi-node replicas (a LeaderWorkerSet): READY its ready replicas of
    those asked for (a replica is ready when its whole group is), its nodes, the GPUs of its admitted
    groups, and in REASON how many replicas wait at Kueue's gate and why (the least advanced group's)."""
    seen = combined(job.obj, job.burst) if job.autoscaled else job.obj  # floor and burst: one service
    spec, st = seen.get("spec") or {}, seen.get("status") or {}
    desired = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    # An autoscaled service's floor and burst number their groups each from 0: a group is set + index.
    groups = dict(enumerate(tier_groups(live))) if job.autoscaled else replica_groups(live)
    ranked = [p for group in groups.values() for p in group]
    reason = why(job.workload, job.status)
    if waiting := groups_waiting(groups):
        # The service may be Running while a group waits: why the least advanced group (its Workload) does.
        reason = why(job.workload, workload_word(job.workload) or job.status)
        reason = f"{waiting} of {desired} replicas waiting for GPUs" + (f": {reason}" if reason else "")
    return JobRow(
        status=gang_status(job.status, [job.pod_words[p["metadata"]["uid"]] for p in ranked]),
        ready=f"{int(st.get('readyReplicas') or 0)}/{desired}",
        node=",".join(dict.fromkeys(n for p in ranked if (n := pod_node(p)))) or "<none>",
        ip=(pod_ip(ranked[0]) if ranked else "") or "<none>",
        gpus=groups_gpus(groups) if gpus else None,
        reason=reason,
        replicas=scale(job.obj, job.burst, job.pods).as_dict() if job.autoscaled else None,
        **one,
    )


def _pod_row(
    inv: Inventory, job: Job, pod: dict, why: _Reasons, *, positions: bool, gpus: bool, common: dict
) -> JobRow:
    """The row of one pod: its own status word (a waiting Job's pending pod says the job's), position
    and reason (a Deployment's pod is judged by its own Workload)."""
    r, t = pod_ready(pod)
    pod_wl = inv.pod_workload(pod, job.workload)
    st = job.pod_words[pod["metadata"]["uid"]]
    if job.resource == "Job" and job.status in WAITING_STATES and st in (State.PENDING, State.QUEUED):
        st = job.status
    position = None
    if positions and st in WAITING_STATES:
        position = inv.positions.get(pod["metadata"]["uid"]) or _position(inv, pod_wl) or job.position
    if job.autoscaled:  # a replica's tier is its priority (floor | burst)
        common = {**common, "priority": str(tier(pod) or "")}
    row = JobRow(
        job_id=pod["metadata"]["name"],
        status=st,
        ready=f"{r}/{t}",
        node=pod_node(pod) or "<none>",
        ip=pod_ip(pod) or "<none>",
        age=age_seconds(pod),
        position=position,
        gpus=pod_gpus(pod) if gpus else None,
        slices=slices_held([(pod.get("spec"), 1)]) if gpus else None,
        reason=why(pod_wl, st, pod),
        **common,
    )
    row.created = pod["metadata"].get("creationTimestamp")
    return row


def _remote_ready(job: Job) -> str:
    """A job running in a worker cluster: its pods are there, and MultiKueue copies the Job's status back
    (ready pods of parallelism)."""
    st, spec = job.obj.get("status") or {}, job.obj.get("spec") or {}
    return f"{int(st.get('ready') or 0)}/{int(spec.get('parallelism') or 1)}"


_SEL = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)?\s*([^\s]*)\s*$")


def _selector_filter(selector: str | None):
    """A label-selector matcher for equality selectors (k=v, k!=v, k) joined by commas."""
    if not selector:
        return lambda labels: True
    terms = []
    for part in selector.split(","):
        m = _SEL.match(part)
        if not m:
            raise ServiceError(f"invalid label selector {selector!r}: use key=value[,key!=value]")
        terms.append(m.groups())

    def match(labels: dict) -> bool:
        for key, op, value in terms:
            if op is None and key not in labels:
                return False
            if op in ("=", "==") and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        return True

    return match


# ----------------------------------------------------------------------------- finding one job
def matching_jobs(jobs: list[Job], name: str) -> list[Job]:
    """Jobs named `name` (an autoscaled service also by its burst Deployment's name); else the jobs
    owning a pod named `name`."""
    return [j for j in jobs if name in (j.name, j.burst and j.burst["metadata"]["name"])] or [
        j for j in jobs if any(p["metadata"]["name"] == name for p in j.pods)
    ]


def namespaces_holding(cluster: Cluster, name: str) -> list[str]:
    """Namespaces where a job (or a job's pod) has this name."""
    inv = Inventory(cluster, None)
    inv.use_job_named(name)
    return sorted({j.namespace for j in matching_jobs(collect_jobs(inv), name)})


def find_job(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    *,
    inventory: Inventory | None = None,
    perms: Permissions | None = None,
    positions: bool = True,
) -> Job:
    """The gpuctl job whose job.name is `name`, or that owns the pod `name` (the JOB ID column of
    `get jobs` shows pod names, and users of the earlier gpuctl pass those): in `namespace` if given,
    else in every namespace.

    Never matched by prefix; several matches across namespaces is an error naming them. inventory: the
    command's (read with use_job_named(name)); positions=False: its queue position is not read.
    """
    inv = inventory
    if inv is None:
        inv = Inventory(cluster, namespace, perms=perms)
        inv.use_job_named(name)  # its own objects only, not every job's
    matches = matching_jobs(collect_jobs(inv, positions=positions), name)
    if not matches:
        where = f" in namespace {namespace}" if namespace else ""
        raise NotFound(f"job {name} not found{where}", resource="jobs", name=name)
    if len(matches) > 1:
        where = ", ".join(sorted(f"{j.namespace} ({j.kind})" for j in matches))
        raise ServiceError(f"job {name} exists in several places: {where}; pass -n NAMESPACE")
    job = matches[0]
    if job.autoscaled:
        job.autoscaler = cluster.get_or_none(path("HorizontalPodAutoscaler", job.name, job.namespace))
    if job.kind in (Kind.INFERENCE, Kind.COMPUTE, Kind.NOTEBOOK) or gang_nodes(job.obj) > 1:
        job.service = cluster.get_or_none(path("Service", SERVICE_PREFIX + job.name, job.namespace))
    return job


def read_worker_pods(cluster: Cluster, job: Job) -> None:
    """A job MultiKueue runs in a worker cluster (docs/multicluster.md): its pods are there (the manager's Job
    has none), read through the caller's context of that worker (gpuctl.service.members). ServiceError when
    they cannot be read; nothing to do for a job of this cluster."""
    where = placement(job.workload)
    if where is None or not where.cluster or job.pods:
        return
    job.cluster = where.cluster
    job.member = worker(cluster, where.cluster, f"job {job.name}: runs in ")
    try:
        job.pods = job.member.list(
            path("Pod", namespace=job.namespace), label_selector=f"{Labels.BATCH_JOB_NAME}={job.name}"
        )
    except (ApiError, OSError) as e:
        raise ServiceError(
            f"job {job.name} runs in cluster {where.cluster}, whose pods gpuctl cannot read through your "
            f"context {where.cluster}: {e}"
        ) from None


__all__ = [
    "Job",
    "JobRow",
    "collect_jobs",
    "find_job",
    "list_job_rows",
]
