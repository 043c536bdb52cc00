"""gpuctl.domain.estimate: the latest start of a waiting job, from the max runtimes of what holds its pool
and of the queue ahead of it, and the honest "no bound" when something has no end."""

from __future__ import annotations

import time
from dataclasses import replace

from gpuctl.constants import MAX_EXEC_TIME_LABEL
from gpuctl.domain import explain as ex
from gpuctl.domain.estimate import estimate
from gpuctl.domain.workload import release_deadline
from queues import TeamQuota
from tests.unit.test_explain import NODES, A, B, by_count, demand, node, pod, reserving, state, wl

T0 = 1_800_000_000.0  # "now"
SLACK = 30


def at(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + seconds))


def running(
    ns: str, job: str, gpus: int, on: dict[str, int], *, since: float, limit: int | None, **kw
) -> dict:
    """Admitted `since` seconds from now (negative: in the past), with maxRuntime `limit`."""
    w = wl(ns, job, gpus, on=on, **kw)
    for c in w["status"]["conditions"]:
        c["lastTransitionTime"] = at(since)
    if limit is not None:
        w["spec"]["maximumExecutionTimeSeconds"] = limit
    return w


def queued(ns: str, job: str, gpus: int, *, limit: int | None, created: int, **kw) -> dict:
    w = wl(ns, job, gpus, created=at(created - 3600), **kw)
    if limit is not None:
        w["spec"]["maximumExecutionTimeSeconds"] = limit
    return w


def judge(workloads: list[dict], d: ex.Demand, teams=(A, B), nodes=NODES, **kw):
    st = {**state(list(teams)), "nodes": nodes}
    snap = ex.Snapshot.build(workloads=workloads, **st)
    return estimate(snap, d, now=T0, slack=SLACK, clock=lambda ts: f"+{int(ts - T0)}s", **kw)


def test_release_deadline_is_kueues_admission_plus_max_runtime_less_past_runs() -> None:
    w = running("team-a", "a1", 8, {"gpu-node-1": 1}, since=-100, limit=600)
    assert release_deadline(w) == T0 + 500
    w["status"]["accumulatedPastExecutionTimeSeconds"] = 200
    assert release_deadline(w) == T0 + 300
    assert release_deadline(running("team-a", "a2", 8, {"gpu-node-1": 1}, since=-100, limit=None)) is None
    assert release_deadline(wl("team-a", "q", 8)) is None  # not admitted


def test_a_full_pool_frees_at_the_first_deadline_then_position_1() -> None:
    wls = [
        running("team-a", "finetune-a", 8, {"gpu-node-1": 1}, since=-300, limit=900),
        running("team-b", "b1", 8, {"gpu-node-2": 1}, since=-60, limit=3600),
    ]
    e = judge(wls, demand("team-a", 8))
    assert (e.bounded, e.starts_by) == (True, T0 + 600 + SLACK)
    assert e.summary() == "starts by +630s at the latest (finetune-a ends by +600s, then position 1)"
    assert e.waits_for == ("finetune-a",)


def test_no_bound_names_the_work_without_a_max_runtime() -> None:
    wls = [
        running("team-a", "finetune-a", 8, {"gpu-node-1": 1}, since=-300, limit=None),
        running("team-b", "b1", 8, {"gpu-node-2": 1}, since=-60, limit=None),
    ]
    teams = (TeamQuota("team-a", "q", gpu=16), B)
    e = judge(wls, demand("team-a", 8), teams=teams)
    assert not e.bounded
    assert e.summary() == (
        "no bound: finetune-a (running) has no maxRuntime; team-b/b1 (running) has no maxRuntime"
    )
    # One bounded holder is enough when its node alone holds the job.
    wls[1]["spec"]["maximumExecutionTimeSeconds"] = 120
    assert judge(wls, demand("team-a", 8), teams=teams).starts_by == T0 + 60 + SLACK
    # Within quota, team-a's own 8 + 8 would be 16 of 8: it waits for its own quota, and finetune-a,
    # which holds it, never ends.
    assert judge(wls, demand("team-a", 8)).basis == "finetune-a (running) has no maxRuntime"


