"""The backstop of `gpuctl serve` on the local cluster: GPU pods on pool nodes that no admitted Kueue
Workload covers are reported (log line, Warning Event, gpuctl_uncovered_pods) within the grace and, with
--evict-uncovered, evicted through the Eviction API (a PodDisruptionBudget holds an eviction back);
admitted work going through its whole lifecycle (running, completing, deleted while running, preempted,
a Deployment scaled up and down) is never reported.

The service runs as the ServiceAccount of manifests/serve/rbac.yaml plus manifests/serve/evict/rbac.yaml
(a missing permission fails here), with a short grace (4 s) and eviction after 30 s, so the report can be
seen before the eviction. Steps run in file order on one pool and one team.
"""

from __future__ import annotations

import copy
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import GPU_RESOURCE, TAS_UNCONSTRAINED, UNCOVERED_EVENT_REASON, Labels
from gpuctl.domain.pools import pool_capacities
from gpuctl.domain.workload import HOLDING_QUOTA, workload_state
from queues import TeamQuota, desired_objects, local_queue, team_namespace
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.metrics_stack import scrape
from tests.integration.serve_process import (
    drop_leader_lease,
    remove_serve_rbac,
    service_account_kubeconfig,
    start_serve,
)
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_metrics import _clear_gpu_work, _job

pytestmark = pytest.mark.integration

POOL = "backstop-pool"
NODES = ["gpu-node-1", "gpu-node-2"]  # 8 GPUs each
GRACE, EVICT_AFTER = 4, 30
PDB_LABEL = {"backstop-test": "rogue"}


@dataclass
class Env:
    kube: Cluster
    kubectl_bin: str
    team: str
    outside: str  # a namespace Kueue does not manage
    member: TeamMember
    port: int
    log: Path
    proc: subprocess.Popen

    def metrics(self) -> dict[str, dict[tuple, float]]:
        return scrape(f"http://127.0.0.1:{self.port}/metrics")

    def uncovered(self) -> dict[str, float]:
        """reason -> pods reported in the pool (leader's series)."""
        m = self.metrics()
        return {
            dict(k)["reason"]: v
            for k, v in m.get("gpuctl_uncovered_pods", {}).items()
            if dict(k).get("pool") == POOL and v
        }

    def evictions(self, result: str) -> float:
        return self.metrics().get("gpuctl_uncovered_evictions_total", {}).get((("result", result),), 0.0)

    def submit(self, job: dict) -> None:
        """Create `job` as the team member, with kubectl, as a tenant would."""
        p = self.member.kubectl(self.kubectl_bin, "create", "-f", "-", input=yaml.safe_dump(job))
        assert p.returncode == 0, p.stderr

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"gpuctl serve exited:\n{self.log.read_text()[-4000:]}")

    def events(self, ns: str, pod: str) -> list[dict]:
        return [
            e
            for e in self.kube.list(path("Event", namespace=ns), field_selector=f"involvedObject.name={pod}")
            if e.get("reason") == UNCOVERED_EVENT_REASON
        ]


def _with_runtime(job: dict, runtime: str) -> dict:
    job = copy.deepcopy(job)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "GPUCTL_FAKE_RUNTIME", "value": runtime}
    ]
    return job


def _deployment(name: str, ns: str, replicas: int, gpus: int = 1) -> dict:
    """A raw Deployment through Kueue's deployment integration (each pod its own Workload)."""
    res = {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name, Labels.KUEUE_QUEUE: "default", Labels.POOL: POOL},
                    "annotations": {TAS_UNCONSTRAINED: "true"},
                },
                "spec": {
                    "nodeSelector": {Labels.POOL: POOL},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": res}}
                    ],
                },
            },
        },
    }


def _bare_pod(name: str, ns: str, node: str, gpus: int, labels: dict | None = None) -> dict:
    res = {"cpu": "1", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": res}}
            ],
        },
    }


