"""Reads against kubectl on the demo cluster: `gpuctl get jobs -A`, `gpuctl get pools` and one
`gpuctl create -f JOB --dry-run=server`, each paired with `kubectl get pods -A` in the same round.

    python bench/reads.py [--runs 40] [--check] [--keep]     # start (or reuse) the demo cluster, measure
    python bench/reads.py --requests                         # what each command asks the API server
    python bench/reads.py --profile "get pools"              # cProfile of one command, in-process

The cluster is hack/demo.sh's (its four pools, two team quotas and sample jobs, webhook and
`gpuctl serve` beside it), started with run dir $GPUCTL_BENCH_RUN (default /tmp/gpuctl-bench-reads) and
port offset $GPUCTL_BENCH_PORT_OFFSET (default 520); a cluster already running there is reused, and
left running (--keep also leaves one this run started; hack/cluster/down.sh stops it).

What is measured: the CPU time (user + sys, of the process and its threads, from os.wait4) of whole
processes, as a user runs them: the console script of this venv and the kubectl binary
hack/cluster/build.sh builds. The machine is shared, so wall time says little and even CPU time drifts
with the load (caches, frequency): every round runs each command once, in a shuffled order, after two
warm-up rounds, and each gpuctl command's CPU is divided by the CPU of the `kubectl get pods -A` of the
same round. The figure is the median of those paired ratios, with their 25th and 75th percentiles as
the spread; the ratio of the medians is printed beside it. (`perf stat -e instructions`, steadier than
CPU time, is not available on this VM: the counter reads <not supported>.)

References beside the targets: `kubectl create -f --dry-run=server` of the very objects gpuctl's create
sends (its `--dry-run=client -o json`), and the floors of a Python command: `python -c pass`, `import
pydantic`, `import gpuctl.spec` (the YAML models create validates with). Targets (issue 39): get jobs
-A and get pools <= 1.5x kubectl get pods -A; `--check` exits 1 when one is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.cli import default_gpuctl, default_kubectl  # noqa: E402 - after the path

RUN = Path(os.environ.get("GPUCTL_BENCH_RUN", "/tmp/gpuctl-bench-reads"))
OFFSET = os.environ.get("GPUCTL_BENCH_PORT_OFFSET", "520")
TARGET = 1.5
REFERENCE = "kubectl get pods -A"
TARGETED = ("gpuctl get jobs -A", "gpuctl get pools")
# The job create --dry-run=server submits: the demo's first job under a name no job has.
DRY_RUN_JOB = (
    "kind: training\n"
    "job: {name: bench-dry-run, namespace: team-a, priority: high}\n"
    "environment:\n"
    "  image: pytorch/pytorch:2.2.0-cuda12.1-cudnn8-runtime\n"
    '  command: ["torchrun", "train.py"]\n'
    "resources: {pool: training-pool, gpu: 8, cpu: 8, memory: 64Gi}\n"
)


def cluster_running() -> bool:
    pid = RUN / "pids" / "kube-apiserver"
    try:
        os.kill(int(pid.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def start_demo() -> None:
    """hack/demo.sh on RUN and OFFSET: the demo's cluster, platform, pools, quotas and jobs."""
    env = {**os.environ, "GPUCTL_TESTBED_RUN": str(RUN), "GPUCTL_TESTBED_PORT_OFFSET": OFFSET}
    env.pop("KUBECONFIG", None)
    t0 = time.monotonic()
    p = subprocess.run([str(ROOT / "hack/demo.sh")], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"hack/demo.sh failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    print(f"setup: hack/demo.sh in {time.monotonic() - t0:.0f}s (run dir {RUN}, port offset {OFFSET})")


def stop_demo() -> None:
    env = {**os.environ, "GPUCTL_TESTBED_RUN": str(RUN), "GPUCTL_TESTBED_PORT_OFFSET": OFFSET}
    subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True, check=False)