def test_the_queue_ahead_runs_its_max_runtimes_first() -> None:
    wls = [
        running("team-a", "a1", 8, {"gpu-node-1": 1}, since=0, limit=600),
        running("team-b", "b1", 8, {"gpu-node-2": 1}, since=0, limit=1200),
        queued("team-a", "train-x", 8, limit=300, created=0, priority="high"),
    ]
    e = judge(wls, demand("team-a", 8), teams=(TeamQuota("team-a", "q", gpu=16), B))
    # train-x (high, ahead) takes gpu-node-1 when a1 ends (600 + 30); it ends by 930 and gpu-node-1 is
    # free again at 960, before b1 frees gpu-node-2 (1230).
    assert e.starts_by == T0 + 600 + SLACK + 300 + SLACK
    assert e.summary() == (
        "starts by +960s at the latest (train-x, admitted before it, ends by +930s, then position 2)"
    )
    # Ahead and without a maxRuntime: it keeps gpu-node-1, so the job waits for b1.
    del wls[2]["spec"]["maximumExecutionTimeSeconds"]
    e = judge(wls, demand("team-a", 8), teams=(TeamQuota("team-a", "q", gpu=16), B))
    assert e.starts_by == T0 + 1200 + SLACK
    assert e.basis == "team-b/b1 ends by +1200s, then position 2"


def test_ahead_without_a_max_runtime_on_a_one_node_pool_is_no_bound() -> None:
    one = [node("gpu-node-1")]
    wls = [
        running("team-a", "a1", 8, {"gpu-node-1": 1}, since=0, limit=600),
        queued("team-a", "train-x", 8, limit=None, created=0, priority="high"),
    ]
    e = judge(wls, demand("team-a", 8), nodes=one, teams=(TeamQuota("team-a", "q", gpu=16), B))
    assert e.summary() == "no bound: train-x, ahead of it, has no maxRuntime"


def test_best_effort_fifo_a_smaller_job_behind_a_blocked_one_goes_first() -> None:
    # The job ahead needs a whole node and only 4 GPUs are free: this 4-GPU job fits them at once (Kueue
    # lets the next job try when the head does not fit).
    wls = [
        running("team-a", "a1", 4, {"gpu-node-1": 1}, since=0, limit=600),
        running("team-b", "b1", 8, {"gpu-node-2": 1}, since=0, limit=600),
        queued("team-a", "big", 8, limit=600, created=0, priority="high"),
    ]
    snap = ex.Snapshot.build(workloads=wls, **state([TeamQuota("team-a", "q", gpu=24), B]))
    v = snap.verdict(demand("team-a", 4))
    assert v.starts  # judged by explain: it fits now
    e = estimate(snap, demand("team-a", 4), now=T0, verdict=v)
    assert (e.now, e.starts_by) == (True, T0)


def test_fragmented_pool_waits_for_the_node_that_frees_whole() -> None:
    wls = [
        running("team-a", "a1", 4, {"gpu-node-1": 1}, since=0, limit=600),
        running("team-a", "a2", 4, {"gpu-node-1": 1}, since=0, limit=1800),
        running("team-b", "b1", 4, {"gpu-node-2": 1}, since=0, limit=900),
    ]
    e = judge(wls, demand("team-a", 8), teams=(TeamQuota("team-a", "q", gpu=24), B))
    assert e.starts_by == T0 + 900 + SLACK  # gpu-node-2 is whole again; gpu-node-1 only at 1800
    assert e.basis == "team-b/b1 ends by +900s, then position 1"


