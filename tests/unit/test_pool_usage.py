"""A pool's reserved and queued GPUs without a list of every Workload (service.usage, domain.teams).

The integration test test_cli_cluster.test_job_runs_only_on_its_pool_and_waits_for_capacity checks the
same numbers against a real Kueue; these pin the selection logic (which reads happen when)."""

from __future__ import annotations

from typing import Any

from gpuctl.constants import BUDGET_FLAVOR, GPU_RESOURCE, QUOTA_GPU
from gpuctl.domain.pools import gpus_free, gpus_taken
from gpuctl.domain.teams import flavor_reserved, pool_reservations
from gpuctl.service import inventory
from gpuctl.service.inventory import Inventory
from gpuctl.service.usage import PoolUsage


def cq(name: str, reservations: dict[str, dict[str, str]] | None) -> dict:
    out: dict[str, Any] = {"metadata": {"name": name}, "spec": {}}
    if reservations is not None:
        out["status"] = {
            "flavorsReservation": [
                {"name": f, "resources": [{"name": r, "total": t, "borrowed": "0"} for r, t in res.items()]}
                for f, res in reservations.items()
            ]
        }
    return out


def workload(name: str, *, pending: bool, gpus: int = 2, pool: str = "training-pool") -> dict:
    status: dict[str, Any] = {"conditions": []}
    if not pending:
        status["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ]
        status["admission"] = {
            "clusterQueue": "team-a",
            "podSetAssignments": [
                {"name": "main", "flavors": {GPU_RESOURCE: pool}, "resourceUsage": {GPU_RESOURCE: str(gpus)}}
            ],
        }
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": name, "labels": {"runwhere.ai/pool": pool}},
        "spec": {
            "queueName": "team-a",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "resources": {"requests": {GPU_RESOURCE: str(gpus)}}}
                            ]
                        }
                    },
                }
            ],
        },
        "status": status,
    }


class Reader:
    """Objects by kind; records every call (kind, how) so a test can say which reads happened."""

    def __init__(self, objs: dict[str, list[dict]], pending: dict[str, list[dict]] | None):
        self.objs, self.pending, self.calls = objs, pending, []

    def list(self, kind: str, namespace=None, label_selector=None, field_selector=None) -> list[dict]:
        self.calls.append((kind, "list"))
        return self.objs.get(kind, [])

    def get(self, kind: str, name: str, namespace=None) -> dict | None:
        self.calls.append((kind, "get"))
        return next((o for o in self.objs.get(kind, []) if o["metadata"]["name"] == name), None)

    def pending_workloads(self, cluster_queue: str) -> list[dict] | None:
        self.calls.append(("ClusterQueue/" + cluster_queue, "pending"))
        if self.pending is None:
            return None
        return self.pending.get(cluster_queue, [])


def test_pool_reservations_sum_every_cluster_queue_and_skip_the_budget() -> None:
    queues = [
        cq("team-a", {BUDGET_FLAVOR: {QUOTA_GPU: "12"}, "training-pool": {GPU_RESOURCE: "8"}}),
        cq("team-b", {"training-pool": {GPU_RESOURCE: "4"}, "dev-pool": {GPU_RESOURCE: "1"}}),
        cq("foreign", {"training-pool": {GPU_RESOURCE: "2", "cpu": "4"}}),
        cq("new", None),
    ]
    assert pool_reservations(queues) == {"training-pool": 14, "dev-pool": 1}


def test_flavor_reserved_counts_any_resource() -> None:
    queues = [
        cq("a", {"compute-pool": {"cpu": "500m", GPU_RESOURCE: "0"}}),
        cq("b", {"dev-pool": {"cpu": "0"}}),
    ]
    assert flavor_reserved(queues, "compute-pool") is True
    assert flavor_reserved(queues, "dev-pool") is False
    assert flavor_reserved(queues, "training-pool") is False
    assert flavor_reserved([cq("c", None)], "dev-pool") is False


def test_nothing_waiting_reads_no_workload() -> None:
    r = Reader({"ClusterQueue": [cq("team-a", {}), cq("team-b", {})]}, pending={})
    assert Inventory(r).waiting_workloads == []
    assert [c for c in r.calls if c[0] == "Workload"] == []
    assert ("ClusterQueue/team-b", "pending") in r.calls


def test_waiting_workloads_are_fetched_by_name_and_rechecked() -> None:
    waiting, admitted_since = workload("w1", pending=True), workload("w2", pending=False)
    items = [
        {"metadata": {"name": "w1", "namespace": "team-a"}},
        {"metadata": {"name": "w2", "namespace": "team-a"}},
    ]
    r = Reader(
        {
            "ClusterQueue": [cq("team-a", {})],
            "Workload": [waiting, admitted_since, workload("w3", pending=False)],
        },
        pending={"team-a": items},
    )
    assert [w["metadata"]["name"] for w in Inventory(r).waiting_workloads] == ["w1"]
    assert ("Workload", "list") not in r.calls and r.calls.count(("Workload", "get")) == 2


def test_many_waiting_or_no_visibility_lists_every_workload(monkeypatch) -> None:
    wls = [workload(f"w{i}", pending=i % 2 == 0) for i in range(6)]
    items = [{"metadata": {"name": w["metadata"]["name"], "namespace": "team-a"}} for w in wls[::2]]
    for pending in ({"team-a": items}, None):
        r = Reader({"ClusterQueue": [cq("team-a", {})], "Workload": wls}, pending=pending)
        monkeypatch.setattr(inventory, "WAITING_GET_MAX", 2)
        got = [w["metadata"]["name"] for w in Inventory(r).waiting_workloads]
        assert got == ["w0", "w2", "w4"]
        assert ("Workload", "list") in r.calls and ("Workload", "get") not in r.calls


def test_used_and_free_are_one_rule_for_table_json_api_and_metrics() -> None:
    """Pods not yet bound for a reserved job, or a pod outliving its reservation: the larger counts."""
    assert (gpus_taken(4, 8), gpus_taken(8, 4), gpus_free(16, 4, 8), gpus_free(16, 20, 0)) == (8, 8, 8, 0)
    u = PoolUsage(name="p", capacity=16, used=4, reserved=8)
    d = u.as_dict()
    assert (u.taken, u.free, d["gpu_used"], d["gpu_allocated"], d["gpu_reserved"], d["gpu_free"]) == (
        8,
        8,
        8,
        4,
        8,
        8,
    )
