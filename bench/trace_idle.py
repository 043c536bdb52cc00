"""bench/trace.py's idle day (issue 40, `bench/trace.py --day idle`): a day shaped like the published traces
of shared GPU clusters, played minute by minute with and without an idle policy, and what it hands back.

    python bench/trace.py --day idle [--seed 7] [--json]
    python bench/trace_idle.py [--seeds 1-20] [--json]

The day: one pool of 32 GPUs; 24 notebooks of 1 GPU, opened through the morning and mostly left open (60 %
into the night), idle most of their life (a few sessions of work a day; 3 of them busy most of the time);
training jobs of 2, 4 and 8 GPUs (runtimes lognormal, median 2 h) arriving through the day and queueing
FIFO for GPUs (Kueue's BestEffortFIFO on one ClusterQueue; no node fragmentation). Published shapes:
Alibaba PAI's median GPU instance 1.5 % utilised, Microsoft Philly's allocated GPUs idle 25-51 % of the
time; notebooks left open overnight are the classic waste.

The policy is gpuctl's (gpuctl.domain.idle, the default notebook rule: stop after `after` under the 1 %
floor): every minute each running notebook is judged by `judge` itself over its per-minute activity peaks,
and one found idle is stopped (its GPU goes back to the queue); when its user comes back (the next session
of work) it is resumed and queues again at its original creation time, as Kueue orders a resumed
Workload, so it is served before newer training. Training is only reported (the default).

This is a model, not a replay: no cluster, no Kueue latency, no nodes. tests/integration/test_idle.py is
the proof on the real path (Prometheus, serve, Kueue); this is the what-it-is-worth of a day.

Printed per design (without the policy, with it): allocated GPU-hours and utilisation (allocated /
capacity), busy GPU-hours (activity-weighted) and the share of allocated time the GPUs were busy, GPU-hours
handed back (idle notebook time released by stops), training wait p50/p99 (minutes from submission to
start; jobs still waiting at the end counted with their wait so far), notebook resume wait p50/p99, and
training jobs started within the day.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, field

from gpuctl.constants import DCGM_ENGINE_ACTIVE, IDLE_FLOOR
from gpuctl.domain.idle import KindRule, judge
from gpuctl.domain.utilisation import Device, DeviceUse

MINUTES = 24 * 60
CAPACITY = 32
NOTEBOOKS = 24
BUSY_NOTEBOOKS = 3
TRAINING_PER_DAY = 40
AFTER_MINUTES = 60  # the policy's `after` (gpuctl's default, 1 h)


@dataclass
class Job:
    name: str
    kind: str  # notebook | training
    gpus: int
    created: int  # minute
    activity: list[float]  # per minute of the day while it exists (0 outside its sessions)
    end: int  # minute it is closed / finishes (training: runtime after start)
    runtime: int = 0  # training only
    started: int | None = None
    running: bool = False
    stopped_at: int | None = None  # the policy stopped it (notebook)
    resume_waits: list[int] = field(default_factory=list)
    queued_at: int | None = None  # when it (re)entered the queue
    history: list[float] = field(default_factory=list)  # activity while running, per minute


def make_day(seed: int) -> list[Job]:
    """The notebooks (sessions of work in a mostly idle life) and the training stream."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    for i in range(NOTEBOOKS):
        opened = int(rng.uniform(7, 11) * 60)
        closed = MINUTES if rng.random() < 0.6 else int(rng.uniform(16, 19) * 60)
        act = [0.0] * MINUTES
        busy = i < BUSY_NOTEBOOKS
        t = opened
        while t < closed:
            gap = rng.expovariate(1 / (20 if busy else 150))  # minutes between sessions
            t += int(gap)
            length = int(rng.uniform(10, 40) if not busy else rng.uniform(60, 180))
            for m in range(t, min(t + length, closed)):
                act[m] = rng.uniform(0.2, 0.9)
            t += length
        for m in range(opened, closed):
            if act[m] == 0.0:
                act[m] = rng.uniform(0.0, 0.004)  # an open kernel's noise, under the 1 % floor
        jobs.append(Job(f"nb-{i}", "notebook", 1, opened, act, closed))
    for i in range(TRAINING_PER_DAY):
        t = int(rng.uniform(0, 22) * 60)
        gpus = rng.choices([2, 4, 8], [0.3, 0.45, 0.25])[0]
        runtime = int(min(rng.lognormvariate(math.log(120), 0.8), 10 * 60))
        jobs.append(Job(f"tr-{i}", "training", gpus, t, [0.9] * MINUTES, MINUTES, runtime=runtime))
    return jobs


def _idle(job: Job, now: int) -> bool:
    """gpuctl's own verdict over the notebook's last AFTER_MINUTES of per-minute peaks."""
    window = AFTER_MINUTES * 60
    last = job.history[-(AFTER_MINUTES + 1) :]  # the minutes up to now, one peak each
    peaks = [(float((now - (len(last) - 1 - i)) * 60), v) for i, v in enumerate(last)]
    dev = DeviceUse("team", job.name, "main", Device("n", "0", "u"), DCGM_ENGINE_ACTIVE, None, None, peaks)
    since = float((now - len(job.history) + 1) * 60)  # running since its last (re)start
    rule = KindRule("stop", window, IDLE_FLOOR)
    return judge([dev], rule, now=float(now * 60), step=60, gpus=1, since=since).idle


