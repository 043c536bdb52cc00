"""Submission next to kubectl: `gpuctl create -f` against `kubectl create -f` of the same objects, as
whole processes, in one run.

    python bench/submit.py [--kubeconfig K] [--runs 7] [--sweep 200] [--sweep-runs 2]

Against the local cluster of $KUBECONFIG (hack/cluster/up.sh; pools from examples/pools.yaml are
created when missing). It makes a team namespace with a quota whose ClusterQueue holds (stopPolicy
Hold: Kueue admits nothing, so the jobs created do not start pods that would load the machine between
runs), renders each gpuctl file with `gpuctl create --dry-run=client -o yaml` (the objects gpuctl
sends), and times, interleaved so both see the same load:

- one job: `gpuctl create -f examples/training.yaml`-like file vs `kubectl create -f` of its Job,
  with --dry-run=server (nothing stored, as issue 22 measured) and for real (a new name each run);
- a sweep: `--sweep` jobs in one file (a hyper-parameter sweep), the same two ways; the real sweep's
  jobs are deleted between runs (not timed).

Per row: median wall and CPU (user + sys of the process and its threads, os.wait4) and the ratio
gpuctl/kubectl of the medians; the machine's load average next to each. Floors: `python -c pass`
and `python -c "import gpuctl.spec"` (the interpreter, and the YAML validation layer's import:
pydantic and the models), so a ratio can be read against what any Python CLI pays. Also the API
requests each gpuctl create makes (counted in-process). Everything it created is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def kubectl_path() -> str:
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cache = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
    return str(cache / "bin" / f"k8s-{versions['K8S_VERSION']}" / "kubectl")


class Runner:
    """Runs whole processes and reads each one's CPU time from os.wait4."""

    def __init__(self, env: dict):
        self.env = env

    def run(self, cmd: list[str]) -> tuple[float, float]:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert p.stderr is not None
        err = p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:4])}... failed: {err.decode(errors='replace')[-1500:]}")
        return wall, ru.ru_utime + ru.ru_stime


def sh(cmd: list[str], env: dict, stdin: str | None = None) -> str:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, input=stdin)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:5])}... failed:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    return p.stdout


