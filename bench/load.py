"""Load: four teams submit jobs through the CLI and the REST API at once, with gpuctl's webhook registered,
and Kueue's admission rate with and without the webhook in the same run.

    python bench/load.py --kubeconfig RUN/kubeconfig        # a running hack/cluster testbed
    python bench/load.py --jobs 200                          # smaller (default 1,000)

Loopback only, bounded (every phase has a deadline). It adds 20 fake 64-GPU KWOK nodes in one pool (so
Kueue, not capacity, sets the admission rate), four teams with ample quota, starts the admission webhook
(registered with failurePolicy Fail for the teams' namespaces) and the REST API (`python -m
gpuctl.server.api`, authenticated with a ServiceAccount token), then:

1. with the webhook: half the jobs through the API (one job per request, 10 concurrent clients) and half
   through the CLI (`gpuctl create -f` of 10-document files, 2 concurrent processes), all at once, while
   the teams' ClusterQueues hold (stopPolicy Hold); then released, and Kueue admits them;
2. without the webhook (configuration deleted): the same again.

Each job is a 1-GPU training job that runs 1 s. Printed: submissions/s, errors by kind, p50/p99 latency per
submission (API request; CLI process divided by its documents), and Kueue's admission rate (Workloads
reaching QuotaReserved per second, from the release to the last reservation) in each phase, and the
ratio. Kueue's own requests and the Job controller's pods never reach the webhook (matchConditions on
their identities), which is why the ratio stays near 1.
Everything it created is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chaos import register_webhook, webhook_proc  # noqa: E402
from bench.webhook import free_port, make_certs  # noqa: E402
from gpuctl.cluster import ApiError, Cluster, path  # noqa: E402
from gpuctl.constants import GPU_RESOURCE, Labels  # noqa: E402
from gpuctl.domain.pools import pool_capacities  # noqa: E402
from gpuctl.domain.workload import quota_reserved_at  # noqa: E402
from queues import TeamQuota, desired_objects, local_queue, team_namespace  # noqa: E402
from tests.integration.fake_nodes import fake_node  # noqa: E402

POOL = "load-pool"
NODES = 20  # x 64 GPUs: more than the jobs of a phase, so capacity never sets the admission rate


def job(name: str) -> str:
    return f"""kind: training
