"""Jobs: listing, finding by job.name, explaining, deleting, logs. Shared by the CLI and the API."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import SERVICE_PREFIX, SLICES_USED_ANNOTATION, Kind, Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gang import by_rank, gang_nodes, gang_pods
from gpuctl.domain.gpus import pod_gpus, workload_gpus
from gpuctl.domain.multicluster import placement
from gpuctl.domain.objects import age_seconds, annotations, condition, name, owner_refs
from gpuctl.domain.sharing import slices_used
from gpuctl.domain.status import (
    WAITING_STATES,
    State,
    gang_ready,
    gang_status,
    is_gated,
    job_status,
    pod_finished,
    pod_ip,
    pod_node,
    pod_ready,
    pod_status,
    unschedulable_message,
)
from gpuctl.domain.teams import pool_reservations
from gpuctl.domain.workload import IN_QUEUE, job_pool, stop_reason, workload_state
from gpuctl.service.access import Permissions
from gpuctl.service.errors import NotFound, ServiceError
from gpuctl.service.inventory import Inventory
from gpuctl.service.members import worker

if TYPE_CHECKING:  # a table of running jobs never loads the explain and estimate models
    from gpuctl.domain.estimate import Estimate
    from gpuctl.domain.explain import Demand, Snapshot, Verdict


@dataclass
class JobRow:
    """One row of `get jobs`: a pod, or a job that has no pod yet (queued). Earlier gpuctl's JSON keys."""

    job_id: str
    name: str
    namespace: str
    kind: str
    status: str
    ready: str
    node: str
    ip: str
    age: float | None
    pool: str = ""
    priority: str = ""
    queue: str = ""
    position: int | None = None
    gpus: int | None = 0  # None: not read (list_job_rows(gpus=False))
    # Why a waiting job waits (gpuctl.domain.explain), when positions are computed (-o wide/json).
    reason: str = ""
    # A MultiKueue manager's job: the worker cluster running it, or the clusters it is offered to.
    cluster: str = ""
    # The job's own labels (its controller's), what -l selects on and --show-labels prints.
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Job:
    """A gpuctl job: its controller, Kueue Workload, pods, Service."""

    kind: str  # training | inference | notebook | compute
    resource: str  # Job | Deployment | StatefulSet
    obj: dict
    workload: dict | None
    pods: list[dict]
    status: str
    reason: str = ""
    position: int | None = None
    service: dict | None = None
    # The worker cluster that runs it (a MultiKueue manager's job, issue 24) and the connection its pods
    # were read through (find_job); None: this cluster.
    cluster: str | None = None
    member: Cluster | None = None
    # Pod uid -> its status word (pod_status with the pod's own Workload), computed once per pod.
    pod_words: dict[str, str] = field(default_factory=dict)

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
    jobs = []
    for resource, obj in inv.controllers:
        pods = inv.pods_of(resource, obj)
        wl = inv.workload_of(resource, obj, pods)
        words = {p["metadata"]["uid"]: pod_status(p, inv.pod_workload(p, wl)) for p in pods}
        st = job_status(resource, obj, wl, pods, list(words.values()))
        pos = _position(inv, wl) if positions else None
        jobs.append(Job(_kind_of(obj), resource, obj, wl, pods, st.state, st.reason, pos, pod_words=words))
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
) -> list[JobRow]:
    """Rows of `get jobs`: every pod of every gpuctl job, plus one row per job without pods.

    positions=False skips the queue positions, and with them the list of every Workload (the cost of
    `get jobs` at scale): the plain table does not show them. gpus=False leaves the rows' GPU counts
    unset (None) and reads pods as Table rows without their specs, a fifth of the bytes.
    reasons=False leaves REASON empty, for a caller that does not print it (the API's rows): no
    snapshot of the cluster is built to judge why each waiting job waits.
    """
    inv = inventory or Inventory(cluster, namespace, pod_rows=not gpus, perms=perms)
    if inventory is None and not gpus:
        # A table (plain or wide): the Workloads a status word needs; positions come from Kueue.
        inv.use_workloads_of_suspended_jobs()
        if positions and inv.positions:
            # Some job waits: its REASON needs every pod's spec (GPUs per node, the gated pods' demands),
            # so gpuctl's pods come in full once instead of as Table rows and then in full again.
            inv.pod_rows = False
    wanted = _selector_filter(selector)
    rows: list[JobRow] = []
    snaps: list[Snapshot] = []  # built on the first waiting row

    def why(wl: dict | None, status: str, pod: dict | None = None) -> str:
        if not (positions and reasons):
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
        if not snaps:
            snaps.append(snapshot(inv))
        return snaps[0].verdict(demand).message or "being admitted"

    for job in collect_jobs(inv, positions=positions):
        labels = job.labels
        if kind and job.kind != kind:
            continue
        job_pool_name = job.pool or ""
        if pool and job_pool_name != pool:
            continue
        if not wanted(labels):
            continue
        common = {
            "name": job.name,
            "namespace": job.namespace,
            "kind": job.kind,
            "pool": job_pool_name,
            "priority": labels.get(Labels.PRIORITY, ""),
            "queue": labels.get(Labels.KUEUE_QUEUE, ""),
            "labels": dict(labels),
        }
        live = [p for p in job.pods if not pod_finished(p)]
        shown = job.pods if job.resource == "Job" else (live or job.pods)
        where = placement(job.workload)
        if where is not None:
            common["cluster"] = where.text
        if not shown:
            rows.append(
                JobRow(
                    job_id=job.name,
                    status=job.status,
                    ready=_remote_ready(job) if where is not None else "0/0",
                    node="<none>",
                    ip="<none>",
                    age=age_seconds(job.obj),
                    position=job.position,
                    gpus=(workload_gpus(job.workload) if job.workload else 0) if gpus else None,
                    reason=why(job.workload, job.status),
                    **common,
                )
            )
            continue
        if gang_nodes(job.obj) > 1:  # a multi-node job: one row, READY k/N, its nodes in rank order
            ranked = gang_pods(job.obj, shown) or by_rank(shown)
            rows.append(
                JobRow(
                    job_id=job.name,
                    status=gang_status(job.status, [job.pod_words[p["metadata"]["uid"]] for p in ranked]),
                    ready=gang_ready(ranked, gang_nodes(job.obj)),
                    node=",".join(dict.fromkeys(n for p in ranked if (n := pod_node(p)))) or "<none>",
                    ip=pod_ip(ranked[0]) or "<none>",
                    age=age_seconds(job.obj),
                    position=job.position,
                    gpus=sum(pod_gpus(p) for p in ranked) if gpus else None,
                    reason=why(job.workload, job.status),
                    **common,
                )
            )
            continue
        for pod in sorted(shown, key=lambda p: p["metadata"]["name"]):
            r, t = pod_ready(pod)
            pod_wl = inv.pod_workload(pod, job.workload)
            st = job.pod_words[pod["metadata"]["uid"]]
            if job.resource == "Job" and job.status in WAITING_STATES and st in (State.PENDING, State.QUEUED):
                st = job.status
            wl_pos = None
            if positions and st in WAITING_STATES:
                wl_pos = inv.positions.get(pod["metadata"]["uid"]) or _position(inv, pod_wl) or job.position
            rows.append(
                JobRow(
                    job_id=pod["metadata"]["name"],
                    status=st,
                    ready=f"{r}/{t}",
                    node=pod_node(pod) or "<none>",
                    ip=pod_ip(pod) or "<none>",
                    age=age_seconds(pod),
                    position=wl_pos,
                    gpus=pod_gpus(pod) if gpus else None,
                    reason=why(pod_wl, st, pod),
                    **common,
                )
            )
    rows.sort(key=lambda r: (r.namespace, r.name, r.job_id))
    return rows


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
    """Jobs named `name`; else the jobs owning a pod named `name`."""
    return [j for j in jobs if j.name == name] or [
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
) -> Job:
    """The gpuctl job whose job.name is `name`, or that owns the pod `name` (the JOB ID column of
    `get jobs` shows pod names, and users of the earlier gpuctl pass those): in `namespace` if given,
    else in every namespace.

    Never matched by prefix; several matches across namespaces is an error naming them.
    """
    inv = inventory
    if inv is None:
        inv = Inventory(cluster, namespace, perms=perms)
        inv.use_job_named(name)  # its own objects only, not every job's
    matches = matching_jobs(collect_jobs(inv), name)
    if not matches:
        where = f" in namespace {namespace}" if namespace else ""
        raise NotFound(f"job {name} not found{where}")
    if len(matches) > 1:
        where = ", ".join(sorted(f"{j.namespace} ({j.kind})" for j in matches))
        raise ServiceError(f"job {name} exists in several places: {where}; pass -n NAMESPACE")
    job = matches[0]
    if job.kind in (Kind.INFERENCE, Kind.COMPUTE, Kind.NOTEBOOK) or gang_nodes(job.obj) > 1:
        job.service = cluster.get_or_none(path("Service", SERVICE_PREFIX + job.name, job.namespace))
    return job


