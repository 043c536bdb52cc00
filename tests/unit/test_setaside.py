"""No starvation (issue 31): which nodes gpuctl serve sets aside for the oldest waiting gang (pure)."""

from __future__ import annotations

import datetime as dt

from gpuctl.constants import SET_ASIDE_FOR_ANNOTATION, SET_ASIDE_TAINT_KEY
from gpuctl.domain.gang import set_aside_for, set_aside_start
from gpuctl.domain.setaside import plan_set_aside, stranded, waiting_gangs
from tests.unit.kueue_objects import team_cluster_queue as _cq

RACK = "example.com/rack"
NOW = 10_000.0


def _node(name: str, rack: str, *, gang: str | None = None, pool: str = "p", gpus: int = 8) -> dict:
    node: dict = {
        "metadata": {"name": name, "labels": {"runwhere.ai/pool": pool, RACK: rack}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if gang:
        node["metadata"]["annotations"] = {SET_ASIDE_FOR_ANNOTATION: gang}
        node["spec"]["taints"] = [{"key": SET_ASIDE_TAINT_KEY, "value": "t", "effect": "NoSchedule"}]
    return node


def _ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wl(
    job: str,
    ns: str = "ta",
    *,
    pods: int = 2,
    gpus: int = 8,
    age: float = 600,
    prio: int = 500,
    state: str = "pending",
    tolerates: bool = True,
) -> dict:
    conds = []
    tolerations = (
        [{"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}] if tolerates else []
    )
    if state == "admitted":
        conds = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
    return {
        "metadata": {
            "name": f"job-{job}",
            "namespace": ns,
            "creationTimestamp": _ts(NOW - age),
            "labels": {"runwhere.ai/pool": "p"},
            "ownerReferences": [{"kind": "Job", "name": job, "uid": job}],
        },
        "spec": {
            "priority": prio,
            "active": True,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
                            ],
                            "tolerations": tolerations,
                        }
                    },
                }
            ],
        },
        "status": {"conditions": conds},
    }


def _pod(node: str, gpus: int, *, ends_in: int | None = None) -> dict:
    labels = {"kueue.x-k8s.io/max-exec-time-seconds": str(ends_in + 100)} if ends_in is not None else {}
    return {
        "metadata": {"name": f"p-{node}-{gpus}", "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running", "startTime": _ts(NOW - 100)},
    }


NODES = [_node("n1", "r1"), _node("n2", "r1"), _node("n3", "r2")]
CQS = [_cq("ta", 16), _cq("tb", 24)]


def _plan(nodes=NODES, pods=(), workloads=(), cqs=CQS, settle=30.0):
    return plan_set_aside(
        nodes, pods, list(workloads), cqs, {"p": (RACK,)}, pools=None, now=NOW, settle=settle
    )


def test_oldest_gang_gets_two_nodes_of_one_rack_that_free_up_first() -> None:
    pods = [_pod("n1", 1, ends_in=50), _pod("n2", 2, ends_in=20), _pod("n3", 1, ends_in=5)]
    plan = _plan(pods=pods, workloads=[_wl("young", age=100), _wl("old", age=900)])
    assert plan.hold == {"n1": "ta/old", "n2": "ta/old"}  # r2 has one node only
    assert plan.release == ()
    assert "set aside n1, n2 for ta/old" in plan.why["p"]


def test_nothing_before_settle_or_beyond_quota_or_for_one_pod_jobs() -> None:
    assert _plan(workloads=[_wl("g", age=5)]).hold == {}
    assert _plan(workloads=[_wl("g")], cqs=[_cq("ta", 16, used=8)]).hold == {}  # 8 + 16 > 16
    assert _plan(workloads=[_wl("solo", pods=1)]).hold == {}
    # A raw Indexed Job whose pods do not tolerate the taint could never use the nodes: none for it.
    assert _plan(workloads=[_wl("raw", tolerates=False)]).hold == {}
    assert waiting_gangs([_wl("g", state="admitted")], CQS) == []


def test_set_aside_nodes_are_kept_then_given_back() -> None:
    marked = [_node("n1", "r1", gang="ta/old"), _node("n2", "r1", gang="ta/old"), _node("n3", "r2")]
    assert set_aside_for(marked[0]) == "ta/old" and set_aside_for(marked[2]) is None
    assert _plan(nodes=marked, workloads=[_wl("old")]).hold == {"n1": "ta/old", "n2": "ta/old"}
    gone = _plan(nodes=marked, workloads=[_wl("old", state="admitted")])
    assert gone.hold == {} and gone.release == ("n1", "n2")


def test_priority_comes_first_as_in_kueue() -> None:
    plan = _plan(workloads=[_wl("old", age=900), _wl("urgent", ns="tb", age=60, prio=1000)])
    assert set(plan.hold.values()) == {"tb/urgent"}