job: {{name: {name}, priority: medium}}
environment: {{image: busybox, command: [sh, -c, "true"], env: [{{GPUCTL_FAKE_RUNTIME: 1s}}]}}
resources: {{pool: {POOL}, gpu: 1, cpu: 1, memory: 1Gi}}
"""


def load_node(name: str) -> dict:
    return fake_node(
        name,
        {Labels.POOL: POOL, "load-bench": "1"},
        {GPU_RESOURCE: "64"},
        base={"cpu": "256", "memory": "4Ti", "pods": "250"},
    )


def _ms(v: list[float], p: float) -> str:
    return f"{pct(v, p) * 1e3:.0f} ms"


def pct(v: list[float], p: float) -> float:
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


class Phase:
    def __init__(self, name: str):
        self.name = name
        self.api_lat: list[float] = []
        self.cli_lat: list[float] = []
        self.errors: Counter[str] = Counter()
        self.ok = 0
        self.lock = threading.Lock()
        self.t0 = self.t1 = self.released = 0.0
        self.jobs: list[tuple[str, str]] = []


def api_submit(url: str, token: str, ns: str, name: str, ph: Phase) -> None:
    body = json.dumps({"yamlContent": job(name), "namespace": ns}).encode()
    req = urllib.request.Request(
        f"{url}/api/v1/jobs",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
        with ph.lock:
            ph.ok += 1
            ph.api_lat.append(time.perf_counter() - t)
    except urllib.error.HTTPError as e:
        with ph.lock:
            ph.errors[f"api {e.code}"] += 1
    except OSError as e:
        with ph.lock:
            ph.errors[f"api {type(e).__name__}"] += 1


def cli_submit(kubeconfig: Path, ns: str, names: list[str], tmp: Path, ph: Phase) -> None:
    f = tmp / f"{names[0]}.yaml"
    f.write_text("---\n".join(job(n) for n in names))
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "gpuctl.main", "create", "-f", str(f), "-n", ns],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        cwd=ROOT,
    )
    dt = time.perf_counter() - t
    with ph.lock:
        if p.returncode == 0:
            ph.ok += len(names)
            ph.cli_lat += [dt / len(names)] * len(names)
        else:
            ph.errors[f"cli exit {p.returncode}"] += 1


def run_phase(
    ph: Phase, n: int, teams: list[str], url: str, token: str, kubeconfig: Path, tmp: Path, tag: str
) -> None:
    names = [f"{tag}-{i:04d}" for i in range(n)]
    api_names, cli_names = names[: n // 2], names[n // 2 :]
    ph.jobs = [(teams[i % len(teams)], nm) for i, nm in enumerate(names)]
    team_of = dict((nm, ns) for ns, nm in ph.jobs)
    ph.t0 = time.time()
    with ThreadPoolExecutor(10) as ex:
        futs = [ex.submit(api_submit, url, token, team_of[nm], nm, ph) for nm in api_names]
        # CLI: files of 10 documents of one team, two processes at a time.
        batches: dict[str, list[str]] = {}
        for nm in cli_names:
            batches.setdefault(team_of[nm], []).append(nm)
        chunks = [(ns, b[i : i + 10]) for ns, b in batches.items() for i in range(0, len(b), 10)]
        with ThreadPoolExecutor(2) as cli:
            cfuts = [cli.submit(cli_submit, kubeconfig, ns, c, tmp, ph) for ns, c in chunks]
            for f in cfuts:
                f.result()
        for f in futs:
            f.result()
    ph.t1 = time.time()


def hold(kube: Cluster, teams: list[str], on: bool) -> float:
    """Stop (or restart) Kueue admitting from the teams' ClusterQueues; returns when it was released."""
    for t in teams:
        kube.merge_patch(path("ClusterQueue", t), {"spec": {"stopPolicy": "Hold" if on else "None"}})
    return time.time()


