"""CLI start-up cost: `gpuctl version --client`, `gpuctl --help`, `get --help`, `create --help` against
`kubectl version --client`, as whole processes, measured in one run.

    python bench/cli.py [--runs 30] [--top 20] [--check] [--gpuctl PATH] [--kubectl PATH]

No cluster is needed: kubectl is the binary hack/cluster/build.sh builds (exit 2 if it is not built).
Each round runs every command once, in a shuffled order (so that no command always follows the same
neighbour), after two warm-up rounds. Per command it prints the median CPU time (user + sys of the
child and its threads, from os.wait4) and the median wall time, and the CPU ratio against kubectl from
the same rounds. The target (issue 11): `gpuctl version --client` and `gpuctl --help` <= 3x kubectl;
`--check` exits 1 when a target is missed. Then the imports that cost most in `gpuctl version --client`
(`python -X importtime`, cumulative microseconds, nested imports indented) so the next person sees what
to make lazy; and `python -c pass` as the interpreter's own floor.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 3.0
TARGETED = ("gpuctl version --client", "gpuctl --help")
GPUCTL_COMMANDS = {
    "gpuctl version --client": ["version", "--client"],
    "gpuctl --help": ["--help"],
    "gpuctl get --help": ["get", "--help"],
    "gpuctl create --help": ["create", "--help"],
}


def default_kubectl() -> Path:
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cache = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
    return cache / "bin" / f"k8s-{versions['K8S_VERSION']}" / "kubectl"


def default_gpuctl() -> list[str]:
    """The installed console script next to this interpreter (what a user runs), else the entry module."""
    script = Path(sys.executable).parent / "gpuctl"
    if script.exists():
        return [str(script)]
    found = shutil.which("gpuctl")
    return [found] if found else [sys.executable, "-m", "gpuctl.main"]


def user_env() -> dict[str, str]:
    """The environment a user's command runs in. Without PYTHONDONTWRITEBYTECODE (set in some shells and
    CI images): with it every gpuctl process compiles every module it imports from source, a third of
    a second of CPU that no installed gpuctl pays (pip writes the .pyc files at install time)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(cmd: list[str], env: dict) -> tuple[float, float]:
    """(CPU seconds user+sys, wall seconds) of one whole process."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    p.returncode = os.waitstatus_to_exitcode(status)  # already reaped; keep Popen from waiting again
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def import_profile(gpuctl: list[str], argv: list[str], env: dict) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, name with nesting indent) of every import, from -X importtime."""
    script = Path(gpuctl[0]) if len(gpuctl) == 1 else None
    shebang = script.read_bytes().split(b"\n", 1)[0] if script and script.is_file() else b""
    if shebang.startswith(b"#!") and b"python" in shebang:  # a console script: profile that very file
        cmd = [sys.executable, "-X", "importtime", str(script), *argv]
    else:
        cmd = [sys.executable, "-X", "importtime", "-m", "gpuctl.main", *argv]
    err = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative, name = line.removeprefix("import time:").split("|", 2)
        rows.append((int(cumulative), int(self_us), name.rstrip()))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="measured rounds (default 30)")
    ap.add_argument("--top", type=int, default=20, help="imports to list (default 20)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if a target (<= {TARGET}x) is missed")
    ap.add_argument("--gpuctl", help="gpuctl executable (default: the console script of this venv)")
    ap.add_argument("--kubectl", help="kubectl binary (default: the one hack/cluster/build.sh builds)")
    args = ap.parse_args()

    kubectl = Path(args.kubectl) if args.kubectl else default_kubectl()
    if not os.access(kubectl, os.X_OK):
        print(
            f"error: kubectl not built: {kubectl} is missing.\n"
            "Run hack/cluster/build.sh (about 10 minutes cold), or pass --kubectl PATH.",
            file=sys.stderr,
        )
        return 2
    gpuctl = [args.gpuctl] if args.gpuctl else default_gpuctl()
    # The same environment for every command; no kubeconfig is read by any of them.
    env = {**user_env(), "KUBECONFIG": os.devnull}
    commands = {
        "kubectl version --client": [str(kubectl), "version", "--client"],
        **{name: [*gpuctl, *argv] for name, argv in GPUCTL_COMMANDS.items()},
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
    }

    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    order = list(commands)
    rng = random.Random(11)
    for round_ in range(args.runs + 2):
        rng.shuffle(order)
        for name in order:
            c, w = run_once(commands[name], env)
            if round_ >= 2:  # two warm-up rounds: page cache, .pyc files
                cpu[name].append(c)
                wall[name].append(w)

    med_cpu = {name: statistics.median(v) * 1000 for name, v in cpu.items()}
    med_wall = {name: statistics.median(v) * 1000 for name, v in wall.items()}
    base = med_cpu["kubectl version --client"]
    print(f"gpuctl: {' '.join(gpuctl)}")
    print(f"kubectl: {kubectl}")
    print(f"{args.runs} rounds, medians; CPU = user+sys of the whole process (os.wait4)\n")
    print(f"{'command':<28} {'CPU ms':>8} {'wall ms':>8} {'CPU/kubectl':>12}  target")
    missed = []
    for name in commands:
        ratio = med_cpu[name] / base
        target = ""
        if name in TARGETED:
            ok = ratio <= TARGET
            target = f"<= {TARGET:.0f}x {'ok' if ok else 'MISSED'}"
            if not ok:
                missed.append(name)
        print(f"{name:<28} {med_cpu[name]:8.1f} {med_wall[name]:8.1f} {ratio:11.2f}x  {target}")

    rows = import_profile(gpuctl, GPUCTL_COMMANDS["gpuctl version --client"], env)
    total = sum(r[1] for r in rows)
    print(
        f"\nimports of `gpuctl version --client` (-X importtime, one run): {len(rows)} modules, "
        f"{total / 1000:.1f} ms in total; top {args.top} by cumulative time:"
    )
    print(f"{'cumul ms':>9} {'self ms':>8}  module")
    for cumulative, self_us, name in sorted(rows, reverse=True)[: args.top]:
        print(f"{cumulative / 1000:9.1f} {self_us / 1000:8.1f}  {name}")

    if missed:
        print(f"\ntarget missed: {', '.join(missed)} (> {TARGET:.0f}x kubectl)", file=sys.stderr)
        return 1 if args.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
