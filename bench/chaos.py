"""Chaos suite: faults on a local gpuctl cluster while teams keep submitting jobs; nothing lost, nothing
duplicated, nothing admitted beyond quota or capacity.

    python bench/chaos.py                        # its own cluster (offset 900), full faults, then stops it
    python bench/chaos.py --short                # the CI variant's timings (tests/integration/test_chaos.py)
    python bench/chaos.py --kubeconfig RUN/kubeconfig   # reuse a running hack/cluster testbed

Bounded: every loop has a deadline and the run stops by itself (a few minutes; --short about two). It
starts what it needs next to the testbed's processes: two `gpuctl serve` replicas (leader election, short
lease) and the admission webhook registered with failurePolicy Fail for its team namespaces only.

A steady stream of gpuctl training jobs (gpuctl.service.lifecycle.submit, what `gpuctl create` and the API
run) comes from three teams while, one after the other:

- kueue       SIGKILL of Kueue, restarted 3 s later (its webhooks fail closed meanwhile);
- apiserver   kube-apiserver stopped (SIGTERM) and restarted;
- etcd        etcd paused (SIGSTOP) for 10 s (--short: 5 s), then SIGCONT;
- serve       the leading `gpuctl serve` SIGKILLed while a pool changes (a node joins, another goes
              NotReady), restarted; the other replica must take over;
- webhook     the webhook stopped: `gpuctl create` and raw `kubectl apply` get a clear error and nothing is
              half made; restarted: work flows again;
- duplicate   the same documents submitted twice at once (two `gpuctl create` processes; a CLI and a
              service call, which is what the REST API runs).

A sampler lists Workloads, Nodes and the Cohort every 0.5 s and counts violations: a team holding more GPUs
than its quota plus borrowing limit; a pool holding more GPUs than its Ready nodes have, by a Workload
admitted after the pool last shrank (Kueue does not evict running work when a node goes away, so work
admitted before the drop is not a violation). After each fault it measures the time to recover (a new job
is accepted and Kueue reserves quota for it; the Cohort equals what the Ready nodes give) and checks, from
the API server, that every accepted job exists once, has exactly one Workload and is queued, admitted or
finished. The closing table: fault, jobs submitted, lost, duplicated, quota violations, time to recover.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.webhook import free_port, make_certs  # noqa: E402
from gpuctl.cluster import ApiError, Cluster, path  # noqa: E402
from gpuctl.constants import COHORT_NAME, GPU_RESOURCE, Labels  # noqa: E402
from gpuctl.domain.objects import is_gpuctl_object  # noqa: E402
from gpuctl.domain.pools import (  # noqa: E402
    node_pool,
    node_ready,
    pool_capacities,
)
from gpuctl.domain.teams import cohort_spec_equal, desired_cohort, team_from_cluster_queue  # noqa: E402
from gpuctl.domain.workload import (  # noqa: E402
    HOLDING_QUOTA,
    WorkloadState,
    quota_reserved_at,
    reserved_gpus,
    workload_state,
)
from gpuctl.service.lifecycle import submit  # noqa: E402
from gpuctl.spec import load_text  # noqa: E402
from queues import TeamQuota, desired_objects, local_queue, team_namespace  # noqa: E402

FAULTS = ("kueue", "apiserver", "etcd", "serve", "webhook", "duplicate")
KWOK_MANAGED = "kwok.x-k8s.io/node"
POOL_A, POOL_B = "chaos-a", "chaos-b"
NODES_A, NODES_B = ("gpu-node-1", "gpu-node-2"), ("gpu-node-3",)
JOINER = "gpu-node-4"  # joins POOL_A during the serve fault
TEAM_GPUS, TEAM_BORROW = 8, 4


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# The testbed's processes (hack/cluster/up.sh writes RUN/pids/NAME; down.sh stops what those files name).


@dataclass
class Testbed:
    run: Path

    @property
    def kubeconfig(self) -> Path:
        return self.run / "kubeconfig"

    def pid(self, name: str) -> int:
        return int((self.run / "pids" / name).read_text())

    def send(self, name: str, sig: int) -> None:
        os.kill(self.pid(name), sig)

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> list[str]:
        """Stop the process, return its command line (to start it again)."""
        pid = self.pid(name)
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            try:
                if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                    break
            except OSError:
                break
            time.sleep(0.05)
        return [c.decode() for c in cmd]

    def start(self, name: str, cmd: list[str]) -> None:
        """Start it as up.sh does (own session, output appended to its log), and record the new pid."""
        out = (self.run / "logs" / f"{name}.log").open("a")
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, cwd=ROOT)  # fmt: skip
        (self.run / "pids" / name).write_text(str(p.pid))


def up(run: Path, offset: int) -> Testbed:
    env = {**os.environ, "GPUCTL_TESTBED_RUN": str(run), "GPUCTL_TESTBED_PORT_OFFSET": str(offset)}
    subprocess.run([str(ROOT / "hack/cluster/up.sh")], env=env, check=True)
    return Testbed(run)


def down(run: Path, offset: int) -> None:
    env = {**os.environ, "GPUCTL_TESTBED_RUN": str(run), "GPUCTL_TESTBED_PORT_OFFSET": str(offset)}
    subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, check=False)


# ---------------------------------------------------------------------------------------------------------
# Processes the suite runs itself: gpuctl serve x2, the admission webhook.


@dataclass
class Proc:
    name: str
    cmd: list[str]
    log: Path
    port: int
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=self.log.open("a"), stderr=subprocess.STDOUT, cwd=ROOT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + " "):
                        return float(line.split()[1])
        except OSError:
            return None
        return None


def serve_proc(tmp: Path, kubeconfig: Path, name: str) -> Proc:
    port = free_port()
    cmd = [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", str(kubeconfig),
           "--address", "127.0.0.1", "--metrics-port", str(port), "--resync", "5",
           "--lease-namespace", "default", "--lease-name", "gpuctl-serve-chaos",
           "--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]  # fmt: skip
    return Proc(name, cmd, tmp / f"{name}.log", port)


def webhook_proc(tmp: Path, kubeconfig: Path, crt: Path, key: Path) -> Proc:
    port = free_port()
    cmd = [sys.executable, "-m", "admission", "serve", "--tls-cert", str(crt), "--tls-key", str(key),
           "--port", str(port), "--host", "127.0.0.1", "--kubeconfig", str(kubeconfig)]  # fmt: skip
    return Proc("webhook", cmd, tmp / "webhook.log", port)


def register_webhook(kube: Cluster, port: int, ca: Path, namespaces: list[str], sfx: str) -> str:
    vwc = next(
        d
        for d in yaml.safe_load_all((ROOT / "manifests/admission/webhook.yaml").read_text())
        if d["kind"] == "ValidatingWebhookConfiguration"
    )
    name = f"gpuctl-admission-chaos-{sfx}"
    vwc["metadata"] = {"name": name, "labels": {"gpuctl.runwhere.ai/testbed": "true"}}
    hooks = []
    for w in vwc["webhooks"]:
        if "namespaceSelector" not in w:
            continue  # Nodes: the suite relabels nodes itself
        w["clientConfig"] = {"url": f"https://127.0.0.1:{port}/validate",
                             "caBundle": base64.b64encode(ca.read_bytes()).decode()}  # fmt: skip
        w["namespaceSelector"] = copy.deepcopy(w["namespaceSelector"])  # the YAML anchor shares one dict
        w["namespaceSelector"]["matchExpressions"].append(
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
        )
        hooks.append(w)
    vwc["webhooks"] = hooks
    kube.apply(vwc)
    return name


# ---------------------------------------------------------------------------------------------------------
# Submissions.


def training(name: str, gpus: int, runtime: str, pool: str) -> str:
    return f"""
