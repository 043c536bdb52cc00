"""Autoscaled services on the real cluster (issue 44, docs/serving.md): Kubernetes' own HPA controller
(kube-controller-manager, HPAScaleToZero on) scales a service's burst on the external metric that
prometheus-adapter serves from a real Prometheus, which scrapes the replicas with the shipped
configuration (manifests/prometheus/serving-scrape.yaml); only the replicas' load is a double (KWOK's fake
nodes run no vLLM: hack/cluster/fake_exporter.py serves what a test sets). Kueue admits every replica.

This module starts the autoscaling stack on its cluster (hack/cluster/autoscaling.sh up) and stops it at
the end; it makes its own pool of one fake 8-GPU node (one node: which GPUs a preemption frees is Kueue's
quota decision alone, no fragmentation between nodes), and each test its own teams:
- a service at its maximum on a team capped below it runs exactly the cap; the rest wait, saying why;
- a high-priority job of the same team takes burst replicas and never the floor;
- another team's reclaim takes burst replicas only;
- a scale-down gives the GPUs back, and a job waiting for them gets them.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, path
from gpuctl.constants import GPU_RESOURCE, Labels
from gpuctl.domain.history import hpa_records
from gpuctl.domain.status import is_gated
from gpuctl.domain.teams import team_usage
from gpuctl.server.cache import trim_hpa
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.metrics_stack import metrics_stack

ROOT = Path(__file__).resolve().parents[2]
POOL_GPUS = 8


@dataclass(frozen=True)
class Stack:
    cluster: str
    pool: str
    fake_url: str
    prom_url: str
    tmp: Path


def _cli(cluster: str, *args: str) -> int:
    return main([*args, "--kubeconfig", cluster])


def _ready(kube, name: str) -> bool:
    node = kube.get_or_none(path("Node", name)) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


@pytest.fixture(scope="module")
def stack(cluster, kube, tmp_path_factory) -> Iterator[Stack]:
    reset_gpuctl_state(kube)
    sfx = uuid.uuid4().hex[:5]
    pool = f"serve-{sfx}"
    nodes = [f"serve-{sfx}-1"]
    tmp = tmp_path_factory.mktemp("serving")
    with metrics_stack(cluster) as urls:
        yield from _pool(cluster, kube, pool, nodes, urls, tmp)


def _pool(cluster, kube, pool: str, nodes: list[str], urls: dict[str, str], tmp: Path) -> Iterator[Stack]:
    """The module's pool of fake nodes, removed after."""
    try:
        for n in nodes:
            kube.create(fake_node(n, gpus={GPU_RESOURCE: str(POOL_GPUS)}))
        for n in nodes:
            wait_until(lambda n=n: _ready(kube, n), 60, what=f"node {n} Ready")
        (tmp / "pool.yaml").write_text(
            f"kind: pool\npool: {{name: {pool}}}\nnodes:\n"
            + "".join(f"  {n}: {{gpu-type: A100}}\n" for n in nodes)
        )
        assert _cli(cluster, "create", "-f", str(tmp / "pool.yaml")) == 0
        yield Stack(cluster, pool, urls["FAKE_EXPORTER_URL"], urls["PROMETHEUS_URL"], tmp)
    finally:
        _cli(cluster, "delete", "pool", pool)
        for n in nodes:
            try:
                kube.delete(path("Node", n))
            except ApiError as e:
                if e.status != 404:
                    raise


@pytest.fixture
def teams(stack: Stack, kube) -> Iterator[callable]:
    """make(gpu=N, borrow=M) -> a fresh team namespace with that quota; all deleted after the test."""
    made: list[str] = []

    def make(gpu: int, borrow: int | None = None) -> str:
        ns = f"sv-{uuid.uuid4().hex[:6]}"
        limit = "" if borrow is None else f", borrowingLimit: {borrow}"
        f = stack.tmp / f"quota-{ns}.yaml"
        f.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: {gpu}{limit}}}\n")
        assert _cli(stack.cluster, "create", "-f", str(f)) == 0
        made.append(ns)
        return ns

    yield make
    for ns in made:  # the services first: a deleted namespace's Deployments would be re-created meanwhile
        for d in kube.list(path("Deployment", namespace=ns)):
            kube.delete(path("Deployment", d["metadata"]["name"], ns))
        for j in kube.list(path("Job", namespace=ns)):
            kube.delete(path("Job", j["metadata"]["name"], ns), propagation="Background")
        _cli(stack.cluster, "delete", "quota", f"q-{ns}", "--delete-namespace")
    delete_namespaces(kube, made, 120)


