"""A pod's GPUs, counted the way kube-scheduler and Kueue count them.

- A container's GPUs are its `requests[nvidia.com/gpu]`, or its limit when only a limit is set (for
  extended resources the API server copies the limit into the request; objects reviewed before that
  defaulting, and Workload templates, may carry only the limit).
- Sidecars (init containers with `restartPolicy: Always`) run next to the app containers and add up.
- Classic init containers run one at a time before the app containers: the pod needs the largest of
  them plus the sidecars started before it, if that is more than the app containers plus sidecars
  (the pod's effective request, k8s.io/component-helpers/resource PodRequests).
- Extended resources are whole numbers; a fraction (only possible in objects the API server has not
  validated yet) counts rounded up.
- "GPUs" are `nvidia.com/gpu`, what pools and nodes count. Slices of GPUs (MIG instances, time-slicing
  and MPS replicas) and other vendors' GPUs are GPU resources too (`is_gpu_resource`, one list in
  gpuctl.constants): `pod_spec_gpu_requests` counts each, and `pod_spec_gpu_units` weighs them by
  gpuctl.domain.sharing's one rule into GPU equivalents, what a team's budget is charged.

The objects may be untrusted (the admission webhook reads what a client sent): a value of the wrong
type raises ShapeError naming the field (gpuctl.domain.shape, the one copy of these typed reads), which
the webhook answers with a 400.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from gpuctl.constants import GPU_RESOURCE, GPU_RESOURCE_PREFIXES
from gpuctl.domain.objects import pod_finished
from gpuctl.domain.shape import ShapeError, item, list_at, obj_at
from gpuctl.domain.sharing import resource_units
from gpuctl.quantity import QuantityError, parse_quantity

# Anything larger is absurd for one pod; capping keeps `1e999` from becoming a giant integer.
MAX_GPUS = 1_000_000


def quantity_gpus(value: Any, where: str = "value") -> int:
    """GPU count of one resources entry, rounded up."""
    if type(value) is str:
        if value.isascii() and value.isdigit():
            return min(int(value), MAX_GPUS)
        try:
            q = parse_quantity(value)
        except QuantityError as exc:
            raise ShapeError(f"{where}: {exc}") from None
        if not q.is_finite() or q > MAX_GPUS:
            return MAX_GPUS
        return max(0, math.ceil(q))
    if type(value) is int:
        return min(max(0, value), MAX_GPUS)
    if type(value) is float and math.isfinite(value):
        return min(max(0, math.ceil(value)), MAX_GPUS)
    raise ShapeError(f"{where} must be a quantity string, not {type(value).__name__}")


def container_gpus(c: Any, where: str = "container") -> int:
    """GPUs of one container: its request, else its limit."""
    return container_count(c, GPU_RESOURCE, where)


def container_count(c: Any, resource: str, where: str = "container") -> int:
    """One container's count of an extended resource (GPUs, slices): its request, else its limit."""
    if type(c) is not dict:
        raise ShapeError(f"{where} must be an object, not {type(c).__name__}")
    res = obj_at(c, "resources", where)
    if not res:
        return 0
    v = obj_at(res, "requests", f"{where}.resources").get(resource)
    if v is None:
        v = obj_at(res, "limits", f"{where}.resources").get(resource)
        if v is None:
            return 0
    if type(v) is str and v.isascii() and v.isdigit():  # the usual "4": quantity_gpus without the f-string
        return min(int(v), MAX_GPUS)
    return quantity_gpus(v, f"{where}.resources[{resource}]")


def is_gpu_resource(resource: str) -> bool:
    """Whether an extended resource hands out a GPU or a slice of one (constants.GPU_RESOURCE_PREFIXES:
    nvidia.com/gpu*, nvidia.com/mig-*, amd.com/gpu*, gpu.intel.com/*). The one matcher: admission,
    the pool views and the Kueue configuration's list all read it."""
    return resource.startswith(GPU_RESOURCE_PREFIXES)


