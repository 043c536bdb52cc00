"""`gpuctl get jobs -A` against `kubectl get pods -A` on the same cluster with 2,000 gpuctl pods.

    python bench/jobs.py [--pods 2000] [--runs 5] [--keep]
    python bench/jobs.py --reuse --runs 15     # time the kept cluster again
    python bench/jobs.py --reuse --waiting     # ... with one job waiting (-o wide computes its REASON)

Starts its own local cluster (hack/cluster/up.sh, run dir /tmp/gpuctl-bench-jobs, port offset 500;
$GPUCTL_BENCH_RUN and $GPUCTL_BENCH_PORT_OFFSET choose others)
with 25 fake nodes of 110 pods each, creates a pool and a team quota through gpuctl, then 20 compute
jobs (Deployments) whose pods Kueue admits one by one (right after setup most still wait at Kueue's
gate: --reuse later for the all-running state), and times the commands as whole processes (what a
user waits for), median of --runs, plus gpuctl's own list in-process.
Prints the figures and the ratio gpuctl/kubectl.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUN = os.environ.get("GPUCTL_BENCH_RUN", "/tmp/gpuctl-bench-jobs")
ENV = {
    **os.environ,
    "GPUCTL_TESTBED_RUN": RUN,
    "GPUCTL_TESTBED_PORT_OFFSET": os.environ.get("GPUCTL_BENCH_PORT_OFFSET", "500"),
    "GPUCTL_TESTBED_NODES": "none",
}
NODES = 25


def sh(*cmd: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env or ENV, capture_output=True, text=True, check=check)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    ap.add_argument("--reuse", action="store_true", help="time an earlier --keep run's cluster again")
    ap.add_argument("--gpuctl", help="gpuctl executable (default: the console script of this venv)")
    ap.add_argument(
        "--waiting", action="store_true", help="add one job that waits, so -o wide computes a REASON"
    )
    args = ap.parse_args()
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cache = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
    kubectl = str(cache / "bin" / f"k8s-{versions['K8S_VERSION']}" / "kubectl")
    gpuctl = args.gpuctl or str(Path(sys.executable).parent / "gpuctl")
    kc = f"{RUN}/kubeconfig"
    t0 = time.monotonic()
    env = {**os.environ, "KUBECONFIG": kc}
    if args.reuse:
        return measure(args, kubectl, gpuctl, kc, env)
    sh(str(ROOT / "hack/cluster/up.sh"))
    try:
        nodes = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": f"bench-{i}",
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                        "labels": {"kubernetes.io/hostname": f"bench-{i}", "type": "kwok"},
                    },
                    "status": {
                        "addresses": [
                            {"type": "InternalIP", "address": "127.0.0.1"},
                            {"type": "Hostname", "address": f"bench-{i}"},
                        ],
                        "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "110"},
                        "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "110"},
                    },
                }
                for i in range(NODES)
            ],
        }
        subprocess.run(
            [kubectl, "--kubeconfig", kc, "apply", "-f", "-"],
            input=json.dumps(nodes),
            text=True,
            capture_output=True,
            check=True,
        )
        with tempfile.TemporaryDirectory() as d:
            pool = Path(d, "pool.yaml")
            pool.write_text(
                "kind: pool\npool: {name: bench-pool}\nnodes:\n"
                + "".join(f"  bench-{i}: {{}}\n" for i in range(NODES))
            )
            quota = Path(d, "quota.yaml")
            quota.write_text("kind: quota\nquota: {name: bench}\nnamespace:\n  bench-team: {}\n")
            time.sleep(3)  # nodes Ready
            sh(gpuctl, "create", "-f", str(pool), "-f", str(quota), env=env)
            jobs = 20
            per = args.pods // jobs
            for j in range(jobs):
                f = Path(d, f"job{j}.yaml")
                f.write_text(
                    f"kind: compute\njob: {{name: web-{j}, namespace: bench-team}}\n"
                    f"environment: {{image: nginx}}\nservice: {{replicas: {per}, port: 80}}\n"
                    "resources: {pool: bench-pool, cpu: 10m, memory: 16Mi}\n"
                )
                sh(gpuctl, "create", "-f", str(f), env=env)
        print(f"setup: cluster and {args.pods} pods requested in {time.monotonic() - t0:.0f}s", flush=True)
        deadline = time.monotonic() + 900
        while True:
            out = sh(
                kubectl, "--kubeconfig", kc, "get", "pods", "-n", "bench-team", "-o", "name", env=env
            ).stdout
            existing = len(out.split())
            if existing >= args.pods or time.monotonic() > deadline:
                break
            time.sleep(3)
        phases = sh(
            kubectl, "--kubeconfig", kc, "get", "pods", "-n", "bench-team", "--no-headers", env=env
        ).stdout
        running = sum(1 for line in phases.splitlines() if " Running " in line)
        # Kueue admits Deployment pods one Workload at a time; the rest wait SchedulingGated. Both
        # commands list all 2,000 pods either way, and run interleaved under the same background load.
        print(
            f"pods: {existing} ({running} running, the rest queued) after {time.monotonic() - t0:.0f}s",
            flush=True,
        )

        measure(args, kubectl, gpuctl, kc, env)
    finally:
        if not args.keep:
            sh(str(ROOT / "hack/cluster/down.sh"), check=False)
    return 0


def measure(args: argparse.Namespace, kubectl: str, gpuctl: str, kc: str, env: dict) -> int:
    """Whole commands, interleaved (the order rotates each round, so background load falls on all)."""
    waiting = args.waiting
    if waiting:
        # One job that waits (larger than any node): -o wide then computes its REASON from every pod.
        with tempfile.TemporaryDirectory() as d:
            f = Path(d, "big.yaml")
            f.write_text(
                "kind: training\njob: {name: too-big, namespace: bench-team}\n"
                "environment: {image: busybox}\nresources: {pool: bench-pool, cpu: 30000, memory: 1Gi}\n"
            )
            sh(gpuctl, "create", "-f", str(f), env=env)
        time.sleep(3)
    cmds = {
        "kubectl": [kubectl, "--kubeconfig", kc, "get", "pods", "-A"],
        "gpuctl": [gpuctl, "--kubeconfig", kc, "get", "jobs", "-A"],
        "wide": [gpuctl, "--kubeconfig", kc, "get", "jobs", "-A", "-o", "wide"],
        "pools": [gpuctl, "--kubeconfig", kc, "get", "pools"],
    }
    try:
        return _measure(args, cmds, kc, env)
    finally:
        if waiting:
            sh(gpuctl, "delete", "job", "too-big", "-n", "bench-team", env=env, check=False)


def _measure(args: argparse.Namespace, cmds: dict[str, list[str]], kc: str, env: dict) -> int:
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}  # the client's own CPU (user+sys): load-proof
    lines: dict[str, int] = {}
    wide_out = ""
    order = list(cmds)
    for i in range(args.runs):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            cmd = cmds[name]
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            s = time.perf_counter()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            samples[name].append(time.perf_counter() - s)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
            lines[name] = len(p.stdout.splitlines())
            if name == "wide":
                wide_out = p.stdout
    k, klines = statistics.median(samples["kubectl"]), lines["kubectl"]
    g, glines = statistics.median(samples["gpuctl"]), lines["gpuctl"]
    gw = statistics.median(samples["wide"])
    from gpuctl.cluster import Cluster
    from gpuctl.domain.workload import WAITING, workload_state
    from gpuctl.service.inventory import Inventory
    from gpuctl.service.jobs import list_job_rows
    from gpuctl.service.usage import pool_usage

    cluster = Cluster.connect(kubeconfig=kc)
    inproc = []
    for _ in range(args.runs):
        s = time.perf_counter()
        list_job_rows(cluster, None, positions=False, gpus=False)
        inproc.append(time.perf_counter() - s)
    visibility = "served" if cluster.pending_workloads("bench-team") is not None else "not served"
    # get pools in-process: as it reads now (nodes, flavors, ClusterQueue status, waiting Workloads by
    # name; no pod) against the earlier rules in the same process: also every unfinished pod (used =
    # the larger of pods and reservations, until issue 26), and also every Workload listed.
    pools_now, pools_pods, pools_all = [], [], []
    for _ in range(args.runs):
        s = time.perf_counter()
        pool_usage(Inventory(cluster, None))
        pools_now.append(time.perf_counter() - s)
        s = time.perf_counter()
        pool_usage(Inventory(cluster, None), with_pods=True)
        pools_pods.append(time.perf_counter() - s)
        inv = Inventory(cluster, None)
        s = time.perf_counter()
        inv.__dict__["waiting_workloads"] = [w for w in inv.workloads_all if workload_state(w) in WAITING]
        pool_usage(inv, with_pods=True)
        pools_all.append(time.perf_counter() - s)
    pn, pp, pa = statistics.median(pools_now), statistics.median(pools_pods), statistics.median(pools_all)
    print(f"kubectl get pods -A:        {k * 1000:7.0f} ms  ({klines - 1} rows)")
    print(f"gpuctl get jobs -A:         {g * 1000:7.0f} ms  ({glines - 1} rows)")
    print(f"gpuctl get jobs -A -o wide: {gw * 1000:7.0f} ms")
    print(f"gpuctl list in-process:     {statistics.median(inproc) * 1000:7.0f} ms (no interpreter start)")
    print(f"ratio gpuctl/kubectl:       {g / k:.2f}x   (-o wide: {gw / k:.2f}x)")
    print(f"Kueue visibility API:       {visibility} (queue positions for -o wide)")
    gp = statistics.median(samples["pools"])
    print(f"gpuctl get pools:           {gp * 1000:7.0f} ms  ({gp / k:.2f}x kubectl get pods -A)")
    print(
        f"get pools in-process:       {pn * 1000:7.0f} ms; with every pod (before issue 26): "
        f"{pp * 1000:.0f} ms ({pn / pp:.2f}x); with every pod and every Workload (before that): "
        f"{pa * 1000:.0f} ms"
    )
    reasons = [ln for ln in wide_out.splitlines()[1:] if ln.split()[4] in ("Queued", "Preempted")]
    print(
        f"-o wide waiting rows:       {len(reasons)}"
        + (f"  e.g. {' '.join(reasons[0].split())}" if reasons else "")
    )
    for name, v in samples.items():
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print(
            f"  {name:8s} p25 {q[0] * 1000:6.0f}  median {q[1] * 1000:6.0f}  p75 {q[2] * 1000:6.0f} ms"
            f"   client CPU median {statistics.median(cpu[name]) * 1000:5.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
