"""Benchmark of gpuctl's admission webhook: latency on loopback HTTPS, and the API server's own view of it.

    python bench/webhook.py                                  # loopback only
    python bench/webhook.py --kubeconfig /tmp/tb/kubeconfig  # plus the API server's view (local cluster)

Part 1 starts `python -m admission serve` on 127.0.0.1 (TLS, a fixed cluster snapshot, the production log
level) and sends AdmissionReviews open-loop at fixed rates over keep-alive connections, the way the API
server's Go transport does (class Pool). Latency is measured from each request's *scheduled* send time to
the end of its response, so a server that falls behind is charged for the queueing it causes (no
coordinated omission). The request mix is what a team namespace sends: gpuctl's Jobs, Deployments and
StatefulSets, raw Pods, and 20% denials (hostPath, unknown key) whose verdicts need no cache re-check.
Several server variants (`--http`: builtin, uvicorn, another checkout's server, and two floors) run side by
side and the rounds alternate between them; each row prints the server's CPU per request and the load
average, and a summary compares each with issue 12's targets (p99 <= 5 ms at 500/s, <= 150 us CPU).

Part 2 (with --kubeconfig) registers the webhook by URL next to Kueue's on the local cluster, sends
`dryRun=All` creates of GPU Jobs and Pods through the API server (each passes Kueue's mutating and
validating webhooks and gpuctl's), and reads `apiserver_admission_webhook_admission_duration_seconds`
before and after: the API server's own timing of each webhook call, gpuctl's next to Kueue's, in the
same run. It also times the same creates with and without gpuctl's webhook registered (A/B).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import copy
import gc
import json
import os
import random
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl.builders import build  # noqa: E402
from gpuctl.constants import GPU_RESOURCE, TAS_UNCONSTRAINED, Labels  # noqa: E402
from gpuctl.spec import load_text  # noqa: E402
from queues import (  # noqa: E402
    PoolGuarantee,
    TeamQuota,
    budget_flavor,
    cluster_queue,
    local_queue,
    resource_flavor,
    team_namespace,
    workload_priority_classes,
)

TEAM = "bench-team"
POOL = "bench-a100"
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}

# ---------------------------------------------------------------------------------------------------------
# Objects.


def node(name: str, pool: str, gpus: int) -> dict:
    alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, Labels.POOL: pool}},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def snapshot_objects(ns: str, pool: str) -> list[dict]:
    team = TeamQuota(namespace=ns, quota_name="bench")
    objs = [budget_flavor(), resource_flavor(pool), resource_flavor(f"{pool}-small")]
    objs += [node(f"n{i}", pool, 8) for i in range(20)] + [
        node(f"s{i}", f"{pool}-small", 4) for i in range(20)
    ]
    objs += [team_namespace(team), cluster_queue(team, [pool, f"{pool}-small"]), local_queue(ns)]
    return objs


def gpuctl_objects(ns: str, pool: str) -> list[dict]:
    specs = [
        f"""kind: training
job: {{name: train, priority: high}}
environment: {{image: pytorch/pytorch:2.2.0, command: [python, train.py], env: [{{GPUCTL_FAKE_RUNTIME: 1s}}]}}
resources: {{pool: {pool}, gpu: 4, cpu: 8, memory: 32Gi}}
storage: {{workdirs: [/data/team]}}""",
        f"""kind: inference
job: {{name: llm}}
environment: {{image: vllm/vllm-openai:v0.12.0}}
service: {{replicas: 2, port: 8000, healthCheck: /health}}
resources: {{pool: {pool}, gpu: 1, cpu: 8, memory: 32Gi}}""",
        f"""kind: notebook
