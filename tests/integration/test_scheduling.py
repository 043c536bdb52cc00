"""Scheduling quality on the real cluster (docs/queueing.md): a team's quota is reclaimed for it
whatever the other team's priority, idle GPUs are lent and given back, high beats low inside a team,
and an 8-GPU pod is admitted only when one node can hold it (Topology Aware Scheduling)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gpuctl.cluster import path
from gpuctl.domain.workload import WorkloadState, topology_nodes, workload_state
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.test_cli_cluster import _training, gpuctl, pools  # noqa: F401 - fixtures


@pytest.fixture
def quota(tmp_path, gpuctl, kube) -> Iterator[tuple[str, str]]:  # noqa: F811
    """Two teams with 8 GPUs of quota each, no borrowing limit (the cluster has 28 GPUs)."""
    a, b = f"qa-{uuid.uuid4().hex[:6]}", f"qb-{uuid.uuid4().hex[:6]}"
    q = tmp_path / "quota.yaml"
    q.write_text(f"kind: quota\nquota: {{name: q-{a}}}\nnamespace:\n  {a}: {{gpu: 8}}\n  {b}: {{gpu: 8}}\n")
    rc, _, err = gpuctl("create", "-f", str(q))
    assert rc == 0, err
    yield a, b
    gpuctl("delete", "quota", f"q-{a}", "--delete-namespace")
    delete_namespaces(kube, [a, b], 90)


def _submit(gpuctl, tmp_path, name: str, ns: str, gpus: int, priority: str) -> None:  # noqa: F811
    rc, _, err = gpuctl("create", "-f", _training(tmp_path, name, ns, gpus, priority=priority))
    assert rc == 0, err


def _workload(kube, ns: str, job: str) -> dict | None:
    for wl in kube.list(path("Workload", namespace=ns)):
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _state(kube, ns: str, job: str) -> WorkloadState | None:
    return workload_state(_workload(kube, ns, job))


def _running(kube, ns: str, job: str) -> bool:
    return _state(kube, ns, job) == WorkloadState.ADMITTED


def _preempted_reason(kube, ns: str, job: str) -> str:
    wl = _workload(kube, ns, job) or {}
    for c in (wl.get("status") or {}).get("conditions", []):
        if c["type"] == "Preempted" and c["status"] == "True":
            return c["reason"]
    return ""


@pytest.mark.parametrize("a_priority", ["medium", "high"], ids=["equal", "higher"])
def test_team_reclaims_its_quota_from_borrowed_work_of_any_priority(
    pools,  # noqa: F811
    quota,
    gpuctl,  # noqa: F811
    kube,
    tmp_path,
    a_priority,
):
    a, b = quota
    # Idle GPUs are lent: team A (quota 8) runs 16 A100s while team B is idle.
    _submit(gpuctl, tmp_path, "a1", a, 8, a_priority)
    wait_until(lambda: _running(kube, a, "a1"), 60, what="a1 admitted")
    _submit(gpuctl, tmp_path, "a2", a, 8, a_priority)
    wait_until(lambda: _running(kube, a, "a2"), 60, what="a2 admitted (borrowed)")
    # ... and given back: B's medium job inside B's quota takes one of A's jobs' place.
    _submit(gpuctl, tmp_path, "b1", b, 8, "medium")
    wait_until(lambda: _running(kube, b, "b1"), 90, what="b1 admitted by reclaiming its quota")
    reasons = {j: _preempted_reason(kube, a, j) for j in ("a1", "a2")}
    assert sorted(reasons.values()) == ["", "InCohortReclamation"], reasons
    # A keeps its own quota's worth: one job still holds quota.
    assert sorted(_running(kube, a, j) for j in ("a1", "a2")) == [False, True]


def test_over_quota_work_does_not_reclaim_from_a_team_within_its_quota(
    pools,  # noqa: F811
    quota,
    gpuctl,  # noqa: F811
    kube,
    tmp_path,
):
    """B within its quota is not preempted by A's high work once A is beyond its own quota."""
    a, b = quota
    _submit(gpuctl, tmp_path, "b1", b, 8, "low")
    _submit(gpuctl, tmp_path, "a1", a, 8, "low")
    wait_until(lambda: _running(kube, b, "b1") and _running(kube, a, "a1"), 60, what="b1 and a1 admitted")
    _submit(gpuctl, tmp_path, "a2", a, 8, "high")  # training-pool is full; A would be at 16 of 8
    wait_until(lambda: _preempted_reason(kube, a, "a1") == "InClusterQueue", 60, what="a1 preempted by a2")
    wait_until(lambda: _running(kube, a, "a2"), 60, what="a2 admitted in a1's place")
    assert _running(kube, b, "b1") and _preempted_reason(kube, b, "b1") == ""


