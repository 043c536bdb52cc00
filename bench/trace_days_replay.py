"""Replay bench/trace_days.py's days on the local cluster (KWOK fake nodes, real Kueue) and print them
side by side. Run through bench/trace.py:

    python bench/trace.py --kubeconfig <run>/kubeconfig --day gangs  [--day-seconds 300] [--seed 7]
    python bench/trace.py --kubeconfig <run>/kubeconfig --day slices [--day-seconds 300] [--seed 7]

The day's fake nodes are created by the bench (label runwhere.ai/trace-day=true; deleted and made again
for each replay) and put in the day's pool with `gpuctl create -f` (labels, taint, flavor, topology).

- gangs: `baseline` (Kueue's defaults, bench/trace.py's baseline: a ClusterQueue per team holding its
  quota of the pool as nominal quota, no cohort, no preemption, no Topology Aware Scheduling; the
  gang is one Workload of N pods all the same, and kube-scheduler places each pod on its own), `gpuctl`
  (gpuctl's pool with its rack topology and quotas: cohort, lending, TAS, a gang's pods placed in one
  rack when one holds them) and `setaside` (gpuctl's design plus `gpuctl serve --defrag`'s set-aside of
  nodes for the oldest waiting gang, run in process on the compressed clock: gpuctl.server.setaside).
- slices: `whole` (notebooks and inference ask one whole GPU each) and `slices` (the same jobs ask
  gpu-share: one MIG slice each), both in gpuctl's design.

Per design: utilisation (GPU equivalents held by bound pods / the pool's GPUs, over the day), by job
class; the GPU-time held by gangs whose pods are not all bound (a real gang's ranks wait for each other
at the rendezvous: GPUs held, no work); per class the p50/p99 wait from submission until every pod of the
job is bound at once (jobs still waiting at the end count with their wait so far); gangs that never had
all their pods bound at once (KWOK runs each pod's timer on its own; a real torchrun would hang there).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.trace import (
    GRACE_SECONDS,
    REAL_DAY,
    Item,
    baseline_queues,
    cli,
    count_pods,
    declared_runtime,
    pct,
    reset,
)
from bench.trace_days import (
    BLOCK_LABEL,
    GANG_CAPACITY,
    GANG_POOL,
    GANG_RACKS,
    GANG_TEAMS,
    GPUS_CUT,
    RACK_LABEL,
    SLICE_CAPACITY,
    SLICE_TEAMS,
    day_gpu_seconds,
    day_spec_yaml,
    gang_day,
    gang_nodes,
    gang_share,
    job_class,
    pool_yaml,
    slice_day,
    slice_equivalents,
    slice_nodes,
)
from gpuctl.builders import TargetPool, build
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import GPU_UNITS, TAS_REQUEST_KEYS, Labels
from gpuctl.domain.gpus import pod_holds_gpus, pod_spec_gpu_units
from gpuctl.domain.objects import condition, meta
from gpuctl.domain.objects import name as name_of
from gpuctl.domain.objects import namespace as namespace_of
from gpuctl.domain.sharing import choose_slice, pool_sharing
from gpuctl.server.setaside import SetAside
from gpuctl.spec import load_text
from gpuctl.spec.share import parse_share

DAY_DESIGNS = {"gangs": ("baseline", "gpuctl", "setaside"), "slices": ("whole", "slices")}
TITLES = {
    "baseline": "Kueue defaults",
    "gpuctl": "gpuctl (TAS)",
    "setaside": "gpuctl + set-aside",
    "whole": "whole GPUs",
    "slices": "slices (MIG)",
}
CLASSES = ("gang", "training", "notebook", "inference")
DAY_NODE_LABEL = "runwhere.ai/trace-day"
SET_ASIDE_SETTLE = 3.0  # compressed seconds (9 min of a 480 s day), as bench/trace.py's defrag settle


@dataclass
class Track:
    item: Item
    submitted: float
    started: float | None = None  # every pod bound at once (seconds into the day)
    piecemeal: bool = False  # a pod ended before the last one was bound: never all ranks at once
    deleted: bool = False


@dataclass
class DayResult:
    design: str
    capacity: int
    day: float
    held: dict[str, float] = field(default_factory=dict)  # class -> GPU-equivalent-seconds held
    partial: float = 0.0  # GPU-seconds held by gangs not all bound
    waits: dict[str, list[float]] = field(default_factory=dict)
    never: dict[str, int] = field(default_factory=dict)
    piecemeal: int = 0
    jobs: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    gang_waits: dict[str, float] = field(default_factory=dict)  # each gang's wait (never started: so far)

    def util(self, *classes: str) -> float:
        return sum(v for c, v in self.held.items() if not classes or c in classes) / (
            self.capacity * self.day
        )

    def gpu_hours(self, *classes: str) -> float:
        """GPU-equivalent-hours of the real day the classes held."""
        return sum(v for c, v in self.held.items() if c in classes) * REAL_DAY / self.day / 3600


# ----------------------------------------------------------------------------- setup
def make_nodes(kube: Cluster, nodes: list[dict]) -> None:
    """Delete the bench's day nodes, create `nodes`, wait until KWOK reports them Ready."""
    for n in kube.list(path("Node"), label_selector=f"{DAY_NODE_LABEL}=true"):
        with contextlib.suppress(ApiError):
            kube.delete(path("Node", name_of(n)))
    deadline = time.monotonic() + 120
    while kube.list(path("Node"), label_selector=f"{DAY_NODE_LABEL}=true") and time.monotonic() < deadline:
        time.sleep(0.5)
    for n in nodes:
        kube.create(n)
    names = {name_of(n) for n in nodes}
    while time.monotonic() < deadline:
        ready = {
            name_of(n)
            for n in kube.list(path("Node"), label_selector=f"{DAY_NODE_LABEL}=true")
            if condition(n, "Ready").get("status") == "True"
        }
        if names <= ready:
            return
        time.sleep(0.5)
    raise SystemExit(f"fake nodes not Ready in 120 s: {sorted(names)}")


