"""GPU use per job (docs/utilisation.md): what NVIDIA's dcgm-exporter measured, read through
Prometheus, turned into a job's GPUs held, activity, memory used and idle time. Pure: the PromQL text of
every query gpuctl sends, Prometheus' JSON answers in, `JobUse` out. gpuctl.service.gpu_use sends the
queries (scoped to what the caller may read) and joins the answers to the jobs of gpuctl.service.jobs.

The series (dcgm-exporter's default counters, with its kubelet pod-resources mapping on):
- activity: `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (ratio 0-1 of time the graphics engine was busy: the idle
  signal Red Hat's gpu-pruner uses); where a GPU has no profiling metrics (NVIDIA/DCGM#226: some setups,
  older GPUs) `DCGM_FI_DEV_GPU_UTIL` (percent of time a kernel ran, coarse) / 100 instead, per device;
- memory: `DCGM_FI_DEV_FB_USED` (MiB);
- labels: `namespace`, `pod`, `container` (the pod the device is given to), `Hostname` (the node), `gpu`
  (its index), `UUID`, `modelName`; a MIG instance adds `GPU_I_PROFILE` (1g.10gb) and `GPU_I_ID`.

One device of one pod is one series key (`series_key`): a gang's rank, a service's replica and a MIG slice
are each their own. A job's figures are over its devices: activity the mean, memory the sum, idle time the
shortest (a job is idle since its most recently active device went quiet).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuctl.constants import (
    DCGM_ENGINE_ACTIVE,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    GPU_UNITS,
    LWS_NAME_LABEL,
    USE_MIN_STEP_SECONDS,
    USE_POINTS,
)
from gpuctl.domain.gang import pod_rank
from gpuctl.domain.gpus import pod_holds_gpus, pod_spec_gpu_units
from gpuctl.domain.objects import labels as object_labels
from gpuctl.domain.objects import meta, owner_ref, parse_time, short_age
from gpuctl.domain.status import pod_node

Sample = tuple[float, float]  # (epoch seconds, value)
ACTIVITY_METRICS = (DCGM_ENGINE_ACTIVE, DCGM_GPU_UTIL)
# What each activity metric is divided by to become a ratio 0-1, and its short name in tables.
SCALE = {DCGM_ENGINE_ACTIVE: 1.0, DCGM_GPU_UTIL: 100.0}
SOURCE_NAMES = {DCGM_ENGINE_ACTIVE: "engine", DCGM_GPU_UTIL: "util"}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a Kubernetes name: nothing to escape in a regex


# ----------------------------------------------------------------------------- the queries
def selector(namespaces: Sequence[str] | None, pods: Sequence[str] | None = None) -> str:
    """The label matchers of every query: series of a pod (`pod!=""`: a device given to no pod is nobody's
    job), in these namespaces (None: any), of these pods (None: any). Names are Kubernetes names, checked:
    a name that is not one is refused rather than put in a regular expression."""
    for n in [*(namespaces or ()), *(pods or ())]:
        if not _NAME.match(n):
            raise ValueError(f"{n!r} is not a Kubernetes name")
    terms = ['pod!=""']
    if namespaces is not None:  # none readable: a matcher nothing has (a namespace is never "-")
        terms.insert(0, f'namespace=~"{_alternatives(namespaces)}"' if namespaces else 'namespace="-"')
    if pods is not None:
        terms.append(f'pod=~"{_alternatives(pods)}"' if pods else 'pod="-"')
    return "{" + ",".join(terms) + "}"


def _alternatives(names: Sequence[str]) -> str:
    return "|".join(sorted(set(names))).replace(".", "\\\\.")


def mean_query(metric: str, sel: str, window: int) -> str:
    """The mean of `metric` over the last `window` seconds, per series (an instant query)."""
    return f"avg_over_time({metric}{sel}[{int(window)}s])"


def peak_query(metric: str, sel: str, step: int) -> str:
    """The peak of `metric` in each step (a range query at that step): every sample counts, so a burst of
    work between two steps is not missed (a plain range query reads one sample per step)."""
    return f"max_over_time({metric}{sel}[{int(step)}s])"


def memory_query(sel: str) -> str:
    return f"{DCGM_FB_USED}{sel}"


def step_for(span: int, points: int = USE_POINTS) -> int:
    """The step of a range query over `span` seconds: about `points` points, never under a second."""
    return max(USE_MIN_STEP_SECONDS, math.ceil(span / points))


# ----------------------------------------------------------------------------- Prometheus' answers
def vector(data: Mapping[str, Any] | None) -> list[tuple[dict[str, str], float]]:
    """An instant query's `data` (resultType vector) -> (labels, value); NaN and infinities dropped."""
    out = []
    for r in (data or {}).get("result") or []:
        v = _number((r.get("value") or [None, None])[1])
        if v is not None:
            out.append((dict(r.get("metric") or {}), v))
    return out


