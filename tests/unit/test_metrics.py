"""Metrics of pools, teams and queues from a cache filled by hand (no cluster, no threads)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.constants import BUDGET_FLAVOR, GPU_RESOURCE, METRICS_CLUSTER_LABEL, QUOTA_GPU, Labels
from gpuctl.domain.pools import node_facts, pool_capacities, pool_taint
from gpuctl.server.backstop import Backstop
from gpuctl.server.cache import Cache, trim_node, trim_pod, trim_workload
from gpuctl.server.metrics import (
    ANY_POOL,
    build_registry,
    pod_spec_gpus,
    pod_summary,
    workload_summary,
)
from gpuctl.server.reconciler import Reconciler
from gpuctl.server.wiring import default_cache
from queues import PoolCapacity, PoolGuarantee, TeamQuota, cluster_queue, resource_flavor

T0 = "2026-01-01T00:00:00Z"
T0_EPOCH = 1767225600.0


# ---------------------------------------------------------------------------- object builders
class NoCluster:
    """A cluster that answers every list with nothing and never watches (caches are fed by hand)."""

    def get(self, api_path: str, **query: Any) -> dict:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def get_or_none(self, api_path: str, **query: Any) -> dict | None:
        return None  # serves no optional API (LeaderWorkerSet: gpuctl.server.main.served_controllers)

    def watch(self, api_path: str, **kw: Any) -> Iterator[tuple[str, dict]]:
        return iter(())

    def apply(self, obj: dict) -> dict:
        raise AssertionError("unexpected write")


def node_obj(
    name: str,
    pool: str | None,
    gpus: int = 8,
    *,
    ready: bool = True,
    cordoned: bool = False,
    capacity: int | None = None,
    gpu_type: str = "A100",
    tainted: bool = False,
) -> dict:
    """tainted: the node carries its pool's taint (gpuctl labelled it), else it was labelled by kubectl."""
    cap = str(gpus if capacity is None else capacity)
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": gpu_type}
    if pool:
        labels[Labels.POOL] = pool
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels,
                     "managedFields": [{"manager": "kubelet"}]},
        "spec": {
            **({"unschedulable": True} if cordoned else {}),
            **({"taints": [pool_taint(pool)]} if tainted and pool else {}),
        },
        "status": {
            "capacity": {"cpu": "96", "memory": "1Ti", GPU_RESOURCE: cap},
            "allocatable": {"cpu": "96", "memory": "1Ti", GPU_RESOURCE: str(gpus)},
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2026-01-01T00:05:00Z", "lastTransitionTime": T0, "message": "m"}
            ],
        },
    }  # fmt: skip


def pod_obj(name: str, ns: str, node: str | None, gpus: float, phase: str = "Running") -> dict:
    res = {"cpu": "1", **({GPU_RESOURCE: str(gpus)} if gpus else {})}
    spec: dict = {
        "containers": [{"name": "main", "image": "x", "resources": {"requests": res, "limits": res}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase},
    }


def cond(ctype: str, status: str, reason: str = "", ts: str = T0) -> dict:
    return {"type": ctype, "status": status, "reason": reason, "lastTransitionTime": ts, "message": "m"}


def workload_obj(
    name: str,
    ns: str,
    *,
    gpus: int = 4,
    count: int = 1,
    pool_label: str | None = "training-pool",
    priority: str | None = "low",
    conditions: list[dict] | None = None,
    admitted_pool: str | None = None,
    created: str = T0,
    evictions: int = 0,
    active: bool | None = None,
    owner: str | None = None,
) -> dict:
    """A Workload; `owner`: the kind of its controller ("Job", "JobSet"), None for none."""
    labels = {}
    if pool_label:
        labels[Labels.POOL] = pool_label
    if priority:
        labels[Labels.PRIORITY] = priority
    res = {"cpu": "1", GPU_RESOURCE: str(gpus)}
    wl: dict = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels,
                     "creationTimestamp": created, "resourceVersion": "1"},
        "spec": {
            "queueName": "default",
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                 "name": f"gpuctl-{priority or 'medium'}"},
            "podSets": [{"name": "main", "count": count, "template": {"spec": {
                "containers": [{"name": "main", "resources": {"requests": res, "limits": res}}]}}}],
        },
        "status": {"conditions": conditions or []},
    }  # fmt: skip
    if active is not None:
        wl["spec"]["active"] = active
    if owner:
        api = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2"}[owner]
        ref = {"apiVersion": api, "kind": owner, "name": name, "uid": f"{owner}-{name}", "controller": True}
        wl["metadata"]["ownerReferences"] = [ref]
    if admitted_pool:
        wl["status"]["admission"] = {
            "clusterQueue": ns,
            "podSetAssignments": [{
                "name": "main", "count": count,
                "flavors": {"cpu": admitted_pool, GPU_RESOURCE: admitted_pool, QUOTA_GPU: BUDGET_FLAVOR},
                "resourceUsage": {GPU_RESOURCE: str(gpus * count), QUOTA_GPU: str(gpus * count)},
            }],
        }  # fmt: skip
    if evictions:
        wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "count": evictions}]}
    return wl


