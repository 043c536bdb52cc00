"""Issue 43, attacks 6 and 7, against `gpuctl serve --defrag` on test_gang's pool of three fake 8-GPU nodes
(n1, n2 in rack r1, n3 in r2), as the tenants the issue names (team members with gpuctl's shipped roles):

- attack 6, "a set-aside that never ends": a 3 x 8-GPU gang within its team's GPU quota but over its CPU
  quota can never be admitted, yet serve set aside every node of the pool for it and another team's 4-GPU
  job waited almost 5 minutes with 24 of 24 GPUs free. Now it gets no set-aside (serve says why) and the
  other team's job is admitted at once;
- attack 7, "squatting on set-aside nodes": every gang tolerated every set-aside, so another team's
  2 x 1-GPU gang was admitted onto the nodes held for a 2 x 8 gang, and a `high` squatter was never moved.
  Now the nodes carry the gang's own taints: the other gang is not admitted there, a high-priority pod
  that tolerates them anyway (every taint: made past admission, as the cluster admin here; admission
  refuses it from tenants, tests/unit/test_admission_gangs.py and test_admission_policy.py) is moved off,
  and the gang starts once the nodes are free.

Each ends with every team's Kueue reservation equal to the GPUs of its bound pods."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import Cluster, path
from gpuctl.constants import (
    DEFRAG_MOVED_ANNOTATION,
    HOSTNAME_LABEL,
    MAX_EXEC_TIME_LABEL,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_TAINT_KEYS,
)
from gpuctl.domain.gang import set_aside_taints
from gpuctl.domain.workload import HOLDING_QUOTA, WorkloadState, workload_state
from tests.integration.conftest import wait_until
from tests.integration.serve_process import drop_leader_lease, service_account_kubeconfig, start_serve
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles, dump
from tests.integration.test_gang import Racks, _workload, racks  # noqa: F401 - fixture
from tests.integration.test_metrics import _job
from tests.integration.test_tenant_attacks import kueue_gpus
from tests.integration.test_termination import bound_gpus

pytestmark = pytest.mark.integration

SETTLE = 2.0
WATCH = 30.0  # how long a job that must not be admitted is watched (six set-aside steps)


@dataclass
class Env:
    kube: Cluster
    cluster: str
    racks: Racks
    teams: dict[str, TeamMember]  # namespace -> a member with the shipped roles
    log: Path
    proc: subprocess.Popen
    tmp: Path

    def node(self, n: int) -> str:
        return sorted(self.racks.nodes)[n - 1]  # n1, n2: rack r1; n3: rack r2

    def create(self, ns: str, text: str) -> None:
        f = self.tmp / f"{uuid.uuid4().hex[:6]}.yaml"
        f.write_text(text)
        p = self.teams[ns].gpuctl("create", "-f", str(f))
        assert p.returncode == 0, dump(p)

    def held(self) -> dict[str, str]:
        """node -> gang it is set aside for (taints and annotation)."""
        out = {}
        for n in self.racks.nodes:
            node = self.kube.get(path("Node", n))
            gang = (node["metadata"].get("annotations") or {}).get(SET_ASIDE_FOR_ANNOTATION)
            taints = [t for t in node["spec"].get("taints") or [] if t["key"] in SET_ASIDE_TAINT_KEYS]
            if gang and taints:
                out[n] = gang
        return out

    def balanced(self) -> dict[str, tuple[int, int]]:
        """namespace -> (Kueue's reservation, GPUs of its bound pods) where they differ."""
        out = {}
        for ns in self.teams:
            counts = (kueue_gpus(self.kube, ns), bound_gpus(self.kube, ns))
            if counts[0] != counts[1]:
                out[ns] = counts
        return out


def training(
    name: str, ns: str, pool: str, *, nodes: int, gpus: int, cpu: int, priority: str = "medium"
) -> str:
    return (
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: {priority}}}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        f"resources: {{pool: {pool}, nodes: {nodes}, gpu: {gpus}, cpu: {cpu}, memory: 8Gi}}\n"
    )


