"""What a job asks for (`Demand`: pods x GPUs in a pool, for a team, at a priority), read from its
Workload, a pod waiting at Kueue's gate, or the pod template of a job not created yet (a dry run); and
how jobs are named in verdicts (namespace/owner). Pure; gpuctl.domain.explain judges demands."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from gpuctl.constants import GPU_RESOURCE, GPU_UNITS, TAS_REQUIRED
from gpuctl.domain.gpus import pod_spec_gpu_requests, pod_spec_gpu_units, pod_spec_gpus, pod_spec_request
from gpuctl.domain.objects import annotations, condition, controller_ref, meta, owner_ref
from gpuctl.domain.workload import (
    job_pool,
    labelled_priority_value,
    max_runtime_seconds,
    pool_choice,
    priority_value,
)


@dataclass(frozen=True)
class Demand:
    """What a job asks for: `pods` pods of `gpus` GPUs each in `pool`, for team `namespace`."""

    namespace: str
    pool: str
    pods: int
    gpus: int
    priority: int
    created: str = ""  # creationTimestamp (or eviction time); "" = now, behind everything queued
    uid: str = ""  # the job's own Workload, left out of the state it is judged against
    label: str = ""  # how others' jobs name it
    cpu: Decimal = Decimal(0)  # per pod, cores
    memory: Decimal = Decimal(0)  # per pod, bytes
    kueue_message: str = ""  # why Kueue has not reserved quota yet (its Workload's QuotaReserved=False)
    max_runtime: int | None = None  # seconds (job.maxRuntime, Kueue's max-exec-time); None: no limit
    # docs/queueing.md, "Jobs that may run in any pool": a job of no single pool (pool ""): the pools it lists
    # and the GPU types it asks.
    any_of: tuple[str, ...] = ()
    gpu_types: tuple[str, ...] = ()
    # docs/sharing.md, "One budget": GPU equivalents one pod costs of its team's budget, in 1/GPU_UNITS GPU
    # (whole GPUs and slices, gpuctl.domain.gpus.pod_spec_gpu_units); None: its whole GPUs.
    units: int | None = None
    slice: str = ""  # the slice of a GPU each pod asks for (nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared)
    # docs/distributed.md, "Placement": the topology level (node label) all its pods must share
    # (podset-required-topology); "": none.
    level: str = ""

    @property
    def total(self) -> int:
        return self.pods * self.gpus

    @property
    def total_units(self) -> int:
        return self.pods * (self.gpus * GPU_UNITS if self.units is None else self.units)


def slice_of(spec: Mapping[str, Any]) -> str:
    """The slice of a GPU a pod spec asks for (a GPU resource other than whole nvidia.com/gpu), or ""."""
    return next((r for r in pod_spec_gpu_requests(spec) if r != GPU_RESOURCE), "")


def job_label(wl: Mapping[str, Any]) -> str:
    """namespace/job of a Workload: its owner's name (gpuctl.domain.objects.owner_ref), else its own. The one
    key a Workload's job goes by (estimates, set-asides, backfill)."""
    m = meta(wl)
    owner = owner_ref(wl)
    return f"{m.get('namespace', '')}/{owner.get('name') if owner else m.get('name', '')}"


def _pod_sets(wl: Mapping[str, Any]) -> list[tuple[int, int, Mapping[str, Any]]]:
    """(pods, GPUs per pod, pod spec) per pod set."""
    out = []
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        tmpl = (ps.get("template") or {}).get("spec") or {}
        out.append((int(ps.get("count") or 1), pod_spec_gpus(tmpl), tmpl))
    return out


def _per_pod(wl: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(pods, GPUs per pod) per pod set."""
    return [(p, g) for p, g, _ in _pod_sets(wl)]


def workload_slices(wl: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    """What a Workload holds of its team's budget, in 1/GPU_UNITS GPU, and the slices of GPUs (slice
    resource -> count) it holds, over its pod sets."""
    units, slices = 0, {}
    for pods, _, spec in _pod_sets(wl):
        units += pods * pod_spec_gpu_units(spec)
        for r, n in pod_spec_gpu_requests(spec).items():
            if r != GPU_RESOURCE:
                slices[r] = slices.get(r, 0) + pods * n
    return units, slices


def workload_demand(wl: Mapping[str, Any]) -> Demand:
    """A Workload's demand: its first GPU pod set decides GPUs per pod, and the pods are those of every pod
    set asking for as many (a LeaderWorkerSet group's leader and workers, admitted whole)."""
    sets = _pod_sets(wl) or [(1, 0, {})]
    pods, gpus, spec = next((s for s in sets if s[1]), sets[0])
    if gpus:
        pods = sum(p for p, g, _ in sets if g == gpus)
    m = meta(wl)
    reserved = condition(wl, "QuotaReserved")
    podsets = (wl.get("spec") or {}).get("podSets") or [{}]
    return Demand(
        level=annotations(podsets[0].get("template")).get(TAS_REQUIRED, ""),
        kueue_message=str(reserved.get("message") or "") if reserved.get("status") == "False" else "",
        max_runtime=max_runtime_seconds(wl),
        cpu=pod_spec_request(spec, "cpu"),
        memory=pod_spec_request(spec, "memory"),
        namespace=m.get("namespace", ""),
        pool=job_pool(wl) or "",
        pods=pods,
        gpus=gpus,
        units=pod_spec_gpu_units(spec),
        slice=slice_of(spec),
        priority=priority_value(wl),
        created=m.get("creationTimestamp", ""),
        uid=m.get("uid", ""),
        label=job_label(wl),
        any_of=pool_choice(wl)[0],
        gpu_types=pool_choice(wl)[1],
    )


def pod_owner_label(pod: Mapping[str, Any]) -> str:
    """namespace/job as Workloads are labelled (job_label): a Job's or StatefulSet's pods share their
    controller's Workload (gpuctl.domain.objects.controller_ref); any other pod (a Deployment's) has a
    Workload of its own."""
    m = meta(pod)
    ctrl = controller_ref(pod)
    owner = ctrl.get("name") if ctrl and ctrl.get("kind") in ("Job", "StatefulSet") else m.get("name", "")
    return f"{m.get('namespace', '')}/{owner}"


def pod_demand(pod: Mapping[str, Any], pods: int = 1) -> Demand:
    """The demand of a pod waiting at Kueue's gate (or of `pods` such pods of one job): its spec read as
    a pod template's (demand_of_pod_template), plus when and whose it is."""
    m = meta(pod)
    d = demand_of_pod_template(
        m.get("namespace", ""), pod, pods, labelled_priority_value(pod), label=pod_owner_label(pod)
    )
    return replace(d, created=m.get("creationTimestamp", ""), uid=m.get("uid", ""))


def demand_of_pod_template(
    namespace: str, template: Mapping[str, Any], pods: int, priority: int, label: str = ""
) -> Demand:
    """The demand of a job not created yet (dry run): its pod template and replica count."""
    spec = template.get("spec") or {}
    pool = job_pool(template) or ""
    return Demand(
        level=annotations(template).get(TAS_REQUIRED, ""),
        namespace=namespace,
        pool=pool,
        pods=pods,
        gpus=pod_spec_gpus(spec),
        priority=priority,
        units=pod_spec_gpu_units(spec),
        slice=slice_of(spec),
        label=label,
        cpu=pod_spec_request(spec, "cpu"),
        memory=pod_spec_request(spec, "memory"),
        max_runtime=max_runtime_seconds(template),
        any_of=pool_choice(template)[0],
        gpu_types=pool_choice(template)[1],
    )