def admitted(ts: str = "2026-01-01T00:01:40Z", ready: bool = False) -> list[dict]:
    out = [cond("QuotaReserved", "True", "QuotaReserved", ts), cond("Admitted", "True", "Admitted", ts)]
    out.append(cond("PodsReady", "True" if ready else "False", "Started" if ready else "WaitForStart", ts))
    return out


def preempted(ts: str = "2026-01-01T00:30:00Z") -> list[dict]:
    return [
        cond("QuotaReserved", "False", "Pending", ts),
        cond("Evicted", "True", "Preempted", ts),
        cond("Preempted", "True", "InCohortReclamation", ts),
        cond("Requeued", "True", "Preempted", ts),
    ]


def with_usage(cq: dict, used: dict[str, tuple[int, int]], over_quota: int = 0) -> dict:
    """A team ClusterQueue with Kueue's status: {pool: (total, borrowed)} and budget borrowing."""
    usage = [
        {"name": p, "resources": [{"name": GPU_RESOURCE, "total": str(t), "borrowed": str(b)}]}
        for p, (t, b) in used.items()
    ]
    usage.append(
        {"name": BUDGET_FLAVOR, "resources": [{"name": QUOTA_GPU, "total": "0", "borrowed": str(over_quota)}]}
    )
    return {**cq, "status": {"flavorsReservation": usage}}


def feed(cache: Cache, kind: str, *objs: dict) -> None:
    for o in objs:
        cache[kind].apply_event("ADDED", o)


def scrape(registry) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} from the text exposition (what Prometheus reads)."""
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def val(m: dict, name: str, **labels: str) -> float | None:
    return m.get(name, {}).get(tuple(sorted(labels.items())))


# ---------------------------------------------------------------------------- summaries
def test_pod_gpus_follow_the_scheduler_rules() -> None:
    def c(g: str | None, limits_only: bool = False, **kw: Any) -> dict:
        res = (
            {}
            if g is None
            else ({"limits": {GPU_RESOURCE: g}} if limits_only else {"requests": {GPU_RESOURCE: g}})
        )
        return {"name": "c", "resources": res, **kw}

    assert pod_spec_gpus({"containers": [c("2"), c("1")]}) == 3
    assert pod_spec_gpus({"containers": [c("4", limits_only=True)]}) == 4  # a limit alone sets the request
    assert pod_spec_gpus({"containers": [c(None)]}) == 0
    # A classic init container needing more than the app containers sets the pod's request.
    assert pod_spec_gpus({"containers": [c("1")], "initContainers": [c("2")]}) == 2
    # A sidecar (restartPolicy Always) runs next to the app containers: it adds.
    assert pod_spec_gpus({"containers": [c("1")], "initContainers": [c("1", restartPolicy="Always")]}) == 2


def test_pod_summary_counts_only_bound_unfinished_gpu_pods() -> None:
    assert pod_summary(trim_pod(pod_obj("a", "ns", "n1", 2))) == ("ns", "n1", 2.0)
    assert pod_summary(trim_pod(pod_obj("a", "ns", "n1", 2, phase="Pending"))) == ("ns", "n1", 2.0)
    assert pod_summary(trim_pod(pod_obj("a", "ns", None, 2, phase="Pending"))) is None
    assert pod_summary(trim_pod(pod_obj("a", "ns", "n1", 2, phase="Succeeded"))) is None
    assert pod_summary(trim_pod(pod_obj("a", "ns", "n1", 2, phase="Failed"))) is None
    assert pod_summary(trim_pod(pod_obj("a", "ns", "n1", 0))) is None


def test_node_allocatable_is_the_capacity_the_cohort_gets() -> None:
    """The gauge and the Cohort must agree: both count only Ready, schedulable nodes' allocatable."""
    nodes = [
        node_obj("n1", "p", 8),
        node_obj("n2", "p", 4, ready=False),
        node_obj("n3", "p", 4, cordoned=True),
        node_obj("n4", "p", 2, capacity=4),  # two GPUs failed: allocatable below capacity
        node_obj("n5", "q", 8),
        node_obj("n6", None, 8),
    ]
    trimmed = [trim_node(n) for n in nodes]
    summaries = [node_facts(n) for n in trimmed]
    for pool in ("p", "q"):
        cap = next(c for c in pool_capacities(nodes, ["p", "q"]) if c.name == pool)
        assert sum(s.allocatable_gpus for s in summaries if s.pool == pool) == cap.gpu
        # Trimming keeps everything capacity needs.
        assert pool_capacities(trimmed, [pool]) == pool_capacities(nodes, [pool])
    assert [s.state for s in summaries] == ["ready", "not_ready", "cordoned", "ready", "ready", "ready"]
    assert summaries[3].capacity_gpus == 4 and summaries[3].allocatable_gpus == 2


