"""gpuctl.domain.estimate: the latest start of a waiting job, from the max runtimes of what holds its pool
and of the queue ahead of it, and the honest "no bound" when something has no end."""

from __future__ import annotations

import time
from dataclasses import replace

from gpuctl.constants import MAX_EXEC_TIME_LABEL
from gpuctl.domain import explain as ex
from gpuctl.domain.estimate import estimate
from gpuctl.domain.workload import pod_release_deadline, release_deadline
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


def test_a_pod_bound_but_not_started_yet_ends_by_now_plus_its_max_runtime() -> None:
    # The kubelet (KWOK here) has not reported startTime yet: the pod starts after `now` and its Workload
    # was admitted before it, so now + maxRuntime bounds Kueue's deadline; without `now`, unknown.
    p = pod("team-b", "b1-x", 8, node="gpu-node-2", job="b1")
    p["metadata"]["labels"][MAX_EXEC_TIME_LABEL] = "40"
    p["status"].pop("startTime", None)
    base = {**state([A, B]), "pods": [p]}
    assert [h.ends_by for h in ex.Snapshot.build(workloads=[], **base).holders] == [None]
    assert [h.ends_by for h in ex.Snapshot.build(workloads=[], now=T0, **base).holders] == [T0 + 40]
    unbound = pod("team-b", "b2-x", 8, node="", job="b2")
    unbound["metadata"]["labels"][MAX_EXEC_TIME_LABEL] = "40"
    assert pod_release_deadline(unbound, T0) is None


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


# --- slices of GPUs (issue 32) ---------------------------------------------------------------------

MIG = "nvidia.com/mig-1g.10gb"


def mig_node(n: str, slices: int) -> dict:
    out = node(n, gpus=0)
    out["status"]["allocatable"][MIG] = str(slices)
    return out


def sliced(obj: dict, resource: str = MIG) -> dict:
    """The Workload's or pod's container asks one slice instead of whole GPUs."""
    spec = obj["spec"]["podSets"][0]["template"]["spec"] if "podSets" in obj["spec"] else obj["spec"]
    spec["containers"][0]["resources"]["requests"] = {resource: "1"}
    return obj


def slice_demand(ns: str, resource: str = MIG, pods: int = 1) -> ex.Demand:
    return replace(demand(ns, 0, pods), units=120, slice=resource)


def slice_pods(ns: str, job: str, n: int) -> list[dict]:
    return [sliced(pod(ns, f"{job}-{i}", 0, node="mig-node-1", job=job)) for i in range(n)]


def test_a_slice_job_waits_for_the_first_holder_of_its_slice_to_end() -> None:
    """14 x 1g.10gb, all held by team-b: "no free 1g.10gb ...; 14 in use by team-b", then b1's end."""
    wls = [
        sliced(running("team-b", "b1", 0, {"mig-node-1": 10}, since=0, limit=600, pods=10)),
        sliced(running("team-b", "b2", 0, {"mig-node-1": 4}, since=0, limit=1200, pods=4)),
    ]
    st = {**state([A, B]), "nodes": [*NODES, mig_node("mig-node-1", 14)]}
    st["pods"] = slice_pods("team-b", "b1", 10) + slice_pods("team-b", "b2", 4)
    snap = ex.Snapshot.build(workloads=wls, **st)
    d = slice_demand("team-a")
    v = snap.verdict(d)
    assert v.message == "no free 1g.10gb in training-pool (14 in all; 14 in use by team-b)"
    e = estimate(snap, d, now=T0, verdict=v, slack=SLACK, clock=lambda ts: f"+{int(ts - T0)}s")
    assert (e.starts_by, e.basis) == (T0 + 600 + SLACK, "team-b/b1 ends by +600s, then position 1")
    # The whole GPUs of the pool are free all along: they are not the room a slice waits for.
    assert snap.free("training-pool") == {"gpu-node-1": 8, "gpu-node-2": 8, "mig-node-1": 0}
    # A second slice job of team-a queued ahead takes b1's first freed slice; 10 free, so both fit then.
    ahead = sliced(queued("team-a", "a0", 0, limit=300, created=-60))
    snap = ex.Snapshot.build(workloads=[*wls, ahead], **st)
    e = estimate(snap, d, now=T0, slack=SLACK, clock=lambda ts: f"+{int(ts - T0)}s")
    assert e.starts_by == T0 + 600 + SLACK