def play(jobs: list[Job], policy: bool) -> dict:
    """Minute by minute: stops by the policy, resumes when a user is back, FIFO admission by creation time."""
    free = CAPACITY
    allocated = busy = handed_back = 0.0
    queue: list[Job] = []
    for now in range(MINUTES):
        for j in jobs:
            # arrivals, and notebooks whose users come back
            if j.created == now and j.started is None:
                j.queued_at = now
                queue.append(j)
            if (
                j.kind == "notebook"
                and j.stopped_at is not None
                and not j.running
                and j not in queue
                and now < j.end
                and j.activity[now] >= IDLE_FLOOR
            ):
                j.queued_at = now
                queue.append(j)
        # finishes and closes
        for j in jobs:
            if j.running and ((j.kind == "training" and now >= j.started + j.runtime) or now >= j.end):
                j.running = False
                free += j.gpus
        # the policy
        if policy:
            for j in jobs:
                if j.kind == "notebook" and j.running and len(j.history) > AFTER_MINUTES and _idle(j, now):
                    j.running, j.stopped_at, j.history = False, now, []
                    free += j.gpus
        # admission: oldest creation first, whoever fits (BestEffortFIFO)
        queue.sort(key=lambda j: (j.created, j.name))
        for j in list(queue):
            if j.gpus <= free:
                queue.remove(j)
                free -= j.gpus
                j.running = True
                if j.started is None:
                    j.started = now
                elif j.queued_at is not None:
                    j.resume_waits.append(now - j.queued_at)
        for j in jobs:
            if j.running:
                allocated += j.gpus
                a = j.activity[now]
                busy += a * j.gpus
                j.history.append(a)
            elif j.kind == "notebook" and j.stopped_at is not None and now < j.end:
                handed_back += j.gpus  # GPU-minutes a stopped notebook did not hold while still open
    waits = [
        (j.started if j.started is not None else MINUTES) - j.created for j in jobs if j.kind == "training"
    ]
    resumes = [w for j in jobs for w in j.resume_waits]
    return {
        "allocated_gpu_hours": allocated / 60,
        "utilisation": allocated / (CAPACITY * MINUTES),
        "busy_gpu_hours": busy / 60,
        "busy_share_of_allocated": busy / allocated if allocated else 0.0,
        "handed_back_gpu_hours": handed_back / 60,
        "training_wait_p50_min": _pct(waits, 50),
        "training_wait_p99_min": _pct(waits, 99),
        "training_started": sum(1 for j in jobs if j.kind == "training" and j.started is not None),
        "notebook_stops": sum(1 for j in jobs if j.stopped_at is not None),
        "resume_wait_p50_min": _pct(resumes, 50) if resumes else 0.0,
        "resume_wait_p99_min": _pct(resumes, 99) if resumes else 0.0,
    }


def _pct(values: list[int], p: int) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return float(s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))])


def day(seed: int) -> dict:
    return {"seed": seed, "without": play(make_day(seed), False), "with": play(make_day(seed), True)}


ROWS = (
    (
        "allocated GPU-hours (utilisation)",
        lambda r: f"{r['allocated_gpu_hours']:.0f} ({r['utilisation']:.0%})",
    ),
    (
        "busy GPU-hours (share of allocated)",
        lambda r: f"{r['busy_gpu_hours']:.0f} ({r['busy_share_of_allocated']:.0%})",
    ),
    ("GPU-hours handed back", lambda r: f"{r['handed_back_gpu_hours']:.0f}"),
    (
        "training wait p50 / p99 (min)",
        lambda r: f"{r['training_wait_p50_min']:.0f} / {r['training_wait_p99_min']:.0f}",
    ),
    ("training jobs started (of 40)", lambda r: str(r["training_started"])),
    (
        "notebooks stopped / resume wait p50, p99 (min)",
        lambda r: f"{r['notebook_stops']} / {r['resume_wait_p50_min']:.0f}, {r['resume_wait_p99_min']:.0f}",
    ),
)


def print_day(d: dict) -> None:
    print(
        f"idle day, seed {d['seed']}: {CAPACITY} GPUs, {NOTEBOOKS} notebooks, "
        f"{TRAINING_PER_DAY} training jobs"
    )
    print(f"| | without the policy | with it (notebook: stop after {AFTER_MINUTES} min under 1 %) |")
    print("|---|---|---|")
    for label, cell in ROWS:
        print(f"| {label} | {cell(d['without'])} | {cell(d['with'])} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seeds", help="several days, e.g. 1-20: the median of each figure")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.seeds:
        lo, _, hi = args.seeds.partition("-")
        days = [day(s) for s in range(int(lo), int(hi or lo) + 1)]
        med = {
            side: {k: statistics.median(d[side][k] for d in days) for k in days[0][side]}
            for side in ("without", "with")
        }
        result = {"seed": f"{args.seeds} (medians)", **med}
    else:
        result = day(args.seed)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_day(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
