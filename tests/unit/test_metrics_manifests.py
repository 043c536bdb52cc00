"""Dashboards, Prometheus rules and the service's manifests agree with each other and with the code.

- every gpuctl_* name a dashboard or rule uses is one the service exports (a renamed metric fails here,
  not on a platform team's screen);
- PrometheusRule carries exactly rules.yaml's groups;
- `promtool check rules` and `promtool test rules` pass (Debian package `prometheus`);
- the RBAC stays least-privilege, and Deployment, Service and ServiceMonitor agree on ports;
- the alerts find gpuctl's targets by the `service` label both ways of scraping set (the Prometheus
  Operator's ServiceMonitors and the Services' prometheus.io annotations), never by `job`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.constants import SLICES_USED_ANNOTATION
from gpuctl.server.history import HistoryRecorder
from gpuctl.server.idle import IdleReclaimer
from gpuctl.server.main import build_parser, create_app
from gpuctl.service.prometheus import Prometheus
from queues import resource_flavor
from tests.unit.test_leader import Store
from tests.unit.test_metrics import NoCluster, feed, node_obj, pod_obj, populated_cache

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "manifests/grafana"
PROM = ROOT / "manifests/prometheus"
SERVE = ROOT / "manifests/serve"
# A series name: not a recording rule's (after a colon, level:metric:operation) nor a label of gpuctl's own.
METRIC_RE = re.compile(r"(?<![\w:])gpuctl_[a-z0-9_]+")
LABEL_NAMES = {"gpuctl_job", "gpuctl_tier"}


def _dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(GRAFANA.glob("*.json"))}


def _exprs(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets") or []]


def _exported_names() -> set[str]:
    """What gpuctl serve and the admission webhook export (the webhook after one request of each outcome)."""
    from prometheus_client import generate_latest

    from admission.rules import AdmissionConfig
    from admission.server import AdmissionApp
    from admission.state import StaticState
    from tests.unit.test_admission_fixtures import state

    cache, registry = populated_cache(with_reconciler=True, with_backstop=True)
    mig = node_obj("mig-1", "inference-pool", 0, tainted=True)  # a node offering MIG slices (issue 32)
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "7"
    feed(cache, "Node", mig)
    flavor = resource_flavor("inference-pool")  # serve's reconciler wrote the slices in use on it
    flavor["metadata"]["annotations"] = {SLICES_USED_ANNOTATION: '{"nvidia.com/mig-1g.10gb":2}'}
    feed(cache, "ResourceFlavor", flavor)
    # An autoscaled service's floor (docs/serving.md): gpuctl_service_*_replicas have a sample.
    floor = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "llm",
            "namespace": "team-a",
            "uid": "floor-1",
            "resourceVersion": "1",
            "labels": {"app": "llm", "runwhere.ai/serving-tier": "floor"},
        },
        "spec": {"replicas": 1, "template": {"spec": {"containers": []}}},
        "status": {"readyReplicas": 1},
    }
    feed(cache, "Deployment", floor)
    history = HistoryRecorder(NoCluster(), cache)  # gpuctl serve registers it (--history, the default)
    history.failures_by_ns["team-a"] = 1  # a failed write: the counter has a sample
    registry.register(history)
    # A gpuctl job's GPU pod (gpuctl_job_pod_info, issue 40) and the idle reclaimer (serve --idle) with one
    # action counted.
    nb = pod_obj("nb-0", "team-a", "g1", 1)
    nb["metadata"]["labels"] = {"runwhere.ai/job-type": "notebook"}
    nb["metadata"]["ownerReferences"] = [
        {"kind": "StatefulSet", "name": "nb", "uid": "s", "controller": True}
    ]
    feed(cache, "Pod", nb)
    idle = IdleReclaimer(NoCluster(), cache, Prometheus("http://127.0.0.1:1"))
    idle.actions[("team-a", "notebook", "stop", "acted")] = 1
    registry.register(idle)
    webhook = AdmissionApp(StaticState(state()), AdmissionConfig())
    for decision in ("allowed", "denied", "error"):
        webhook.metrics.count("Job", "CREATE", decision, "", "false")
    webhook.metrics.observe("Job", "CREATE", 0.001)
    webhook.metrics.observe_state(webhook.source.state)
    names = set()
    for reg in (registry, webhook.registry):
        for fam in text_string_to_metric_families(generate_latest(reg).decode()):
            names.update(s.name for s in fam.samples)
    return names


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _promtool() -> str:
    tool = shutil.which("promtool")
    if not tool:
        if os.environ.get("CI"):
            pytest.fail("promtool missing: apt-get install -y prometheus")
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    return tool


def test_three_dashboards_with_pool_and_team_variables() -> None:
    boards = _dashboards()
    assert set(boards) == {"gpu-pools.json", "teams.json", "queue.json"}
    assert len({b["uid"] for b in boards.values()}) == 3
    for name, b in boards.items():
        variables = {v["name"] for v in b["templating"]["list"]}
        assert {"datasource", "pool", "team"} <= variables, name
        ids = [p["id"] for p in b["panels"]]
        assert len(ids) == len(set(ids)), name
        for p in b["panels"]:
            if p["type"] == "row":
                continue
            assert p["targets"], (name, p["title"])
            assert p.get("description"), (name, p["title"])
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${datasource}", (name, p["title"])
        # Each dashboard filters by its variables somewhere.
        text = json.dumps(_exprs(b))
        assert "$pool" in text and "$team" in text, name


def test_every_metric_used_by_dashboards_and_rules_is_exported() -> None:
    exported = _exported_names()
    used: dict[str, set[str]] = {}
    for name, b in _dashboards().items():
        for e in _exprs(b):
            for m in set(METRIC_RE.findall(e)) - LABEL_NAMES:
                used.setdefault(m, set()).add(name)
    for g in yaml.safe_load((PROM / "rules.yaml").read_text())["groups"]:
        for r in g["rules"]:
            for m in set(METRIC_RE.findall(r["expr"])) - LABEL_NAMES:
                used.setdefault(m, set()).add("rules.yaml")
    # Recording rules produce names with a colon: those are not expected from the service.
    missing = {m: sorted(w) for m, w in used.items() if m not in exported}
    assert not missing, f"used but not exported: {missing}"
    assert len(used) >= 15


def test_prometheusrule_carries_the_rules_file() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("prometheusrule", ROOT / "hack/prometheusrule.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (PROM / "prometheusrule.yaml").read_text() == gen.render(), "run: python hack/prometheusrule.py"
    rules = yaml.safe_load((PROM / "rules.yaml").read_text())["groups"]
    (pr,) = _docs(PROM / "prometheusrule.yaml")
    assert pr["kind"] == "PrometheusRule" and pr["apiVersion"] == "monitoring.coreos.com/v1"
    assert pr["spec"]["groups"] == rules
    alerts = {r["alert"] for g in rules for r in g["rules"] if "alert" in r}
    assert {
        "GpuctlPoolSaturated",
        "GpuctlWorkQueuedTooLong",
        "GpuctlPoolNodeNotReady",
        "GpuctlServiceDown",
        "GpuctlWebhookDown",
        "GpuctlWebhookReplicaDown",
        "GpuctlGpuXidFatal",
        "GpuctlGpuXidError",
        "GpuctlGpuEccUncorrectable",
        "GpuctlGpuEccCorrectableHigh",
        "GpuctlGpuRowRemapFailed",
    } <= alerts


def test_every_alert_has_a_promtool_unit_test() -> None:
    rules = yaml.safe_load((PROM / "rules.yaml").read_text())["groups"]
    alerts = {r["alert"] for g in rules for r in g["rules"] if "alert" in r}
    tested = set()
    for f in (PROM / "tests").glob("*.yaml"):
        for t in yaml.safe_load(f.read_text())["tests"]:
            for a in t.get("alert_rule_test") or []:
                if a.get("exp_alerts"):
                    tested.add(a["alertname"])
    assert alerts <= tested, f"alerts without a firing test: {alerts - tested}"


def test_promtool_check_rules() -> None:
    p = subprocess.run(
        [_promtool(), "check", "rules", str(PROM / "rules.yaml")], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_promtool_test_rules() -> None:
    files = sorted(str(f) for f in (PROM / "tests").glob("*.yaml"))
    p = subprocess.run([_promtool(), "test", "rules", *files], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_cluster_role_is_least_privilege() -> None:
    (role,) = [d for d in _docs(SERVE / "rbac.yaml") if d["kind"] == "ClusterRole"]
    writes = []
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "secrets" not in rule["resources"]
        extra = set(rule["verbs"]) - {"list", "watch"}
        if extra:
            writes.append((rule["apiGroups"], rule["resources"], sorted(extra), rule.get("resourceNames")))
    # The only writes: tolerations of the pool flavors (a TAS flavor is re-created), and server-side
    # apply of the Cohort `gpuctl`, by name; the audit trail's ConfigMap gpuctl-history (get/update by
    # name) and the one read of a new job's controller (who submitted it).
    assert writes == [
        (["kueue.x-k8s.io"], ["resourceflavors"], ["create", "delete", "get", "patch"], None),
        (["kueue.x-k8s.io"], ["cohorts"], ["patch"], ["gpuctl"]),
        ([""], ["events"], ["create"], None),  # the backstop's report on a pod
        (["batch"], ["jobs"], ["get"], None),
        (["apps"], ["deployments", "statefulsets"], ["get"], None),
        ([""], ["services"], ["get"], None),  # a gang's Service, copied to its MultiKueue worker
        ([""], ["configmaps"], ["get", "update"], ["gpuctl-history"]),
        ([""], ["configmaps"], ["create"], None),
    ]
    read = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert read == {
        ("", "nodes"),
        ("", "pods"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("kueue.x-k8s.io", "clusterqueues"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "cohorts"),
        ("", "events"),
        ("batch", "jobs"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("", "services"),
        ("", "configmaps"),
        ("autoscaling", "horizontalpodautoscalers"),  # autoscaled services (docs/serving.md)
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),  # ... of multi-node replicas
    }
    # Eviction (--evict-terminating, the default, and --evict-uncovered) only through its own file, applied
    # where it is switched on.
    assert "pods/eviction" not in (SERVE / "rbac.yaml").read_text()
    (evict,) = [d for d in _docs(SERVE / "evict/rbac.yaml") if d["kind"] == "ClusterRole"]
    assert evict["rules"] == [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]
    (binding,) = [d for d in _docs(SERVE / "rbac.yaml") if d["kind"] == "ClusterRoleBinding"]
    (sa,) = [d for d in _docs(SERVE / "rbac.yaml") if d["kind"] == "ServiceAccount"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]  # fmt: skip


def test_deployment_service_and_servicemonitor_agree() -> None:
    docs = {d["kind"]: d for d in _docs(SERVE / "deployment.yaml")}
    dep, svc = docs["Deployment"], docs["Service"]
    (rbac_sa,) = [d for d in _docs(SERVE / "rbac.yaml") if d["kind"] == "ServiceAccount"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == rbac_sa["metadata"]["name"]
    (c,) = pod["containers"]
    args = build_parser().parse_args(c["args"])
    assert c["command"] == ["gpuctl", "serve"]  # the image's entrypoint (hack/image.sh)
    assert args.metrics and args.reconcile
    assert c["ports"] == [{"name": "metrics", "containerPort": args.port, "protocol": "TCP"}]
    routes = {r.path for r in create_app(_ctx()).routes}
    assert {
        c["readinessProbe"]["httpGet"]["path"],
        c["livenessProbe"]["httpGet"]["path"],
        "/metrics",
    } <= routes
    # Two replicas, safe because they elect a leader in the Deployment's namespace (where the Lease Role is).
    assert dep["spec"]["replicas"] == 2 and args.leader_elect
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    (role,) = [d for d in _docs(SERVE / "rbac.yaml") if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert {(tuple(r["verbs"]), tuple(r.get("resourceNames", ()))) for r in role["rules"]} == {
        (("get", "update"), (args.lease_name,)),
        (("create",), ()),
    }
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    sm = {d["metadata"]["name"]: d for d in _docs(PROM / "servicemonitor.yaml")}["gpuctl"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    assert svc["metadata"]["name"] == "gpuctl"


def _services() -> dict[str, dict]:
    docs = [*_docs(SERVE / "deployment.yaml"), *_docs(ROOT / "manifests/admission/deployment.yaml")]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}


def test_alerts_select_targets_by_service_never_by_job() -> None:
    """GpuctlServiceDown fired forever under annotation-based scraping, where the job is the scrape config's
    (kubernetes-service-endpoints), not the Service's name. Every `up` the rules read is selected by
    `service`, and that Service exists, is annotated for scraping and has a ServiceMonitor."""
    text = (PROM / "rules.yaml").read_text()
    exprs = [r["expr"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    assert not [e for e in exprs if "job=" in e or "job =" in e], "select gpuctl's targets by service"
    ups = re.findall(r"\bup\{([^}]*)\}", "\n".join(exprs))
    assert ups and all(re.fullmatch(r'service="[a-z-]+"', u) for u in ups), ups
    named = {re.search(r'"(.+)"', u)[1] for u in ups}
    assert named == {"gpuctl", "gpuctl-admission"}
    services = _services()
    monitors = {d["metadata"]["name"]: d for d in _docs(PROM / "servicemonitor.yaml")}
    for name in named:
        svc = services[name]
        ann = svc["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics", name
        port = int(ann["prometheus.io/port"])
        assert port in {p.get("targetPort") if isinstance(p.get("targetPort"), int) else None
                        for p in svc["spec"]["ports"]} | {_container_port(name, p["targetPort"])
                                                          for p in svc["spec"]["ports"]}, name  # fmt: skip
        (sm,) = [m for m in monitors.values() if m["spec"]["selector"]["matchLabels"].items()
                 <= svc["metadata"]["labels"].items()]  # fmt: skip
        (ep,) = sm["spec"]["endpoints"]
        assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}, name
        # gpuctl's series carry their own `namespace` (a team's): the Operator must keep it.
        assert ep["honorLabels"] is True, name


def _container_port(service: str, target: str | int) -> int:
    dep_file = (
        SERVE / "deployment.yaml" if service == "gpuctl" else ROOT / "manifests/admission/deployment.yaml"
    )
    (dep,) = [d for d in _docs(dep_file) if d["kind"] == "Deployment"]
    for c in dep["spec"]["template"]["spec"]["containers"]:
        for p in c.get("ports") or []:
            if target in (p["name"], p["containerPort"]):
                return p["containerPort"]
    raise AssertionError(f"{service}: no container port {target}")


def test_the_webhooks_servicemonitor_verifies_its_certificate() -> None:
    """The webhook serves /metrics on its HTTPS port only: the ServiceMonitor scrapes it over HTTPS with the
    CA of the webhook's Secret, for the Service's DNS name."""
    sm = {d["metadata"]["name"]: d for d in _docs(PROM / "servicemonitor.yaml")}["gpuctl-admission"]
    (ep,) = sm["spec"]["endpoints"]
    (dep,) = [d for d in _docs(ROOT / "manifests/admission/deployment.yaml") if d["kind"] == "Deployment"]
    secret = next(
        v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v
    )
    assert ep["scheme"] == "https" and ep["path"] == "/metrics"
    assert ep["tlsConfig"] == {
        "ca": {"secret": {"name": secret, "key": "ca.crt"}},
        "serverName": "gpuctl-admission.gpuctl-system.svc",
    }
    svc = _services()["gpuctl-admission"]
    assert svc["metadata"]["annotations"]["prometheus.io/scheme"] == "https"


def _ctx():
    from gpuctl.server.main import build_context
    from tests.unit.test_metrics import NoCluster

    return build_context(build_parser().parse_args([]), NoCluster())


def test_serve_flags_and_the_cli_separator() -> None:
    a = build_parser().parse_args(["--no-metrics", "--no-reconcile", "--api", "--metrics-port", "9191"])
    assert (a.metrics, a.reconcile, a.api, a.port) == (False, False, True, 9191)
    ctx = _ctx()
    assert ctx.reconciler is not None and ctx.registry is not None
    kinds = {"Node", "Pod", "Workload", "ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort", "Event"}
    kinds |= {"Deployment", "HorizontalPodAutoscaler"}  # autoscaled services (docs/serving.md)
    assert kinds == set(ctx.cache.informers)


def test_serve_cluster_flag_labels_every_series_it_serves() -> None:
    """`gpuctl serve --cluster us-east`: /metrics' series all carry cluster="us-east", the process collectors'
    and the defragmenter's (registered after the registry is built) too; without the flag none does."""
    from fastapi.testclient import TestClient

    from gpuctl.server.main import build_context
    from tests.unit.test_metrics import NoCluster

    def served(*flags: str) -> list:
        ctx = build_context(build_parser().parse_args([*flags, "--defrag", "all"]), NoCluster())
        body = TestClient(create_app(ctx, [])).get("/metrics").text
        return [s for f in text_string_to_metric_families(body) for s in f.samples]

    labelled = served("--cluster", "us-east")
    names = {s.name for s in labelled}
    assert {"process_cpu_seconds_total", "python_info", "gpuctl_build_info", "gpuctl_cache_synced"} <= names
    assert any(n.startswith("gpuctl_defrag_") for n in names), sorted(names)
    assert [s for s in labelled if s.labels.get("cluster") != "us-east"] == []
    assert [s for s in served() if "cluster" in s.labels] == []


