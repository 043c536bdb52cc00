"""No starvation (issue 31): which nodes gpuctl serve sets aside for the oldest waiting gang (pure)."""

from __future__ import annotations

import datetime as dt

from gpuctl.constants import (
    SET_ASIDE_ENDED_ANNOTATION,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_SINCE_ANNOTATION,
    SET_ASIDE_TAINT_KEY,
    STARTS_BY_ANNOTATION,
)
from gpuctl.domain.gang import set_aside_for, set_aside_start, set_aside_taints, set_aside_tolerations
from gpuctl.domain.setaside import plan_set_aside, squatters, stranded, waiting_gangs
from tests.unit.kueue_objects import team_cluster_queue as _cq

RACK = "example.com/rack"
NOW = 10_000.0


def _node(
    name: str,
    rack: str,
    *,
    gang: str | None = None,
    pool: str = "p",
    gpus: int = 8,
    since: float | None = None,
) -> dict:
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
        if since is not None:
            node["metadata"]["annotations"][SET_ASIDE_SINCE_ANNOTATION] = _ts(since)
        node["spec"]["taints"] = set_aside_taints(gang)
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
    cpu: str = "1",
    memory: str = "1Gi",
    ended: str | None = None,
) -> dict:
    conds = []
    tolerations = set_aside_tolerations(ns, job) if tolerates else []
    if state == "admitted":
        conds = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
    meta = {
        "name": f"job-{job}",
        "namespace": ns,
        "creationTimestamp": _ts(NOW - age),
        "labels": {"runwhere.ai/pool": "p"},
        "ownerReferences": [{"kind": "Job", "name": job, "uid": job}],
    }
    return {
        "metadata": meta,
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
                                {
                                    "name": "main",
                                    "resources": {
                                        "requests": {
                                            "nvidia.com/gpu": str(gpus),
                                            "cpu": cpu,
                                            "memory": memory,
                                        }
                                    },
                                }
                            ],
                            "tolerations": tolerations,
                        }
                    },
                }
            ],
        },
        "status": {"conditions": conds},
    } | ({"metadata": {**meta, "annotations": {SET_ASIDE_ENDED_ANNOTATION: ended}}} if ended else {})


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
    # Not: a pod the scheduler has not judged yet, a bound one, a pod on a node not set aside, a pod of
    # the gang the node is held for (it tolerates its taints), a Workload that holds no quota, or once the
    # gang no longer waits.
    held = {"n1": "ta/old"}
    assert stranded([_stranded_pod("n1", "job-small", reason="")], [small], held) == {}
    assert stranded([_stranded_pod("n1", "job-small", bound=True)], [small], held) == {}
    assert stranded([_stranded_pod("n3", "job-small")], [small], held) == {}
    own = _stranded_pod("n1", "job-old")
    own["spec"]["tolerations"] = set_aside_tolerations("ta", "old")
    assert stranded([own], [_wl("old", state="admitted")], held) == {}
    # Another gang's pod no longer tolerates ta/old's nodes: it is stranded like any other.
    gang = _wl("small", ns="tb", pods=2, gpus=1, state="admitted")
    gang_pod = _stranded_pod("n1", "job-small")
    gang_pod["spec"]["tolerations"] = set_aside_tolerations("tb", "small")
    assert list(stranded([gang_pod], [gang], held)) == ["tb/job-small"]
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


# ----------------------------------------------------------------------------- issue 43
def _cq_cpu(ns: str, gpus: int, cores: int, *, used_cores: int = 0) -> dict:
    """A team ClusterQueue with a CPU quota too (runwhere.ai/quota-cpu in milli-CPU)."""
    cq = _cq(ns, gpus)
    cq["spec"]["resourceGroups"][0]["coveredResources"].append("runwhere.ai/quota-cpu")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"].append(
        {"name": "runwhere.ai/quota-cpu", "nominalQuota": str(cores * 1000)}
    )
    cq["status"]["flavorsReservation"][0]["resources"].append(
        {"name": "runwhere.ai/quota-cpu", "total": str(used_cores * 1000), "borrowed": "0"}
    )
    return cq