def setup(kube: Cluster, kubeconfig: str, day: str, design: str, ns: Mapping[str, str], tmp: Path) -> None:
    teams = GANG_TEAMS if day == "gangs" else SLICE_TEAMS
    make_nodes(kube, gang_nodes() if day == "gangs" else slice_nodes(sliced=design == "slices"))
    pool = tmp / "pool.yaml"
    pool.write_text(pool_yaml(day, sliced=design == "slices"))
    cli(kubeconfig, "create", "-f", str(pool))
    if design == "baseline":
        baseline_queues(kube, ns, {t: {GANG_POOL: g} for t, g in teams.items()})
        return
    q = tmp / "quota.yaml"
    q.write_text(
        "kind: quota\nquota: {name: trace-day}\nnamespace:\n"
        + "".join(f"  {ns[t]}: {{gpu: {g}}}\n" for t, g in teams.items())
    )
    cli(kubeconfig, "create", "-f", str(q))


def facts(kube: Cluster, day: str, item: Item) -> TargetPool:
    """What gpuctl's submission reads of the pool (gpuctl.service.gang / sharing): the gang pool's
    topology levels; for a gpu-share the slice the pool's nodes offer (gpuctl.domain.sharing's rule)."""
    if day == "gangs":
        return TargetPool(name=item.pool, topology=(BLOCK_LABEL, RACK_LABEL))
    if item.share is None:
        return TargetPool(name=item.pool)
    ps = pool_sharing(kube.list(path("Node"), label_selector=f"{Labels.POOL}={item.pool}"))
    chosen = choose_slice(parse_share(item.share), item.pool, ps.mode, ps.model, ps.profiles)
    return TargetPool(name=item.pool, gpu_resource=chosen.resource, slice_resource=chosen.resource)


def day_manifest(item: Item, ns: str, design: str, day: float, pool: TargetPool) -> dict:
    """The workload object gpuctl builds (its headless Service is not made: KWOK's pods do not talk);
    maxRuntime declared as bench/trace.py's users do (gpuctl's designs; the set-aside's bound reads
    it); for Kueue's defaults without the topology request (its flavor has no topology)."""
    declared = declared_runtime(item, day) if design != "baseline" else None
    (doc,) = load_text(day_spec_yaml(item, ns, declared), f"trace:{item.name}")
    obj = build(doc.spec, ns, pool)[0]
    template = obj["spec"]["template"]
    if design == "baseline":
        for key in TAS_REQUEST_KEYS:
            template["metadata"].get("annotations", {}).pop(key, None)
    template["spec"]["terminationGracePeriodSeconds"] = GRACE_SECONDS
    return obj


