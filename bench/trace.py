"""Replay a synthetic day of GPU work three times on the local cluster: gpuctl's queue design, then
two baselines (plain Kueue defaults; the earlier gpuctl's ResourceQuota + PriorityClass model), and
print what users wait for and what the GPUs do.

    hack/cluster/up.sh                    # a local cluster (KWOK fake GPU nodes, real Kueue)
    python bench/trace.py --kubeconfig <run>/kubeconfig [--day-seconds 480] [--seed 7]
                          [--only gpuctl|baseline|earlier ...] [--grace-seconds 1] [--any-pool] [--json]
                          [--features off,any-pool,defrag,both] [--estimate-slack 3] [--nudge-kueue-stops]
    python bench/trace.py --offline 1-40  # no cluster: the bound and the offline models of 40 days
    python bench/trace.py --day idle|serving [--seed 7] [--json]
                          # models, no cluster: issue 40's day of idle notebooks and waiting training,
                          # with and without the idle policy (bench/trace_idle.py; docs/utilisation.md);
                          # issue 44's day of services on a daily curve beside training, fixed (sized
                          # for the peak) against autoscaled (bench/trace_serving.py; docs/serving.md)
    python bench/trace.py --kubeconfig <run>/kubeconfig --day gangs|slices [--day-seconds 480] [--seed 7]
                          # issue 31's day of multi-node jobs, issue 32's day of GPU slices
                          # (bench/trace_days.py, bench/trace_days_replay.py; docs/queueing.md)

The day (3 teams with quotas 12/8/8 GPUs on the 28 GPUs of examples/pools.yaml; 1/2/4/8-GPU training
jobs with heavy-tailed, lognormal runtimes; two inference Deployments; notebooks; low/medium/high
priorities; each team busiest at a different time of day) is compressed into --day-seconds: KWOK ends
a training pod after its GPUCTL_FAKE_RUNTIME, and the bench deletes inference and notebooks when their
time is up. The same trace (same seed) runs in both designs:

- gpuctl: gpuctl's pools and quotas (docs/queueing.md): one ClusterQueue per team in the cohort
  `gpuctl`, the team budget as a guarantee, idle GPUs lent, Topology Aware Scheduling per node.
- baseline: Kueue defaults: one ClusterQueue per team, nominal quota per pool (its quota split as an
  admin would: 8/4/0, 4/2/2, 4/2/2 GPUs of training/inference/dev), no cohort, no preemption, no TAS.
- earlier: the earlier gpuctl (shared/reference/gpuctl-upstream.md): Jobs, Deployments and
  StatefulSets created running (no Kueue), the pool by nodeSelector, PriorityClasses
  gpuctl-high/medium/low (1000000 / 500000 preempting, 100 never preempting: kube-scheduler preempts
  across teams), a ResourceQuota per team namespace with the team's GPU quota. The quota uses the key
  Kubernetes enforces, `requests.nvidia.com/gpu`; that tool wrote `nvidia.com/gpu`, which the API
  server accepts and never enforces (pods/quota evaluator), i.e. no quota at all: not copied.
  Kubernetes' controller backoffs are not compressed with the day (the Job controller retries a pod
  the ResourceQuota refused after 1 s doubling to 60 s, a failed pod after 10 s doubling; 60 s is 3
  hours of the day): the "quota allowed it" rows measure what that latency costs, for every design.

Every design's pods get terminationGracePeriodSeconds --grace-seconds (default 1 s; Kubernetes'
default 30 s is 90 minutes of the day, uncompressed, taken by each preempted or deleted pod).

Printed per design (a "day" is the submission window; jobs still waiting at the end count with their
wait so far), as issue 15 defines them:
- utilisation: allocated GPU-hours / capacity GPU-hours, i.e. GPU-seconds of pods bound to a node and
  not finished / (cluster GPUs x day); per pool too, with the share of the pool's GPU-time left idle
  while a waiting job of that pool would have fitted in it (one node per pod, whatever its team's
  quota): what a queue design could still have used
- p50/p99 wait of jobs within their team's quota "after capacity frees": the seconds a job waited while
  (a) its team's usage plus the job fits the team's quota and (b) its pool had room for every pod of
  it, one node per pod, counting free GPUs and GPUs held by other teams' work beyond their quota (what
  a guarantee may reclaim). Time spent waiting while teams within their quotas fill the pool is not
  counted: a guarantee cannot make room that does not exist. Also printed: the same jobs' wait from
  submission (jobs within quota when submitted), and p50/p99 wait of all jobs from submission
  (compressed seconds, and the same in real-day minutes)
- fragmentation-pending pods: admitted by Kueue, then Unschedulable in kube-scheduler for 5 s or more
  (not counting a pod whose node still holds a terminating pod: it waits for the grace period);
  earlier gpuctl (no admission): Unschedulable for 5 s while its pool had enough GPUs free, spread
  over nodes none of which held it
- quota violations: jobs that waited more than 60 compressed seconds as above (within quota, room in
  the pool) while another team used more than its quota
- preemptions (Workload evictions with reason Preempted; earlier gpuctl: kube-scheduler's Preempted
  events on victim pods), and Jobs Failed (without Kueue a preempted pod counts against backoffLimit)
- diagnostics: per pool, idle GPU-time while any job of the pool waited; the cluster's idle GPU-time
  while a waiting job fitted on free GPUs and its design's quota let it start (only latency held it:
  Kueue not yet admitted / no pod created yet, or a Pending pod kube-scheduler had not yet bound);
  GPU-time held by terminating pods. "Waiting" includes jobs requeued after a preemption.

Printed once, when the pools exist: the upper bound any scheduler could reach on this trace and these
pools (utilisation_bound: a maximum flow that lets GPUs be divided, jobs be preempted and resumed for
free, ignores node boundaries and latency), and with each lead the most any design could lead that
baseline by: whether issue 15's +15 points is reachable on this trace at all; and what a clairvoyant
scheduler with the real constraints but no quotas or latency reaches (offline_utilisation, in
submission order and largest job first), and the same packing under the Kueue-defaults baseline's
quota (per team and pool, no borrowing, priority order): on seed 7 these two give the replays' gpuctl
and Kueue-defaults utilisation to 0.1 point.

--offline SEEDS prints those figures for many days (seeds) in milliseconds, without a cluster: the
trace generator's days differ, and one day's lead says little about the next; pick the days to replay
before replaying them.

--any-pool is a what-if, not the headline: training jobs of up to 4 GPUs name no pool (see unpin()).

Issue 23, in gpuctl's design: every training job and notebook declares job.maxRuntime (declared_runtime),
and for each job first seen waiting in Kueue's queue the bench records the estimate `gpuctl describe job`
would show then (gpuctl.domain.estimate on a Snapshot of the replay's own lists, with the product's step
slack and with --estimate-slack) and its actual admission: p50/p90 |actual - bound|, bounded vs not, and
the jobs admitted after their "at the latest", each with the later arrivals Kueue admitted first in its
pool (estimate_summary). It also compares each team's use by its Workloads holding quota with Kueue's
count (its ClusterQueue's), and lists the Jobs Kueue was slow to stop (docs/queueing.md, Known limits);
--nudge-kueue-stops is a what-if on those.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import importlib
import itertools
import json
import math
import random
import statistics
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl.builders import build  # noqa: E402
from gpuctl.cli.main import main as gpuctl_main  # noqa: E402
from gpuctl.cluster import ApiError, Cluster, path  # noqa: E402
from gpuctl.constants import (  # noqa: E402
    COHORT_NAME,
    DEFRAG_MOVES_PER_HOUR,
    DEFRAG_WINDOW_SECONDS,
    ESTIMATE_STEP_SLACK_SECONDS,
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    MANAGED_BY_VALUE,
    NAMESPACE_MARKER_VALUE,
    SET_ASIDE_BOUND_LEAD_SECONDS,
    SET_ASIDE_COOLDOWN_SECONDS,
    SET_ASIDE_IDLE_SECONDS,
    SET_ASIDE_MAX_SECONDS,
    STARTS_BY_ANNOTATION,
    TAS_UNCONSTRAINED,
    Labels,
)
from gpuctl.domain.estimate import estimate  # noqa: E402
from gpuctl.domain.explain import Snapshot, workload_demand  # noqa: E402
from gpuctl.domain.gpus import pod_gpus, pod_holds_gpus, quantity_gpus, workload_gpus  # noqa: E402
from gpuctl.domain.objects import annotations, condition, labels, meta, parse_time  # noqa: E402
from gpuctl.domain.objects import name as name_of  # noqa: E402
from gpuctl.domain.objects import namespace as namespace_of  # noqa: E402
from gpuctl.domain.teams import team_usage  # noqa: E402
from gpuctl.domain.workload import (  # noqa: E402
    HOLDING_QUOTA,
    IN_QUEUE,
    WorkloadState,
    priority_value,
    reserved_pools,
    workload_state,
)
from gpuctl.server.defrag import Defragmenter, list_source  # noqa: E402
from gpuctl.server.setaside import SetAside  # noqa: E402
from gpuctl.spec import load_text  # noqa: E402
from queues import pool_toleration  # noqa: E402

TEAMS = {"a": 12, "b": 8, "c": 8}
# Baseline: the same quotas split per pool (training, inference, dev); Kueue's defaults otherwise.
SPLIT = {"a": (8, 4, 0), "b": (4, 2, 2), "c": (4, 2, 2)}
POOLS = ("training-pool", "inference-pool", "dev-pool")
ANY_POOL = ""  # Item.pool of a job that names no pool (the --any-pool what-if)
CAPACITY = 28
REAL_DAY = 86400.0
WAIT_LIMIT = 60.0  # compressed seconds
# A pod Unschedulable this long after admission is stuck (shorter: its preempted predecessor is
# still terminating on the node).
STUCK_SECONDS = 5.0
# Pods' terminationGracePeriodSeconds in every design. Kubernetes' default is 30 s, which KWOK (like a
# kubelet) takes for a deleted pod, uncompressed: 30 s here is 90 minutes of the day. 30 s of a real
# day compressed is 0.2 s; 1 s is the shortest grace (0 deletes at once).
GRACE_SECONDS = 1
TARGET_LEAD = 15.0  # issue 15: utilisation >= baseline + 15 points
DESIGNS = ("gpuctl", "baseline", "earlier")
TITLES = {"gpuctl": "gpuctl", "baseline": "Kueue defaults", "earlier": "earlier gpuctl"}
# The earlier gpuctl's PriorityClasses (value, preemptionPolicy), created by its `create`.
PRIORITY_CLASSES = {
    "high": (1000000, "PreemptLowerPriority"),
    "medium": (500000, "PreemptLowerPriority"),
    "low": (100, "Never"),
}
PRIORITY_CLASS_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
TRACE_MANAGED = {Labels.MANAGED_BY: "gpuctl-trace"}
# The earlier gpuctl's ResourceQuota key for GPUs, as Kubernetes enforces it for an extended resource
# (the quota evaluator counts only `requests.<name>`; the bare `nvidia.com/gpu` key that tool wrote is
# accepted by the API server and never enforced).
QUOTA_GPU_KEY = f"requests.{GPU_RESOURCE}"
GPUCTL_MANAGED = f"{Labels.MANAGED_BY}={MANAGED_BY_VALUE}"  # gpuctl's own objects (its team queues)
NUDGE = "gpuctl-trace/nudge"  # annotation the --nudge-controllers replay touches
KUEUE_STOPPING = "kueue.x-k8s.io/stopping"  # Kueue's mark on a Job it is stopping (job_controller.go)


@dataclass
class Item:
    t: float  # submission, seconds into the compressed day
    team: str
    kind: str  # training | inference | notebook
    name: str
    gpus: int
    pods: int
    pool: str
    priority: str
    runtime: float  # compressed seconds
    share: str | None = None  # resources.gpu-share: one slice per pod (bench/trace_days.py's slice day)


def make_trace(seed: int, day: float) -> list[Item]:
    """The synthetic day. Runtimes are drawn in real minutes and compressed by day / 24 h."""
    rng = random.Random(seed)
    k = day / REAL_DAY
    items: list[Item] = []
    # Each team's busiest hour (a: morning, b: afternoon, c: evening bursts) and jobs per day.
    peaks = {"a": (9, 34), "b": (15, 24), "c": (20, 18)}
    for team, (peak_h, per_day) in peaks.items():
        for n in range(per_day):
            hour = (rng.gauss(peak_h, 3.5)) % 24
            t = hour * 3600 * k
            big = team == "a"
            sizes, weights = ([1, 2, 4, 8], [0.25, 0.3, 0.25, 0.2]) if big else ([1, 2, 4], [0.4, 0.35, 0.25])
            gpus = rng.choices(sizes, weights)[0]
            pool = "training-pool" if rng.random() < 0.8 or gpus == 8 else "inference-pool"
            if pool == "inference-pool":
                gpus = min(gpus, 4)
            pods = 2 if gpus >= 4 and rng.random() < 0.2 else 1
            minutes = min(rng.lognormvariate(math.log(90), 1.0), 10 * 60)  # median 1.5 h, heavy tail
            prio = rng.choices(["low", "medium", "high"], [0.3, 0.55, 0.15])[0]
            items.append(
                Item(t, team, "training", f"tr-{team}-{n}", gpus, pods, pool, prio, minutes * 60 * k)
            )
        # Notebooks: a few per team during working hours, 1 GPU in dev-pool, 2-4 hours.
        for i in range(3):
            t = rng.uniform(8, 17) * 3600 * k
            items.append(
                Item(
                    t,
                    team,
                    "notebook",
                    f"nb-{team}-{i}",
                    1,
                    1,
                    "dev-pool",
                    "medium",
                    rng.uniform(2, 4) * 3600 * k,
                )
            )
    # Inference: two services all day (2 GPUs each on the A10 pool), high priority.
    for team in ("a", "b"):
        items.append(Item(0.5, team, "inference", f"serve-{team}", 2, 1, "inference-pool", "high", day))
    return sorted(items, key=lambda i: i.t)


# A user declares a job's maxRuntime with room: its run time rounded up to the next quarter hour of the
# real day, plus a quarter hour (15-30 minutes above it), compressed with the day like the run time;
# plus the local cluster's latencies, which are not compressed: Kueue counts maxRuntime from admission,
# KWOK runs the pod from when it is Running, and Kueue sees the Job finish seconds after (1-10 s on this
# loaded 2-core machine; without the allowance Kueue stopped 30 of 76 jobs of a replay before their end).
DECLARE_ROUND_SECONDS = 900.0
DECLARE_LATENCY_SECONDS = 10


def fake_runtime(item: Item) -> int:
    """The seconds KWOK runs a training pod (GPUCTL_FAKE_RUNTIME): the compressed run time, at least 1."""
    return round(max(item.runtime, 1))


def declared_runtime(item: Item, day: float) -> int | None:
    """The job.maxRuntime (compressed seconds) the trace's user declares; None for inference (a
    Deployment's maxRuntime caps each replica: a rolling restart, not an end) and for runs longer than
    the day (nothing to declare)."""
    if item.kind == "inference":
        return None
    k = day / REAL_DAY
    real = item.runtime / k
    declared = (math.ceil(real / DECLARE_ROUND_SECONDS) + 1) * DECLARE_ROUND_SECONDS * k
    return max(math.ceil(declared), fake_runtime(item) + 2) + DECLARE_LATENCY_SECONDS


def spec_yaml(item: Item, ns: str, day: float | None = None) -> str:
    """The job's YAML; with `day`, its maxRuntime as declared_runtime (issue 23's estimate)."""
    declared = declared_runtime(item, day) if day else None
    limit = f", maxRuntime: {declared}" if declared else ""
    job = f"job: {{name: {item.name}, namespace: {ns}, priority: {item.priority}{limit}}}"
    pool = f"[{', '.join(sorted(POOLS))}]" if item.pool == ANY_POOL else item.pool
    res = f"resources: {{pool: {pool}, gpu: {item.gpus}, cpu: 2, memory: 8Gi}}"
    if item.kind == "training":
        env = f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {fake_runtime(item)}s}}]}}"
        return f"kind: training\n{job}\n{env}\n{res}\n"
    if item.kind == "notebook":
        return f"kind: notebook\n{job}\nenvironment: {{image: jupyter}}\nservice: {{port: 8888}}\n{res}\n"
    return (
        f"kind: inference\n{job}\nenvironment: {{image: vllm}}\nservice: {{replicas: 1, port: 8000}}\n{res}\n"
    )


def manifest(
    item: Item,
    ns: str,
    design: str = "gpuctl",
    *,
    grace: int | None = GRACE_SECONDS,
    day: float | None = None,
) -> dict:
    """The object gpuctl builds for the item; for the baseline without the topology request; for the
    earlier gpuctl as that tool built it (earlier_manifest). `grace`: the pods'
    terminationGracePeriodSeconds (None: Kubernetes' default 30 s), the same in every design. `day`:
    declare maxRuntime (declared_runtime; gpuctl's design only: the others have no such field)."""
    (doc,) = load_text(spec_yaml(item, ns, day if design == "gpuctl" else None), f"trace:{item.name}")
    obj = build(doc.spec, ns)[0]
    if item.kind == "training" and item.pods > 1:
        obj["spec"]["parallelism"] = obj["spec"]["completions"] = item.pods
    if (
        design != "gpuctl"
    ):  # the baseline's flavors have no topology: the annotation would make pods inadmissible
        obj["spec"]["template"]["metadata"].get("annotations", {}).pop(TAS_UNCONSTRAINED, None)
    if grace is not None:
        obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    if design == "earlier":
        earlier_manifest(obj, item)
    return obj


def earlier_manifest(obj: dict, item: Item) -> None:
    """Turn gpuctl's object into what the earlier gpuctl created (shared/reference/gpuctl-upstream.md
    sections 4.1-4.4): not suspended, no Kueue labels or annotations, the pool by nodeSelector, the pod
    priority by PriorityClass gpuctl-<priority>, a training Job with backoffLimit 3 and
    ttlSecondsAfterFinished 86400, requests = limits. Its bugs are not copied (the gpuType selector
    that never matches a node: the trace sets no GPU type)."""
    for m in (obj["metadata"], obj["spec"]["template"]["metadata"]):
        for k in (Labels.KUEUE_QUEUE, Labels.KUEUE_PRIORITY):
            m.get("labels", {}).pop(k, None)
        m.get("annotations", {}).pop(TAS_UNCONSTRAINED, None)
    obj["spec"].pop("suspend", None)
    pod = obj["spec"]["template"]["spec"]
    pod.pop("schedulingGates", None)
    pod["priorityClassName"] = f"gpuctl-{item.priority}"
    if item.kind == "training":
        obj["spec"]["backoffLimit"] = 3
        obj["spec"]["ttlSecondsAfterFinished"] = 86400


def unpin(trace: list[Item]) -> list[Item]:
    """Any-pool jobs (--any-pool, feature `any-pool`): training jobs of up to 4 GPUs per pod (one node of
    any GPU pool holds them) say `pool: [dev-pool, inference-pool, training-pool]` (gpuctl's YAML since
    issue 23; the builders write `runwhere.ai/pool In [...]` node affinity and no pool selector), so
    Kueue tries the team queue's pool flavors in order and takes the first with room."""
    return [replace(i, pool=ANY_POOL) if i.kind == "training" and i.gpus <= 4 else i for i in trace]


# ----------------------------------------------------------------------------- upper bound
def _max_flow(n: int, edges: list[tuple[int, int, int]], s: int, t: int) -> int:
    """Dinic's maximum flow over integer capacities (nodes 0..n-1)."""
    graph: list[list[list[int]]] = [[] for _ in range(n)]  # [to, capacity left, index of the reverse]
    for u, v, c in edges:
        graph[u].append([v, c, len(graph[v])])
        graph[v].append([u, 0, len(graph[u]) - 1])

    def push(u: int, limit: int, level: list[int], nxt: list[int]) -> int:
        if u == t:
            return limit
        while nxt[u] < len(graph[u]):
            edge = graph[u][nxt[u]]
            v, c, back = edge
            if c > 0 and level[v] == level[u] + 1:
                got = push(v, min(limit, c), level, nxt)
                if got:
                    edge[1] -= got
                    graph[v][back][1] += got
                    return got
            nxt[u] += 1
        return 0

    flow = 0
    while True:
        level = [-1] * n
        level[s] = 0
        frontier = [s]
        for u in frontier:  # breadth first: the list grows while it is walked
            for v, c, _ in graph[u]:
                if c > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    frontier.append(v)
        if level[t] < 0:
            return flow
        nxt = [0] * n
        while got := push(s, sum(c for _, c, _ in graph[s]), level, nxt):
            flow += got


def utilisation_bound(trace: Iterable[Item], day: float, pool_gpus: Mapping[str, int]) -> float:
    """The highest utilisation (allocated / capacity over the day) ANY scheduler could reach on this
    trace with these pools: a maximum flow of GPU-milliseconds from jobs into (pool, time interval)
    slots, where a job may use at most its GPUs at a time, only after its submission, for at most its
    runtime of work, in its own pool (any pool for ANY_POOL), and a pool at most its GPUs. It relaxes
    everything real: GPUs divisible, jobs preemptible and resumable for free, no node boundaries, no
    latency; so no queue design can beat it."""
    items = [i for i in trace if i.pool == ANY_POOL or i.pool in pool_gpus]
    end = round(day * 1000)
    cuts = sorted({0, end, *(min(round(i.t * 1000), end) for i in items)})
    spans = list(itertools.pairwise(cuts))
    pools = list(pool_gpus)
    s, t = 0, 1
    slot = {(p, k): 2 + a * len(spans) + k for a, p in enumerate(pools) for k in range(len(spans))}
    n = 2 + len(slot)
    edges = [(slot[p, k], t, pool_gpus[p] * (b - a)) for p in pools for k, (a, b) in enumerate(spans)]
    for it in items:
        w, job = it.gpus * it.pods, n
        n += 1
        edges.append((s, job, w * round(it.runtime * 1000)))
        for k, (a, b) in enumerate(spans):
            if a < round(it.t * 1000):
                continue
            if it.pool != ANY_POOL:
                edges.append((job, slot[it.pool, k], w * (b - a)))
                continue
            edges.append((job, n, w * (b - a)))  # the job's rate in this span, shared by the pools
            edges.extend((n, slot[p, k], w * (b - a)) for p in pools)
            n += 1
    capacity = sum(pool_gpus.values()) * end
    return _max_flow(n, edges, s, t) / capacity if capacity else 0.0


def offline_utilisation(
    trace: Iterable[Item],
    day: float,
    nodes: Mapping[str, tuple[str, int]],
    *,
    largest_first: bool,
    caps: Mapping[tuple[str, str], int] | None = None,
) -> float:
    """What a clairvoyant scheduler reaches without quotas or latency but with the real constraints
    (whole pods on one node each, placed by `place`, never preempted): whenever a job arrives or ends,
    start every waiting job that fits, in submission order or largest (GPUs) first, backfilling the rest.
    Not a bound (another order may do better; utilisation_bound is the bound): a reference for what
    packing alone can give on this trace.

    `caps` ((team, pool) -> GPUs a team may hold in the pool) models the Kueue-defaults baseline instead:
    each team's per-pool nominal quota and no borrowing; waiting jobs then go by priority, then
    submission (a ClusterQueue's order; BestEffortFIFO: one that cannot start lets the next try)."""
    room = {n: g for n, (pool, g) in nodes.items() if pool in POOLS}
    held: dict[tuple[str, str], int] = {}
    pools = {pool: [n for n, (p, _) in nodes.items() if p == pool] for pool in POOLS}
    capacity = sum(room.values()) * day
    arrivals = sorted(trace, key=lambda i: i.t)
    # (end, tiebreak, nodes, GPUs per pod, (team, pool))
    ends: list[tuple[float, int, list[str], int, tuple[str, str]]] = []
    waiting: list[Item] = []
    used = busy = now = 0.0
    seq = itertools.count()
    while now < day:
        upcoming = [arrivals[0].t] if arrivals else []
        now_next = min([*upcoming, *(e[0] for e in ends[:1]), day])
        busy += used * (now_next - now)
        now = now_next
        while ends and ends[0][0] <= now:
            _, _, where, gpus, team_pool = heapq.heappop(ends)
            for n in where:
                room[n] += gpus
            used -= gpus * len(where)
            held[team_pool] -= gpus * len(where)
        while arrivals and arrivals[0].t <= now:
            waiting.append(arrivals.pop(0))
        if largest_first:
            waiting.sort(key=lambda i: (-i.gpus * i.pods, i.t))
        elif caps is not None:
            waiting.sort(key=lambda i: (-PRIORITY_CLASSES[i.priority][0], i.t))
        for it in list(waiting):
            team_pool = (it.team, it.pool)
            if caps is not None and held.get(team_pool, 0) + it.gpus * it.pods > caps.get(team_pool, 0):
                continue
            # One pool holds every pod of a job (Kueue assigns a pod set one flavor); an any-pool job
            # takes the first pool, in the team queue's order, that holds it.
            groups = [pools[p] for p in sorted(POOLS)] if it.pool == ANY_POOL else [pools.get(it.pool, [])]
            where = next(
                (
                    got
                    for g in groups
                    if (got := place(it.pods, it.gpus, {n: room[n] for n in g})) is not None
                ),
                None,
            )
            if where is None:
                continue
            waiting.remove(it)
            for n in where:
                room[n] -= it.gpus
            used += it.gpus * it.pods
            held[team_pool] = held.get(team_pool, 0) + it.gpus * it.pods
            heapq.heappush(ends, (now + it.runtime, next(seq), where, it.gpus, team_pool))
    return busy / capacity if capacity else 0.0


def offered_load(trace: Iterable[Item], day: float, capacity: int) -> float:
    """GPU-time the day's jobs ask for within the day, as a share of `capacity` GPUs over the day."""
    return sum(i.gpus * i.pods * min(i.runtime, day - i.t) for i in trace) / (capacity * day)


def baseline_caps() -> dict[tuple[str, str], int]:
    """The Kueue-defaults baseline's quota as offline_utilisation's caps: each team's GPUs per pool."""
    return {
        (team, pool): gpus for team, split in SPLIT.items() for pool, gpus in zip(POOLS, split, strict=True)
    }


def local_nodes() -> dict[str, tuple[str, int]]:
    """node -> (pool, GPUs) of the local cluster once examples/pools.yaml has labelled it, read from
    hack/cluster/nodes.yaml and examples/pools.yaml: what --offline uses instead of a cluster."""
    pools = {
        node: doc["pool"]["name"]
        for doc in yaml.safe_load_all((ROOT / "examples" / "pools.yaml").read_text())
        for node in doc.get("nodes") or {}
    }
    items = yaml.safe_load((ROOT / "hack" / "cluster" / "nodes.yaml").read_text())["items"]
    return {
        n["metadata"]["name"]: (
            pools.get(n["metadata"]["name"], ""),
            quantity_gpus(n["status"]["allocatable"].get(GPU_RESOURCE, 0)),
        )
        for n in items
    }


@dataclass
class OfflineDay:
    seed: int
    offered: float
    bound: float
    fifo: float  # offline packing, submission order, no quotas
    largest: float  # offline packing, largest first, no quotas
    baseline: float  # offline packing under the Kueue-defaults baseline's caps

    @property
    def lead(self) -> float:
        """What the quota-free packing leads the baseline model by: on seed 7 the replays' lead."""
        return self.fifo - self.baseline


def offline_day(seed: int, day: float, nodes: Mapping[str, tuple[str, int]], *, any_pool: bool) -> OfflineDay:
    trace = make_trace(seed, day)
    if any_pool:
        trace = unpin(trace)
    return OfflineDay(
        seed,
        offered=offered_load(trace, day, sum(pool_gpus(nodes).values())),
        bound=utilisation_bound(trace, day, pool_gpus(nodes)),
        fifo=offline_utilisation(trace, day, nodes, largest_first=False),
        largest=offline_utilisation(trace, day, nodes, largest_first=True),
        baseline=offline_utilisation(trace, day, nodes, largest_first=False, caps=baseline_caps()),
    )


def seeds_arg(text: str) -> list[int]:
    """`1-40`, `1,3,7` or a mix."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def print_offline(days: list[OfflineDay]) -> None:
    head = (
        "seed",
        "offered",
        "upper bound",
        "packing",
        "largest first",
        "Kueue-defaults model",
        "lead",
        "most",
    )
    rows = [
        (
            str(d.seed),
            *(f"{100 * v:.1f} %" for v in (d.offered, d.bound, d.fifo, d.largest, d.baseline)),
            f"{100 * d.lead:+.1f}",
            f"{100 * (d.bound - d.baseline):+.1f}",
        )
        for d in days
    ]
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    leads = sorted(100 * d.lead for d in days)
    met = sum(v >= TARGET_LEAD for v in leads)
    print(
        "\nlead of the quota-free packing over the Kueue-defaults model: "
        f"median {statistics.median(leads):+.1f}, range {leads[0]:+.1f} .. {leads[-1]:+.1f}; "
        f">= +{TARGET_LEAD:.0f} on {met} of {len(days)} days"
    )


# ----------------------------------------------------------------------------- cluster setup
def cli(kubeconfig: str, *args: str) -> None:
    rc = gpuctl_main([*args, "--kubeconfig", kubeconfig])
    if rc != 0:
        raise SystemExit(f"gpuctl {' '.join(args)} failed ({rc})")


def _delete_all(kube: Cluster, kind: str, selector: str | None = None) -> None:
    for obj in kube.list(path(kind), label_selector=selector):
        name = obj["metadata"]["name"]
        with contextlib.suppress(ApiError):
            if obj["metadata"].get("finalizers"):
                kube.merge_patch(path(kind, name), {"metadata": {"finalizers": None}})
            kube.delete(path(kind, name))


def reset(kube: Cluster, namespaces: list[str]) -> None:
    for ns in namespaces:
        with contextlib.suppress(ApiError):
            kube.delete(path("Namespace", ns))
    deadline = time.monotonic() + 180
    while any(kube.get_or_none(path("Namespace", ns)) for ns in namespaces) and time.monotonic() < deadline:
        time.sleep(1)
    # Pods deleted before the day (by an earlier run or test) keep their GPUs on the node for their
    # grace period (KWOK, like a kubelet, takes it: 30 s by default) while Kueue no longer counts them;
    # a day started meanwhile sees its admitted pods refused by kube-scheduler ("Insufficient
    # nvidia.com/gpu"), i.e. fragmentation that is not the design's.
    while time.monotonic() < deadline and any(
        pod_gpus(p) and pod_holds_gpus(p) and meta(p).get("deletionTimestamp") for p in kube.list(path("Pod"))
    ):
        time.sleep(1)
    managed = "app.kubernetes.io/managed-by in (gpuctl,gpuctl-trace)"
    for kind in ("ClusterQueue", "Cohort", "ResourceFlavor", "Topology"):
        _delete_all(kube, kind, managed)
    # gpuctl's own classes too (`gpuctl adopt` creates them): the earlier design creates its own.
    for pc in kube.list(PRIORITY_CLASS_PATH, label_selector=managed):
        with contextlib.suppress(ApiError):
            kube.delete(f"{PRIORITY_CLASS_PATH}/{pc['metadata']['name']}")
    for node in kube.list(path("Node")):
        labels = node["metadata"].get("labels", {})
        drop = {k: None for k in (Labels.POOL, Labels.GPU_TYPE) if k in labels}
        if drop:
            kube.merge_patch(path("Node", node["metadata"]["name"]), {"metadata": {"labels": drop}})


def setup_gpuctl(kube: Cluster, kubeconfig: str, ns: dict[str, str], tmp: Path) -> None:
    cli(kubeconfig, "create", "-f", str(ROOT / "examples" / "pools.yaml"))
    q = tmp / "quota.yaml"
    q.write_text(
        "kind: quota\nquota: {name: trace}\nnamespace:\n"
        + "".join(f"  {ns[t]}: {{gpu: {g}}}\n" for t, g in TEAMS.items())
    )
    cli(kubeconfig, "create", "-f", str(q))


def setup_baseline(kube: Cluster, kubeconfig: str, ns: dict[str, str], tmp: Path) -> None:
    """Kueue defaults: per-team ClusterQueue, per-pool nominal quota, no cohort, no preemption."""
    cli(kubeconfig, "create", "-f", str(ROOT / "examples" / "pools.yaml"))  # node labels, priorities
    baseline_queues(kube, ns, {team: dict(zip(POOLS, split, strict=True)) for team, split in SPLIT.items()})


def baseline_queues(kube: Cluster, ns: Mapping[str, str], quotas: Mapping[str, Mapping[str, int]]) -> None:
    """Plain Kueue as an admin configures it on gpuctl's labelled and tainted pools: a ResourceFlavor
    `base-<pool>` per pool, and per team a namespace, a ClusterQueue holding `quotas[team][pool]` GPUs of
    each pool as nominal quota (no cohort: no borrowing; no preemption; no topology) and its LocalQueue."""
    managed = TRACE_MANAGED
    api = "kueue.x-k8s.io/v1beta2"
    for pool in sorted({p for q in quotas.values() for p in q}):
        kube.apply(
            {
                "apiVersion": api,
                "kind": "ResourceFlavor",
                "metadata": {"name": f"base-{pool}", "labels": managed},
                # Tolerating the pool taint gpuctl's pools put on their nodes (issue 26): Kueue adds a
                # flavor's tolerations to the pods it admits, as an admin of plain Kueue would configure
                # on tainted nodes. Without it no baseline pod ever binds (0 % utilisation).
                "spec": {"nodeLabels": {Labels.POOL: pool}, "tolerations": [pool_toleration(pool)]},
            }
        )
    for team, split in quotas.items():
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns[team]}})
        kube.apply(
            {
                "apiVersion": api,
                "kind": "ClusterQueue",
                "metadata": {"name": f"base-{ns[team]}", "labels": managed},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns[team]}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": f"base-{pool}",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "1000"},
                                        {"name": "memory", "nominalQuota": "10Ti"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": str(g)},
                                    ],
                                }
                                # In name order, as gpuctl's queues list pools: a job naming no
                                # pool (--any-pool) tries them in the same order in both designs.
                                for pool, g in sorted(split.items())
                            ],
                        }
                    ],
                },
            }
        )
        kube.apply(
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": "default", "namespace": ns[team], "labels": managed},
                "spec": {"clusterQueue": f"base-{ns[team]}"},
            }
        )


def setup_earlier(kube: Cluster, kubeconfig: str, ns: dict[str, str], tmp: Path) -> None:
    """The earlier gpuctl (shared/reference/gpuctl-upstream.md 4.4-4.5): pools are node labels, the
    PriorityClasses gpuctl-high/medium/low, and per team namespace (labelled runwhere.ai/namespace=true)
    a ResourceQuota `<quota>-<ns>` holding the team's GPU quota. No Kueue objects for these namespaces
    (no LocalQueue, no queue label: Kueue leaves them alone)."""
    # Its pools are node labels only (`kubectl label`): no taint, no Kueue object (gpuctl's pools taint
    # their nodes, so that design's pods, which tolerate nothing, would never start there).
    for doc in yaml.safe_load_all((ROOT / "examples" / "pools.yaml").read_text()):
        for node, spec in doc["nodes"].items():
            pool_labels = {Labels.POOL: doc["pool"]["name"], Labels.GPU_TYPE: spec.get("gpu-type") or None}
            kube.merge_patch(path("Node", node), {"metadata": {"labels": pool_labels}})
    for prio, (value, policy) in PRIORITY_CLASSES.items():
        # Created or replaced, as the earlier client does on every `create` (a run of it may have left
        # them, unlabelled).
        with contextlib.suppress(ApiError):
            kube.delete(f"{PRIORITY_CLASS_PATH}/gpuctl-{prio}")
        kube.request(
            "POST",
            PRIORITY_CLASS_PATH,
            body={
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"gpuctl-{prio}", "labels": TRACE_MANAGED},
                "value": value,
                "globalDefault": False,
                "preemptionPolicy": policy,
            },
        )
    for team, gpus in TEAMS.items():
        n = ns[team]
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": n, "labels": {Labels.NAMESPACE: NAMESPACE_MARKER_VALUE}},
            }
        )
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {
                    "name": f"trace-{n}",
                    "namespace": n,
                    "labels": {Labels.QUOTA: "trace", Labels.NAMESPACE: n},
                },
                "spec": {"hard": {QUOTA_GPU_KEY: str(gpus)}},
            }
        )


SETUP = {"gpuctl": setup_gpuctl, "baseline": setup_baseline, "earlier": setup_earlier}


# ----------------------------------------------------------------------------- replay and measure
@dataclass
class JobTrack:
    item: Item
    submitted: float
    within_quota: bool  # when submitted
    admitted: float | None = None
    deleted: bool = False
    ever_within: bool = False  # within its team's quota at some moment while waiting
    entitled: float = 0.0  # seconds waited while within quota and its pool had room for it
    blocked: float = 0.0  # of those, seconds while another team was over its quota
    # Issue 23's estimate, computed once, when first seen waiting in Kueue's queue (epoch seconds):
    # when, the bound with the product's step slack and with the bench's (None: no bound), the basis.
    est_at: float | None = None
    est_by: float | None = None
    est_by_bench: float | None = None
    est_basis: str = ""
    est_now: bool = False  # "starts now (Kueue is admitting it)": no "at the latest" claim
    promised: bool = False  # est_by is the bound serve recorded on its Workload (runwhere.ai/starts-by)
    est_kueue: str = ""  # Kueue's word on it when estimated (its Workload's QuotaReserved message)
    last_kueue: str = ""  # and the last before its first admission
    kueue_said: list[str] = field(default_factory=list)  # Kueue's distinct messages while entitled


@dataclass
class Result:
    design: str
    util: float = 0.0
    util_pool: dict[str, float] = field(default_factory=dict)
    fillable_pool: dict[str, float] = field(default_factory=dict)  # idle while a fitting job waited
    waits_quota: list[float] = field(default_factory=list)  # after capacity frees (issue 15)
    waits_quota_submitted: list[float] = field(default_factory=list)  # from submission
    waits_all: list[float] = field(default_factory=list)
    frag_pods: int = 0
    violations: int = 0
    preemptions: int = 0
    jobs: int = 0
    never: int = 0
    stuck: list[str] = field(default_factory=list)  # the stuck pods and the scheduler's message
    # Idle GPU-time while any job of the pool waited (fitting or not), per pool.
    anywait_pool: dict[str, float] = field(default_factory=dict)
    # Idle GPU-time (share of the cluster's) while a waiting job fitted on free GPUs AND its design's
    # quota let it start: only latency keeps it waiting. Split by what it waited for: "no pod yet"
    # (Kueue not yet admitted it / the Job, ReplicaSet or StatefulSet controller not yet created the
    # pod, e.g. in its uncompressed backoff after the ResourceQuota refused a pod or after a failed
    # pod) and "pod Pending" (the pod exists: kube-scheduler's backoff, a nominated node).
    lag: dict[str, float] = field(default_factory=dict)
    terminating: float = 0.0  # GPU-time held by terminating pods, share of capacity
    failed_jobs: int = 0  # Jobs Failed (backoffLimit exceeded: each preemption counts as a failure)
    nudges: int = 0  # controller objects touched (replay's nudge)
    lag_top: list[str] = field(default_factory=list)  # the jobs behind most of `lag`, and why
    title: str = ""  # the design and its features (--features), for the tables
    moves: int = 0  # jobs moved by defragmentation (gpuctl.server.defrag)
    reactivated: int = 0
    # Issue 23's estimate against what happened (see estimate_rows): one row per job estimated.
    estimates: list[dict[str, Any]] = field(default_factory=list)
    maxruntime_stops: int = 0  # Workloads Kueue deactivated at their maxRuntime
    quota_waits: list[str] = field(default_factory=list)  # the longest within-quota waits, and why
    count_gaps: dict[str, Any] = field(default_factory=dict)  # Kueue's vs the bench's count of a team
    # GPU-time (share of capacity) Kueue counted reserved for a team beyond its Workloads holding quota
    count_gap: float = 0.0
    slow_stops: list[dict[str, Any]] = field(default_factory=list)  # Jobs Kueue took long to stop
    stop_nudges: int = 0  # --nudge-kueue-stops: Jobs touched so that Kueue finishes stopping them
    # Every job: (name, pool, priority, submitted, admitted or None), seconds into the day.
    starts: list[tuple[str, str, str, float, float | None]] = field(default_factory=list)


def pct(v: list[float], p: float) -> float:
    if not v:
        return float("nan")
    s = sorted(v)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def fits(pods: int, gpus: int, room: Iterable[int]) -> bool:
    """Whether `pods` pods of `gpus` GPUs each fit, one node per pod, in nodes with this much room."""
    if gpus <= 0:
        return True
    return sum(max(r, 0) // gpus for r in room) >= pods


def place(pods: int, gpus: int, room: Mapping[str, int]) -> list[str] | None:
    """Nodes for `pods` pods of `gpus` GPUs, one node per pod, fullest node first (bin-packing, as
    Kueue's TAS places unconstrained pods); None if they do not all fit."""
    if gpus <= 0:
        return []
    left = dict(room)
    out: list[str] = []
    for _ in range(pods):
        fit = sorted((r, n) for n, r in left.items() if r >= gpus)
        if not fit:
            return None
        left[fit[0][1]] -= gpus
        out.append(fit[0][1])
    return out


def reclaimable(held: Iterable[tuple[int, float, int, str]], quota: int) -> set[str]:
    """The workloads a guarantee may take from a team beyond its quota, in Kueue's candidate order
    (lower priority first, then the most recently admitted; `preemption.CandidatesOrdering`), while
    the team stays beyond its quota (Kueue skips a borrower that no longer borrows).
    `held`: (priority, admitted at, GPUs, key) of each workload holding quota."""
    items = list(held)
    usage = sum(g for _, _, g, _ in items)
    out: set[str] = set()
    for _, _, g, key in sorted(items, key=lambda h: (h[0], -h[1])):
        if usage <= quota:
            break
        out.add(key)
        usage -= g
    return out


def pod_job(pod: Mapping[str, Any]) -> str:
    """The trace job a pod belongs to: its Job's name, else the `app` label gpuctl sets on service pods."""
    lbl = labels(pod)
    return lbl.get(Labels.BATCH_JOB_NAME) or lbl.get(Labels.JOB_NAME) or lbl.get(Labels.APP) or ""


def workload_job(wl: Mapping[str, Any], pods_by_name: Mapping[str, Mapping[str, Any]]) -> str:
    """The trace job a Workload belongs to: its Job or StatefulSet owner; a Workload owned by pods
    (a Deployment replica's, or a StatefulSet's once its pods exist, whose first owner is then a Pod)
    belongs to its pod's job."""
    owners = meta(wl).get("ownerReferences") or []
    for o in owners:
        if o.get("kind") in ("Job", "StatefulSet"):
            return o.get("name", "")
    for o in owners:
        if o.get("kind") == "Pod":
            pod = pods_by_name.get(o.get("name", ""))
            if pod and pod_job(pod):
                return pod_job(pod)
            return "-".join(o.get("name", "").split("-")[:-2])  # a Deployment pod already gone
    return ""


@dataclass
class PodCount:
    """A job's pods (without Kueue: the earlier gpuctl's jobs wait as Pending pods or as pods not yet
    created)."""

    bound: int = 0  # on a node, not finished, not terminating
    succeeded: int = 0
    pending: int = 0  # created, not on a node, not terminating
    quota_gpus: int = 0  # GPUs a ResourceQuota counts: every pod not Succeeded/Failed (terminating too)
    scheduled_at: float = 0.0  # the latest PodScheduled time of its bound pods (epoch seconds)


def count_pods(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], PodCount]:
    out: dict[tuple[str, str], PodCount] = {}
    for p in pods:
        c = out.setdefault((namespace_of(p), pod_job(p)), PodCount())
        phase = (p.get("status") or {}).get("phase")
        if phase == "Succeeded":
            c.succeeded += 1
            continue
        if phase == "Failed":
            continue
        c.quota_gpus += pod_gpus(p)
        if meta(p).get("deletionTimestamp"):
            continue
        if (p.get("spec") or {}).get("nodeName"):
            c.bound += 1
            c.scheduled_at = max(
                c.scheduled_at, parse_time(condition(p, "PodScheduled").get("lastTransitionTime")) or 0.0
            )
        else:
            c.pending += 1
    return out


def replay(
    kube: Cluster,
    design: str,
    ns: dict[str, str],
    trace: list[Item],
    day: float,
    grace: int | None = GRACE_SECONDS,
    nudge: bool = False,
    defrag: Defragmenter | SetAside | None = None,
    est_slack: float = 3.0,
    nudge_stops: bool = False,
) -> Result:
    """Replay `trace` in `design` and measure it. `nudge`: touch the controller (Job, Deployment,
    StatefulSet) of a job whose quota now allows a pod it has not created, so the controller retries
    at once instead of after its uncompressed backoff (up to 60 s, 3 hours of the day): what real time
    gives (the retry comes within a minute, 0.3 s here). Only pods a controller creates unsuspended
    can be refused by a ResourceQuota, i.e. the earlier gpuctl's. gpuctl's design also records, for each
    job first seen waiting in Kueue's queue, the estimate `gpuctl describe job` would show then (issue
    23), with the product's step slack and with `est_slack`."""
    kueue = design != "earlier"
    to_nudge: set[tuple[str, str]] = set()
    team_of = {v: k for k, v in ns.items()}
    tracks: dict[tuple[str, str], JobTrack] = {}
    frag: dict[str, list[float]] = {}  # pod -> [first, last] seen Unschedulable
    why: dict[str, str] = {}
    gpu_seconds: dict[str, float] = {}  # per pool
    fillable: dict[str, float] = {}  # per pool: idle GPU-seconds a waiting job would have fitted in
    anywait: dict[str, float] = {}  # per pool: idle GPU-seconds while any job of the pool waited
    lag: dict[str, float] = {}  # idle GPU-seconds a waiting job fitted and was allowed, per cause
    term = [0.0]  # GPU-seconds of terminating pods
    res_nudges = [0]
    lag_jobs: dict[tuple[str, str], float] = {}  # GPU-seconds of "lag" per job
    lag_why: dict[tuple[str, str], str] = {}  # its Workload's last QuotaReserved message
    evictions: dict[str, int] = {}
    usage: dict[str, int] = dict.fromkeys(TEAMS, 0)
    differ: dict[str, float] = {}  # team -> since when Kueue's count of its GPUs differs from the bench's
    dumped: dict[str, dict[str, Any]] = {}  # team -> both counts, kept once (Result.count_gaps)
    gap_seconds = [0.0]  # GPU-seconds Kueue counted reserved beyond what the teams' Workloads showed
    stops: dict[tuple[str, str], list[Any]] = {}  # Job -> [first, last seen stopping, its state at 10 s]
    stop_nudges: set[tuple[str, str]] = set()  # stopped Jobs whose restore Kueue should retry now
    stop_nudged = [0]
    lock = threading.Lock()
    nodes = read_nodes(kube)
    pool_nodes: dict[str, list[str]] = {}
    for node, (pool, _) in nodes.items():
        pool_nodes.setdefault(pool, []).append(node)
    any_nodes = [n for pool in POOLS for n in pool_nodes.get(pool, [])]
    node_objs = kube.list(path("Node"))
    t0 = time.monotonic()

    def now() -> float:
        return time.monotonic() - t0

    def where(it: Item) -> list[str]:
        return any_nodes if it.pool == ANY_POOL else pool_nodes.get(it.pool, [])

    def pools_of(it: Item) -> list[list[str]]:
        """The node sets all pods of a job must share: its pool's; for an any-pool job each pool's, in
        the team queue's flavor order (Kueue assigns a pod set one flavor: all its pods in one pool)."""
        if it.pool == ANY_POOL:
            return [pool_nodes.get(p, []) for p in sorted(POOLS)]
        return [pool_nodes.get(it.pool, [])]

    def observe() -> None:
        last = now()
        while not stop.is_set():
            time.sleep(1.0)
            t = now()
            dt, last = t - last, t
            wls = [w for n in ns.values() for w in kube.list(path("Workload", namespace=n))] if kueue else []
            pods = [p for n in ns.values() for p in kube.list(path("Pod", namespace=n))]
            jobs_done = (
                {
                    (namespace_of(j), name_of(j))
                    for n in ns.values()
                    for j in kube.list(path("Job", namespace=n))
                    if condition(j, "Complete").get("status") == "True"
                    or condition(j, "Failed").get("status") == "True"
                }
                if not kueue
                else set()
            )
            pods_by_name = {name_of(p): p for p in pods}
            counts = count_pods(pods)
            # Jobs Kueue has begun to stop (evicted: preempted, stopped, or at their maxRuntime) and not yet
            # finished stopping: its `stopping` annotation stays until it has restored the pod template.
            stopping = (
                {
                    (namespace_of(j), name_of(j)): j
                    for n in ns.values()
                    for j in kube.list(path("Job", namespace=n))
                    if (meta(j).get("annotations") or {}).get(KUEUE_STOPPING) == "true"
                }
                if design == "gpuctl"
                else {}
            )
            use = dict.fromkeys(TEAMS, 0)
            pool_use: dict[tuple[str, str], int] = {}  # (team, pool) -> GPUs, the baseline's per-pool quota
            held: dict[str, list[tuple[int, float, int, str]]] = {tm: [] for tm in TEAMS}
            state: dict[tuple[str, str], Any] = {}  # job -> its Workload's state (Kueue designs)
            queued: dict[tuple[str, str], Any] = {}  # job -> its Workload waiting in Kueue's queue
            pend_msg: dict[tuple[str, str], str] = {}  # job -> why Kueue has not admitted it
            with lock:
                for w in wls:
                    team = team_of.get(namespace_of(w))
                    key = (namespace_of(w), workload_job(w, pods_by_name))
                    st = workload_state(w)
                    if st is not None and (state.get(key) not in HOLDING_QUOTA):
                        state[key] = st
                        pend_msg[key] = condition(w, "QuotaReserved").get("message", "")
                    if st in IN_QUEUE:
                        queued[key] = w
                        tr_w = tracks.get(key)
                        shown = parse_time(annotations(w).get(STARTS_BY_ANNOTATION))
                        fresh_promise = tr_w is not None and not tr_w.promised and tr_w.admitted is None
                        if fresh_promise and shown is not None:
                            # serve's recorded bound (feature holds) is the one users are shown: measured
                            tr_w.promised, tr_w.est_by, tr_w.est_now = True, shown, False
                            tr_w.est_at = tr_w.est_at or time.time()
                        said_now = condition(w, "QuotaReserved").get("message", "")
                        if tr_w is not None and tr_w.admitted is None and said_now:
                            tr_w.last_kueue = said_now
                    if st in HOLDING_QUOTA and team:
                        use[team] += workload_gpus(w)
                        for flavor, g in reserved_pools(w):
                            pk = (team, flavor.removeprefix("base-"))
                            pool_use[pk] = pool_use.get(pk, 0) + g
                        at = parse_time(condition(w, "QuotaReserved").get("lastTransitionTime"))
                        held[team].append((priority_value(w), at or 0.0, workload_gpus(w), key[1]))
                        tr = tracks.get(key)
                        if tr and tr.admitted is None:
                            tr.admitted = max(tr.submitted, (at - wall0) if at else t)
                    n_ev = sum(
                        int(e.get("count") or 0)
                        for e in ((w.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
                        if e.get("reason") == "Preempted"
                    )
                    evictions[w["metadata"]["uid"]] = max(evictions.get(w["metadata"]["uid"], 0), n_ev)
                if not kueue:  # the earlier gpuctl: a job has started once all its pods are on nodes
                    for key, c in counts.items():
                        team = team_of.get(key[0])
                        if team:
                            use[team] += c.quota_gpus
                        tr = tracks.get(key)
                        if tr and tr.admitted is None and c.bound + c.succeeded >= tr.item.pods:
                            at = c.scheduled_at
                            tr.admitted = max(tr.submitted, (at - wall0) if at else t)
                usage.update(use)
                gpuctl_design = design == "gpuctl"
                cqs = kube.list(path("ClusterQueue"), label_selector=GPUCTL_MANAGED) if gpuctl_design else []
                kueue_use = {team_of.get(name_of(cq), ""): team_usage(cq).gpus for cq in cqs}
                # Where Kueue's count of a team's GPUs (its ClusterQueue's reservations) and the bench's
                # (the Workloads holding quota) differ for 5 s, keep both sides once per team.
                for tm, k_use in kueue_use.items():
                    if tm and t <= day:
                        gap_seconds[0] += max(k_use - use[tm], 0) * dt
                    if not tm or k_use == use[tm]:
                        differ.pop(tm, None)
                        continue
                    since = differ.setdefault(tm, t)
                    if t - since >= 5 and tm not in dumped:
                        dumped[tm] = {
                            "t": t,
                            "kueue": k_use,
                            "bench": use[tm],
                            "cq_status": [cq.get("status") for cq in cqs if team_of.get(name_of(cq)) == tm],
                            "workloads": [
                                {
                                    "name": name_of(w),
                                    "state": str(workload_state(w)),
                                    "gpus": workload_gpus(w),
                                    "active": (w.get("spec") or {}).get("active"),
                                    "conditions": [
                                        (c.get("type"), c.get("status"), c.get("reason"))
                                        for c in (w.get("status") or {}).get("conditions") or []
                                    ],
                                    "admission": (w.get("status") or {}).get("admission"),
                                }
                                for w in wls
                                if team_of.get(namespace_of(w)) == tm
                            ],
                            "pods": [
                                {
                                    "name": name_of(p),
                                    "phase": (p.get("status") or {}).get("phase"),
                                    "node": (p.get("spec") or {}).get("nodeName"),
                                    "gpus": pod_gpus(p),
                                    "deleting": meta(p).get("deletionTimestamp"),
                                    "finalizers": meta(p).get("finalizers"),
                                    "owners": [o.get("kind") for o in meta(p).get("ownerReferences") or []],
                                }
                                for p in pods
                                if team_of.get(namespace_of(p)) == tm
                            ],
                        }
                fresh = [
                    (tr, queued[key])
                    for key, tr in tracks.items()
                    if key in queued and tr.est_at is None and tr.admitted is None
                ]
                if fresh and gpuctl_design:
                    snap = Snapshot.build(
                        nodes=node_objs,
                        pods=pods,
                        workloads=wls,
                        cluster_queues=cqs,
                        cohort=kube.get_or_none(path("Cohort", COHORT_NAME)),
                    )
                    at = time.time()
                    for tr, w in fresh:
                        d = workload_demand(w)
                        v = snap.verdict(d)
                        e = estimate(snap, d, now=at, verdict=v)
                        tr.est_at, tr.est_by, tr.est_basis = at, e.starts_by, e.summary()
                        tr.est_now = e.now
                        tr.est_kueue = condition(w, "QuotaReserved").get("message", "")
                        tr.est_by_bench = estimate(snap, d, now=at, verdict=v, slack=est_slack).starts_by
                for key, j in stopping.items():
                    first = stops.setdefault(key, [t, t, None])
                    first[1] = t
                    st_j = j.get("status") or {}
                    if (
                        nudge_stops
                        and t - first[0] >= 1
                        and (j.get("spec") or {}).get("suspend")
                        and not st_j.get("active")
                        and condition(j, "Suspended").get("status") == "True"
                    ):
                        stop_nudges.add(key)
                    if first[2] is None and t - first[0] >= 10:
                        st = j.get("status") or {}
                        first[2] = {
                            "suspend": (j.get("spec") or {}).get("suspend"),
                            "active": st.get("active"),
                            "terminating": st.get("terminating"),
                            "startTime": st.get("startTime"),
                            "conditions": [
                                (c.get("type"), c.get("status")) for c in st.get("conditions") or []
                            ],
                            "pods": [
                                ((p.get("status") or {}).get("phase"), bool(meta(p).get("deletionTimestamp")))
                                for p in pods
                                if (namespace_of(p), pod_job(p)) == key
                            ],
                        }
                over = {tm for tm, u in use.items() if u > TEAMS[tm]}
                recl = {(ns[tm], k) for tm in over for k in reclaimable(held[tm], TEAMS[tm])}
                # GPUs taken per node: pods bound there, or placed there by TAS and not yet bound.
                used: dict[str, int] = {}
                taken: dict[str, int] = {}  # of those, by work a guarantee may reclaim
                for p in pods:
                    if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                        continue
                    spec = p.get("spec") or {}
                    node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)
                    if node:
                        used[node] = used.get(node, 0) + pod_gpus(p)
                        if (namespace_of(p), pod_job(p)) in recl:
                            taken[node] = taken.get(node, 0) + pod_gpus(p)

                # The jobs waiting now, with the pods they still need (a Kueue job waits as a whole,
                # before its first admission or when preempted and requeued; an earlier-gpuctl job
                # waits for the pods not yet on a node).
                waiting: list[tuple[JobTrack, int, int]] = []  # (track, pods missing, of them created)
                for key, tr in tracks.items():
                    if tr.deleted:
                        continue
                    if kueue:
                        if tr.admitted is None or state.get(key) in (
                            WorkloadState.PENDING,
                            WorkloadState.PREEMPTED,
                        ):
                            waiting.append((tr, tr.item.pods, 0))
                    elif key not in jobs_done:
                        c = counts.get(key, PodCount())
                        missing = tr.item.pods - c.bound - c.succeeded
                        if missing > 0:
                            waiting.append((tr, missing, min(c.pending, missing)))

                for tr in tracks.values():
                    if tr.admitted is not None:
                        continue
                    it = tr.item
                    own = counts.get((ns[it.team], it.name), PodCount()).quota_gpus if not kueue else 0
                    if use[it.team] - own + it.gpus * it.pods > TEAMS[it.team]:
                        continue
                    tr.ever_within = True
                    c = counts.get((ns[it.team], it.name), PodCount()) if not kueue else PodCount()
                    need = it.pods - c.bound - c.succeeded
                    if any(
                        fits(need, it.gpus, [nodes[n][1] - used.get(n, 0) + taken.get(n, 0) for n in group])
                        for group in pools_of(it)
                    ):
                        tr.entitled += dt
                        if over - {it.team}:
                            tr.blocked += dt
                        key = (ns[it.team], it.name)
                        said = pend_msg.get(key, "")[:160]
                        if kueue and it.team in kueue_use and kueue_use[it.team] != use[it.team]:
                            said += f" [Kueue counts {kueue_use[it.team]} GPUs, the bench {use[it.team]}]"
                        if said and said not in tr.kueue_said and len(tr.kueue_said) < 6:
                            tr.kueue_said.append(said)
                if t <= day:
                    # GPUs idle while a waiting job would fit in them, one node per pod, whatever its
                    # team's quota: the part of the idle capacity a queue design could have used now;
                    # "lag": of that, while the design's quota let the job start too.
                    free = {n: g - used.get(n, 0) for n, (_, g) in nodes.items()}
                    waiting_pools = {nodes[n][0] for tr, _, _ in waiting for n in where(tr.item)}
                    for pool in waiting_pools:
                        idle = sum(max(free[n], 0) for n in pool_nodes.get(pool, []))
                        anywait[pool] = anywait.get(pool, 0.0) + idle * dt
                    to_nudge.clear()
                    for tr, missing, created in sorted(waiting, key=lambda w: w[0].submitted):
                        it = tr.item
                        spots = next(
                            (
                                got
                                for group in pools_of(it)
                                if (got := place(missing, it.gpus, {n: free[n] for n in group})) is not None
                            ),
                            None,
                        )
                        ok = spots is not None and quota_allows(design, it, missing, created, use, pool_use)
                        if ok and missing > created and not kueue:
                            to_nudge.add((ns[it.team], it.name))
                        for i, n in enumerate(spots or []):
                            free[n] -= it.gpus
                            pool = nodes[n][0]
                            fillable[pool] = fillable.get(pool, 0.0) + it.gpus * dt
                            if ok:
                                cause = "pod Pending" if i < created else "no pod yet"
                                lag[cause] = lag.get(cause, 0.0) + it.gpus * dt
                                k = (ns[it.team], it.name)
                                lag_jobs[k] = lag_jobs.get(k, 0.0) + it.gpus * dt
                                lag_why[k] = pend_msg.get(k, "") or (
                                    "no pod yet" if i >= created else "Pending"
                                )
                    for p in pods:
                        if pod_holds_gpus(p):
                            pool = nodes.get(p["spec"]["nodeName"], ("", 0))[0]
                            gpu_seconds[pool] = gpu_seconds.get(pool, 0.0) + pod_gpus(p) * dt
                            if meta(p).get("deletionTimestamp"):
                                term[0] += pod_gpus(p) * dt
                # Nodes still holding a pod that is terminating (a preempted or deleted job's; KWOK,
                # like a kubelet, takes up to the grace period): a pod placed there waits for it,
                # which is not fragmentation.
                draining = {p["spec"].get("nodeName") for p in pods if p["metadata"].get("deletionTimestamp")}
                for p in pods:
                    ps = condition(p, "PodScheduled")
                    target = ((p.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME_LABEL)
                    if (
                        not (p.get("spec") or {}).get("nodeName")
                        and not (p.get("spec") or {}).get("schedulingGates")
                        and ps.get("reason") == "Unschedulable"
                        and not (target and target in draining)
                        and (kueue or fragmented(p, pool_nodes, free_now(nodes, used)))
                    ):
                        frag.setdefault(p["metadata"]["name"], [t, t])[1] = t
                        why[p["metadata"]["name"]] = ps.get("message", "")

    stop = threading.Event()
    wall0 = time.time()
    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    mover = None
    if defrag is not None:  # gpuctl serve's defragmentation, in process, on the compressed clock
        mover = defrag.start(stop)
    pending = list(trace)
    try:
        # Jobs due before the day's end are submitted even when a slow pass (a loaded machine) overran it.
        while now() < day or (pending and pending[0].t < day):
            t = now()
            while pending and pending[0].t <= t:
                item = pending.pop(0)
                with lock:
                    within = usage[item.team] + item.gpus * item.pods <= TEAMS[item.team]
                    tracks[(ns[item.team], item.name)] = JobTrack(item, now(), within)
                try:
                    kube.create(manifest(item, ns[item.team], design, grace=grace, day=day))
                except ApiError as e:
                    print(f"  {item.name}: {e}", file=sys.stderr)
            # Inference and notebooks end when their time is up (counted from admission).
            with lock:
                for (n, name), tr in tracks.items():
                    done = tr.admitted is not None and now() - tr.admitted >= tr.item.runtime
                    if tr.item.kind != "training" and done and not tr.deleted:
                        kind = "Deployment" if tr.item.kind == "inference" else "StatefulSet"
                        with contextlib.suppress(ApiError):
                            kube.delete(path(kind, name, namespace=n))
                        tr.deleted = True
                touch = sorted(to_nudge) if nudge else []
                to_nudge.clear()
                wake = sorted(stop_nudges)
                stop_nudges.clear()
            for n, name in wake:  # --nudge-kueue-stops: an update event makes Kueue reconcile the Job now
                with contextlib.suppress(ApiError):
                    kube.merge_patch(
                        path("Job", name, namespace=n), {"metadata": {"annotations": {NUDGE: f"{now():.1f}"}}}
                    )
                stop_nudged[0] += 1
            for n, name in touch:
                kind = {"training": "Job", "inference": "Deployment"}.get(
                    tracks[(n, name)].item.kind, "StatefulSet"
                )
                with contextlib.suppress(ApiError):
                    kube.merge_patch(
                        path(kind, name, namespace=n), {"metadata": {"annotations": {NUDGE: f"{now():.1f}"}}}
                    )
                res_nudges[0] += 1
            time.sleep(0.2)
    finally:
        stop.set()
        watcher.join(timeout=10)
        if mover is not None:
            mover.join(timeout=30)
    end = now()
    res = Result(design)
    if isinstance(defrag, Defragmenter):  # (feature holds runs serve's set-aside instead: no moves)
        res.moves = sum(defrag.moves.values())
        res.reactivated = defrag.reactivated
    res.util = sum(gpu_seconds.values()) / (CAPACITY * day)
    for pool in POOLS:
        cap = sum(nodes[n][1] for n in pool_nodes.get(pool, []))
        res.util_pool[pool] = gpu_seconds.get(pool, 0.0) / (cap * day) if cap else 0.0
        res.fillable_pool[pool] = fillable.get(pool, 0.0) / (cap * day) if cap else 0.0
        res.anywait_pool[pool] = anywait.get(pool, 0.0) / (cap * day) if cap else 0.0
    res.lag = {k: v / (CAPACITY * day) for k, v in lag.items()}
    res.terminating = term[0] / (CAPACITY * day)
    res.nudges = res_nudges[0]
    top = sorted(lag_jobs.items(), key=lambda kv: -kv[1])[:8]
    res.lag_top = [
        f"{k[1]} ({tracks[k].item.gpus}x{tracks[k].item.pods}): {v:.0f} GPU-s; {lag_why.get(k, '')}"
        for k, v in top
    ]
    for (_, name), tr in tracks.items():
        if tr.est_at is None:
            continue
        started = wall0 + tr.admitted if tr.admitted is not None else None
        res.estimates.append(
            {
                "job": name,
                "pool": tr.item.pool or "any",
                "priority": tr.item.priority,
                "at": tr.est_at - wall0,
                "now": tr.est_now,
                "by": None if tr.est_by is None else tr.est_by - wall0,
                "by_bench": None if tr.est_by_bench is None else tr.est_by_bench - wall0,
                "started": None if started is None else started - wall0,
                "summary": tr.est_basis,
                "kueue_then": tr.est_kueue,
                "kueue_last": tr.last_kueue,
            }
        )
    res.count_gaps = dumped
    res.count_gap = gap_seconds[0] / (CAPACITY * day)
    res.stop_nudges = stop_nudged[0]
    res.slow_stops = sorted(
        ({"job": k[1], "seconds": last - first, "at_10s": seen} for k, (first, last, seen) in stops.items()),
        key=lambda r: -r["seconds"],
    )
    res.starts = [
        (tr.item.name, tr.item.pool, tr.item.priority, tr.submitted, tr.admitted) for tr in tracks.values()
    ]
    longest = sorted((tr for tr in tracks.values() if tr.entitled > 0), key=lambda tr: -tr.entitled)[:6]
    res.quota_waits = [
        f"{tr.item.name} ({tr.item.gpus}x{tr.item.pods}, {tr.item.pool or 'any pool'}, {tr.item.priority}): "
        f"{tr.entitled:.1f} s; Kueue: " + " | ".join(tr.kueue_said)
        for tr in longest
    ]
    for tr in tracks.values():
        wait = (tr.admitted if tr.admitted is not None else end) - tr.submitted
        if tr.admitted is None:
            res.never += 1
        res.waits_all.append(wait)
        if tr.within_quota:
            res.waits_quota_submitted.append(wait)
        if tr.within_quota or tr.ever_within:
            res.waits_quota.append(tr.entitled)
        if tr.blocked > WAIT_LIMIT:
            res.violations += 1
    stuck = [n for n, (first, last) in frag.items() if last - first >= STUCK_SECONDS]
    res.frag_pods = len(stuck)
    res.stuck = [f"{n}: {why.get(n, '')}" for n in sorted(stuck)]
    if kueue:
        res.preemptions = sum(evictions.values())
        res.maxruntime_stops = sum(
            1
            for n in ns.values()
            for w in kube.list(path("Workload", namespace=n))
            if "MaximumExecutionTime" in (condition(w, "Evicted").get("reason") or "")
            or "MaximumExecutionTime" in (condition(w, "Evicted").get("message") or "")
        )
    else:  # kube-scheduler's preemptions: a "Preempted" event on each victim pod
        res.preemptions = sum(
            int(e.get("count") or 1)
            for n in ns.values()
            for e in kube.list(path("Event", namespace=n), field_selector="reason=Preempted")
        )
    res.failed_jobs = sum(
        1
        for n in ns.values()
        for j in kube.list(path("Job", namespace=n))
        if condition(j, "Failed").get("status") == "True"
    )
    res.jobs = len(tracks)
    return res


def quota_allows(
    design: str,
    it: Item,
    missing: int,
    created: int,
    use: Mapping[str, int],
    pool_use: Mapping[tuple[str, str], int],
) -> bool:
    """Whether the design's quota lets `missing` pods of a waiting job start now (`created` of them
    exist, Pending). `use`: GPUs each team holds by its design's count; `pool_use`: per (team, pool)."""
    if design == "baseline":  # nominal quota per pool, no borrowing
        cap = dict(zip(POOLS, SPLIT[it.team], strict=True)).get(it.pool, 0)
        return pool_use.get((it.team, it.pool), 0) + it.gpus * missing <= cap
    if design == "earlier":  # the ResourceQuota already counts the Pending pods
        return use[it.team] + it.gpus * (missing - created) <= TEAMS[it.team]
    return True  # gpuctl lends idle GPUs to any team


def read_nodes(kube: Cluster) -> dict[str, tuple[str, int]]:
    """node -> (its pool, its allocatable GPUs)."""
    return {
        name_of(n): (
            labels(n).get(Labels.POOL, ""),
            quantity_gpus((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0)),
        )
        for n in kube.list(path("Node"))
    }


def pool_gpus(nodes: Mapping[str, tuple[str, int]]) -> dict[str, int]:
    """GPUs per trace pool."""
    out = dict.fromkeys(POOLS, 0)
    for pool, gpus in nodes.values():
        if pool in out:
            out[pool] += gpus
    return out


def free_now(nodes: Mapping[str, tuple[str, int]], used: Mapping[str, int]) -> dict[str, int]:
    return {n: g - used.get(n, 0) for n, (_, g) in nodes.items()}


def fragmented(pod: Mapping[str, Any], pool_nodes: Mapping[str, list[str]], free: Mapping[str, int]) -> bool:
    """Without Kueue every waiting pod is Unschedulable; it waits for fragmentation only while its
    pool has enough free GPUs in all but no node holds it."""
    g = pod_gpus(pod)
    pool = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(Labels.POOL)
    room = [
        free.get(n, 0)
        for n in (pool_nodes.get(pool, []) if pool else [m for v in pool_nodes.values() for m in v])
    ]
    return g > 0 and sum(max(r, 0) for r in room) >= g and not fits(1, g, room)


def wait_cell(waits: list[float], p: float, k: float) -> str:
    return f"{pct(waits, p):.1f} s ({pct(waits, p) * k:.0f} min)"


def print_table(
    results: list[Result], day: float, bound: float | None = None, packed: float | None = None
) -> None:
    """The designs side by side; `bound` (utilisation_bound) and `packed` (the best offline_utilisation)
    of the trace, for the verdict lines."""
    k = REAL_DAY / day / 60  # compressed seconds -> real-day minutes
    rows = [
        ("jobs (never admitted in the day)", lambda r: f"{r.jobs} ({r.never})"),
        ("GPU utilisation (allocated / capacity)", lambda r: f"{100 * r.util:.1f} %"),
        *((f"  {pool}", lambda r, pool=pool: f"{100 * r.util_pool.get(pool, 0.0):.1f} %") for pool in POOLS),
        *(
            (
                f"  {pool} idle while a waiting job fitted",
                lambda r, pool=pool: f"{100 * r.fillable_pool.get(pool, 0.0):.1f} %",
            )
            for pool in POOLS
        ),
        *(
            (
                f"  {pool} idle while any job of it waited",
                lambda r, pool=pool: f"{100 * r.anywait_pool.get(pool, 0.0):.1f} %",
            )
            for pool in POOLS
        ),
        (
            "idle, a waiting job fitted and its quota allowed it (% of cluster)",
            lambda r: f"{100 * sum(r.lag.values()):.1f} %",
        ),
        *(
            (f"  of which: {cause}", lambda r, cause=cause: f"{100 * r.lag.get(cause, 0.0):.1f} %")
            for cause in ("no pod yet", "pod Pending")
        ),
        ("GPU-time held by terminating pods", lambda r: f"{100 * r.terminating:.1f} %"),
        ("within-quota jobs", lambda r: str(len(r.waits_quota))),
        ("p50 wait, within quota, after capacity frees", lambda r: wait_cell(r.waits_quota, 50, k)),
        ("p99 wait, within quota, after capacity frees", lambda r: wait_cell(r.waits_quota, 99, k)),
        ("p50 wait from submission, within quota then", lambda r: wait_cell(r.waits_quota_submitted, 50, k)),
        ("p99 wait from submission, within quota then", lambda r: wait_cell(r.waits_quota_submitted, 99, k)),
        ("p50 wait, all jobs", lambda r: wait_cell(r.waits_all, 50, k)),
        ("p99 wait, all jobs", lambda r: wait_cell(r.waits_all, 99, k)),
        ("fragmentation-pending pods", lambda r: str(r.frag_pods)),
        ("quota violations", lambda r: str(r.violations)),
        ("preemptions", lambda r: str(r.preemptions)),
        ("Jobs failed (backoffLimit)", lambda r: str(r.failed_jobs)),
        ("controller nudges", lambda r: str(r.nudges)),
    ]
    w = max(len(n) for n, _ in rows)
    print(f"\n{'':{w}}   " + "   ".join(f"{r.title or TITLES.get(r.design, r.design):>22}" for r in results))
    for name, fn in rows:
        print(f"{name:{w}}   " + "   ".join(f"{fn(r):>22}" for r in results))
    ours = max((r for r in results if r.design == "gpuctl"), key=lambda r: r.util, default=None)
    for r in results:
        if ours and r.design != "gpuctl":
            lead = 100 * (ours.util - r.util)
            verdict = "MET" if lead >= TARGET_LEAD else "NOT MET"
            target = f"target +{TARGET_LEAD:.0f}: {verdict}"
            print(
                f"utilisation {ours.title or 'gpuctl'} - {r.title or TITLES[r.design]}: "
                f"{lead:+.1f} points ({target})"
            )
            if bound is not None and packed is not None:
                print(
                    f"  the most any design could lead it by on this trace: {100 * (bound - r.util):+.1f} "
                    f"(upper bound), {100 * (packed - r.util):+.1f} (best offline packing)"
                )


FEATURES = ("off", "any-pool", "defrag", "both", "holds")
PRIORITY_RANK = {"low": 0, "medium": 1, "high": 2}


def unbounded_kind(summary: str) -> str:
    """Why an estimate has no bound, in a few words (for counting)."""
    if "may run in any of" in summary:
        return "any-pool job"
    if "has no maxRuntime" in summary:
        return "waits for work without maxRuntime (inference)"
    if "never fits" in summary or "no Ready nodes" in summary:
        return "never fits"
    if "borrowed from other teams" in summary:
        return "beyond its quota, borrows"
    return summary.removeprefix("no bound: ")[:60]


def estimate_summary(r: Result, day: float) -> dict[str, Any]:
    """Issue 23's estimate against the replay: of the jobs estimated when first seen waiting, how many had
    a bound ("starts by ... at the latest"), the p50/p90 |actual start - bound| of those that started,
    and those that started after it (or still waited at the end of the day past it), with the product's
    step slack (`by`) and the bench's (`by_bench`). A late job is explained by the jobs submitted after
    its estimate that Kueue admitted in its pool before it (the bound assumes none)."""
    rows = r.estimates
    now = [e for e in rows if e["now"]]
    bounded = [e for e in rows if not e["now"] and e["by"] is not None]
    kinds: dict[str, int] = {}
    for e in rows:
        if not e["now"] and e["by"] is None:
            k = unbounded_kind(e["summary"])
            kinds[k] = kinds.get(k, 0) + 1
    out: dict[str, Any] = {
        "estimated": len(rows),
        "now": len(now),
        "now_p90_latency": pct([e["started"] - e["at"] for e in now if e["started"] is not None], 90),
        # the same of pinned jobs only: an any-pool job's "fits now" is judged in any listed pool with
        # room, while Kueue nominates the first listed pool by quota (docs/queueing.md, any pool)
        "now_pinned_p90_latency": pct(
            [e["started"] - e["at"] for e in now if e["started"] is not None and e["pool"] != "any"], 90
        ),
        "bounded": len(bounded),
        "unbounded": len(rows) - len(now) - len(bounded),
        "unbounded_why": kinds,
    }
    for key in ("by", "by_bench"):
        started = [e for e in bounded if e["started"] is not None and e[key] is not None]
        errors = [abs(e["started"] - e[key]) for e in started]
        late = [e for e in bounded if e[key] is not None and (e["started"] or day) > e[key]]
        out[key] = {
            "p50": pct(errors, 50),
            "p90": pct(errors, 90),
            "early_p90": pct([e[key] - e["started"] for e in started], 90),
            "late": len(late),
            "late_jobs": [late_why(e, key, r, day) for e in late],
        }
    return out


def late_why(e: Mapping[str, Any], key: str, r: Result, day: float) -> str:
    start = e["started"] if e["started"] is not None else day
    pool = "" if e["pool"] == "any" else e["pool"]
    ahead = [
        (name, prio)
        for name, p, prio, submitted, admitted in r.starts
        if submitted > e["at"]
        and admitted is not None
        and admitted < start
        and (p in (pool, ANY_POOL) or not pool)
        and name != e["job"]
    ]
    higher = sum(1 for _, prio in ahead if PRIORITY_RANK[prio] > PRIORITY_RANK[e["priority"]])
    started = f"started {start - e[key]:.1f} s after" if e["started"] is not None else "still waiting, past"
    return (
        f"{e['job']} ({e['pool']}, {e['priority']}): {started} its bound; {len(ahead)} jobs submitted after "
        f"the estimate admitted in its pool before it ({higher} of higher priority); estimate: {e['summary']}"
    )


def print_estimates(results: list[Result], day: float, slack: float) -> None:
    k = REAL_DAY / day / 60
    for r in results:
        if not r.estimates:
            continue
        sm = estimate_summary(r, day)
        why = ", ".join(f"{n} {w}" for w, n in sorted(sm["unbounded_why"].items(), key=lambda kv: -kv[1]))
        print(
            f"\n{r.title or TITLES[r.design]}: the estimate (issue 23), computed when a job was first seen "
            f"waiting in Kueue's queue: {sm['estimated']} jobs; {sm['now']} 'starts now' (p90 admission "
            f"{sm['now_p90_latency']:.1f} s later; pinned jobs {sm['now_pinned_p90_latency']:.1f} s), "
            f"{sm['bounded']} bounded, {sm['unbounded']} without a "
            f"bound ({why})"
        )
        for key, what in (
            ("by", f"step slack {ESTIMATE_STEP_SLACK_SECONDS} s (the product's)"),
            ("by_bench", f"step slack {slack:g} s (the bench's)"),
        ):
            m = sm[key]
            print(
                f"  {what}: |actual start - bound| p50 {m['p50']:.1f} s ({m['p50'] * k:.0f} min), "
                f"p90 {m['p90']:.1f} s ({m['p90'] * k:.0f} min); started after the bound: {m['late']}"
            )
            for line in m["late_jobs"]:
                print(f"    late: {line}")
        print(
            f"  maxRuntime stops (Kueue deactivated a job at its declared maxRuntime): {r.maxruntime_stops}"
        )
        if r.quota_waits:
            print("  longest within-quota waits (after capacity frees) and what Kueue said meanwhile:")
            for line in r.quota_waits:
                print(f"    {line}")
    for r in results:
        if r.design != "gpuctl":
            continue
        slow = [x for x in r.slow_stops if x["seconds"] >= 5]
        longest = max((x["seconds"] for x in slow), default=0)
        print(
            f"\n{r.title or TITLES[r.design]}: Kueue's count of the teams' GPUs beyond their Workloads "
            f"holding quota: {100 * r.count_gap:.1f} % of capacity; Jobs Kueue was stopping: "
            f"{len(r.slow_stops)}, {len(slow)} for 5 s or more (longest {longest:.0f} s); "
            f"nudged: {r.stop_nudges}"
        )
        for x in slow[:4]:
            print(f"  {x['job']}: {x['seconds']:.0f} s; at 10 s: {x['at_10s']}")


def print_features(results: list[Result], day: float, trace: list[Item]) -> None:
    """Issue 23's table: each feature set's utilisation, within-quota p99 wait, fragmentation-pending pods,
    quota violations and moves per hour of the real day, against Kueue defaults."""
    k = REAL_DAY / day / 60
    hours = 24.0
    base = next((r for r in results if r.design == "baseline"), None)
    print("\nfeatures (issue 23)")
    head = f"{'':30} {'util':>7} {'lead':>7} {'p99 within quota':>22} {'frag-pend':>9} {'violations':>10} "
    print(head + f"{'moves/h':>8} {'preempt':>8}")
    for r in results:
        lead = f"{100 * (r.util - base.util):+.1f}" if base is not None and r is not base else "-"
        print(
            f"{r.title or TITLES[r.design]:30} {100 * r.util:6.1f}% {lead:>7} "
            f"{wait_cell(r.waits_quota, 99, k):>22} {r.frag_pods:>9} {r.violations:>10} "
            f"{r.moves / hours:>8.2f} {r.preemptions:>8}"
        )


# The days played by a model of their own (no cluster): --day -> its module, whose main takes --seed, --json.
MODEL_DAYS = {"idle": "bench.trace_idle", "serving": "bench.trace_serving"}


def bound_holds(kube: Cluster, day: float, settle: float) -> SetAside:
    """`gpuctl serve --defrag` on every GPU pool of the day (feature `holds`, issue 45): it records each
    waiting one-pod Job's first start bound (runwhere.ai/starts-by, with the product's step slack) and sets a
    node aside for it from the lead before that bound, gangs' set-asides as before. Its times compressed
    with the day (lead 30 min = 10 s, a set-aside at most 2 h = 40 s, cooldown 10 min), but the idle end no
    shorter than 3 s (Kueue's latency is not compressed)."""
    k = day / REAL_DAY
    return SetAside(
        kube,
        lambda: tuple(
            kube.list(path(kind)) for kind in ("Node", "Pod", "Workload", "ClusterQueue", "ResourceFlavor")
        ),
        pools=list(POOLS),
        settle=settle,
        idle=max(SET_ASIDE_IDLE_SECONDS * k, 3.0),
        max_hold=SET_ASIDE_MAX_SECONDS * k,
        cooldown=SET_ASIDE_COOLDOWN_SECONDS * k,
        lead=SET_ASIDE_BOUND_LEAD_SECONDS * k,
        bounds=True,
        interval=1.0,
        cohort=lambda: kube.get_or_none(path("Cohort", COHORT_NAME)),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", help="the cluster to replay on (required unless --offline)")
    ap.add_argument("--day-seconds", type=float, default=480.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--only",
        choices=(*DESIGNS, "setaside", "whole", "slices"),
        action="append",
        help="run only this design (repeatable); --day gangs: baseline, gpuctl, setaside; "
        "--day slices: whole, slices",
    )
    ap.add_argument(
        "--grace-seconds",
        type=int,
        default=GRACE_SECONDS,
        help=f"pods' terminationGracePeriodSeconds in every design (default {GRACE_SECONDS}; 30 = "
        "Kubernetes' default, uncompressed: 90 minutes of the day)",
    )
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    ap.add_argument(
        "--nudge-controllers",
        action="store_true",
        help="touch a Job/Deployment/StatefulSet whose quota now allows a pod it has not created, so its "
        "controller retries at once instead of after its uncompressed backoff (earlier gpuctl only)",
    )
    ap.add_argument(
        "--any-pool",
        action="store_true",
        help="what-if: training jobs of up to 4 GPUs name no pool and run on any GPU pool (Kueue flavor "
        "fungibility); not something gpuctl's YAML can express today",
    )
    ap.add_argument(
        "--features",
        default="",
        help="replay gpuctl's design once per comma-separated feature set of issue 23: off, any-pool, "
        "defrag, both (e.g. off,any-pool,defrag,both), and print the features table (default: the "
        "design as it is, with --any-pool if given)",
    )
    ap.add_argument(
        "--defrag-pools", default="training-pool", help="pools where defragmentation is on (training-pool)"
    )
    ap.add_argument(
        "--defrag-moves-per-hour",
        type=int,
        default=DEFRAG_MOVES_PER_HOUR,
        help=f"defragmentation's cap, per hour of the real day ({DEFRAG_MOVES_PER_HOUR})",
    )
    ap.add_argument(
        "--defrag-settle",
        type=float,
        default=3.0,
        help="compressed seconds a job waits before a move is made for it (3 s = 9 min of the day: "
        "above the bench's 3 s hand-over latency)",
    )
    ap.add_argument(
        "--nudge-kueue-stops",
        action="store_true",
        help="what-if (gpuctl's design): touch a Job Kueue is stopping (its kueue.x-k8s.io/stopping "
        "annotation) once it is suspended with no active pod, so Kueue retries restoring its pod template "
        "at once instead of after its exponential backoff (Kubernetes 1.36 refuses the restore while the "
        "Job has active pods; docs/queueing.md, Known limits)",
    )
    ap.add_argument(
        "--estimate-slack",
        type=float,
        default=3.0,
        help="the step slack of the bench's second estimate, compressed seconds (the product's, "
        f"{ESTIMATE_STEP_SLACK_SECONDS} s, is measured too): Kueue's latency is not compressed with the day",
    )
    ap.add_argument(
        "--offline",
        metavar="SEEDS",
        type=seeds_arg,
        help="no cluster: for each day (seed; e.g. 1-40 or 1,7) print the upper bound, the offline "
        "packings and the offline Kueue-defaults model (per-team per-pool quota, no borrowing): which days "
        "leave room for the target lead, in milliseconds",
    )
    ap.add_argument(
        "--day",
        choices=("mixed", "gangs", "slices", *MODEL_DAYS),
        default="mixed",
        help="mixed: this day (issues 15/23); gangs: multi-node jobs on 8-GPU nodes in racks (issue 31); "
        "slices: notebooks and small inference on MIG slices vs whole GPUs (issue 32); "
        "bench/trace_days.py and bench/trace_days_replay.py; models, no cluster: idle: notebooks idle most "
        "of the day and training waiting, with and without gpuctl's idle policy (issue 40; "
        "bench/trace_idle.py); serving: services on a daily curve beside training, fixed against "
        "autoscaled (issue 44; bench/trace_serving.py)",
    )
    args = ap.parse_args(argv)
    if args.day in MODEL_DAYS:
        # lazy: a model needs nothing of the replay
        model = importlib.import_module(MODEL_DAYS[args.day])
        return model.main(["--seed", str(args.seed), *(["--json"] if args.json else [])])
    if args.day != "mixed":
        if not args.kubeconfig:
            ap.error("--kubeconfig is required for --day gangs|slices")
        from bench.trace_days_replay import run_day  # lazy: that module imports this one

        kube = Cluster.connect(kubeconfig=args.kubeconfig)
        return run_day(kube, args.kubeconfig, args.day, args.seed, args.day_seconds, args.only, args.json)
    if args.offline:
        print_offline(
            [offline_day(n, args.day_seconds, local_nodes(), any_pool=args.any_pool) for n in args.offline]
        )
        return 0
    if not args.kubeconfig:
        ap.error("--kubeconfig is required (or --offline SEEDS)")
    kube = Cluster.connect(kubeconfig=args.kubeconfig)
    trace = make_trace(args.seed, args.day_seconds)
    if args.any_pool:
        trace = unpin(trace)
    kinds = {k: sum(1 for i in trace if i.kind == k) for k in ("training", "inference", "notebook")}
    offered = offered_load(trace, args.day_seconds, CAPACITY)
    print(
        f"trace: {len(trace)} jobs {kinds}, offered {100 * offered:.0f} % of "
        f"{CAPACITY} GPUs over a {args.day_seconds:.0f} s day "
        f"(1 s = {REAL_DAY / args.day_seconds / 60:.1f} min)"
    )
    bound: float | None = None
    packed: float | None = None
    results = []
    tmp = Path(f"/tmp/gpuctl-trace-{time.time_ns()}")
    tmp.mkdir(parents=True)
    print(
        f"pods' terminationGracePeriodSeconds: {args.grace_seconds} s (every design); "
        f"controller nudges: {'on' if args.nudge_controllers else 'off'}"
    )
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    bad = [f for f in features if f not in FEATURES]
    if bad:
        ap.error(f"--features: unknown {', '.join(bad)}; use {', '.join(FEATURES)}")
    pinned = make_trace(args.seed, args.day_seconds)
    runs: list[tuple[str, str]] = []
    for design in DESIGNS:
        if args.only and design not in args.only:
            continue
        for feat in features if design == "gpuctl" and features else [""]:
            runs.append((design, feat))
    for design, feat in runs:
        if feat:
            trace = unpin(pinned) if feat in ("any-pool", "both") else pinned
        ns = {t: f"trace-{design[0]}-{t}" for t in TEAMS}
        reset(kube, list(ns.values()))
        SETUP[design](kube, args.kubeconfig, ns, tmp)
        if bound is None:  # the pools exist now
            nodes = read_nodes(kube)
            gpus = pool_gpus(nodes)
            bound = utilisation_bound(trace, args.day_seconds, gpus)
            per_pool = (
                ""
                if any(i.pool == ANY_POOL for i in trace)  # jobs of no pool: not separable
                else " ("
                + ", ".join(
                    f"{p} {100 * utilisation_bound(trace, args.day_seconds, {p: gpus[p]}):.1f} %"
                    for p in POOLS
                )
                + ")"
            )
            print(
                f"upper bound, any scheduler: {100 * bound:.1f} % utilisation{per_pool} (utilisation_bound: "
                "GPUs divisible, free preemption, no node boundaries, no latency)"
            )
            fifo, largest = (
                offline_utilisation(trace, args.day_seconds, nodes, largest_first=f) for f in (False, True)
            )
            packed = max(fifo, largest)
            modelled = offline_utilisation(
                trace, args.day_seconds, nodes, largest_first=False, caps=baseline_caps()
            )
            print(
                f"offline packing (clairvoyant, no quotas, no latency, whole pods per node, no preemption): "
                f"{100 * fifo:.1f} % in submission order, {100 * largest:.1f} % largest first; "
                f"under the Kueue-defaults quota (per team and pool, no borrowing): {100 * modelled:.1f} %"
            )
        title = f"{TITLES[design]} ({feat})" if feat else TITLES[design]
        print(f"{title}: replaying ...", flush=True)
        mover: Any = None
        if feat == "holds":  # issue 45: serve's recorded bounds and set-aside, in process, on the day's clock
            mover = bound_holds(kube, args.day_seconds, args.defrag_settle)
        if feat in ("defrag", "both"):
            k = args.day_seconds / REAL_DAY
            mover = Defragmenter(
                kube,
                list_source(kube),
                pools=[p for p in args.defrag_pools.split(",") if p],
                cap=args.defrag_moves_per_hour,
                settle=args.defrag_settle,
                window=DEFRAG_WINDOW_SECONDS * k,
                interval=1.0,
            )
        results.append(
            replay(
                kube,
                design,
                ns,
                trace,
                args.day_seconds,
                args.grace_seconds,
                args.nudge_controllers,
                mover,
                args.estimate_slack,
                args.nudge_kueue_stops,
            )
        )
        results[-1].title = title
        print_table(results[-1:], args.day_seconds)  # as it comes: a long run may be cut short
        print_estimates(results[-1:], args.day_seconds, args.estimate_slack)
        sys.stdout.flush()
        reset(kube, list(ns.values()))
    print_table(results, args.day_seconds, bound, packed)
    if features:
        print_features(results, args.day_seconds, pinned)
    print_estimates(results, args.day_seconds, args.estimate_slack)
    for r in results:
        if r.lag_top:
            print(f"\n{TITLES[r.design]}: waiting jobs behind the 'quota allowed it' idle GPU-time, and why")
            for line in r.lag_top:
                print(f"  {line}")
    if args.json:
        out = []
        for r in results:
            d = {k: v for k, v in r.__dict__.items() if not k.startswith("waits") and k != "starts"}
            if r.estimates:
                d["estimate_summary"] = estimate_summary(r, args.day_seconds)
            for k in ("waits_quota", "waits_quota_submitted", "waits_all"):
                d[k] = {"n": len(getattr(r, k)), "p50": pct(getattr(r, k), 50), "p99": pct(getattr(r, k), 99)}
            out.append(d)
        print(json.dumps({"upper_bound": bound, "offline_packing": packed, "designs": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