def test_a_gang_over_its_cpu_or_memory_quota_gets_no_set_aside_and_the_plan_says_why() -> None:
    """Attack 6: within its GPU quota (16 of 16) but over its CPU quota, Kueue can never admit the gang;
    it held every node of the pool. It gets none, the next gang that fits does, and why says so."""
    cqs = [_cq_cpu("ta", 16, 64), _cq("tb", 24)]
    big = _wl("big", cpu="48", age=900)  # 2 x 48 cores = 96 > 64
    plan = _plan(workloads=[big], cqs=cqs)
    assert plan.hold == {}
    assert "ta/big gets no set-aside: over its team's quota, CPU: needs 96 cores, 64 cores" in plan.why["p"]
    (g,) = waiting_gangs([big], cqs)
    assert g.blocked.startswith("over its team's quota")
    assert set(_plan(workloads=[big, _wl("fits", ns="tb", age=100)], cqs=cqs).hold.values()) == {"tb/fits"}
    # Within its CPU quota (40 of 64 cores used: 2 x 12 = 24 fit): it gets its nodes.
    cqs = [_cq_cpu("ta", 16, 64, used_cores=40), _cq("tb", 24)]
    assert set(_plan(workloads=[_wl("ok", cpu="12")], cqs=cqs).hold.values()) == {"ta/ok"}


def test_a_set_aside_is_for_its_own_gang_and_squatters_of_any_priority_are_moved() -> None:
    """Attack 7: every gang tolerated every set-aside, so another team's 2 x 1-GPU gang was admitted onto
    the nodes held for a 2 x 8 gang, and a `high` squatter was never moved. Each node now carries its
    gang's namespace and job in two taints only that gang tolerates; a pod holding GPUs there that
    tolerates them without being that gang's is requeued, whatever its priority."""
    assert set_aside_taints("ta/old") == [
        {"key": SET_ASIDE_TAINT_KEY, "value": "ta", "effect": "NoSchedule"},
        {"key": "runwhere.ai/set-aside-job", "value": "old", "effect": "NoSchedule"},
    ]
    marked = [_node("n1", "r1", gang="ta/old"), _node("n2", "r1", gang="ta/old"), _node("n3", "r2")]
    squat = _wl("squat", ns="tb", pods=2, gpus=1, prio=1_000_000, state="admitted")
    legacy = _pod("n1", 1)  # a pod tolerating every taint (admission refuses it in team namespaces)
    legacy["metadata"].update(namespace="tb", annotations={"kueue.x-k8s.io/workload": "job-squat"})
    legacy["spec"]["tolerations"] = [{"operator": "Exists"}]
    before = _pod("n2", 2)  # there before the set-aside, tolerating nothing: runs to its end
    before["metadata"].update(namespace="tb", annotations={"kueue.x-k8s.io/workload": "job-squat"})
    plan = _plan(nodes=marked, pods=[legacy, before], workloads=[_wl("old"), squat])
    assert plan.hold == {"n1": "ta/old", "n2": "ta/old"}
    assert list(plan.requeue) == ["tb/job-squat"]
    assert "ran on n1, set aside for ta/old, whose taints it tolerates" in plan.requeue["tb/job-squat"]
    # Another gang's own per-gang tolerations do not tolerate ta/old's nodes: not a squatter (it could
    # not have been placed there); the held gang's own pods never are.
    own = _pod("n1", 8)
    own["metadata"].update(namespace="ta", annotations={"kueue.x-k8s.io/workload": "job-old"})
    own["spec"]["tolerations"] = set_aside_tolerations("ta", "old")
    other = _pod("n2", 1)
    other["metadata"].update(namespace="tb", annotations={"kueue.x-k8s.io/workload": "job-squat"})
    other["spec"]["tolerations"] = [
        *set_aside_tolerations("tb", "squat"),
        {"key": SET_ASIDE_TAINT_KEY, "operator": "Exists"},  # every gang's, before issue 43: not the job key
    ]
    held = {"n1": "ta/old", "n2": "ta/old"}
    pods_on = {"n1": [own], "n2": [other]}
    assert squatters(pods_on, [_wl("old", state="admitted"), squat], held) == {}


