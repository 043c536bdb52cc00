"""A job's logs: which of its pods to read (the one named first, then running ones; a gang's in rank order;
a gang's rank N), and a pod's log text or stream. Shared by `gpuctl logs` and the API's logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.domain.gang import gang_nodes, pod_rank, rank_pod
from gpuctl.domain.status import pod_status
from gpuctl.service.access import Permissions
from gpuctl.service.errors import NotFound, ServiceError
from gpuctl.service.jobs import Job, find_job, read_worker_pods


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
    # A gang: rank order, rank 0 first (docs/distributed.md); a pod named on the command line before all.
    if gang_nodes(job.obj) > 1:
        pods.sort(key=lambda p: (p["metadata"]["name"] != name, pod_rank(p) is None, pod_rank(p) or 0))
    if not pods:
        raise NotFound(f"job {name} has no pods yet (status {job.status}); nothing to show")
    return job, pods


def rank_target(job: Mapping[str, Any], pods: list[dict], rank: int, flag: str = "--rank") -> dict:
    """The live pod of rank `rank` of a multi-node job (its completion index: the newest pod of a replaced
    rank), or a ServiceError saying why there is none; `flag` names the option in the words (the CLI's
    `--rank`, the API's `rank`)."""
    size, name = gang_nodes(job), job["metadata"]["name"]
    if size <= 1:
        raise ServiceError(f"{flag} {rank}: job {name} runs one pod, it has no ranks; drop {flag}")
    if not 0 <= rank < size:
        raise ServiceError(f"{flag} {rank}: job {name} has ranks 0 to {size - 1}")
    pod = rank_pod(pods, rank)
    if pod is None:
        raise NotFound(
            f"rank {rank} of job {name} has no pod now (queued, or being replaced); "
            "`gpuctl describe job` shows its ranks"
        )
    return dict(pod)


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