def matrix(data: Mapping[str, Any] | None) -> list[tuple[dict[str, str], list[Sample]]]:
    """A range query's `data` (resultType matrix) -> (labels, [(time, value)] oldest first)."""
    out = []
    for r in (data or {}).get("result") or []:
        points = [(float(t), v) for t, raw in r.get("values") or [] if (v := _number(raw)) is not None]
        out.append((dict(r.get("metric") or {}), points))
    return out


def _number(raw: Any) -> float | None:
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# ----------------------------------------------------------------------------- devices
@dataclass(frozen=True)
class Device:
    """A GPU, or a MIG instance of one, as dcgm-exporter names it."""

    node: str  # Hostname
    gpu: str  # the GPU's index on its node
    uuid: str
    model: str = ""
    profile: str = ""  # GPU_I_PROFILE: a MIG instance's profile, "" for a whole GPU
    instance: str = ""  # GPU_I_ID

    @property
    def text(self) -> str:
        base = f"{self.node or '?'}/gpu{self.gpu}"
        return f"{base}/{self.profile}#{self.instance}" if self.profile else base


def device_of(labels: Mapping[str, str]) -> Device:
    return Device(
        node=labels.get("Hostname", ""),
        gpu=labels.get("gpu", ""),
        uuid=labels.get("UUID", ""),
        model=labels.get("modelName", ""),
        profile=labels.get("GPU_I_PROFILE", ""),
        instance=labels.get("GPU_I_ID", ""),
    )


def series_key(labels: Mapping[str, str]) -> tuple[str, ...]:
    """One device of one pod: (namespace, pod, container, node, GPU (UUID, else index), MIG instance)."""
    return (
        labels.get("namespace", ""),
        labels.get("pod", ""),
        labels.get("container", ""),
        labels.get("Hostname", ""),
        labels.get("UUID") or labels.get("gpu", ""),
        labels.get("GPU_I_ID", ""),
    )


@dataclass
class DeviceUse:
    """What one device of one pod did: activity (0-1) as the mean over the window asked for, and its peak
    per step over the look-back (the idle time's evidence); memory in use now (MiB)."""

    namespace: str
    pod: str
    container: str
    device: Device
    source: str = ""  # the metric activity was read from (DCGM_ENGINE_ACTIVE, else DCGM_GPU_UTIL)
    activity: float | None = None
    memory_mib: float | None = None
    peaks: list[Sample] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("peaks")
        d["device"] = self.device.text
        d["profile"] = self.device.profile
        return d


def device_uses(
    means: Mapping[str, Iterable[tuple[dict[str, str], float]]],
    peaks: Mapping[str, Iterable[tuple[dict[str, str], list[Sample]]]],
    memory: Iterable[tuple[dict[str, str], float]] = (),
) -> list[DeviceUse]:
    """Every device of every pod the answers name. means / peaks: per activity metric (ACTIVITY_METRICS),
    the answers of mean_query / peak_query; memory: memory_query's. A device measured by the engine metric
    is read from it alone; one without (no profiling metrics) from the utilisation metric, / 100."""
    found: dict[tuple[str, ...], DeviceUse] = {}

    def use(labels: Mapping[str, str]) -> DeviceUse:
        key = series_key(labels)
        if key not in found:
            found[key] = DeviceUse(key[0], key[1], key[2], device_of(labels))
        return found[key]

    for metric in ACTIVITY_METRICS:  # the engine first: a device it measures keeps it as its source
        scale = SCALE[metric]
        for labels, v in means.get(metric) or ():
            u = use(labels)
            if u.source in ("", metric):
                u.source, u.activity = metric, v / scale
        for labels, points in peaks.get(metric) or ():
            u = use(labels)
            if u.source in ("", metric):
                u.source = metric
                u.peaks = sorted((t, v / scale) for t, v in points)
    for labels, v in memory:
        use(labels).memory_mib = v
    return list(found.values())