def admission_rate(kube: Cluster, ph: Phase, deadline: float) -> tuple[float, int]:
    """Workloads reserved per second, from their release (ph.released) to the last reservation."""
    want = {(ns, nm) for ns, nm in ph.jobs}
    nss = {ns for ns, _ in ph.jobs}
    while True:
        reserved: list[float] = []
        for ns in nss:
            for wl in kube.list(path("Workload", namespace=ns)):
                owner = (wl["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
                at = quota_reserved_at(wl)
                if (ns, owner) in want and at:
                    reserved.append(at)
        if len(reserved) >= ph.ok or time.time() > deadline:
            break
        time.sleep(1)
    if len(reserved) < 2:
        return 0.0, len(reserved)
    return len(reserved) / max(1.0, max(reserved) - ph.released), len(reserved)


def token_for(kube: Cluster, sa: str, ns: str) -> str:
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}})
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{sa}-bench"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        }
    )
    return kube.request(
        "POST",
        path("ServiceAccount", sa, ns, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True, help="a running hack/cluster testbed's kubeconfig")
    ap.add_argument("--jobs", type=int, default=1000, help="jobs in all (half per phase)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per phase at most")
    args = ap.parse_args(argv)
    # Stopped with SIGTERM (or SIGINT, which a background shell ignores): still delete what was created.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    kubeconfig = Path(args.kubeconfig)
    kube = Cluster.connect(kubeconfig=str(kubeconfig))
    sfx = uuid.uuid4().hex[:4]
    tmp = Path(tempfile.mkdtemp(prefix="gpuctl-load-"))
    teams = [f"load-{sfx}-{t}" for t in "abcd"]
    nodes = [f"load-{sfx}-n{i:02d}" for i in range(NODES)]
    procs: list[subprocess.Popen] = []
    vwc = ""
    try:
        for n in nodes:
            kube.create(load_node(n))
        time.sleep(3)
        quotas = [TeamQuota(namespace=t, quota_name="load", gpu=1000) for t in teams]
        pools = pool_capacities(kube.list(path("Node")), [POOL])
        for obj in [*desired_objects(pools, quotas), *(team_namespace(q) for q in quotas)]:
            kube.apply(obj)
        for t in teams:
            kube.apply(local_queue(t))
        ca, crt, key = make_certs(tmp)
        hook = webhook_proc(tmp, kubeconfig, crt, key)
        hook.start()
        procs.append(hook.proc)  # type: ignore[arg-type]
        api_port = free_port()
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpuctl.server.api",
                    "--address",
                    "127.0.0.1",
                    "--port",
                    str(api_port),
                    "--kubeconfig",
                    str(kubeconfig),
                ],
                stdout=(tmp / "api.log").open("w"),
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        )
        url = f"http://127.0.0.1:{api_port}"
        token = token_for(kube, f"load-{sfx}", "default")
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        time.sleep(3)  # the webhook's cache
        vwc = register_webhook(kube, hook.port, ca, teams, sfx)
        time.sleep(3)
        half = args.jobs // 2
        results = []
        for name, with_hook in (("with webhook", True), ("without webhook", False)):
            if not with_hook:
                kube.delete(path("ValidatingWebhookConfiguration", vwc))
                vwc = ""
                time.sleep(3)
            ph = Phase(name)
            print(f"== {name}: {half} jobs, {half // 2} through the API, {half - half // 2} through the CLI")
            # Submitted while the ClusterQueues hold, then released at once: the admission rate is Kueue's
            # (quota reservation throughput), not the submission rate.
            hold(kube, teams, True)
            run_phase(ph, half, teams, url, token, kubeconfig, tmp, f"{'w' if with_hook else 'o'}{sfx}")
            time.sleep(3)  # Kueue has made every Workload
            ph.released = hold(kube, teams, False)
            rate, reserved = admission_rate(kube, ph, time.time() + args.timeout)
            results.append((ph, rate, reserved))
            dur = ph.t1 - ph.t0
            errs = dict(ph.errors) or "none"
            print(f"   submitted {ph.ok}/{half} in {dur:.1f} s = {ph.ok / dur:.1f} jobs/s; errors: {errs}")
            print(
                f"   API request p50 {_ms(ph.api_lat, 50)}, p99 {_ms(ph.api_lat, 99)} (n={len(ph.api_lat)})"
            )
            print(
                f"   CLI per job  p50 {_ms(ph.cli_lat, 50)}, p99 {_ms(ph.cli_lat, 99)} (10 jobs per process)"
            )
            print(f"   Kueue reserved quota for {reserved} Workloads: {rate:.1f}/s after their release")
        (a, ra, _), (b, rb, _) = results
        ratio = ra / rb if rb else float("nan")
        print(
            f"\nadmission rate with / without gpuctl's webhook: {ra:.1f} / {rb:.1f} = {ratio:.2f}x (>= 0.95x)"
        )
        lat = a.api_lat + b.api_lat
        print(f"all API submissions: p99 {_ms(lat, 99)}; median {statistics.median(lat) * 1e3:.0f} ms")
        return 0 if rb and ra / rb >= 0.95 else 1
    finally:
        if vwc:
            kube.delete(path("ValidatingWebhookConfiguration", vwc))
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for t in teams:
            with contextlib.suppress(ApiError):
                kube.delete(path("Namespace", t))
        for n in nodes:
            with contextlib.suppress(ApiError):
                kube.delete(path("Node", n))
        for kind in ("ClusterQueue",):
            for t in teams:
                with contextlib.suppress(ApiError):
                    kube.delete(path(kind, t))
        with contextlib.suppress(ApiError):
            kube.delete(path("ClusterRoleBinding", f"load-{sfx}-bench"))


if __name__ == "__main__":
    sys.exit(main())