kind: training
job: {{name: {name}, priority: {random.choice(["high", "medium", "low"])}}}
environment: {{image: busybox, command: [sh, -c, "true"], env: [{{GPUCTL_FAKE_RUNTIME: {runtime}}}]}}
resources: {{pool: {pool}, gpu: {gpus}, cpu: 1, memory: 1Gi}}
"""


def inference(name: str, pool: str) -> str:
    return f"""
kind: inference
job: {{name: {name}, priority: medium}}
environment: {{image: vllm/vllm-openai:v0.12.0}}
service: {{replicas: 1, port: 8000}}
resources: {{pool: {pool}, gpu: 1, cpu: 1, memory: 1Gi}}
"""


@dataclass
class Submission:
    ns: str
    name: str
    phase: str  # the fault running when it was sent
    at: float
    ok: bool = False
    error: str = ""
    kind: str = "training"  # the Job audit covers training jobs; inference is checked where it is sent


@dataclass
class Ledger:
    subs: list[Submission] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    phase: str = "warmup"

    def add(self, s: Submission) -> None:
        with self.lock:
            self.subs.append(s)


def submit_one(kube: Cluster, ledger: Ledger, ns: str, name: str, text: str) -> Submission:
    s = Submission(ns, name, ledger.phase, time.time())
    try:
        results = submit(kube, load_text(text), ns, action="create")
        errs = [r.error for r in results if r.error]
        s.ok, s.error = not errs, "; ".join(e for e in errs if e)
    except Exception as e:  # the API server may be down: that is an error, not a crash
        s.error = f"{type(e).__name__}: {e}"
    ledger.add(s)
    return s


def stream(kube: Cluster, ledger: Ledger, teams: list[str], stop: threading.Event, interval: float) -> None:
    """One training job every `interval` seconds, round-robin over the teams, until stopped."""
    i = 0
    while not stop.is_set():
        ns = teams[i % len(teams)]
        pool = POOL_A if i % 4 else POOL_B
        submit_one(kube, ledger, ns, f"j{i:04d}", training(f"j{i:04d}", random.choice([1, 1, 2, 4]),
                                                           f"{random.randint(3, 10)}s", pool))  # fmt: skip
        i += 1
        stop.wait(interval)


# ---------------------------------------------------------------------------------------------------------
# The sampler: quota and capacity invariants, from the API server.


@dataclass
class Sampler:
    kube: Cluster
    teams: list[str]
    violations: list[str] = field(default_factory=list)
    samples: int = 0
    errors: int = 0
    shrunk_at: dict[str, float] = field(default_factory=dict)  # pool -> when its Ready capacity last dropped
    last_capacity: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.violations)

    def sample(self) -> None:
        kube = self.kube
        nodes = kube.list(path("Node"))
        capacity: dict[str, int] = defaultdict(int)
        for n in nodes:
            pool = node_pool(n)
            if pool and node_ready(n) and not (n.get("spec") or {}).get("unschedulable"):
                capacity[pool] += int(((n.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
        now = time.time()
        for pool, cap in list(capacity.items()) + [(p, 0) for p in self.last_capacity if p not in capacity]:
            if cap < self.last_capacity.get(pool, cap):
                self.shrunk_at[pool] = now
            self.last_capacity[pool] = cap
        limits = {}
        for cq in kube.list(path("ClusterQueue")):
            if is_gpuctl_object(cq) and cq["metadata"]["name"] in self.teams:
                tq = team_from_cluster_queue(cq)
                limits[tq.namespace] = (tq.gpu or 10**9) + (
                    tq.borrowing_limit if tq.borrowing_limit is not None else 10**9
                )
        team_used: dict[str, int] = defaultdict(int)
        pool_used: dict[str, int] = defaultdict(int)
        newest: dict[str, float] = {}
        # One list of every namespace: one consistent snapshot (per-namespace lists taken one after the
        # other could show a preempted Workload still holding quota next to its preemptor already admitted).
        for wl in kube.list(path("Workload")):
            ns = wl["metadata"].get("namespace", "")
            if ns not in self.teams or workload_state(wl) not in HOLDING_QUOTA:
                continue
                for pool, g in reserved_gpus(wl).items():
                    team_used[ns] += g
                    pool_used[pool] += g
                    at = quota_reserved_at(wl) or 0
                    newest[pool] = max(newest.get(pool, 0), at)
        found = []
        for ns, used in team_used.items():
            if used > limits.get(ns, 10**9):
                found.append(f"team {ns} holds {used} GPUs > quota+borrowing {limits[ns]}")
        for pool, used in pool_used.items():
            cap = capacity.get(pool, 0)
            # Work admitted before the pool shrank keeps running (Kueue does not evict for capacity): only
            # an admission after the drop (plus the reconciler's 5 s) beyond capacity is a violation.
            if used > cap and newest.get(pool, 0) > self.shrunk_at.get(pool, 0) + 5:
                found.append(f"pool {pool}: {used} GPUs admitted > {cap} on Ready nodes")
        with self.lock:
            self.samples += 1
            self.violations += [f"{time.strftime('%H:%M:%S')} {v}" for v in found]

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.sample()
            except Exception:  # API server down or restarting: no sample
                with self.lock:
                    self.errors += 1
            stop.wait(0.5)


# ---------------------------------------------------------------------------------------------------------
# Checks after a fault.


def cohort_matches(kube: Cluster) -> bool:
    current = kube.get_or_none(path("Cohort", COHORT_NAME))
    desired = desired_cohort(
        kube.list(path("Node")),
        kube.list(path("ResourceFlavor"), label_selector=f"{Labels.MANAGED_BY}=gpuctl"),
        kube.list(path("ClusterQueue"), label_selector=f"{Labels.MANAGED_BY}=gpuctl"),
    )
    return current is not None and cohort_spec_equal(current, desired)


def until(check: Callable[[], object], timeout: float, interval: float = 0.2) -> float | None:
    """Seconds until check() is truthy (exceptions count as false), None on timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if check():
                return time.monotonic() - t0
        except Exception:
            pass
        time.sleep(interval)
    return None


