"""gpuctl.domain.defrag: which jobs a move takes, and when none is made."""

from __future__ import annotations

import random

import pytest

from gpuctl.domain.defrag import (
    Inputs,
    Node,
    Running,
    Waiting,
    fits,
    inputs_from_objects,
    plan_move,
    to_reactivate,
)
from tests.unit.kueue_objects import team_cluster_queue as _cq

LOW, MED, HIGH = 100, 500_000, 1_000_000
A100 = [Node("n1", "train", 8), Node("n2", "train", 8)]


def run(
    key: str, node_gpus: dict[str, int], *, team: str = "b", prio: int = LOW, started: float = 0.0, **kw
) -> Running:
    pods = kw.pop("pods", tuple(node_gpus.values()))
    return Running(f"{team}/{key}", f"{team}/{key}", team, prio, started, node_gpus, tuple(pods), **kw)


def wait(
    pods: tuple[int, ...] = (8,), *, team: str = "a", prio: int = MED, within: bool = True, since: float = 0.0
) -> Waiting:
    return Waiting(f"{team}/big", f"{team}/big", team, prio, "train", pods, since, within)


def plan(running, waiting, nodes=A100, *, moved=0, cap=4, pools=None, now=100.0, settle=30.0, busy=()):
    return plan_move(
        Inputs(list(nodes), list(running), list(waiting), set(busy)),
        pools=pools,
        now=now,
        settle=settle,
        moved_in_window=moved,
        cap=cap,
    )


def victims(p) -> list[str]:
    return sorted(v.key for v in p.victims)


def test_two_half_nodes_move_the_one_job_to_the_other_node():
    p, why = plan([run("x", {"n1": 4}), run("y", {"n2": 4})], [wait()])
    assert why == "" and p is not None
    assert len(p.victims) == 1 and p.node in ("n1", "n2")
    assert "moved to make room for a/big" in p.reason()


def test_fewest_jobs_first():
    # n1 holds two 2-GPU jobs, n2 one 4-GPU job: moving the one job frees n2.
    p, _ = plan([run("x1", {"n1": 2}), run("x2", {"n1": 2}), run("y", {"n2": 4})], [wait()])
    assert p is not None and victims(p) == ["b/y"] and p.node == "n2"


def test_lowest_priority_then_most_recent():
    p, _ = plan([run("old", {"n1": 4}, started=1.0), run("new", {"n2": 4}, started=50.0)], [wait()])
    assert p is not None and victims(p) == ["b/new"]
    p, _ = plan(
        [run("lo", {"n1": 4}, prio=LOW, started=50.0), run("md", {"n2": 4}, prio=MED, started=1.0)], [wait()]
    )
    assert p is not None and victims(p) == ["b/lo"]


def test_never_higher_priority_than_the_waiter():
    p, why = plan([run("x", {"n1": 4}, prio=HIGH), run("y", {"n2": 4}, prio=HIGH)], [wait(prio=MED)])
    assert p is None and "no node" in why


def test_fits_already_nothing_to_do():
    # n2 is empty: the waiting 8-GPU job fits as the pool is, Kueue admits it, nothing is moved.
    p, why = plan([run("x", {"n1": 4})], [wait()])
    assert p is None
    assert why == "no node of train can be freed for a/big by moving jobs that fit elsewhere"


def test_not_enough_free_in_total_is_not_fragmentation():
    p, _ = plan([run("x", {"n1": 6}), run("y", {"n2": 4})], [wait()])
    assert p is None


def test_victims_must_fit_elsewhere():
    # 5 + 5 free? no: n1 3 used by one job, n2 3 used: free 5+5 = 10 >= 8, moving 3 to n2 leaves 5 free there.
    p, _ = plan([run("x", {"n1": 3}), run("y", {"n2": 3})], [wait()])
    assert p is not None and len(p.victims) == 1
    # A 2-pod victim spread over both nodes is consolidated on one of them.
    p, _ = plan([run("x", {"n1": 4, "n2": 4}, pods=(4, 4))], [wait()])
    assert p is not None and victims(p) == ["b/x"]
    # Two 3-GPU jobs on n1, one 3-GPU job on n2: free 2 + 5; moving n2's job to n1 does not fit.
    p, _ = plan([run("x1", {"n1": 3}), run("x2", {"n1": 3}), run("y", {"n2": 3})], [wait()])
    assert p is None


