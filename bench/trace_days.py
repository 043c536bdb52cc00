"""bench/trace.py's two newer days (issues 31 and 32): their synthetic traces, their fake pools and the
YAML of their jobs. No cluster here: bench/trace_days_replay.py replays them (`bench/trace.py --day
gangs|slices`), tests/unit/test_trace.py checks them.

- The gang day (issue 31): a pool of 8 fake 8-GPU nodes in 2 racks of 4 (one block) shared by 3 teams
  (quotas 32/16/16 GPUs). Multi-node pre-training and fine-tunes (2x8 and 4x8 GPUs, `resources.nodes`)
  take GANG_SHARE of the day's GPU-hours; the rest is the usual stream of 1-8 GPU one-pod jobs.
- The slice day (issue 32): a pool of 2 fake nodes of 8 A100-80GB shared by 2 teams (8/8 GPUs):
  notebooks (gpu-share 10Gi: a 1g.10gb) and small inference (30Gi: a 3g.40gb) beside 1-2 GPU
  fine-tunes; replayed once with slices (6 of the 16 GPUs cut by MIG mixed) and once with the same
  jobs asking a whole GPU each on the same GPUs uncut.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping

from bench.trace import REAL_DAY, Item
from tests.integration.fake_nodes import fake_node as shared_fake_node

# ----------------------------------------------------------------------------- the gang day
GANG_POOL = "gang-pool"
GANG_TEAMS = {"a": 32, "b": 16, "c": 16}
BLOCK_LABEL, RACK_LABEL = "example.com/block", "example.com/rack"
GANG_NODE_GPUS = 8
# node -> rack: 2 racks of 4 nodes, one block; a 4x8 gang fits in one rack.
GANG_RACKS = {f"trace-gang-{i}": ("r1" if i <= 4 else "r2") for i in range(1, 9)}
GANG_CAPACITY = GANG_NODE_GPUS * len(GANG_RACKS)
# The multi-node jobs' share of the day's GPU-hours (within the day). Published traces of shared GPU
# clusters (Microsoft's Philly, SenseTime's Helios, Shanghai AI Lab's Acme) all find jobs of more than
# one node few in number and a large share of the GPU time; in a cluster shared with the usual fine-tunes,
# notebooks and experiments (not one dedicated to a pre-training run, where it is nearly all) the brief's
# 30-50 % is that range: 40 %, its middle.
GANG_SHARE = 0.40
# (team, nodes): who runs which gangs. Team a pre-trains (4x8 fits its 32-GPU quota) and fine-tunes
# (2x8); team b fine-tunes (2x8 fits its 16); team c runs one-pod work only.
GANG_KINDS = (("a", 4), ("a", 2), ("b", 2), ("a", 2), ("b", 2))


def _small_jobs(rng: random.Random, k: float, per_team: Mapping[str, tuple[float, int]]) -> list[Item]:
    """One-pod training jobs of 1/2/4/8 GPUs, each team busiest around its own hour; runtimes heavy-tailed
    (lognormal, median 1.5 h, at most 10 h) like bench/trace.py's day."""
    out = []
    for team, (peak_h, per_day) in per_team.items():
        for n in range(per_day):
            t = (rng.gauss(peak_h, 4.0) % 24) * 3600 * k
            gpus = rng.choices([1, 2, 4, 8], [0.3, 0.3, 0.2, 0.2])[0]
            minutes = min(rng.lognormvariate(math.log(90), 1.0), 10 * 60)
            prio = rng.choices(["low", "medium", "high"], [0.3, 0.55, 0.15])[0]
            out.append(
                Item(t, team, "training", f"tr-{team}-{n}", gpus, 1, GANG_POOL, prio, minutes * 60 * k)
            )
    return out