@pytest.mark.parametrize(
    ("conditions", "kw", "state"),
    [
        ([], {}, "queued"),
        ([cond("QuotaReserved", "False", "Pending")], {}, "queued"),
        (admitted(), {"admitted_pool": "training-pool"}, "admitted"),
        (admitted(ready=True), {"admitted_pool": "training-pool"}, "running"),
        (preempted(), {"evictions": 1}, "preempted"),
        (
            [*admitted(ready=True), cond("Finished", "True", "Succeeded")],
            {"admitted_pool": "training-pool"},
            None,
        ),
        ([], {"active": False}, "inactive"),
    ],
)
def test_workload_state(conditions: list[dict], kw: dict, state: str | None) -> None:
    assert (
        workload_summary(trim_workload(workload_obj("w", "ns", conditions=conditions, **kw))).state == state
    )


def test_workload_pool_priority_and_gpus() -> None:
    w = workload_summary(trim_workload(workload_obj("w", "ns", gpus=2, count=3, priority="high")))
    assert (w.pool, w.priority, w.requested_gpus, w.reserved) == ("training-pool", "high", 6, ())
    assert w.pending_since == T0_EPOCH
    # No pool label: the admitted flavor of nvidia.com/gpu.
    w = workload_summary(trim_workload(workload_obj(
        "w", "ns", pool_label=None, conditions=admitted(), admitted_pool="inference-pool")))  # fmt: skip
    assert w.pool == "inference-pool" and w.reserved == (("inference-pool", 4.0),)
    assert w.reserved_at - w.created == 100
    # Neither: unknown until admitted.
    assert workload_summary(trim_workload(workload_obj("w", "ns", pool_label=None))).pool is None
    # Priority from the WorkloadPriorityClass when the label is missing; anything else is "none".
    wl = workload_obj("w", "ns", priority=None)
    assert workload_summary(trim_workload(wl)).priority == "medium"
    wl["spec"]["priorityClassRef"]["name"] = "someone-elses"
    assert workload_summary(trim_workload(wl)).priority == "none"
    wl["metadata"]["labels"][Labels.PRIORITY] = "urgent!!"
    assert workload_summary(trim_workload(wl)).priority == "none"


def test_preempted_workload_waits_since_its_eviction() -> None:
    w = workload_summary(trim_workload(workload_obj("w", "ns", conditions=preempted(), evictions=2)))
    assert w.pending_since == T0_EPOCH + 1800
    assert (w.preemptions, w.preempt_reason) == (2, "InCohortReclamation")


