"""GPU use per job and idle GPUs back to the queue, on the real cluster (issue 40, docs/utilisation.md).

Everything above the hardware is real: Prometheus scrapes dcgm-exporter's series with the shipped job
(manifests/prometheus/dcgm-scrape.yaml) from the local cluster's one metrics double (hack/cluster/
fake_exporter.py with hack/cluster/fake_dcgm.py: the GPUs of KWOK's fake nodes, values a test sets);
`gpuctl serve --idle` runs as its own ServiceAccount with the shipped RBAC (manifests/serve/rbac.yaml and
idle/rbac.yaml) under gpuctl's whole admission stack (webhook and the chart's policies, bound to this
module's namespaces); Kueue decides who runs. The teams' quotas carry the idle policy with a 30 s window
(its `after` field), so no test sleeps: each waits on the thing itself (a Workload's spec.active, a
Deployment's replicas, an Event), and a job that must NOT be acted on is checked once a control job of the
same pass was acted on.

- an idle notebook is stopped after its window, with the evidence (Event, audit trail, metric), its
  Service and volume kept, and the job waiting for its GPUs is admitted; `gpuctl resume` brings it back;
- a busy notebook is not stopped; a kept one is not until its keep ends; a keep past keepMax is refused;
- an idle service goes to its floor (`resume` gives its replicas back); an idle gang is only reported;
  a service whose replicas span nodes (a LeaderWorkerSet) goes to its floor of one group, the other
  group's Workload and GPUs handed back;
- `gpuctl top` as a team member shows its own team's jobs only, busiest first, with GPU_UTIL where
  profiling is missing;
- a tenant cannot steer serve against another team: no policy, keep or series of another team is theirs
  to write, and DCGM series a team's pod serves in its own /metrics are dropped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    ACTOR_IDLE,
    GPU_RESOURCE,
    IDLE_REPLICAS_ANNOTATION,
    IDLE_REPORTED_REASON,
    IDLE_SCALED_REASON,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    IDLE_STOPPED_REASON,
    KEEP_UNTIL_ANNOTATION,
    LWS_NAME_LABEL,
    Labels,
)
from gpuctl.domain.objects import parse_time
from gpuctl.domain.workload import HOLDING_QUOTA, workload_state
from tests.integration.admission_stack import AdmissionStack
from tests.integration.conftest import delete_namespaces, require_controller, reset_gpuctl_state, wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.metrics_stack import metrics_stack, scrape
from tests.integration.serve_process import ROOT, service_account_kubeconfig, start_serve
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_gang import _held_gpus, _team_gpus

pytestmark = pytest.mark.integration

WINDOW = 30  # seconds: the teams' policy `after`
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"


@dataclass
class Env:
    kube: Cluster
    cluster: str
    kubectl_bin: str
    pool: str
    prom: str
    fake: str
    tmp: Path
    port: int
    proc: subprocess.Popen
    log: Path
    spaces: dict[str, str] = field(default_factory=dict)  # team letter -> namespace
    teams: dict[str, TeamMember] = field(default_factory=dict)

    def cli(self, *args: str) -> int:
        return main([*args, "--kubeconfig", self.cluster])

    def create(self, name: str, text: str) -> None:
        f = self.tmp / f"{name}.yaml"
        f.write_text(text)
        assert self.cli("create", "-f", str(f)) == 0, text

    def set(self, ns: str, pod: str, **values: float) -> None:
        """What the fake GPUs of `pod` report (fake_dcgm's names; `fake_profiling`, `fake_own` switches)."""
        body = {
            k.replace("fake_", "fake:").replace("fake:own", "fake:dcgm-in-own-metrics"): v
            for k, v in values.items()
        }
        req = urllib.request.Request(
            f"{self.fake}/v1/pods/{ns}/{pod}", data=json.dumps(body).encode(), method="PUT"
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200

    def query(self, expr: str) -> list[dict]:
        url = f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def metrics(self) -> dict[str, dict[tuple, float]]:
        return scrape(f"http://127.0.0.1:{self.port}/metrics")

    def workload(self, ns: str, owner: str) -> dict | None:
        for w in self.kube.list(path("Workload", namespace=ns)):
            if any(r.get("name") == owner for r in w["metadata"].get("ownerReferences") or []):
                return w
        return None

    def active(self, ns: str, owner: str) -> bool | None:
        w = self.workload(ns, owner)
        return None if w is None else (w.get("spec") or {}).get("active") is not False

    def events(self, ns: str, reason: str) -> list[dict]:
        return [e for e in self.kube.list(path("Event", namespace=ns)) if e.get("reason") == reason]

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"gpuctl serve exited:\n{self.log.read_text()[-4000:]}")


def _ready_node(kube: Cluster, name: str) -> bool:
    node = kube.get_or_none(path("Node", name)) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


def _quota(ns: str, gpu: int) -> str:
    return (
        f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: {gpu}, borrowingLimit: 0}}\n"
        f"idle: {{after: {WINDOW}s, keepMax: 2m}}\n"
    )


