"""Autoscaled services (docs/serving.md): what gpuctl writes beside the objects of the builder, and reads
for `get jobs`, `describe job` and the metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.reader import Reader
from gpuctl.constants import SERVICE_STOPPED_ANNOTATION, Labels, Tier
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gang import group_size
from gpuctl.domain.gpus import pod_spec_gpus
from gpuctl.domain.objects import pod_template
from gpuctl.domain.serving import floor_beyond_quota, scale, tier, tier_groups
from gpuctl.domain.status import is_gated
from gpuctl.domain.teams import team_from_cluster_queue
from gpuctl.service.errors import ServiceError

if TYPE_CHECKING:
    from gpuctl.service.inventory import Inventory
    from gpuctl.service.jobs import Job

HPA = "HorizontalPodAutoscaler"
SCALED_TO_ZERO = {
    "type": "ScaledToZero",
    "status": "True",
    "reason": "ScaledToZero",
    "message": "the burst starts at zero replicas (gpuctl created it so; the HPA scales it from there)",
}


def hpa_refused(hpa: dict, e: ApiError) -> Exception:
    """What the API server's refusal of a service's HPA means. Without HPAScaleToZero (Kubernetes before
    1.37, unless turned on) it refuses `minReplicas: 0`, which every burst needs (docs/serving.md)."""
    if e.status == 422 and "minReplicas" in e.message:
        return ServiceError(
            f"job {hpa['metadata']['name']}: this cluster refuses the HorizontalPodAutoscaler of its burst "
            f"({e.message}): an autoscaled service's burst starts at zero replicas, which needs the "
            "HPAScaleToZero feature gate (on by default from Kubernetes 1.37; on 1.36 set "
            "--feature-gates=HPAScaleToZero=true on kube-apiserver and kube-controller-manager), or use "
            "service.replicas for a fixed-size service"
        )
    return e


def start_burst_at_zero(cluster: Cluster, hpa: dict) -> None:
    """Let the HPA scale the burst up from the zero it is created at.

    With HPAScaleToZero (Kubernetes 1.36), the HPA controller scales a Deployment up from 0 replicas only
    if it scaled it there itself, which its ScaledToZero condition records (pkg/controller/podautoscaler,
    shouldComputeMetricsForZeroReplicas); a Deployment found at 0 otherwise counts as scaled to zero by
    hand and the HPA stays off (ScalingActive False, ScalingDisabled). The burst is created at 0 by
    gpuctl's choice, not a person's: the condition says so, once, on the HPA's status; the controller
    keeps and updates it from then on. A strategic merge patch keyed by the condition's type leaves the
    controller's other conditions as they are."""
    if (hpa.get("spec") or {}).get("minReplicas") != 0:
        return
    _condition(cluster, hpa, dict(SCALED_TO_ZERO))


def _condition(cluster: Cluster, hpa: dict, cond: dict) -> None:
    """Set one condition of an HPA's status (a strategic merge patch keyed by type)."""
    meta = hpa["metadata"]
    try:
        cluster.request(
            "PATCH",
            path(HPA, meta["name"], meta["namespace"], "status"),
            body={"status": {"conditions": [cond]}},
            content_type="application/strategic-merge-patch+json",
        )
    except ApiError as e:
        if e.status != 404:  # deleted meanwhile: nothing to start or stop
            raise


def set_service_active(cluster: Cluster, job: Job, active: bool, *, dry_run: DryRun) -> bool:
    """Stop (active=False) or resume an autoscaled service as a whole; True when something changed.

    Stop: the floor's replicas are kept in runwhere.ai/stopped-replicas and both Deployments go to 0
    replicas (Kueue deletes their Workloads: the GPUs go back to the queue); the HPA's ScaledToZero
    condition is set False, so the controller reads the zero as a person's and leaves the burst there
    (ScalingActive False, ScalingDisabled). Resume: the floor gets its replicas back and the HPA its
    ScaledToZero condition, from which it scales the burst on the load again. (Kueue's spec.active, what
    `stop` changes for a Job, cannot hold a Deployment: its ReplicaSet replaces a deactivated pod.)"""
    floor = job.obj
    notes = floor["metadata"].get("annotations") or {}
    stopped = SERVICE_STOPPED_ANNOTATION in notes
    if stopped != active:
        return False  # stopped already (stop) or running already (resume)
    server_dry = dry_run is DryRun.SERVER
    if not dry_run.writes:
        return True
    fp = path(job.resource, job.name, job.namespace)  # a Deployment, or a LeaderWorkerSet of groups
    uid = floor["metadata"]["uid"]
    if not active:
        replicas = int((floor.get("spec") or {}).get("replicas") or 0)
        cluster.merge_patch(
            fp,
            {
                "metadata": {"uid": uid, "annotations": {SERVICE_STOPPED_ANNOTATION: str(replicas)}},
                "spec": {"replicas": 0},
            },
            dry_run=server_dry,
        )
        if job.burst is not None:
            cluster.merge_patch(
                path(job.resource, job.burst["metadata"]["name"], job.namespace),
                {"metadata": {"uid": job.burst["metadata"]["uid"]}, "spec": {"replicas": 0}},
                dry_run=server_dry,
            )
        if job.autoscaler is not None and not server_dry:
            _condition(
                cluster,
                job.autoscaler,
                {
                    **SCALED_TO_ZERO,
                    "status": "False",
                    "reason": "Stopped",
                    "message": "stopped with gpuctl stop",
                },
            )
        return True
    replicas = int(notes.get(SERVICE_STOPPED_ANNOTATION) or 0)
    cluster.merge_patch(
        fp,
        {
            "metadata": {"uid": uid, "annotations": {SERVICE_STOPPED_ANNOTATION: None}},
            "spec": {"replicas": replicas},
        },
        dry_run=server_dry,
    )
    if job.autoscaler is not None and not server_dry:
        start_burst_at_zero(cluster, job.autoscaler)
    return True