def read_worker_pods(cluster: Cluster, job: Job) -> None:
    """A job MultiKueue runs in a worker cluster (issue 24): its pods are there (the manager's Job has
    none), read through the caller's context of that worker (gpuctl.service.members). ServiceError when
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


# ----------------------------------------------------------------------------- why not running
def explain(cluster: Cluster, job: Job, inv: Inventory | None = None) -> str:
    """One line answering "why is it not running?" (empty when it runs or ran)."""
    inv = inv or Inventory(cluster, job.namespace)
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
) -> Inventory:
    """What "when will it run" answers read, for a command that has no listing of its own: every
    namespace, gpuctl's pods in full, and of the Workloads only the suspended Jobs' (a job without
    pods is known by its Workload alone; the rest comes from pods and ClusterQueue status). A caller
    who may not list every pod (a team member) reads the job's own `namespace` instead, and gets the
    verdict by count (snapshot). cluster_queues: gpuctl's ClusterQueues when the caller has just read
    them (a server dry run's pre-checks), so they are not listed again."""
    inv = Inventory(cluster, None, perms=perms)
    if namespace and not inv.sees_every_pod:
        inv = Inventory(cluster, namespace, perms=inv.perms)
    if cluster_queues is not None:
        inv.__dict__["cluster_queues"] = cluster_queues  # the cached_property, already read
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

    if inv.sees_every_pod:
        return Snapshot.build(
            nodes=inv.nodes,
            pods=inv.snapshot_pods,
            workloads=inv.workloads,
            cluster_queues=inv.cluster_queues,
            cohort=inv.cohort,
        )
    return Snapshot.build(
        nodes=inv.nodes,
        pods=inv.pods,
        workloads=inv.workloads,
        cluster_queues=inv.cluster_queues,
        cohort=inv.cohort,
        pool_reserved=pool_reservations(inv.all_cluster_queues),
        slices_published={
            name(f): slices_used(annotations(f).get(SLICES_USED_ANNOTATION)) for f in inv.flavors
        },
    )


def when(inv: Inventory, demand: Demand) -> Verdict:
    """Would this demand start now, or what blocks it (gpuctl.domain.explain)."""
    return snapshot(inv).verdict(demand)


def job_estimate(inv: Inventory, job: Job, now: float | None = None) -> Estimate | None:
    """When a job waiting in Kueue's queue starts at the latest, with its basis (gpuctl.domain.estimate),
    from the snapshot its reason was judged against: no request of its own. None for a job that is not
    in the queue (running, finished, stopped, or without a Workload yet)."""
    if job.workload is None or workload_state(job.workload) not in IN_QUEUE:
        return None
    from gpuctl.domain.estimate import estimate  # noqa: PLC0415 - lazy: describe of a waiting job
    from gpuctl.domain.explain import workload_demand  # noqa: PLC0415

    demand = workload_demand(job.workload)
    snap = snapshot(inv)
    return estimate(snap, demand, now=time.time() if now is None else now, verdict=snap.verdict(demand))


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# ----------------------------------------------------------------------------- delete
def delete_job(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    *,
    force: bool = False,
    dry_run: DryRun = DryRun.NONE,
    perms: Permissions | None = None,
) -> list[str]:
    """Delete a gpuctl job and its Service. Only objects carrying gpuctl's labels are touched.

    CLIENT: find the job (reads only) and say what would go; SERVER: the deletes with dryRun=All."""
    dry_run = DryRun(dry_run)
    server_dry = dry_run is DryRun.SERVER
    job = find_job(cluster, name, namespace, perms=perms)
    done = []
    grace = 0 if force else None
    if dry_run is DryRun.CLIENT or cluster.delete(
        path(job.resource, job.name, job.namespace),
        propagation="Background",
        grace_seconds=grace,
        dry_run=server_dry,
        precondition_uid=job.obj["metadata"]["uid"],
    ):
        done.append(f"{job.resource.lower()}.{_group(job.resource)}/{job.name} deleted")
    svc = job.service
    ours = svc is not None and (svc["metadata"].get("labels") or {}).get(Labels.JOB_TYPE)
    if ours and (
        dry_run is DryRun.CLIENT
        or cluster.delete(path("Service", svc["metadata"]["name"], job.namespace), dry_run=server_dry)
    ):
        done.append(f"service/{svc['metadata']['name']} deleted")
    if force and dry_run.persists:
        for pod in job.pods:
            cluster.delete(path("Pod", pod["metadata"]["name"], job.namespace), grace_seconds=0)
    return done


def _group(resource: str) -> str:
    return "batch" if resource == "Job" else "apps"


# ----------------------------------------------------------------------------- logs
def job_pods_for_logs(
    cluster: Cluster, name: str, namespace: str | None, perms: Permissions | None = None
) -> tuple[Job, list[dict]]:
    job = find_job(cluster, name, namespace, perms=perms)
    read_worker_pods(cluster, job)
    # The pod named on the command line first, then running pods, then by name.
    pods = sorted(
        job.pods,
        key=lambda p: (p["metadata"]["name"] != name, pod_status(p) != "Running", p["metadata"]["name"]),
    )
    if not pods:
        raise NotFound(f"job {name} has no pods yet (status {job.status}); nothing to show")
    return job, pods


def read_logs(
    cluster: Cluster,
    pod: dict,
    *,
    tail: int | None,
    timestamps: bool,
    follow: bool = False,
    stream: bool = False,
    container: str | None = None,
    since_seconds: int | None = None,
    since_time: str | None = None,
    previous: bool = False,
):
    """A pod's log text (or, with stream=True, the raw response to iterate): of `container` (default:
    the first), since a number of seconds or an RFC 3339 time, of the previous (restarted) container."""
    query = {
        "container": container or pod["spec"]["containers"][0]["name"],
        "tailLines": tail if tail is not None and tail >= 0 else None,
        "timestamps": "true" if timestamps else None,
        "follow": "true" if follow else None,
        "sinceSeconds": since_seconds,
        "sinceTime": since_time,
        "previous": "true" if previous else None,
    }
    p = path("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"], "log")
    try:
        resp = cluster.request("GET", p, query=query, stream=stream, raw=True, timeout=None if follow else 60)
    except ApiError as e:
        raise ServiceError(f"logs of pod {pod['metadata']['name']}: {e.message or e}") from None
    if stream:
        return resp
    return resp.data.decode(errors="replace")


__all__ = [
    "Job",
    "JobRow",
    "collect_jobs",
    "delete_job",
    "explain",
    "find_job",
    "list_job_rows",
    "read_logs",
    "snapshot_inventory",
]