# ----------------------------------------------------------------------------- idle time
def last_active(peaks: Sequence[Sample], floor: float) -> float | None:
    """When the device was last at or above the floor (the end of that step), or None: never, in these
    points."""
    return max((t for t, v in peaks if v >= floor), default=None)


def idle_seconds(
    peaks: Sequence[Sample], floor: float, now: float, since: float | None = None
) -> tuple[float | None, bool]:
    """(How long the device has been idle at `now`, whether that is only a lower bound). Idle since its last
    step at or above the floor; never active in the points: since the later of the first point and `since`
    (the pod's start), a lower bound when the points begin after the pod started (it may have been idle
    before they do). (None, False) without points."""
    if not peaks:
        return None, False
    last = last_active(peaks, floor)
    if last is not None:
        return max(0.0, now - last), False
    first = peaks[0][0]
    if since is not None and since >= first:
        return max(0.0, now - since), False
    return max(0.0, now - first), True


# ----------------------------------------------------------------------------- which job a pod is
POD_TEMPLATE_HASH = "pod-template-hash"  # the ReplicaSet controller's label: <deployment>-<hash> names it


def pod_job(pod: Mapping[str, Any]) -> str:
    """The job (controller) a pod belongs to, from its owner (gpuctl.domain.objects.owner_ref): a Job's,
    StatefulSet's name; for a ReplicaSet's pod, its Deployment's (the ReplicaSet's name less its
    pod-template-hash, Kubernetes' naming rule); for a LeaderWorkerSet's pod, the LeaderWorkerSet's (its
    name label: a group's workers belong to a StatefulSet <name>-<group> the leader pod controls); "" for a
    pod of no owner."""
    group_of = object_labels(pod).get(LWS_NAME_LABEL)
    if group_of:
        return group_of
    owner = owner_ref(pod)
    if not owner:
        return ""
    owner_name = str(owner.get("name") or "")
    if owner.get("kind") == "ReplicaSet":
        h = object_labels(pod).get(POD_TEMPLATE_HASH)
        return owner_name.removesuffix(f"-{h}") if h else owner_name
    return owner_name


# ----------------------------------------------------------------------------- per pod, per job
@dataclass
class PodUse:
    """A pod's devices: a gang's rank, a service's replica, a notebook's one pod."""

    pod: str
    node: str
    rank: int | None
    gpus: float  # GPU equivalents it holds (a MIG 1g.10gb: 1/7)
    activity: float | None
    memory_mib: float | None
    idle_seconds: float | None
    idle_at_least: bool
    devices: list[DeviceUse]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["devices"] = [x.as_dict() for x in self.devices]
        return d


@dataclass
class JobUse:
    """GPU use of one job: the columns of `gpuctl top`, `get jobs -o wide` and `describe job`."""

    namespace: str
    name: str
    kind: str
    pool: str
    status: str
    gpus: float  # GPUs held: GPU equivalents of its pods that hold GPUs (bound, not finished)
    activity: float | None  # mean over its devices; None: nothing measured
    memory_mib: float | None  # sum over its devices
    idle_seconds: float | None  # since its most recently active device went quiet; None: not measured
    idle_at_least: bool  # idle_seconds is a lower bound (no activity in all the points read)
    pods: list[PodUse]

    @property
    def measured(self) -> bool:
        return any(p.devices for p in self.pods)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pods"] = [p.as_dict() for p in self.pods]
        d["measured"] = self.measured
        return d