# ----------------------------------------------------------------------------- replay
def observe_once(
    pods: list[dict], tracks: dict[tuple[str, str], Track], res: DayResult, t: float, dt: float, wall0: float
) -> None:
    """One pass over the team namespaces' pods: the jobs that now have every pod bound, and the GPU-time
    held by class."""
    counts = count_pods(pods)
    for key, tr in tracks.items():
        c = counts.get(key)
        if tr.started is not None or c is None:
            continue
        if c.bound >= tr.item.pods:
            tr.started = max(tr.submitted, (c.scheduled_at - wall0) if c.scheduled_at else t)
        elif c.succeeded and c.bound + c.succeeded >= tr.item.pods:
            tr.started, tr.piecemeal = t, True
    if t > res.day:
        return
    for p in pods:
        if not pod_holds_gpus(p):
            continue
        tr = tracks.get((namespace_of(p), pod_job_name(p)))
        if tr is None:
            continue
        gpus = pod_spec_gpu_units(p.get("spec")) / GPU_UNITS
        cls = job_class(tr.item)
        res.held[cls] = res.held.get(cls, 0.0) + gpus * dt
        if cls == "gang" and tr.started is None:
            res.partial += gpus * dt


def pod_job_name(pod: Mapping[str, Any]) -> str:
    lbl = meta(pod).get("labels") or {}
    return lbl.get(Labels.BATCH_JOB_NAME) or lbl.get(Labels.JOB_NAME) or lbl.get(Labels.APP) or ""


def replay_day(
    kube: Cluster,
    day_name: str,
    design: str,
    ns: Mapping[str, str],
    trace: list[Item],
    day: float,
    capacity: int,
    setaside: SetAside | None = None,
) -> DayResult:
    res = DayResult(design, capacity, day)
    tracks: dict[tuple[str, str], Track] = {}
    lock = threading.Lock()
    stop = threading.Event()
    t0, wall0 = time.monotonic(), time.time()

    def now() -> float:
        return time.monotonic() - t0

    def observe() -> None:
        last = now()
        while not stop.is_set():
            time.sleep(1.0)
            t = now()
            # Listed outside the lock: the submissions wait for the lock, not for the API server.
            pods = [p for n in ns.values() for p in kube.list(path("Pod", namespace=n))]
            with lock:
                observe_once(pods, tracks, res, t, t - last, wall0)
            last = t

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    mover = setaside.start(stop) if setaside is not None else None
    targets: dict[tuple[str, str | None], TargetPool] = {}
    pending = list(trace)
    try:
        while now() < day or (pending and pending[0].t < day):
            while pending and pending[0].t <= now():
                it = pending.pop(0)
                pf = targets.get((it.pool, it.share)) or facts(kube, day_name, it)
                targets[(it.pool, it.share)] = pf
                with lock:
                    tracks[(ns[it.team], it.name)] = Track(it, now())
                try:
                    kube.create(day_manifest(it, ns[it.team], design, day, pf))
                except ApiError as e:
                    print(f"  {it.name}: {e}", file=sys.stderr)
            end_services(kube, tracks, lock, now())
            time.sleep(0.2)
    finally:
        stop.set()
        watcher.join(timeout=15)
        if mover is not None:
            mover.join(timeout=15)
    summarise(kube, ns, tracks, res, now())
    return res


def end_services(
    kube: Cluster, tracks: Mapping[tuple[str, str], Track], lock: threading.Lock, t: float
) -> None:
    """Inference and notebooks end when their time is up (counted from their start)."""
    with lock:
        due = [
            (key, tr)
            for key, tr in tracks.items()
            if tr.item.kind != "training"
            and not tr.deleted
            and tr.started is not None
            and t - tr.started >= tr.item.runtime
        ]
        for _, tr in due:
            tr.deleted = True
    for (n, name), tr in due:
        kind = "Deployment" if tr.item.kind == "inference" else "StatefulSet"
        with contextlib.suppress(ApiError):
            kube.delete(path(kind, name, namespace=n))


