"""Job list and job create through the REST API, next to the same operations with the CLI.

    python bench/api.py [--kubeconfig K] [--duration 10] [--concurrency 8] [--creates 200]
                        [--cli-runs 40] [--jobs 50] [--start-cluster] [--server api serve]
                        [--no-cli] [--no-create]

Against the local cluster of $KUBECONFIG (or --kubeconfig; --start-cluster starts its own with
hack/cluster/up.sh in /tmp/gpuctl-bench-api, port offset 600). It creates a team namespace with a
quota, `--jobs` training jobs in it (so a list has rows), a ServiceAccount bound to the shipped
`gpuctl-user` role, and runs the API as a separate process, in one or both of its two forms
(`--server`): `api` is `python -m gpuctl.server.api` (every list reads the API server), `serve` is
`gpuctl serve --api --no-reconcile` (lists answered from the serve process's watch cache,
gpuctl.server.cache.CacheReader). The caller is that ServiceAccount, so every request pays for
authentication and authorisation (TokenReview and SubjectAccessReview, cached 10 s like in
production). The resident memory of each server process is printed after its load.

  API   `--concurrency` clients (httpx, keep-alive) for `--duration` seconds:
        GET /api/v1/jobs?namespace=NS&pageSize=100 (list), GET /api/v1/jobs/NAME?namespace=NS (get:
        describe one job), then POST /api/v1/jobs until `--creates` jobs (create).
  CLI   the same operations as whole processes (what a script calling gpuctl pays), `--concurrency`
        at a time: `gpuctl get jobs -n NS -o json` `--cli-runs` times, `gpuctl create -f` as often.

Prints requests per second and p50/p99 latency of each, and two floors measured the same way: `GET
/health` (an endpoint that does nothing: the HTTP stack and the machine's load) and the rendered Job
posted straight to the Kubernetes API server by as many threads (what the API server and Kueue's
webhooks take for a create), then issue 22's targets against the figures. Everything created is
deleted at the end, the namespace too (waited for, at most a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl.cluster import ApiError, Cluster, path  # noqa: E402 - after the sys.path line: run as a script
from gpuctl.service.jobs import list_job_rows  # noqa: E402
from gpuctl.service.plan import plan_documents  # noqa: E402
from gpuctl.spec import load_text  # noqa: E402

RUN = "/tmp/gpuctl-bench-api"
CLI = [sys.executable, "-m", "gpuctl.cli.main"]


def sh(*cmd: str, env: dict | None = None, check: bool = True, stdin: str | None = None) -> str:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, input=stdin)
    if check and p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])}... failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 40 samples is the largest but one, not an interpolation)."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(min(round(q / 100 * len(s) + 0.5) - 1, len(s) - 1), 0)
    return s[k]


def job_yaml(name: str, ns: str) -> str:
    return (
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: low}}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 5s}]}\n"
        "resources: {pool: training-pool, gpu: 0, cpu: 10m, memory: 16Mi}\n"
    )


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def add(self, op: str, client: str, latencies: list[float], wall: float, errors: int) -> None:
        n = len(latencies)
        self.rows.append(
            (
                op,
                client,
                n,
                errors,
                n / wall if wall else 0.0,
                statistics.median(latencies) * 1000 if latencies else float("nan"),
                percentile(latencies, 99) * 1000,
            )
        )
        p99 = percentile(latencies, 99) * 1000
        print(f"  {op:<11} {client:<24} n={n:<5} {n / wall:8.1f} req/s  p99 {p99:8.1f} ms", flush=True)

    def targets(self, c: int) -> None:
        """Issue 22's REST API targets at `c` clients, from the rows measured (the last server's)."""
        rows = {(op, client): (rps, p99) for op, client, _, _, rps, _, p99 in self.rows}
        want = [
            ("job create", "req/s", ">=", 100.0, 0),
            ("job create", "p99 ms", "<=", 250.0, 1),
            ("job list", "p99 ms", "<=", 50.0, 1),
        ]
        print(f"\nissue 22 targets at c={c}:")
        for op, what, cmp, bound, i in want:
            for (row_op, client), figures in rows.items():
                if row_op != op or not client.startswith("API") or not client.endswith(f"c={c}"):
                    continue
                v = figures[i]
                met = v >= bound if cmp == ">=" else v <= bound
                print(f"  {op} {what} {cmp} {bound:g}: {client}: {v:.1f} {'met' if met else 'NOT met'}")

    def print(self) -> None:
        print()
        head = ("OPERATION", "CLIENT", "N", "ERRORS", "REQ/S", "P50 MS", "P99 MS")
        print("{:<11}  {:<24}  {:>5}  {:>6}  {:>8}  {:>8}  {:>8}".format(*head))
        for op, client, n, err, rps, p50, p99 in self.rows:
            print(f"{op:<11}  {client:<24}  {n:>5}  {err:>6}  {rps:>8.1f}  {p50:>8.1f}  {p99:>8.1f}")


# ----------------------------------------------------------------------------- API load
async def api_load(
    url: str, token: str, concurrency: int, make_request, stop
) -> tuple[list[float], float, int]:
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, limits=limits, timeout=120
    ) as c:

        async def worker(w: int) -> None:
            nonlocal errors
            i = 0
            while not stop(len(latencies) + errors):
                t = time.perf_counter()
                r = await make_request(c, w, i)
                dt = time.perf_counter() - t
                i += 1
                if r.status_code >= 400:
                    errors += 1
                    if errors <= 3:
                        print(f"    error {r.status_code}: {r.text[:200]}", file=sys.stderr)
                else:
                    latencies.append(dt)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return latencies, time.perf_counter() - t0, errors


# ----------------------------------------------------------------------------- CLI load
def cli_load(commands: list[list[str]], concurrency: int, env: dict) -> tuple[list[float], float, int]:
    latencies: list[float] = []
    errors = 0

    def one(cmd: list[str]) -> tuple[float, int]:
        t = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"    cli error: {p.stderr[:200]}", file=sys.stderr)
        return time.perf_counter() - t, p.returncode

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for dt, rc in pool.map(one, commands):
            if rc:
                errors += 1
            else:
                latencies.append(dt)
    return latencies, time.perf_counter() - t0, errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_namespace(kube: Cluster, ns: str, timeout: float = 60) -> None:
    """Delete the bench's namespace (its jobs, pods, ServiceAccount and binding go with it) and wait
    until it is gone: `delete quota --delete-namespace` leaves it when the quota is already gone or
    the delete fails, and a bench run must not leave namespaces behind."""
    try:
        kube.delete(path("Namespace", ns))  # False: gone already
    except (ApiError, OSError) as e:
        print(f"cleanup: namespace {ns}: {e}", file=sys.stderr)
        return
    deadline = time.monotonic() + timeout
    while kube.get_or_none(path("Namespace", ns)) is not None:
        if time.monotonic() > deadline:
            print(f"cleanup: namespace {ns} still terminating after {timeout:.0f} s", file=sys.stderr)
            return
        time.sleep(0.5)
    print(f"cleanup: namespace {ns} removed", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    ap.add_argument("--start-cluster", action="store_true", help="start (and stop) a local cluster")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of API job list load")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="client counts (1 8)")
    ap.add_argument("--creates", type=int, default=100, help="jobs created through the API per concurrency")
    ap.add_argument("--cli-runs", type=int, default=40, help="CLI invocations per operation")
    ap.add_argument("--jobs", type=int, default=50, help="jobs in the namespace before the list runs")
    ap.add_argument(
        "--server",
        nargs="+",
        choices=["api", "serve"],
        default=["api", "serve"],
        help="API process forms to measure: standalone (api) and/or inside gpuctl serve (cache-backed)",
    )
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI process runs")
    ap.add_argument("--no-create", action="store_true", help="skip the job create runs")
    args = ap.parse_args()

    cluster_env = {**os.environ, "GPUCTL_TESTBED_RUN": RUN, "GPUCTL_TESTBED_PORT_OFFSET": "600"}
    if args.start_cluster:
        sh(str(ROOT / "hack/cluster/up.sh"), env=cluster_env)
        args.kubeconfig = f"{RUN}/kubeconfig"
    if not args.kubeconfig:
        raise SystemExit("no cluster: pass --kubeconfig, set KUBECONFIG, or --start-cluster")
    kc = args.kubeconfig
    env = {**os.environ, "KUBECONFIG": kc, "PYTHONPATH": str(ROOT)}

    kube = Cluster.connect(kubeconfig=kc)
    ns = f"bench-api-{uuid.uuid4().hex[:6]}"
    quota_name = f"q-{ns}"
    tmp = Path(tempfile.mkdtemp(prefix="gpuctl-bench-api-"))
    server = None
    role_created = False
    role_path = ""
    binding = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/bench"
    report = Report()
    try:
        # ---- setup: pools (if missing), a team, a caller, some jobs
        if kube.get_or_none(path("ResourceFlavor", "training-pool")) is None:
            sh(*CLI, "create", "-f", str(ROOT / "examples/pools.yaml"), env=env)
        q = tmp / "quota.yaml"
        q.write_text(
            f"kind: quota\nquota: {{name: {quota_name}}}\nnamespace:\n  {ns}: {{cpu: 1000, memory: 4Ti}}\n"
        )
        sh(*CLI, "create", "-f", str(q), env=env)
        role_path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/gpuctl-user"
        role_created = kube.get_or_none(role_path) is None
        for doc in yaml.safe_load_all((ROOT / "manifests/api/rbac.yaml").read_text()):
            if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "gpuctl-user":
                kube.request(
                    "PATCH",
                    "/apis/rbac.authorization.k8s.io/v1/clusterroles/gpuctl-user",
                    query={"fieldManager": "gpuctl-bench", "force": "true"},
                    body=doc,
                    content_type="application/apply-patch+yaml",
                )
        kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bench", "namespace": ns}}
        )
        kube.request(
            "POST",
            binding.rsplit("/", 1)[0],
            body={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "bench", "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "gpuctl-user",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": ns}],
            },
        )
        token = kube.request(
            "POST",
            path("ServiceAccount", "bench", ns, "token"),
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )["status"]["token"]
        for i in range(args.jobs):
            f = tmp / f"seed-{i}.yaml"
            f.write_text(job_yaml(f"seed-{i}", ns))
        sh(
            *CLI,
            "create",
            *[a for i in range(args.jobs) for a in ("-f", str(tmp / f"seed-{i}.yaml"))],
            env=env,
        )
        time.sleep(3)
        rows = list_job_rows(kube, ns)
        print(f"setup: namespace {ns}, {args.jobs} jobs, {len(rows)} rows in `get jobs`", flush=True)

        def start(kind: str) -> tuple[subprocess.Popen, str]:
            port = free_port()
            common = ["--address", "127.0.0.1", "--kubeconfig", kc, "--log-level", "warning"]
            if kind == "api":
                cmd = [sys.executable, "-m", "gpuctl.server.api", "--port", str(port), *common]
                ready = "/health"
            else:
                cmd = [sys.executable, "-m", "gpuctl.server.main", "--api", "--no-reconcile"]
                cmd += ["--metrics-port", str(port), *common]
                ready = "/readyz"  # every informer has listed once
            proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=(tmp / f"{kind}.log").open("w")
            )
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}{ready}").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"the {kind} server did not start: {(tmp / f'{kind}.log').read_text()[-2000:]}"
                    )
                time.sleep(0.2)
            print(f"{kind}: API at {url}", flush=True)
            return proc, url

        def rss_mib(pid: int) -> float:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
            return float("nan")

        async def get_health(client, w, i):
            return await client.get("/health")

        async def get_jobs(client, w, i):
            return await client.get("/api/v1/jobs", params={"namespace": ns, "pageSize": 100})

        async def get_job(client, w, i):
            return await client.get(f"/api/v1/jobs/seed-{(w + i) % args.jobs}", params={"namespace": ns})

        for kind in args.server:
            server, url = start(kind)
            # ---- job list (while the namespace holds the seed jobs only)
            for c in args.concurrency:
                asyncio.run(api_load(url, token, c, get_jobs, lambda n, c=c: n >= c * 5))  # warm caches
                end = time.monotonic() + args.duration
                lat, wall, err = asyncio.run(
                    api_load(url, token, c, get_jobs, lambda n, end=end: time.monotonic() >= end)
                )
                report.add("job list", f"API ({kind}), c={c}", lat, wall, err)
            # ---- one job (describe), by name
            for c in args.concurrency:
                asyncio.run(api_load(url, token, c, get_job, lambda n, c=c: n >= c * 5))
                end = time.monotonic() + args.duration
                lat, wall, err = asyncio.run(
                    api_load(url, token, c, get_job, lambda n, end=end: time.monotonic() >= end)
                )
                report.add("job get", f"API ({kind}), c={c}", lat, wall, err)
            # The floor of any request at this load: an endpoint that does nothing (no auth, no cluster).
            c = max(args.concurrency)
            end = time.monotonic() + min(args.duration, 5)
            lat, wall, err = asyncio.run(
                api_load(url, token, c, get_health, lambda n, end=end: time.monotonic() >= end)
            )
            report.add("health", f"API ({kind}) /health, c={c}", lat, wall, err)
            print(f"  {kind}: resident memory {rss_mib(server.pid):.0f} MiB", flush=True)
            if kind != args.server[-1]:
                server.terminate()
                server.wait(10)
                server = None
        if not args.no_cli:
            for c in args.concurrency:
                cmd = [*CLI, "get", "jobs", "-n", ns, "-o", "json"]
                lat, wall, err = cli_load([cmd] * args.cli_runs, c, env)
                report.add("job list", f"CLI (process), c={c}", lat, wall, err)
        t = []
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < min(args.duration, 5):
            s = time.perf_counter()
            list_job_rows(kube, ns)
            t.append(time.perf_counter() - s)
        report.add("job list", "service call, c=1", t, time.perf_counter() - t0, 0)

        # ---- job create (through the last server started)
        run = uuid.uuid4().hex[:4]
        for c in [] if args.no_create else args.concurrency:

            async def create(client, w, i, c=c):
                return await client.post(
                    "/api/v1/jobs", json={"yamlContent": job_yaml(f"api-{run}-{c}-{w}-{i}", ns)}
                )

            lat, wall, err = asyncio.run(api_load(url, token, c, create, lambda n: n >= args.creates))
            report.add("job create", f"API ({args.server[-1]}), c={c}", lat, wall, err)
            # The floor: the same Job posted straight to the Kubernetes API server by `c` threads (what
            # `kubectl create` of the rendered object costs the API server and Kueue's webhooks).
            job = plan_documents(load_text(job_yaml("floor", ns)), ns).objects[0]

            def raw_create(i: int, c=c, job=job) -> float:
                obj = json.loads(json.dumps(job))
                obj["metadata"]["name"] = f"raw-{run}-{c}-{i}"
                t = time.perf_counter()
                kube.create(obj)
                return time.perf_counter() - t

            t0 = time.perf_counter()
            with ThreadPoolExecutor(c) as pool:
                lat = list(pool.map(raw_create, range(args.creates)))
            report.add("job create", f"kube-apiserver POST, c={c}", lat, time.perf_counter() - t0, 0)
            if args.no_cli:
                continue
            files = []
            for i in range(args.cli_runs):
                f = tmp / f"cli-{c}-{i}.yaml"
                f.write_text(job_yaml(f"cli-{run}-{c}-{i}", ns))
                files.append([*CLI, "create", "-f", str(f)])
            lat, wall, err = cli_load(files, c, env)
            report.add("job create", f"CLI (process), c={c}", lat, wall, err)

        report.print()
        report.targets(max(args.concurrency))
        total = len(list_job_rows(kube, ns))
        print(
            f"\n`get jobs -n {ns}` had {len(rows)} rows during the list runs, {total} at the end. "
            "c = concurrent clients: keep-alive HTTP clients of one API process, or CLI processes "
            "at a time. API (api): python -m gpuctl.server.api, lists read the API server; API (serve): "
            "gpuctl serve --api, lists read its watch cache. The service call is list_job_rows in this "
            "process, without HTTP or auth."
        )
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        kube.delete(binding)
        if role_created:
            kube.delete(role_path)
        sh(*CLI, "delete", "quota", quota_name, "--delete-namespace", env=env, check=False)
        remove_namespace(kube, ns)
        if args.start_cluster:
            sh(str(ROOT / "hack/cluster/down.sh"), env=cluster_env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
