"""gpuctl.domain.explain: the blocking reason of a waiting job from the cluster state."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from gpuctl.constants import BUDGET_FLAVOR, GPU_UNITS, PRIORITY_VALUE, QUOTA_GPU, Priority
from gpuctl.domain import explain as ex
from gpuctl.domain.teams import pool_reservations
from gpuctl.domain.workload import topology_nodes
from queues import PoolCapacity, TeamQuota, cluster_queue, cohort

_uid = itertools.count()
POOL = "training-pool"


def node(n: str, gpus: int = 8, pool: str = POOL) -> dict:
    return {
        "metadata": {"name": n, "labels": {"runwhere.ai/pool": pool}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


NODES = [node("gpu-node-1"), node("gpu-node-2")]


def wl(
    ns: str,
    job: str,
    gpus: int,
    *,
    pods: int = 1,
    priority: str = "medium",
    on: dict[str, int] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> dict:
    """A Workload; `on` = node -> pods placed there (admitted), else waiting."""
    w: dict = {
        "metadata": {
            "name": f"job-{job}",
            "namespace": ns,
            "uid": f"u{next(_uid)}",
            "creationTimestamp": created,
            "labels": {"runwhere.ai/pool": POOL, "runwhere.ai/priority": priority},
            "ownerReferences": [{"kind": "Job", "name": job}],
        },
        "spec": {
            "priority": PRIORITY_VALUE[Priority(priority)],
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "spec": {
                            "containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]
                        }
                    },
                }
            ],
        },
        "status": {"conditions": []},
    }
    if on:
        w["status"]["conditions"] = [
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"},
        ]
        w["status"]["admission"] = {
            "clusterQueue": ns,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": POOL},
                    "count": pods,
                    "topologyAssignment": {
                        "levels": ["kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": len(on),
                                "valuesPerLevel": [
                                    {"individual": {"prefix": "gpu-node-", "roots": [n[-1] for n in on]}}
                                ],
                                "podCounts": {"individual": list(on.values())},
                            }
                        ],
                    },
                }
            ],
        }
    return w


def state(teams: list[TeamQuota]) -> dict:
    pools = [PoolCapacity(POOL, gpu=16, cpu="192", memory="2Ti")]
    return {
        "nodes": NODES,
        "pods": [],
        "cluster_queues": [cluster_queue(t, [POOL]) for t in teams],
        "cohort": cohort(pools, teams),
    }


A, B = TeamQuota("team-a", "q", gpu=8), TeamQuota("team-b", "q", gpu=8)


def demand(ns: str, gpus: int, pods: int = 1, priority: str = "medium") -> ex.Demand:
    return ex.Demand(ns, POOL, pods, gpus, PRIORITY_VALUE[Priority(priority)], label=f"{ns}/new")


def test_topology_nodes_decodes_individual_and_universal_slices() -> None:
    w = wl("team-a", "x", 4, pods=3, on={"gpu-node-1": 2, "gpu-node-2": 1})
    assert topology_nodes(w) == {"gpu-node-1": 2, "gpu-node-2": 1}
    w["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"] = [
        {"domainCount": 1, "valuesPerLevel": [{"universal": "gpu-node-2"}], "podCounts": {"universal": 2}}
    ]
    assert topology_nodes(w) == {"gpu-node-2": 2}
    assert topology_nodes(wl("team-a", "y", 1)) == {}


def test_free_node_starts_now() -> None:
    v = ex.blocking_reason(demand("team-a", 8), workloads=[], **state([A, B]))
    assert (v.starts, v.cause, v.position) == (True, "", 1)
    assert v.summary(POOL) == "would start now on pool training-pool"


def test_fragmented_capacity_names_the_largest_free_node() -> None:
    wls = [wl("team-a", "a1", 4, on={"gpu-node-1": 1}), wl("team-b", "b1", 4, on={"gpu-node-2": 1})]
    v = ex.blocking_reason(demand("team-a", 8, priority="low"), workloads=wls, **state([A, B]))
    assert (v.starts, v.cause) == (False, "fragmentation")
    assert v.message == (
        "no node in training-pool has 8 free GPUs (largest free: 4 on gpu-node-1); 8 free in all"
    )


def test_pool_full_of_work_within_quota_is_capacity() -> None:
    wls = [wl("team-a", "a1", 8, on={"gpu-node-1": 1}), wl("team-b", "b1", 8, on={"gpu-node-2": 1})]
    v = ex.blocking_reason(demand("team-a", 4), workloads=wls, **state([A, B]))
    assert (v.starts, v.cause) == (False, "quota")  # team-a is at 8 of 8 and nothing idle to borrow
    v = ex.blocking_reason(demand("team-a", 4, priority="high"), workloads=wls, **state([A, B]))
    assert (v.starts, v.preempts) == (True, ("team-a/a1",))  # its own medium job makes room
    c = TeamQuota("team-c", "q", gpu=8)
    v = ex.blocking_reason(demand("team-c", 4, priority="high"), workloads=wls, **state([A, B, c]))
    assert (v.starts, v.cause) == (False, "capacity")
    assert v.message.startswith("training-pool has 0 of 16 GPUs free, this job needs 4")


@pytest.mark.parametrize("other", ["low", "medium", "high"])
def test_within_quota_reclaims_over_quota_work_of_any_priority(other: str) -> None:
    wls = [
        wl("team-a", "a1", 8, priority=other, on={"gpu-node-1": 1}),
        wl("team-a", "a2", 8, priority=other, on={"gpu-node-2": 1}),
    ]
    v = ex.blocking_reason(demand("team-b", 8, priority="low"), workloads=wls, **state([A, B]))
    assert (v.starts, v.cause, len(v.preempts)) == (True, "preemption", 1)
    assert v.summary(POOL).startswith("would start now on pool training-pool after preempting team-a/a")


def test_reclaim_stops_once_the_other_team_is_back_within_its_quota() -> None:
    # team-a (quota 12) holds 16: 4 beyond. Kueue re-checks after every victim (candidateIsValid): once a1
    # is gone team-a is within its quota and a3 is no candidate, so an 8-GPU job of team-b cannot start.
    wls = [
        wl("team-a", "a1", 4, priority="low", on={"gpu-node-1": 1}),
        wl("team-a", "a3", 4, priority="low", on={"gpu-node-1": 1}),
        wl("team-a", "a2", 8, on={"gpu-node-2": 1}),
    ]
    v = ex.blocking_reason(demand("team-b", 8), workloads=wls, **state([TeamQuota("team-a", "q", gpu=12), B]))
    assert (v.starts, v.cause, v.preempts) == (False, "capacity", ())


def test_reclaim_keeps_the_victims_it_does_not_need() -> None:
    # a1 (low) comes first and frees only 2 GPUs of a full node; a2 frees a whole node: Kueue's fill-back
    # gives a1 back, the job preempts a2 alone.
    wls = [
        wl("team-a", "a1", 2, priority="low", on={"gpu-node-1": 1}),
        wl("team-a", "a2", 8, on={"gpu-node-2": 1}),
        wl("team-b", "b1", 6, on={"gpu-node-1": 1}),
    ]
    teams = [TeamQuota("team-a", "q", gpu=4), TeamQuota("team-b", "q", gpu=12)]
    v = ex.blocking_reason(demand("team-b", 6), workloads=wls, **state(teams))
    assert (v.starts, v.cause, v.preempts) == (True, "preemption", ("team-a/a2",))


def test_over_quota_high_does_not_take_from_a_team_within_its_quota() -> None:
    wls = [
        wl("team-a", "a1", 8, priority="low", on={"gpu-node-1": 1}),
        wl("team-b", "b1", 8, on={"gpu-node-2": 1}),
    ]
    big = TeamQuota("team-a", "q", gpu=8)
    v = ex.blocking_reason(demand("team-a", 8, priority="high"), workloads=wls, **state([big, B]))
    # its own low job is preempted (InClusterQueue), never team-b's
    assert (v.starts, v.preempts) == (True, ("team-a/a1",))


def test_borrowing_limit_is_a_quota_reason() -> None:
    capped = TeamQuota("team-a", "q", gpu=8, borrowing_limit=0)
    wls = [wl("team-a", "a1", 8, on={"gpu-node-1": 1})]
    v = ex.blocking_reason(demand("team-a", 4), workloads=wls, **state([capped, B]))
    assert (v.starts, v.cause) == (False, "quota")
    assert v.message == "team-a uses 8 of its 8 GPUs and may borrow 0; this job needs 4"


def test_a_team_borrowing_all_it_may_is_not_told_it_may_borrow_more() -> None:
    """Issue 42: "uses 16 of its 8 GPUs and may borrow 8" read as 8 more to borrow when 0 more may be."""
    lend = TeamQuota("team-a", "q", gpu=8, borrowing_limit=8)
    wls = [wl("team-a", "a1", 8, on={"gpu-node-1": 1}), wl("team-a", "a2", 8, on={"gpu-node-2": 1})]
    v = ex.blocking_reason(demand("team-a", 4), workloads=wls, **state([lend, B]))
    assert (v.starts, v.cause) == (False, "quota")
    assert (
        v.message
        == "team-a uses 16 of its 8 GPUs and borrows 8 of the 8 it may borrow (0 more); this job needs 4"
    )
    half = [wl("team-a", "a1", 8, on={"gpu-node-1": 1}), wl("team-a", "a2", 4, on={"gpu-node-2": 1})]
    v = ex.blocking_reason(demand("team-a", 6), workloads=half, **state([lend, B]))
    assert (
        v.message
        == "team-a uses 12 of its 8 GPUs and borrows 4 of the 8 it may borrow (4 more); this job needs 6"
    )


def test_jobs_ahead_in_the_team_queue_take_the_room_first() -> None:
    wls = [
        wl("team-a", "a1", 8, on={"gpu-node-1": 1}),
        wl("team-a", "first", 8, priority="high"),
    ]
    big = TeamQuota("team-a", "q", gpu=24)
    v = ex.blocking_reason(demand("team-a", 8), workloads=wls, **state([big, B]))
    assert (v.starts, v.cause, v.position, v.ahead) == (False, "priority", 2, ("team-a/first",))
    assert v.summary(POOL) == (
        "would wait: position 2 behind team-a/first, because team-a/first (ahead in team-a's queue) "
        "take the free GPUs of training-pool first"
    )


def test_pool_without_nodes_and_pods_bigger_than_any_node() -> None:
    v = ex.blocking_reason(ex.Demand("team-a", "empty-pool", 1, 1, 0), workloads=[], **state([A, B]))
    assert (v.starts, v.cause) == (False, "no-nodes")
    v = ex.blocking_reason(demand("team-a", 16), workloads=[], **state([TeamQuota("team-a", "q"), B]))
    assert (v.starts, v.cause) == (False, "capacity")
    assert v.message.startswith("no node in training-pool has 16 GPUs (largest: 8)")


def test_the_job_itself_is_not_counted_against_itself() -> None:
    own = wl("team-a", "own", 8)
    d = ex.workload_demand(own)
    assert (d.pods, d.gpus, d.pool, d.label) == (1, 8, POOL, "team-a/own")
    v = ex.blocking_reason(d, workloads=[own], **state([A, B]))
    assert (v.starts, v.position) == (True, 1)


def test_a_pod_larger_than_every_node_on_cpu_or_memory_says_so() -> None:
    # The REASON used to read "being admitted": GPUs fit, but no node can ever hold the pod's CPUs.
    big_cpu = wl("team-a", "cpu", 1)
    big_cpu["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "30k"
    d = ex.workload_demand(big_cpu)
    assert (d.gpus, d.cpu) == (1, 30000)
    v = ex.blocking_reason(d, workloads=[big_cpu], **state([A, B]))
    assert (v.starts, v.cause) == (False, "capacity")
    assert v.message == (
        "no node in training-pool has 30000 CPUs for one pod (largest: 96); "
        "lower resources.cpu or add bigger nodes"
    )
    # memory, from a limit only and an init container's peak, printed in binary units
    spec = {
        "containers": [{"name": "m", "resources": {"limits": {"memory": "1536Gi"}}}],
        "initContainers": [{"name": "i", "resources": {"requests": {"memory": "2Ti", "cpu": "500m"}}}],
    }
    d = ex.demand_of_pod_template(
        "team-a", {"spec": {**spec, "nodeSelector": {"runwhere.ai/pool": POOL}}}, 1, 0
    )
    assert (d.memory, d.cpu) == (2 * 2**40, 0.5)
    v = ex.blocking_reason(d, workloads=[], **state([A, B]))
    assert v.message.startswith("no node in training-pool has 2Ti memory for one pod (largest: 1Ti)")
    # just fitting is fine
    spec["initContainers"][0]["resources"]["requests"] = {"memory": "1Ti", "cpu": "96"}
    spec["containers"][0]["resources"]["limits"]["memory"] = "512Gi"
    d = ex.demand_of_pod_template(
        "team-a", {"spec": {**spec, "nodeSelector": {"runwhere.ai/pool": POOL}}}, 1, 0
    )
    assert ex.blocking_reason(d, workloads=[], **state([A, B])).starts


def pod(ns: str, name: str, gpus: int, *, node: str = "", job: str = "", priority: str = "medium") -> dict:
    """A pod of a Job (`job`) or of a Deployment's ReplicaSet; bound to `node`, else gated by Kueue."""
    owner = {"kind": "Job", "name": job} if job else {"kind": "ReplicaSet", "name": "rs"}
    spec: dict = {
        "containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        "nodeSelector": {"runwhere.ai/pool": POOL},
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"p{next(_uid)}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kueue.x-k8s.io/priority-class": f"gpuctl-{priority}"},
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_pods_alone_tell_who_holds_which_node_without_any_workload() -> None:
    # Listing every Workload costs more than listing every pod: bound pods say who holds what.
    st = {**state([A, B]), "pods": [
        pod("team-a", "a1-x", 4, node="gpu-node-1", job="a1"),
        pod("team-a", "a1-y", 4, node="gpu-node-1", job="a1"),
        pod("team-a", "a2-x", 8, node="gpu-node-2", job="a2", priority="low"),
        pod("team-a", "done", 8, node="gpu-node-2", job="old") | {"status": {"phase": "Succeeded"}},
    ]}  # fmt: skip
    v = ex.blocking_reason(demand("team-b", 8, priority="low"), workloads=[], **st)
    # team-a holds 16 of its 8: team-b within quota takes one whole job back, the lower-priority one
    assert (v.starts, v.cause, v.preempts) == (True, "preemption", ("team-a/a2",))
    a1 = next(h for h in ex.Snapshot.build(workloads=[], **st).holders if h.label == "team-a/a1")
    assert (a1.gpus, a1.nodes, a1.priority, a1.pool) == (8, {"gpu-node-1": 8}, 500_000, POOL)
    # Kueue's own count (ClusterQueue status) decides a team's use when it is there.
    cqs = [dict(cq) for cq in st["cluster_queues"]]
    for cq in cqs:
        reserved = str(8 * GPU_UNITS) if cq["metadata"]["name"] == "team-a" else "0"
        cq["status"] = {
            "flavorsReservation": [
                {"name": "quota-gpu", "resources": [{"name": QUOTA_GPU, "total": reserved}]}
            ]
        }
    v = ex.blocking_reason(demand("team-b", 8, priority="low"), workloads=[], **{**st, "cluster_queues": cqs})
    assert (v.starts, v.cause) == (False, "capacity")  # team-a within its quota: nothing to take back