def _service(stack: Stack, ns: str, name: str, lo: int, hi: int, target: int = 10) -> None:
    f = stack.tmp / f"{ns}-{name}.yaml"
    f.write_text(
        f"kind: inference\njob: {{name: {name}, namespace: {ns}}}\n"
        "environment: {image: vllm/vllm-openai:v0.6.3, args: [--model, facebook/opt-125m]}\n"
        f"resources: {{pool: {stack.pool}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
        f"service: {{port: 8000, autoscaling: {{minReplicas: {lo}, maxReplicas: {hi}, "
        f"targetConcurrency: {target}}}}}\n"
    )
    assert _cli(stack.cluster, "create", "-f", str(f)) == 0


def _training(stack: Stack, ns: str, name: str, gpus: int, priority: str = "medium") -> None:
    f = stack.tmp / f"{ns}-{name}.yaml"
    f.write_text(
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: {priority}}}\n"
        "environment: {image: busybox, command: [sleep, '3600'], env: [{GPUCTL_FAKE_RUNTIME: 2h}]}\n"
        f"resources: {{pool: {stack.pool}, gpu: {gpus}, cpu: 1, memory: 1Gi}}\n"
    )
    assert _cli(stack.cluster, "create", "-f", str(f)) == 0


def _pods(kube, ns: str, svc: str, tier: str) -> list[dict]:
    return [
        p
        for p in kube.list(
            path("Pod", namespace=ns), label_selector=f"app={svc},{Labels.SERVING_TIER}={tier}"
        )
        if not p["metadata"].get("deletionTimestamp")
    ]