job: {{name: nb, priority: low}}
environment: {{image: quay.io/jupyter/scipy-notebook}}
service: {{port: 8888}}
resources: {{pool: {pool}, gpu: 1, cpu: 2, memory: 8Gi}}""",
    ]
    return [build(load_text(s)[0].spec, ns)[0] for s in specs]


def raw_pod(ns: str, pool: str, name: str = "p", gpus: int = 1, **extra) -> dict:
    res = {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(gpus)}
    labels = {Labels.KUEUE_QUEUE: "default", Labels.POOL: pool, **extra.pop("labels", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        # The topology request the topology MutatingAdmissionPolicy adds before the webhook sees the pod.
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": {TAS_UNCONSTRAINED: "true"},
        },
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": res}}
            ],
            "nodeSelector": {Labels.POOL: pool},
            **extra,
        },
    }


def review(obj: dict) -> bytes:
    group, _, version = obj["apiVersion"].rpartition("/")
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    # What the API server sends includes managedFields and defaulted fields; add a realistic amount.
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": obj["apiVersion"],
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {f"f:{k}": {} for k in obj["metadata"]}},
        }
    ]
    obj["metadata"]["uid"] = str(uuid.uuid4())
    request = {
        "uid": str(uuid.uuid4()),
        "kind": gvk,
        "resource": {"group": group, "version": version, "resource": "x"},
        "requestKind": gvk,
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"]["namespace"],
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl"},
    }
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def request_mix() -> list[tuple[str, bytes, bool]]:
    """(label, body, expected allowed): 80% allowed, 20% denied by rules that need no cache re-check."""
    allowed = [(f"gpuctl {o['kind']}", review(o), True) for o in gpuctl_objects(TEAM, POOL)]
    allowed.append(("raw Pod", review(raw_pod(TEAM, POOL)), True))
    denied = [
        (
            "Pod hostPath /etc",
            review(raw_pod(TEAM, POOL, volumes=[{"name": "h", "hostPath": {"path": "/etc"}}])),
            False,
        ),
        ("Pod unknown key", review(raw_pod(TEAM, POOL, labels={"runwhere.ai/gpu_type": "x"})), False),
    ]
    return allowed * 2 + denied  # 8 allowed : 2 denied


# ---------------------------------------------------------------------------------------------------------
# TLS and the server process.


def image_server(rootfs: Path, tmp: Path) -> str:
    """The `--http` variant of an unpacked container image's webhook as it ships: the image's
    dist-packages (a copy, so the bench can start it from there) on the image's own python3.X, its binary
    and standard library through PYTHONHOME (a wrapper script in `tmp`)."""
    (site,) = (rootfs / "usr/local/lib").glob("python3.*/dist-packages")
    python = rootfs / "usr/bin" / site.parent.name  # python3.X
    wrapper = tmp / "image-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONHOME={rootfs}/usr exec {python} "$@"\n')
    wrapper.chmod(0o755)
    copy_of_site = tmp / "image-site"
    shutil.copytree(site, copy_of_site, symlinks=True)
    return f"builtin@{copy_of_site}^{wrapper}"


def image_variant(archive: Path, tmp: Path) -> str:
    """`--image`: hack/image.sh's OCI archive unpacked with umoci, then image_server."""
    if not shutil.which("umoci"):
        raise SystemExit("--image needs umoci (apt-get install umoci)")
    layout, bundle = tmp / "image-layout", tmp / "image-bundle"
    with tarfile.open(archive) as t:
        t.extractall(layout, filter="tar")
    # One image per architecture under the tag: point it at this machine's (umoci unpacks a manifest).
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    select = [sys.executable, str(ROOT / "hack/image.py"), "select", str(layout), arch]
    tag = subprocess.run(select, check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], check=True, capture_output=True
    )
    return image_server(bundle / "rootfs", tmp)


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    run = lambda *a: subprocess.run(["openssl", *map(str, a)], check=True, capture_output=True)  # noqa: E731
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run(
        "req",
        "-x509",
        *ec,
        "-days",
        "2",
        "-subj",
        "/CN=bench-ca",
        "-keyout",
        d / "ca.key",
        "-out",
        d / "ca.crt",
    )
    run("req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", d / "tls.key", "-out", d / "tls.csr")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run(
        "x509",
        "-req",
        "-in",
        d / "tls.csr",
        "-CA",
        d / "ca.crt",
        "-CAkey",
        d / "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        d / "ext",
        "-out",
        d / "tls.crt",
    )
    return d / "ca.crt", d / "tls.crt", d / "tls.key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def webhook_server(
    tmp: Path,
    crt: Path,
    key: Path,
    ca: Path,
    extra: list[str],
    root: Path = ROOT,
    python: str = sys.executable,
) -> Iterator[tuple[int, int]]:
    """(port, pid) of a running `python -m admission serve` from the checkout at `root` (it inherits this
    process's nice value)."""
    port = free_port()
    log = (tmp / f"server-{port}.log").open("w")
    floor = extra[extra.index("--http") + 1] if "--http" in extra else ""
    command = (
        [python, str(Path(__file__).resolve()), "--floor-server", floor]
        if floor.startswith("floor")
        else [python, "-m", "admission", "serve"]
    )
    proc = subprocess.Popen(
        [
            *command,
            "--tls-cert",
            str(crt),
            "--tls-key",
            str(key),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            *extra,
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        ctx = ssl.create_default_context(cafile=str(ca))
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"webhook server did not become ready; see {log.name}")
            time.sleep(0.2)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


# ---------------------------------------------------------------------------------------------------------
# Floors: what any Python webhook on this machine pays before its first rule.
#
# `--http floor-tls`: the same transport as admission.http (uvloop, asyncio Protocol, TLS 1.2+ with the same
# certificate, keep-alive) answering every request with a fixed "allowed" AdmissionReview: the cost of TLS,
# the event loop and the two system calls per request. `--http floor-json`: the same plus orjson decoding of
# the whole AdmissionReview and an answer carrying its uid: the least a webhook that reads the object does.
# Both answer "allowed", so their denials are not counted as errors.

_FLOOR_ALLOW = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'


class _FloorProtocol(asyncio.Protocol):
    decode = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            i = head.find(b"\r\ncontent-length:")
            n = int(head[i + 17 : head.find(b"\r\n", i + 2) % (len(head) + 1)]) if i >= 0 else 0
            if len(self.buf) < end + 4 + n:
                return
            body = bytes(self.buf[end + 4 : end + 4 + n])
            del self.buf[: end + 4 + n]
            uid = orjson.loads(body)["request"]["uid"] if self.decode and body else "floor"
            out = b'%s%s,"allowed":true}}' % (_FLOOR_ALLOW, orjson.dumps(uid))
            self.t.write(  # type: ignore[attr-defined]
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(out), out)
            )


