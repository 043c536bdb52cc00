"""Stop and resume a job: its Kueue Workload's `spec.active`, shared by the CLI and the REST API.

The same object and field kueuectl's `stop workload` / `resume workload` change
(cmd/kueuectl/app/options/update_workload_activation_options.go, v0.19.2: a JSON merge patch of
spec.active on the Workload; kueuectl has no verb for the Job itself and suspends nothing), so either
tool reads what the other did. Kueue then does the rest: a stopped Workload that held quota is evicted
as if preempted (its Job suspended, its pods deleted) and stays out of every queue; resumed, it queues
again with its original creation time.

A job with several Workloads cannot be stopped this way: an inference or compute job is a Deployment,
whose pods Kueue queues one by one, each with a Workload of its own, and the ReplicaSet replaces a
stopped pod at once by a new one with a new, active Workload (seen on Kueue v0.19.2). A fixed-size one is
refused with what to do instead; an autoscaled service (docs/serving.md) is stopped as a whole by scaling
its Deployments to zero and holding its HPA there (gpuctl.service.serving.set_service_active).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gpuctl.cluster import Cluster, path, type_name
from gpuctl.constants import (
    AUDIT_ACTIVE_MANAGER_PREFIX,
    AUDIT_ACTIVE_SET_BY_ANNOTATION,
    IDLE_REPLICAS_ANNOTATION,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.workload import WorkloadState, workload_state
from gpuctl.service.access import Permissions
from gpuctl.service.errors import ServiceError
from gpuctl.service.inventory import PER_REPLICA_KINDS
from gpuctl.service.jobs import Job, find_job
from gpuctl.service.serving import set_service_active


@dataclass
class Activation:
    """The outcome of a stop or resume (`-o json`, the API's answer)."""

    name: str
    namespace: str
    kind: str  # training | notebook | ...
    resource: str  # Job | StatefulSet
    workload: str  # the Kueue Workload patched ("" for an autoscaled service: its Deployments were scaled)
    active: bool  # spec.active now (or, in a dry run, after it)
    changed: bool  # False: it was so already, nothing was sent
    status: str  # the job's status word before

    @property
    def object_name(self) -> str:
        """kubectl's TYPE/NAME of the job (`-o name`)."""
        return type_name(self.resource, self.name)

    def line(self) -> str:
        verb = "resumed" if self.active else "stopped"
        if self.changed:
            return f"{self.object_name} {verb}"
        return f"{self.object_name} unchanged (already {verb})"

    def as_dict(self) -> dict:
        return asdict(self)


def active_field_manager(verb: str, actor: str) -> str:
    """The field manager of a stop or resume by `actor` (at most 128 printable characters, as the API
    server requires)."""
    name = "".join(c for c in actor if c.isprintable())
    return f"{AUDIT_ACTIVE_MANAGER_PREFIX}{verb}:{name}"[:128]


def set_active(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    active: bool,
    *,
    dry_run: DryRun = DryRun.NONE,
    perms: Permissions | None = None,
    actor: str | None = None,
    on_behalf: bool = False,
    notes: dict[str, str] | None = None,
) -> Activation:
    """Stop (active=False) or resume (active=True) the job `name`. CLIENT reads only; SERVER sends the
    patch with dryRun=All; nothing is sent when spec.active already says so. actor: who asks (the CLI's
    SelfSubjectReview, the API's caller), sent as the field manager "gpuctl-stop:<actor>" so the
    Workload's managedFields, and so the audit trail (gpuctl.domain.history), say who it was.
    on_behalf: the caller is gpuctl's REST API acting for `actor`; the patch also names the actor in
    runwhere.ai/active-set-by, which admission keeps from gpuctl's API identities only (otherwise it
    writes the requester: admission/policies/submitted_by.py)."""
    dry_run = DryRun(dry_run)
    verb = "resume" if active else "stop"
    job = find_job(cluster, name, namespace, perms=perms)
    if job.autoscaled:  # the whole service: both Deployments and the HPA (docs/serving.md)
        return _service_activation(job, active, set_service_active(cluster, job, active, dry_run=dry_run))
    if (
        job.resource in PER_REPLICA_KINDS
        and active
        and IDLE_REPLICAS_ANNOTATION in (job.obj["metadata"].get("annotations") or {})
    ):
        return _restore_replicas(cluster, job, dry_run)
    if job.resource in PER_REPLICA_KINDS:
        unit = "pods" if job.resource == "Deployment" else "replicas (groups of pods)"
        raise ServiceError(
            f"job {job.name} ({job.kind}) is a {job.resource}: Kueue queues each of its {unit} with a "
            f"Workload of its own and the {job.resource} replaces a stopped one at once, so it cannot be "
            f"held by {verb}; scale it (kubectl -n {job.namespace} scale {job.resource.lower()} {job.name} "
            "--replicas=N) or delete it"
        )
    wl = job.workload
    if wl is None:
        raise ServiceError(
            f"job {job.name} has no Kueue Workload yet (status {job.status}): nothing to {verb}; "
            "Kueue makes one within seconds of the job's creation once its namespace has a quota, try again"
        )
    if workload_state(wl) == WorkloadState.FINISHED:
        raise ServiceError(f"job {job.name} has finished ({job.status}): nothing to {verb}")
    was_active = (wl.get("spec") or {}).get("active") is not False
    changed = was_active != active
    wl_meta = wl["metadata"]
    stamp = {"annotations": {AUDIT_ACTIVE_SET_BY_ANNOTATION: actor}} if on_behalf and actor else {}
    if notes:
        stamp = {"annotations": {**stamp.get("annotations", {}), **notes}}
    if changed and dry_run.writes:
        cluster.merge_patch(
            path("Workload", wl_meta["name"], wl_meta["namespace"]),
            # The uid makes it a precondition: never the Workload of a job re-created meanwhile.
            {"metadata": {"uid": wl_meta["uid"], **stamp}, "spec": {"active": active}},
            dry_run=dry_run is DryRun.SERVER,
            **({"field_manager": active_field_manager(verb, actor)} if actor else {}),
        )
    return Activation(
        name=job.name,
        namespace=job.namespace,
        kind=job.kind,
        resource=job.resource,
        workload=wl_meta["name"],
        active=active,
        changed=changed,
        status=job.status,
    )


def _restore_replicas(cluster: Cluster, job: Job, dry_run: DryRun) -> Activation:
    """`resume` of a service serve scaled down for idle GPUs (docs/utilisation.md, gpuctl.server.idle): the
    replicas
    runwhere.ai/idle-replicas kept, the annotation removed, in one patch (uid as precondition)."""
    meta = job.obj["metadata"]
    raw = (meta.get("annotations") or {}).get(IDLE_REPLICAS_ANNOTATION) or ""
    if not raw.isdigit():
        raise ServiceError(f"job {job.name}: {IDLE_REPLICAS_ANNOTATION}={raw!r} is not a replica count")
    if dry_run.writes:
        cluster.merge_patch(
            path(job.resource, job.name, job.namespace),
            {
                "metadata": {"uid": meta["uid"], "annotations": {IDLE_REPLICAS_ANNOTATION: None}},
                "spec": {"replicas": int(raw)},
            },
            dry_run=dry_run is DryRun.SERVER,
        )
    return _service_activation(job, True, True)


def _service_activation(job: Job, active: bool, changed: bool) -> Activation:
    """The outcome for a service (a Deployment: no Workload of its own was patched)."""
    return Activation(
        name=job.name,
        namespace=job.namespace,
        kind=job.kind,
        resource=job.resource,
        workload="",
        active=active,
        changed=changed,
        status=job.status,
    )