# ---------------------------------------------------------------------------- the collector
def populated_cache(
    with_reconciler: bool = False, leader: Any = None, with_backstop: bool = False, cluster: str = ""
) -> tuple[Cache, Any]:
    """Two pools, two teams, pods and Workloads in every state (also used by the manifest tests)."""
    cache = default_cache(NoCluster())
    reconciler = Reconciler(NoCluster(), cache, leader=leader) if with_reconciler else None
    backstop = Backstop(NoCluster(), cache, leader=leader) if with_backstop else None
    registry, _, _ = build_registry(
        cache, reconciler, process=False, leader=leader, backstop=backstop, cluster=cluster
    )
    for inf in cache.informers.values():
        inf.relist()  # empty lists: every informer synced, trackers past their first list
    feed(cache, "ResourceFlavor", resource_flavor("training-pool"), resource_flavor("inference-pool"))
    feed(
        cache,
        "Node",
        node_obj("g1", "training-pool", 8, tainted=True),
        node_obj("g2", "training-pool", 8, tainted=True),
        node_obj("g3", "training-pool", 4, ready=False),  # labelled by kubectl: no pool taint
        node_obj("g4", "inference-pool", 4, gpu_type="L4", tainted=True),
        node_obj("cpu", None, 0),
    )
    team_a = TeamQuota("team-a", "q")  # unlimited budget
    team_b = TeamQuota(
        "team-b", "q", gpu=16, borrowing_limit=4, pools={"training-pool": PoolGuarantee(gpu=8)}
    )
    pools = ["training-pool", "inference-pool"]
    feed(
        cache,
        "ClusterQueue",
        with_usage(cluster_queue(team_a, pools), {"training-pool": (12, 12)}, over_quota=0),
        with_usage(cluster_queue(team_b, pools), {"training-pool": (8, 0)}, over_quota=0),
    )
    feed(
        cache,
        "Pod",
        pod_obj("a1", "team-a", "g1", 4),
        pod_obj("a2", "team-a", "g2", 4),
        pod_obj("b1", "team-b", "g1", 4),
        pod_obj("done", "team-a", "g2", 4, phase="Succeeded"),
        pod_obj("x", "other", "g4", 1),  # not a team: counts for the pool, not for a team
        pod_obj("pending", "team-a", None, 8, phase="Pending"),
    )
    feed(
        cache,
        "Workload",
        workload_obj("a1", "team-a", conditions=admitted(ready=True), admitted_pool="training-pool"),
        workload_obj("a2", "team-a", conditions=admitted(ready=True), admitted_pool="training-pool"),
        workload_obj("a3", "team-a", conditions=admitted(), admitted_pool="training-pool"),
        workload_obj(
            "b1", "team-b", priority="high", gpus=8, conditions=admitted(), admitted_pool="training-pool"
        ),
        workload_obj("a4", "team-a", conditions=preempted(), evictions=1),
        workload_obj("a5", "team-a", created="2026-01-01T00:10:00Z"),
        workload_obj("a6", "team-a", pool_label=None, priority="medium", gpus=2),
        workload_obj(
            "a7",
            "team-a",
            conditions=[*admitted(ready=True), cond("Finished", "True")],
            admitted_pool="training-pool",
        ),
    )
    return cache, registry


@pytest.fixture
def populated() -> tuple[Cache, Any]:
    return populated_cache()


def test_pool_gauges(populated) -> None:
    _, registry = populated
    m = scrape(registry)
    tp = {"pool": "training-pool"}
    assert val(m, "gpuctl_pool_capacity_gpus", **tp) == 20
    assert val(m, "gpuctl_pool_allocatable_gpus", **tp) == 16  # g3 NotReady
    assert val(m, "gpuctl_pool_allocated_gpus", **tp) == 12  # a1, a2, b1 (done and unbound excluded)
    assert val(m, "gpuctl_pool_reserved_gpus", **tp) == 4 + 4 + 4 + 8
    assert val(m, "gpuctl_pool_free_gpus", **tp) == 0  # 16 - max(20, 12), floored
    assert val(m, "gpuctl_pool_allocated_gpus", pool="inference-pool") == 1
    assert val(m, "gpuctl_pool_free_gpus", pool="inference-pool") == 3
    assert val(m, "gpuctl_pool_requested_gpus", pool="training-pool", priority="low") == 8  # a4 + a5
    assert val(m, "gpuctl_pool_requested_gpus", pool=ANY_POOL, priority="medium") == 2  # a6: pool not chosen
    assert val(m, "gpuctl_pool_requested_gpus", pool="inference-pool", priority="high") == 0
    assert val(m, "gpuctl_pool_nodes", pool="training-pool", state="ready") == 2
    assert val(m, "gpuctl_pool_nodes", pool="training-pool", state="not_ready") == 1
    assert val(m, "gpuctl_pool_nodes", pool="inference-pool", state="cordoned") == 0
    assert val(m, "gpuctl_pool_untainted_nodes", **tp) == 1  # g3
    assert val(m, "gpuctl_pool_untainted_nodes", pool="inference-pool") == 0
    assert val(m, "gpuctl_pool_info", pool="inference-pool", flavor="inference-pool", gpu_type="L4",
               registered="true") == 1  # fmt: skip
    # Nodes outside any pool are not a pool.
    assert {dict(k)["pool"] for k in m["gpuctl_pool_info"]} == {"training-pool", "inference-pool"}


