"""Reads against kubectl on the demo cluster: `gpuctl get jobs -A`, `gpuctl get pools` and one
`gpuctl create -f JOB --dry-run=server`, each paired with `kubectl get pods -A` in the same round.

    python bench/reads.py [--runs 40] [--check] [--keep]     # start (or reuse) the demo cluster, measure
    python bench/reads.py --requests                         # what each command asks the API server
    python bench/reads.py --profile "get pools"              # where one command's CPU goes (cProfile)
    python bench/reads.py --baseline ../before/.venv/bin/gpuctl   # and another checkout's, same rounds

The cluster is hack/demo.sh's (its four pools, two team quotas and sample jobs, webhook and
`gpuctl serve` beside it), started with run dir $GPUCTL_BENCH_RUN (default /tmp/gpuctl-bench-reads) and
port offset $GPUCTL_BENCH_PORT_OFFSET (default 520); a cluster already running there is reused, and
left running (--keep also leaves one this run started; hack/cluster/down.sh stops it).

What is measured: the CPU time (user + sys, of the process and its threads, from os.wait4) of whole
processes, as a user runs them: gpuctl as `pip install .` installs it (this venv's console script and
packages, without the editable finder `pip install -e` adds to every process: installed(); --editable
measures the dev venv as it is) and the kubectl binary hack/cluster/build.sh builds. The machine is
shared, so wall time says little and even CPU time drifts with the load (caches, frequency): every round
runs each command once, in a shuffled order, after two warm-up rounds, and each gpuctl command's CPU is
divided by the CPU of the `kubectl get pods -A` of the same round. The figure is the median of those
paired ratios, with their 25th and 75th percentiles as the spread; the ratio of the medians is printed
beside it. (`perf stat -e instructions`, steadier than CPU time, is not available on this VM: the
counter reads <not supported>.)

References beside the targets: `kubectl create -f --dry-run=server` of the very objects gpuctl's create
sends (its `--dry-run=client -o json`), and the floors of a Python command: `python -c pass`, `import
pydantic`, one pydantic model validated once (PYDANTIC_FLOOR: what any command that validates with pydantic
pays, its first validator's build and plugin lookup included), `import gpuctl.spec` (the YAML models create
validates with, built lazily: defer_build). Targets (issue 39): get jobs
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
from bench.cli import default_gpuctl, default_kubectl, user_env  # noqa: E402 - after the path

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

# The floor of a command that validates a document with pydantic: one model with one validator, built and
# used once (pydantic's schema machinery and plugin lookup load on the first build).
PYDANTIC_FLOOR = (
    "from pydantic import BaseModel, field_validator\n"
    "class M(BaseModel):\n"
    "    name: str\n"
    "    @field_validator('name')\n"
    "    @classmethod\n"
    "    def _name(cls, v): return v\n"
    "M.model_validate({'name': 'x'})\n"
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


def commands(
    gpuctl: list[str],
    kubectl: Path,
    kc: str,
    work: Path,
    baseline: str | None = None,
    py: str = sys.executable,
) -> dict[str, list[str]]:
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
    k = [str(kubectl), "--kubeconfig", kc]
    cmds = {
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
        "python: one pydantic model validated": [py, "-c", PYDANTIC_FLOOR],
        "python -c 'import gpuctl.spec'": [py, "-c", "import gpuctl.spec"],
    }
    if baseline:  # another checkout's gpuctl in the same rounds: before and after, paired alike
        for name in [n for n in cmds if n.startswith("gpuctl ")]:
            cmds[f"{name} (baseline)"] = [baseline, *cmds[name][len(gpuctl) :]]
    return cmds


def installed(script: str, work: Path) -> str:
    """A console script that runs `script`'s gpuctl as `pip install .` would: a venv of the same
    interpreter whose one .pth puts the checkout and the dev venv's site-packages on sys.path. A dev
    venv's `pip install -e .` adds setuptools' editable finder, which every process of that venv imports
    at start-up (pathlib, importlib.util, fnmatch: ~14 ms of CPU here, a sixth of a read) and which no
    installed gpuctl (a wheel, the image) has."""
    python = _python_of(script)
    dev_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    root = checkout_of(script)
    venv = work / f"installed-{abs(hash(str(root)))}"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run(
        [str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "gpuctl-bench.pth").write_text(f"{root}\n{dev_site}\n")
    body = Path(script).read_text().split("\n", 1)[1]  # pip's console script, under a new shebang
    out = venv / "bin/gpuctl"
    out.write_text(f"#!{venv / 'bin/python'}\n{body}")
    out.chmod(0o755)
    return str(out)


def _python_of(script: str) -> str:
    first = Path(script).read_bytes().split(b"\n", 1)[0].decode()
    return first[2:].strip() if first.startswith("#!") else sys.executable


def checkout_of(script: str) -> Path:
    """The source tree a gpuctl console script runs (asked of its own interpreter, from its shebang; -P:
    not the current directory's gpuctl)."""
    python = _python_of(script)
    code = "import gpuctl, pathlib; print(pathlib.Path(gpuctl.__file__).resolve().parents[1])"
    out = subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, check=True).stdout
    return Path(out.strip())


