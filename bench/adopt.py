"""Cost of issue 14's pure rules at cluster scale, against the computation they sit next to.

    python bench/adopt.py [--nodes 2000] [--pools 40] [--namespaces 500] [--runs 20]

- Taints: every `gpuctl serve` reconcile now also runs gpuctl.domain.pools.stale_flavors (each pool's
  tolerations from its nodes' taints). Printed: its median time over N nodes and P flavors, and the
  ratio to desired_cohort over the same nodes (the capacity computation every reconcile already did).
- Adoption: gpuctl.service.adopt_plan.decide over an earlier gpuctl's state of N nodes (labelled,
  unlabelled, tainted) and M team namespaces with ResourceQuotas. Printed: its median time and the
  ratio to json-decoding the same objects (what reading them from the API server costs at least).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl.constants import Labels  # noqa: E402
from gpuctl.domain.pools import stale_flavors  # noqa: E402
from gpuctl.domain.teams import desired_cohort  # noqa: E402
from gpuctl.service.adopt_plan import decide  # noqa: E402
from queues import resource_flavor  # noqa: E402


def node(i: int, pool: str | None, tainted: bool) -> dict:
    labels = {"kubernetes.io/hostname": f"n{i}"}
    if pool:
        labels[Labels.POOL] = pool
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}] if tainted else []
    if i % 50 == 0:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return {
        "metadata": {"name": f"n{i}", "labels": labels},
        "spec": {"taints": taints},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
        },
    }


def median(fn, runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--pools", type=int, default=40)
    ap.add_argument("--namespaces", type=int, default=500)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()

    nodes = [node(i, f"pool-{i % a.pools}", tainted=i % 3 != 0) for i in range(a.nodes)]
    flavors = [resource_flavor(f"pool-{p}") for p in range(a.pools)]
    t_stale = median(lambda: stale_flavors(flavors, nodes), a.runs)
    t_cohort = median(lambda: desired_cohort(nodes, flavors, []), a.runs)
    print(
        f"taints: stale_flavors over {a.nodes} nodes, {a.pools} pools: {t_stale * 1e3:.2f} ms "
        f"(desired_cohort on the same: {t_cohort * 1e3:.2f} ms, ratio {t_stale / t_cohort:.2f})"
    )

    # An earlier gpuctl's cluster: 3/4 of the nodes labelled into pools, the rest unlabelled GPU nodes.
    earlier = [node(i, f"pool-{i % a.pools}" if i % 4 else None, tainted=i % 2 == 0) for i in range(a.nodes)]
    namespaces = [
        {"metadata": {"name": f"team-{i}", "labels": {Labels.NAMESPACE: "true"}}} for i in range(a.namespaces)
    ]
    rqs = [
        {
            "metadata": {"name": f"q-team-{i}", "namespace": f"team-{i}", "labels": {Labels.QUOTA: "q"}},
            "spec": {"hard": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi", "pods": "50"}},
        }
        for i in range(a.namespaces)
    ]
    text = json.dumps({"nodes": earlier, "namespaces": namespaces, "rqs": rqs})

    def plan():
        return decide(
            nodes=earlier, flavors=[], namespaces=namespaces, resource_quotas=rqs, team_namespaces=[]
        )

    t_plan = median(plan, a.runs)
    t_json = median(lambda: json.loads(text), a.runs)
    p = plan()
    print(
        f"adopt: decide over {a.nodes} nodes, {a.namespaces} team namespaces -> {len(p.pools)} pools, "
        f"{len(p.quotas)} quotas, {len(p.resource_quotas)} ResourceQuota changes: {t_plan * 1e3:.2f} ms "
        f"(json-decoding those objects: {t_json * 1e3:.2f} ms, ratio {t_plan / t_json:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