def test_workload_and_queue_gauges(populated) -> None:
    _, registry = populated
    m = scrape(registry)
    base = {"namespace": "team-a", "pool": "training-pool", "priority": "low"}
    assert val(m, "gpuctl_workloads", **base, state="running") == 2
    assert val(m, "gpuctl_workloads", **base, state="admitted") == 1
    assert val(m, "gpuctl_workloads", **base, state="preempted") == 1
    assert val(m, "gpuctl_workloads", **base, state="queued") == 1
    assert (
        val(m, "gpuctl_workloads", namespace="team-a", pool=ANY_POOL, priority="medium", state="queued") == 1
    )
    assert val(m, "gpuctl_workloads", namespace="team-b", pool="training-pool", priority="high",
               state="admitted") == 1  # fmt: skip
    # Finished Workloads are not counted anywhere.
    assert sum(m["gpuctl_workloads"].values()) == 7
    # Oldest pending low work in training-pool: a5, created 10 minutes after a4's creation but a4 was
    # requeued at 00:30, so a5 (00:10) is the oldest.
    oldest = val(m, "gpuctl_queue_oldest_pending_seconds", pool="training-pool", priority="low")
    assert oldest == pytest.approx(time.time() - (T0_EPOCH + 600), abs=5)


def test_team_gauges(populated) -> None:
    _, registry = populated
    m = scrape(registry)
    assert (
        val(
            m,
            "gpuctl_team_info",
            namespace="team-b",
            cluster_queue="team-b",
            local_queue="default",
            quota="q",
        )
        == 1
    )
    assert val(m, "gpuctl_team_quota_gpus", namespace="team-b") == 16
    assert val(m, "gpuctl_team_quota_gpus", namespace="team-a") is None  # unlimited: no series
    assert val(m, "gpuctl_team_borrowing_limit_gpus", namespace="team-b") == 4
    assert val(m, "gpuctl_team_guaranteed_gpus", namespace="team-b", pool="training-pool") == 8
    assert val(m, "gpuctl_team_guaranteed_gpus", namespace="team-a", pool="training-pool") == 0
    assert val(m, "gpuctl_team_used_gpus", namespace="team-a", pool="training-pool") == 12
    assert val(m, "gpuctl_team_borrowed_gpus", namespace="team-a", pool="training-pool") == 12
    assert val(m, "gpuctl_team_borrowed_gpus", namespace="team-b", pool="training-pool") == 0
    assert val(m, "gpuctl_team_over_quota_gpus", namespace="team-a") == 0
    assert val(m, "gpuctl_team_allocated_gpus", namespace="team-a", pool="training-pool") == 8
    assert val(m, "gpuctl_team_allocated_gpus", namespace="team-b", pool="training-pool") == 4
    assert not any(dict(k).get("namespace") == "other" for k in m["gpuctl_team_allocated_gpus"])