def notebook(env: Env, ns: str, name: str, gpu: int = 1) -> str:
    env.create(
        f"{ns}-{name}",
        f"kind: notebook\njob: {{name: {name}, namespace: {ns}}}\n"
        "environment: {image: quay.io/jupyter/scipy-notebook}\nservice: {port: 8888}\n"
        f"resources: {{pool: {env.pool}, gpu: {gpu}, cpu: 1, memory: 1Gi}}\n",
    )
    return f"{name}-0"  # its pod


def _running(env: Env, ns: str, pod: str) -> bool:
    p = env.kube.get_or_none(path("Pod", pod, ns)) or {}
    return (p.get("status") or {}).get("phase") == "Running" and bool((p.get("spec") or {}).get("nodeName"))


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: Cluster, kubectl_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    with metrics_stack(cluster) as urls:
        yield from _env(cluster, kube, kubectl_bin, tmp_path_factory.mktemp("idle"), urls)


def _env(cluster: str, kube: Cluster, kubectl_bin: str, tmp: Path, urls: dict[str, str]) -> Iterator[Env]:
    """The module's pool, teams (each with the 30 s policy), admission stack and serve; removed after."""
    reset_gpuctl_state(kube)
    sfx = uuid.uuid4().hex[:5]
    pool, nodes = f"idle-{sfx}", [f"idle-{sfx}-{i}" for i in (1, 2)]
    spaces = {t: f"id-{sfx}-{t}" for t in ("a", "b", "k", "s", "l")}
    stack = None
    serve = None
    try:
        for n in nodes:
            kube.create(fake_node(n, gpus={GPU_RESOURCE: "8"}))
        for n in nodes:
            wait_until(lambda n=n: _ready_node(kube, n), 60, what=f"node {n} Ready")
        (tmp / "pool.yaml").write_text(
            f"kind: pool\npool: {{name: {pool}}}\nnodes:\n"
            + "".join(f"  {n}: {{gpu-type: H100}}\n" for n in nodes)
        )
        assert main(["create", "-f", str(tmp / "pool.yaml"), "--kubeconfig", cluster]) == 0
        for t, ns in spaces.items():
            (tmp / f"quota-{t}.yaml").write_text(_quota(ns, 4 if t in ("a", "l") else 6))
            assert main(["create", "-f", str(tmp / f"quota-{t}.yaml"), "--kubeconfig", cluster]) == 0
        apply_caller_roles(kube)
        stack = AdmissionStack.install(kube, kubectl_bin, cluster, list(spaces.values()), tmp)
        sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp / "sa-kubeconfig", "idle/rbac.yaml")
        serve = start_serve(
            sa, tmp / "serve.log", "--no-leader-elect", "--no-backstop", "--idle", "--idle-interval", "2",
            "--prometheus-url", urls["PROMETHEUS_URL"],
        )  # fmt: skip
        prom, fake = urls["PROMETHEUS_URL"], urls["FAKE_EXPORTER_URL"]
        e = Env(kube, cluster, kubectl_bin, pool, prom, fake, tmp, serve.port, serve.proc, serve.log, spaces)
        e.teams = {t: TeamMember.create(kube, ns, roles=SHIPPED_ROLES) for t, ns in spaces.items()}
        serve.wait_ready(90)
        yield e
    finally:
        if serve is not None:
            serve.stop()
            print(f"\n----- gpuctl serve log (tail)\n{serve.log.read_text()[-4000:]}")
        if stack is not None:
            stack.remove()
        for ns in spaces.values():
            for kind in ("StatefulSet", "Deployment", "Job", "LeaderWorkerSet"):
                with _gone():  # a cluster without the LeaderWorkerSet API: nothing of it to delete
                    for o in kube.list(path(kind, namespace=ns)):
                        with _gone():
                            kube.delete(path(kind, o["metadata"]["name"], ns), propagation="Background")
            main(["delete", "quota", f"q-{ns}", "--delete-namespace", "--kubeconfig", cluster])
        delete_namespaces(kube, list(spaces.values()))  # and wait: the pool is in use until its pods go
        main(["delete", "pool", pool, "--kubeconfig", cluster])
        for n in nodes:
            with _gone():
                kube.delete(path("Node", n))