def test_gated_pods_queue_ahead_of_later_work_of_their_team() -> None:
    st = {**state([TeamQuota("team-a", "q", gpu=24), B]), "pods": [
        pod("team-a", "a1-x", 8, node="gpu-node-1", job="a1"),
        pod("team-a", "web-1", 8, priority="high"),
    ]}  # fmt: skip
    gated = st["pods"][1]
    v = ex.blocking_reason(demand("team-a", 8), workloads=[], **st)
    assert (v.starts, v.cause, v.position, v.ahead) == (False, "priority", 2, ("team-a/web-1",))
    # the gated pod's own row is judged without itself in the queue
    d = ex.pod_demand(gated)
    assert (d.pods, d.gpus, d.pool, d.priority, d.label) == (1, 8, POOL, 1_000_000, "team-a/web-1")
    v = ex.blocking_reason(d, workloads=[], **st)
    assert (v.starts, v.position) == (True, 1)


def test_one_snapshot_answers_every_row_as_a_fresh_one_would() -> None:
    # `get jobs -o wide` asks one Snapshot once per waiting row; what it shares between rows (queue
    # order, placements, preemption candidates) must not change any answer.
    st = {**state([TeamQuota("team-a", "q", gpu=16), B]), "pods": [
        pod("team-a", "a1-x", 4, node="gpu-node-1", job="a1", priority="low"),
        pod("team-b", "b1-x", 8, node="gpu-node-2", job="b1"),
    ]}  # fmt: skip
    for i, (gpus, prio) in enumerate([(2, "high"), (4, "medium"), (2, "medium"), (8, "low"), (1, "high")]):
        p = pod("team-a", f"w{i}", gpus, priority=prio)
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:0{i}Z"
        st["pods"].append(p)
    demands = [ex.pod_demand(p) for p in st["pods"][2:]] + [
        demand("team-a", 4),
        demand("team-b", 8, priority="high"),
    ]
    shared = ex.Snapshot.build(workloads=[], **st)
    answers = [shared.verdict(d) for d in reversed(demands)][::-1]
    assert answers == [ex.Snapshot.build(workloads=[], **st).verdict(d) for d in demands]
    # Free: 4 GPUs on gpu-node-1 (a1 holds 4), none on gpu-node-2. Queue: w0 (2, high), w4 (1, high),
    # w1 (4), w2 (2), w3 (8, low); w0 and w4 take 3 of the 4 free GPUs first.
    assert [(v.position, v.starts, v.cause) for v in answers[:5]] == [
        (1, True, ""),  # w0
        (3, False, "priority"),  # w1: 1 GPU left after w0 and w4
        (4, False, "priority"),  # w2
        (5, False, "capacity"),  # w3: 8 GPUs, within quota, nothing over quota to take back
        (2, True, ""),  # w4: after w0, 2 left
    ]
    # named: the jobs ahead up to the one after which w1 no longer fits
    assert answers[1].message == (
        "team-a/w0 (ahead in team-a's queue) take the free GPUs of training-pool first"
    )