def _running_pods(kube: Cluster, ns: str, selector: str) -> list[dict]:
    return [
        p
        for p in kube.list(path("Pod", namespace=ns), label_selector=selector)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _admitted(kube: Cluster, ns: str) -> int:
    return sum(1 for w in kube.list(path("Workload", namespace=ns)) if workload_state(w) in HOLDING_QUOTA)


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: Cluster, kubectl_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("backstop")
    reset_gpuctl_state(kube)
    _clear_gpu_work(kube, NODES)
    run = uuid.uuid4().hex[:6]
    team, outside = f"t-{run}-bs", f"t-{run}-outside"
    for node in NODES:
        kube.merge_patch(path("Node", node), {"metadata": {"labels": {Labels.POOL: POOL}}})
    # A team with an 8-GPU quota and no borrowing: its high work preempts its own low work.
    quota = TeamQuota(namespace=team, quota_name="backstop-test", gpu=8, borrowing_limit=0)
    for obj in [
        *desired_objects(pool_capacities(kube.list(path("Node")), [POOL]), [quota]),
        team_namespace(quota),
        local_queue(team),
    ]:
        kube.apply(obj)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": outside}})
    apply_caller_roles(kube)
    member = TeamMember.create(kube, team, roles=SHIPPED_ROLES)
    sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp / "sa-kubeconfig", "evict/rbac.yaml")
    drop_leader_lease(kube)
    serve = start_serve(
        sa,
        tmp / "serve.log",
        "--uncovered-grace",
        str(GRACE),
        "--evict-uncovered",
        "--evict-after",
        str(EVICT_AFTER),
    )
    port, log = serve.port, serve.log
    e = Env(kube, kubectl_bin, team, outside, member, port, log, serve.proc)

    def ready() -> bool:
        e.alive()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                return r.status == 200 and e.metrics()["gpuctl_serve_leader"][()] == 1
        except OSError:
            return False

    try:
        wait_until(ready, 60, 0.5, what="gpuctl serve synced and leading")
        yield e
    finally:
        serve.stop()
        print(f"\n----- gpuctl serve log (tail)\n{log.read_text()[-3000:]}")
        member.delete()
        delete_namespaces(kube, [team, outside], 90)
        remove_serve_rbac(kubectl_bin, cluster, "evict/rbac.yaml")
        reset_gpuctl_state(kube)


# ---------------------------------------------------------------------------------------------- the steps
def test_admitted_work_through_its_lifecycle_is_never_reported(env: Env) -> None:
    """Jobs admitted, completing, deleted while running (their pods terminate after the Workload is
    gone), preempted by the team's high work; a Deployment scaled up and down: with a 4 s grace and
    eviction on, nothing is ever reported and nothing evicted."""
    kube, ns = env.kube, env.team
    seen: list[dict[str, float]] = []

    def sample() -> None:
        env.alive()
        seen.append(env.uncovered())

    submit = env.submit  # the team member, with kubectl
    submit(_with_runtime(_job("done", ns, 2, "low", pool=POOL, pods=2), "4s"))  # completes
    submit(_with_runtime(_job("low-a", ns, 2, "low", pool=POOL), "30m"))
    submit(_with_runtime(_job("low-b", ns, 2, "low", pool=POOL), "30m"))
    kube.create(_deployment("web", ns, 1))
    wait_until(lambda: (sample(), len(_running_pods(kube, ns, "job-name in (low-a,low-b)")) == 2)[1], 90, 0.5,
               what="two low jobs running")  # fmt: skip
    wait_until(
        lambda: (sample(), len(_running_pods(kube, ns, "app=web")) == 1)[1], 90, 0.5, what="web running"
    )
    # Quota 8: done (4) may still run, low-a (2), low-b (2), web (1): high (4) preempts low work.
    submit(_with_runtime(_job("high", ns, 4, "high", pool=POOL), "30m"))
    wait_until(lambda: (sample(), len(_running_pods(kube, ns, "job-name=high")) == 1)[1], 120, 0.5,
               what="high running after preempting low work")  # fmt: skip
    # Deleted while running (Background, as gpuctl and kubectl do): its Workload goes, its pod terminates.
    kube.delete(path("Job", "high", ns))
    kube.merge_patch(path("Deployment", "web", ns), {"spec": {"replicas": 2}})
    deadline = time.monotonic() + max(4 * GRACE, 20)
    while time.monotonic() < deadline:
        sample()
        time.sleep(0.5)
    kube.merge_patch(path("Deployment", "web", ns), {"spec": {"replicas": 0}})
    deadline = time.monotonic() + max(4 * GRACE, 20)
    while time.monotonic() < deadline:
        sample()
        time.sleep(0.5)
    assert len(seen) > 40
    assert [s for s in seen if s] == [], "admitted work was reported as uncovered"
    assert env.evictions("evicted") == 0 and env.evictions("blocked") == 0
    assert "uncovered:" not in env.log.read_text()