class _gone:
    """Ignore a 404 (already deleted)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, et, ev, tb) -> bool:
        return isinstance(ev, ApiError) and ev.status == 404


def _ns(env: Env, team: str) -> str:
    return env.spaces[team]


# ----------------------------------------------------------------------------- stopped, and the queue moves
def test_an_idle_notebook_is_stopped_and_the_waiting_job_gets_its_gpus(env: Env) -> None:
    ns = _ns(env, "a")  # quota 4 GPUs, borrowing 0
    env.set(ns, "nb-0", DCGM_FI_PROF_GR_ENGINE_ACTIVE=0.002, DCGM_FI_DEV_FB_USED=2048)  # under the 1% floor
    pod = notebook(env, ns, "nb", gpu=4)
    wait_until(lambda: _running(env, ns, pod), 90, what="notebook running")
    env.create(
        f"{ns}-tr",
        f"kind: training\njob: {{name: tr, namespace: {ns}}}\n"
        "environment: {image: busybox, command: [sh, -c, 'sleep 600'], env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        f"resources: {{pool: {env.pool}, gpu: 4, cpu: 1, memory: 1Gi}}\n",
    )
    wait_until(lambda: env.workload(ns, "tr") is not None, 60, what="the training job's Workload")
    assert workload_state(env.workload(ns, "tr")) not in HOLDING_QUOTA  # waits: the notebook holds the quota
    # Stopped once its window has passed: Kueue's spec.active, by serve, with the evidence.
    wait_until(lambda: env.active(ns, "nb") is False, WINDOW + 90, 1, what="the idle notebook stopped")
    env.alive()
    wl = env.workload(ns, "nb")
    evidence = wl["metadata"]["annotations"][IDLE_STOPPED_ANNOTATION]
    assert evidence.startswith("GPU activity peak 0.2%, mean 0.2% over 30s on 4 device(s), 4 GPU(s)"), (
        evidence
    )
    # Kueue gives the freed quota to the head of the queue: the training job is admitted.
    wait_until(
        lambda: workload_state(env.workload(ns, "tr")) in HOLDING_QUOTA, 90, what="the waiting job admitted"
    )
    # Its Service and StatefulSet (its volume) stay; an Event, the audit trail and a metric say why.
    assert env.kube.get_or_none(path("Service", "svc-nb", ns)) is not None
    assert env.kube.get_or_none(path("StatefulSet", "nb", ns)) is not None
    events = env.events(ns, IDLE_STOPPED_REASON)
    assert [e["involvedObject"]["name"] for e in events] == [wl["metadata"]["name"]]
    assert "idle, GPU activity peak 0.2%" in events[0]["message"] and f"quota q-{ns}" in events[0]["message"]

    def stopped_record() -> list:
        p = env.teams["a"].gpuctl("history", "nb", "-o", "json")
        items = json.loads(p.stdout or '{"items": []}')["items"]  # HistoryRecord objects: the record in spec
        return [i["spec"] for i in items if i["spec"]["action"] == "stopped"]

    records = wait_until(stopped_record, 30, what="the audit trail's record")
    assert records[0]["actor"] == ACTOR_IDLE and "GPU activity peak 0.2%" in records[0]["reason"]
    acted = env.metrics()["gpuctl_idle_actions_total"]
    assert acted[(("action", "stop"), ("kind", "notebook"), ("mode", "acted"), ("namespace", ns))] == 1
    # The team member resumes it: back in the queue (the training job now holds the quota).
    p = env.teams["a"].gpuctl("resume", "nb")
    assert p.returncode == 0, p.stderr
    assert env.active(ns, "nb") is True
    p = env.teams["a"].gpuctl("delete", "job", "tr")
    assert p.returncode == 0, p.stderr


# ----------------------------------------------------------------------------- what is left alone
def test_a_busy_notebook_is_not_stopped_and_a_kept_one_not_until_its_keep_ends(env: Env) -> None:
    ns, member = _ns(env, "k"), env.teams["k"]
    env.set(ns, "busy-0", DCGM_FI_PROF_GR_ENGINE_ACTIVE=0.6)
    pods = {name: notebook(env, ns, name) for name in ("busy", "kept", "ctl")}
    # Kept by its owner right away (within the policy's keepMax, 2m), before its window can pass.
    p = member.gpuctl("keep", "kept", "--for", "75s")
    assert p.returncode == 0 and "statefulset.apps/kept kept until" in p.stdout, p.stderr
    sts = env.kube.get_or_none(path("StatefulSet", "kept", ns))
    until = parse_time(sts["metadata"]["annotations"][KEEP_UNTIL_ANNOTATION])
    # Longer than keepMax is refused, naming the cap.
    p = member.gpuctl("keep", "ctl", "--for", "3h")
    assert p.returncode == 1 and f"the idle policy of quota q-{ns} allows (keepMax 2m)" in p.stderr, p.stderr
    for pod in pods.values():
        wait_until(lambda pod=pod: _running(env, ns, pod), 90, what=f"{pod} running")
    # The control, idle like `kept`, is stopped: a pass judged all three after their window.
    wait_until(lambda: env.active(ns, "ctl") is False, WINDOW + 90, 1, what="the idle control stopped")
    assert env.active(ns, "busy") is True
    assert env.active(ns, "kept") is True
    reported = [e for e in env.events(ns, IDLE_REPORTED_REASON) if "kept until" in e["message"]]
    assert reported, "the kept notebook's report"
    # Once the keep ends, it goes like any idle one; the busy one stays.
    wait_until(
        lambda: env.active(ns, "kept") is False, 150, 1, what="the kept notebook stopped after its keep"
    )
    stopped_at = parse_time(env.workload(ns, "kept")["metadata"]["annotations"][IDLE_STOPPED_AT_ANNOTATION])
    assert stopped_at >= until
    assert env.active(ns, "busy") is True


def test_an_idle_service_goes_to_its_floor_and_a_gang_is_only_reported(env: Env) -> None:
    ns, member = _ns(env, "s"), env.teams["s"]
    env.create(
        f"{ns}-svc",
        f"kind: inference\njob: {{name: svc, namespace: {ns}}}\n"
        "environment: {image: vllm/vllm-openai:v0.6.3}\nservice: {port: 8000, replicas: 2}\n"
        f"resources: {{pool: {env.pool}, gpu: 1, cpu: 1, memory: 1Gi}}\n",
    )
    env.create(
        f"{ns}-gang",
        f"kind: training\njob: {{name: gang, namespace: {ns}}}\n"
        "environment: {image: busybox, command: [sh, -c, 'sleep 600'], env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        f"resources: {{pool: {env.pool}, nodes: 2, gpu: 1, cpu: 1, memory: 1Gi}}\n",
    )

    def deployment() -> dict:
        return env.kube.get_or_none(path("Deployment", "svc", ns)) or {}

    wait_until(lambda: deployment().get("status", {}).get("readyReplicas") == 2, 120, what="2 replicas ready")
    wait_until(lambda: deployment()["spec"]["replicas"] == 1, WINDOW + 90, 1, what="the service at its floor")
    assert deployment()["metadata"]["annotations"][IDLE_REPLICAS_ANNOTATION] == "2"
    scaled = env.events(ns, IDLE_SCALED_REASON)
    assert len(scaled) == 1 and scaled[0]["message"].startswith(
        "scaled from 2 to 1 replica(s): idle, GPU activity"
    )
    # The gang: reported (its policy's default for training), never stopped.
    gang_report = wait_until(
        lambda: [
            e for e in env.events(ns, IDLE_REPORTED_REASON) if "report due (report only)" in e["message"]
        ],
        WINDOW + 60,
        what="the gang's report",
    )
    assert "on 2 device(s), 2 GPU(s)" in gang_report[0]["message"]
    assert env.active(ns, "gang") is True and workload_state(env.workload(ns, "gang")) in HOLDING_QUOTA
    # `gpuctl resume` gives the service its replicas back.
    p = member.gpuctl("resume", "svc")
    assert p.returncode == 0, p.stderr
    assert deployment()["spec"]["replicas"] == 2 and IDLE_REPLICAS_ANNOTATION not in deployment()[
        "metadata"
    ].get("annotations", {})


def test_an_idle_service_of_multi_node_replicas_goes_to_its_floor(env: Env) -> None:
    """A LeaderWorkerSet (issue 44): 2 replicas, each a group of 2 pods x 1 GPU, each group its own Kueue
    Workload. Idle, it is scaled to one group: the other group's pods and Workload go, its 2 GPUs back."""
    require_controller(
        env.kube, "leaderworkersets.leaderworkerset.x-k8s.io", "LeaderWorkerSet", "GPUCTL_TESTBED_LWS"
    )
    ns, member = _ns(env, "l"), env.teams["l"]
    env.create(
        f"{ns}-llm",
        f"kind: inference\njob: {{name: llm, namespace: {ns}}}\n"
        "environment: {image: vllm/vllm-openai:v0.12.0}\nservice: {port: 8000, replicas: 2}\n"
        f"resources: {{pool: {env.pool}, nodes: 2, gpu: 1, cpu: 1, memory: 1Gi}}\n",
    )

    def lws() -> dict:
        return env.kube.get_or_none(path("LeaderWorkerSet", "llm", ns)) or {}

    def running() -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in env.kube.list(path("Pod", namespace=ns), label_selector=f"{LWS_NAME_LABEL}=llm")
            if _running(env, ns, p["metadata"]["name"]) and not p["metadata"].get("deletionTimestamp")
        )

    wait_until(lambda: len(running()) == 4, 120, what="both groups' 4 pods running")
    wait_until(lambda: lws()["spec"]["replicas"] == 1, WINDOW + 90, 1, what="the service at its floor")
    assert lws()["metadata"]["annotations"][IDLE_REPLICAS_ANNOTATION] == "2"
    scaled = env.events(ns, IDLE_SCALED_REASON)
    assert len(scaled) == 1, scaled
    assert scaled[0]["message"].startswith("scaled from 2 to 1 replica(s): idle, GPU activity")
    assert "on 4 device(s), 4 GPU(s)" in scaled[0]["message"], scaled[0]["message"]
    # The second group goes whole (LWS deletes its pods; Kueue's Workload of the group with them): the
    # team's Kueue usage is the one group's 2 GPUs.
    wait_until(lambda: running() == ["llm-0", "llm-0-1"], 60, what="one group left")
    wait_until(
        lambda: _team_gpus(env.kube, ns) == _held_gpus(env.kube, ns) == 2,
        60,
        what="the team's Kueue usage and its pods' GPUs at 2",
    )
    # `gpuctl resume` gives it its replicas back.
    p = member.gpuctl("resume", "llm")
    assert p.returncode == 0, p.stderr
    assert lws()["spec"]["replicas"] == 2
    assert IDLE_REPLICAS_ANNOTATION not in (lws()["metadata"].get("annotations") or {})