def test_a_set_aside_ends_when_its_free_nodes_do_not_get_the_gang_admitted_or_when_it_lasted_too_long() -> (
    None
):
    marked = [
        _node("n1", "r1", gang="ta/old", since=NOW - 50),
        _node("n2", "r1", gang="ta/old", since=NOW - 50),
    ]
    marked.append(_node("n3", "r2"))
    busy = [_pod("n1", 1, ends_in=500)]
    # Busy nodes: held, no idle clock.
    plan = _plan(nodes=marked, pods=busy, workloads=[_wl("old")])
    assert plan.hold == {"n1": "ta/old", "n2": "ta/old"} and plan.idle_since == {}
    assert plan.since == {"ta/old": NOW - 50}
    # Free nodes: the idle clock starts; held while it runs; ended once it reached `idle`.
    free = plan_set_aside(
        marked, [], [_wl("old")], CQS, {"p": (RACK,)}, pools=None, now=NOW, settle=30, idle=120
    )
    assert free.hold and free.idle_since == {"ta/old": NOW} and free.ended == {}
    later = plan_set_aside(
        marked, [], [_wl("old")], CQS, {"p": (RACK,)}, pools=None, now=NOW + 120, settle=30, idle=120,
        idle_since=free.idle_since,
    )  # fmt: skip
    assert later.hold == {} and later.release == ("n1", "n2")
    assert "its nodes were free for 120s and Kueue did not admit it" in later.ended["ta/job-old"]
    # Lasted max_hold: ended whatever runs on its nodes.
    old = [_node("n1", "r1", gang="ta/old", since=NOW - 7200), _node("n2", "r1", gang="ta/old", since=NOW)]
    plan = _plan(nodes=old, pods=busy, workloads=[_wl("old")])
    assert (
        plan.hold == {} and "it lasted 7200s, the most a set-aside lasts (7200s)" in plan.ended["ta/job-old"]
    )
    # Its cooldown: no set-aside again before it passed; then again.
    ended = _ts(NOW - 100) + " its nodes were free"
    cooling = _plan(workloads=[_wl("old", ended=ended)])
    assert cooling.hold == {} and "its last set-aside ended 100s ago; none again for 600s" in cooling.why["p"]
    assert _plan(workloads=[_wl("old", ended=_ts(NOW - 700) + " x")]).hold
    # A new set-aside is announced (its start: the Event on the Workload, the node annotation).
    fresh = _plan(workloads=[_wl("old")])
    assert fresh.started == {"ta/job-old": ("n1", "n2")} and fresh.since == {"ta/old": NOW}


