"""Autoscaled services (docs/serving.md) offline: the YAML and its refusals, what the builder renders, the
domain's replica counts and HPA reading, the local stack's Prometheus configuration and fake exporter."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import urllib.request
from decimal import Decimal
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from gpuctl.builders import build
from gpuctl.constants import AUTOSCALING_METRICS, SERVING_CLASS, SERVING_VALUE, Labels, Tier
from gpuctl.domain.history import job_name
from gpuctl.domain.serving import combined, hpa_metric, scale, services
from gpuctl.domain.workload import PRIORITY_VALUE, labelled_priority_value, workload_priority
from gpuctl.spec import SpecError, load_text

ROOT = Path(__file__).resolve().parents[2]

BASE = """
kind: {kind}
job: {{name: llm{priority}}}
environment: {{image: vllm/vllm-openai:v0.12.0}}
resources: {{pool: inference-pool, gpu: 1, cpu: 4, memory: 16Gi}}
service:
  port: 8000
{service}
"""


def _load(service: str, kind: str = "inference", priority: str = "") -> object:
    (doc,) = load_text(BASE.format(kind=kind, service=service, priority=priority), "svc.yaml")
    return doc.spec


def _refused(service: str, kind: str = "inference", priority: str = "") -> str:
    with pytest.raises(SpecError) as e:
        _load(service, kind, priority)
    return str(e.value)


# ----------------------------------------------------------------------------- the YAML
def test_the_seeds_words_and_metric_target_mean_the_same() -> None:
    a = _load("  autoscaling: {minReplicas: 1, maxReplicas: 4, targetConcurrency: 10}").service.autoscaling
    b = _load(
        "  autoscaling: {min-replicas: 1, max_replicas: 4, metric: concurrency, target: 10}"
    ).service.autoscaling
    for auto in (a, b):
        assert (auto.min_replicas, auto.max_replicas, auto.metric, auto.per_replica) == (
            1,
            4,
            "concurrency",
            10,
        )
        assert (auto.burst_max, auto.floor_load) == (3, 10)
    rps = _load(
        "  autoscaling: {minReplicas: 2, maxReplicas: 6, metric: RPS, target: 2.5}"
    ).service.autoscaling
    assert (rps.metric, rps.per_replica, rps.floor_load) == ("rps", Decimal("2.5"), Decimal("5.0"))


def test_compute_services_autoscale_too() -> None:
    spec = _load("  autoscaling: {minReplicas: 0, maxReplicas: 2, targetConcurrency: 4}", kind="compute")
    assert spec.service.autoscaling.min_replicas == 0


@pytest.mark.parametrize(
    ("service", "words"),
    [
        # replicas and autoscaling together: each field named, and the fix.
        (
            "  replicas: 2\n  autoscaling: {maxReplicas: 4, targetConcurrency: 10}",
            ["service.replicas and service.autoscaling are both set", "remove service.replicas"],
        ),
        ("  autoscaling: {minReplicas: 2, maxReplicas: 2, targetConcurrency: 10}", ["not above minReplicas"]),
        ("  autoscaling: {maxReplicas: 4}", ["no target for metric concurrency", "targetConcurrency"]),
        (
            "  autoscaling: {maxReplicas: 4, metric: rps, targetConcurrency: 3}",
            ["for metric: concurrency, not rps"],
        ),
        ("  autoscaling: {maxReplicas: 4, target: 5, targetConcurrency: 3}", ["disagree"]),
        ("  autoscaling: {maxReplicas: 4, targetConcurrency: 0}", ["not a positive number"]),
        ("  autoscaling: {maxReplicas: 4, targetConcurrency: 1.0005}", ["more than 3 decimals"]),
        ("  autoscaling: {maxReplicas: 4, metric: latency, target: 3}", ["unknown metric 'latency'"]),
        ("  autoscaling: {minReplicas: -1, maxReplicas: 4, targetConcurrency: 3}", ["must not be negative"]),
    ],
)
def test_what_is_refused_says_which_field_and_the_fix(service: str, words: list[str]) -> None:
    text = _refused(service)
    for w in words:
        assert w in text, text


def test_a_priority_on_an_autoscaled_service_is_refused_not_ignored() -> None:
    text = _refused("  autoscaling: {maxReplicas: 4, targetConcurrency: 10}", priority=", priority: high")
    assert "job.priority high has no effect on an autoscaled service" in text
    assert "use service.replicas for a fixed-size service" in text
    # A fixed-size service keeps its priority.
    assert _load("  replicas: 2", priority=", priority: high").job.priority == "high"


def test_a_notebook_is_never_autoscaled() -> None:
    assert "a notebook cannot be autoscaled" in _refused(
        "  autoscaling: {maxReplicas: 4, targetConcurrency: 10}", kind="notebook"
    )


# ----------------------------------------------------------------------------- what it renders
def _objects(service: str) -> list[dict]:
    spec = _load(service)
    return build(spec, "team-a")


def test_floor_burst_hpa_and_one_service() -> None:
    floor, burst, hpa, svc = _objects("  autoscaling: {minReplicas: 2, maxReplicas: 5, targetConcurrency: 8}")
    assert [o["kind"] for o in (floor, burst, hpa, svc)] == [
        "Deployment",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Service",
    ]
    assert (floor["metadata"]["name"], floor["spec"]["replicas"]) == ("llm", 2)
    assert (burst["metadata"]["name"], burst["spec"]["replicas"]) == ("llm-burst", 0)
    for d, tier in ((floor, "floor"), (burst, "burst")):
        labels = d["metadata"]["labels"]
        assert labels[Labels.KUEUE_PRIORITY] == f"gpuctl-serving-{tier}"
        assert labels[Labels.KUEUE_QUEUE] == "default"
        assert Labels.PRIORITY not in labels  # high|medium|low is not a tier's
        assert d["spec"]["selector"]["matchLabels"] == {"app": "llm", Labels.SERVING_TIER: tier}
        tmpl = d["spec"]["template"]["metadata"]["labels"]
        assert (tmpl["app"], tmpl[Labels.SERVING_TIER]) == ("llm", tier)
        assert Labels.PRIORITY not in tmpl
    # Both tiers behind one Service, by app.
    assert svc["spec"]["selector"] == {"app": "llm"}
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-burst"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (0, 3)
    (metric,) = spec["metrics"]
    ext = metric["external"]
    assert ext["metric"] == {
        "name": AUTOSCALING_METRICS["concurrency"],
        "selector": {"matchLabels": {"gpuctl_job": "llm", "floor": "16"}},
    }
    assert ext["target"] == {"type": "AverageValue", "averageValue": "8"}
    assert Labels.KUEUE_QUEUE not in hpa["metadata"]["labels"]


def test_an_rps_target_with_decimals_is_a_quantity_and_a_label_value() -> None:
    *_, hpa, _ = _objects("  autoscaling: {minReplicas: 3, maxReplicas: 4, metric: rps, target: 0.5}")
    ext = hpa["spec"]["metrics"][0]["external"]
    assert ext["metric"]["name"] == "gpuctl_burst_rps"
    assert ext["metric"]["selector"]["matchLabels"]["floor"] == "1.5"
    assert ext["target"]["averageValue"] == "0.5"


def test_a_fixed_size_service_is_one_deployment_as_before() -> None:
    objs = _objects("  replicas: 3")
    assert [o["kind"] for o in objs] == ["Deployment", "Service"]
    assert objs[0]["spec"]["replicas"] == 3


# ----------------------------------------------------------------------------- priorities
def test_the_floor_is_above_every_job_and_the_burst_below() -> None:
    assert SERVING_VALUE[Tier.FLOOR] > max(PRIORITY_VALUE.values())
    assert SERVING_VALUE[Tier.BURST] < min(PRIORITY_VALUE.values())
    floor = {"metadata": {"labels": {Labels.KUEUE_PRIORITY: SERVING_CLASS[Tier.FLOOR]}}}
    assert labelled_priority_value(floor) == SERVING_VALUE[Tier.FLOOR]
    wl = {"metadata": {"labels": {}}, "spec": {"priorityClassRef": {"name": "gpuctl-serving-burst"}}}
    assert workload_priority(wl) == "burst"


def test_a_burst_replicas_history_is_its_services() -> None:
    def wl(pod: str, cls: str) -> dict:
        owner = {"kind": "Pod", "name": pod, "uid": "u", "controller": True}
        return {
            "metadata": {"name": "w", "ownerReferences": [owner]},
            "spec": {"priorityClassRef": {"name": cls}},
        }

    assert job_name(wl("llm-burst-7c9d8f6b5-abcde", "gpuctl-serving-burst")) == "llm"
    assert job_name(wl("llm-7c9d8f6b5-abcde", "gpuctl-serving-floor")) == "llm"
    # A fixed-size job that happens to be called *-burst keeps its name.
    assert job_name(wl("x-burst-7c9d8f6b5-abcde", "gpuctl-medium")) == "x-burst"


# ----------------------------------------------------------------------------- the domain's reading
def _deploy(name: str, tier: str, want: int, ready: int) -> dict:
    labels = {"app": "llm", Labels.SERVING_TIER: tier}
    return {
        "metadata": {"name": name, "namespace": "t", "labels": labels},
        "spec": {"replicas": want},
        "status": {"readyReplicas": ready},
    }


def _pod(name: str, tier: str, gated: bool = False) -> dict:
    spec = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]} if gated else {"nodeName": "n"}
    return {
        "metadata": {"name": name, "namespace": "t", "labels": {"app": "llm", Labels.SERVING_TIER: tier}},
        "spec": spec,
        "status": {"phase": "Pending" if gated else "Running"},
    }


HPA = {
    "metadata": {"name": "llm", "namespace": "t"},
    "spec": {
        "maxReplicas": 4,
        "metrics": [
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": "gpuctl_burst_concurrency",
                        "selector": {"matchLabels": {"gpuctl_job": "llm", "floor": "10"}},
                    },
                    "target": {"type": "AverageValue", "averageValue": "10"},
                },
            }
        ],
    },
    "status": {
        "desiredReplicas": 3,
        "currentMetrics": [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "gpuctl_burst_concurrency"},
                    "current": {"averageValue": "13334m"},
                },
            }
        ],
    },
}


def test_a_services_replicas_desired_running_waiting() -> None:
    floor, burst = _deploy("llm", "floor", 1, 1), _deploy("llm-burst", "burst", 3, 1)
    pods = [
        _pod("a", "floor"),
        _pod("b", "burst"),
        _pod("c", "burst", gated=True),
        _pod("d", "burst", gated=True),
    ]
    sc = scale(floor, burst, pods, HPA)
    assert (sc.floor, sc.burst_max, sc.max_replicas) == (1, 4, 5)
    assert (sc.desired, sc.ready, sc.running, sc.waiting, sc.hpa_desired) == (4, 2, 2, 2, 3)
    assert sc.metric is not None and (sc.metric.metric, sc.metric.target, sc.metric.current) == (
        "concurrency",
        "10",
        "13334m",
    )
    assert sc.metric.floor_load == "10"
    seen = combined(floor, burst)
    assert (seen["spec"]["replicas"], seen["status"]["readyReplicas"]) == (4, 2)
    assert floor["spec"]["replicas"] == 1  # combined copies
    other = _deploy("x", "floor", 2, 2) | {
        "metadata": {"name": "x", "namespace": "u", "labels": {"app": "x", Labels.SERVING_TIER: "floor"}}
    }
    plain = {"metadata": {"name": "p", "namespace": "t", "labels": {"app": "p"}}, "spec": {"replicas": 1}}
    found = services([floor, burst, other, plain], pods, [HPA])
    assert set(found) == {("t", "llm"), ("u", "x")}
    assert found[("t", "llm")] == sc
    assert (found[("u", "x")].desired, found[("u", "x")].running, found[("u", "x")].metric) == (2, 0, None)


def test_the_hpas_average_over_zero_burst_replicas_is_no_reading() -> None:
    # What the HPA controller writes with the burst at 0 replicas (seen on the demo's cluster).
    hpa = json.loads(json.dumps(HPA))
    hpa["status"]["currentMetrics"][0]["external"]["current"] = {"averageValue": "-9223372036854775808m"}
    m = hpa_metric(hpa)
    assert m is not None and m.current is None
    hpa["status"]["currentMetrics"][0]["external"]["current"] = {"averageValue": "20"}
    m = hpa_metric(hpa)
    assert m is not None and m.current == "20"


def test_an_hpa_without_gpuctls_metric_is_not_read_as_one() -> None:
    assert hpa_metric(None) is None
    cpu = {"spec": {"metrics": [{"type": "Resource", "resource": {"name": "cpu"}}]}}
    assert hpa_metric(cpu) is None


# ----------------------------------------------------------------------------- the local stack
def _module(name: str, rel: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_local_prometheus_runs_the_shipped_job_plus_only_the_fake_node_redirect() -> None:
    auto = _module("autoscaling_stack", "hack/cluster/autoscaling.py")
    shipped = yaml.safe_load((ROOT / "manifests/prometheus/serving-scrape.yaml").read_text())[
        "scrape_configs"
    ]
    (ship,) = shipped
    n = len(ship["relabel_configs"])
    (dcgm,) = yaml.safe_load((ROOT / "manifests/prometheus/dcgm-scrape.yaml").read_text())["scrape_configs"]
    for sd in ("yes", "no"):
        cfg = auto.prometheus("https://127.0.0.1:36443", "/pki", "127.0.0.1:34090", "1s", sd)
        job, local_dcgm = cfg["scrape_configs"]
        # dcgm-exporter's job (issue 40) as shipped, its one target the fake exporter's DCGM family.
        assert {k: v for k, v in local_dcgm.items() if k not in ("scrape_interval", "http_sd_configs")} == {
            k: v for k, v in dcgm.items() if k not in ("scrape_interval", "kubernetes_sd_configs")
        }
        assert local_dcgm["http_sd_configs"] == [
            {"url": "http://127.0.0.1:34090/sd/dcgm", "refresh_interval": "1s"}
        ]
        assert job["relabel_configs"][:n] == ship["relabel_configs"], (
            "the real cluster's rules, unchanged, first"
        )
        extra = job["relabel_configs"][n:]
        assert {r["target_label"] for r in extra} == {
            "__param_namespace",
            "__param_pod",
            "__metrics_path__",
            "__address__",
        }
        assert all(r["source_labels"][0] == "__meta_kubernetes_pod_ip" for r in extra)
    # A Prometheus with Kubernetes discovery reads the API server; Debian's gets the same pods over HTTP SD.
    job, _ = auto.prometheus("https://127.0.0.1:36443", "/pki", "127.0.0.1:34090", "1s", "yes")[
        "scrape_configs"
    ]
    assert job["kubernetes_sd_configs"] == [
        {
            "role": "pod",
            "api_server": "https://127.0.0.1:36443",
            "tls_config": {
                "ca_file": "/pki/ca.crt",
                "cert_file": "/pki/admin.crt",
                "key_file": "/pki/admin.key",
            },
        }
    ]
    job, _ = auto.prometheus("https://127.0.0.1:36443", "/pki", "127.0.0.1:34090", "1s")["scrape_configs"]
    assert "kubernetes_sd_configs" not in job
    assert job["http_sd_configs"] == [{"url": "http://127.0.0.1:34090/sd/pods", "refresh_interval": "1s"}]
    (api,) = [o for o in auto.apiservice("192.0.2.2", "35443", "Q0E=") if o["kind"] == "APIService"]
    assert api["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert api["spec"]["caBundle"] == "Q0E=" and "insecureSkipTLSVerify" not in api["spec"]


def test_the_http_discovery_gives_the_meta_labels_of_prometheus_pod_role() -> None:
    fake = _module("fake_exporter_sd", "hack/cluster/fake_exporter.py")
    pod = {
        "metadata": {
            "name": "llm-abc-x",
            "namespace": "t",
            "uid": "u1",
            "labels": {"app": "llm", Labels.SERVING_TIER: "floor"},
            "annotations": {"prometheus.io/port": "9000"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "llm-abc", "controller": True}],
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "main", "image": "vllm", "ports": [{"containerPort": 8000}]}],
        },
        "status": {
            "podIP": "10.244.0.7",
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    (group,) = fake.pod_targets(pod)
    assert group["targets"] == ["10.244.0.7:8000"]
    labels = group["labels"]
    assert labels["__meta_kubernetes_pod_label_runwhere_ai_serving_tier"] == "floor"
    assert labels["__meta_kubernetes_pod_annotation_prometheus_io_port"] == "9000"
    assert (labels["__meta_kubernetes_namespace"], labels["__meta_kubernetes_pod_name"]) == ("t", "llm-abc-x")
    assert (labels["__meta_kubernetes_pod_phase"], labels["__meta_kubernetes_pod_ready"]) == (
        "Running",
        "true",
    )
    assert labels["__meta_kubernetes_pod_container_port_number"] == "8000"
    assert labels["__meta_kubernetes_pod_controller_kind"] == "ReplicaSet"
    # A pod without an IP (waiting at Kueue's gate) is no target, as in Prometheus.
    gated = {**pod, "status": {"phase": "Pending"}}
    assert fake.pod_targets(gated) == []


def test_the_adapter_rules_name_the_metrics_the_hpa_asks_for() -> None:
    rules = yaml.safe_load((ROOT / "manifests/prometheus/adapter-rules.yaml").read_text())["externalRules"]
    assert {r["name"]["as"] for r in rules} == set(AUTOSCALING_METRICS.values())
    for r in rules:
        q = r["metricsQuery"]
        for key in ("namespace", "gpuctl_job", "floor"):
            assert f'index .LabelValuesByName "{key}"' in q
        assert "or vector(0)" in q and q.startswith("clamp_min(")


@pytest.fixture
def exporter():
    fake = _module("fake_exporter", "hack/cluster/fake_exporter.py")
    fake.STORE.pods.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _http(method: str, url: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_fake_exporter_serves_what_a_test_set_in_vllms_format(exporter: str) -> None:
    code, text = _http("GET", f"{exporter}/pods/metrics?namespace=t&pod=a")
    assert code == 200
    assert 'vllm:num_requests_running{model_name="fake-model"} 0.0' in text  # idle by default
    assert "# TYPE vllm:request_success_total counter" in text
    code, _ = _http(
        "PUT", f"{exporter}/v1/pods/t/a", {"vllm:num_requests_running": 7, "vllm:num_requests_waiting": 2}
    )
    assert code == 200
    text = _http("GET", f"{exporter}/pods/metrics?namespace=t&pod=a")[1]
    assert 'vllm:num_requests_running{model_name="fake-model"} 7.0' in text
    assert 'vllm:num_requests_waiting{model_name="fake-model"} 2.0' in text
    # Another pod is untouched; a reset returns to idle.
    assert (
        'vllm:num_requests_running{model_name="fake-model"} 0.0'
        in _http("GET", f"{exporter}/pods/metrics?namespace=t&pod=b")[1]
    )
    _http("DELETE", f"{exporter}/v1/pods/t/a")
    assert (
        'running{model_name="fake-model"} 0.0'
        in _http("GET", f"{exporter}/pods/metrics?namespace=t&pod=a")[1]
    )


def test_the_fake_exporter_refuses_what_it_cannot_serve(exporter: str) -> None:
    assert _http("PUT", f"{exporter}/v1/pods/t/a", {"vllm:bogus": 1})[0] == 400
    assert _http("PUT", f"{exporter}/v1/pods/t/a", {"vllm:num_requests_running": "many"})[0] == 400
    assert "counter" in _http("PUT", f"{exporter}/v1/pods/t/a", {"vllm:request_success_total": 3})[1]
    assert _http("GET", f"{exporter}/pods/metrics?namespace=t")[0] == 400
    assert _http("PUT", f"{exporter}/v1/pods/t/a", {"vllm:request_success_total": {"rate": 5}})[0] == 200


def test_what_a_team_may_ever_hold_bounds_a_service() -> None:
    from gpuctl.domain.serving import floor_beyond_quota, replicas_beyond_team

    # quota 4 + borrowingLimit 2 = 6: six 1-GPU replicas fit, seven do not; 2-GPU replicas: three.
    assert replicas_beyond_team("service llm", 6, 1, "team-a", 4, 2) is None
    message, fix = replicas_beyond_team("service llm", 7, 1, "team-a", 4, 2)
    assert "7 replicas x 1 GPU(s) = 7 GPUs, more than team team-a may ever hold (4 of quota + 2" in message
    assert fix == "lower maxReplicas to at most 6, or raise the team's quota or borrowingLimit"
    assert "at most 3" in replicas_beyond_team("hpa x", 4, 2, "team-a", 4, 2)[1]
    # No cap of its own (unlimited borrowing, no quota): only the idle GPUs bound it.
    assert replicas_beyond_team("service llm", 100, 1, "team-a", 4, None) is None
    assert replicas_beyond_team("service llm", 100, 1, "team-a", None, 0) is None
    # The floor runs inside the quota, with the team's other floors.
    assert floor_beyond_quota("service llm", 4, "team-a", 4) is None
    assert (
        "floor of 3 GPUs with the team's other floors (2 GPUs)"
        in floor_beyond_quota("service llm", 3, "team-a", 4, 2)[0]
    )
    assert floor_beyond_quota("service llm", 0, "team-a", 0) is None