def test_orphaned_forged_and_bare_gpu_pods_are_reported_within_the_grace(env: Env) -> None:
    kube, ns = env.kube, env.team
    # 1. A team member's Job, orphaned: `kubectl delete job --cascade=orphan`. The delete is done as the
    #    cluster admin: the "holes" change of issue 26 refuses orphaning deletes from team members at
    #    admission, and this test is about what the backstop sees when such a pod exists anyway.
    env.submit(_with_runtime(_job("orphan", ns, 2, "low", pool=POOL), "30m"))
    (orphan,) = wait_until(lambda: _running_pods(kube, ns, "job-name=orphan"), 90, 0.5, what="orphan running")
    kube.delete(path("Job", "orphan", ns), propagation="Orphan")
    orphan_path = path("Pod", orphan["metadata"]["name"], ns)
    wait_until(lambda: not kube.get(orphan_path)["metadata"].get("ownerReferences"), 60, 0.5, what="orphaned")
    # 2. A pod that claims a running, admitted Job as its controller (correct uid) and binds itself to a
    #    pool node: it gets no GPUs of that Job's admission.
    env.submit(_with_runtime(_job("real", ns, 1, "low", pool=POOL), "30m"))
    wait_until(lambda: _running_pods(kube, ns, "job-name=real"), 90, 0.5, what="real running")
    real = kube.get(path("Job", "real", ns))
    forged = _bare_pod("forged", ns, NODES[1], 1)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "real", "uid": real["metadata"]["uid"]}
    forged["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    kube.create(forged)
    # 3. A GPU pod bound to a pool node by nodeName, from a namespace Kueue does not manage (the isolation
    #    change of issue 26 refuses it at admission; it is created here as the admin), guarded by a PDB.
    kube.create(_bare_pod("rogue", env.outside, NODES[0], 2, PDB_LABEL))
    kube.request("POST", f"/apis/policy/v1/namespaces/{env.outside}/poddisruptionbudgets", body={
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "rogue"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": PDB_LABEL}}})  # fmt: skip
    t0 = time.monotonic()
    wait_until(lambda: sum(env.uncovered().values()) == 3, 60, 0.5, what="three pods reported")
    took = time.monotonic() - t0
    print(f"\nreported {took:.1f} s after the last one appeared (grace {GRACE} s)")
    # The orphan still names its (now finished) Workload in Kueue's TAS annotation: not_admitted; the
    # forged pod is released by the Job controller (no_workload) or, before that, beyond its admission.
    reasons = env.uncovered()
    assert sum(reasons.values()) == 3 and set(reasons) <= {"no_workload", "not_admitted", "beyond_admission"}
    assert env.metrics()["gpuctl_pool_uncovered_gpus"][(("pool", POOL),)] == 2 + 1 + 2
    log = env.log.read_text()
    for key in (f"{ns}/{orphan['metadata']['name']}", f"{ns}/forged", f"{env.outside}/rogue"):
        assert re.search(rf"uncovered: pod {re.escape(key)} holds \d GPU\(s\) on node gpu-node-\d", log), key
    for pod_ns, name in ((ns, orphan["metadata"]["name"]), (ns, "forged"), (env.outside, "rogue")):
        (ev,) = wait_until(lambda n=pod_ns, p=name: env.events(n, p), 30, 0.5, what=f"Event on {name}")
        assert ev["type"] == "Warning" and "Kueue" in ev["message"]
        # Reported, not yet evicted (eviction after 30 s uncovered).
        assert kube.get_or_none(path("Pod", name, pod_ns)) is not None
    # Admitted work next to them is still not reported: only those three.
    assert _admitted(kube, ns) >= 1


def test_with_eviction_on_they_are_evicted_and_a_pdb_holds_one_back(env: Env) -> None:
    kube, ns = env.kube, env.team
    orphans = kube.list(path("Pod", namespace=ns), label_selector="job-name=orphan")
    assert len(orphans) == 1

    def gone(pod_ns: str, name: str) -> bool:
        p = kube.get_or_none(path("Pod", name, pod_ns))
        return p is None or bool(p["metadata"].get("deletionTimestamp"))

    wait_until(lambda: gone(ns, orphans[0]["metadata"]["name"]) and gone(ns, "forged"), EVICT_AFTER + 60, 1,
               what="orphan and forged pods evicted")  # fmt: skip
    wait_until(lambda: env.evictions("blocked") >= 1, 60, 1, what="the PDB refusing the rogue pod's eviction")
    assert not gone(env.outside, "rogue")
    assert env.evictions("evicted") >= 2
    # The admitted Job `real` kept its pod.
    assert _running_pods(kube, ns, "job-name=real")
    # The PDB goes: the next attempt evicts the rogue pod too.
    kube.request("DELETE", f"/apis/policy/v1/namespaces/{env.outside}/poddisruptionbudgets/rogue")
    wait_until(lambda: gone(env.outside, "rogue"), 90, 1, what="rogue pod evicted once its PDB is gone")
    wait_until(lambda: not env.uncovered(), 60, 0.5, what="nothing uncovered any more")
    evicted = [
        e
        for e in kube.list(path("Event", namespace=env.outside), field_selector="involvedObject.name=rogue")
        if e.get("reason") == "GpuctlEvictedUncovered"
    ]
    assert evicted, "no Event for the eviction"


def test_eviction_needs_its_own_rbac(env: Env, kube: Cluster) -> None:
    """Without manifests/serve/evict/rbac.yaml, serve's ServiceAccount may not evict (least privilege)."""
    review = kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "system:serviceaccount:gpuctl-system:gpuctl-serve",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:gpuctl-system"],
                "resourceAttributes": {"verb": "create", "resource": "pods", "subresource": "eviction",
                                       "namespace": env.outside},
            },
        },
    )  # fmt: skip
    assert review["status"]["allowed"] is True  # granted by evict/rbac.yaml in this module
    try:
        kube.delete(path("ClusterRoleBinding", "gpuctl-serve-evict"))
    except ApiError as e:
        if e.status != 404:
            raise
    body = {
        **{k: v for k, v in review.items() if k in ("apiVersion", "kind")},
        "spec": {"user": "system:serviceaccount:gpuctl-system:gpuctl-serve",
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:gpuctl-system"],
                 "resourceAttributes": {"verb": "create", "resource": "pods", "subresource": "eviction",
                                        "namespace": env.outside}},
    }  # fmt: skip

    def denied() -> bool:
        sar = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
        return sar["status"]["allowed"] is False

    # The API server's RBAC authorizer reads bindings from its informer: the delete reaches it a moment
    # later (seen once in CI: the review right after the delete still allowed). Wait for the denial itself.
    wait_until(denied, 30, 0.2, what="eviction denied once the binding is gone")
