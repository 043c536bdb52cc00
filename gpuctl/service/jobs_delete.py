"""Deleting a gpuctl job (`gpuctl delete job`, `delete -f`, the REST API): its controller, an autoscaled
service's HPA and burst Deployment, its Service; only objects carrying gpuctl's labels are touched."""

from __future__ import annotations

from gpuctl.cluster import Cluster, path, type_name
from gpuctl.constants import Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.service.access import Permissions
from gpuctl.service.jobs import Job, find_job


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
    job = find_job(cluster, name, namespace, perms=perms, positions=False)
    done = []
    grace = 0 if force else None
    if dry_run is DryRun.CLIENT or cluster.delete(
        path(job.resource, job.name, job.namespace),
        propagation="Background",
        grace_seconds=grace,
        dry_run=server_dry,
        precondition_uid=job.obj["metadata"]["uid"],
    ):
        done.append(f"{type_name(job.resource, job.name)} deleted")
    for kind, obj in _autoscaled_parts(job):  # an autoscaled service's HPA (first: it scales) and burst
        meta = obj["metadata"]
        if dry_run is DryRun.CLIENT or cluster.delete(
            path(kind, meta["name"], job.namespace),
            propagation="Background",
            grace_seconds=grace,
            dry_run=server_dry,
            precondition_uid=meta["uid"],
        ):
            done.append(f"{type_name(kind, meta['name'])} deleted")
    svc = job.service
    ours = svc is not None and (svc["metadata"].get("labels") or {}).get(Labels.JOB_TYPE)
    if ours and (
        dry_run is DryRun.CLIENT
        or cluster.delete(path("Service", svc["metadata"]["name"], job.namespace), dry_run=server_dry)
    ):
        done.append(f"{type_name('Service', svc['metadata']['name'])} deleted")
    if force and dry_run.persists:
        for pod in job.pods:
            cluster.delete(path("Pod", pod["metadata"]["name"], job.namespace), grace_seconds=0)
    return done


def _autoscaled_parts(job: Job) -> list[tuple[str, dict]]:
    """The objects of an autoscaled service beside its floor that gpuctl made (its labels): the HPA, then
    the burst (a Deployment, or a LeaderWorkerSet of multi-node replicas: the floor's kind)."""
    parts = [("HorizontalPodAutoscaler", job.autoscaler), (job.resource, job.burst)]
    return [(k, o) for k, o in parts if o and (o["metadata"].get("labels") or {}).get(Labels.JOB_TYPE)]


__all__ = ["delete_job"]