def test_beyond_quota_waiter_gets_nothing():
    p, why = plan([run("x", {"n1": 4}), run("y", {"n2": 4})], [wait(within=False)])
    assert p is None and "beyond its team's quota" in why


def test_never_within_quota_work_for_borrowed_work():
    # The rule itself (plan_for): a borrowing waiter may not move another team's within-quota job.
    from gpuctl.domain.defrag import plan_for

    rs = [run("x", {"n1": 4}, team_within_quota=True), run("y", {"n2": 4}, team_within_quota=True)]
    assert plan_for(wait(within=False), A100, rs) is None
    assert plan_for(wait(within=True), A100, rs) is not None
    # Its own team's work may move.
    own = [
        run("x", {"n1": 4}, team="a", team_within_quota=True),
        run("y", {"n2": 4}, team="a", team_within_quota=True),
    ]
    assert plan_for(wait(within=False), A100, own) is not None


def test_unmovable_jobs_stay():
    p, _ = plan([run("x", {"n1": 4}, movable=False), run("y", {"n2": 4}, movable=False)], [wait()])
    assert p is None
    p, _ = plan([run("x", {"n1": 4}, movable=False), run("y", {"n2": 4})], [wait()])
    assert p is not None and victims(p) == ["b/y"]


def test_cap_and_settle_and_pools_and_busy():
    rs = [run("x", {"n1": 4}), run("y", {"n2": 4})]
    p, why = plan(rs, [wait()], moved=4, cap=4)
    assert p is None and "cap reached" in why
    p, why = plan(rs, [wait(since=90.0)], now=100.0, settle=30.0)
    assert p is None and "waited less" in why
    p, why = plan(rs, [wait()], pools=["other"])
    assert p is None and "off in pool train" in why
    p, why = plan(rs, [wait()], busy=["train"])
    assert p is None and "settling" in why
    p, _ = plan(rs, [wait()], moved=3, cap=4)
    assert p is not None


def test_waiter_order_priority_then_age():
    rs = [run("x", {"n1": 4}), run("y", {"n2": 4})]
    w1 = Waiting("a/w1", "a/w1", "a", MED, "train", (8,), 10.0, True)
    w2 = Waiting("c/w2", "c/w2", "c", HIGH, "train", (8,), 20.0, True)
    p, _ = plan(rs, [w1, w2])
    assert p is not None and p.waiter.key == "c/w2"


def test_three_nodes_pick_cheapest_node():
    nodes = [Node(f"n{i}", "train", 8) for i in (1, 2, 3)]
    rs = [
        run("a1", {"n1": 2}),
        run("a2", {"n1": 2}),
        run("a3", {"n1": 2}),
        run("b1", {"n2": 6}),
        run("c1", {"n3": 2}),
    ]
    p, _ = plan(rs, [wait()], nodes)
    assert p is not None and victims(p) == ["b/c1"] and p.node == "n3"


def test_multi_pod_waiter():
    nodes = [Node(f"n{i}", "train", 8) for i in (1, 2, 3)]
    # n1 empty, n2 and n3 half used: a 2x8 job needs one more whole node.
    p, _ = plan([run("x", {"n2": 4}), run("y", {"n3": 4})], [wait((8, 8))], nodes)
    assert p is not None and len(p.victims) == 1


def test_fits_best_fit():
    assert fits([4], {"a": 8, "b": 4}) == {"a": 8, "b": 0}
    assert fits([8], {"a": 4, "b": 4}) is None
    assert fits([], {"a": 0}) == {"a": 0}


@pytest.mark.parametrize("seed", range(40))
def test_random_plans_are_sound(seed: int):
    """Whatever the layout: a plan only moves allowed jobs, and afterwards the victims fit elsewhere and
    the waiter fits."""
    rng = random.Random(seed)
    nodes = [Node(f"n{i}", "train", 8) for i in range(rng.randint(2, 4))]
    room = {n.name: 8 for n in nodes}
    rs = []
    for i in range(rng.randint(1, 10)):
        g = rng.choice([1, 2, 4])
        node = rng.choice(list(room))
        if room[node] >= g:
            room[node] -= g
            rs.append(run(f"j{i}", {node: g}, prio=rng.choice([LOW, MED, HIGH]), started=rng.random() * 50))
    w = wait(prio=rng.choice([LOW, MED, HIGH]))
    p, _ = plan(rs, [w], nodes, cap=100)
    if p is None:
        return
    assert all(v.priority <= w.priority and v.movable for v in p.victims)
    after = dict(room)
    for v in p.victims:
        for n, g in v.gpus_by_node.items():
            after[n] += g
    left = fits([g for v in p.victims for g in v.pod_gpus], {n: r for n, r in after.items() if n != p.node})
    assert left is not None
    assert fits(w.pods, {**left, p.node: after[p.node]}) is not None
    assert fits(w.pods, room) is None  # it did not fit before