def test_high_preempts_low_inside_a_team(pools, quota, gpuctl, kube, tmp_path):  # noqa: F811
    a, _ = quota
    _submit(gpuctl, tmp_path, "low1", a, 8, "low")
    _submit(gpuctl, tmp_path, "low2", a, 8, "low")
    wait_until(lambda: _running(kube, a, "low1") and _running(kube, a, "low2"), 60, what="low jobs admitted")
    _submit(gpuctl, tmp_path, "urgent", a, 8, "high")
    wait_until(lambda: _running(kube, a, "urgent"), 90, what="high job admitted")
    reasons = sorted(_preempted_reason(kube, a, j) for j in ("low1", "low2"))
    assert reasons == ["", "InClusterQueue"]


def test_eight_gpu_pod_waits_for_one_free_node(pools, tmp_path, gpuctl, kube):  # noqa: F811
    ns = f"frag-{uuid.uuid4().hex[:6]}"
    q = tmp_path / "quota.yaml"
    q.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 32}}\n")
    rc, _, err = gpuctl("create", "-f", str(q))
    assert rc == 0, err
    try:
        # 4 + 4 + 4 GPUs on two 8-GPU nodes: node placement packs the first two onto one node.
        for j in ("f1", "f2", "f3"):
            _submit(gpuctl, tmp_path, j, ns, 4, "medium")
            wait_until(lambda j=j: _running(kube, ns, j), 60, what=f"{j} admitted")
        nodes = {j: next(iter(topology_nodes(_workload(kube, ns, j)))) for j in ("f1", "f2", "f3")}
        # Free 4 GPUs on the node that holds two jobs: 8 GPUs free in the pool, 4 on each node.
        crowded = next(j for j in ("f1", "f2", "f3") if list(nodes.values()).count(nodes[j]) == 2)
        lonely = next(j for j in ("f1", "f2", "f3") if list(nodes.values()).count(nodes[j]) == 1)
        rc, _, err = gpuctl("delete", "job", crowded, "-n", ns)
        assert rc == 0, err
        wait_until(lambda: _workload(kube, ns, crowded) is None, 60, what=f"{crowded} gone")
        _submit(gpuctl, tmp_path, "big", ns, 8, "medium")
        wl = wait_until(lambda: _workload(kube, ns, "big"), 30, what="Workload of big")
        # Not admitted: quota has room for 8, no node has.
        wait_until(
            lambda: any(
                c["type"] == "QuotaReserved" and c["status"] == "False"
                for c in ((_workload(kube, ns, "big") or {}).get("status") or {}).get("conditions", [])
            ),
            30,
            what="big evaluated",
        )
        assert _state(kube, ns, "big") == WorkloadState.PENDING, wl
        pods = kube.list(path("Pod", namespace=ns), label_selector="job-name=big")
        assert pods == []  # nothing stuck Pending in kube-scheduler
        # One node frees up: admitted.
        rc, _, err = gpuctl("delete", "job", lonely, "-n", ns)
        assert rc == 0, err
        wait_until(lambda: _running(kube, ns, "big"), 60, what="big admitted once a node is free")
    finally:
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        delete_namespaces(kube, [ns], 90)
