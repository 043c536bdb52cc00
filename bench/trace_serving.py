"""bench/trace.py's serving day (issue 44, `bench/trace.py --day serving`): model services whose load follows
a daily curve beside two teams' training, on one pool, played minute by minute twice: services of a fixed
size sized for the day's peak, and the same services autoscaled (a floor inside the team's quota, a burst
that borrows and yields). What each design costs serving and training.

    python bench/trace.py --day serving [--seed 7] [--json]
    python bench/trace_serving.py [--seeds 1-7] [--hours 24] [--json]

The day: one pool of 6 nodes x 8 GPUs (48); team-a (quota 24) runs three services and its own training,
team-b (quota 24) trains; the cohort lends idle GPUs. Services: chat (1 GPU a replica, planned peak 110
requests in flight, target 10 a replica), code (1 GPU, 55) and llm-70b (2 GPUs, 28). Their load follows
a daily curve (lowest at 04:00 at 12 % of the peak, highest at 16:00), each day's peak 0.9-1.1 x the
planned one, with noise per 10 minutes. Fixed: `service.replicas` = ceil(planned peak / target)
(11 + 6 + 3 x 2 = 23 GPUs, priority high). Autoscaled: `service.autoscaling` minReplicas 2 / 1 / 1,
maxReplicas the fixed size. Training: 35 jobs of team-a (busiest at 10:00) and 55 of team-b (14:00), 1/2/4/8
GPUs, lognormal runtimes (median 1.5 h, at most 10 h), low/medium/high priority; a preempted job goes
back to the queue and loses the work since its last checkpoint (every 30 min).

What is gpuctl's own (called, not re-implemented): every object is what gpuctl builds from the YAML
(gpuctl.spec, gpuctl.builders: the floor and burst Deployments with their WorkloadPriorityClasses, the
HPA with its floor load and target); every minute, each waiting workload in Kueue's order (priority,
then age) is judged by gpuctl's verdict (gpuctl.domain.explain: within the team's quota or borrowing
idle budget, the team's queue ahead, what Kueue may preempt for it: the team's own lower priorities, other
teams' work beyond their quota, borrowers below the threshold); a workload it says starts is placed on the
fullest node that holds it (the placement gpuctl's verdict assumes, Kueue's TAS packing) after its victims
go; each service's desired, running and waiting replicas are gpuctl.domain.serving.scale's, the rule of
`get jobs`, `describe` and the metrics.

What is modelled (not measured): the HPA (Kubernetes' rule: burst = ceil(metric / target) for the
adapter's metric max(0, load - floor load), at most maxReplicas - minReplicas; up at once, down on the
highest recommendation of the last 5 minutes; no 10 % tolerance), Kueue's scheduler as the verdict says
(one pass per minute when something changed, no latency), the replicas' load (offered concurrency, not
what vLLM's queues would report under a shortfall), the ReplicaSet (a scale-down deletes waiting pods
first, then the newest running), a preempted pod replaced by a new waiting one at once, training runtimes.
tests/integration/test_serving.py is the proof on the real path (HPA, prometheus-adapter, Kueue): a
service at its maximum on a capped team, a high job taking burst and never the floor, another team's
reclaim taking burst only, a scale-down freeing GPUs for a waiting job.

Printed per design (median and min-max over the seeds): GPU-hours held by serving, training GPU-hours run,
training jobs finished, training wait p50/p99 (minutes from submission to first start; a job still
waiting at the end counts its wait so far), the desired-vs-running replica gap (replica-hours desired and
not running, and the share of service-minutes with any), the need gap (replica-hours the load needed,
ceil(load / target), beyond those running), preemptions of training, burst and floor replicas, and the
pool's allocation.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpuctl.builders import build
from gpuctl.constants import Labels
from gpuctl.domain.explain import Snapshot, _place
from gpuctl.domain.serving import hpa_metric, scale
from gpuctl.spec import load_text
from queues import PoolCapacity, TeamQuota, cluster_queue, cohort

POOL = "gpu-pool"
NODES = 6
NODE_GPUS = 8
CAPACITY = NODES * NODE_GPUS
TEAMS = {"team-a": 24, "team-b": 24}  # GPU quota (the cohort lends what is idle)
SERVING_TEAM = "team-a"
TROUGH = 0.12  # the load at 04:00, as a share of the peak at 16:00
DAY_SCALE = (0.9, 1.1)  # each day's peak against the planned one
NOISE_MINUTES, NOISE_SIGMA = 10, 0.08
TRAINING = {"team-a": (10.0, 35), "team-b": (14.0, 55)}  # busiest hour, jobs a day
CHECKPOINT_MINUTES = 30
STABILIZATION_MINUTES = 5  # kube-controller-manager --horizontal-pod-autoscaler-downscale-stabilization
FIXED_PRIORITY = "high"
DESIGNS = ("fixed", "autoscaled", "half-floor")
DESIGN_TITLES = {
    "fixed": "fixed, sized for the peak",
    "autoscaled": "autoscaled (floor 2/1/1)",
    "half-floor": "autoscaled, floor half the peak",
}
BASE_EPOCH_DATE = "2026-11-29"


@dataclass(frozen=True)
class Service:
    name: str
    gpus: int  # per replica
    peak: int  # planned peak: requests in flight
    target: int  # requests in flight per replica
    floor: int  # minReplicas (autoscaled)

    @property
    def peak_replicas(self) -> int:
        return math.ceil(self.peak / self.target)

    def min_replicas(self, design: str) -> int:
        """The floor: the night's few replicas, or (half-floor) half the peak's."""
        return math.ceil(self.peak_replicas / 2) if design == "half-floor" else self.floor


SERVICES = (Service("chat", 1, 110, 10, 2), Service("code", 1, 55, 10, 1), Service("llm-70b", 2, 28, 10, 1))


def service_yaml(svc: Service, design: str) -> str:
    """The service as its team writes it: fixed (service.replicas, sized for the peak) or autoscaled."""
    prio = f", priority: {FIXED_PRIORITY}" if design == "fixed" else ""
    if design == "fixed":
        service = f"service: {{port: 8000, replicas: {svc.peak_replicas}}}"
    else:
        service = (
            f"service: {{port: 8000, autoscaling: {{minReplicas: {svc.min_replicas(design)}, maxReplicas: "
            f"{svc.peak_replicas}, targetConcurrency: {svc.target}}}}}"
        )
    return (
        f"kind: inference\njob: {{name: {svc.name}, namespace: {SERVING_TEAM}{prio}}}\n"
        f"environment: {{image: vllm/vllm-openai}}\n{service}\n"
        f"resources: {{pool: {POOL}, gpu: {svc.gpus}, cpu: 8, memory: 32Gi}}\n"
    )


def training_yaml(job: TrainingJob) -> str:
    return (
        f"kind: training\njob: {{name: {job.name}, namespace: {job.team}, priority: {job.priority}}}\n"
        "environment: {image: trainer}\n"
        f"resources: {{pool: {POOL}, gpu: {job.gpus}, cpu: 8, memory: 64Gi}}\n"
    )


def _built(text: str, ns: str) -> list[dict]:
    (doc,) = load_text(text, "trace-serving")
    return build(doc.spec, ns)


@dataclass
class TrainingJob:
    name: str
    team: str
    gpus: int
    priority: str
    submitted: int  # minute
    runtime: int  # minutes of work
    done: int = 0  # minutes of work done (kept at each checkpoint)
    since_checkpoint: int = 0
    started: int | None = None  # first start
    finished: int | None = None
    running: bool = False
    preempted: int = 0


def load_curve(seed: int, svc: Service, minutes: int) -> list[float]:
    """Requests in flight per minute: the daily curve x the day's scale x noise per NOISE_MINUTES."""
    rng = random.Random(f"{seed}-{svc.name}")
    scale_ = rng.uniform(*DAY_SCALE)
    noise = [rng.lognormvariate(0, NOISE_SIGMA) for _ in range(minutes // NOISE_MINUTES + 1)]
    out = []
    for m in range(minutes):
        shape = (1 - math.cos(2 * math.pi * (m / 60 - 4) / 24)) / 2  # 0 at 04:00, 1 at 16:00
        out.append(svc.peak * scale_ * (TROUGH + (1 - TROUGH) * shape) * noise[m // NOISE_MINUTES])
    return out


def training_stream(seed: int, minutes: int) -> list[TrainingJob]:
    rng = random.Random(seed)
    jobs = []
    for team, (peak_h, per_day) in TRAINING.items():
        for n in range(round(per_day * minutes / (24 * 60))):
            t = int((rng.gauss(peak_h, 5.0) % 24) * 60 * minutes / (24 * 60))
            gpus = rng.choices([1, 2, 4, 8], [0.25, 0.3, 0.25, 0.2])[0]
            runtime = max(1, int(min(rng.lognormvariate(math.log(90), 1.0), 10 * 60)))
            prio = rng.choices(["low", "medium", "high"], [0.3, 0.55, 0.15])[0]
            jobs.append(TrainingJob(f"tr-{team[-1]}-{n}", team, gpus, prio, t, runtime))
    return sorted(jobs, key=lambda j: (j.submitted, j.name))


def _stamp(minute: int, seq: int) -> str:
    """A creationTimestamp: the minute of the day, ordered within it by creation (Kueue's tie-break)."""
    return f"{BASE_EPOCH_DATE}T{minute // 60:02d}:{minute % 60:02d}:{seq % 60:02d}Z"


def _node(i: int) -> dict:
    return {
        "metadata": {"name": f"gpu-{i}", "labels": {Labels.POOL: POOL}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(NODE_GPUS), "cpu": "96", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@dataclass
class Deploy:
    """A Deployment the model runs: gpuctl's object, its pods' template and what its pods are."""

    obj: dict
    kind: str  # fixed | floor | burst
    service: Service
    pods: list[dict] = field(default_factory=list)


class Day:
    """One design's day: the cluster's objects as gpuctl builds them, played minute by minute."""

    def __init__(self, seed: int, design: str, minutes: int = 24 * 60) -> None:
        self.design, self.minutes = design, minutes
        self.nodes = [_node(i) for i in range(1, NODES + 1)]
        teams = [TeamQuota(ns, "day", gpu=q) for ns, q in TEAMS.items()]
        self.cluster_queues = [cluster_queue(t, [POOL]) for t in teams]
        self.cohort = cohort([PoolCapacity(POOL, gpu=CAPACITY, cpu="576", memory="6Ti")], teams)
        self.loads = {s.name: load_curve(seed, s, minutes) for s in SERVICES}
        self.jobs = training_stream(seed, minutes)
        self.job_of = {j.name: j for j in self.jobs}
        self.templates = {j.name: _built(training_yaml(j), j.team)[0]["spec"]["template"] for j in self.jobs}
        self.deploys: dict[str, Deploy] = {}
        self.hpas: dict[str, dict] = {}
        for svc in SERVICES:
            objs = _built(service_yaml(svc, design), SERVING_TEAM)
            if design == "fixed":
                self.deploys[svc.name] = Deploy(objs[0], "fixed", svc)
            else:
                floor, burst, hpa = objs[0], objs[1], objs[2]
                self.deploys[floor["metadata"]["name"]] = Deploy(floor, "floor", svc)
                self.deploys[burst["metadata"]["name"]] = Deploy(burst, "burst", svc)
                self.hpas[svc.name] = hpa
        self.training_pods: dict[str, list[dict]] = {}
        self.recommendations: dict[str, deque[int]] = {
            s: deque(maxlen=STABILIZATION_MINUTES) for s in self.hpas
        }
        self.seq = 0
        self.uid = 0
        self.preemptions = {"training": 0, "burst": 0, "floor": 0, "fixed": 0}
        self.dirty = True
        self.terminating: set[str] = set()  # evicted this minute
        self.now = 0
        self.gap: dict[str, list[tuple[int, int, int]]] = {
            s.name: [] for s in SERVICES
        }  # desired, running, need
        self.held = {"serving": 0, "training": 0}  # GPU-minutes

    # ------------------------------------------------------------------ objects
    def _pod(self, name: str, ns: str, template: dict, owner: dict, labels: dict, created: int) -> dict:
        self.seq += 1
        self.uid += 1
        spec = dict(template["spec"])
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
        return {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"u{self.uid}",
                "creationTimestamp": _stamp(created, self.seq),
                "labels": {**template["metadata"].get("labels", {}), **labels},
                "ownerReferences": [{**owner, "controller": True}],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }

    def _deploy_pod(self, d: Deploy) -> dict:
        """A new pod of the Deployment, at Kueue's gate; Kueue's Deployment webhook has copied the
        Deployment's WorkloadPriorityClass into it."""
        meta = d.obj["metadata"]
        kueue = {k: v for k, v in meta["labels"].items() if k == Labels.KUEUE_PRIORITY}
        pod = self._pod(
            f"{meta['name']}-{self.uid + 1}",
            meta["namespace"],
            d.obj["spec"]["template"],
            {"kind": "ReplicaSet", "name": meta["name"]},
            kueue,
            self.now,
        )
        d.pods.append(pod)
        self.dirty = True
        return pod

    def _queue_job(self, job: TrainingJob) -> None:
        """The Job's pod at Kueue's gate (its Workload waits: created at submission, as Kueue orders a
        requeued Workload by its creation)."""
        tmpl = self.templates[job.name]
        pod = self._pod(f"{job.name}-0", job.team, tmpl, {"kind": "Job", "name": job.name}, {}, job.submitted)
        self.training_pods[job.name] = [pod]
        self.dirty = True

    def _scale_to(self, d: Deploy, replicas: int) -> None:
        """The ReplicaSet: more pods are made at the gate; fewer deletes waiting pods first, then the
        newest running."""
        d.obj["spec"]["replicas"] = replicas
        while len(d.pods) < replicas:
            self._deploy_pod(d)
        while len(d.pods) > replicas:
            gated = [p for p in d.pods if p["spec"].get("schedulingGates")]
            victim = gated[-1] if gated else d.pods[-1]
            d.pods.remove(victim)
            self.dirty = True

    def all_pods(self) -> list[dict]:
        return [p for d in self.deploys.values() for p in d.pods] + [
            p for pods in self.training_pods.values() for p in pods
        ]

    # ------------------------------------------------------------------ the HPA (Kubernetes' rule)
    def hpa_burst(self, svc: Service, load: float) -> int:
        """The burst the HPA sets: its recommendation from the adapter's metric (the load above the floor's,
        read from gpuctl's HPA: its floor label and target), the highest of the last few minutes' when
        lower (scale-down stabilization), at most its maxReplicas."""
        hpa = self.hpas[svc.name]
        metric = hpa_metric(hpa)
        assert metric is not None
        above = max(0.0, load - float(metric.floor_load))
        rec = min(int(hpa["spec"]["maxReplicas"]), math.ceil(above / float(metric.target) - 1e-9))
        recs = self.recommendations[svc.name]
        recs.append(rec)
        return max(recs)

    # ------------------------------------------------------------------ Kueue, as gpuctl judges it
    def admit(self) -> None:
        """Admit, in Kueue's order, every waiting workload gpuctl's verdict says starts (after its victims
        go), until none does."""
        for _ in range(500):
            snap = Snapshot.build(
                nodes=self.nodes,
                pods=self.all_pods(),
                workloads=[],
                cluster_queues=self.cluster_queues,
                cohort=self.cohort,
            )
            waiting = sorted(
                (d for q in snap.waiting.values() for d in q), key=lambda d: (-d.priority, d.created, d.label)
            )
            for demand in waiting:
                if demand.label in self.terminating:
                    continue
                v = snap.verdict(demand)
                if v.starts:
                    for victim in v.preempts:
                        self._preempt(victim)
                    self._start(demand.label)
                    break
            else:
                return
        raise RuntimeError("admission did not settle")

    def _free(self) -> dict[str, int]:
        free = {n["metadata"]["name"]: NODE_GPUS for n in self.nodes}
        for p in self.all_pods():
            node = p["spec"].get("nodeName")
            if node:
                free[node] -= _gpus(p)
        return free

    def _bind(self, pod: dict) -> None:
        free = self._free()
        before = dict(free)
        _place(free, 1, _gpus(pod))
        (node,) = [n for n in free if free[n] != before[n]]
        pod["spec"] = {k: v for k, v in pod["spec"].items() if k != "schedulingGates"} | {"nodeName": node}
        pod["status"] = {"phase": "Running"}

    def _start(self, label: str) -> None:
        name = label.partition("/")[2]
        job = self.job_of.get(name)
        if job is not None:
            for pod in self.training_pods[name]:
                self._bind(pod)
            job.running = True
            if job.started is None:
                job.started = self.now
            return
        pod = next(p for d in self.deploys.values() for p in d.pods if p["metadata"]["name"] == name)
        self._bind(pod)

    def _preempt(self, label: str) -> None:
        """Kueue evicts it: a Job's Workload goes back to the queue, a Deployment pod is deleted and its
        ReplicaSet makes a new one at the gate. Either is judged again from the next minute (the evicted
        pods terminate first)."""
        _, _, name = label.partition("/")
        self.dirty = True
        job = self.job_of.get(name)
        if job is not None:
            self.terminating.add(label)
            self.preemptions["training"] += 1
            job.preempted += 1
            job.running = False
            job.done -= job.since_checkpoint  # the work since the last checkpoint is lost
            job.since_checkpoint = 0
            self._queue_job(job)
            return
        for d in self.deploys.values():
            for p in d.pods:
                if p["metadata"]["name"] == name:
                    self.preemptions[d.kind] += 1
                    d.pods.remove(p)
                    new = self._deploy_pod(d)  # the ReplicaSet makes a new one, at the gate
                    self.terminating.add(f"{new['metadata']['namespace']}/{new['metadata']['name']}")
                    return
        raise KeyError(label)

    # ------------------------------------------------------------------ the day
    def step(self) -> None:
        now = self.now
        for job in self.jobs:
            if job.running:
                job.done += 1
                job.since_checkpoint += 1
                if job.since_checkpoint >= CHECKPOINT_MINUTES:
                    job.since_checkpoint = 0
                if job.done >= job.runtime:
                    job.running, job.finished = False, now
                    del self.training_pods[job.name]
                    self.dirty = True
            elif job.submitted == now and job.started is None:
                self._queue_job(job)
        for d in self.deploys.values():
            svc = d.service
            if d.kind == "burst":
                self._scale_to(d, self.hpa_burst(svc, self.loads[svc.name][now]))
            elif now == 0:
                self._scale_to(d, int(d.obj["spec"]["replicas"]))
        if self.dirty:
            self.dirty = bool(self.terminating)  # what was evicted is judged again next minute
            self.terminating = set()
            self.admit()
        self.account()
        self.now += 1

    def account(self) -> None:
        for d in self.deploys.values():
            self.held["serving"] += sum(_gpus(p) for p in d.pods if p["spec"].get("nodeName"))
        for pods in self.training_pods.values():
            self.held["training"] += sum(_gpus(p) for p in pods if p["spec"].get("nodeName"))
        for svc in SERVICES:
            need = math.ceil(self.loads[svc.name][self.now] / svc.target - 1e-9)
            if self.design == "fixed":
                d = self.deploys[svc.name]
                running = sum(1 for p in d.pods if p["spec"].get("nodeName"))
                self.gap[svc.name].append((int(d.obj["spec"]["replicas"]), running, need))
            else:
                floor, burst = self.deploys[svc.name], self.deploys[svc.name + "-burst"]
                s = scale(floor.obj, burst.obj, floor.pods + burst.pods, self.hpas[svc.name])
                self.gap[svc.name].append((s.desired, s.running, need))

    def play(self) -> dict[str, Any]:
        while self.now < self.minutes:
            self.step()
        return self.result()

    def result(self) -> dict[str, Any]:
        waits = [(j.started if j.started is not None else self.minutes) - j.submitted for j in self.jobs]
        short = sum(max(0, want - run) for g in self.gap.values() for want, run, _ in g)
        unmet = sum(max(0, need - run) for g in self.gap.values() for _, run, need in g)
        minutes_short = sum(1 for g in self.gap.values() for want, run, _ in g if want > run)
        total = sum(len(g) for g in self.gap.values())
        return {
            "serving_gpu_hours": self.held["serving"] / 60,
            "training_gpu_hours": self.held["training"] / 60,
            "training_finished": sum(1 for j in self.jobs if j.finished is not None),
            "training_jobs": len(self.jobs),
            "training_wait_p50_min": _pct(waits, 50),
            "training_wait_p99_min": _pct(waits, 99),
            "replica_gap_hours": short / 60,
            "replica_gap_share": minutes_short / total if total else 0.0,
            "need_gap_hours": unmet / 60,
            "preempted_training": self.preemptions["training"],
            "preempted_burst": self.preemptions["burst"],
            "preempted_floor": self.preemptions["floor"] + self.preemptions["fixed"],
            "allocation": (self.held["serving"] + self.held["training"]) / (CAPACITY * self.minutes),
        }


def _gpus(pod: dict) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))


def _pct(values: list[int], p: int) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return float(s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))])


def day(seed: int, minutes: int = 24 * 60) -> dict[str, Any]:
    return {"seed": seed, **{design: Day(seed, design, minutes).play() for design in DESIGNS}}


ROWS = (
    ("GPU-hours held by serving", "serving_gpu_hours", "{:.0f}"),
    ("training GPU-hours run", "training_gpu_hours", "{:.0f}"),
    ("training jobs finished (of 90)", "training_finished", "{:.0f}"),
    ("training wait p50 (min)", "training_wait_p50_min", "{:.0f}"),
    ("training wait p99 (min)", "training_wait_p99_min", "{:.0f}"),
    ("replica gap: desired, not running (replica-h)", "replica_gap_hours", "{:.1f}"),
    ("service-minutes with a gap", "replica_gap_share", "{:.1%}"),
    ("need gap: load's replicas not running (replica-h)", "need_gap_hours", "{:.1f}"),
    ("preemptions: training / burst / floor", None, ""),
    ("pool allocated", "allocation", "{:.0%}"),
)


def _cell(values: list[float], fmt: str) -> str:
    med = fmt.format(statistics.median(values))
    if len(values) == 1 or min(values) == max(values):
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(days: list[dict[str, Any]]) -> list[str]:
    """The markdown table: median (min-max) over the days, per design."""
    seeds = ", ".join(str(d["seed"]) for d in days)
    title = f"seed {seeds}" if len(days) == 1 else f"seeds {seeds}: median (min-max)"
    out = [
        f"| serving day, {title} | " + " | ".join(DESIGN_TITLES[d] for d in DESIGNS) + " |",
        "|---|" + "---|" * len(DESIGNS),
    ]
    for label, key, fmt in ROWS:
        cells = []
        for design in DESIGNS:
            if key is None:
                parts = [
                    _cell([d[design][k] for d in days], "{:.0f}")
                    for k in ("preempted_training", "preempted_burst", "preempted_floor")
                ]
                cells.append(" / ".join(parts))
            else:
                cells.append(_cell([d[design][key] for d in days], fmt))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seeds", help="several days, e.g. 1-7: the median and the spread of each figure")
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    seeds = seeds_of(args.seeds) if args.seeds else [args.seed]
    days = [day(s, args.hours * 60) for s in seeds]
    if args.json:
        json.dump(days, sys.stdout, indent=2)
        print()
    else:
        print("\n".join(table(days)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
