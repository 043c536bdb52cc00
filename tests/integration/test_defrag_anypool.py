"""Issue 23 on the real cluster, as a team member with only the shipped roles: a job that may run in any of
several pools lands in the first one (in the team queue's order) with room, and `describe` / `get jobs -o
wide` name it; a fragmented training-pool gets a whole node for an 8-GPU job from `gpuctl serve --defrag`
(one job moved, requeued by Kueue, running again), and the moved job's `describe` says why.

About 1-2 minutes: one `gpuctl serve` (as its ServiceAccount with manifests/serve/rbac.yaml and
defrag/rbac.yaml), fake jobs that run 30 minutes."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuctl.cluster import Cluster, path
from gpuctl.constants import DEFRAG_MOVED_ANNOTATION, DEFRAG_REACTIVATE_ANNOTATION
from gpuctl.domain.workload import HOLDING_QUOTA, job_pool, topology_nodes, workload_state
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.serve_process import drop_leader_lease, service_account_kubeconfig, start_serve
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_cli_cluster import gpuctl, pools  # noqa: F401 - fixtures

ALL_POOLS = "[dev-pool, inference-pool, training-pool]"


def _job_yaml(
    name: str, ns: str, gpus: int, pool: str | None, priority: str = "medium", gpu_type: str = ""
) -> str:
    where = f"pool: {pool}, " if pool else ""
    where += f"gpu-type: {gpu_type}, " if gpu_type else ""
    return (
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: {priority}}}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        f"resources: {{{where}gpu: {gpus}, cpu: 2, memory: 8Gi}}\n"
    )


def _workload(kube: Cluster, ns: str, job: str) -> dict | None:
    for wl in kube.list(path("Workload", namespace=ns)):
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _admitted(kube: Cluster, ns: str, job: str) -> bool:
    return workload_state(_workload(kube, ns, job)) in HOLDING_QUOTA


def _running_pod_node(kube: Cluster, ns: str, job: str) -> str | None:
    for p in kube.list(path("Pod", namespace=ns), label_selector=f"job-name={job}"):
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            return p["spec"].get("nodeName")
    return None


@pytest.fixture
def team(pools, kube, gpuctl, tmp_path) -> Iterator[tuple[str, TeamMember]]:  # noqa: F811
    ns = f"dfa-{uuid.uuid4().hex[:6]}"
    q = tmp_path / "quota.yaml"
    q.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 28}}\n")
    rc, _, err = gpuctl("create", "-f", str(q))
    assert rc == 0, err
    apply_caller_roles(kube)
    member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
    yield ns, member
    member.delete()
    gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
    delete_namespaces(kube, [ns], 120)


def _create(member: TeamMember, tmp_path: Path, text: str, name: str) -> None:
    f = tmp_path / f"{name}.yaml"
    f.write_text(text)
    r = member.gpuctl("create", "-f", str(f))
    assert r.returncode == 0, r.stdout + r.stderr


def _describe(member: TeamMember, name: str) -> dict:
    r = member.gpuctl("describe", "job", name, "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def _wide_pool(member: TeamMember, name: str) -> str:
    r = member.gpuctl("get", "jobs", "-o", "wide")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    start = lines[0].index("POOL")  # columns are fixed-width: cut the row where the header puts POOL
    row = next(line for line in lines[1:] if line.split()[0] == name)  # JOB ID: the job's name
    return row[start:].split()[0]


def test_any_pool_job_lands_in_the_first_pool_with_room(team, kube, tmp_path):
    ns, member = team
    # The team queue lists the pool flavors by name: dev-pool (one 4-GPU node), inference-pool, training-pool.
    _create(member, tmp_path, _job_yaml("any1", ns, 4, ALL_POOLS), "any1")
    wait_until(lambda: _admitted(kube, ns, "any1"), 60, what="any1 admitted")
    _create(member, tmp_path, _job_yaml("any2", ns, 4, ALL_POOLS), "any2")
    wait_until(lambda: _admitted(kube, ns, "any2"), 60, what="any2 admitted")
    # No pool selector or label was written: Kueue chose; job_pool reads its admitted flavor.
    tmpl = kube.get(path("Job", "any1", ns))["metadata"]
    assert "runwhere.ai/pool" not in tmpl["labels"]
    assert job_pool(_workload(kube, ns, "any1")) == "dev-pool"
    assert job_pool(_workload(kube, ns, "any2")) == "inference-pool"  # dev-pool is full
    wait_until(lambda: _running_pod_node(kube, ns, "any2"), 60, what="any2's pod running")
    assert _describe(member, "any1")["pool"] == "dev-pool"
    assert _describe(member, "any2")["pool"] == "inference-pool"
    assert _wide_pool(member, "any2") == "inference-pool"
    # No pool, a GPU type: any pool whose nodes have it (training-pool's A100s).
    _create(member, tmp_path, _job_yaml("typed", ns, 2, None, gpu_type="A100-100G"), "typed")
    wait_until(lambda: _admitted(kube, ns, "typed"), 60, what="typed admitted")
    assert job_pool(_workload(kube, ns, "typed")) == "training-pool"
    # Still refused: a pool that does not exist in the list (named, with the fix).
    f = tmp_path / "bad.yaml"
    f.write_text(_job_yaml("bad", ns, 1, "[dev-pool, no-such-pool]"))
    r = member.gpuctl("create", "-f", str(f))
    assert r.returncode != 0 and "no-such-pool" in r.stderr and "resources.pool" in r.stderr, r.stderr
    assert kube.get_or_none(path("Job", "bad", ns)) is None


@pytest.fixture
def serve(kube, kubectl_bin, cluster, tmp_path) -> Iterator[tuple[int, Path]]:
    sa = service_account_kubeconfig(
        kube, kubectl_bin, cluster, tmp_path / "sa-kubeconfig", "defrag/rbac.yaml"
    )
    drop_leader_lease(kube)
    s = start_serve(
        sa, tmp_path / "serve.log", "--no-backstop", "--no-leader-elect", "--defrag", "training-pool",
        "--defrag-settle", "2", "--defrag-moves-per-hour", "2",
    )  # fmt: skip
    try:
        s.wait_ready()
        yield s.port, s.log
    finally:
        s.stop(20)


def _moves(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('gpuctl_defrag_moves_total{pool="training-pool"}'):
                return float(line.split()[-1])
    return 0.0


def test_fragmented_pool_gets_a_whole_node_for_an_eight_gpu_job(team, serve, kube, tmp_path):
    ns, member = team
    port, log = serve
    # 4 + 4 + 4 on two 8-GPU nodes (TAS packs the first two on one node), then the packed node's first
    # job ends: 4 GPUs used on each node, 8 free in all, no node with 8. The same priority as the 8-GPU
    # job, so Kueue's own preemption (withinClusterQueue: LowerPriority) does not make the room.
    for name in ("x1", "x2", "x3"):
        _create(member, tmp_path, _job_yaml(name, ns, 4, "training-pool", "medium"), name)
        wait_until(lambda name=name: _running_pod_node(kube, ns, name), 60, what=f"{name} running")
    nodes = {n: _running_pod_node(kube, ns, n) for n in ("x1", "x2", "x3")}
    crowded = next(n for n, node in nodes.items() if list(nodes.values()).count(node) == 2)
    r = member.gpuctl("delete", "job", crowded)
    assert r.returncode == 0, r.stdout + r.stderr
    left = sorted(n for n in nodes if n != crowded)
    wait_until(lambda: len({_running_pod_node(kube, ns, n) for n in left} - {None}) == 2, 30, what="spread")
    _create(member, tmp_path, _job_yaml("big", ns, 8, "training-pool", "medium"), "big")
    # gpuctl serve moves one of the two 4-GPU jobs (the most recently started) to the other node.
    wait_until(lambda: _admitted(kube, ns, "big"), 90, what=f"big admitted after a move; serve log:\n{log}")
    moved = [
        n
        for n in left
        if DEFRAG_MOVED_ANNOTATION
        in (_workload(kube, ns, n) or {}).get("metadata", {}).get("annotations", {})
    ]
    assert len(moved) == 1, moved
    (victim,) = moved
    wl = _workload(kube, ns, victim)
    assert f"{ns}/big" in wl["metadata"]["annotations"][DEFRAG_MOVED_ANNOTATION]
    # Requeued by Kueue, running again beside the other job; the marker is gone (a later stop stays).
    wait_until(lambda: _running_pod_node(kube, ns, victim), 90, what=f"{victim} running again")
    wl = _workload(kube, ns, victim)
    assert wl["spec"].get("active", True) is True
    assert DEFRAG_REACTIVATE_ANNOTATION not in wl["metadata"]["annotations"]
    requeued = next(c for c in wl["status"]["conditions"] if c["type"] == "Requeued")
    assert requeued["reason"] == "Reactivated", requeued
    other = next(n for n in left if n != victim)
    assert _running_pod_node(kube, ns, victim) == _running_pod_node(kube, ns, other)
    big_node = next(iter(topology_nodes(_workload(kube, ns, "big"))))
    assert big_node != _running_pod_node(kube, ns, other)
    # What the member reads, and the counter: one move, within the cap of 2.
    d = _describe(member, victim)
    assert d["moved"] and d["moved"].startswith(f"moved to make room for {ns}/big"), d["moved"]
    r = member.gpuctl("describe", "job", victim)
    assert "Moved:" in r.stdout and "moved to make room for" in r.stdout, r.stdout
    assert _moves(port) == 1