class _FloorJson(_FloorProtocol):
    decode = True


def floor_server(argv: list[str]) -> int:
    import uvloop

    p = argparse.ArgumentParser()
    p.add_argument("--floor-server", choices=["floor-tls", "floor-json"])
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--port", type=int)
    p.add_argument("--host")
    a, _ = p.parse_known_args(argv)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(a.tls_cert, a.tls_key)
    proto = _FloorJson if a.floor_server == "floor-json" else _FloorProtocol
    gc.collect()
    gc.freeze()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        await loop.create_server(proto, a.host, a.port, ssl=ctx, backlog=1024)
        await asyncio.Event().wait()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
        r.run(serve())
    return 0


# ---------------------------------------------------------------------------------------------------------
# Part 1: open-loop load over keep-alive HTTPS.


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.used = time.monotonic()

    async def post(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        self.writer.write(head + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        m = re.search(rb"(?i)content-length:\s*(\d+)", header)
        payload = await self.reader.readexactly(int(m.group(1))) if m else b""
        return status, payload


# k8s.io/client-go transport/cache.go: the API server's webhook client keeps up to 25 idle connections per
# host and closes those idle for 90 s (Go's IdleConnTimeout), before the webhook's own 120 s keep-alive.
IDLE_CONNS_PER_HOST = 25
IDLE_CONN_TIMEOUT = 90.0  # apimachinery's SetTransportDefaults: Go's IdleConnTimeout default


class Pool:
    """The client's keep-alive connections, reused across rates the way the API server's webhook client
    reuses them: Go's http.Transport (HTTP/1.1 to webhooks: k8s.io/apiserver pkg/util/webhook/client.go sets
    NextProtos ["http/1.1"] for Service webhooks; no pipelining), one request at a time per connection, the
    most recently used idle one reused, a new one dialled when all are busy (up to `limit`), at most 25 kept
    idle, none idle for longer than 90 s. `opened` counts live connections; `dialled` counts TLS handshakes,
    so a run that had to grow the pool says so."""

    def __init__(self, port: int, ca: Path, limit: int) -> None:
        self.port, self.limit, self.ca = port, limit, ca
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.idle: list[Conn] = []
        self.waiters: collections.deque[asyncio.Future[Conn]] = collections.deque()
        self.opened = 0
        self.dialled = 0
        self.max_idle = IDLE_CONNS_PER_HOST
        self.floor = False  # a floor server: every answer is "allowed"

    async def fill(self, n: int) -> None:
        while self.opened < n:
            self.idle.append(await self._connect())

    async def _connect(self) -> Conn:
        self.opened += 1
        self.dialled += 1
        r, w = await asyncio.open_connection(
            "127.0.0.1", self.port, ssl=self.ctx, server_hostname="127.0.0.1"
        )
        return Conn(r, w)

    async def get(self) -> Conn:
        while self.idle:
            conn = self.idle.pop()
            if time.monotonic() - conn.used < IDLE_CONN_TIMEOUT:
                return conn
            conn.writer.close()  # Go closes idle connections itself (before the server's 120 s do)
            self.opened -= 1
        if self.opened < self.limit:
            return await self._connect()
        fut: asyncio.Future[Conn] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        return await fut

    def put(self, conn: Conn | None) -> None:
        if conn is None:  # dropped after an error
            self.opened -= 1
            return
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        conn.used = time.monotonic()
        if len(self.idle) >= self.max_idle:  # Go: MaxIdleConnsPerHost; the surplus is closed
            conn.writer.close()
            self.opened -= 1
            return
        self.idle.append(conn)  # LIFO, as Go's transport: the most recently used connection first

    def close(self) -> None:
        for c in self.idle:
            c.writer.close()
        self.idle.clear()


async def run_rate(
    pool: Pool,
    rate: int,
    duration: float,
    warmup: float,
    mix: list[tuple[str, bytes, bool]],
) -> dict:
    """Open-loop load: request i is due at start + i/rate whatever happened to earlier ones, on the pool's
    keep-alive connections (a request that finds them all busy dials a new one, or waits for one at the
    pool's limit; either is part of its latency)."""
    clock = time.perf_counter  # uvloop's loop.time() has millisecond resolution
    heads = {
        id(b): (
            f"POST /validate HTTP/1.1\r\nHost: 127.0.0.1:{pool.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(b)}\r\n\r\n"
        ).encode()
        for _, b, _ in mix
    }
    results: list[tuple[float, float, str, bool]] = []  # (scheduled, latency, label, ok)

    async def one(scheduled: float, label: str, body: bytes, expect: bool) -> None:
        conn: Conn | None = await pool.get()
        try:
            status, payload = await conn.post(heads[id(body)], body)  # type: ignore[union-attr]
            ok = status == 200 and (pool.floor or orjson.loads(payload)["response"]["allowed"] is expect)
        except Exception:  # counted as an error; the connection is dropped
            ok = False
            conn = None
        results.append((scheduled, clock() - scheduled, label, ok))
        pool.put(conn)

    total = int(rate * (duration + warmup))
    dialled0 = pool.dialled
    # The client's own garbage collections would be charged to the server: keep them out of the run.
    gc.collect()
    gc.freeze()
    gc.disable()
    start = clock() + 0.05
    tasks = []
    rng = random.Random(42)
    try:
        for i in range(total):
            t = start + i / rate
            delay = t - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            label, body, expect = mix[rng.randrange(len(mix))]
            tasks.append(asyncio.create_task(one(t, label, body, expect)))
        await asyncio.gather(*tasks)
    finally:
        gc.enable()
    measured = [r for r in results if r[0] >= start + warmup]
    lat = sorted(r[1] for r in measured)
    span = (max(r[0] for r in measured) - min(r[0] for r in measured)) if len(measured) > 1 else 1.0
    by_label: dict[str, list[float]] = defaultdict(list)
    for r in measured:
        by_label[r[2]].append(r[1])
    return {
        "rate": rate,
        "n": len(lat),
        "achieved": len(lat) / span,
        "errors": sum(1 for r in measured if not r[3]),
        "p50": pct(lat, 50),
        "p90": pct(lat, 90),
        "p99": pct(lat, 99),
        "p999": pct(lat, 99.9),
        "max": lat[-1],
        "connections": pool.opened,
        "new_connections": pool.dialled - dialled0,
        "by_label": {k: (pct(sorted(v), 50), pct(sorted(v), 99)) for k, v in by_label.items()},
        "raw": measured,
    }


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def ms(x: float) -> str:
    return f"{x * 1000:7.2f}"


TARGET_P99 = 0.005  # issue 12: p99 <= 5 ms at 500 requests/s
TARGET_CPU_US = 150.0  # and <= 150 us of server CPU per request, at normal priority, next to the cluster
TARGET_RATE = 500


def part1(args: argparse.Namespace, tmp: Path, ca: Path, crt: Path, key: Path) -> list[dict]:
    """Every server variant in args.http runs at once (idle when not measured); the rounds alternate between
    them, so each comparison is made under the same moment's load."""
    state = tmp / "state.json"
    state.write_text(json.dumps(snapshot_objects(TEAM, POOL)))
    mix = request_mix()
    denials = sum(1 for m in mix if not m[2]) / len(mix)
    print("== Loopback HTTPS: python -m admission serve (static snapshot: 3 flavors, 40 nodes), keep-alive")
    print(
        f"   mix: {len(mix)} request kinds, {denials:.0%} denials; {args.duration:.0f}s per rate after "
        f"{args.warmup:.0f}s warm-up; {args.repeat} round(s); client: one pool of keep-alive connections per "
        f"server, like the API server's Go transport ({args.connections} opened up front, up to "
        f"{args.max_connections}, at most {IDLE_CONNS_PER_HOST} kept idle; 'new' = TLS handshakes in the run)"
    )
    sched = "SCHED_FIFO (--realtime)" if os.sched_getscheduler(0) == os.SCHED_FIFO else "normal"
    print(
        f"   machine: {os.cpu_count()} CPUs, load average before: {load()}; scheduling: {sched}, "
        f"nice {os.nice(0)}; servers run on Python {sys.version.split()[0]} ({sys.executable}) unless "
        "a variant names another ('^python')"
    )
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    out: list[dict] = []
    with runner, contextlib.ExitStack() as stack:
        servers = []
        for name in args.http:
            spec, _, python = name.partition("^")
            spec, _, root = spec.partition("@")
            http, _, extra = spec.partition("+")
            argv = ["--static-state", str(state), "--http", http, *(extra.split() if extra else [])]
            server = webhook_server(tmp, crt, key, ca, argv, Path(root or ROOT), python or sys.executable)
            port, pid = stack.enter_context(server)
            pool = Pool(port, ca, args.max_connections)
            pool.floor = http.startswith("floor")
            stack.callback(pool.close)
            runner.run(pool.fill(args.connections))
            # Warm both sides up (imports, caches) before measuring anything.
            runner.run(run_rate(pool, 100, 2, 0, mix))
            servers.append((short(name), pid, pool))
        print(
            f"   {'round':>5} {'server':<24} {'rate/s':>6} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} "
            f"{'p99.9 ms':>8} {'max ms':>7} {'err':>3} {'conns':>5} {'new':>3} {'CPU/req':>7} "
            f"{'user':>4} {'sys':>4} {'app':>8}  load avg 1/5/15 min (after)"
        )
        for rnd in range(args.repeat):
            for name, pid, pool in servers:
                for rate in args.rates:
                    u0, s0 = cpu_times(pid)
                    own0 = own_time(pool)
                    load_before = os.getloadavg()[0]
                    r = runner.run(run_rate(pool, rate, args.duration, args.warmup, mix))
                    u1, s1 = cpu_times(pid)
                    own1 = own_time(pool)
                    r["own_us"] = (own1[0] - own0[0]) / max(1.0, own1[1] - own0[1]) * 1e6
                    n = rate * (args.duration + args.warmup)
                    r.update(
                        server=name,
                        round=rnd + 1,
                        user_us=(u1 - u0) / n * 1e6,
                        sys_us=(s1 - s0) / n * 1e6,
                        load=(load_before, *os.getloadavg()),
                    )
                    r["server_cpu_us"] = r["user_us"] + r["sys_us"]
                    out.append(r)
                    print(
                        f"   {rnd + 1:>5} {name:<24.24} {rate:>6} {ms(r['p50'])} {ms(r['p90'])} "
                        f"{ms(r['p99'])} {ms(r['p999']):>8} {ms(r['max'])} {r['errors']:>3} "
                        f"{r['connections']:>5} {r['new_connections']:>3} {r['server_cpu_us']:>4.0f} us "
                        f"{r['user_us']:>4.0f} {r['sys_us']:>4.0f} {r['own_us']:>5.0f} us  {load()}",
                        flush=True,
                    )
    summary(out, args)
    return out


def short(name: str) -> str:
    """A server variant's name for the tables: another checkout by its folder's name, another interpreter by
    its version."""
    spec, hat, python = name.partition("^")
    spec, at, root = spec.partition("@")
    out = spec.replace("--", "") + (f"@{Path(root).name}" if at else "")
    if hat:
        version = subprocess.run(
            [python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True
        )
        out += f" py{version.stdout.decode().strip()}"
    return out


def summary(out: list[dict], args: argparse.Namespace) -> None:
    print(
        f"   -- against issue 12's targets at {TARGET_RATE}/s, normal priority: "
        f"p99 <= {TARGET_P99 * 1e3:.0f} ms, server CPU <= {TARGET_CPU_US:.0f} us/request"
    )
    for name in map(short, args.http):
        for rate in args.rates:
            rows = [r for r in out if r["server"] == name and r["rate"] == rate]
            if not rows:
                continue
            cpu = statistics.median(r["server_cpu_us"] for r in rows)
            p99s = sorted(r["p99"] for r in rows)
            loads = sorted(r["load"][1] for r in rows)
            cpus = ", ".join(f"{r['server_cpu_us']:.0f}" for r in rows)
            runs_p99 = ", ".join(f"{r['p99'] * 1e3:.1f}" for r in rows)
            line = (
                f"   {name:<24.24} {rate:>5}/s  CPU/req median {cpu:4.0f} us (runs {cpus}); "
                f"p99 {runs_p99} ms; load {loads[0]:.1f}-{loads[-1]:.1f}"
            )
            if rate == TARGET_RATE:
                met_cpu = "MET" if cpu <= TARGET_CPU_US else "NOT MET"
                ok = sum(1 for p in p99s if p <= TARGET_P99)
                line += f"  | CPU target {met_cpu}; p99 target met in {ok}/{len(rows)} runs"
            print(line)


def own_time(pool: Pool) -> tuple[float, float]:
    """(sum, count) of the server's own gpuctl_webhook_duration_seconds over all kinds: body in -> answer
    ready (JSON decode, rules, answer, metrics; wall time, so preemption counts), the `app` column; (0, 0)
    for servers without it (the floors)."""
    ctx = ssl.create_default_context(cafile=str(pool.ca))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{pool.port}/metrics", context=ctx, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0.0, 0.0
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("gpuctl_webhook_duration_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("gpuctl_webhook_duration_seconds_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------------------
# Part 2: the API server's view.

HIST = "apiserver_admission_webhook_admission_duration_seconds"
_LINE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+|NaN|\+Inf)$")


def scrape(kube) -> dict[tuple, float]:
    text = kube.request("GET", "/metrics", raw=True).data.decode()
    out: dict[tuple, float] = {}
    for line in text.splitlines():
        if not line.startswith(HIST):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        key = (
            m.group(1),
            labels.get("name"),
            labels.get("operation"),
            labels.get("rejected"),
            labels.get("le"),
        )
        out[key] = float(m.group(3))
    return out


def histogram(before: dict, after: dict, name: str) -> dict:
    """Delta histogram of one webhook (CREATE, any rejected), with Prometheus-style quantiles."""
    buckets: dict[float, float] = defaultdict(float)
    total = count = 0.0
    for key, v in after.items():
        metric, n, op, _rej, le = key
        if n != name or op != "CREATE":
            continue
        d = v - before.get(key, 0.0)
        if metric.endswith("_bucket"):
            buckets[float("inf") if le == "+Inf" else float(le)] += d
        elif metric.endswith("_sum"):
            total += d
        elif metric.endswith("_count"):
            count += d
    return {
        "count": count,
        "mean": total / count if count else float("nan"),
        "p50": quantile(buckets, 0.5),
        "p99": quantile(buckets, 0.99),
        "buckets": dict(sorted(buckets.items())),
    }


def quantile(buckets: dict[float, float], q: float) -> float:
    """histogram_quantile(): linear interpolation inside the bucket holding the rank."""
    items = sorted(buckets.items())
    if not items or items[-1][1] == 0:
        return float("nan")
    rank = q * items[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in items:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0)
        prev_le, prev_c = le, c
    return prev_le


def part2(args: argparse.Namespace, tmp: Path, ca: Path, crt: Path, key: Path) -> None:
    from gpuctl.cluster import ApiError, Cluster, path

    kube = Cluster.connect(kubeconfig=args.kubeconfig)
    kube.server_version()
    sfx = uuid.uuid4().hex[:6]
    ns, pool = f"bench-{sfx}", f"bench-{sfx}-a100"
    created: list[str] = []
    vwc_name = f"gpuctl-admission-bench-{sfx}"
    print("\n== API server's view (apiserver_admission_webhook_admission_duration_seconds), local cluster")
    try:
        for obj in [*workload_priority_classes(), budget_flavor()]:
            if kube.get_or_none(path(obj["kind"], obj["metadata"]["name"])) is None:
                kube.apply(obj)
                created.append(path(obj["kind"], obj["metadata"]["name"]))
        kube.apply(resource_flavor(pool))
        created.append(path("ResourceFlavor", pool))
        team = TeamQuota(
            namespace=ns, quota_name="bench", pools={pool: PoolGuarantee(gpu=8, cpu="96", memory="1Ti")}
        )
        kube.apply(team_namespace(team))
        created.append(path("Namespace", ns))
        kube.apply(cluster_queue(team, [pool]))
        created.append(path("ClusterQueue", ns))
        kube.apply(local_queue(ns))
        job = gpuctl_objects(ns, pool)[0]
        pod = raw_pod(ns, pool, name="bench-pod")
        # Kueue's LocalQueue defaulting needs its cache to have the LocalQueue: wait for a dry-run to pass.
        _wait(lambda: _dry(kube, job) is None, 30)

        def load(objs: list[dict], n: int, rate: float) -> list[float]:
            lat: list[float] = []
            lock = threading.Lock()
            start = time.monotonic() + 0.05

            def one(i: int) -> None:
                t = start + i / rate
                delay = t - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t0 = time.monotonic()
                err = _dry(kube, objs[i % len(objs)])
                if err is not None:
                    raise SystemExit(f"dry-run create failed: {err}")
                with lock:
                    lat.append(time.monotonic() - t0)

            with ThreadPoolExecutor(args.apiserver_threads) as ex:
                list(ex.map(one, range(n)))
            return sorted(lat)

        objs = [job, pod]
        n, rate = args.apiserver_requests, args.apiserver_rate
        load(objs, min(200, n), rate)  # warm-up (connections, Kueue's caches)
        without = load(objs, n, rate)

        with webhook_server(tmp, crt, key, ca, ["--kubeconfig", args.kubeconfig]) as (port, _):
            vwc = yaml.safe_load((ROOT / "manifests/admission/webhook.yaml").read_text())
            vwc["metadata"] = {"name": vwc_name, "labels": dict(TESTBED_LABEL)}
            ca_b64 = base64.b64encode(ca.read_bytes()).decode()
            for w in vwc["webhooks"]:
                w["clientConfig"] = {"url": f"https://127.0.0.1:{port}/validate", "caBundle": ca_b64}
                if "namespaceSelector" in w:
                    w["namespaceSelector"]["matchExpressions"].append(
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}
                    )
                else:
                    w["objectSelector"] = {"matchLabels": {"bench": sfx}}
            kube.apply(vwc)
            try:
                bad = raw_pod(ns, pool, name="probe", labels={"runwhere.ai/poool": "x"})
                _wait(lambda: "[unknown-key]" in (_dry(kube, bad) or ""), 30)
                load(objs, min(200, n), rate)
                before = scrape(kube)
                with_ours = load(objs, n, rate)
                after = scrape(kube)
            finally:
                kube.delete(path("ValidatingWebhookConfiguration", vwc_name))

        print(
            f"   {n} dryRun=All creates through the API server at {rate:.0f}/s "
            f"(half gpuctl training Jobs, half raw GPU Pods), {args.apiserver_threads} client threads"
        )
        print(
            f"   {'webhook':<34} {'calls':>6} {'mean ms':>8} {'p50 ms':>7} {'p99 ms':>7}"
            "  buckets (le s: calls)"
        )
        rows = [
            ("workloads.admission.runwhere.ai", "gpuctl (Jobs)"),
            ("vjob.kb.io", "Kueue validating (Jobs)"),
            ("mjob.kb.io", "Kueue mutating (Jobs)"),
            ("pods.admission.runwhere.ai", "gpuctl (Pods)"),
            ("vpod.kb.io", "Kueue validating (Pods)"),
            ("mpod.kb.io", "Kueue mutating (Pods)"),
        ]
        hs = {}
        for name, label in rows:
            h = histogram(before, after, name)
            hs[name] = h
            cum = ", ".join(f"{le:g}: {int(c)}" for le, c in h["buckets"].items() if le != float("inf"))
            print(
                f"   {label + ' ' + name:<34.34} {int(h['count']):>6} {ms(h['mean']):>8} {ms(h['p50'])} "
                f"{ms(h['p99'])}  {cum}"
            )
        for ours, theirs in (
            ("workloads.admission.runwhere.ai", "vjob.kb.io"),
            ("pods.admission.runwhere.ai", "vpod.kb.io"),
        ):
            a, b = hs[ours], hs[theirs]
            print(
                f"   ratio {ours} / {theirs}: p99 {a['p99'] / b['p99']:.2f}x, "
                f"mean {a['mean'] / b['mean']:.2f}x (target p99 <= 1.5x)"
            )
        print("   Note: the API server's buckets are 5, 25, 100 ms, ...: a p99 inside the first bucket is")
        print("   a linear interpolation (<= 5 ms), so the exact per-call mean (sum/count) is shown as well.")
        print(
            f"   A/B, client-observed dry-run create latency: without gpuctl's webhook p50 "
            f"{ms(pct(without, 50))} p99 {ms(pct(without, 99))} ms; with it p50 {ms(pct(with_ours, 50))} "
            f"p99 {ms(pct(with_ours, 99))} ms; "
            f"mean difference {(statistics.mean(with_ours) - statistics.mean(without)) * 1000:+.2f} ms"
        )
    finally:
        for p in reversed(created):
            with contextlib.suppress(ApiError):
                kube.delete(p)


def _dry(kube, obj: dict) -> str | None:
    from gpuctl.cluster import ApiError

    try:
        kube.create(obj, dry_run=True)
        return None
    except ApiError as exc:
        return str(exc.message)


def _wait(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the cluster")
        time.sleep(0.3)


def main(argv: list[str] | None = None) -> int:
    if "--floor-server" in (argv if argv is not None else sys.argv):
        return floor_server(argv if argv is not None else sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=[500])
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per rate")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each rate")
    p.add_argument(
        "--connections",
        type=int,
        default=IDLE_CONNS_PER_HOST,
        help="keep-alive connections opened up front (the API server keeps up to 25 idle per webhook host)",
    )
    p.add_argument("--repeat", type=int, default=3, help="rounds over every server and rate")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="part 1 under SCHED_FIFO (client and server): measures the webhook, not its neighbours, on a "
        "shared machine; part 2 always runs at normal priority next to Kueue",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run the server and this client at this nice value (e.g. -10 on a busy machine)",
    )
    p.add_argument("--max-connections", type=int, default=64, help="connections the client may open in all")
    p.add_argument(
        "--http",
        type=lambda s: s.split(","),
        default=["builtin", "uvicorn"],
        help="webhook HTTP servers to measure, alternating (builtin = admission.http; uvicorn = reference); "
        "'builtin+--flag value' passes server flags; 'builtin@../main' runs another checkout's server (A/B); "
        "'builtin^/path/python' another interpreter (with gpuctl's dependencies)",
    )
    p.add_argument(
        "--image",
        type=Path,
        help="also measure the container image's webhook as it ships (hack/image.sh's OCI archive, e.g. "
        "build/image/gpuctl.oci.tar) on the image's own python; needs umoci",
    )
    p.add_argument(
        "--kubeconfig",
        default=os.environ.get("GPUCTL_BENCH_KUBECONFIG"),
        help="local cluster for the API server's view (part 2); omitted: part 1 only",
    )
    p.add_argument("--apiserver-requests", type=int, default=2000)
    p.add_argument("--apiserver-rate", type=float, default=100.0)
    p.add_argument("--apiserver-threads", type=int, default=16)
    args = p.parse_args(argv)
    if args.nice:
        os.nice(args.nice)
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as d:
        tmp = Path(d)
        ca, crt, key = make_certs(tmp)
        policy = os.sched_getscheduler(0)
        if args.realtime:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        if args.image:
            args.http = [*args.http, image_variant(args.image, tmp)]
        try:
            part1(args, tmp, ca, crt, key)
        finally:
            if args.realtime:
                os.sched_setscheduler(0, policy, os.sched_param(0))
        if args.kubeconfig:
            part2(args, tmp, ca, crt, key)
        else:
            print("\n(API server's view skipped: pass --kubeconfig of the local cluster, hack/cluster/up.sh)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