def test_a_set_aside_stays_its_gangs_when_another_gang_comes_first_later() -> None:
    """Attack 7 as it happened on the cluster: another team's high-priority 2 x 1-GPU gang became first in
    Kueue's order, no free domain could hold it, and the 2 x 8 gang's set-aside was given back, so Kueue put
    the small gang on those nodes. A set-aside now stays its gang's until it ends."""
    marked = [_node("n1", "r1", gang="ta/old"), _node("n2", "r1", gang="ta/old"), _node("n3", "r2")]
    busy = [_pod("n3", 8)]  # the only node not held is full
    urgent = _wl("small", ns="tb", pods=2, gpus=1, prio=1_000_000, age=60)
    plan = _plan(nodes=marked, pods=busy, workloads=[_wl("old"), urgent])
    assert plan.hold == {"n1": "ta/old", "n2": "ta/old"} and plan.release == ()
    assert plan.why["p"] == "holding n1, n2 for ta/old; tb/small, first in Kueue's order, waits"
    # Without a set-aside in the pool, the first gang some domain holds gets one, in Kueue's order.
    fresh = _plan(pods=busy, workloads=[_wl("old"), urgent])
    assert set(fresh.hold.values()) == {"tb/small"}
    # A set-aside serve has just ended is not made again before its Workload's annotation arrives.
    again = plan_set_aside(
        NODES, [], [_wl("old")], CQS, {"p": (RACK,)}, pools=None, now=NOW, settle=30,
        recently_ended={"ta/job-old": NOW - 5},
    )  # fmt: skip
    assert again.hold == {} and "ended 5s ago" in again.why["p"]


def _placed(wl: dict, nodes: list[str]) -> dict:
    """The Workload with Kueue's topology assignment: one pod on each of `nodes`."""
    wl["status"]["admission"] = {
        "podSetAssignments": [
            {
                "name": "main",
                "count": len(nodes),
                "topologyAssignment": {
                    "levels": ["kubernetes.io/hostname"],
                    "slices": [
                        {
                            "domainCount": len(nodes),
                            "podCounts": {"universal": 1},
                            "valuesPerLevel": [{"individual": {"roots": nodes}}],
                        }
                    ],
                },
            }
        ]
    }
    return wl


def test_nodes_kueue_just_placed_an_admitted_gang_on_are_not_set_aside_for_the_next() -> None:
    """Seen on the cluster: the gang was admitted onto its free nodes, which gave its set-aside back, and
    the next gang got those nodes set aside before the first one's pods were bound there: its pods, pinned
    there by Kueue, were stranded and requeued. Nodes with pods of a Workload holding quota still to bind
    (its topology assignment) are no candidates."""
    big = _placed(_wl("big", state="admitted"), ["n1", "n2"])
    nodes = [_node("n1", "r1"), _node("n2", "r1"), _node("n3", "r1")]
    small = _wl("small", ns="tb", pods=2, gpus=1, age=60)
    plan = _plan(nodes=nodes, workloads=[big, small])
    assert plan.hold == {} and "no domain" in plan.why["p"]
    # Once its pods are bound there, the nodes are busy as any: candidates again (by their cost).
    bound = []
    for n in ("n1", "n2"):
        p = _pod(n, 8)
        p["metadata"].update(namespace="ta", annotations={"kueue.x-k8s.io/workload": "job-big"})
        bound.append(p)
    assert set(_plan(nodes=nodes, pods=bound, workloads=[big, small]).hold.values()) == {"tb/small"}


def test_a_one_pod_job_kueue_just_placed_does_not_keep_its_node_from_a_set_aside() -> None:
    """test_starvation on the cluster: a stream of 1-GPU jobs always had one just placed on some node of
    rack r1, so the gang's two nodes were split over two racks. Only a gang's pods still to bind keep a
    node out; a one-pod job stranded by the set-aside is requeued before it started (`stranded`)."""
    one = _placed(_wl("one", ns="tb", pods=1, gpus=1, state="admitted"), ["n1"])
    plan = _plan(workloads=[one, _wl("big")])
    assert plan.hold == {"n1": "ta/big", "n2": "ta/big"}


def _promised(job: str, by: float, **kw) -> dict:
    """A one-pod Job's Workload that was shown the start bound `by` (issue 45)."""
    wl = _wl(job, pods=1, **kw)
    wl["metadata"].setdefault("annotations", {})[STARTS_BY_ANNOTATION] = _ts(by)
    return wl


