"""GPU use per job, read (docs/utilisation.md): the queries of gpuctl.domain.utilisation sent to
Prometheus (gpuctl.service.prometheus), scoped to the namespaces whose jobs the caller could list, and the
answers joined to gpuctl's jobs (gpuctl.service.jobs). Shared by `gpuctl top`, `get jobs -o wide`,
`describe job`, the REST API and serve's idle reclaimer.

Who sees what: the jobs come from the Kubernetes API with the caller's own credential (a team member with
gpuctl's shipped roles lists only its team's), and Prometheus is asked only about those jobs' namespaces
(`namespace=~"..."` in every query), so a team member's view holds its own jobs only; series of pods that
are no job of the reading are dropped besides. This scoping is gpuctl's: a user who can reach Prometheus
directly reads whatever Prometheus holds. Tenants reach GPU use through the REST API (serve asks
Prometheus, after a SubjectAccessReview of the caller), or through a proxy that enforces the namespace
(docs/utilisation.md, "Who reads what").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.constants import IDLE_FLOOR, USE_LOOKBACK_SECONDS, USE_POINTS, USE_WINDOW_SECONDS
from gpuctl.domain.utilisation import (
    ACTIVITY_METRICS,
    DeviceUse,
    Figures,
    JobUse,
    by_activity,
    device_uses,
    figures,
    job_use,
    matrix,
    mean_query,
    memory_query,
    peak_query,
    selector,
    step_for,
    vector,
)
from gpuctl.service.access import Permissions
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import Job, collect_jobs
from gpuctl.service.prometheus import Prometheus

DevicesByPod = dict[tuple[str, str], list[DeviceUse]]


@dataclass(frozen=True)
class Span:
    """What a reading covers: activity is the mean over `window`, idle time looks back `lookback`."""

    window: int = USE_WINDOW_SECONDS
    lookback: int = USE_LOOKBACK_SECONDS
    floor: float = IDLE_FLOOR
    points: int = USE_POINTS  # steps over the look-back (the idle reclaimer's: IDLE_POINTS)

    @property
    def step(self) -> int:
        return step_for(self.lookback, self.points)


def read_devices(
    prom: Prometheus,
    namespaces: Sequence[str] | None,
    span: Span,
    now: float,
    pods: Sequence[str] | None = None,
) -> list[DeviceUse]:
    """Every device of a pod in `namespaces` (None: every namespace; []: none, nothing is asked): five
    queries evaluated at `now`: the mean activity over the window and its per-step peaks over the look-back
    (each for the engine metric and its fallback), and the memory in use."""
    if namespaces is not None and not namespaces:
        return []
    sel = selector(namespaces, pods)
    step = span.step
    means = {m: vector(prom.query(mean_query(m, sel, span.window), now)) for m in ACTIVITY_METRICS}
    peaks = {
        m: matrix(prom.query_range(peak_query(m, sel, step), now - span.lookback, now, step))
        for m in ACTIVITY_METRICS
    }
    memory = vector(prom.query(memory_query(sel), now))
    return device_uses(means, peaks, memory)


def by_pod(devices: Iterable[DeviceUse]) -> DevicesByPod:
    out: DevicesByPod = {}
    for d in devices:
        out.setdefault((d.namespace, d.pod), []).append(d)
    return out


def use_of(job: Job, devices: DevicesByPod, span: Span, now: float) -> JobUse:
    """One job's use, from the devices read (its pods': a gang's ranks, a service's replicas)."""
    return job_use(
        namespace=job.namespace,
        name=job.name,
        kind=job.kind,
        pool=job.pool or "",
        status=job.status,
        pods=job.pods,
        devices={pod: found for (ns, pod), found in devices.items() if ns == job.namespace},
        floor=span.floor,
        now=now,
    )


def jobs_use(
    jobs: Sequence[Job],
    prom: Prometheus,
    span: Span = Span(),
    *,
    now: float | None = None,
    namespaces: Sequence[str] | None = None,
) -> list[JobUse]:
    """The use of these jobs (read by the caller: what it may see), Prometheus asked about their namespaces
    only (or `namespaces`, a narrower list the caller chose), in `gpuctl top`'s order."""
    now = time.time() if now is None else now
    spaces = sorted({j.namespace for j in jobs}) if namespaces is None else sorted(namespaces)
    devices = by_pod(read_devices(prom, spaces, span, now))
    return by_activity(use_of(j, devices, span, now) for j in jobs if j.namespace in spaces)


@dataclass
class TopView:
    """`gpuctl top`: the jobs holding GPUs or measured, busiest first."""

    uses: list[JobUse]
    span: Span
    at: float
    namespaces: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "windowSeconds": self.span.window,
            "lookbackSeconds": self.span.lookback,
            "floor": self.span.floor,
            "namespaces": self.namespaces,
            "items": [u.as_dict() for u in self.uses],
        }


def top(
    source: Any,
    namespace: str | None,
    prom: Prometheus,
    span: Span = Span(),
    *,
    pool: str | None = None,
    kind: str | None = None,
    perms: Permissions | None = None,
    namespaces: Sequence[str] | None = None,
    now: float | None = None,
) -> TopView:
    """The jobs of `namespace` (None: every namespace the reader may list) that hold GPUs or were measured,
    with their use. source: a Cluster (the CLI: its credential) or serve's cache reader (the API, which
    passes the `namespaces` its caller may read)."""
    now = time.time() if now is None else now
    inv = Inventory(source, namespace, perms=perms)
    jobs = [
        j
        for j in collect_jobs(inv, positions=False)
        if (pool is None or (j.pool or "") == pool) and (kind is None or j.kind == kind)
    ]
    if namespaces is not None:
        jobs = [j for j in jobs if j.namespace in set(namespaces)]
    uses = [u for u in jobs_use(jobs, prom, span, now=now) if u.gpus or u.measured]
    return TopView(uses=uses, span=span, at=now, namespaces=sorted({j.namespace for j in jobs}))


def job_namespaces(source: Any) -> set[str]:
    """The namespaces that hold a gpuctl job (the API's candidates before it asks which its caller may
    read)."""
    return {o["metadata"]["namespace"] for _, o in Inventory(source, None).controllers}


def job_use_now(job: Job, prom: Prometheus, span: Span = Span(), now: float | None = None) -> JobUse:
    """One job's use (`describe job`): Prometheus asked about its own pods only."""
    now = time.time() if now is None else now
    pods = [p["metadata"]["name"] for p in job.pods]
    devices = by_pod(read_devices(prom, [job.namespace], span, now, pods=pods)) if pods else {}
    return use_of(job, devices, span, now)


# ----------------------------------------------------------------------------- `get jobs -o wide`'s rows
def _gang_pod(name: str) -> re.Pattern[str]:
    """The pods of an Indexed Job `name`: <name>-<index>-<suffix> (the Job controller's names)."""
    return re.compile(rf"^{re.escape(name)}-\d+-[a-z0-9]+$")


def row_use(
    namespace: str, job_id: str, name: str, devices: DevicesByPod, span: Span, now: float, age: float | None
) -> Figures | None:
    """The use of one `get jobs` row: its pod's devices (JOB ID is a pod's name), or for a job-level row
    (a gang's one row: JOB ID is the job's name) every rank's; None when nothing was measured. age: the
    row's AGE (its pod's), so a pod never active is idle since it started."""
    found = devices.get((namespace, job_id))
    if found is None and job_id == name:
        rank = _gang_pod(name)
        found = [d for (ns, pod), ds in devices.items() if ns == namespace and rank.match(pod) for d in ds]
    if not found:
        return None
    return figures(found, span.floor, now, None if age is None else now - age)