def test_worker_kubeconfig_flag(tmp_path, capsys) -> None:
    """--worker-kubeconfig NAME=PATH, repeatable; a malformed value or a missing file stops serve, named."""
    a, b = tmp_path / "a.kubeconfig", tmp_path / "b.kubeconfig"
    a.write_text("{}")
    b.write_text("{}")
    args = build_parser().parse_args(
        ["--worker-kubeconfig", f"worker-a={a}", "--worker-kubeconfig", f"worker-b={b}"]
    )
    assert args.worker_kubeconfig == [("worker-a", str(a)), ("worker-b", str(b))]
    assert build_parser().parse_args([]).worker_kubeconfig == []
    for bad, says in ((str(a), "expected NAME=PATH"), ("worker-a=", "expected NAME=PATH"),
                      (f"worker-a={tmp_path}/nope", "no file")):  # fmt: skip
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--worker-kubeconfig", bad])
        assert says in capsys.readouterr().err, bad


def test_mounted_apps_see_the_shared_context() -> None:
    """The hook the REST API uses: mount(app, ctx) after the built-in routes."""
    from fastapi.testclient import TestClient

    ctx = _ctx()
    seen = {}

    def mount(app, c) -> None:
        seen["ctx"] = c

        @app.get("/api/v1/ping")
        def ping() -> dict:
            return {"objects": len(c.cache["Node"])}

    app = create_app(ctx, [mount])
    client = TestClient(app)
    assert seen["ctx"] is ctx
    assert client.get("/api/v1/ping").json() == {"objects": 0}
    assert client.get("/readyz").status_code == 503  # nothing listed yet
    for inf in ctx.cache.informers.values():
        inf.relist()
    # Listed, but no leader known yet (leader election is on by default): not ready, and it says why.
    r = client.get("/readyz")
    assert r.status_code == 503 and r.text.startswith("no leader: ")
    ctx.elector.cluster = Store()
    ctx.elector.try_acquire_or_renew()
    r = client.get("/readyz")
    assert r.status_code == 200 and r.text.startswith("ok: ") and "leads (lease " in r.text
    r = client.get("/metrics")
    assert r.status_code == 200 and "gpuctl_cache_synced" in r.text