def _mean(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def _sum(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) if vs else None


def _idle(parts: Iterable[tuple[float | None, bool]]) -> tuple[float | None, bool]:
    """The shortest idle time of several devices (or pods), and whether it is a lower bound."""
    known = [p for p in parts if p[0] is not None]
    if not known:
        return None, False
    return min(known, key=lambda p: (p[0], p[1]))


def pod_started(pod: Mapping[str, Any]) -> float | None:
    started = (pod.get("status") or {}).get("startTime")
    return parse_time(started) or parse_time(meta(pod).get("creationTimestamp"))


@dataclass(frozen=True)
class Figures:
    """Activity (mean), memory (sum) and idle time (the shortest) of some devices."""

    activity: float | None
    memory_mib: float | None
    idle_seconds: float | None
    idle_at_least: bool


def figures(devices: Sequence[DeviceUse], floor: float, now: float, since: float | None = None) -> Figures:
    """The figures of devices (a pod's, a gang row's); since: when their pod started (idle no longer)."""
    idle = _idle(idle_seconds(d.peaks, floor, now, since) for d in devices)
    return Figures(_mean(d.activity for d in devices), _sum(d.memory_mib for d in devices), idle[0], idle[1])


def pod_use(pod: Mapping[str, Any], devices: Sequence[DeviceUse], floor: float, now: float) -> PodUse:
    held = pod_spec_gpu_units(pod.get("spec")) / GPU_UNITS if pod_holds_gpus(pod) else 0.0
    f = figures(devices, floor, now, pod_started(pod))
    return PodUse(
        pod=meta(pod).get("name", ""),
        node=pod_node(pod) or "",
        rank=pod_rank(pod),
        gpus=held,
        activity=f.activity,
        memory_mib=f.memory_mib,
        idle_seconds=f.idle_seconds,
        idle_at_least=f.idle_at_least,
        devices=sorted(devices, key=lambda d: (d.device.node, d.device.gpu, d.device.instance, d.container)),
    )


def job_use(
    *,
    namespace: str,
    name: str,
    kind: str,
    pool: str,
    status: str,
    pods: Sequence[Mapping[str, Any]],
    devices: Mapping[str, Sequence[DeviceUse]],
    floor: float,
    now: float,
) -> JobUse:
    """One job's use from its pods (gpuctl.service.jobs' Job.pods) and the devices measured per pod name.
    Pods in rank order for a gang (gpuctl.domain.gang.pod_rank), else by name; a finished pod holds no GPU
    and is left out unless something measured it."""
    rows = [
        pod_use(p, devices.get(meta(p).get("name", ""), ()), floor, now)
        for p in pods
        if pod_holds_gpus(p) or devices.get(meta(p).get("name", ""))
    ]
    rows.sort(key=lambda r: (r.rank is None, r.rank or 0, r.pod))
    every = [d for r in rows for d in r.devices]
    idle = _idle((r.idle_seconds, r.idle_at_least) for r in rows)
    return JobUse(
        namespace=namespace,
        name=name,
        kind=kind,
        pool=pool,
        status=status,
        gpus=sum(r.gpus for r in rows),
        activity=_mean(d.activity for d in every),
        memory_mib=_sum(d.memory_mib for d in every),
        idle_seconds=idle[0],
        idle_at_least=idle[1],
        pods=rows,
    )


def by_activity(uses: Iterable[JobUse]) -> list[JobUse]:
    """`gpuctl top`'s order: the busiest first; jobs with nothing measured last; then by namespace, name."""
    return sorted(
        uses, key=lambda u: (u.activity is None, -(u.activity or 0.0), -u.gpus, u.namespace, u.name)
    )


# ----------------------------------------------------------------------------- cells
def gpus_text(gpus: float) -> str:
    """8, 0.14 (a 1g.10gb MIG instance), 0."""
    return str(int(gpus)) if float(gpus).is_integer() else f"{gpus:.2f}"


def percent_text(ratio: float | None) -> str:
    """37%, 0.4% (under 1 %, one decimal: the noise floor's neighbourhood), - when not measured."""
    if ratio is None:
        return "-"
    p = ratio * 100
    return f"{p:.1f}%" if 0 < p < 1 else f"{p:.0f}%"


def memory_text(mib: float | None) -> str:
    """dcgm-exporter's MiB as kubectl top prints memory: 812Mi, 39.5Gi; - when not measured."""
    if mib is None:
        return "-"
    if mib >= 1024:
        return f"{mib / 1024:.1f}Gi"
    return f"{mib:.0f}Mi"


def idle_text(seconds: float | None, at_least: bool, lookback: float) -> str:
    """IDLE FOR: 0s (active now), 45s, 12m, 5h (kubectl's short ages); >5h when only known to be at least
    that (no activity in all the points read; at most the look-back: >24h); - when not measured."""
    if seconds is None:
        return "-"
    if at_least:
        return f">{short_age(min(seconds, lookback))}"
    return short_age(seconds)