def test_a_gang_no_domain_holds_gets_nothing() -> None:
    plan = _plan(workloads=[_wl("huge", pods=4)], cqs=[_cq("ta", 64)])
    assert plan.hold == {} and "no domain" in plan.why["p"]


def _stranded_pod(node: str, wl: str, *, reason: str = "Unschedulable", bound: bool = False) -> dict:
    """A pod Kueue pinned to `node` (its nodeSelector) for Workload `wl`, not bound: the scheduler's word."""
    spec: dict = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": []}
    if bound:
        spec["nodeName"] = node
    return {
        "metadata": {"name": f"pod-{wl}", "namespace": "tb", "annotations": {"kueue.x-k8s.io/workload": wl}},
        "spec": spec,
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason}],
        },
    }


def test_a_job_admitted_onto_a_node_as_it_was_set_aside_is_requeued() -> None:
    """Kueue admitted tb's 1-GPU job onto n1 in the moment the taint was set: its pod is pinned there and
    can never be scheduled under the taint, while its Workload holds n1's room in Kueue's books. The
    gang and it would wait for each other (the flaky starvation test); serve requeues it."""
    marked = [_node("n1", "r1", gang="ta/old"), _node("n2", "r1", gang="ta/old"), _node("n3", "r2")]
    small = _wl("small", ns="tb", pods=1, gpus=1, state="admitted")
    gate = _stranded_pod("n1", "job-small")
    plan = _plan(nodes=marked, pods=[gate], workloads=[_wl("old"), small])
    assert list(plan.requeue) == ["tb/job-small"]
    assert "admitted onto n1 as it was set aside for ta/old" in plan.requeue["tb/job-small"]
    # Not: a pod the scheduler has not judged yet, a bound one, a pod on a node not set aside, a gang's
    # pod (gangs tolerate the taint), a Workload that holds no quota, or once the gang no longer waits.
    held = {"n1": "ta/old"}
    assert stranded([_stranded_pod("n1", "job-small", reason="")], [small], held) == {}
    assert stranded([_stranded_pod("n1", "job-small", bound=True)], [small], held) == {}
    assert stranded([_stranded_pod("n3", "job-small")], [small], held) == {}
    gang = _wl("small", ns="tb", pods=2, gpus=1, state="admitted")
    assert stranded([gate], [gang], held) == {}
    # A JobSet's Workload of 2 pods is no gang (gpuctl.domain.gang): its pods may not tolerate the taint,
    # so it is stranded like any other job.
    jobset = _wl("small", ns="tb", pods=2, gpus=1, state="admitted")
    jobset["metadata"]["ownerReferences"] = [
        {"kind": "JobSet", "name": "small", "uid": "s", "controller": True}
    ]
    assert list(stranded([gate], [jobset], held)) == ["tb/job-small"]
    assert stranded([gate], [_wl("small", ns="tb", pods=1, gpus=1)], held) == {}
    done = _plan(nodes=marked, pods=[gate], workloads=[_wl("old", state="admitted"), small])
    assert done.requeue == {} and done.release == ("n1", "n2")


def _clock(t: float) -> str:
    return f"t+{t - NOW:.0f}"


def test_a_set_aside_gang_starts_when_the_last_job_on_its_nodes_ends() -> None:
    marked = [_node("n1", "r1", gang="ta/old"), _node("n2", "r1", gang="ta/old"), _node("n3", "r2")]
    holders = [("tb/a", {"n1": 1}, NOW + 50), ("tb/b", {"n2": 2}, NOW + 200), ("tb/c", {"n3": 8}, NOW + 900)]
    start = set_aside_start("ta/old", marked, holders, now=NOW, slack=30, clock=_clock)
    assert start == (
        NOW + 230,
        "nodes n1, n2 are set aside for it; tb/b, the last job on them, ends by t+200",
    )
    assert set_aside_start("ta/other", marked, holders, now=NOW, slack=30, clock=_clock) is None
    free = set_aside_start("ta/old", marked, holders[2:], now=NOW, slack=30, clock=_clock)
    assert free == (NOW, "nodes n1, n2 are set aside for it and free: Kueue admits it at its next pass")
    endless = set_aside_start("ta/old", marked, [("tb/x", {"n2": 1}, None)], now=NOW, slack=30, clock=_clock)
    assert endless == (None, "nodes n1, n2 are set aside for it; tb/x on them has no maxRuntime")
    hidden = set_aside_start("ta/old", marked, [], now=NOW, slack=30, clock=_clock, visible=False)
    assert hidden is not None and hidden[0] is None and "not visible to you" in hidden[1]
