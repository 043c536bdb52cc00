"""A job's start, end, exit code and Events, as `describe job` prints them (the rules:
gpuctl.domain.lifetime).

The Events are read with one list of the job's namespace (its pods' too in the worker cluster of a
MultiKueue job) and kept when they are about one of the job's objects: its controller (and an
autoscaled service's burst), its pods and their owners (a Deployment's ReplicaSets, a JobSet's Jobs),
its Workloads. A caller who may not list Events still gets the rest, and why the Events are missing.
"""

from __future__ import annotations

from typing import Any

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.domain.lifetime import event_source, event_times, job_events, job_exit, job_times, regarding
from gpuctl.domain.objects import owner_refs, rfc3339, uid
from gpuctl.service.errors import describe_exception
from gpuctl.service.jobs import Job


def _uids(job: Job) -> set[str]:
    objs = [job.obj, job.burst, job.workload, *job.replica_workloads, *job.pod_workloads.values(), *job.pods]
    found = {uid(o) for o in objs if o}
    found |= {r["uid"] for p in job.pods for r in owner_refs(p) if r.get("uid")}
    return found - {""}


def _event(ev: dict) -> dict[str, Any]:
    first, last, count = event_times(ev)
    about = regarding(ev)
    return {
        "type": ev.get("type") or "",
        "reason": ev.get("reason") or "",
        "object": f"{about.get('kind', '')}/{about.get('name', '')}",
        "firstTimestamp": rfc3339(first) if first is not None else None,
        "lastTimestamp": rfc3339(last) if last is not None else None,
        "count": count,
        "from": event_source(ev),
        "message": (ev.get("message") or ev.get("note") or "").strip(),
    }


def read_events(cluster: Cluster, job: Job) -> tuple[list[dict[str, Any]], str | None]:
    """The Events about the job, oldest first (gpuctl.domain.lifetime.job_events), and why they could not
    be read (None: read)."""
    try:
        events = cluster.list(path("Event", namespace=job.namespace))
        if job.member is not None and job.member is not cluster:  # its pods run in a worker cluster
            events += job.member.list(path("Event", namespace=job.namespace))
    except (ApiError, OSError) as e:
        return [], describe_exception(e)
    return [_event(ev) for ev in job_events(events, _uids(job))], None


def lifetime(job: Job) -> dict[str, Any]:
    """started, ended (RFC 3339 as the API server wrote them; None: not yet) and exit (the exit code, the
    pod and container it is of, the kubelet's reason, when; None while no container has ended)."""
    times = job_times(job.resource, job.obj, job.pods)
    ended = job_exit(job.pods)
    return {
        "started": times.start,
        "ended": times.end,
        "exit": ended._asdict() if ended is not None else None,
    }


__all__ = ["lifetime", "read_events"]