# ----------------------------------------------------------------------------- who sees what
def test_a_team_members_top_shows_its_own_jobs_only(env: Env) -> None:
    a, b = _ns(env, "b"), _ns(env, "s")
    # Team b's notebook has no profiling metrics: GPU_UTIL 40 % is read instead.
    env.set(a, "mine-0", fake_profiling=0, DCGM_FI_DEV_GPU_UTIL=40, DCGM_FI_DEV_FB_USED=4096)
    pa = notebook(env, a, "mine")
    wait_until(lambda: _running(env, a, pa), 90, what="team b's notebook running")
    wait_until(lambda: env.query(f'{UTIL}{{namespace="{a}",pod="{pa}"}} == 40'), 30, what="scraped")
    member = env.teams["b"]
    p = member.gpuctl("top", "--prometheus-url", env.prom, "--window", "5s", "-o", "json")
    assert p.returncode == 0, p.stderr
    items = json.loads(p.stdout)["items"]
    assert {(i["namespace"], i["name"]) for i in items} == {(a, "mine")}
    (mine,) = items
    assert mine["activity"] == pytest.approx(0.4) and mine["memory_mib"] == 4096 and mine["gpus"] == 1
    assert mine["pods"][0]["devices"][0]["source"] == UTIL
    p = member.gpuctl("top", "--prometheus-url", env.prom, "-o", "wide")
    assert p.returncode == 0 and "40%" in p.stdout and "4.0Gi" in p.stdout and "util" in p.stdout, p.stdout
    # Another team's jobs: refused, not shown.
    p = member.gpuctl("top", "--prometheus-url", env.prom, "-n", b)
    assert p.returncode == 1 and f"needs gpuctl-user in {b}" in p.stderr, p.stdout + p.stderr
    p = member.gpuctl("top", "--prometheus-url", env.prom, "-A")
    assert p.returncode == 1, p.stdout
    # An admin sees both teams.
    p = subprocess.run(
        [sys.executable, "-m", "gpuctl.main", "top", "-A", "--prometheus-url", env.prom, "-o", "json",
         "--kubeconfig", env.cluster], capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    seen = {i["namespace"] for i in json.loads(p.stdout)["items"]}
    assert {a, b} <= seen


# ----------------------------------------------------------------------------- not steerable by a tenant
def test_a_tenant_cannot_make_serve_act_on_another_teams_job(env: Env) -> None:
    victim, tenant = _ns(env, "k"), env.teams["b"]
    # The policy is on cluster-scoped objects: no team member writes it.
    p = tenant.kubectl(
        env.kubectl_bin, "annotate", "clusterqueue", victim, "runwhere.ai/idle-policy={}", "--overwrite"
    )
    assert p.returncode == 1 and "forbidden" in p.stderr.lower(), p.stderr
    p = tenant.kubectl(
        env.kubectl_bin, "annotate", "resourceflavor", env.pool, "runwhere.ai/idle-policy={}", "--overwrite"
    )
    assert p.returncode == 1 and "forbidden" in p.stderr.lower(), p.stderr
    # Nor another team's keep.
    p = tenant.gpuctl("keep", "busy", "-n", victim, "--for", "0")
    assert p.returncode == 1 and f"needs gpuctl-user in {victim}" in p.stderr, p.stderr
    # Nor GPU activity: a team's pod serving DCGM series in its own /metrics (as an autoscaled service's
    # replicas are scraped) is read without them, and the GPU Operator's namespace is no team's.
    ns = _ns(env, "b")
    env.create(
        f"{ns}-forge",
        f"kind: inference\njob: {{name: forge, namespace: {ns}}}\n"
        "environment: {image: vllm/vllm-openai:v0.6.3}\n"
        "service: {port: 8000, autoscaling: {minReplicas: 1, maxReplicas: 2, targetConcurrency: 10}}\n"
        f"resources: {{pool: {env.pool}, gpu: 1, cpu: 1, memory: 1Gi}}\n",
    )
    forged = wait_until(
        lambda: [p for p in env.kube.list(path("Pod", namespace=ns), label_selector=f"{Labels.APP}=forge")
                 if _running(env, ns, p["metadata"]["name"])],
        120, what="the service's replica running",
    )[0]["metadata"]["name"]  # fmt: skip
    env.set(ns, forged, fake_own=1, DCGM_FI_PROF_GR_ENGINE_ACTIVE=0.9)
    # Scraped (its vLLM series are there) ...
    wait_until(
        lambda: env.query(f'vllm:num_requests_running{{namespace="{ns}",pod="{forged}"}}'), 60, what="scraped"
    )
    # ... without the DCGM series it serves: only dcgm-exporter's job brings those.
    assert env.query('{__name__=~"DCGM_.*",job!="gpuctl-dcgm"}') == []
    assert [r["metric"]["job"] for r in env.query(f'{ENGINE}{{pod="{forged}"}}')] == ["gpuctl-dcgm"]