def _running(pods: list[dict]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running")


def _gated(pods: list[dict]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods if is_gated(p))


def _set_load(stack: Stack, ns: str, pod: str, running: int, waiting: int = 0) -> None:
    body = json.dumps({"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting}).encode()
    req = urllib.request.Request(f"{stack.fake_url}/v1/pods/{ns}/{pod}", data=body, method="PUT")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def _team_gpus(kube, ns: str) -> int:
    return team_usage(kube.get(path("ClusterQueue", ns))).gpus


def _floor_running(kube, ns: str, svc: str, n: int) -> list[str]:
    return wait_until(
        lambda: (names := _running(_pods(kube, ns, svc, "floor"))) and len(names) == n and names,
        120,
        what=f"{n} floor replica(s) of {ns}/{svc} running",
    )


def _load_floor(stack: Stack, kube, ns: str, svc: str, per_pod: int) -> list[str]:
    floor = _running(_pods(kube, ns, svc, "floor"))
    for p in floor:
        _set_load(stack, ns, p, per_pod)
    return floor


def _burst(kube, ns: str, svc: str, running: int, gated: int, timeout: float = 120) -> list[dict]:
    def check() -> tuple[list[dict]] | None:  # a tuple: no pods at all is an answer too
        pods = _pods(kube, ns, svc, "burst")
        return (pods,) if (len(_running(pods)), len(_gated(pods))) == (running, gated) else None

    found = wait_until(
        check, timeout, 1, what=f"{ns}/{svc}: {running} burst replica(s) running, {gated} waiting"
    )
    return found[0]


def _job_rows(stack: Stack, capsys, ns: str) -> list[dict]:
    capsys.readouterr()
    assert _cli(stack.cluster, "get", "jobs", "-n", ns, "-o", "json") == 0
    return json.loads(capsys.readouterr().out)["items"]


def test_a_service_at_its_maximum_on_a_capped_team_runs_the_cap_and_the_rest_wait(
    stack: Stack, kube, teams, capsys
) -> None:
    ns = teams(gpu=3, borrow=0)
    _service(stack, ns, "llm", lo=1, hi=5)
    floor = _floor_running(kube, ns, "llm", 1)
    # 50 requests in flight on the one replica: ceil(50 / 10) = 5 replicas wanted, 4 of them burst.
    _load_floor(stack, kube, ns, "llm", 50)
    burst = _burst(kube, ns, "llm", running=2, gated=2)
    assert _team_gpus(kube, ns) == 3, "the team holds exactly its cap"
    hpa = kube.get(path("HorizontalPodAutoscaler", "llm", ns))
    assert hpa["status"]["desiredReplicas"] == 4
    assert _running(_pods(kube, ns, "llm", "floor")) == floor
    # The scale is an audit record by the HPA controller: kube-controller-manager wrote lastScaleTime (the
    # HPA's managedFields, as serve's cache keeps them).
    (scaled,) = hpa_records(trim_hpa(hpa))
    assert (scaled.job, scaled.action, scaled.actor) == ("llm", "scaled", "horizontal-pod-autoscaler"), scaled
    # (what it scaled from is in the status only until the controller's next write: serve sees that one)
    assert re.fullmatch(r"burst (\d+ -> |to )4 replica\(s\)", scaled.reason.split(";")[0]), scaled.reason

    (job,) = [j for j in _job_rows(stack, capsys, ns) if j["metadata"]["name"] == "llm"]
    service = job["status"]  # the service's own row; its replicas are its pods
    rows = {p["name"]: p for p in service["pods"]}
    assert service["ready"] == "3/5"
    assert service["replicas"]["desired"] == 5
    assert (service["replicas"]["running"], service["replicas"]["waiting"]) == (3, 2)
    for name in _gated(burst):
        assert rows[name]["phase"] == "Queued" and rows[name]["priority"] == "burst"
        assert f"{ns} uses 3 of its 3 GPUs" in rows[name]["reason"], rows[name]["reason"]
    capsys.readouterr()
    assert _cli(stack.cluster, "describe", "job", "llm", "-n", ns, "-o", "json") == 0
    described = json.loads(capsys.readouterr().out)["autoscaling"]
    assert [w["pod"] for w in described["waitingReplicas"]] == _gated(burst)
    assert all(f"{ns} uses 3 of its 3 GPUs" in w["reason"] for w in described["waitingReplicas"]), described[
        "waitingReplicas"
    ]
    # When at the latest: the GPUs are held by a service without maxRuntime (no bound), said as such.
    assert all(w["when"] for w in described["waitingReplicas"]), described
    assert described["metric"]["name"] == "concurrency" and described["metric"]["target"] == "10"


def test_a_high_priority_job_of_the_team_takes_burst_replicas_never_the_floor(
    stack: Stack, kube, teams
) -> None:
    ns = teams(gpu=4, borrow=0)
    _service(stack, ns, "llm", lo=2, hi=4)
    floor = _floor_running(kube, ns, "llm", 2)
    _load_floor(stack, kube, ns, "llm", 20)  # 40 in flight: 4 replicas, 2 of them burst
    _burst(kube, ns, "llm", running=2, gated=0)
    assert _team_gpus(kube, ns) == 4
    _training(stack, ns, "urgent", gpus=2, priority="high")
    # The two burst replicas yield (Kueue preempts them; their Deployment's new pods wait at the gate).
    _burst(kube, ns, "llm", running=0, gated=2)
    wait_until(lambda: _team_gpus(kube, ns) == 4, 60, what="the team at its 4 GPUs again")
    # A second high job finds only the floor left: it waits, the floor runs on.
    _training(stack, ns, "urgent-2", gpus=2, priority="high")

    def judged() -> dict | None:  # Kueue tried it: QuotaReserved False, with why it waits
        for w in kube.list(path("Workload", namespace=ns)):
            conds = {c["type"]: c for c in (w.get("status") or {}).get("conditions") or []}
            if "urgent-2" in w["metadata"]["name"] and "QuotaReserved" in conds:
                return conds["QuotaReserved"]
        return None

    cond = wait_until(judged, 60, what="Kueue's verdict on the second job")
    assert cond["status"] == "False", cond
    assert _team_gpus(kube, ns) == 4
    assert _running(_pods(kube, ns, "llm", "floor")) == floor, "the floor's replicas are the same pods"


def test_another_teams_reclaim_takes_burst_replicas_only(stack: Stack, kube, teams) -> None:
    ns = teams(gpu=2)  # may borrow the rest of the pool
    other = teams(gpu=6)
    _service(stack, ns, "llm", lo=2, hi=6)
    floor = _floor_running(kube, ns, "llm", 2)
    _load_floor(stack, kube, ns, "llm", 30)  # 60 in flight: 6 replicas, 4 burst borrowing the idle GPUs
    _burst(kube, ns, "llm", running=4, gated=0)
    assert _team_gpus(kube, ns) == 6
    _training(stack, other, "owner", gpus=4)  # within its own quota: Kueue reclaims 2 lent GPUs
    wait_until(lambda: _team_gpus(kube, other) == 4, 120, what="the other team's job admitted")
    pods = _burst(kube, ns, "llm", running=2, gated=2)
    assert len(pods) == 4
    assert _running(_pods(kube, ns, "llm", "floor")) == floor, "the floor's replicas are the same pods"
    assert _team_gpus(kube, ns) == 4


def test_a_scale_down_gives_the_gpus_to_a_waiting_job(stack: Stack, kube, teams) -> None:
    ns = teams(gpu=6, borrow=0)
    other = teams(gpu=2)
    _service(stack, ns, "llm", lo=1, hi=6)
    _floor_running(kube, ns, "llm", 1)
    [floor] = _load_floor(stack, kube, ns, "llm", 60)  # 6 replicas: the team's whole quota
    _burst(kube, ns, "llm", running=5, gated=0)
    _training(stack, other, "waits", gpus=4)  # 2 of its own, 2 to borrow: none idle
    wait_until(
        lambda: any("waits" in w["metadata"]["name"] for w in kube.list(path("Workload", namespace=other))),
        60,
        what="the waiting job's Workload",
    )
    assert _team_gpus(kube, other) == 0
    _set_load(stack, ns, floor, 10)  # the load falls to what the floor serves: the burst goes to 0
    _burst(kube, ns, "llm", running=0, gated=0)
    wait_until(lambda: _team_gpus(kube, other) == 4, 120, what="the waiting job admitted")
    assert _team_gpus(kube, ns) == 1