@pytest.fixture(scope="module")
def env(racks, cluster, kube, kubectl_bin, tmp_path_factory) -> Iterator[Env]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("setaside")
    sfx = uuid.uuid4().hex[:5]
    over, squat, fill = f"over-{sfx}", f"squat-{sfx}", f"fill-{sfx}"
    (tmp / "quota.yaml").write_text(
        f"kind: quota\nquota: {{name: q-sa-{sfx}}}\nnamespace:\n"
        f"  {over}: {{gpu: 24, cpu: 16}}\n  {squat}: {{gpu: 8}}\n  {fill}: {{gpu: 24}}\n"
    )
    assert main(["create", "-f", str(tmp / "quota.yaml"), "--kubeconfig", cluster]) == 0
    apply_caller_roles(kube)
    teams = {ns: TeamMember.create(kube, ns, roles=SHIPPED_ROLES) for ns in (racks.ns, over, squat, fill)}
    sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp / "sa-kubeconfig", "defrag/rbac.yaml")
    drop_leader_lease(kube)
    serve = start_serve(
        sa, tmp / "serve.log", "--no-backstop", "--no-leader-elect", "--defrag", racks.pool,
        "--defrag-settle", str(SETTLE), "--defrag-moves-per-hour", "0",
    )  # fmt: skip
    log = serve.log
    try:
        yield Env(kube, cluster, racks, teams, log, serve.proc, tmp)
    finally:
        serve.stop(20)
        print(f"\n----- gpuctl serve log (tail)\n{log.read_text()[-4000:]}")
        for m in teams.values():
            m.delete()
        for ns in (over, squat, fill, racks.ns):
            for j in kube.list(path("Job", namespace=ns)):
                kube.delete(path("Job", j["metadata"]["name"], ns), propagation="Background")
        main(["delete", "quota", f"q-sa-{sfx}", "--delete-namespace", "--kubeconfig", cluster])
        for n in racks.nodes:  # a failed run must not leave the pool held
            node = kube.get(path("Node", n))
            taints = [t for t in node["spec"].get("taints") or [] if t["key"] not in SET_ASIDE_TAINT_KEYS]
            kube.merge_patch(
                path("Node", n),
                {
                    "metadata": {"annotations": {SET_ASIDE_FOR_ANNOTATION: None}},
                    "spec": {"taints": taints or None},
                },
            )


def test_a_gang_its_cpu_quota_cannot_take_gets_no_set_aside_and_others_run(env: Env) -> None:
    """Attack 6."""
    kube, over, mine = env.kube, next(ns for ns in env.teams if ns.startswith("over-")), env.racks.ns
    # 3 x 8 GPUs is within the team's 24 GPUs; 3 x 8 cores is over its 16.
    env.create(over, training("wide", over, env.racks.pool, nodes=3, gpus=8, cpu=8))
    wait_until(
        lambda: f"{over}/wide gets no set-aside: over its team's quota, CPU: needs 24 cores, 16 cores"
        in env.log.read_text(),
        60, what=f"serve refusing a set-aside for {over}/wide (log {env.log})",
    )  # fmt: skip
    assert env.held() == {}
    assert workload_state(_workload(kube, over, "wide")) != WorkloadState.ADMITTED
    # Another team's 4-GPU job is admitted at once: no node is held for a gang Kueue cannot admit.
    t0 = time.monotonic()
    env.create(mine, training("four", mine, env.racks.pool, nodes=1, gpus=4, cpu=1))
    wait_until(
        lambda: workload_state(_workload(kube, mine, "four")) == WorkloadState.ADMITTED, 60, 0.5,
        what="the other team's 4-GPU job admitted",
    )  # fmt: skip
    print(f"\nthe other team's 4-GPU job admitted {time.monotonic() - t0:.1f} s after its submission")
    wait_until(lambda: not env.balanced(), 60, what="every team's reservation = its bound pods' GPUs")
    assert env.held() == {}
    for ns, name in ((over, "wide"), (mine, "four")):
        kube.delete(path("Job", name, ns), propagation="Background")
    wait_until(lambda: bound_gpus(kube, mine) == 0, 60, what="the pool empty again")