def job_yaml(name: str, ns: str, i: int = 0) -> str:
    return (
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: low}}\n"
        "environment:\n  image: pytorch/pytorch:2.2.0-cuda12.1-cudnn8-runtime\n"
        f'  command: ["torchrun", "train.py", "--lr", "0.{i:04d}"]\n'
        "resources: {pool: training-pool, gpu: 1, cpu: 1, memory: 4Gi}\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    ap.add_argument("--runs", type=int, default=7, help="runs of each single-job command")
    ap.add_argument("--sweep", type=int, default=200, help="jobs in the sweep file (0: no sweep)")
    ap.add_argument("--sweep-runs", type=int, default=2, help="runs of each sweep command")
    ap.add_argument(
        "--gpuctl",
        help="the gpuctl command to time (default: the console script next to this interpreter); e.g. "
        "'python -m gpuctl.main' with PYTHONPATH set to another checkout, to compare before and after",
    )
    args = ap.parse_args()
    if not args.kubeconfig:
        raise SystemExit("no cluster: pass --kubeconfig or set KUBECONFIG (hack/cluster/up.sh)")
    kubectl = kubectl_path()
    gpuctl_cmd = shlex.split(args.gpuctl) if args.gpuctl else [str(Path(sys.executable).parent / "gpuctl")]
    # What a user's shell has: bytecode caches written (some sandboxes set PYTHONDONTWRITEBYTECODE,
    # which makes every run compile gpuctl's modules again).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["KUBECONFIG"] = args.kubeconfig
    run = Runner(env)
    tmp = Path(tempfile.mkdtemp(prefix="gpuctl-bench-submit-"))
    ns = f"bench-submit-{uuid.uuid4().hex[:5]}"
    quota = tmp / "quota.yaml"
    quota.write_text(
        f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{cpu: 100000, memory: 100Ti}}\n"
    )
    rows: list[tuple[str, list[float], list[float], list[float], list[float], list[float]]] = []

    def render(src: Path) -> Path:
        out = src.with_suffix(".k8s.yaml")
        out.write_text(sh([*gpuctl_cmd, "create", "--dry-run=client", "-o", "yaml", "-f", str(src)], env))
        return out

    def compare(label: str, pairs: list[tuple[list[str], list[str]]], after=None) -> None:
        gw, gc, kw, kc, load = [], [], [], [], []
        for g_cmd, k_cmd in pairs:
            for who, cmd in (("k", k_cmd), ("g", g_cmd)):
                load.append(os.getloadavg()[0])
                w, c = run.run(cmd)
                (kw if who == "k" else gw).append(w)
                (kc if who == "k" else gc).append(c)
                if after:
                    after()
        rows.append((label, gw, gc, kw, kc, load))
        g, k = statistics.median(gw), statistics.median(kw)
        print(
            f"  {label:<34} gpuctl {g * 1000:7.0f} ms  kubectl {k * 1000:7.0f} ms  {g / k:5.2f}x", flush=True
        )

    try:
        pools = sh([kubectl, "get", "resourceflavors", "-o", "name"], env)
        if "training-pool" not in pools:
            sh([*gpuctl_cmd, "create", "-f", str(ROOT / "examples/pools.yaml")], env)
        sh([*gpuctl_cmd, "create", "-f", str(quota)], env)
        sh(
            [kubectl, "patch", "clusterqueue", ns, "--type=merge", "-p", '{"spec":{"stopPolicy":"Hold"}}'],
            env,
        )
        # Warm both: kubectl's discovery cache, the interpreter's bytecode cache.
        warm = tmp / "warm.yaml"
        warm.write_text(job_yaml("warm", ns))
        run.run([*gpuctl_cmd, "create", "--dry-run=server", "-f", str(warm)])
        run.run([kubectl, "create", "--dry-run=server", "-f", str(render(warm))])

        print(f"namespace {ns} (ClusterQueue held); medians of {args.runs} runs, interleaved", flush=True)
        one = tmp / "one.yaml"
        one.write_text(job_yaml("one", ns))
        one_k = render(one)
        pairs = [
            (
                [*gpuctl_cmd, "create", "--dry-run=server", "-f", str(one)],
                [kubectl, "create", "--dry-run=server", "-f", str(one_k)],
            )
        ] * args.runs
        compare("one job, --dry-run=server", pairs)
        real = []
        for i in range(args.runs):
            g, k = tmp / f"g{i}.yaml", tmp / f"k{i}.yaml"
            g.write_text(job_yaml(f"one-g{i}", ns))
            k.write_text(job_yaml(f"one-k{i}", ns))
            real.append(([*gpuctl_cmd, "create", "-f", str(g)], [kubectl, "create", "-f", str(render(k))]))
        compare("one job, create", real)

        if args.sweep:
            sweep = tmp / "sweep.yaml"
            sweep.write_text("---\n".join(job_yaml(f"sweep-{i:04d}", ns, i) for i in range(args.sweep)))
            sweep_k = render(sweep)
            pairs = [
                (
                    [*gpuctl_cmd, "create", "--dry-run=server", "-f", str(sweep)],
                    [kubectl, "create", "--dry-run=server", "-f", str(sweep_k)],
                )
            ] * args.sweep_runs
            compare(f"sweep of {args.sweep}, --dry-run=server", pairs)

            def clean() -> None:
                sh([kubectl, "delete", "jobs", "-n", ns, "-l", "runwhere.ai/job-type", "--wait=true"], env)

            clean()
            pairs = [([*gpuctl_cmd, "create", "-f", str(sweep)], [kubectl, "create", "-f", str(sweep_k)])]
            compare(f"sweep of {args.sweep}, create", pairs * args.sweep_runs, after=clean)

        floors = []
        for code in ("pass", "import gpuctl.spec"):
            ws = [run.run([sys.executable, "-c", code]) for _ in range(args.runs)]
            floors.append((code, statistics.median(w for w, _ in ws), statistics.median(c for _, c in ws)))

        print()
        print(
            f"{'OPERATION':<34} {'GPUCTL WALL':>11} {'CPU':>6} {'KUBECTL WALL':>12} {'CPU':>6} {'RATIO':>6} "
            f"{'CPU RATIO':>9} {'LOAD':>5}"
        )
        for label, gw, gc, kw, kc, load in rows:
            g, k, g2, k2 = (statistics.median(x) for x in (gw, kw, gc, kc))
            print(
                f"{label:<34} {g * 1000:9.0f}ms {g2 * 1000:4.0f}ms {k * 1000:10.0f}ms {k2 * 1000:4.0f}ms "
                f"{g / k:5.2f}x {g2 / k2:8.2f}x {statistics.mean(load):5.2f}"
            )
        for code, w, c in floors:
            print(f"floor: python -c {code!r:<22} {w * 1000:6.0f} ms wall {c * 1000:5.0f} ms CPU")
        counted = sh([sys.executable, str(Path(__file__).resolve()), "--count", ns], env)
        print(counted.strip())
    finally:
        subprocess.run(
            [kubectl, "delete", "jobs", "-n", ns, "--all", "--wait=false"], env=env, capture_output=True
        )
        subprocess.run(
            [*gpuctl_cmd, "delete", "quota", f"q-{ns}", "--delete-namespace"], env=env, capture_output=True
        )
    return 0


def count(ns: str) -> int:
    """The API requests of one `gpuctl create -f` of a job, with --dry-run=server and for real, counted
    in this process (gpuctl.cluster.Cluster.request); the job is deleted afterwards."""
    from gpuctl.cli.main import main as cli_main
    from gpuctl.cluster import client

    calls: list[str] = []
    original = client.Cluster.request

    def counting(self, method, api_path, **kw):
        calls.append(f"{method} {api_path}")
        return original(self, method, api_path, **kw)

    path = Path(tempfile.mkdtemp(prefix="gpuctl-bench-count-")) / "count.yaml"
    path.write_text(job_yaml("count", ns))
    client.Cluster.request = counting  # type: ignore[method-assign]
    for mode in ("--dry-run=server", "--dry-run=none"):
        calls.clear()
        with open(os.devnull, "w") as null:
            so, sys.stdout = sys.stdout, null
            try:
                cli_main(["create", mode, "-f", str(path)])
            finally:
                sys.stdout = so
        print(f"API requests of one `gpuctl create {mode}`: {len(calls)} ({', '.join(calls)})")
    client.Cluster.request = original  # type: ignore[method-assign]
    cli_main(["delete", "job", "count", "-n", ns])
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        sys.exit(count(sys.argv[2]))
    sys.exit(main())
