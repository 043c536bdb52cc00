"""The chart's ServiceMonitors as the Prometheus Operator turns them into scrape configs, run by the real
Prometheus against a real `gpuctl serve` and webhook; and the same targets scraped the annotation way.

Issue 25: the ServiceMonitor lacked `honorLabels: true`, so under the Operator gpuctl's own `namespace`
label (the team's, on gpuctl_team_info and every per-team series) lost to the target label namespace
(gpuctl's namespace) and became `exported_namespace`: the Teams dashboard's team variable
(`label_values(gpuctl_team_info, namespace)`) listed only gpuctl's namespace and every per-team panel was
empty. And GpuctlServiceDown selected job="gpuctl", which annotation-based scraping never sets.

How it runs, and what differs from a cluster:
- `operator_scrape_config` is prometheus-operator's generateServiceMonitorConfig (pkg/prometheus/
  promcfg.go) ported for the fields gpuctl's ServiceMonitors use (any other field fails the test): job name,
  honor_labels, scheme, TLS (the Secret's ca.crt written to a file, as the Operator mounts it), and the
  whole relabelling: the Service label selector, the port, node/pod/namespace/service/container target
  labels, the running-pod filter, job from the Service name, `endpoint`, and the hashmod sharding rule
  with SHARD=0.
- Debian's Prometheus is built without kubernetes_sd, so the endpoints role's targets come from a file
  (`endpoints_targets`): for the Services and Endpoints read from the API server, the same
  __meta_kubernetes_* labels Prometheus' endpoints discovery gives them.
- The chart's Services are applied as rendered but without a pod selector, with Endpoints that point at
  this machine's address where the two processes listen (KWOK pods run nothing); the Services'
  prometheus.io/port annotations name those ports.
- The annotation way is the prometheus-community chart's `kubernetes-service-endpoints` job (its
  values.yaml, honor_labels true), one job per HTTPS Service because each needs its CA and server name.
The rules are the chart's PrometheusRule groups. A control run without honorLabels shows the breakage.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import Cluster, path
from gpuctl.constants import Labels
from gpuctl.domain.pools import pool_capacities
from gpuctl.service.node_pools import patch_node_pool
from queues import PoolGuarantee, TeamQuota, desired_objects, local_queue, team_namespace
from tests.integration.conftest import reset_gpuctl_state, wait_until
from tests.integration.test_chart import CHART, DIGEST, helm

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
POOL, NODE = "op-pool", "gpu-node-3"
DOWN_ALERTS = ("GpuctlServiceDown", "GpuctlWebhookDown", "GpuctlWebhookReplicaDown")
OPERATOR_APIS = ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"]


# ------------------------------------------------------------------ the Operator's scrape config
def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


SUPPORTED_SPEC = {"selector", "namespaceSelector", "endpoints"}
SUPPORTED_ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "honorLabels", "scheme", "tlsConfig"}


def operator_scrape_config(sm: dict, i: int, targets_file: Path, ca_file: Path | None) -> dict:
    """prometheus-operator's generateServiceMonitorConfig for endpoint `i` of ServiceMonitor `sm`, with the
    endpoints role's discovery replaced by `targets_file` (see endpoints_targets)."""
    spec, meta = sm["spec"], sm["metadata"]
    assert set(spec) <= SUPPORTED_SPEC, f"port the Operator's handling of {set(spec) - SUPPORTED_SPEC}"
    ep = spec["endpoints"][i]
    assert set(ep) <= SUPPORTED_ENDPOINT, f"port the Operator's handling of {set(ep) - SUPPORTED_ENDPOINT}"
    assert not spec["selector"].get("matchExpressions"), "port matchExpressions"
    cfg: dict = {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
        "honor_labels": bool(ep.get("honorLabels", False)),
        # kubernetes_sd_configs: [{role: endpoints, namespaces: {names: namespaceSelector.matchNames}}]
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
    }
    # Intervals shortened for the test (the Operator copies interval and scrapeTimeout as written).
    cfg["scrape_interval"], cfg["scrape_timeout"] = "1s", "1s"
    assert ep.get("interval") and ep.get("scrapeTimeout")
    if ep.get("path"):
        cfg["metrics_path"] = ep["path"]
    if ep.get("scheme"):
        cfg["scheme"] = ep["scheme"]
    if ep.get("tlsConfig"):
        tls = ep["tlsConfig"]
        assert set(tls) <= {"ca", "serverName"} and ca_file is not None
        cfg["tls_config"] = {"ca_file": str(ca_file), "server_name": tls["serverName"]}
    relabel: list[dict] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for k, v in sorted(spec["selector"]["matchLabels"].items()):
        relabel.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_service_label_{_sanitize(k)}",
                    f"__meta_kubernetes_service_labelpresent_{_sanitize(k)}",
                ],
                "regex": f"({v});true",
            }
        )
    relabel.append(
        {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"]}
    )
    target = [
        "__meta_kubernetes_endpoint_address_target_kind",
        "__meta_kubernetes_endpoint_address_target_name",
    ]
    by_target = {"source_labels": target, "separator": ";", "replacement": "${1}"}
    relabel += [
        {**by_target, "regex": "Node;(.*)", "target_label": "node"},
        {**by_target, "regex": "Pod;(.*)", "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": ep["port"]},
        # Sharding, one shard: the config-reloader writes SHARD=0 into $(SHARD).
        {"source_labels": ["__address__"], "target_label": "__tmp_hash", "modulus": 1, "action": "hashmod"},
        {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"},
    ]  # fmt: skip
    cfg["relabel_configs"] = relabel
    cfg["metric_relabel_configs"] = []
    return cfg


# The prometheus-community chart's annotation-driven job (charts/prometheus/values.yaml,
# "kubernetes-service-endpoints"), verbatim but for the discovery (a file, as above).
ANN = "__meta_kubernetes_service_annotation_prometheus_io_"
SERVICE_ENDPOINTS_RELABEL = [
    {"source_labels": [f"{ANN}scrape"], "action": "keep", "regex": "true"},
    {"source_labels": [f"{ANN}scrape_slow"], "action": "drop", "regex": "true"},
    {"source_labels": [f"{ANN}scheme"], "action": "replace", "target_label": "__scheme__",
     "regex": "(https?)"},
    {"source_labels": [f"{ANN}path"], "action": "replace", "target_label": "__metrics_path__",
     "regex": "(.+)"},
    {"source_labels": ["__address__", f"{ANN}port"], "action": "replace", "target_label": "__address__",
     "regex": r"(.+?)(?::\d+)?;(\d+)", "replacement": "$1:$2"},
    {"action": "labelmap", "regex": f"{ANN}param_(.+)", "replacement": "__param_$1"},
    {"action": "labelmap", "regex": "__meta_kubernetes_service_label_(.+)"},
    {"source_labels": ["__meta_kubernetes_namespace"], "action": "replace", "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_service_name"], "action": "replace", "target_label": "service"},
    {"source_labels": ["__meta_kubernetes_pod_node_name"], "action": "replace", "target_label": "node"},
]  # fmt: skip


def annotation_scrape_config(service: str, targets_file: Path, ca_file: Path, server_name: str) -> dict:
    """The community chart's job for one of gpuctl's HTTPS Services: its CA and server name are the scrape
    config's (what docs/metrics.md tells users of that chart to add)."""
    keep = {"source_labels": ["__meta_kubernetes_service_name"], "action": "keep", "regex": service}
    return {
        "job_name": "kubernetes-service-endpoints" + ("" if service == "gpuctl" else f"-{service}"),
        "honor_labels": True,
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
        "tls_config": {"ca_file": str(ca_file), "server_name": server_name},
        "relabel_configs": [keep, *SERVICE_ENDPOINTS_RELABEL],
    }


def endpoints_targets(kube: Cluster, namespace: str) -> list[dict]:
    """Prometheus' kubernetes_sd `endpoints` role (discovery/kubernetes/endpoints.go) for one namespace:
    a target per address and port of each Endpoints, with the endpoints', address' and Service's labels."""

    def meta(prefix: str, m: dict) -> dict:
        out = {}
        for k, v in (m.get("labels") or {}).items():
            out[f"__meta_kubernetes_{prefix}_label_{_sanitize(k)}"] = v
            out[f"__meta_kubernetes_{prefix}_labelpresent_{_sanitize(k)}"] = "true"
        for k, v in (m.get("annotations") or {}).items():
            out[f"__meta_kubernetes_{prefix}_annotation_{_sanitize(k)}"] = v
            out[f"__meta_kubernetes_{prefix}_annotationpresent_{_sanitize(k)}"] = "true"
        return out

    services = {s["metadata"]["name"]: s for s in kube.list(path("Service", namespace=namespace))}
    groups = []
    for eps in kube.list(f"/api/v1/namespaces/{namespace}/endpoints"):
        name = eps["metadata"]["name"]
        base = {
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_endpoints_name": name,
            **meta("endpoints", eps["metadata"]),
        }
        if name in services:
            base |= {"__meta_kubernetes_service_name": name, **meta("service", services[name]["metadata"])}
        for subset in eps.get("subsets") or []:
            addrs = [(a, "true") for a in subset.get("addresses") or []]
            addrs += [(a, "false") for a in subset.get("notReadyAddresses") or []]
            for addr, ready in addrs:
                for port in subset.get("ports") or []:
                    labels = {
                        **base,
                        "__meta_kubernetes_endpoint_ready": ready,
                        "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                        "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                    }
                    if addr.get("targetRef"):
                        labels["__meta_kubernetes_endpoint_address_target_kind"] = addr["targetRef"]["kind"]
                        labels["__meta_kubernetes_endpoint_address_target_name"] = addr["targetRef"]["name"]
                    groups.append({"targets": [f"{addr['ip']}:{port['port']}"], "labels": labels})
    return groups


# ------------------------------------------------------------------ the stack
def _host_address() -> str:
    """This machine's address on its default route: Endpoints refuse loopback addresses."""
    out = subprocess.run(["ip", "-4", "route", "get", "192.0.2.123"], capture_output=True, text=True).stdout
    m = re.search(r"\bsrc (\d+\.\d+\.\d+\.\d+)", out)
    if not m or m[1].startswith("127."):
        pytest.fail(f"no non-loopback IPv4 address for the Endpoints (ip route get: {out!r})")
    return m[1]


def _rfc3339(ts: str) -> float:
    """Prometheus' lastEvaluation (Go's RFC 3339 with nanoseconds) as a Unix time."""
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", ts).replace("Z", "+00:00")).timestamp()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    kube: Cluster
    release: str
    team: str
    tmp: Path
    docs: dict
    targets: Path
    cas: dict[str, Path]
    webhook: subprocess.Popen


class Prometheus:
    def __init__(self, tmp: Path, name: str, scrape_configs: list[dict], rules: Path) -> None:
        d = tmp / name
        d.mkdir()
        port = _free_port("127.0.0.1")
        cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": scrape_configs,
        }
        (d / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        check = subprocess.run(
            ["promtool", "check", "config", str(d / "prometheus.yml")], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = d / "prometheus.log"
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"

    def get(self, api: str, **params: str | list[str]) -> object:
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
        q = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{api}?{q}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.get("/api/v1/query", query=expr)["result"]  # type: ignore[index]

    def wait_up(self, *services: str) -> None:
        def up() -> bool:
            try:
                return all(
                    [float(r["value"][1]) for r in self.query(f'up{{service="{s}"}}')] == [1.0]
                    for s in services
                )
            except OSError:
                return False

        try:
            wait_until(up, 60, 0.5, what=f"{services} scraped and up")
        except AssertionError as e:
            targets = self.get("/api/v1/targets")
            raise AssertionError(f"{e}\n{json.dumps(targets, indent=1)[-4000:]}") from None

    def alert_states(self, *alerts: str) -> dict[str, str]:
        """The state (inactive, pending, firing) of each alerting rule, from an evaluation that started
        after this call: what the rules make of the samples scraped so far."""
        since = time.time()

        def evaluated() -> dict[str, str] | None:
            rules = {
                r["name"]: r
                for g in self.get("/api/v1/rules", type="alert")["groups"]  # type: ignore[index]
                for r in g["rules"]
            }
            missing = set(alerts) - set(rules)
            assert not missing, f"no alerting rule {missing} in the chart's PrometheusRule"
            if all(_rfc3339(rules[a]["lastEvaluation"]) > since for a in alerts):
                return {a: rules[a]["state"] for a in alerts}
            return None

        return wait_until(evaluated, 30, 0.2, what=f"{alerts} evaluated")  # type: ignore[return-value]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _render(release: str) -> dict:
    out = helm("template", "gpuctl", str(CHART), "-n", release, "--set", f"image.digest={DIGEST}",
               *[a for api in OPERATOR_APIS for a in ("--api-versions", api)]).stdout  # fmt: skip
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


@pytest.fixture(scope="module")
def stack(cluster: str, kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not Path(PROMETHEUS).exists() or not shutil.which("promtool"):
        pytest.fail("Prometheus is not installed: apt-get install -y prometheus (hack/test.sh does)")
    tmp = tmp_path_factory.mktemp("operator")
    host = _host_address()
    sfx = uuid.uuid4().hex[:6]
    release, team = f"gpuctl-op-{sfx}", f"t-op-{sfx}"
    docs = _render(release)
    procs: list[subprocess.Popen] = []
    reset_gpuctl_state(kube)
    try:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release}})
        # A pool and a team with a quota and a guarantee in it: the per-team series have data.
        patch_node_pool(kube, kube.get(path("Node", NODE)), {Labels.POOL: POOL})
        quota = TeamQuota(namespace=team, quota_name="op-test", gpu=2,
                          pools={POOL: PoolGuarantee(gpu=2, cpu="4", memory="8Gi")})  # fmt: skip
        pools = pool_capacities(kube.list(path("Node")), [POOL])
        for obj in [*desired_objects(pools, [quota]), team_namespace(quota), local_queue(team)]:
            kube.apply(obj)
        # The chart's Secrets (Helm's self-signed CAs) and the processes that serve with them.
        files: dict[str, Path] = {}
        for name in ("gpuctl-admission-tls", "gpuctl-api-tls"):
            kube.apply(docs[("Secret", name)])
            for key in ("tls.crt", "tls.key"):
                files[f"{name}/{key}"] = tmp / f"{name}-{key}"
                files[f"{name}/{key}"].write_bytes(base64.b64decode(docs[("Secret", name)]["data"][key]))
        serve_port, hook_port = _free_port(host), _free_port(host)
        log = (tmp / "serve.log").open("w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", cluster, "--address", host,
             "--metrics-port", str(serve_port), "--no-reconcile", "--no-leader-elect", "--no-backstop",
             "--api",
             f"--tls-cert={files['gpuctl-api-tls/tls.crt']}", f"--tls-key={files['gpuctl-api-tls/tls.key']}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        ))  # fmt: skip
        hook_log = (tmp / "webhook.log").open("w")
        webhook = subprocess.Popen(
            [sys.executable, "-m", "admission", "serve", "--kubeconfig", cluster, "--host", host,
             "--port", str(hook_port), f"--tls-cert={files['gpuctl-admission-tls/tls.crt']}",
             f"--tls-key={files['gpuctl-admission-tls/tls.key']}"],
            stdout=hook_log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        procs.append(webhook)
        # The chart's Services, without their pod selector, and Endpoints at this machine's processes.
        for name, port in (("gpuctl", serve_port), ("gpuctl-admission", hook_port)):
            svc = json.loads(json.dumps(docs[("Service", name)]))
            svc["spec"].pop("selector")
            # The Endpoints' port takes the Service port's name, as the endpoints controller writes it: the
            # ServiceMonitor's `port` must name it.
            (port_name,) = [p["name"] for p in svc["spec"]["ports"]]
            svc["metadata"]["annotations"]["prometheus.io/port"] = str(port)
            kube.apply(svc)
            eps = {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "namespace": release, "labels": svc["metadata"]["labels"]},
                "subsets": [
                    {
                        "addresses": [{"ip": host}],
                        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
                    }
                ],
            }
            kube.request(
                "PATCH", f"/api/v1/namespaces/{release}/endpoints/{name}",
                query={"fieldManager": "gpuctl-test", "force": "true"}, body=eps,
                content_type="application/apply-patch+yaml",
            )  # fmt: skip
        targets = tmp / "endpoints.json"
        targets.write_text(json.dumps(endpoints_targets(kube, release)))
        # The CA each ServiceMonitor names, read from the cluster as the Operator reads it.
        cas = {}
        for sm in (docs[("ServiceMonitor", "gpuctl")], docs[("ServiceMonitor", "gpuctl-admission")]):
            ref = sm["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]
            secret = kube.get(path("Secret", ref["name"], release))
            cas[sm["metadata"]["name"]] = tmp / f"{ref['name']}-{ref['key']}"
            cas[sm["metadata"]["name"]].write_bytes(base64.b64decode(secret["data"][ref["key"]]))
        rules = tmp / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": docs[("PrometheusRule", "gpuctl")]["spec"]["groups"]}))
        yield Stack(kube, release, team, tmp, docs, targets, cas, webhook)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        kube.delete(path("Namespace", release))
        kube.delete(path("Namespace", team))
        reset_gpuctl_state(kube)


def _operator_configs(s: Stack, honor: bool | None = None) -> list[dict]:
    out = []
    for name in ("gpuctl", "gpuctl-admission"):
        sm = json.loads(json.dumps(s.docs[("ServiceMonitor", name)]))
        if honor is not None:
            sm["spec"]["endpoints"][0]["honorLabels"] = honor
        out.append(operator_scrape_config(sm, 0, s.targets, s.cas[name]))
    return out


def _rules(s: Stack) -> Path:
    return s.tmp / "rules.yaml"


def _team_panels() -> list[tuple[str, str]]:
    board = json.loads((ROOT / "manifests/grafana/teams.json").read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets") or []]


def _per_team(prom: Prometheus, team: str) -> dict[str, list[dict]]:
    out = {}
    for title, expr in _team_panels():
        q = expr.replace("$__rate_interval", "1m").replace("$team", team).replace("$pool", POOL)
        q = q.replace("$cluster", ".*")
        out[f"{title}: {q}"] = prom.query(q)
    return out


# ------------------------------------------------------------------ the tests
def test_generated_scrape_config_matches_the_operators_shape(stack: Stack) -> None:
    """The port of generateServiceMonitorConfig keeps what the Operator writes for gpuctl's ServiceMonitors
    (job name, honor_labels, TLS to the Service's name) and Prometheus accepts it."""
    serve, hook = _operator_configs(stack)
    assert serve["job_name"] == f"serviceMonitor/{stack.release}/gpuctl/0"
    assert serve["honor_labels"] is True and hook["honor_labels"] is True
    assert serve["scheme"] == hook["scheme"] == "https"
    assert hook["tls_config"]["server_name"] == f"gpuctl-admission.{stack.release}.svc"
    assert serve["tls_config"]["server_name"] == f"gpuctl.{stack.release}.svc"


def test_without_honor_labels_the_team_label_is_lost(stack: Stack) -> None:
    """The control: the ServiceMonitor as it was (no honorLabels). The team's namespace becomes
    exported_namespace, the team variable lists only gpuctl's namespace, and the team's panels are empty."""
    prom = Prometheus(stack.tmp, "no-honor", _operator_configs(stack, honor=False), _rules(stack))
    try:
        prom.wait_up("gpuctl", "gpuctl-admission")
        wait_until(lambda: prom.query("gpuctl_team_info"), 30, 0.5, what="gpuctl_team_info scraped")
        values = prom.get("/api/v1/label/namespace/values", **{"match[]": "gpuctl_team_info"})
        assert values == [stack.release]
        info = prom.query("gpuctl_team_info")[0]["metric"]
        assert info["exported_namespace"] == stack.team and info["namespace"] == stack.release
        assert not [k for k, v in _per_team(prom, stack.team).items() if v]
    finally:
        prom.stop()


def test_under_the_operator_the_team_variable_and_panels_have_the_team(stack: Stack) -> None:
    prom = Prometheus(stack.tmp, "operator", _operator_configs(stack), _rules(stack))
    try:
        prom.wait_up("gpuctl", "gpuctl-admission")
        wait_until(lambda: prom.query("gpuctl_team_info"), 30, 0.5, what="gpuctl_team_info scraped")
        # label_values(gpuctl_team_info, namespace): the team variable of every dashboard.
        values = prom.get("/api/v1/label/namespace/values", **{"match[]": "gpuctl_team_info"})
        assert values == [stack.team]
        assert prom.query('{exported_namespace!=""}') == []
        panels = _per_team(prom, stack.team)
        with_data = {k: v for k, v in panels.items() if v}
        for k, series in with_data.items():
            assert {r["metric"].get("namespace") for r in series} == {stack.team}, k
        # Quota and guarantee are set for the team: those panels must show them.
        assert any("gpuctl_team_quota_gpus" in k for k in with_data), panels
        assert any("gpuctl_team_guaranteed_gpus" in k for k in with_data), panels
        quota = prom.query(f'sum by (namespace) (gpuctl_team_quota_gpus{{namespace=~"{stack.team}"}})')
        assert [float(r["value"][1]) for r in quota] == [2.0]
        # The webhook's own series are scraped, and the target labels are the Operator's.
        up = prom.query('up{service="gpuctl-admission"}')[0]["metric"]
        assert (
            up["job"] == "gpuctl-admission" and up["endpoint"] == "https" and up["namespace"] == stack.release
        )
        assert prom.query('gpuctl_webhook_cache_synced{service="gpuctl-admission"}')
        # The service and webhook alerts see their targets up.
        assert set(prom.alert_states(*DOWN_ALERTS).values()) == {"inactive"}
    finally:
        prom.stop()


def test_annotation_scraping_keeps_the_team_and_the_alerts_quiet_until_the_webhook_stops(
    stack: Stack,
) -> None:
    """The Services' prometheus.io annotations with the community chart's job: job is
    kubernetes-service-endpoints, not the Service's name, and GpuctlServiceDown no longer fires for it;
    GpuctlWebhookDown does once the webhook stops answering."""
    release = stack.release
    configs = [
        annotation_scrape_config("gpuctl", stack.targets, stack.cas["gpuctl"], f"gpuctl.{release}.svc"),
        annotation_scrape_config("gpuctl-admission", stack.targets, stack.cas["gpuctl-admission"],
                                 f"gpuctl-admission.{release}.svc"),
    ]  # fmt: skip
    prom = Prometheus(stack.tmp, "annotations", configs, _rules(stack))
    try:
        prom.wait_up("gpuctl", "gpuctl-admission")
        wait_until(lambda: prom.query("gpuctl_team_info"), 30, 0.5, what="gpuctl_team_info scraped")
        up = prom.query('up{service="gpuctl"}')[0]["metric"]
        assert up["job"] == "kubernetes-service-endpoints" and up["app_kubernetes_io_name"] == "gpuctl-serve"
        assert prom.get("/api/v1/label/namespace/values", **{"match[]": "gpuctl_team_info"}) == [stack.team]
        assert set(prom.alert_states(*DOWN_ALERTS).values()) == {"inactive"}
        stack.webhook.terminate()
        stack.webhook.wait(15)
        wait_until(
            lambda: prom.query('up{service="gpuctl-admission"} == 0'),
            30,
            0.5,
            what="the webhook scraped down",
        )
        assert prom.alert_states(*DOWN_ALERTS) == {
            "GpuctlServiceDown": "inactive",
            "GpuctlWebhookDown": "pending",  # for: 2m
            "GpuctlWebhookReplicaDown": "pending",  # for: 10m
        }
        (alert,) = prom.query('ALERTS{alertname="GpuctlWebhookDown"}')
        assert alert["metric"]["severity"] == "critical"
        replica = prom.query('ALERTS{alertname="GpuctlWebhookReplicaDown"}')
        assert [r["metric"]["service"] for r in replica] == ["gpuctl-admission"]
    finally:
        prom.stop()