def compile_sources(*checkouts: Path) -> None:
    """The .pyc files of each checkout's packages, as `pip install` writes them."""
    for root in checkouts:
        dirs = [str(root / d) for d in ("gpuctl", "queues", "admission") if (root / d).is_dir()]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, env=user_env())


class Failed(Exception):
    """A command exited non-zero (on a loaded machine: a TLS handshake that timed out, say)."""


def run_once(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds user+sys, wall seconds) of one whole process (its threads included)."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=user_env())
    err = p.stderr.read() if p.stderr else b""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped already: keep Popen from waiting again
    if p.returncode != 0:
        raise Failed(f"{' '.join(cmd)} exited {p.returncode}: {err.decode(errors='replace')[-500:]}")
    return usage.ru_utime + usage.ru_stime, wall


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[1], q[2]


def measure(cmds: dict[str, list[str]], runs: int, seed: int = 39) -> dict[str, dict]:
    """`runs` complete rounds after two warm-up rounds; a round where a command failed is dropped
    whole (its pairs would be incomplete) and run again, at most `runs` times in all."""
    cpu: dict[str, list[float]] = {n: [] for n in cmds}
    wall: dict[str, list[float]] = {n: [] for n in cmds}
    ratio: dict[str, list[float]] = {n: [] for n in cmds}
    order = list(cmds)
    rng = random.Random(seed)
    done = dropped = warm = 0
    while done < runs:
        rng.shuffle(order)
        try:
            this = {name: run_once(cmds[name]) for name in order}
        except Failed as e:
            dropped += 1
            print(f"round dropped: {e}", file=sys.stderr)
            if dropped > runs:
                raise SystemExit("more rounds failed than were asked for") from None
            continue
        if warm < 2:  # warm-up: page cache, .pyc files, the API server's watch caches
            warm += 1
            continue
        done += 1
        if done % 5 == 0:
            print(f"  {done}/{runs} rounds", file=sys.stderr, flush=True)
        for name, (c, w) in this.items():
            cpu[name].append(c)
            wall[name].append(w)
            ratio[name].append(c / this[REFERENCE][0])
    if dropped:
        print(f"{dropped} round(s) dropped: a command failed in them")
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
        f"{'command':<45} {'CPU ms':>7} {'wall ms':>8} {'paired ratio (p25-p75)':>24} {'med/med':>8}  target"
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
        print(f"{name:<45} {cells}  {target}")
    return missed