def _effective(spec: Mapping[str, Any], where: str, per_container: Callable[[Any, str], Any]) -> Any:
    """A pod's effective request of one resource: max(app containers + sidecars, init-phase peak)."""
    main = 0
    for i, c in enumerate(list_at(spec, "containers", where)):
        main += per_container(c, f"{where}.containers[{i}]")
    if spec.get("initContainers") is None:
        return max(main, 0)  # what the general case below gives without init containers
    sidecars = 0
    init_peak = 0
    for i, c in enumerate(list_at(spec, "initContainers", where)):
        v = per_container(c, f"{where}.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            sidecars += v
        else:
            init_peak = max(init_peak, v + sidecars)
    return max(main + sidecars, init_peak)


def pod_spec_gpus(spec: Mapping[str, Any] | None, where: str = "spec") -> int:
    """GPUs one pod with this spec holds: max(app containers + sidecars, peak of the init phase)."""
    if not spec:
        return 0
    if type(spec) is not dict:
        raise ShapeError(f"{where} must be an object, not {type(spec).__name__}")
    return _effective(spec, where, container_gpus)


def _gpu_names(spec: Mapping[str, Any], where: str) -> set[str]:
    names: set[str] = set()
    for key in ("containers", "initContainers"):
        for i, c in enumerate(list_at(spec, key, where)):
            res = obj_at(item(c, f"{where}.{key}[{i}]"), "resources", f"{where}.{key}[{i}]")
            for part in ("requests", "limits"):
                names.update(
                    r for r in obj_at(res, part, f"{where}.{key}[{i}].resources") if is_gpu_resource(r)
                )
    return names


def pod_spec_gpu_requests(spec: Mapping[str, Any] | None, where: str = "spec") -> dict[str, int]:
    """Every GPU resource one pod with this spec holds (whole GPUs, MIG instances, replicas), each
    counted like its GPUs; resources it holds none of are left out."""
    if not spec:
        return {}
    if type(spec) is not dict:
        raise ShapeError(f"{where} must be an object, not {type(spec).__name__}")
    out = {}
    for r in sorted(_gpu_names(spec, where)):
        n = _effective(spec, where, lambda c, w, r=r: container_count(c, r, w))
        if n:
            out[r] = n
    return out


def pod_spec_gpu_units(spec: Mapping[str, Any] | None, where: str = "spec") -> int:
    """GPU equivalents one pod holds, in 1/GPU_UNITS GPU: what a team's budget is charged for it (the
    Kueue transformations apply the same rule, gpuctl.domain.sharing.resource_units). A GPU resource
    the rule does not know (HAMi's nvidia.com/gpumem) costs nothing here, as in Kueue."""
    return sum(n * (resource_units(r) or 0) for r, n in pod_spec_gpu_requests(spec, where).items())


def pod_spec_request(spec: Mapping[str, Any] | None, resource: str) -> Decimal:
    """One pod's effective request of `resource` (cpu in cores, memory in bytes), the same way as GPUs:
    a container's request, else its limit; unreadable values count as 0 (validated objects only)."""
    if not spec or type(spec) is not dict:
        return Decimal(0)

    def one(c: Any, where: str) -> Decimal:
        res = (c.get("resources") or {}) if type(c) is dict else {}
        v = (res.get("requests") or {}).get(resource)
        if v is None:
            v = (res.get("limits") or {}).get(resource)
        try:
            return parse_quantity(str(v)) if v is not None else Decimal(0)
        except QuantityError:
            return Decimal(0)

    return _effective(spec, "spec", one)


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a Pod object holds."""
    return pod_spec_gpus(pod.get("spec"))


def pod_holds_gpus(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and not finished: its GPUs are taken on that node."""
    return bool((pod.get("spec") or {}).get("nodeName")) and not pod_finished(pod)


def workload_gpus(wl: Mapping[str, Any] | None) -> int:
    """GPUs a Kueue Workload asks for: over its pod sets, count x the pod template's GPUs."""
    total = 0
    for ps in ((wl or {}).get("spec") or {}).get("podSets") or []:
        tmpl = (ps.get("template") or {}).get("spec") or {}
        count = ps.get("count")
        total += pod_spec_gpus(tmpl) * (1 if count is None else int(count))
    return total


def slices_held(specs: Iterable[tuple[Mapping[str, Any] | None, int]]) -> dict[str, int]:
    """GPU resources other than whole GPUs (MIG instances, shared replicas) that pods with these specs
    hold together, each spec counted `times`: what a job of slices shows beside its 0 whole GPUs."""
    out: dict[str, int] = {}
    for spec, times in specs:
        for r, n in pod_spec_gpu_requests(spec).items():
            if r != GPU_RESOURCE:
                out[r] = out.get(r, 0) + n * times
    return out


def workload_slices(wl: Mapping[str, Any] | None) -> dict[str, int]:
    """Slices a Kueue Workload asks for: over its pod sets, count x the template's (`slices_held`)."""
    sets = ((wl or {}).get("spec") or {}).get("podSets") or []
    return slices_held(
        ((ps.get("template") or {}).get("spec"), 1 if ps.get("count") is None else int(ps["count"]))
        for ps in sets
    )


def gpu_requests_by_pool(
    pods: Iterable[Mapping[str, Any]], node_pool: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Pool -> GPU resource -> how many the pods bound to its nodes and not finished hold (whole GPUs,
    MIG instances, replicas): what a pool's slices in use are, counted from every pod."""
    out: dict[str, dict[str, int]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        pool = node_pool.get(spec.get("nodeName") or "")
        if not pool or pod_finished(pod):
            continue
        held = out.setdefault(pool, {})
        for r, n in pod_spec_gpu_requests(spec).items():
            held[r] = held.get(r, 0) + n
    return out


def controller_asks(resource: str, obj: Mapping[str, Any]) -> tuple[int, int, int]:
    """What a job's controller asks for: (GPU budget units of all its pods, whole GPUs and slices alike
    as pod_spec_gpu_units counts them; nodes of one gang or one multi-node replica; replicas). A Job's
    pods are its parallelism (one gang of them when Indexed, gpuctl.domain.gang); a Deployment's and a
    StatefulSet's, replicas x 1; a LeaderWorkerSet's, replicas x its group size (leader and workers)."""
    spec = obj.get("spec") or {}

    def count(v: Any, default: int = 1) -> int:
        return default if v is None else int(v)

    def tmpl(t: Any) -> Mapping[str, Any] | None:
        return (t or {}).get("spec") if isinstance(t, dict) else None

    if resource == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        size, replicas = count(lwt.get("size")), count(spec.get("replicas"))
        worker = pod_spec_gpu_units(tmpl(lwt.get("workerTemplate")))
        leader = pod_spec_gpu_units(tmpl(lwt.get("leaderTemplate"))) if lwt.get("leaderTemplate") else worker
        return replicas * (leader + worker * (size - 1)), size, replicas
    per_pod = pod_spec_gpu_units(tmpl(spec.get("template")))
    if resource == "Job":
        from gpuctl.domain.gang import gang_nodes  # noqa: PLC0415 - gang imports this module

        pods = count(spec.get("parallelism"))
        return per_pod * pods, gang_nodes(obj), pods
    replicas = count(spec.get("replicas"))
    return per_pod * replicas, 1, replicas