def _filler(env: Env, name: str, node: int, gpus: int, *, max_runtime: int | None) -> None:
    """A fill team's Job pinned to one node (Kueue's Topology Aware Scheduling honours the nodeSelector)."""
    fill = next(ns for ns in env.teams if ns.startswith("fill-"))
    job = _job(name, fill, gpus, "low", pool=env.racks.pool)
    job["spec"]["template"]["spec"]["nodeSelector"][HOSTNAME_LABEL] = env.node(node)
    job["spec"]["template"]["metadata"]["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] = "3600s"
    if max_runtime is not None:  # on the Job (Kueue's maxRuntime) and its pods (when serve sees it ends)
        job["metadata"]["labels"][MAX_EXEC_TIME_LABEL] = str(max_runtime)
        job["spec"]["template"]["metadata"]["labels"][MAX_EXEC_TIME_LABEL] = str(max_runtime)
    env.kube.create(job)


def test_a_set_aside_is_its_gangs_alone_and_a_squatter_is_moved(env: Env) -> None:
    """Attack 7."""
    kube, mine = env.kube, env.racks.ns
    squat = next(ns for ns in env.teams if ns.startswith("squat-"))
    fill = next(ns for ns in env.teams if ns.startswith("fill-"))
    # n3 full for good; n1 and n2 with 6 of 8 GPUs busy until a known end: the gang's nodes are n1, n2.
    _filler(env, "f3", 3, 8, max_runtime=None)
    _filler(env, "f1", 1, 6, max_runtime=1800)
    _filler(env, "f2", 2, 6, max_runtime=1800)
    wait_until(lambda: bound_gpus(kube, fill) == 20, 120, what="the fillers running")
    env.create(mine, training("big", mine, env.racks.pool, nodes=2, gpus=8, cpu=8))
    gang = f"{mine}/big"
    wait_until(
        lambda: env.held() == {env.node(1): gang, env.node(2): gang}, 90, what=f"n1, n2 held for {gang}"
    )
    node = kube.get(path("Node", env.node(1)))
    assert all(t in node["spec"]["taints"] for t in set_aside_taints(gang))
    # Another team's 2 x 1-GPU gang (its own set-aside's tolerations, as gpuctl gives them; high
    # priority): the only free GPUs are on the held nodes, which it may not use.
    env.create(squat, training("small", squat, env.racks.pool, nodes=2, gpus=1, cpu=1, priority="high"))
    deadline = time.monotonic() + WATCH
    while time.monotonic() < deadline:
        wl = _workload(kube, squat, "small")
        assert workload_state(wl) not in HOLDING_QUOTA, f"{squat}/small admitted onto {gang}'s nodes: {wl}"
        time.sleep(1)
    # A high-priority pod that tolerates every taint (past admission: made by the cluster admin) is
    # admitted onto a held node by Kueue and moved off by serve.
    rogue = _job("rogue", squat, 1, "high", pool=env.racks.pool)
    rogue["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    kube.create(rogue)

    def moved() -> str:
        wl = _workload(kube, squat, "rogue") or {}
        return (wl.get("metadata", {}).get("annotations") or {}).get(DEFRAG_MOVED_ANNOTATION, "")

    note = wait_until(moved, 90, 0.5, what=f"the squatter moved (serve log {env.log})")
    assert f"set aside for {gang}, whose taints it tolerates" in note, note
    kube.delete(path("Job", "rogue", squat), propagation="Background")
    # The nodes free up: the gang starts on them, and the set-aside goes.
    for name in ("f1", "f2"):
        kube.delete(path("Job", name, fill), propagation="Background")
    wait_until(
        lambda: workload_state(_workload(kube, mine, "big")) == WorkloadState.ADMITTED, 120, 0.5,
        what=f"{gang} admitted once its nodes are free",
    )  # fmt: skip
    wait_until(lambda: env.held() == {}, 60, what="the set-aside given back")
    wait_until(lambda: not env.balanced(), 90, what="every team's reservation = its bound pods' GPUs")
    pods = kube.list(path("Pod", namespace=mine), label_selector="batch.kubernetes.io/job-name=big")
    assert sorted(p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")) == [
        env.node(1),
        env.node(2),
    ]