# ----------------------------------------------------------------------------- looks inside one command
# Each runs in a fresh interpreter (`--child`), so that imports, the kubeconfig, the TLS connection and
# the access reviews are paid as a real command pays them.
LOOKS = {"get jobs -A": ["get", "jobs", "-A"], "get pools": ["get", "pools"]}
# Where the time of a command goes (cProfile's cumulative time of these functions; they nest: a
# request's time includes its decoding).
PHASES = (
    ("imports", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("kubeconfig", "gpuctl/cluster/config.py", "load"),
    ("requests (with decoding)", "gpuctl/cluster/client.py", "request"),
    ("JSON decoding", "gpuctl/cluster/client.py", "loads"),
    ("printing", "gpuctl/cli/printers.py", "emit"),
)


def child(kind: str, argv: list[str], kc: str, top: int) -> None:
    """In a fresh interpreter: the requests of one command (kind "requests") or its profile."""
    import contextlib
    import io

    if kind == "profile":
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)  # CPU, not waiting for the API server
        prof.enable()
        with contextlib.redirect_stdout(io.StringIO()):
            from gpuctl.main import main as gpuctl_main

            gpuctl_main([*argv, "--kubeconfig", kc])
        prof.disable()
        stats = pstats.Stats(prof)
        total = max(ct for _, _, _, ct, _ in stats.stats.values())  # type: ignore[attr-defined]
        print(f"gpuctl {' '.join(argv)}: {total * 1000:.0f} ms of CPU under cProfile (slower)")
        for label, where, func in PHASES:
            ct = sum(
                v[3]
                for (file, _, name), v in stats.stats.items()  # type: ignore[attr-defined]
                if name == func and file.endswith(where)
            )
            print(f"  {label:<26} {ct * 1000:7.0f} ms  {ct / total:4.0%}")
        stats.sort_stats("tottime").print_stats(top)
        return
    from gpuctl.cluster import transport

    seen: list[list] = []
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
            if amt is None:
                self._bench[4] = (time.perf_counter() - self._bench[4]) * 1000
        return out

    transport.Pool.request, transport.Response.read = request, read
    from gpuctl.main import main as gpuctl_main

    with contextlib.redirect_stdout(io.StringIO()):
        gpuctl_main([*argv, "--kubeconfig", kc])
    print(f"\ngpuctl {' '.join(argv)}: {len(seen)} requests, {sum(r[3] for r in seen) / 1024:.1f} KiB")
    for method, path, accept, size, ms in seen:
        print(f"  {method:5} {size / 1024:7.1f} KiB {ms:6.1f} ms  {accept:<8} {path[:120]}")


def look(kind: str, commands: list[str], top: int) -> None:
    for command in commands:
        argv = LOOKS.get(command, command.split())
        subprocess.run(
            [sys.executable, __file__, "--child", kind, "--top", str(top), "--", *argv],
            env=user_env(),
            check=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="measured rounds (default 40)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if a target (<= {TARGET}x) is missed")
    ap.add_argument("--keep", action="store_true", help="leave a cluster this run started running")
    ap.add_argument("--requests", action="store_true", help="list each read's requests, then stop")
    ap.add_argument("--profile", metavar="COMMAND", action="append", help='cProfile a command ("get pools")')
    ap.add_argument("--child", choices=("requests", "profile"), help=argparse.SUPPRESS)
    ap.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--top", type=int, default=40, help="functions --profile lists (default 40)")
    ap.add_argument("--only", action="append", help="measure only commands containing this (repeatable)")
    ap.add_argument("--gpuctl", help="gpuctl executable (default: the console script of this venv)")
    ap.add_argument("--kubectl", help="kubectl binary (default: the one hack/cluster/build.sh builds)")
    ap.add_argument("--baseline", metavar="GPUCTL", help="also another checkout's gpuctl (before/after)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument(
        "--editable",
        action="store_true",
        help="the dev venv's scripts as they are (editable finder too)",
    )
    args = ap.parse_args()

    kubectl = Path(args.kubectl) if args.kubectl else default_kubectl()
    gpuctl = [args.gpuctl] if args.gpuctl else default_gpuctl()
    kc = str(RUN / "kubeconfig")
    if args.child:
        child(args.child, args.argv, kc, args.top)
        return 0
    started = not cluster_running()
    if started:
        start_demo()
    else:
        print(f"setup: reusing the cluster of {RUN}")
    try:
        if args.requests or args.profile:
            compile_sources(ROOT)
            if args.requests:
                look("requests", list(LOOKS), args.top)
            if args.profile:
                look("profile", args.profile, args.top)
            return 0
        with tempfile.TemporaryDirectory() as d:
            baseline, py = args.baseline, sys.executable
            if not args.editable and len(gpuctl) == 1:  # as `pip install .` runs it (installed())
                gpuctl = [installed(gpuctl[0], Path(d))]
                baseline = baseline and installed(baseline, Path(d))
                py = str(Path(gpuctl[0]).with_name("python"))
            cmds = commands(gpuctl, kubectl, kc, Path(d), baseline, py)
            if args.only:
                cmds = {n: c for n, c in cmds.items() if n == REFERENCE or any(o in n for o in args.only)}
            print(f"gpuctl: {' '.join(gpuctl)}\nkubectl: {kubectl}")
            compile_sources(ROOT, *[checkout_of(g) for g in (args.gpuctl, args.baseline) if g])
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