def gang_day(seed: int, day: float, share: float = GANG_SHARE) -> list[Item]:
    """The gang day: ~100 one-pod jobs, then gangs (GANG_KINDS in turn; lognormal runtimes, median 4 h,
    at most 8 h; submitted 1-20 h into the day) until they hold `share` of the day's GPU-hours."""
    rng = random.Random(seed)
    k = day / REAL_DAY
    items = _small_jobs(rng, k, {"a": (10, 34), "b": (14, 34), "c": (17, 40)})
    small = day_gpu_seconds(items, day)
    gangs = 0.0
    n = 0
    goal = share / (1 - share) * small
    while gangs < goal:
        team, nodes = GANG_KINDS[n % len(GANG_KINDS)]
        t = rng.uniform(1, 20) * 3600 * k
        minutes = min(rng.lognormvariate(math.log(240), 0.5), 8 * 60)
        prio = rng.choice(["medium", "high"])
        kind = "pt" if nodes == 4 else "ft"
        it = Item(
            t,
            team,
            "training",
            f"{kind}-{team}-{n}",
            GANG_NODE_GPUS,
            nodes,
            GANG_POOL,
            prio,
            minutes * 60 * k,
        )
        more = day_gpu_seconds([it], day)
        if n and abs(gangs + more - goal) > abs(gangs - goal):
            break  # the last gang would overshoot more than stopping here falls short
        items.append(it)
        gangs += more
        n += 1
    return sorted(items, key=lambda i: i.t)


def day_gpu_seconds(items: Iterable[Item], day: float, per_pod: Mapping[str, float] | None = None) -> float:
    """GPU-seconds the jobs ask for within the day (what runs past its end is not counted); `per_pod`:
    GPU equivalents of a pod by item name instead of item.gpus (slices)."""
    return sum(
        (per_pod or {}).get(i.name, i.gpus) * i.pods * max(min(i.runtime, day - i.t), 0.0) for i in items
    )


def gang_share(trace: Iterable[Item], day: float) -> float:
    """Multi-node jobs' share of the day's GPU-hours."""
    items = list(trace)
    total = day_gpu_seconds(items, day)
    return day_gpu_seconds([i for i in items if i.pods > 1], day) / total if total else 0.0


# ----------------------------------------------------------------------------- the slice day
SLICE_TEAMS = {"a": 8, "b": 8}
A100_80 = "NVIDIA-A100-SXM4-80GB"
NOTEBOOK_SHARE = "10Gi"  # a notebook's working set: a 1g.10gb
INFERENCE_SHARE = "30Gi"  # a 7-13B model served with its KV cache: a 3g.40gb
# The same 16 GPUs advertised two ways (what the NVIDIA device plugin shows; mig.config set by an admin):
# sliced, node 1 has 3 GPUs cut into 7 x 1g.10gb and 5 whole, node 2 has 3 cut into 2 x 3g.40gb and 5
# whole (the layout sized for the day's peak of notebooks and services); whole, every GPU uncut.
SLICE_NODES = {
    "trace-mig-1": {"nvidia.com/gpu": "5", "nvidia.com/mig-1g.10gb": "21"},
    "trace-mig-2": {"nvidia.com/gpu": "5", "nvidia.com/mig-3g.40gb": "6"},
}
WHOLE_NODES = {"trace-whole-1": {"nvidia.com/gpu": "8"}, "trace-whole-2": {"nvidia.com/gpu": "8"}}
SLICE_POOL, WHOLE_POOL = "slice-pool", "whole-pool"
SLICE_CAPACITY = 16  # physical GPUs of either pool
GPUS_CUT = 6  # of them cut into slices in the sliced pool


def slice_day(seed: int, day: float, *, sliced: bool) -> list[Item]:
    """The slice day. Notebooks: 16 per team, started 8-17 h, 2-6 h each; inference: per team one
    service all day and two for 6-10 h of the working day; fine-tunes: 14 per team of 1 or 2 whole GPUs,
    lognormal (median 2 h, at most 8 h). `sliced`: notebooks and inference ask gpu-share (one slice)
    in slice-pool, else one whole GPU in whole-pool; the same draws either way (same seed, same day)."""
    rng = random.Random(seed)
    k = day / REAL_DAY
    pool = SLICE_POOL if sliced else WHOLE_POOL
    items: list[Item] = []
    for team in SLICE_TEAMS:
        for n in range(16):
            t, hours = rng.uniform(8, 17), rng.uniform(2, 6)
            share = NOTEBOOK_SHARE if sliced else None
            items.append(
                Item(
                    t * 3600 * k,
                    team,
                    "notebook",
                    f"nb-{team}-{n}",
                    1,
                    1,
                    pool,
                    "medium",
                    hours * 3600 * k,
                    share,
                )
            )
        items.append(
            Item(
                0.5,
                team,
                "inference",
                f"serve-{team}-0",
                1,
                1,
                pool,
                "high",
                day,
                INFERENCE_SHARE if sliced else None,
            )
        )
        for n in (1, 2):
            t, hours = rng.uniform(8, 12), rng.uniform(6, 10)
            share = INFERENCE_SHARE if sliced else None
            items.append(
                Item(
                    t * 3600 * k,
                    team,
                    "inference",
                    f"serve-{team}-{n}",
                    1,
                    1,
                    pool,
                    "high",
                    hours * 3600 * k,
                    share,
                )
            )
        for n in range(14):
            t = rng.uniform(0, 22) * 3600 * k
            gpus = rng.choice([1, 2])
            minutes = min(rng.lognormvariate(math.log(120), 0.8), 8 * 60)
            prio = rng.choice(["low", "medium"])
            items.append(Item(t, team, "training", f"ft-{team}-{n}", gpus, 1, pool, prio, minutes * 60 * k))
    return sorted(items, key=lambda i: i.t)