def autoscaling_view(job: Job, inv: Inventory | None) -> dict | None:
    """`describe job`'s autoscaling section of an autoscaled service (None for any other job): its floor,
    burst, desired, running and waiting replicas, the HPA's metric and target, and for each waiting
    replica what it waits for and when it runs at the latest (judged against the command's snapshot,
    `inv`; None when the service waits for nothing)."""
    if not job.autoscaled:
        return None
    from gpuctl.service.waiting import waiting_workload  # noqa: PLC0415 - lazy: describe of a service

    sc = scale(job.obj, job.burst, job.pods, job.autoscaler)
    out = sc.as_dict()
    out["burst"] = {"replicas": sc.desired - sc.floor, "max": sc.burst_max}
    out["autoscaler"] = _hpa_view(job.autoscaler)
    waiting = []
    for pod in _waiting_replicas(job):
        wl = job.pod_workloads.get(pod["metadata"]["uid"])
        entry: dict = {
            "pod": pod["metadata"]["name"],
            "tier": str(tier(pod) or ""),
            "reason": "",
            "when": None,
        }
        if inv is not None and wl is not None:
            entry["reason"], entry["when"] = waiting_workload(inv, wl)
        elif wl is None:
            entry["reason"] = "waiting for Kueue to create its Workload"
        waiting.append(entry)
    out["waitingReplicas"] = waiting
    return out


def _waiting_replicas(job: Job) -> list[dict]:
    """The waiting replicas of an autoscaled service, each by one pod: a gated pod, or the leader of a
    group at Kueue's gate (multi-node replicas: the group's Workload is the leader's too)."""
    live = [p for p in job.pods if not p["metadata"].get("deletionTimestamp")]
    if group_size(job.obj) > 1:
        firsts = [g[0] for g in tier_groups(live) if any(is_gated(p) for p in g)]
    else:
        firsts = [p for p in live if is_gated(p)]
    return sorted(firsts, key=lambda p: p["metadata"]["name"])


def _hpa_view(hpa: dict | None) -> dict | None:
    """The HPA as describe shows it: name, its burst's current and desired replicas, the last scale time,
    and its conditions (AbleToScale, ScalingActive, ScalingLimited, ScaledToZero)."""
    if not hpa:
        return None
    st = hpa.get("status") or {}
    return {
        "name": hpa["metadata"]["name"],
        "currentReplicas": st.get("currentReplicas"),
        "desiredReplicas": st.get("desiredReplicas"),
        "lastScaleTime": st.get("lastScaleTime"),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")} for c in st.get("conditions") or []
        ],
    }


def check_autoscaled(reader: Reader, where: str, objs: list[dict], cluster_queues: list[dict]) -> None:
    """Before an autoscaled service is written (gpuctl.service.prechecks): its floor fits in its team's
    quota with the team's other floors (gpuctl.domain.serving.floor_beyond_quota: the floor is guaranteed
    only inside the quota). ServiceError naming the fix; nothing to check for a team whose ClusterQueue is
    not among `cluster_queues` (a quota of the same submission) or has no GPU quota. A maxReplicas past what
    the team may hold is no error: those replicas wait at Kueue's gate and say so (docs/serving.md)."""
    floor = objs[0]
    ns, name = floor["metadata"]["namespace"], floor["metadata"]["name"]
    cq = next((q for q in cluster_queues if q["metadata"]["name"] == ns), None)
    if cq is None:
        return
    team = team_from_cluster_queue(cq)
    gpus = _replica_gpus(floor)
    low = int(floor["spec"]["replicas"])
    if not low or not gpus or team.gpu is None:
        return
    others = sum(
        _replica_gpus(d) * int(d["spec"].get("replicas") or 0)
        for kind, d in _floors(reader, ns)
        if (kind, d["metadata"]["name"]) != (floor["kind"], name)
        and SERVICE_STOPPED_ANNOTATION not in (d["metadata"].get("annotations") or {})
    )
    found = floor_beyond_quota(f"service {name}", low * gpus, ns, team.gpu, others)
    if found is not None:
        message, fix = found
        raise ServiceError(f"{where}: {message}; {fix}")


def _replica_gpus(obj: dict) -> int:
    """GPUs of one replica of a floor: its pod's, times a LeaderWorkerSet's group size."""
    return pod_spec_gpus(pod_template(obj).get("spec") or {}) * group_size(obj)


def _floors(reader: Reader, ns: str) -> list[tuple[str, dict]]:
    """(kind, object) of every autoscaled service's floor in `ns`: Deployments, and LeaderWorkerSets
    where the cluster serves (and the caller may list) them."""
    selector = f"{Labels.SERVING_TIER}={Tier.FLOOR.value}"
    out = [("Deployment", d) for d in reader.list("Deployment", ns, label_selector=selector)]
    try:
        out += [("LeaderWorkerSet", d) for d in reader.list("LeaderWorkerSet", ns, label_selector=selector)]
    except ApiError as e:
        if e.status not in (403, 404):
            raise
    return out
