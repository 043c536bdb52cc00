"""Into a running job (`gpuctl exec`, `attach`, `port-forward`): which pod of the job, waiting until it
runs, and the port a notebook or service listens on.

The pod: `--pod P` names one of the job's pods (a service's replica); `--rank N` a multi-node job's rank
N (gpuctl.service.logs.rank_target, the rule `logs --rank` uses); else rank 0 of a gang, else the job's
first running pod. It must run (phase Running) within `timeout` seconds, as kubectl's
--pod-running-timeout: a job still queued or starting is waited for (a watch of the namespace's pods,
each event re-reading the job); a job that ended, or was stopped, is refused at once, naming what to do
instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.client import WatchIdle
from gpuctl.domain.gang import gang_nodes, pod_rank
from gpuctl.domain.status import WAITING_STATES, State
from gpuctl.service.access import permissions_of
from gpuctl.service.errors import NotFound, ServiceError, require
from gpuctl.service.jobs import Job, find_job, read_worker_pods
from gpuctl.service.logs import rank_target

ENDED = frozenset({State.SUCCEEDED, State.FAILED})
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _live(job: Job) -> list[dict]:
    return [p for p in job.pods if not p["metadata"].get("deletionTimestamp")]


def choose_pod(job: Job, *, rank: int | None = None, pod: str | None = None) -> dict | None:
    """The job's pod to enter (module docstring), or None when it has none yet. ServiceError when
    --rank or --pod names none of the job's."""
    if rank is not None and pod is not None:
        raise ServiceError("only one of --rank or --pod may be given")
    pods = _live(job)
    if pod is not None:
        for p in job.pods:
            if p["metadata"]["name"] == pod:
                return p
        names = ", ".join(sorted(p["metadata"]["name"] for p in pods)) or "none yet"
        raise NotFound(f"job {job.name} has no pod {pod} (its pods: {names})")
    if rank is not None:
        try:
            return rank_target(job.obj, pods, rank)
        except NotFound:
            return None  # the rank has no pod now: waited for
    if gang_nodes(job.obj) > 1:
        ranked = [p for p in pods if pod_rank(p) == 0]
        return max(ranked, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)
    running = [p for p in pods if _phase(p) == "Running"]
    return min(running or pods, key=lambda p: p["metadata"]["name"], default=None)


def _refuse_ended(job: Job, chosen: dict | None, verb: str) -> None:
    """A job that ended or was stopped never runs again by waiting: refused at once."""
    fix = f"`gpuctl logs {job.name} -n {job.namespace}` shows what it printed"
    if chosen is not None and _phase(chosen) in ENDED_PHASES:
        raise ServiceError(
            f"cannot {verb} pod {chosen['metadata']['name']} of job {job.name}: it has ended "
            f"({_phase(chosen)}); {fix}"
        )
    if job.status in ENDED and (chosen is None or _phase(chosen) != "Running"):
        raise ServiceError(f"cannot {verb} job {job.name}: it has ended ({job.status}); {fix}")
    if job.status == State.INACTIVE:
        raise ServiceError(
            f"cannot {verb} job {job.name}: it is stopped (Inactive); "
            f"`gpuctl resume {job.name} -n {job.namespace}` queues it again"
        )


def _not_running(job: Job, chosen: dict | None, verb: str, timeout: float) -> ServiceError:
    what = f"pod {chosen['metadata']['name']} ({_phase(chosen)})" if chosen is not None else "no pod yet"
    where = f" at position {job.position}" if job.position and job.status in WAITING_STATES else ""
    reason = f": {job.reason}" if job.reason else ""
    return ServiceError(
        f"cannot {verb} job {job.name}: it is not running (status {job.status}{where}{reason}; {what}) "
        f"after waiting {timeout:g}s; `gpuctl describe job {job.name} -n {job.namespace}` says why, "
        "and --pod-running-timeout waits longer"
    )


def running_pod(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    *,
    verb: str = "exec into",
    rank: int | None = None,
    pod: str | None = None,
    timeout: float = 60,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Job, dict, Cluster]:
    """(the job, its running pod to enter, the cluster that runs that pod: a MultiKueue worker's for a job
    placed there). Waits up to `timeout` seconds for the pod to run; ServiceError naming the fix when it
    does not, or when the job ended or was stopped; NotFound for no such job."""
    deadline = clock() + timeout
    while True:
        job = find_job(cluster, name, namespace)
        read_worker_pods(cluster, job)
        chosen = choose_pod(job, rank=rank, pod=pod)
        _refuse_ended(job, chosen, verb)
        if chosen is not None and _phase(chosen) == "Running":
            return job, chosen, job.member or cluster
        left = deadline - clock()
        if left <= 0:
            raise _not_running(job, chosen, verb, timeout)
        _wait_for_pods(job.member or cluster, job.namespace, left)


def _wait_for_pods(cluster: Cluster, namespace: str, seconds: float) -> None:
    """Until one pod of the namespace changes (the job's first among them, since its pod does not exist
    yet or is not running) or `seconds` pass."""
    pods = path("Pod", namespace=namespace)
    try:
        # From now: a watch without a resourceVersion would first replay every pod as ADDED.
        since = (cluster.get(pods, limit=1).get("metadata") or {}).get("resourceVersion")
        for _ in cluster.watch(
            pods,
            resource_version=since,
            timeout_seconds=max(1, int(seconds + 0.999)),
            read_timeout=seconds + 5,
        ):
            return
    except (WatchIdle, ApiError):
        return


def require_stream(cluster: Cluster, pod: dict, subresource: str) -> None:
    """Forbidden, naming the role, unless the caller may open `subresource` (exec, attach, portforward)
    of the pod: asked before port-forward listens, so a refusal is the command's, not each
    connection's."""
    require(permissions_of(cluster), "create", f"pods/{subresource}", "", pod["metadata"]["namespace"])


def _port_number(value: Any, pod: dict) -> int | None:
    """A port as a number: an int, a digit string, or the name of a container port of `pod`."""
    if isinstance(value, int):
        return value
    text = str(value or "")
    if text.isdigit():
        return int(text)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == text:
                return int(p["containerPort"])
    return None


def remote_port(job: Job, pod: dict, asked: str | None) -> int:
    """The pod's port to forward to: `asked` (a number or a container port's name), else the job's
    Service's target port (a notebook's or service's `service.port`), else the pod's first container
    port; ServiceError when there is none or the name matches none."""
    if asked:
        port = _port_number(asked, pod)
        if port is None:
            raise ServiceError(f"pod {pod['metadata']['name']} has no container port named {asked!r}")
        if not 0 < port < 65536:
            raise ServiceError(f"port {port} is out of range: a port is 1 to 65535")
        return port
    for sp in ((job.service or {}).get("spec") or {}).get("ports") or []:
        port = _port_number(sp.get("targetPort", sp.get("port")), pod)
        if port:
            return port
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("containerPort"):
                return int(p["containerPort"])
    raise ServiceError(
        f"job {job.name} declares no port (no service.port, no container port): name one, "
        f"`gpuctl port-forward {job.name} LOCAL:REMOTE`"
    )


__all__ = ["choose_pod", "remote_port", "require_stream", "running_pod"]