def summarise(
    kube: Cluster, ns: Mapping[str, str], tracks: Mapping[tuple[str, str], Track], res: DayResult, end: float
) -> None:
    for tr in tracks.values():
        cls = job_class(tr.item)
        res.jobs[cls] = res.jobs.get(cls, 0) + 1
        wait = (tr.started if tr.started is not None else end) - tr.submitted
        res.waits.setdefault(cls, []).append(wait)
        if tr.started is None:
            res.never[cls] = res.never.get(cls, 0) + 1
        res.piecemeal += tr.piecemeal
        if cls == "gang":
            res.gang_waits[tr.item.name] = wait
    res.preemptions = sum(
        int(e.get("count") or 0)
        for n in ns.values()
        for w in kube.list(path("Workload", namespace=n))
        for e in ((w.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        if e.get("reason") == "Preempted"
    )


def list_all(kube: Cluster) -> Callable[[], tuple[list[dict], ...]]:
    """SetAside's input, listed from the API server each step (serve reads its watch cache)."""

    def read() -> tuple[list[dict], ...]:
        return tuple(
            kube.list(path(k)) for k in ("Node", "Pod", "Workload", "ClusterQueue", "ResourceFlavor")
        )

    return read


# ----------------------------------------------------------------------------- tables
def cell(v: list[float], p: float, k: float) -> str:
    return f"{pct(v, p):.1f} s ({pct(v, p) * k:.0f} min)" if v else "-"


def rows_gangs(results: list[DayResult]) -> list[tuple[str, Callable[[DayResult], str]]]:
    k = REAL_DAY / results[0].day / 60
    return [
        (
            "gangs (never all pods bound in the day)",
            lambda r: f"{r.jobs.get('gang', 0)} ({r.never.get('gang', 0)})",
        ),
        (
            "one-pod jobs (never started)",
            lambda r: f"{r.jobs.get('training', 0)} ({r.never.get('training', 0)})",
        ),
        ("GPU utilisation (held / capacity)", lambda r: f"{100 * r.util():.1f} %"),
        ("  by gangs", lambda r: f"{100 * r.util('gang'):.1f} %"),
        ("  by one-pod jobs", lambda r: f"{100 * r.util('training'):.1f} %"),
        (
            "  held by gangs not all bound (no work)",
            lambda r: f"{100 * r.partial / (r.capacity * r.day):.1f} %",
        ),
        ("gangs' p50 wait", lambda r: cell(r.waits.get("gang", []), 50, k)),
        ("gangs' p99 wait", lambda r: cell(r.waits.get("gang", []), 99, k)),
        ("gangs run piecemeal (never all ranks at once)", lambda r: str(r.piecemeal)),
        ("one-pod jobs' p50 wait", lambda r: cell(r.waits.get("training", []), 50, k)),
        ("one-pod jobs' p99 wait", lambda r: cell(r.waits.get("training", []), 99, k)),
        ("preemptions", lambda r: str(r.preemptions)),
    ]


def rows_slices(results: list[DayResult]) -> list[tuple[str, Callable[[DayResult], str]]]:
    k = REAL_DAY / results[0].day / 60
    whole = next((r for r in results if r.design == "whole"), None)
    light = ("notebook", "inference")

    def saved(r: DayResult) -> str:
        if whole is None or r is whole:
            return "-"
        return f"{whole.gpu_hours(*light) - r.gpu_hours(*light):.0f} GPU-h"

    out: list[tuple[str, Callable[[DayResult], str]]] = [
        ("GPU utilisation (GPU equivalents held / 16)", lambda r: f"{100 * r.util():.1f} %"),
        ("notebooks + inference, GPU-h held", lambda r: f"{r.gpu_hours(*light):.0f} GPU-h"),
        ("  GPUs saved (GPU-h, against whole GPUs)", saved),
        ("fine-tunes, GPU-h run", lambda r: f"{r.gpu_hours('training'):.0f} GPU-h"),
    ]
    for cls in ("notebook", "inference", "training"):
        out += [
            (f"{cls}: jobs (never started)", lambda r, c=cls: f"{r.jobs.get(c, 0)} ({r.never.get(c, 0)})"),
            (f"{cls}: p50 wait", lambda r, c=cls: cell(r.waits.get(c, []), 50, k)),
            (f"{cls}: p99 wait", lambda r, c=cls: cell(r.waits.get(c, []), 99, k)),
        ]
    return [*out, ("preemptions", lambda r: str(r.preemptions))]


def print_day(day_name: str, results: list[DayResult]) -> None:
    rows = (rows_gangs if day_name == "gangs" else rows_slices)(results)
    w = max(len(n) for n, _ in rows)
    print(f"\n{'':{w}}   " + "   ".join(f"{TITLES[r.design]:>22}" for r in results))
    for name, fn in rows:
        print(f"{name:{w}}   " + "   ".join(f"{fn(r):>22}" for r in results))
    sys.stdout.flush()


def describe_trace(day_name: str, trace: list[Item], day: float) -> str:
    if day_name == "gangs":
        gangs = [i for i in trace if i.pods > 1]
        sizes = sorted({f"{i.pods}x{i.gpus}" for i in gangs})
        offered = day_gpu_seconds(trace, day) / (GANG_CAPACITY * day)
        return (
            f"{len(trace)} jobs, {len(gangs)} gangs ({', '.join(sizes)}), gangs' share of the day's "
            f"GPU-hours {100 * gang_share(trace, day):.0f} %, offered {100 * offered:.0f} % of "
            f"{GANG_CAPACITY} GPUs ({len(GANG_RACKS)} nodes x 8, 2 racks)"
        )
    eq = {i.name: slice_equivalents(i) for i in trace}
    offered = day_gpu_seconds(trace, day, eq) / (SLICE_CAPACITY * day)
    return f"{len(trace)} jobs, offered {100 * offered:.0f} % of {SLICE_CAPACITY} GPUs in GPU equivalents" + (
        f" ({GPUS_CUT} of them cut into slices)" if any(i.share for i in trace) else ""
    )


def run_day(
    kube: Cluster,
    kubeconfig: str,
    day_name: str,
    seed: int,
    day: float,
    only: list[str] | None,
    as_json: bool,
) -> int:
    tmp = Path(f"/tmp/gpuctl-trace-day-{time.time_ns()}")
    tmp.mkdir(parents=True)
    k = REAL_DAY / day / 60
    print(f"{day_name} day, seed {seed}, {day:.0f} s (1 s = {k:.1f} min of the day)")
    results = []
    for design in DAY_DESIGNS[day_name]:
        if only and design not in only:
            continue
        trace = (
            gang_day(seed, day) if day_name == "gangs" else slice_day(seed, day, sliced=design == "slices")
        )
        print(f"{TITLES[design]}: {describe_trace(day_name, trace, day)}; replaying ...", flush=True)
        ns = {t: f"trace-{design[:4]}-{t}" for t in (GANG_TEAMS if day_name == "gangs" else SLICE_TEAMS)}
        reset(kube, list(ns.values()))
        setup(kube, kubeconfig, day_name, design, ns, tmp)
        mover = None
        if design == "setaside":
            mover = SetAside(kube, list_all(kube), pools=[GANG_POOL], settle=SET_ASIDE_SETTLE, interval=1.0)
        capacity = GANG_CAPACITY if day_name == "gangs" else SLICE_CAPACITY
        load = os.getloadavg()[0]
        results.append(replay_day(kube, day_name, design, ns, trace, day, capacity, mover))
        print(f"machine load (1-minute average, 2 cores): {load:.1f} before, {os.getloadavg()[0]:.1f} after")
        print_day(day_name, results[-1:])
        if results[-1].gang_waits:
            print(
                "gangs' waits: "
                + ", ".join(f"{g} {w:.1f} s" for g, w in sorted(results[-1].gang_waits.items()))
            )
        reset(kube, list(ns.values()))
    make_nodes(kube, [])  # the day's fake nodes go; the cluster's own are left as they were
    print_day(day_name, results)
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "design": r.design,
                        "util": r.util(),
                        "util_by_class": {c: r.util(c) for c in CLASSES},
                        "partial": r.partial / (r.capacity * r.day),
                        "gpu_hours": {c: r.gpu_hours(c) for c in CLASSES},
                        "waits": {
                            c: {"n": len(v), "p50": pct(v, 50), "p99": pct(v, 99)} for c, v in r.waits.items()
                        },
                        "never": r.never,
                        "piecemeal": r.piecemeal,
                        "preemptions": r.preemptions,
                    }
                    for r in results
                ]
            )
        )
    return 0