# ----------------------------------------------------------------------------- by count (team members)
# A caller who may not list every pod judges by count: the pool's use is the ClusterQueues' reservations
# (Kueue's count), its own namespace's Workloads order its queue, and where pods land is Kueue's word.
def reserving(t: TeamQuota, gpus: int) -> dict:
    """The team's ClusterQueue with Kueue's status: `gpus` reserved in the pool (and of its budget)."""
    cq = cluster_queue(t, [POOL])
    cq["status"] = {
        "flavorsReservation": [
            {"name": POOL, "resources": [{"name": "nvidia.com/gpu", "total": str(gpus), "borrowed": "0"}]},
            {
                "name": BUDGET_FLAVOR,
                "resources": [{"name": QUOTA_GPU, "total": str(gpus * GPU_UNITS), "borrowed": "0"}],
            },
        ]
    }
    return cq


def by_count(cqs: list[dict], workloads: list[dict] | None = None) -> ex.Snapshot:
    pools = [PoolCapacity(POOL, gpu=16, cpu="192", memory="2Ti")]
    return ex.Snapshot.build(
        nodes=NODES,
        pods=[],
        workloads=workloads or [],
        cluster_queues=cqs,
        cohort=cohort(pools, [A, B]),
        pool_reserved=pool_reservations(cqs),
    )