def test_wait_histogram_and_preemption_counter(populated) -> None:
    cache, registry = populated
    m = scrape(registry)
    # a1, a2, a3 (low) and b1 (high) seen holding quota, each waited 100 s; a7 arrived finished (history,
    # not observed).
    assert val(m, "gpuctl_queue_wait_seconds_count", pool="training-pool", priority="low") == 3
    assert val(m, "gpuctl_queue_wait_seconds_sum", pool="training-pool", priority="low") == 300
    assert val(m, "gpuctl_queue_wait_seconds_bucket", pool="training-pool", priority="high", le="60.0") == 0
    assert val(m, "gpuctl_queue_wait_seconds_bucket", pool="training-pool", priority="high", le="120.0") == 1
    pre = {"namespace": "team-a", "pool": "training-pool", "priority": "low", "reason": "InCohortReclamation"}
    assert val(m, "gpuctl_workload_preemptions_total", **pre) == 1

    wl = cache["Workload"]
    # A later update of an admitted Workload is not observed again.
    wl.apply_event("MODIFIED", workload_obj("a1", "team-a", conditions=admitted(ready=True),
                                            admitted_pool="training-pool"))  # fmt: skip
    # a2 is preempted (its first eviction), a4 a second time.
    wl.apply_event("MODIFIED", workload_obj("a2", "team-a", conditions=preempted(), evictions=1))
    wl.apply_event("MODIFIED", workload_obj("a4", "team-a", conditions=preempted(), evictions=2))
    m = scrape(registry)
    assert val(m, "gpuctl_queue_wait_seconds_count", pool="training-pool", priority="low") == 3
    assert val(m, "gpuctl_workload_preemptions_total", **pre) == 3
    # Re-admitted after preemption: the UID was observed already.
    wl.apply_event("MODIFIED", workload_obj("a2", "team-a", conditions=admitted("2026-01-01T01:00:00Z"),
                                            admitted_pool="training-pool", evictions=1))  # fmt: skip
    assert val(scrape(registry), "gpuctl_queue_wait_seconds_count", pool="training-pool", priority="low") == 3
    # Deleted and recreated under a new UID: a new Workload, observed.
    wl.apply_event("DELETED", workload_obj("a1", "team-a"))
    new = workload_obj("a1", "team-a", conditions=admitted(), admitted_pool="training-pool")
    new["metadata"]["uid"] = "uid-a1-again"
    wl.apply_event("ADDED", new)
    assert val(scrape(registry), "gpuctl_queue_wait_seconds_count", pool="training-pool", priority="low") == 4


def test_preemptions_before_the_first_list_are_not_counted() -> None:
    class Listing(NoCluster):
        def get(self, api_path: str, **query: Any) -> dict:
            items = []
            if "workloads" in api_path:
                items = [workload_obj("old", "team-a", conditions=preempted(), evictions=3)]
            return {"items": items, "metadata": {"resourceVersion": "5"}}

    cache = default_cache(Listing())
    registry, _, _ = build_registry(cache, process=False)
    for inf in cache.informers.values():
        inf.relist()
    assert "gpuctl_workload_preemptions_total" not in scrape(registry)
    cache["Workload"].apply_event(
        "MODIFIED", workload_obj("old", "team-a", conditions=preempted(), evictions=4)
    )
    m = scrape(registry)
    assert sum(m["gpuctl_workload_preemptions_total"].values()) == 1


def test_labels_are_bounded(populated) -> None:
    """No pod, job or Workload name ever becomes a label value, nor a node name outside
    gpuctl_node_pool_info (one series per pool node); pools are known pools or *."""
    cache, registry = populated
    cache["Workload"].apply_event("ADDED", workload_obj("typo", "team-a", pool_label="no-such-pool"))
    m = scrape(registry)
    allowed = {"pool", "namespace", "priority", "state", "gpu_type", "flavor", "registered", "cluster_queue",
               "local_queue", "quota", "resource", "result", "reason", "le", "version"}  # fmt: skip
    names = {"a1", "a2", "b1", "g1", "g2", "g3", "g4", "typo", "uid-a1", "done", "x"}
    for sample, series in m.items():
        if not sample.startswith("gpuctl_"):
            continue
        if sample == "gpuctl_node_pool_info":
            nodes = {dict(k)["node"]: dict(k)["pool"] for k in series}
            assert nodes == {
                "g1": "training-pool",
                "g2": "training-pool",
                "g3": "training-pool",
                "g4": "inference-pool",
            }
            continue
        for labels in series:
            for k, v in labels:
                assert k in allowed, (sample, k)
                assert v not in names, (sample, k, v)
    pools = {dict(k)["pool"] for k in m["gpuctl_workloads"]}
    assert pools == {"training-pool", ANY_POOL}


def test_health_metrics_and_values_are_finite(populated) -> None:
    _, registry = populated
    m = scrape(registry)
    assert val(m, "gpuctl_cache_synced", resource="Pod") == 1
    assert val(m, "gpuctl_cache_objects", resource="Pod") == 6
    assert val(m, "gpuctl_cache_events_total", resource="Node") == 5
    assert val(m, "gpuctl_build_info", version=__import__("gpuctl").__version__) == 1
    assert val(m, "gpuctl_collect_duration_seconds") > 0
    for sample, series in m.items():
        for v in series.values():
            assert math.isfinite(v), sample