def commands(gpuctl: list[str], kubectl: Path, kc: str, work: Path) -> dict[str, list[str]]:
    job = work / "job.yaml"
    job.write_text(DRY_RUN_JOB)
    # The objects gpuctl's create sends, for kubectl to create the same way.
    objects = subprocess.run(
        [*gpuctl, "create", "-f", str(job), "--dry-run=client", "-o", "json", "--kubeconfig", kc],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (work / "objects.json").write_text(objects)
    k, py = [str(kubectl), "--kubeconfig", kc], sys.executable
    return {
        REFERENCE: [*k, "get", "pods", "-A"],
        "gpuctl get jobs -A": [*gpuctl, "get", "jobs", "-A", "--kubeconfig", kc],
        "gpuctl get pools": [*gpuctl, "get", "pools", "--kubeconfig", kc],
        "gpuctl create --dry-run=server": [
            *gpuctl,
            "create",
            "-f",
            str(job),
            "--dry-run=server",
            "--kubeconfig",
            kc,
        ],
        "kubectl create --dry-run=server": [
            *k,
            "create",
            "-f",
            str(work / "objects.json"),
            "--dry-run=server",
        ],
        "python -c pass": [py, "-c", "pass"],
        "python -c 'import pydantic'": [py, "-c", "import pydantic"],
        "python -c 'import gpuctl.spec'": [py, "-c", "import gpuctl.spec"],
    }


def run_once(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds user+sys, wall seconds) of one whole process (its threads included)."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read() if p.stderr else b""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped already: keep Popen from waiting again
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}: {err.decode(errors='replace')[-1000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[1], q[2]


def measure(cmds: dict[str, list[str]], runs: int, seed: int = 39) -> dict[str, dict]:
    cpu: dict[str, list[float]] = {n: [] for n in cmds}
    wall: dict[str, list[float]] = {n: [] for n in cmds}
    ratio: dict[str, list[float]] = {n: [] for n in cmds}
    order = list(cmds)
    rng = random.Random(seed)
    for round_ in range(runs + 2):
        rng.shuffle(order)
        this = {name: run_once(cmds[name]) for name in order}
        if round_ < 2:  # warm-up: page cache, .pyc files, the API server's watch caches
            continue
        for name, (c, w) in this.items():
            cpu[name].append(c)
            wall[name].append(w)
            ratio[name].append(c / this[REFERENCE][0])
    return {
        name: {
            "cpu_ms": statistics.median(cpu[name]) * 1000,
            "wall_ms": statistics.median(wall[name]) * 1000,
            "ratio": quartiles(ratio[name]),
        }
        for name in cmds
    }


def report(res: dict[str, dict], runs: int) -> list[str]:
    base = res[REFERENCE]["cpu_ms"]
    print(f"\n{runs} paired rounds; CPU = user+sys of the whole process (os.wait4), medians")
    print(
        f"{'command':<34} {'CPU ms':>7} {'wall ms':>8} {'paired ratio (p25-p75)':>24} {'med/med':>8}  target"
    )
    missed = []
    for name, r in res.items():
        lo, mid, hi = r["ratio"]
        target = ""
        if name in TARGETED:
            ok = mid <= TARGET
            target = f"<= {TARGET}x {'ok' if ok else 'MISSED'}"
            missed += [] if ok else [name]
        spread = f"{mid:.2f}x ({lo:.2f}-{hi:.2f})"
        cells = f"{r['cpu_ms']:7.1f} {r['wall_ms']:8.1f} {spread:>24} {r['cpu_ms'] / base:7.2f}x"
        print(f"{name:<34} {cells}  {target}")
    return missed


# ----------------------------------------------------------------------------- in-process looks
def in_process(argv: list[str], kc: str):
    """Run one gpuctl command in this process (stdout swallowed); its exit code."""
    import contextlib
    import io

    from gpuctl.cli.main import main as cli_main

    with contextlib.redirect_stdout(io.StringIO()):
        return cli_main([*argv, "--kubeconfig", kc])


def requests_of(argv: list[str], kc: str) -> list[tuple[str, str, str, int, float]]:
    """(method, path and query, Accept, response bytes, ms) of every request one command sends."""
    from gpuctl.cluster import transport

    seen: list[tuple[str, str, str, int, float]] = []
    original_request, original_read = transport.Pool.request, transport.Response.read

    def request(self, method, path, **kw):
        t0 = time.perf_counter()
        resp = original_request(self, method, path, **kw)
        accept = (kw.get("headers") or {}).get("Accept", "")
        resp._bench = [method, path, accept.split(";")[1] if ";as=" in accept else "json", 0, t0]
        seen.append(resp._bench)
        return resp

    def read(self, amt=None):
        out = original_read(self, amt)
        if hasattr(self, "_bench"):
            self._bench[3] += len(out)
            self._bench[4] = (time.perf_counter() - self._bench[4]) * 1000 if amt is None else self._bench[4]
        return out

    transport.Pool.request, transport.Response.read = request, read
    try:
        in_process(argv, kc)
    finally:
        transport.Pool.request, transport.Response.read = original_request, original_read
    return [tuple(s) for s in seen]


def print_requests(kc: str) -> None:
    for argv in (["get", "jobs", "-A"], ["get", "pools"]):
        in_process(argv, kc)  # first: the connection and the caches of the API server
        rows = requests_of(argv, kc)
        print(f"\ngpuctl {' '.join(argv)}: {len(rows)} requests, {sum(r[3] for r in rows) / 1024:.1f} KiB")
        for method, path, accept, size, ms in rows:
            print(f"  {method:5} {size / 1024:7.1f} KiB {ms:6.1f} ms  {accept:<28} {path[:110]}")


def profile(argv: list[str], kc: str, top: int) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    in_process(argv, kc)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="measured rounds (default 40)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if a target (<= {TARGET}x) is missed")
    ap.add_argument("--keep", action="store_true", help="leave a cluster this run started running")
    ap.add_argument("--requests", action="store_true", help="list each read's requests, then stop")
    ap.add_argument("--profile", metavar="COMMAND", help='cProfile one command in-process ("get pools")')
    ap.add_argument("--top", type=int, default=40, help="functions --profile lists (default 40)")
    ap.add_argument("--only", action="append", help="measure only commands containing this (repeatable)")
    ap.add_argument("--gpuctl", help="gpuctl executable (default: the console script of this venv)")
    ap.add_argument("--kubectl", help="kubectl binary (default: the one hack/cluster/build.sh builds)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()

    kubectl = Path(args.kubectl) if args.kubectl else default_kubectl()
    gpuctl = [args.gpuctl] if args.gpuctl else default_gpuctl()
    kc = str(RUN / "kubeconfig")
    started = not cluster_running()
    if started:
        start_demo()
    else:
        print(f"setup: reusing the cluster of {RUN}")
    try:
        if args.requests:
            print_requests(kc)
            return 0
        if args.profile:
            in_process(args.profile.split(), kc)
            profile(args.profile.split(), kc, args.top)
            return 0
        with tempfile.TemporaryDirectory() as d:
            cmds = commands(gpuctl, kubectl, kc, Path(d))
            if args.only:
                cmds = {n: c for n, c in cmds.items() if n == REFERENCE or any(o in n for o in args.only)}
            print(f"gpuctl: {' '.join(gpuctl)}\nkubectl: {kubectl}")
            res = measure(cmds, args.runs)
        missed = report(res, args.runs)
        if args.json:
            Path(args.json).write_text(json.dumps({"runs": args.runs, "results": res}, indent=1) + "\n")
        return 1 if args.check and missed else 0
    finally:
        if started and not args.keep:
            stop_demo()


if __name__ == "__main__":
    raise SystemExit(main())
