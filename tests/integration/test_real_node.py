"""The chart installed with `helm install` on a real node: real pods from the built image.

The local cluster's KWOK nodes only pretend to run pods. hack/cluster/up.sh --real-node adds one real
node (a kubelet and containerd in their own namespaces, hack/cluster/real-node.sh) with the image of
hack/image.sh imported into its containerd, tainted gpuctl.runwhere.ai/platform so that only gpuctl's
pods land there (hack/cluster/real-node-values.yaml gives the chart the nodeSelector and toleration).

This module uses the session's cluster when it has that node (GPUCTL_TEST_KUBECONFIG, e.g. a cluster
started with `up.sh --real-node`), otherwise it starts its own real-node cluster for the module
(GPUCTL_TESTBED_REAL_NODE_OFFSET, default 900) and checks that down.sh leaves nothing on the machine.
Nothing here is skipped: a missing prerequisite (root, containerd, the image) fails with the fix.

The tests run in order on one release: install (time to Ready), the webhook through its Service,
Prometheus scraping the serve pods by their Service's annotations, a webhook pod deleted and one
crashed, the leading serve replica crashed, `helm upgrade`, `helm uninstall`.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import ApiError, Cluster, path
from tests.integration.conftest import reset_gpuctl_state, wait_until

pytestmark = pytest.mark.real_node  # hack/test.sh --real-node runs this module; the default run deselects it

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/gpuctl"
VALUES = ROOT / "hack/cluster/real-node-values.yaml"
ARCHIVE = Path(os.environ.get("GPUCTL_IMAGE_ARCHIVE", ROOT / "build/image/gpuctl.oci.tar"))
CACHE = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
VERSIONS = dict(
    line.split("=", 1)
    for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
    if "=" in line and not line.startswith("#")
)
HELM = CACHE / "bin" / f"helm-{VERSIONS['HELM_VERSION']}" / "helm"
KUBECTL = CACHE / "bin" / f"k8s-{VERSIONS['K8S_VERSION']}" / "kubectl"
NODE = "gpuctl-real-node"
NS = "gpuctl-system"
HOOK, SERVE = "gpuctl-admission", "gpuctl-serve"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
LEASE_DURATION, RETRY_PERIOD = 15, 2  # gpuctl serve's defaults (docs/metrics.md)


@dataclass
class RealNode:
    kubeconfig: str
    run: Path
    kube: Cluster
    env: dict[str, str]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [str(KUBECTL), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {p.stderr}")
        return p

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [str(HELM), "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True, env=self.env
        )
        if check and p.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def node_script(self, *args: str) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [str(ROOT / "hack/cluster/real-node.sh"), *args], capture_output=True, text=True, env=self.env
        )
        if p.returncode != 0:
            raise AssertionError(f"real-node.sh {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
        return p

    def logs(self) -> str:
        out = []
        for name in ("kubelet", "containerd", "real-node"):
            f = self.run / "logs" / f"{name}.log"
            if f.exists():
                out.append(f"----- {f} (tail)\n" + "\n".join(f.read_text().splitlines()[-30:]))
        return "\n".join(out)


def _has_real_node(kubeconfig: str) -> bool:
    try:
        node = Cluster.connect(kubeconfig=kubeconfig).get_or_none(path("Node", NODE))
    except Exception:
        return False
    conds = {c["type"]: c["status"] for c in (node or {}).get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def _leftovers(offset: int, run: Path) -> list[str]:
    """What a real node of this offset could leave on the machine (hack/cluster/real-node.sh)."""
    left = []
    if subprocess.run(["ip", "link", "show", f"gpuctl-rn{offset}"], capture_output=True).returncode == 0:
        left.append(f"interface gpuctl-rn{offset}")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mnt, fstype = line.split()[:3]
        if fstype in ("cgroup", "cgroup2") and Path(mnt, f"gpuctl-rn-{offset}").exists():
            left.append(f"cgroup {mnt}/gpuctl-rn-{offset}")
        if mnt.startswith(str(run)):
            left.append(f"mount {mnt}")
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(run) in cmd:
            left.append(f"process {p.name}: {cmd[:120]}")
    if run.exists():
        left.append(f"directory {run}")
    return left


@pytest.fixture(scope="module")
def node() -> Iterator[RealNode]:
    env = {**os.environ}
    candidates = [os.environ.get("GPUCTL_TEST_KUBECONFIG", "")]
    if "gpuctl-testbed" in os.environ.get("KUBECONFIG", "") or "gpuctl-pytest" in os.environ.get(
        "KUBECONFIG", ""
    ):
        candidates.append(os.environ["KUBECONFIG"])
    for kc in filter(None, candidates):
        if _has_real_node(kc):
            run = Path(kc).parent
            env["GPUCTL_TESTBED_RUN"] = str(run)
            yield RealNode(kc, run, Cluster.connect(kubeconfig=kc), env)
            return
    # Its own cluster with a real node, for this module.
    offset = int(os.environ.get("GPUCTL_TESTBED_REAL_NODE_OFFSET", "900"))
    run = Path(tempfile.gettempdir()) / f"gpuctl-realnode-{os.getpid()}"
    env.update(
        GPUCTL_TESTBED_RUN=str(run),
        GPUCTL_TESTBED_PORT_OFFSET=str(offset),
        GPUCTL_TESTBED_REAL_NODE="1",
        GPUCTL_IMAGE_ARCHIVE=str(ARCHIVE),
    )
    up = subprocess.run([str(ROOT / "hack/cluster/up.sh")], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True)
        pytest.fail(f"hack/cluster/up.sh --real-node failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}")
    kc = str(run / "kubeconfig")
    try:
        yield RealNode(kc, run, Cluster.connect(kubeconfig=kc), env)
    finally:
        down = subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True, text=True)
        try:
            wait_until(lambda: not _leftovers(offset, run), 20, 0.5, what="nothing of the real node left")
        except AssertionError:
            pytest.fail(f"hack/cluster/down.sh left {_leftovers(offset, run)}:\n{down.stdout}\n{down.stderr}")
        assert down.returncode == 0, down.stdout + down.stderr


def _pods(n: RealNode, app: str) -> list[dict]:
    return n.kube.list(f"/api/v1/namespaces/{NS}/pods", label_selector=f"app.kubernetes.io/name={app}")


def _ready(pod: dict) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return (
        pod["status"].get("phase") == "Running"
        and conds.get("Ready") == "True"
        and not pod["metadata"].get("deletionTimestamp")
    )


def _all_ready(n: RealNode) -> list[dict] | None:
    pods = [p for app in (HOOK, SERVE) for p in _pods(n, app)]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(live) == 4 and all(_ready(p) for p in live):
        return live
    return None


def _digest() -> str:
    f = ARCHIVE.parent / "digest"
    if not ARCHIVE.exists() or not f.exists():
        pytest.fail(f"{ARCHIVE} is missing: run hack/image.sh (hack/test.sh does, before the tests)")
    return f.read_text().strip()


@pytest.fixture(scope="module")
def team(node: RealNode, release: dict, tmp_path_factory) -> Iterator[dict]:
    """A pool on a KWOK node and a team with a quota in it, made by gpuctl after the install (its queues
    are the team's). Before the install it would fail it: `gpuctl create` makes the Kueue objects the
    chart installs, and Helm refuses to adopt objects it does not own."""
    sfx = uuid.uuid4().hex[:6]
    pool, ns = f"rn-pool-{sfx}", f"rn-team-{sfx}"
    spec = tmp_path_factory.mktemp("team") / "team.yaml"
    spec.write_text(
        yaml.safe_dump_all(
            [
                {"kind": "pool", "version": "v0.1", "pool": {"name": pool},
                 "nodes": {"gpu-node-5": {"gpu-type": "RTX4090"}}},
                {
                    "kind": "quota",
                    "version": "v0.1",
                    "quota": {"name": f"rn-quota-{sfx}"},
                    "namespace": {ns: {"cpu": 8, "memory": "64Gi", "gpu": 4, "pools": {pool: {"gpu": 4}}}},
                },
            ]
        )
    )  # fmt: skip
    gpuctl = ROOT / ".venv/bin/gpuctl"
    p = subprocess.run(
        [
            str(gpuctl if gpuctl.exists() else "gpuctl"),
            "--kubeconfig",
            node.kubeconfig,
            "create",
            "-f",
            str(spec),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    cqs = [cq["metadata"]["name"] for cq in node.kube.list(path("ClusterQueue")) if ns in json.dumps(cq)]
    yield {"pool": pool, "ns": ns, "cluster_queues": cqs}
    node.kube.delete(f"/api/v1/namespaces/{ns}")
    reset_gpuctl_state(node.kube)


def _job(ns: str, pool: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "raw", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"runwhere.ai/pool": pool},
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                }
            },
        },
    }


def _refused_by_the_chart(n: RealNode, team: dict) -> str:
    p = n.kubectl("apply", "-f", "-", input=yaml.safe_dump(_job(team["ns"], "no-such-pool")), check=False)
    assert p.returncode != 0, f"a Job naming a missing pool was admitted: {p.stdout}"
    assert 'admission webhook "workloads.admission.runwhere.ai" denied the request' in p.stderr, p.stderr
    assert "[pool-exists]" in p.stderr, p.stderr
    return p.stderr


@pytest.fixture(scope="module")
def release(node: RealNode) -> Iterator[dict]:
    """`helm install` of the chart with the built image's digest; the time until all four pods are Ready."""
    digest = _digest()
    node.node_script(
        "import", str(ARCHIVE)
    )  # the image as built now (a reused cluster may hold an older one)
    if node.helm("status", "gpuctl", "-n", NS, check=False).returncode == 0:
        pytest.fail(f"a release gpuctl already exists in {NS} on {node.kubeconfig}: helm uninstall it first")
    args = ["-n", NS, "-f", str(VALUES), "--set", f"image.digest={digest}"]
    # Objects the chart keeps on uninstall (Kueue's): the ones this module adds are removed at its end.
    rendered = yaml.safe_load_all(node.helm("template", "gpuctl", str(CHART), *args).stdout)
    keep = [
        (d["kind"], d["metadata"]["name"])
        for d in rendered
        if d and (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
    ]
    added = [k for k in keep if not _exists(node, *k)]
    for kind, name in set(keep) - set(added):
        meta = json.loads(node.kubectl("get", kind.lower(), name, "-o", "json").stdout)["metadata"]
        if (meta.get("annotations") or {}).get("meta.helm.sh/release-name") != "gpuctl":
            pytest.fail(
                f"{kind} {name} exists, not installed by Helm (gpuctl creates it with its first pool): "
                "helm install cannot adopt it. Delete it (kubectl delete "
                f"{kind.lower()} {name}) or use a cluster where gpuctl made no pool yet"
            )

    def namespace_usable() -> bool:
        ns = node.kube.get_or_none(path("Namespace", NS))
        return ns is None or not ns["metadata"].get("deletionTimestamp")

    wait_until(namespace_usable, 120, 1, what=f"namespace {NS} of an earlier release deleted")
    t0 = time.monotonic()
    node.helm("install", "gpuctl", str(CHART), "--create-namespace", *args)
    try:
        pods = wait_until(lambda: _all_ready(node), 240, 0.5, what="2 webhook + 2 serve pods Ready")
    except AssertionError as e:
        raise AssertionError(
            f"{e}\n{node.kubectl('-n', NS, 'get', 'pods,events', check=False).stdout}\n{node.logs()}"
        ) from None
    ready_s = time.monotonic() - t0
    print(f"\nreal node: helm install -> 2 webhook + 2 serve pods Ready in {ready_s:.1f}s")
    yield {"digest": digest, "args": args, "ready_s": ready_s, "pods": pods}
    if node.helm("status", "gpuctl", "-n", NS, check=False).returncode == 0:
        node.helm("uninstall", "gpuctl", "-n", NS, "--wait", "--timeout", "2m", check=False)
    node.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)
    for kind, name in added:
        node.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


def test_helm_install_runs_the_image_on_the_real_node_and_its_webhook_refuses_a_raw_job(
    node: RealNode, team: dict, release: dict
) -> None:
    assert release["ready_s"] < 180, release["ready_s"]
    for p in release["pods"]:
        assert p["spec"]["nodeName"] == NODE, (p["metadata"]["name"], p["spec"]["nodeName"])
        (c,) = p["status"]["containerStatuses"]
        assert c["imageID"].endswith(release["digest"]), c["imageID"]  # the built image, by digest
        assert c["restartCount"] == 0, (p["metadata"]["name"], c)
    # Only the real node runs them: the KWOK nodes got none.
    on_kwok = [p for p in n_pods(node) if p["spec"].get("nodeName") not in (None, NODE)]
    assert on_kwok == []
    # The API server reaches the webhook through its Service (endpoint routing), not by URL.
    vwc = node.kube.get(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpuctl-admission"
    )
    assert all(w["clientConfig"].get("service", {}).get("name") == HOOK for w in vwc["webhooks"])
    assert all("url" not in w["clientConfig"] for w in vwc["webhooks"])
    _refused_by_the_chart(node, team)
    # A Job that breaks no rule is admitted (server dry run: nothing persists).
    node.kube.create(_job(team["ns"], team["pool"]), dry_run=True)


def n_pods(n: RealNode) -> list[dict]:
    return [p for app in (HOOK, SERVE) for p in _pods(n, app)]


def _exists(n: RealNode, kind: str, name: str, namespace: str | None = None) -> bool:
    """By kubectl (it discovers every kind, the admission policies included)."""
    ns = ["-n", namespace] if namespace else []
    p = n.kubectl("get", kind.lower(), name, *ns, "-o", "name", check=False)
    if p.returncode != 0 and "NotFound" not in p.stderr:
        raise AssertionError(f"kubectl get {kind} {name}: {p.stderr}")
    return p.returncode == 0


# ------------------------------------------------------------------------------------------ Prometheus
def _meta_name(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in s)


class EndpointsDiscovery(BaseHTTPRequestHandler):
    """Prometheus http_sd: the targets and __meta_kubernetes_* labels of kubernetes_sd's `endpoints` role
    (Debian's prometheus is built without kubernetes_sd: only static, file, http and dns discovery)."""

    kube: Cluster

    def do_GET(self) -> None:
        groups = []
        services = {
            (s["metadata"]["namespace"], s["metadata"]["name"]): s for s in self.kube.list("/api/v1/services")
        }
        for ep in self.kube.list("/api/v1/endpoints"):
            key = (ep["metadata"]["namespace"], ep["metadata"]["name"])
            svc = services.get(key)
            if not svc:
                continue
            base = {"__meta_kubernetes_namespace": key[0], "__meta_kubernetes_service_name": key[1]}
            for k, v in (svc["metadata"].get("annotations") or {}).items():
                base[f"__meta_kubernetes_service_annotation_{_meta_name(k)}"] = v
                base[f"__meta_kubernetes_service_annotationpresent_{_meta_name(k)}"] = "true"
            for k, v in (svc["metadata"].get("labels") or {}).items():
                base[f"__meta_kubernetes_service_label_{_meta_name(k)}"] = v
            for subset in ep.get("subsets") or []:
                addrs = [(a, "true") for a in subset.get("addresses") or []]
                addrs += [(a, "false") for a in subset.get("notReadyAddresses") or []]
                for a, ready in addrs:
                    for port in subset.get("ports") or []:
                        labels = {
                            **base,
                            "__meta_kubernetes_endpoint_ready": ready,
                            "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                            "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                            "__meta_kubernetes_pod_name": (a.get("targetRef") or {}).get("name", ""),
                            "__meta_kubernetes_pod_node_name": a.get("nodeName", ""),
                        }
                        groups.append({"targets": [f"{a['ip']}:{port['port']}"], "labels": labels})
        body = json.dumps(groups).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


# The annotation-driven job of the prometheus-community chart ("kubernetes-service-endpoints"), the usual
# way to scrape without the Operator: prometheus.io/scrape, /scheme, /path, /port on the Service.
_ANN = "__meta_kubernetes_service_annotation_prometheus_io_"
SERVICE_ENDPOINTS_RELABEL = [
    {"source_labels": [f"{_ANN}scrape"], "action": "keep", "regex": "true"},
    {"source_labels": [f"{_ANN}scheme"], "action": "replace", "target_label": "__scheme__",
     "regex": "(https?)"},
    {"source_labels": [f"{_ANN}path"], "action": "replace", "target_label": "__metrics_path__",
     "regex": "(.+)"},
    {"source_labels": ["__address__", f"{_ANN}port"], "action": "replace",
     "target_label": "__address__", "regex": r"(.+?)(?::\d+)?;(\d+)", "replacement": "$1:$2"},
    {"source_labels": ["__meta_kubernetes_service_name"], "action": "replace", "target_label": "service"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "action": "replace", "target_label": "pod"},
]  # fmt: skip


class Prom:
    def __init__(self, url: str, log: Path):
        self.url, self.log = url, log

    def query(self, expr: str) -> list[dict]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            return json.load(r)["data"]["result"]

    def targets(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=10) as r:
            return json.load(r)["data"]["activeTargets"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prometheus(node: RealNode, release: dict, tmp_path_factory) -> Iterator[Prom]:
    if not Path(PROMETHEUS).exists():
        pytest.fail("Prometheus is not installed: apt-get install -y prometheus (hack/test.sh does)")
    tmp = tmp_path_factory.mktemp("prometheus")
    secret = node.kube.get(f"/api/v1/namespaces/{NS}/secrets/gpuctl-api-tls")
    (tmp / "ca.crt").write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    EndpointsDiscovery.kube = node.kube
    sd = ThreadingHTTPServer(("127.0.0.1", 0), EndpointsDiscovery)
    threading.Thread(target=sd.serve_forever, daemon=True).start()
    port = _free_port()
    cfg = {
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s"},
        "scrape_configs": [
            {
                "job_name": "kubernetes-service-endpoints",
                "http_sd_configs": [
                    {"url": f"http://127.0.0.1:{sd.server_address[1]}/", "refresh_interval": "2s"}
                ],
                # serve's port speaks HTTPS with the chart's certificate for Service gpuctl (apiTls.enabled):
                # verify it as the chart's ServiceMonitor does.
                "tls_config": {"ca_file": str(tmp / "ca.crt"), "server_name": f"gpuctl.{NS}.svc"},
                "relabel_configs": SERVICE_ENDPOINTS_RELABEL,
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    log = tmp / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    prom = Prom(f"http://127.0.0.1:{port}", log)

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited:\n{log.read_text()[-3000:]}")
        try:
            return urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2).status == 200
        except OSError:
            return False

    try:
        wait_until(ready, 60, 0.5, what="prometheus ready")
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        sd.shutdown()


def _serve_up(prom: Prom) -> dict[str, dict] | None:
    ups = {t["labels"]["instance"]: t for t in prom.targets() if t["labels"].get("service") == "gpuctl"}
    return ups if len(ups) == 2 and all(t["health"] == "up" for t in ups.values()) else None


def _leaders(prom: Prom) -> dict[str, float]:
    return {
        r["metric"]["instance"]: float(r["value"][1])
        for r in prom.query('gpuctl_serve_leader{service="gpuctl"}')
    }


def test_prometheus_scrapes_both_serve_pods_by_their_service_annotations(
    node: RealNode, team: dict, release: dict, prometheus: Prom
) -> None:
    try:
        ups = wait_until(lambda: _serve_up(prometheus), 60, 1, what="both serve pods scraped")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{json.dumps(prometheus.targets(), indent=1)[-3000:]}") from None
    ips = {p["status"]["podIP"] for p in _pods(node, SERVE)}
    assert set(ups) == {f"{ip}:9090" for ip in ips}  # pod IPs, reached from the machine
    assert {t["scrapeUrl"].split("://")[0] for t in ups.values()} == {"https"}
    wait_until(
        lambda: sorted(_leaders(prometheus).values()) == [0.0, 1.0], 30, 1, what="one leader, one standby"
    )
    leader_ip = next(i for i, v in _leaders(prometheus).items() if v == 1.0)
    series = f'gpuctl_pool_allocatable_gpus{{pool="{team["pool"]}"}}'
    got = wait_until(lambda: prometheus.query(series), 30, 1, what=series)
    assert [r["metric"]["instance"] for r in got] == [leader_ip]  # only the leader exports cluster state


# ----------------------------------------------------------------------------------- webhook failover
class AdmissionLoad:
    """Server-dry-run creates of a Job the webhook admits and one it refuses, in two threads, counting
    outcomes: allowed, denied (by the webhook's rules), unreachable ("failed calling webhook", what
    failurePolicy Fail promises when no replica answers: refused, never admitted) and anything else."""

    def __init__(self, kube: Cluster, team: dict):
        self.kube = kube
        self.good, self.bad = _job(team["ns"], team["pool"]), _job(team["ns"], "no-such-pool")
        self.counts: collections.Counter = collections.Counter()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]
        self.t0 = time.monotonic()

    def _run(self) -> None:
        while not self.stop.is_set():
            for kind, obj in (("good", self.good), ("bad", self.bad)):
                try:
                    self.kube.create(obj, dry_run=True)
                    out = "allowed"
                except ApiError as e:
                    m = str(e)
                    out = (
                        "denied" if "denied the request" in m
                        else "unreachable" if "failed calling webhook" in m
                        else "other"
                    )  # fmt: skip
                    if out != "denied":
                        self.errors.append(f"{time.monotonic() - self.t0:.1f}s {kind}: {m[:300]}")
                self.counts[(kind, out)] += 1

    def __enter__(self) -> AdmissionLoad:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _restarted(pod: dict) -> bool:
    return pod["status"]["containerStatuses"][0]["restartCount"] > 0 and _ready(pod)


def _container_id(pod: dict) -> str:
    (c,) = pod["status"]["containerStatuses"]
    return c["containerID"].removeprefix("containerd://")


def _kept_the_promise(load: AdmissionLoad, what: str) -> None:
    """failurePolicy Fail's promise: a request no replica answers is refused, never admitted unreviewed.
    So: the refused Job never admitted, no error but "failed calling webhook", and the admissible Job
    admitted throughout (the other replica serves)."""
    c = load.counts
    print(f"\nreal node: {what}: {dict(c)}" + (f"; first error: {load.errors[0]}" if load.errors else ""))
    assert c[("bad", "allowed")] == 0, c
    assert c[("good", "other")] == 0 and c[("bad", "other")] == 0, load.errors[:10]
    assert c[("good", "allowed")] > 10 and c[("bad", "denied")] > 10, c


def _no_errors_now(n: RealNode, team: dict) -> None:
    with AdmissionLoad(n.kube, team) as load:
        wait_until(lambda: sum(load.counts.values()) >= 40, 120, 0.2, what="40 admission requests")
    assert load.errors == [] and load.counts[("bad", "allowed")] == 0, (load.counts, load.errors[:5])


def test_webhook_pod_deleted_or_crashed_the_other_replica_serves(
    node: RealNode, team: dict, release: dict
) -> None:
    # A deletion (a drain, a rollout): the pod leaves the Service's endpoints, sleeps in preStop, then stops.
    victim = _pods(node, HOOK)[0]["metadata"]["name"]
    with AdmissionLoad(node.kube, team) as load:
        time.sleep(3)
        node.kubectl("-n", NS, "delete", "pod", victim)
        wait_until(lambda: _all_ready(node), 120, 0.5, what="the Deployment's replacement Ready")
        time.sleep(3)
    _kept_the_promise(load, "webhook pod deleted")
    _no_errors_now(node, team)

    # A crash (SIGKILL, no preStop): the API server may still pick the dead replica until its readiness
    # probe fails; those requests are refused.
    crashed = _pods(node, HOOK)[0]
    with AdmissionLoad(node.kube, team) as load:
        time.sleep(2)
        node.node_script("ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", _container_id(crashed))
        wait_until(
            lambda: _restarted(node.kube.get(path("Pod", crashed["metadata"]["name"], NS))),
            120, 0.5, what="the crashed webhook container restarted and Ready",
        )  # fmt: skip
        time.sleep(3)
    _kept_the_promise(load, "webhook container crashed")
    _no_errors_now(node, team)


# ------------------------------------------------------------------------------------- serve failover
def _lease(n: RealNode) -> dict:
    return n.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpuctl-serve")["spec"]


def _micro(ts: str) -> float:
    from datetime import datetime

    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def test_leading_serve_pod_killed_the_standby_leads_within_the_lease_and_metrics_continue(
    node: RealNode, team: dict, release: dict, prometheus: Prom
) -> None:
    wait_until(lambda: _serve_up(prometheus), 60, 1, what="both serve pods scraped")
    wait_until(
        lambda: sorted(_leaders(prometheus).values()) == [0.0, 1.0], 30, 1, what="one leader, one standby"
    )
    lease = _lease(node)
    holder = lease["holderIdentity"]
    pods = {p["metadata"]["name"]: p for p in _pods(node, SERVE)}
    leader = pods[holder.rsplit("_", 1)[0]]
    (standby,) = [p for name, p in pods.items() if name != leader["metadata"]["name"]]
    standby_instance = f"{standby['status']['podIP']}:9090"
    t_kill = time.time()
    node.node_script("ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", _container_id(leader))
    new = wait_until(
        lambda: (s := _lease(node))["holderIdentity"] != holder and s,
        LEASE_DURATION + 3 * RETRY_PERIOD + 10, 0.2, what="another replica holding the Lease",
    )  # fmt: skip
    took = time.time() - t_kill
    stale = _micro(new["acquireTime"]) - _micro(lease["renewTime"])
    print(
        f"\nreal node: leader killed, standby leads {took:.1f}s later ({stale:.1f}s after its last renewal)"
    )
    assert new["holderIdentity"].startswith(standby["metadata"]["name"] + "_"), new
    # client-go's rule: the standby takes over once the record has stood still for a lease duration (it
    # polls every retry period); the crashed leader renewed at most a retry period before it died.
    assert stale <= LEASE_DURATION + 2 * RETRY_PERIOD + 3, (stale, lease, new)
    assert took <= LEASE_DURATION + 3 * RETRY_PERIOD + 4, took
    # Metrics continue: the new leader exports the cluster-state series, Prometheus scrapes them.
    series = f'gpuctl_pool_allocatable_gpus{{pool="{team["pool"]}",instance="{standby_instance}"}}'
    wait_until(lambda: prometheus.query(series), 30, 1, what=f"{series} from the new leader")
    wait_until(
        lambda: _leaders(prometheus).get(standby_instance) == 1.0,
        30,
        1,
        what="gpuctl_serve_leader on the new leader",
    )
    # The killed container restarts as the standby: both Ready, both scraped, one leader.
    wait_until(lambda: _all_ready(node), 120, 0.5, what="the killed serve container back and Ready")
    wait_until(lambda: _serve_up(prometheus), 60, 1, what="both serve pods scraped again")
    wait_until(lambda: sorted(_leaders(prometheus).values()) == [0.0, 1.0], 30, 1, what="one leader again")


# ------------------------------------------------------------------------------------ upgrade, uninstall
def _tls(n: RealNode) -> dict[str, dict]:
    return {
        name: n.kube.get(f"/api/v1/namespaces/{NS}/secrets/{name}")["data"]
        for name in ("gpuctl-admission-tls", "gpuctl-api-tls")
    }


def _ca_bundles(n: RealNode) -> set[str]:
    vwc = n.kube.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpuctl-admission")
    return {w["clientConfig"]["caBundle"] for w in vwc["webhooks"]}


def test_helm_upgrade_keeps_the_tls_certificates(node: RealNode, team: dict, release: dict) -> None:
    before, bundles = _tls(node), _ca_bundles(node)
    old = {p["metadata"]["name"] for p in n_pods(node)}
    marker = f"m{uuid.uuid4().hex[:8]}"  # never all digits: helm --set would make it a number
    node.helm(
        "upgrade", "gpuctl", str(CHART), *release["args"],
        "--set", f"webhook.podAnnotations.upgrade={marker}",
        "--set", f"serve.podAnnotations.upgrade={marker}",
    )  # fmt: skip

    def rolled() -> list[dict] | None:
        pods = _all_ready(node)
        if pods and not {p["metadata"]["name"] for p in pods} & old:
            return pods
        return None

    pods = wait_until(rolled, 240, 1, what="every pod replaced by the upgrade and Ready")
    assert {p["metadata"]["annotations"]["upgrade"] for p in pods} == {marker}
    assert _tls(node) == before  # the same certificates and keys, not re-generated
    assert _ca_bundles(node) == bundles
    _refused_by_the_chart(node, team)  # the new webhook pods serve with the kept certificate
    assert json.loads(node.helm("status", "gpuctl", "-n", NS, "-o", "json").stdout)["version"] == 2


def test_helm_uninstall_keeps_kueue_objects_and_team_queues_and_removes_the_webhook(
    node: RealNode, team: dict, release: dict
) -> None:
    manifest = [d for d in yaml.safe_load_all(node.helm("get", "manifest", "gpuctl", "-n", NS).stdout) if d]
    kept = [
        d
        for d in manifest
        if (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
    ]
    assert {d["kind"] for d in kept} >= {"WorkloadPriorityClass", "ResourceFlavor"}, kept
    admission_kinds = {
        "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
    }  # fmt: skip
    admission = [d for d in manifest if d["kind"] in admission_kinds]
    assert admission
    node.helm("uninstall", "gpuctl", "-n", NS, "--wait", "--timeout", "3m")
    for d in kept:
        assert _exists(node, d["kind"], d["metadata"]["name"]), f"{d['kind']} {d['metadata']['name']} deleted"
    assert team["cluster_queues"]
    for cq in team["cluster_queues"]:
        assert _exists(node, "ClusterQueue", cq), f"the team's ClusterQueue {cq} deleted"
    assert _exists(node, "LocalQueue", "default", team["ns"]), "the team's LocalQueue deleted"
    for d in admission:
        assert not _exists(node, d["kind"], d["metadata"]["name"]), (
            f"{d['kind']} {d['metadata']['name']} left"
        )
    hooks = node.kube.list("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")
    assert not [h["metadata"]["name"] for h in hooks if "gpuctl" in h["metadata"]["name"]]
    wait_until(lambda: not n_pods(node), 60, 1, what="gpuctl's pods gone")
    # With no webhook configuration behind, writes in team namespaces go on (nothing calls a missing webhook).
    node.kube.create(_job(team["ns"], team["pool"]), dry_run=True)


# ------------------------------------------------------------------------------------- real ranks rendezvous
# Two ranks of a `gpuctl create` gang as real containers of the project's image: rank 1 finds rank 0 by the
# name gpuctl gives it (MASTER_ADDR = <job>-0.svc-<job>: the Indexed Job's host name in the headless
# Service, answered by the cluster DNS, CoreDNS), connects to MASTER_PORT, both exchange their ranks and
# exit 0. torchrun's c10d rendezvous does the same first step; NCCL then needs what docs/distributed.md lists.
RANKS = """
import os, socket, sys, time
rank, addr, port = int(os.environ["NODE_RANK"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    if os.environ.get("RANK0_LISTENS") == "no":
        time.sleep(600)
    srv = socket.create_server(("", port))
    srv.settimeout(180)
    conn, peer = srv.accept()
else:
    end = time.monotonic() + float(os.environ.get("REACH_WITHIN", "120"))
    while True:
        try:
            ip = socket.gethostbyname(addr)
            conn = socket.create_connection((ip, port), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > end:
                sys.exit(f"rank {rank}: cannot reach rank 0 at {addr}:{port}: {e}")
            time.sleep(1)
    print(f"rank {rank}: {addr} is {ip}", flush=True)
conn.sendall(str(rank).encode())
other = conn.recv(16).decode()
print(f"rank {rank} of {os.environ['WORLD_SIZE']}: rank {other} answered", flush=True)
sys.exit(0 if other == str(1 - rank) else 1)
"""


def _image_name() -> str:
    """The name the node's containerd holds the built image under (real-node.sh import_image)."""
    import tarfile

    with tarfile.open(ARCHIVE) as t:
        index = json.load(t.extractfile("index.json"))  # type: ignore[arg-type]
    return index["manifests"][0]["annotations"]["io.containerd.image.name"]


def _gang(name: str, ns: str, pool: str, env: dict[str, str]) -> dict:
    return {
        "kind": "training",
        "version": "v0.1",
        "job": {"name": name, "namespace": ns},
        "environment": {
            "image": _image_name(),
            "command": ["python3.11", "-c", RANKS],
            "env": [{"name": k, "value": v} for k, v in env.items()],
        },
        "resources": {"pool": pool, "nodes": 2, "gpu": 0, "cpu": "250m", "memory": "128Mi"},
    }


def _job_conditions(n: RealNode, ns: str, name: str) -> dict[str, dict]:
    job = n.kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
    return {c["type"]: c for c in job.get("status", {}).get("conditions", []) if c["status"] == "True"}


@pytest.fixture
def rendezvous_team(node: RealNode, tmp_path: Path) -> Iterator[dict]:
    """A CPU pool on the real node and a team with a quota in it; the platform taint lifted meanwhile (the
    node is the chart's; gpuctl's pool taint keeps other pods off it)."""
    sfx = uuid.uuid4().hex[:6]
    pool, ns = f"rn-cpu-{sfx}", f"rn-ranks-{sfx}"
    spec = tmp_path / "team.yaml"
    spec.write_text(
        yaml.safe_dump_all(
            [
                {"kind": "pool", "version": "v0.1", "pool": {"name": pool},
                 "nodes": {NODE: {"gpu-type": ""}}},
                {"kind": "quota", "version": "v0.1", "quota": {"name": f"rn-ranks-{sfx}"},
                 "namespace": {ns: {"cpu": 2, "memory": "2Gi", "gpu": 0}}},
            ]
        )
    )  # fmt: skip
    node.kubectl("taint", "node", NODE, "gpuctl.runwhere.ai/platform-")
    gpuctl = str(ROOT / ".venv/bin/gpuctl") if (ROOT / ".venv/bin/gpuctl").exists() else "gpuctl"
    p = subprocess.run([gpuctl, "--kubeconfig", node.kubeconfig, "create", "-f", str(spec)],
                       capture_output=True, text=True)  # fmt: skip
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        yield {"pool": pool, "ns": ns, "gpuctl": gpuctl}
    finally:
        node.kube.delete(f"/api/v1/namespaces/{ns}")
        subprocess.run([gpuctl, "--kubeconfig", node.kubeconfig, "delete", "pool", pool],
                       capture_output=True, text=True)  # fmt: skip
        node.kubectl("taint", "node", NODE, "gpuctl.runwhere.ai/platform=true:NoSchedule", "--overwrite")


def test_a_gangs_real_ranks_find_rank_0_by_name_and_exchange_ranks(
    node: RealNode, rendezvous_team: dict, tmp_path: Path
) -> None:
    ns, pool, gpuctl = rendezvous_team["ns"], rendezvous_team["pool"], rendezvous_team["gpuctl"]
    f = tmp_path / "ranks.yaml"
    f.write_text(yaml.safe_dump(_gang("ranks", ns, pool, {})) + "---\n" + yaml.safe_dump(
        _gang("lonely", ns, pool, {"RANK0_LISTENS": "no", "REACH_WITHIN": "15"})))  # fmt: skip
    p = subprocess.run([gpuctl, "--kubeconfig", node.kubeconfig, "create", "-f", str(f)],
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr

    def finished(name: str) -> dict | None:
        conds = _job_conditions(node, ns, name)
        return conds if {"Complete", "Failed"} & set(conds) else None

    try:
        done = wait_until(lambda: finished("ranks"), 300, 2, what="the 2-rank gang finished")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{node.kubectl('-n', ns, 'get', 'pods,events', check=False).stdout}\n"
                             f"{node.logs()}") from None  # fmt: skip
    pods = node.kube.list(
        f"/api/v1/namespaces/{ns}/pods", label_selector="batch.kubernetes.io/job-name=ranks"
    )
    logs = {p["metadata"]["name"]: node.kubectl("-n", ns, "logs", p["metadata"]["name"]).stdout for p in pods}
    assert "Complete" in done, (done, logs)
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    text = "\n".join(logs.values())
    assert f"rank 1: ranks-0.svc-ranks is {_pod_ip(pods, 0)}" in text, logs
    assert "rank 0 of 2: rank 1 answered" in text and "rank 1 of 2: rank 0 answered" in text, logs
    # A rank that cannot reach rank 0 fails the whole gang (podFailurePolicy FailJob): rank 0 is stopped.
    failed = wait_until(lambda: finished("lonely"), 300, 2, what="the unreachable gang finished")
    assert failed.get("Failed", {}).get("reason") == "PodFailurePolicy", failed
    wait_until(
        lambda: all(
            p["status"].get("phase") in ("Succeeded", "Failed")
            for p in node.kube.list(f"/api/v1/namespaces/{ns}/pods",
                                    label_selector="batch.kubernetes.io/job-name=lonely")
        ),
        120, 2, what="rank 0 of the failed gang stopped",
    )  # fmt: skip


def _pod_ip(pods: list[dict], rank: int) -> str:
    (pod,) = [
        p for p in pods
        if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == str(rank)
    ]  # fmt: skip
    return pod["status"].get("podIP", "")


# `gpuctl exec`, `attach` and `port-forward` into a real pod as a team member (docs/cli.md, "Into a running
# job"), on this module's cluster: collected here, after the chart's tests.
from tests.integration.real_node_exec import (  # noqa: E402
    exec_team,  # noqa: F401 - its fixture
    test_attach_streams_what_the_main_process_prints,  # noqa: F401
    test_exec_prints_the_commands_output_and_exits_with_its_code,  # noqa: F401
    test_port_forward_carries_connections_to_the_pods_port,  # noqa: F401
    test_stdin_reaches_the_command_and_its_end_ends_the_read,  # noqa: F401
)