def test_slices_and_whole_gpus_of_one_team_add_up_in_its_budget() -> None:
    """gpu: 2 = a whole GPU + 7 x 1g.10gb (840 + 7 x 120 of 1,680): the next slice waits for the budget,
    and the first of them to end (the whole GPU, at +300s) lets it start."""
    team = TeamQuota("team-a", "q", gpu=2, borrowing_limit=0)
    wls = [running("team-a", "w", 1, {"gpu-node-1": 1}, since=0, limit=300)]
    wls += [
        sliced(running("team-a", f"s{i}", 0, {"mig-node-1": 1}, since=0, limit=600 + i)) for i in range(7)
    ]
    st = {**state([team, B]), "nodes": [*NODES, mig_node("mig-node-1", 28)]}
    st["pods"] = [p for i in range(7) for p in slice_pods("team-a", f"s{i}", 1)]
    snap = ex.Snapshot.build(workloads=wls, **st)
    d = slice_demand("team-a")
    v = snap.verdict(d)
    assert v.cause == "quota" and v.message.startswith("team-a uses 2 of its 2 GPUs and may borrow 0")
    e = estimate(snap, d, now=T0, verdict=v, slack=SLACK, clock=lambda ts: f"+{int(ts - T0)}s")
    assert (e.starts_by, e.basis) == (T0 + 300 + SLACK, "w ends by +300s, then position 1")
    # More slices than its budget holds (17 x 1/7 > 2): only on borrowed GPUs, no bound.
    e = estimate(snap, slice_demand("team-a", pods=17), now=T0, verdict=v, slack=SLACK)
    assert not e.bounded and e.basis.startswith("it needs 2.43 GPUs, more than team-a's quota of 2")


def test_a_slice_the_pool_does_not_offer_or_held_without_end_has_no_bound() -> None:
    st = {**state([A, B]), "nodes": [*NODES, mig_node("mig-node-1", 2)]}
    st["pods"] = slice_pods("team-b", "b1", 2)
    wls = [sliced(running("team-b", "b1", 0, {"mig-node-1": 2}, since=0, limit=None, pods=2))]
    snap = ex.Snapshot.build(workloads=wls, **st)
    e = estimate(snap, slice_demand("team-a", "nvidia.com/mig-1g.20gb"), now=T0, slack=SLACK)
    assert e.basis == "training-pool offers 0 1g.20gb (nvidia.com/mig-1g.20gb) and it needs 1: it never fits"
    e = estimate(snap, slice_demand("team-a", pods=3), now=T0, slack=SLACK)
    assert e.basis == "training-pool offers 2 1g.10gb (nvidia.com/mig-1g.10gb) and it needs 3: it never fits"
    e = estimate(snap, slice_demand("team-a"), now=T0, slack=SLACK)
    assert not e.bounded and e.basis == "team-b/b1 (running) has no maxRuntime"


def test_the_clock_says_date_and_zone(monkeypatch) -> None:
    """`starts by 15:02` read tomorrow or from another zone is wrong: the time carries both (issue 42)."""
    from gpuctl.domain.estimate import clock_text

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        t = 1_796_000_000.5  # 2026-11-30 00:53:20.5 UTC
        assert clock_text(t)(t) == "2026-11-30 00:54 UTC"
        assert clock_text(t)(t + 3 * 86400) == "2026-12-03 00:54 UTC"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