def slice_equivalents(item: Item) -> float:
    """GPU equivalents one pod of the item holds by the quota rule (gpuctl.domain.sharing): a 1g.10gb
    1/7, a 3g.40gb 1/2, a whole GPU 1."""
    if item.share is None:
        return float(item.gpus)
    return {NOTEBOOK_SHARE: 1 / 7, INFERENCE_SHARE: 1 / 2}[item.share]


def fake_node(name: str, labels: Mapping[str, str], alloc: Mapping[str, str]) -> dict:
    """A KWOK node advertising `alloc` besides cpu, memory and pods (tests.integration.fake_nodes' shape),
    labelled as the trace day's."""
    return shared_fake_node(name, {"runwhere.ai/trace-day": "true", **labels}, alloc)


def gang_nodes() -> list[dict]:
    return [
        fake_node(
            n,
            {BLOCK_LABEL: "b1", RACK_LABEL: rack, "nvidia.com/gpu.product": A100_80},
            {"nvidia.com/gpu": "8"},
        )
        for n, rack in GANG_RACKS.items()
    ]


def slice_nodes(*, sliced: bool) -> list[dict]:
    labels = {"nvidia.com/gpu.product": A100_80, "nvidia.com/gpu.count": "8"}
    if sliced:
        labels["nvidia.com/mig.strategy"] = "mixed"
    return [fake_node(n, labels, alloc) for n, alloc in (SLICE_NODES if sliced else WHOLE_NODES).items()]


def pool_yaml(day: str, *, sliced: bool = True) -> str:
    """The day's `kind: pool` document (both designs label and taint the nodes with it)."""
    if day == "gangs":
        nodes = "".join(f"  {n}: {{gpu-type: A100-80G}}\n" for n in GANG_RACKS)
        head = f"kind: pool\npool: {{name: {GANG_POOL}}}\ntopology: [{BLOCK_LABEL}, {RACK_LABEL}]\n"
        return f"{head}nodes:\n{nodes}"
    pool, names = (SLICE_POOL, SLICE_NODES) if sliced else (WHOLE_POOL, WHOLE_NODES)
    nodes = "".join(f"  {n}: {{gpu-type: A100-80G}}\n" for n in names)
    return f"kind: pool\npool: {{name: {pool}}}\nnodes:\n{nodes}"


def day_spec_yaml(item: Item, ns: str, declared: int | None) -> str:
    """The item's gpuctl YAML: `nodes` for a gang, `gpu-share` for a slice, maxRuntime when declared."""
    limit = f", maxRuntime: {declared}" if declared else ""
    job = f"job: {{name: {item.name}, namespace: {ns}, priority: {item.priority}{limit}}}"
    gpu = f"gpu: {item.gpus}" + (f", gpu-share: {item.share}" if item.share else "")
    nodes = f", nodes: {item.pods}" if item.pods > 1 else ""
    res = f"resources: {{pool: {item.pool}, {gpu}{nodes}, cpu: 2, memory: 8Gi}}"
    if item.kind == "training":
        run = max(round(item.runtime), 1)
        env = f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {run}s}}]}}"
        return f"kind: training\n{job}\n{env}\n{res}\n"
    if item.kind == "notebook":
        return f"kind: notebook\n{job}\nenvironment: {{image: jupyter}}\nservice: {{port: 8888}}\n{res}\n"
    return (
        f"kind: inference\n{job}\nenvironment: {{image: vllm}}\nservice: {{replicas: 1, port: 8000}}\n{res}\n"
    )


def job_class(item: Item) -> str:
    """The rows the days' tables split waits by: gang (several nodes), training (one pod), notebook,
    inference."""
    return "gang" if item.pods > 1 else item.kind