def test_by_count_fits_says_per_node_use_is_unknown() -> None:
    v = by_count([reserving(A, 4), reserving(B, 4)]).verdict(demand("team-a", 4))
    assert (v.starts, v.cause) == (True, "")
    assert v.summary(POOL) == (
        "would start now on pool training-pool, if one node has 4 free GPUs (8 free in training-pool; "
        "per-node use needs a role that may list every pod)"
    )


def test_by_count_fragmentation_is_kueues_word() -> None:
    msg = "couldn't assign flavors to pod set main: topology \"gpuctl\" doesn't allow to fit any of 1 pod(s)"
    d = replace(demand("team-a", 4), kueue_message=msg)
    v = by_count([reserving(A, 4), reserving(B, 4)]).verdict(d)
    assert (v.starts, v.cause) == (False, "fragmentation")
    assert (
        v.message
        == f"8 of 16 GPUs of training-pool are free, enough in number, but Kueue has not placed it: {msg}"
    )


def test_by_count_capacity_matches_the_per_node_verdict() -> None:
    """A pool full of work within quota reads the same to a team member and to an admin."""
    a, b = TeamQuota("team-a", "q", gpu=12), TeamQuota("team-b", "q", gpu=12)
    cqs = [reserving(a, 8), reserving(b, 8)]
    wls = [wl("team-a", "a1", 8, on={"gpu-node-1": 1}), wl("team-b", "b1", 8, on={"gpu-node-2": 1})]
    pools = [PoolCapacity(POOL, gpu=16, cpu="192", memory="2Ti")]
    common = {"nodes": NODES, "pods": [], "cluster_queues": cqs, "cohort": cohort(pools, [a, b])}
    own = [w for w in wls if w["metadata"]["namespace"] == "team-a"]
    member = ex.Snapshot.build(**common, workloads=own, pool_reserved=pool_reservations(cqs))
    admin = ex.Snapshot.build(**common, workloads=wls)
    expected = (
        "capacity",
        "training-pool has 0 of 16 GPUs free, this job needs 4 (used by work within its teams' quotas)",
    )
    for snap in (member, admin):
        v = snap.verdict(demand("team-a", 4))
        assert (v.cause, v.message) == expected


def test_by_count_jobs_ahead_take_the_room_first() -> None:
    ahead = wl("team-a", "first", 4, priority="high")
    v = by_count([reserving(A, 4), reserving(B, 8)], [ahead]).verdict(demand("team-a", 4))
    assert (v.starts, v.cause, v.position, v.ahead) == (False, "priority", 2, ("team-a/first",))
    assert v.message == "team-a/first (ahead in team-a's queue) take the free GPUs of training-pool first"


def test_by_count_within_quota_preempts_a_team_beyond_its_quota() -> None:
    over = TeamQuota("team-b", "q", gpu=4)
    cqs = [reserving(A, 0), reserving(over, 16)]
    pools = [PoolCapacity(POOL, gpu=16, cpu="192", memory="2Ti")]
    snap = ex.Snapshot.build(
        nodes=NODES,
        pods=[],
        workloads=[],
        cluster_queues=cqs,
        cohort=cohort(pools, [A, over]),
        pool_reserved=pool_reservations(cqs),
    )
    v = snap.verdict(demand("team-a", 4))
    assert (v.starts, v.cause, v.preempts) == (True, "preemption", ("team-b's work beyond its quota",))