def test_empty_cluster_exports_no_pool_series() -> None:
    cache = default_cache(NoCluster())
    registry, _, _ = build_registry(cache, process=False)
    m = scrape(registry)
    assert "gpuctl_pool_allocatable_gpus" not in m
    assert val(m, "gpuctl_cache_synced", resource="Node") == 0


def test_a_node_labelled_into_an_unregistered_pool_is_shown() -> None:
    cache = default_cache(NoCluster())
    registry, _, _ = build_registry(cache, process=False)
    feed(cache, "Node", node_obj("n", "not-a-flavor", 8))
    m = scrape(registry)
    assert val(m, "gpuctl_pool_info", pool="not-a-flavor", flavor="not-a-flavor", gpu_type="A100",
               registered="false") == 1  # fmt: skip
    assert val(m, "gpuctl_pool_allocatable_gpus", pool="not-a-flavor") == 8


def test_a_gang_counts_its_gpus_once_per_pod_and_a_waiting_gang_is_shown() -> None:
    """A 2-pod x 8-GPU gang (one Workload, pod set count 2): reserved and allocated 16 each, not 8 or 32;
    a second one waiting counts 1 gang and 16 GPUs asked in its pool (issue 31, docs/distributed.md)."""
    cache = default_cache(NoCluster())
    registry, _, _ = build_registry(cache, process=False)
    for inf in cache.informers.values():
        inf.relist()
    feed(cache, "ResourceFlavor", resource_flavor("training-pool"), resource_flavor("inference-pool"))
    feed(cache, "Node", *(node_obj(f"g{i}", "training-pool", 8, tainted=True) for i in (1, 2, 3)))
    feed(cache, "Node", node_obj("g4", "inference-pool", 4, tainted=True))
    feed(cache, "Pod", pod_obj("run-0", "team-a", "g1", 8), pod_obj("run-1", "team-a", "g2", 8))
    feed(
        cache,
        "Workload",
        workload_obj("run", "team-a", gpus=8, count=2, conditions=admitted(ready=True),
                     admitted_pool="training-pool", owner="Job"),
        workload_obj("wait", "team-a", gpus=8, count=2, owner="Job"),
        workload_obj("solo", "team-a", gpus=8, owner="Job"),  # one pod waiting: queued demand, not a gang
        workload_obj("where", "team-a", gpus=4, count=3, pool_label=None, owner="Job"),  # pool not chosen
        # A JobSet's Workload of one replicated job of 2 pods: demand, not a gang (gpuctl.domain.gang).
        workload_obj("set", "team-a", gpus=8, count=2, owner="JobSet"),
    )  # fmt: skip
    m = scrape(registry)
    tp = {"pool": "training-pool"}
    assert val(m, "gpuctl_pool_reserved_gpus", **tp) == 16
    assert val(m, "gpuctl_pool_allocated_gpus", **tp) == 16
    assert val(m, "gpuctl_pool_requested_gpus", **tp, priority="low") == 40
    assert val(m, "gpuctl_pool_waiting_gangs", **tp) == 1
    assert val(m, "gpuctl_pool_waiting_gang_gpus", **tp) == 16
    assert val(m, "gpuctl_pool_waiting_gangs", pool="inference-pool") == 0
    assert val(m, "gpuctl_pool_waiting_gang_gpus", pool="inference-pool") == 0
    assert val(m, "gpuctl_pool_waiting_gangs", pool=ANY_POOL) == 1
    assert val(m, "gpuctl_pool_waiting_gang_gpus", pool=ANY_POOL) == 12


def test_pool_capacity_helper_is_unchanged() -> None:
    """PoolCapacity of the queues model still matches what the metrics sum (guards a refactor)."""
    assert pool_capacities([node_obj("n", "p", 8)], ["p"])[0] == PoolCapacity(
        "p", 8, "96", "1099511627776", ("n",)
    )


