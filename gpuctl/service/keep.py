"""`gpuctl keep JOB --for 4h` (docs/utilisation.md): hold a job back from the idle policy for a
bounded time, shared by the CLI (and any client: it is one annotation).

The keep is runwhere.ai/keep-until (RFC 3339) on the job's controller (its Job, StatefulSet or Deployment),
which the job's owner may patch (gpuctl-user). The policy's keepMax caps it: asked for longer, keep refuses
with the cap; written by hand past it, serve cuts it to now + keepMax the first time it sees it
(gpuctl.server.idle), so no keep outlasts the cap from when it was made. `--for 0` ends a keep.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from gpuctl.cluster import Cluster, path, type_name
from gpuctl.constants import IDLE_KEEP_MAX_SECONDS, KEEP_UNTIL_ANNOTATION
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.idle import keep_until
from gpuctl.domain.objects import rfc3339
from gpuctl.domain.workload import format_duration
from gpuctl.service.access import Permissions
from gpuctl.service.errors import ServiceError
from gpuctl.service.idle_policy import job_policy
from gpuctl.service.jobs import find_job


@dataclass
class Kept:
    """The outcome of a keep (`-o json`)."""

    name: str
    namespace: str
    kind: str
    resource: str
    until: str | None  # RFC 3339; None: no keep (ended)
    policy: str  # whose idle policy the job falls under ("quota team-a", "pool a100"), "" for none
    keep_max: int

    @property
    def object_name(self) -> str:
        return type_name(self.resource, self.name)

    def line(self) -> str:
        if self.until is None:
            return f"{self.object_name} keep ended"
        note = "" if self.policy else " (no idle policy applies to it now)"
        return f"{self.object_name} kept until {self.until}{note}"

    def as_dict(self) -> dict:
        return asdict(self)


def keep_job(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    seconds: int,
    *,
    dry_run: DryRun = DryRun.NONE,
    perms: Permissions | None = None,
    now: float | None = None,
) -> Kept:
    """Keep the job `name` for `seconds` (0: end its keep). Refused past the keepMax of the policy it falls
    under (IDLE_KEEP_MAX_SECONDS without one). CLIENT reads only; SERVER sends the patch with dryRun=All."""
    dry_run = DryRun(dry_run)
    now = time.time() if now is None else now
    job = find_job(cluster, name, namespace, perms=perms, positions=False)
    cq = cluster.get_or_none(path("ClusterQueue", job.namespace))
    flavor = cluster.get_or_none(path("ResourceFlavor", job.pool)) if job.pool else None
    pol, _unreadable = job_policy(cq, flavor)  # a policy in doubt: gpuctl's default cap
    cap = pol.keep_max if pol is not None else IDLE_KEEP_MAX_SECONDS
    if seconds > cap:
        whose = f"the idle policy of {pol.source}" if pol is not None else "gpuctl's default"
        raise ServiceError(
            f"job {job.name}: --for {format_duration(seconds)} is longer than {whose} allows "
            f"(keepMax {format_duration(cap)}); keep it for at most that, and again when it ends"
        )
    until = rfc3339(now + seconds) if seconds > 0 else None
    had = keep_until(job.obj)
    if (until is not None or had is not None) and dry_run.writes:
        cluster.merge_patch(
            path(job.resource, job.name, job.namespace),
            {"metadata": {"uid": job.obj["metadata"]["uid"], "annotations": {KEEP_UNTIL_ANNOTATION: until}}},
            dry_run=dry_run is DryRun.SERVER,
        )
    return Kept(
        name=job.name,
        namespace=job.namespace,
        kind=job.kind,
        resource=job.resource,
        until=until,
        policy=pol.source if pol is not None else "",
        keep_max=cap,
    )