# ----------------------------------------------------------------------------- from objects
def _node(n: str, pool: str, gpus: int) -> dict:
    return {
        "metadata": {"name": n, "labels": {"runwhere.ai/pool": pool}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(ns: str, n: str, node: str, gpus: int, wl: str) -> dict:
    return {
        "metadata": {"name": n, "namespace": ns, "annotations": {"kueue.x-k8s.io/workload": wl}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def _wl(
    ns: str, n: str, gpus: int, *, admitted: bool, pool: str = "train", owner: str = "Job", prio: int = LOW
) -> dict:
    conds = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}]
    if admitted:
        conds.append({"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"})
    else:
        conds = [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]
    wl = {
        "metadata": {
            "name": n,
            "namespace": ns,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"kind": owner, "name": n.removeprefix("job-"), "controller": True}],
        },
        "spec": {
            "priority": prio,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "nodeSelector": {"runwhere.ai/pool": pool},
                            "containers": [
                                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
                            ],
                        }
                    },
                }
            ],
        },
        "status": {"conditions": conds},
    }
    if admitted:
        wl["status"]["admission"] = {
            "clusterQueue": ns,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": pool},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                }
            ],
        }
    return wl


def test_inputs_from_objects_then_plan():
    nodes = [_node("n1", "train", 8), _node("n2", "train", 8)]
    wls = [
        _wl("b", "job-x", 4, admitted=True),
        _wl("b", "job-y", 4, admitted=True),
        _wl("a", "job-big", 8, admitted=False, prio=MED),
        _wl("b", "sts-nb", 0, admitted=True, owner="StatefulSet"),
    ]
    pods = [_pod("b", "x-0", "n1", 4, "job-x"), _pod("b", "y-0", "n2", 4, "job-y")]
    cqs = [_cq("a", 8, 0), _cq("b", 8, 8)]
    inp = inputs_from_objects(nodes, pods, wls, cqs)
    assert {r.key for r in inp.running} == {"b/job-x", "b/job-y"}
    assert all(r.movable and r.team_within_quota for r in inp.running)
    (w,) = inp.waiting
    assert w.within_quota and w.pods == (8,) and w.pool == "train" and w.job == "a/big"
    p, why = plan_move(inp, pools=None, now=1e12, settle=30, moved_in_window=0, cap=4)
    assert p is not None, why
    # Beyond quota: team a already uses its 8.
    inp = inputs_from_objects(nodes, pods, wls, [_cq("a", 8, 8), _cq("b", 8, 8)])
    assert not inp.waiting[0].within_quota


def test_inputs_terminating_pod_makes_pool_busy():
    nodes = [_node("n1", "train", 8)]
    pod = _pod("b", "x-0", "n1", 4, "job-x")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    inp = inputs_from_objects(nodes, [pod], [_wl("b", "job-x", 4, admitted=True)], [])
    assert inp.busy_pools == {"train"}


def test_to_reactivate_only_with_the_marker():
    wl = {
        "metadata": {"annotations": {"runwhere.ai/defrag-reactivate": "true"}},
        "spec": {"active": False},
        "status": {
            "conditions": [
                {"type": "Evicted", "status": "True"},
                {"type": "QuotaReserved", "status": "False"},
            ]
        },
    }
    assert to_reactivate(wl)
    assert not to_reactivate({**wl, "metadata": {}})  # a user's stop
    assert not to_reactivate({**wl, "spec": {"active": True}})
    held = {
        **wl,
        "status": {
            "conditions": [{"type": "Evicted", "status": "True"}, {"type": "QuotaReserved", "status": "True"}]
        },
    }
    assert not to_reactivate(held)  # pods not gone yet