def test_incremental_pod_gpus_equal_a_recount() -> None:
    """Random adds, moves, phase changes, re-lists and deletes: the running sums always equal a recount."""
    import random

    from gpuctl.server.metrics import PodGpus

    rng = random.Random(7)
    agg = PodGpus()
    live: dict[str, dict] = {}
    for step in range(3000):
        name = f"p{rng.randrange(60)}"
        ns = f"ns{rng.randrange(3)}"
        key = f"{ns}/{name}"
        old = live.get(key)
        if old is not None and rng.random() < 0.25:
            agg.handle("DELETED", old, None)
            del live[key]
            continue
        node = rng.choice([None, "n1", "n2", "n3"])
        phase = rng.choice(["Pending", "Running", "Running", "Succeeded", "Failed"])
        new = trim_pod(pod_obj(name, ns, node, rng.choice([0, 1, 2, 8]), phase))
        agg.handle("MODIFIED" if old else "ADDED", old, new)
        live[key] = new
        if step % 500 == 0:
            expected: dict[str, dict[str, float]] = {}
            for p in live.values():
                info = pod_summary(p)
                if info:
                    expected.setdefault(info.node, {}).setdefault(info.namespace, 0.0)
                    expected[info.node][info.namespace] += info.gpus
            assert agg.by_node() == expected
    for p in list(live.values()):
        agg.handle("DELETED", p, None)
    assert agg.by_node() == {}


# ---------------------------------------------------------------------------- replicas
def test_only_the_leader_exports_cluster_state_so_two_replicas_do_not_double() -> None:
    state = {"leading": True}
    _, registry = populated_cache(with_reconciler=True, leader=lambda: state["leading"])
    leader = scrape(registry)
    state["leading"] = False
    follower = scrape(registry)
    cluster = {
        n for n in leader if n.startswith(("gpuctl_pool_", "gpuctl_team_", "gpuctl_workload", "gpuctl_queue"))
    }
    assert cluster, sorted(leader)
    assert not cluster & set(follower), sorted(cluster & set(follower))
    assert val(leader, "gpuctl_serve_leader") == 1 and val(follower, "gpuctl_serve_leader") == 0
    # Each replica still reports itself: its cache and its reconciler (which stands by).
    for name in ("gpuctl_cache_synced", "gpuctl_reconcile_runs_total", "gpuctl_build_info"):
        assert name in follower, name
    # Summed over both replicas, every cluster series equals the leader's alone.
    for name in cluster:
        assert {k: v for k, v in leader[name].items()} == {
            k: leader[name].get(k, 0) + follower.get(name, {}).get(k, 0) for k in leader[name]
        }


def test_without_leader_election_everything_is_exported_and_the_replica_leads() -> None:
    """One replica without an election is the leader: gpuctl_serve_leader 1, so sum() is 1 either way."""
    _, registry = populated_cache(with_reconciler=True)
    m = scrape(registry)
    assert m["gpuctl_serve_leader"] == {(): 1.0} and any(n.startswith("gpuctl_pool_") for n in m)


# ---------------------------------------------------------------------------- several clusters
def _without_cluster(m: dict[str, dict[tuple, float]]) -> dict[str, set[tuple]]:
    return {
        n: {tuple(kv for kv in k if kv[0] != METRICS_CLUSTER_LABEL) for k in series}
        for n, series in m.items()
    }


def test_with_a_cluster_name_every_series_carries_it_and_nothing_else_changes() -> None:
    """--cluster eu-west: the same series as without, each with cluster="eu-west", the same values; the
    event-driven series (histogram, preemption counter) and the reconciler's and backstop's too."""
    kw: dict[str, Any] = {"with_reconciler": True, "with_backstop": True}
    _, plain_registry = populated_cache(**kw)
    _, registry = populated_cache(**kw, cluster="eu-west")
    plain, labelled = scrape(plain_registry), scrape(registry)
    assert not [n for n, series in plain.items() for k in series if METRICS_CLUSTER_LABEL in dict(k)]
    assert {n for n in labelled if n.startswith("gpuctl_queue_wait_seconds")}
    assert "gpuctl_workload_preemptions_total" in labelled and "gpuctl_reconcile_runs_total" in labelled
    for n, series in labelled.items():
        assert all(dict(k).get(METRICS_CLUSTER_LABEL) == "eu-west" for k in series), n
    assert _without_cluster(labelled) == _without_cluster(plain)
    assert val(labelled, "gpuctl_pool_capacity_gpus", pool="training-pool", cluster="eu-west") == val(
        plain, "gpuctl_pool_capacity_gpus", pool="training-pool"
    )
    for n in ("gpuctl_workload_preemptions_total", "gpuctl_queue_wait_seconds_count", "gpuctl_workloads"):
        assert labelled[n] == {
            tuple(sorted((*k, (METRICS_CLUSTER_LABEL, "eu-west")))): v for k, v in plain[n].items()
        }