def test_a_one_pod_job_shown_a_bound_gets_the_node_where_room_comes_first_from_lead_before_it() -> None:
    """Issue 45: a 4-GPU job shown "starts by NOW+100" is held from `lead` before its bound, on the node
    whose work frees 4 GPUs first (n2: its 6-GPU job ends in 20 s; n1's 7 GPUs run 50 s more), not before;
    a one-pod job without a bound, or whose pods do not tolerate its set-aside, is never held."""
    pods = [_pod("n1", 7, ends_in=50), _pod("n2", 6, ends_in=20), _pod("n3", 8)]
    wl = _promised("small", NOW + 100, gpus=4)
    early = plan_set_aside(NODES, pods, [wl], CQS, {"p": (RACK,)}, pools=None, now=NOW, settle=30.0, lead=60)
    assert early.hold == {}
    assert "held from 60s before its start bound, in 40s" in early.why["p (start bounds)"]
    plan = plan_set_aside(NODES, pods, [wl], CQS, {"p": (RACK,)}, pools=None, now=NOW, settle=30.0, lead=200)
    assert plan.hold == {"n2": "ta/small"}
    assert plan.started == {"ta/job-small": ("n2",)}
    assert _plan(pods=pods, workloads=[_wl("small", pods=1, gpus=4)]).hold == {}  # shown no bound
    untolerated = _promised("small", NOW + 100, gpus=4, tolerates=False)
    assert _plan(pods=pods, workloads=[untolerated]).hold == {}


def test_a_held_one_pod_job_keeps_its_node_while_it_has_no_room_and_gives_it_back_once_admitted() -> None:
    """The node stays held while the work on it leaves the job no room (4 of 8 GPUs still in use for a
    6-GPU job), whoever else waits; once Kueue admitted the job (it holds quota), the node is given back."""
    nodes = [_node("n1", "r1", gang="ta/small", since=NOW - 10), _node("n2", "r1"), _node("n3", "r2")]
    pods = [_pod("n1", 4, ends_in=30)]
    waiting = _promised("small", NOW + 60, gpus=6)
    other = _wl("later", ns="tb", pods=1, gpus=1, age=1, prio=500)
    plan = _plan(nodes=nodes, pods=pods, workloads=[waiting, other])
    assert plan.hold == {"n1": "ta/small"} and plan.release == ()
    admitted = _promised("small", NOW + 60, gpus=6, state="admitted")
    assert _plan(nodes=nodes, pods=pods, workloads=[admitted]).release == ("n1",)


def test_a_serve_of_other_pools_leaves_a_set_aside_alone() -> None:
    """Two serves with different --defrag pools (or the bench beside a test): each gives back only its own
    pools' nodes; before, a serve of pool q released the node another serve held in pool p."""
    nodes = [_node("n1", "r1", gang="ta/small", since=NOW - 10), _node("m1", "r1", pool="q")]
    plan = plan_set_aside(nodes, [], [], CQS, {}, pools=["q"], now=NOW, settle=30.0)
    assert plan.release == ()
    assert plan_set_aside(nodes, [], [], CQS, {}, pools=None, now=NOW, settle=30.0).release == ("n1",)


def test_a_gang_and_a_job_shown_a_bound_each_get_a_set_aside_gangs_first() -> None:
    """A stream of one-pod jobs shown a bound, older than the gang (first in Kueue's order), must not keep
    the gang from its nodes (test_starvation's stream is such jobs once serve records their bounds): one
    set-aside of each kind per pool, on different nodes."""
    pods = [_pod("n1", 1, ends_in=50), _pod("n2", 2, ends_in=20), _pod("n3", 6, ends_in=5)]
    small = _promised("small", NOW + 100, gpus=1, age=2000)
    plan = _plan(pods=pods, workloads=[small, _wl("old", age=900)])
    assert plan.hold == {"n1": "ta/old", "n2": "ta/old", "n3": "ta/small"}
    assert "set aside n1, n2 for ta/old" in plan.why["p"]
    assert "set aside n3 for ta/small" in plan.why["p (start bounds)"]