def test_waiting_for_its_own_quota_counts_its_teams_releases_in_every_pool() -> None:
    capped = TeamQuota("team-a", "q", gpu=8, borrowing_limit=0)
    wls = [running("team-a", "a1", 8, {"gpu-node-1": 1}, since=0, limit=600)]
    snap = ex.Snapshot.build(workloads=wls, **state([capped, B]))
    v = snap.verdict(demand("team-a", 4))
    assert v.cause == "quota"
    e = estimate(
        snap, demand("team-a", 4), now=T0, verdict=v, slack=SLACK, clock=lambda ts: f"+{int(ts - T0)}s"
    )
    assert e.starts_by == T0 + 600 + SLACK
    assert e.basis == "a1 ends by +600s, then position 1"
    # More than its quota: it only ever runs on borrowed GPUs.
    e = estimate(snap, demand("team-a", 6, pods=2), now=T0, slack=SLACK)
    assert not e.bounded and "more than team-a's quota of 8" in e.basis


def test_by_count_a_team_member_waits_out_its_own_work_not_other_teams() -> None:
    own = running("team-a", "a1", 8, {"gpu-node-1": 1}, since=0, limit=600)
    snap = by_count([reserving(TeamQuota("team-a", "q", gpu=16), 8), reserving(B, 8)], [own])
    e = estimate(snap, demand("team-a", 8), now=T0, slack=SLACK, clock=lambda ts: f"+{int(ts - T0)}s")
    assert (e.starts_by, e.basis) == (T0 + 600 + SLACK, "a1 ends by +600s, then position 1")
    e = estimate(snap, demand("team-a", 8, pods=2), now=T0, slack=SLACK)
    assert not e.bounded
    assert e.basis.startswith(
        "other teams hold 8 GPUs of training-pool and their ends are not visible to you"
    )


def test_pods_carry_the_max_runtime_when_no_workload_is_at_hand() -> None:
    p1 = pod("team-a", "a1-x", 8, node="gpu-node-1", job="a1")
    p2 = pod("team-b", "b1-x", 8, node="gpu-node-2", job="b1")
    for p, limit in ((p1, 600), (p2, None)):
        p["status"]["startTime"] = at(-100)
        if limit:
            p["metadata"]["labels"][MAX_EXEC_TIME_LABEL] = str(limit)
    snap = ex.Snapshot.build(workloads=[], **{**state([A, B]), "pods": [p1, p2]})
    assert {h.label: h.ends_by for h in snap.holders} == {"team-a/a1": T0 + 500, "team-b/b1": None}
    e = estimate(snap, demand("team-a", 8), now=T0, slack=SLACK)
    assert e.starts_by == T0 + 500 + SLACK


def test_a_dry_run_job_queues_behind_the_waiting_work_of_its_priority() -> None:
    wls = [
        running("team-a", "a1", 8, {"gpu-node-1": 1}, since=0, limit=600),
        running("team-b", "b1", 8, {"gpu-node-2": 1}, since=0, limit=6000),
        queued("team-a", "older", 8, limit=1200, created=0),
    ]
    new = replace(demand("team-a", 8), label="")  # a dry run: no Workload, no creation time
    e = judge(wls, new, teams=(TeamQuota("team-a", "q", gpu=24), B))
    assert e.starts_by == T0 + 600 + SLACK + 1200 + SLACK  # after `older` ran its 1200 s on gpu-node-1


def test_nothing_bigger_than_a_node_ever_fits() -> None:
    e = judge([], demand("team-a", 16))
    assert e.summary() == "no bound: no node of training-pool has 16 GPUs: it never fits"


def test_an_any_pool_job_gets_no_bound_that_names_its_pools() -> None:
    """A waiting job of several pools (issue 23's any-pool) is not played forward in one pool's releases."""
    full = [running("team-a", "finetune-a", 8, {"gpu-node-1": 1}, since=-300, limit=900)]
    d = replace(demand("team-a", 16), pool="", any_of=("dev-pool", "training-pool"))
    e = judge(full, d)
    assert e.starts_by is None
    assert "dev-pool, training-pool" in e.basis and "one pool only" in e.basis