def recover(
    kube: Cluster, ledger: Ledger, teams: list[str], tag: str, timeout: float
) -> tuple[float | None, float | None]:
    """(seconds until work flows again: a new job is accepted and Kueue reserves quota for some Workload;
    seconds until the Cohort equals what the Ready nodes give), each None on timeout."""
    t0, wall0 = time.monotonic(), time.time()
    n = iter(range(10**6))

    def accepted() -> bool:
        name = f"probe-{tag}-{next(n)}"
        return submit_one(kube, ledger, teams[-1], name, training(name, 1, "2s", POOL_A)).ok

    def admitting() -> bool:
        return any(
            (quota_reserved_at(wl) or 0) >= wall0 - 1
            for ns in teams
            for wl in kube.list(path("Workload", namespace=ns))
        )

    cohort = until(lambda: cohort_matches(kube), timeout, 0.2)
    for check in (accepted, admitting):
        left = timeout - (time.monotonic() - t0)
        if left <= 0 or until(check, left, 0.5) is None:
            return None, cohort
    return time.monotonic() - t0, cohort


def retry(fn: Callable[[], Any], timeout: float = 120) -> Any:
    """fn(), again while the API server answers 429/5xx: after a restart (or etcd's pause) its watch caches
    re-initialise for a while ("storage is (re)initializing")."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except ApiError as e:
            if e.status not in (429, 500, 503) or time.monotonic() > deadline:
                raise
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(1)


@dataclass
class Audit:
    submitted: int
    accepted: int
    lost: list[str]
    duplicated: list[str]
    half_made: list[str]


def audit(kube: Cluster, subs: list[Submission], settle: float) -> Audit:
    """Every accepted job exists once with exactly one Workload, queued/admitted/finished; rejected ones
    left nothing behind."""
    accepted = [s for s in subs if s.ok and s.kind == "training"]

    def state() -> tuple[list[str], list[str]]:
        lost, dup = [], []
        by_ns: dict[str, list] = defaultdict(list)
        for ns in {s.ns for s in subs}:
            by_ns[ns] = kube.list(path("Workload", namespace=ns))
        for s in accepted:
            job = kube.get_or_none(path("Job", s.name, s.ns))
            if job is None:
                lost.append(f"{s.ns}/{s.name}: Job missing")
                continue
            uid = job["metadata"]["uid"]
            wls = [
                w
                for w in by_ns[s.ns]
                if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])
            ]
            if len(wls) > 1:
                dup.append(f"{s.ns}/{s.name}: {len(wls)} Workloads")
            elif not wls or workload_state(wls[0]) not in (
                WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED,
                WorkloadState.FINISHED, WorkloadState.PREEMPTED,
            ):  # fmt: skip
                lost.append(f"{s.ns}/{s.name}: Workload {'missing' if not wls else workload_state(wls[0])}")
        return lost, dup

    lost, dup = retry(state)
    deadline = time.monotonic() + settle
    while (lost or dup) and time.monotonic() < deadline:  # Kueue may still be catching up
        time.sleep(1)
        lost, dup = retry(state)
    half = []
    for s in subs:
        if s.ok:
            continue
        # A rejected training submission leaves either nothing or (if the API server applied the write but
        # the answer was lost) a complete Job; a rejected multi-object job must not leave half.
        dep = kube.get_or_none(path("Deployment", s.name, s.ns))
        svc = kube.get_or_none(path("Service", f"svc-{s.name}", s.ns))
        if (dep is None) != (svc is None):
            half.append(
                f"{s.ns}/{s.name}: Deployment {'present' if dep else 'missing'}, "
                f"Service {'present' if svc else 'missing'}"
            )
    return Audit(len(subs), len(accepted), lost, dup, half)


# ---------------------------------------------------------------------------------------------------------
# Faults.


@dataclass
class Ctx:
    tb: Testbed
    kube: Cluster
    ledger: Ledger
    sampler: Sampler
    teams: list[str]
    serves: list[Proc]
    webhook: Proc
    tmp: Path
    short: bool
    kubectl: str
    notes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost_extra: int = 0  # inference jobs found incomplete (outside the Job audit)

    def kc(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.kubectl, "--kubeconfig", str(self.tb.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=60)  # fmt: skip

    def gpuctl(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "KUBECONFIG": str(self.tb.kubeconfig)}
        return subprocess.run([sys.executable, "-m", "gpuctl.main", *args], capture_output=True, text=True,
                              timeout=120, env=env, cwd=ROOT)  # fmt: skip


def wait_api(kube: Cluster, timeout: float = 120) -> None:
    if until(lambda: kube.request("GET", "/readyz", raw=True).status == 200, timeout, 0.3) is None:
        raise RuntimeError("API server not ready")


def fault_kueue(c: Ctx) -> None:
    cmd = c.tb.stop("kueue", signal.SIGKILL)
    time.sleep(3)
    c.tb.start("kueue", cmd)


def fault_apiserver(c: Ctx) -> None:
    cmd = c.tb.stop("kube-apiserver", signal.SIGTERM)
    time.sleep(1)
    c.tb.start("kube-apiserver", cmd)
    wait_api(c.kube)


def fault_etcd(c: Ctx) -> None:
    c.tb.send("etcd", signal.SIGSTOP)
    try:
        time.sleep(5 if c.short else 10)
    finally:
        c.tb.send("etcd", signal.SIGCONT)


def _leader(c: Ctx) -> Proc | None:
    leading = [p for p in c.serves if p.alive() and p.metric("gpuctl_serve_leader") == 1]
    return leading[0] if len(leading) == 1 else None


def set_ready(kube: Cluster, name: str, ready: bool) -> None:
    """As a kubelet would: NotReady = KWOK lets go of the node and Ready turns False; Ready = KWOK again."""
    if ready:
        kube.merge_patch(path("Node", name), {"metadata": {"annotations": {KWOK_MANAGED: "fake"}}})
        return
    kube.merge_patch(path("Node", name), {"metadata": {"annotations": {KWOK_MANAGED: None}}})
    node = kube.get(path("Node", name))
    conds = node["status"]["conditions"]
    for cond in conds:
        if cond["type"] == "Ready":
            cond["status"], cond["reason"] = "False", "KubeletNotReady"
    kube.merge_patch(path("Node", name, subresource="status"), {"status": {"conditions": conds}})


def fault_serve(c: Ctx) -> None:
    leader = None
    if until(lambda: _leader(c), 30) is not None:
        leader = _leader(c)
    # The pool changes and the leader dies in the middle of it.
    c.kube.merge_patch(path("Node", JOINER), {"metadata": {"labels": {Labels.POOL: POOL_A}}})
    if leader is not None:
        leader.stop(signal.SIGKILL)
        c.notes["serve"].append(f"killed leader {leader.name}")
    else:
        c.notes["serve"].append("no single leader found to kill")
    set_ready(c.kube, NODES_A[1], False)
    time.sleep(2)
    set_ready(c.kube, NODES_A[1], True)
    if leader is not None:
        leader.start()


def fault_webhook(c: Ctx) -> None:
    c.webhook.stop(signal.SIGKILL)
    ns = c.teams[0]
    name = f"wh-{uuid.uuid4().hex[:4]}"
    f = c.tmp / f"{name}.yaml"
    f.write_text(inference(name, POOL_A))
    p = c.gpuctl("create", "-f", str(f), "-n", ns)
    clear = p.returncode != 0 and "webhook" in (p.stderr + p.stdout)
    c.notes["webhook"].append(
        f"gpuctl create while down: exit {p.returncode}, error names the webhook: {clear}"
    )
    c.ledger.add(
        Submission(
            ns, name, "webhook", time.time(), ok=p.returncode == 0, error=p.stderr[-300:], kind="inference"
        )
    )
    if not clear:
        c.notes["webhook"].append(f"gpuctl said: {(p.stderr + p.stdout)[-400:]}")
    raw = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-raw", "namespace": ns,
           "labels": {Labels.KUEUE_QUEUE: "default", Labels.POOL: POOL_A}},
           "spec": {"suspend": True, "template": {"spec": {
               "restartPolicy": "Never", "nodeSelector": {Labels.POOL: POOL_A},
               "containers": [{"name": "m", "image": "busybox",
                               "resources": {"limits": {GPU_RESOURCE: "1"}}}],
           }}}}  # fmt: skip
    r = c.kc("apply", "-f", "-", input=yaml.safe_dump(raw))
    c.notes["webhook"].append(
        f"raw kubectl apply while down: exit {r.returncode}, "
        f"'failed calling webhook' in error: {'failed calling webhook' in r.stderr}"
    )
    time.sleep(2)
    c.webhook.start()
    until(lambda: urllib.request.urlopen(
        urllib.request.Request(f"https://127.0.0.1:{c.webhook.port}/readyz"),
        context=_insecure(), timeout=1).status == 200, 30)  # fmt: skip


def _insecure():
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def fault_duplicate(c: Ctx) -> None:
    ns = c.teams[1]
    for kind, text in (("inference", inference), ("training", None)):
        name = f"dup-{kind[:3]}-{uuid.uuid4().hex[:4]}"
        body = text(name, POOL_A) if text else training(name, 1, "5s", POOL_A)
        f = c.tmp / f"{name}.yaml"
        f.write_text(body)
        # Two CLIs at once.
        procs = [subprocess.Popen([sys.executable, "-m", "gpuctl.main", "create", "-f", str(f), "-n", ns],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                  env={**os.environ, "KUBECONFIG": str(c.tb.kubeconfig)})
                 for _ in range(2)]  # fmt: skip
        outs = [p.communicate(timeout=120) for p in procs]
        codes = [p.returncode for p in procs]
        c.notes["duplicate"].append(f"{kind}: two CLIs -> exit codes {sorted(codes)}")
        c.ledger.add(
            Submission(
                ns,
                name,
                "duplicate",
                time.time(),
                ok=0 in codes,
                error=";".join(o[1][-200:] for o in outs),
                kind=kind,
            )
        )
        if kind == "training":
            # CLI and a service call (the REST API's implementation) at once, a second document.
            name2 = f"{name}-b"
            f2 = c.tmp / f"{name2}.yaml"
            f2.write_text(training(name2, 1, "5s", POOL_A))
            cli = subprocess.Popen([sys.executable, "-m", "gpuctl.main", "create", "-f", str(f2), "-n", ns],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                   env={**os.environ, "KUBECONFIG": str(c.tb.kubeconfig)})  # fmt: skip
            res = submit(c.kube, load_text(f2.read_text()), ns, action="create")
            cli.communicate(timeout=120)
            ok = cli.returncode == 0 or not any(r.error for r in res)
            c.notes["duplicate"].append(
                f"training: CLI exit {cli.returncode}, "
                f"API call {'ok' if not any(r.error for r in res) else 'refused'}"
            )
            c.ledger.add(Submission(ns, name2, "duplicate", time.time(), ok=ok))
        if kind == "inference":
            dep = c.kube.get_or_none(path("Deployment", name, ns))
            svc = c.kube.get_or_none(path("Service", f"svc-{name}", ns))
            c.notes["duplicate"].append(
                f"inference after both: Deployment {dep is not None}, Service {svc is not None}"
            )
            # Inference is not a Job: accounted for here (it exists once, whole), not in the Job audit.
            if 0 in codes and (dep is None or svc is None):
                c.notes["duplicate"].append("LOST: accepted inference job is missing a part")
                c.lost_extra += 1


FAULT_FNS: dict[str, Callable[[Ctx], None]] = {
    "kueue": fault_kueue,
    "apiserver": fault_apiserver,
    "etcd": fault_etcd,
    "serve": fault_serve,
    "webhook": fault_webhook,
    "duplicate": fault_duplicate,
}


# ---------------------------------------------------------------------------------------------------------
# The run.


@dataclass
class Row:
    fault: str
    submitted: int
    accepted: int
    lost: int
    duplicated: int
    violations: int
    recover_s: float | None
    notes: list[str]
    cohort_s: float | None = None
    half_made: int = 0


def setup(kube: Cluster, sfx: str) -> list[str]:
    teams = [f"chaos-{sfx}-{t}" for t in "abc"]
    for pool, nodes in ((POOL_A, NODES_A), (POOL_B, NODES_B)):
        for n in nodes:
            kube.merge_patch(path("Node", n), {"metadata": {"labels": {Labels.POOL: pool}}})
    kube.merge_patch(path("Node", JOINER), {"metadata": {"labels": {Labels.POOL: None}}})
    quotas = [
        TeamQuota(namespace=t, quota_name="chaos", gpu=TEAM_GPUS, borrowing_limit=TEAM_BORROW) for t in teams
    ]
    for obj in [*desired_objects(pool_capacities(kube.list(path("Node")), [POOL_A, POOL_B]), quotas),
                *(team_namespace(q) for q in quotas), *(local_queue(t) for t in teams)]:  # fmt: skip
        kube.apply(obj)
    return teams


def run(tb: Testbed, faults: list[str], short: bool, kubectl: str) -> list[Row]:
    kube = Cluster.connect(kubeconfig=str(tb.kubeconfig))
    sfx = uuid.uuid4().hex[:4]
    tmp = Path(tempfile.mkdtemp(prefix="gpuctl-chaos-"))
    teams = setup(kube, sfx)
    ca, crt, key = make_certs(tmp)
    webhook = webhook_proc(tmp, tb.kubeconfig, crt, key)
    serves = [serve_proc(tmp, tb.kubeconfig, f"serve-{i}") for i in (1, 2)]
    vwc = ""
    ledger = Ledger()
    sampler = Sampler(kube, teams)
    stop = threading.Event()
    rows: list[Row] = []
    threads: list[threading.Thread] = []
    try:
        webhook.start()
        for s in serves:
            s.start()
        until(lambda: urllib.request.urlopen(urllib.request.Request(f"https://127.0.0.1:{webhook.port}/readyz"),
                                             context=_insecure(), timeout=1).status == 200, 60)  # fmt: skip
        vwc = register_webhook(kube, webhook.port, ca, teams, sfx)
        time.sleep(2)
        c = Ctx(tb, kube, ledger, sampler, teams, serves, webhook, tmp, short, kubectl)
        threads = [
            threading.Thread(target=sampler.run, args=(stop,), daemon=True),
            threading.Thread(
                target=stream, args=(kube, ledger, teams, stop, 1.0 if short else 0.5), daemon=True
            ),
        ]
        for t in threads:
            t.start()
        time.sleep(5 if short else 15)
        for fault in faults:
            ledger.phase = fault
            n0, v0 = len(ledger.subs), sampler.count()
            log(f"fault {fault}")
            FAULT_FNS[fault](c)
            rec, cohort = recover(kube, ledger, teams, f"{fault}-{sfx}", 60 if short else 120)
            log(
                f"  work flows after {rec if rec is None else round(rec, 2)} s, Cohort right after {cohort} s"
            )
            time.sleep(3 if short else 10)
            subs = [s for s in ledger.subs[n0:]]
            a = audit(kube, subs, 30 if short else 60)
            extra, c.lost_extra = c.lost_extra, 0
            rows.append(Row(fault, a.submitted, a.accepted, len(a.lost) + extra, len(a.duplicated),
                            sampler.count() - v0, rec,
                            [*c.notes[fault], *a.lost, *a.duplicated, *a.half_made], cohort,
                            len(a.half_made)))  # fmt: skip
        stop.set()
        for t in threads:
            t.join(10)
        final = audit(kube, ledger.subs, 60)
        rows.append(Row("all (final)", final.submitted, final.accepted, len(final.lost),
                        len(final.duplicated), sampler.count(), None,
                        [*final.lost, *final.duplicated, *final.half_made][:10], None,
                        len(final.half_made)))  # fmt: skip
        if sampler.violations:
            log("violations:\n  " + "\n  ".join(sampler.violations[:20]))
        log(f"sampler: {sampler.samples} samples, {sampler.errors} failed (API server unavailable)")
    finally:
        stop.set()
        if vwc:
            with contextlib.suppress(Exception):
                kube.delete(path("ValidatingWebhookConfiguration", vwc))
        for p in [webhook, *serves]:
            p.stop()
        with contextlib.suppress(Exception):
            set_ready(kube, NODES_A[1], True)
        for t in teams:  # its own namespaces (their jobs go with them)
            with contextlib.suppress(Exception):
                kube.delete(path("Namespace", t))
    return rows


def _secs(v: float | None, r: Row) -> str:
    if r.fault.startswith("all"):
        return "-"
    return "FAILED" if v is None else f"{v:.1f}"


def table(rows: list[Row]) -> str:
    cols = ("submitted", "accepted", "lost", "duplicated", "quota viol.", "recover s", "Cohort s")
    head = f"{'fault':<12} " + " ".join(f"{c:>11}" for c in cols)
    lines = [head, "-" * len(head)]
    for r in rows:
        rec = (
            "-"
            if r.recover_s is None and r.fault.startswith("all")
            else ("FAILED" if r.recover_s is None else f"{r.recover_s:.1f}")
        )
        lines.append(
            f"{r.fault:<12} "
            + " ".join(
                f"{v:>11}"
                for v in (
                    r.submitted,
                    r.accepted,
                    r.lost,
                    r.duplicated,
                    r.violations,
                    rec,
                    _secs(r.cohort_s, r),
                )
            )
        )
    for r in rows:
        for n in r.notes:
            lines.append(f"  {r.fault}: {n}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", help="reuse a running testbed (RUN/kubeconfig); default: start one")
    ap.add_argument("--run-dir", default="/tmp/gpuctl-chaos", help="testbed run dir when starting one")
    ap.add_argument("--port-offset", type=int, default=900)
    ap.add_argument("--short", action="store_true", help="CI timings")
    ap.add_argument(
        "--faults", default=",".join(FAULTS), help=f"comma-separated subset of {','.join(FAULTS)}"
    )
    args = ap.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown fault(s) {', '.join(sorted(unknown))}; choose from {', '.join(FAULTS)}")
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cache = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache/gpuctl-testbed"))
    kubectl = str(cache / "bin" / f"k8s-{versions['K8S_VERSION']}" / "kubectl")
    started = args.kubeconfig is None
    tb = up(Path(args.run_dir), args.port_offset) if started else Testbed(Path(args.kubeconfig).parent)
    try:
        rows = run(tb, faults, args.short, kubectl)
    finally:
        if started:
            down(Path(args.run_dir), args.port_offset)
    print(table(rows))
    bad = [
        r
        for r in rows
        if r.lost
        or r.half_made
        or r.duplicated
        or r.violations
        or (not r.fault.startswith("all") and (r.recover_s is None or r.cohort_s is None or r.cohort_s > 5))
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
