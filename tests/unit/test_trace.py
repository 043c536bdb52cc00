"""bench/trace.py's synthetic day and percentiles (the replay itself runs on the cluster)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.trace import (
    ANY_POOL,
    CAPACITY,
    DECLARE_LATENCY_SECONDS,
    GRACE_SECONDS,
    TEAMS,
    Item,
    Result,
    count_pods,
    declared_runtime,
    estimate_summary,
    fake_runtime,
    fits,
    fragmented,
    local_nodes,
    main,
    make_trace,
    manifest,
    offline_day,
    offline_utilisation,
    pct,
    place,
    pod_job,
    pool_gpus,
    quota_allows,
    reclaimable,
    seeds_arg,
    unpin,
    utilisation_bound,
    workload_job,
)
from bench.trace_days import (
    BLOCK_LABEL,
    GANG_CAPACITY,
    GANG_POOL,
    GANG_RACKS,
    GANG_SHARE,
    GANG_TEAMS,
    GPUS_CUT,
    INFERENCE_SHARE,
    NOTEBOOK_SHARE,
    RACK_LABEL,
    SLICE_CAPACITY,
    SLICE_POOL,
    WHOLE_POOL,
    day_gpu_seconds,
    gang_day,
    gang_nodes,
    gang_share,
    job_class,
    pool_yaml,
    slice_day,
    slice_equivalents,
    slice_nodes,
)
from gpuctl.builders import TargetPool
from gpuctl.constants import GANG_PLACEMENT, GPU_UNITS, TAS_PREFERRED, TAS_REQUEST_KEYS
from gpuctl.domain.sharing import Mode, choose_slice, pool_sharing, resource_units
from gpuctl.spec.share import parse_share


def test_trace_is_deterministic_and_has_every_kind_and_size() -> None:
    a, b = make_trace(7, 480), make_trace(7, 480)
    assert a == b and make_trace(8, 480) != a
    assert {i.kind for i in a} == {"training", "inference", "notebook"}
    assert {i.gpus for i in a if i.kind == "training"} == {1, 2, 4, 8}
    assert {i.team for i in a} == set(TEAMS)
    assert all(0 <= i.t <= 480 for i in a)
    assert [i.t for i in a] == sorted(i.t for i in a)
    # Heavy tail: the longest training run is many times the median one.
    runs = sorted(i.runtime for i in a if i.kind == "training")
    assert runs[-1] > 5 * runs[len(runs) // 2]


def test_baseline_manifests_drop_the_topology_request() -> None:
    item = next(i for i in make_trace(7, 480) if i.kind == "training" and i.pods == 2)
    with_tas = manifest(item, "ns", "gpuctl")
    plain = manifest(item, "ns", "baseline")
    assert with_tas["spec"]["parallelism"] == 2
    key = "kueue.x-k8s.io/podset-unconstrained-topology"
    assert with_tas["spec"]["template"]["metadata"]["annotations"][key] == "true"
    assert key not in plain["spec"]["template"]["metadata"].get("annotations", {})


def test_percentiles_are_nearest_rank() -> None:
    v = [float(x) for x in range(1, 101)]
    assert (pct(v, 50), pct(v, 99), pct(v, 100)) == (50.0, 99.0, 100.0)
    assert pct([3.0], 99) == 3.0


def test_room_is_per_node() -> None:
    assert fits(1, 8, [8, 0])
    assert not fits(1, 8, [4, 4])  # 8 free, but on two nodes
    assert fits(2, 4, [4, 4]) and fits(2, 4, [8, 0]) and not fits(3, 4, [8, 3])
    assert not fits(1, 2, [-2, 1])  # an over-committed node gives no room
    assert fits(1, 0, [])


def test_reclaimable_follows_kueues_candidate_order_while_the_team_borrows() -> None:
    # Team quota 8, holding 14: (priority, admitted at, GPUs, job).
    held = [(500000, 10.0, 8, "old-medium"), (100, 20.0, 4, "low"), (500000, 30.0, 2, "new-medium")]
    # Lowest priority first (low: 14 -> 10), then the newest of equal priority (new-medium: 10 -> 8);
    # the team is then within its quota, so old-medium is not reclaimable.
    assert reclaimable(held, 8) == {"low", "new-medium"}
    assert reclaimable(held, 14) == set()
    assert reclaimable(held, 0) == {"low", "new-medium", "old-medium"}


def test_workloads_and_pods_map_to_their_trace_job() -> None:
    job_pod = {"metadata": {"name": "tr-a-1-x7", "labels": {"batch.kubernetes.io/job-name": "tr-a-1"}}}
    nb_pod = {"metadata": {"name": "nb-a-0-0", "labels": {"app": "nb-a-0"}}}
    dep_pod = {"metadata": {"name": "serve-a-5f9b-s97", "labels": {"app": "serve-a"}}}
    pods = {p["metadata"]["name"]: p for p in (job_pod, nb_pod, dep_pod)}
    assert [pod_job(p) for p in (job_pod, nb_pod, dep_pod)] == ["tr-a-1", "nb-a-0", "serve-a"]

    def wl(*owners: tuple[str, str]) -> dict:
        return {"metadata": {"ownerReferences": [{"kind": k, "name": n} for k, n in owners]}}

    assert workload_job(wl(("Job", "tr-a-1")), pods) == "tr-a-1"
    # A StatefulSet's Workload lists its pods too, sometimes first: still the notebook, not "nb-a".
    assert workload_job(wl(("Pod", "nb-a-0-0"), ("StatefulSet", "nb-a-0")), pods) == "nb-a-0"
    assert workload_job(wl(("Pod", "nb-a-0-0")), pods) == "nb-a-0"
    assert workload_job(wl(("Pod", "serve-a-5f9b-s97")), pods) == "serve-a"
    assert workload_job(wl(("Pod", "serve-b-7bd9-2vx")), {}) == "serve-b"  # pod already gone


def test_the_any_pool_what_if_drops_only_small_training_jobs_pool() -> None:
    trace = make_trace(7, 480)
    unpinned = unpin(trace)
    assert [i.name for i in unpinned] == [i.name for i in trace]
    moved = [i for i in unpinned if i.pool == ANY_POOL]
    assert moved and all(i.kind == "training" and i.gpus <= 4 for i in moved)
    assert all(i.pool != ANY_POOL for i in unpinned if i.kind != "training" or i.gpus == 8)
    obj = manifest(moved[0], "ns", "gpuctl")
    assert "runwhere.ai/pool" not in obj["spec"]["template"]["spec"].get("nodeSelector", {})
    assert "runwhere.ai/pool" not in obj["metadata"]["labels"]
    # Issue 23: the pools it may run in, as gpuctl's YAML says them (`pool: [...]`).
    (term,) = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {
            "key": "runwhere.ai/pool",
            "operator": "In",
            "values": ["dev-pool", "inference-pool", "training-pool"],
        }
    ]
    pinned = manifest(next(i for i in trace if i.name == moved[0].name), "ns", "gpuctl")
    original = next(i for i in trace if i.name == moved[0].name)
    assert pinned["spec"]["template"]["spec"]["nodeSelector"]["runwhere.ai/pool"] == original.pool


def test_place_packs_the_fullest_node_first_and_needs_every_pod() -> None:
    assert place(1, 2, {"n1": 8, "n2": 3}) == ["n2"]
    assert place(2, 4, {"n1": 8, "n2": 3}) == ["n1", "n1"]
    assert place(2, 8, {"n1": 8, "n2": 7}) is None
    assert place(3, 1, {}) is None
    assert place(2, 0, {}) == []


def test_earlier_gpuctl_manifests_are_plain_prioritised_objects_without_kueue() -> None:
    trace = make_trace(7, 480)
    for kind in ("training", "notebook", "inference"):
        item = next(
            i for i in trace if (i.kind == kind and i.priority != "medium") or i.kind == kind == "notebook"
        )
        obj = manifest(item, "ns", "earlier")
        pod_meta, pod = obj["spec"]["template"]["metadata"], obj["spec"]["template"]["spec"]
        assert "suspend" not in obj["spec"]
        for m in (obj["metadata"], pod_meta):
            assert not any(k.startswith("kueue.x-k8s.io/") for k in m.get("labels", {}))
            assert not any(k.startswith("kueue.x-k8s.io/") for k in m.get("annotations", {}))
        assert pod["priorityClassName"] == f"gpuctl-{item.priority}"
        assert pod["nodeSelector"] == {"runwhere.ai/pool": item.pool}
        assert pod["terminationGracePeriodSeconds"] == GRACE_SECONDS
        res = pod["containers"][0]["resources"]
        assert res["requests"] == res["limits"] and res["requests"]["nvidia.com/gpu"] == str(item.gpus)
        if kind == "training":
            assert (obj["spec"]["backoffLimit"], obj["spec"]["ttlSecondsAfterFinished"]) == (3, 86400)
    # The grace period is the same in every design, and None leaves Kubernetes' default.
    item = trace[0]
    assert (
        manifest(item, "ns", "gpuctl", grace=7)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        == 7
    )
    assert (
        "terminationGracePeriodSeconds"
        not in manifest(item, "ns", "baseline", grace=None)["spec"]["template"]["spec"]
    )
    # gpuctl's own objects keep Kueue's suspension and queue label.
    ours = manifest(next(i for i in trace if i.kind == "training"), "ns", "gpuctl")
    assert (
        ours["spec"]["suspend"] is True
        and ours["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    )


def _pod(job: str, gpus: int, *, phase: str = "Pending", node: str = "", deleting: bool = False) -> dict:
    pod: dict = {
        "metadata": {"name": f"{job}-x", "namespace": "ns", "labels": {"batch.kubernetes.io/job-name": job}},
        "spec": {
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
            "nodeSelector": {"runwhere.ai/pool": "p"},
        },
        "status": {"phase": phase},
    }
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}
        ]
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:20Z"
    return pod


def test_count_pods_sees_what_a_resource_quota_counts_and_what_waits() -> None:
    pods = [
        _pod("a", 4, phase="Running", node="n1"),
        _pod("a", 4),  # a 2-pod job: one pod on a node, one Pending
        _pod("b", 2, phase="Succeeded", node="n1"),
        _pod("c", 1, phase="Running", node="n2", deleting=True),  # terminating: still in the quota
        _pod("d", 8, phase="Failed", node="n2"),  # preempted: out of the quota
    ]
    c = count_pods(pods)
    a = c[("ns", "a")]
    assert (a.bound, a.pending, a.succeeded, a.quota_gpus) == (1, 1, 0, 8)
    assert a.scheduled_at > 0
    assert (c[("ns", "b")].succeeded, c[("ns", "b")].quota_gpus) == (1, 0)
    assert (c[("ns", "c")].bound, c[("ns", "c")].pending, c[("ns", "c")].quota_gpus) == (0, 0, 1)
    assert c[("ns", "d")].quota_gpus == 0


def test_quota_allows_per_design() -> None:
    item = next(
        i for i in make_trace(7, 480) if i.kind == "training" and i.team == "b" and i.pool == "training-pool"
    )
    g = item.gpus
    # Kueue defaults: team b's training-pool share is 4 GPUs, whatever it holds elsewhere.
    assert quota_allows("baseline", item, 1, 0, {}, {("b", "training-pool"): 4 - g})
    assert not quota_allows("baseline", item, 1, 0, {}, {("b", "training-pool"): 5 - g})
    # Earlier gpuctl: the team's ResourceQuota (8), which already counts the job's created pods.
    assert quota_allows("earlier", item, 1, 0, {"b": 8 - g}, {})
    assert not quota_allows("earlier", item, 1, 0, {"b": 9 - g}, {})
    assert quota_allows("earlier", item, 1, 1, {"b": 8}, {})
    assert quota_allows("gpuctl", item, 1, 0, {"b": 100}, {})


def test_an_unschedulable_pod_without_kueue_is_fragmentation_only_if_its_pool_has_the_gpus_spread() -> None:
    pool_nodes = {"p": ["n1", "n2"], "q": ["n3"]}
    pod = _pod("a", 8)
    assert fragmented(pod, pool_nodes, {"n1": 4, "n2": 4, "n3": 8})
    assert not fragmented(pod, pool_nodes, {"n1": 4, "n2": 3, "n3": 8})  # not enough GPUs: plain waiting
    assert not fragmented(pod, pool_nodes, {"n1": 8, "n2": 0, "n3": 0})  # a node holds it


def test_the_bound_is_the_offered_work_when_it_fits_and_the_capacity_when_it_does_not() -> None:
    one = {"training-pool": 4}
    job = Item(10.0, "a", "training", "j", 2, 1, "training-pool", "low", 50.0)
    assert utilisation_bound([job], 100, one) == 2 * 50 / (4 * 100)
    # A job runs only after its submission and counts only inside the day.
    late = replace(job, t=80.0)
    assert utilisation_bound([late], 100, one) == 2 * 20 / (4 * 100)
    # A job uses at most its GPUs at a time: one 1-GPU job all day fills a quarter of 4 GPUs.
    assert utilisation_bound([replace(job, gpus=1, t=0.0, runtime=500.0)], 100, one) == 0.25
    # More work than GPUs: the pool is full from the first submission on.
    flood = [replace(job, name=f"j{n}", t=0.0, gpus=4, runtime=100.0) for n in range(3)]
    assert utilisation_bound(flood, 100, one) == 1.0
    # Pinned to its pool: another pool's idle GPUs do not help it.
    two = {"training-pool": 4, "dev-pool": 4}
    assert utilisation_bound(flood, 100, two) == 0.5
    # A job that names no pool may use any of them, still at most its GPUs at a time.
    assert utilisation_bound([replace(f, pool=ANY_POOL) for f in flood], 100, two) == 1.0
    assert utilisation_bound([replace(job, pool=ANY_POOL, t=0.0, runtime=500.0)], 100, two) == 2 / 8


@given(
    st.lists(
        st.tuples(st.integers(0, 90), st.sampled_from([1, 2, 4, 8]), st.integers(1, 2), st.integers(1, 60)),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=60, deadline=None)
def test_no_real_schedule_beats_the_bound(jobs: list[tuple[int, int, int, int]]) -> None:
    trace = [
        Item(float(t), "a", "training", f"j{n}", g, p, "training-pool", "low", float(r))
        for n, (t, g, p, r) in enumerate(jobs)
        if g * p <= 8
    ]
    bound = utilisation_bound(trace, 100, {"training-pool": 8})
    nodes = {"n1": ("training-pool", 8)}
    for largest_first in (False, True):
        assert offline_utilisation(trace, 100, nodes, largest_first=largest_first) <= bound + 1e-9
    assert bound <= min(1.0, sum(i.gpus * i.pods * i.runtime for i in trace) / 800) + 1e-9


def test_the_seed_7_day_bound() -> None:
    """The figure the closing notes quote: on the headline trace no scheduler passes 65.4 %."""
    pools = {"training-pool": 16, "inference-pool": 8, "dev-pool": 4}
    assert round(100 * utilisation_bound(make_trace(7, 480), 480, pools), 1) == 65.4
    assert pool_gpus({"n1": ("training-pool", 8), "n2": ("dev-pool", 4), "c": ("", 0)}) == {
        "training-pool": 8,
        "inference-pool": 0,
        "dev-pool": 4,
    }


def test_offline_packing_keeps_pods_whole_and_can_put_the_largest_job_first() -> None:
    nodes = {"n1": ("training-pool", 8), "n2": ("training-pool", 8), "cpu": ("compute-pool", 0)}
    big = Item(0.0, "a", "training", "big", 8, 1, "training-pool", "low", 100.0)
    smalls = [replace(big, name=f"s{n}", gpus=4, t=0.0, runtime=50.0) for n in range(3)]
    # 12 of 16 GPUs free at t=0 but in submission order the 4-GPU jobs come first and take 4 GPUs of
    # each node (fullest first: one node gets two), so the 8-GPU job waits until t=50.
    fifo = offline_utilisation([*smalls, big], 100, nodes, largest_first=False)
    assert fifo == (3 * 4 * 50 + 8 * 50) / (16 * 100)
    largest = offline_utilisation([*smalls, big], 100, nodes, largest_first=True)
    assert largest == (8 * 100 + 2 * 4 * 50 + 4 * 50) / (16 * 100)
    # A 2-pod job needs room for each pod on a node, not just enough GPUs in the pool.
    pair = replace(big, name="pair", gpus=8, pods=2, runtime=10.0)
    split = {"n1": ("training-pool", 12), "n2": ("training-pool", 4)}
    assert offline_utilisation([pair], 100, split, largest_first=False) == 0.0
    assert offline_utilisation([pair], 100, nodes, largest_first=False) == 16 * 10 / (16 * 100)
    # A job that names no pool may use any pool's nodes.
    other = {"n1": ("dev-pool", 4)}
    assert offline_utilisation([replace(big, gpus=4, pool=ANY_POOL)], 100, other, largest_first=False) == 1.0
    # ... but all its pods in one pool (Kueue assigns a pod set one flavor): 2 x 4 GPUs never split
    # over a dev-pool node and an inference-pool node.
    two = {"n1": ("dev-pool", 4), "n2": ("inference-pool", 4)}
    pair4 = replace(big, gpus=4, pods=2, pool=ANY_POOL)
    assert offline_utilisation([pair4], 100, two, largest_first=False) == 0.0
    two["n3"] = ("inference-pool", 4)
    assert offline_utilisation([pair4], 100, two, largest_first=False) == 8 * 100 / (12 * 100)


def test_the_baseline_model_caps_each_team_per_pool_and_orders_by_priority() -> None:
    nodes = {"n1": ("training-pool", 8)}
    a1 = Item(0.0, "a", "training", "a1", 4, 1, "training-pool", "low", 50.0)
    a2 = replace(a1, name="a2")
    b1 = replace(a1, name="b1", team="b", runtime=100.0)
    # Without caps all three want the node at t=0: a1 and a2 fill it, b1 waits until t=50.
    assert offline_utilisation([a1, a2, b1], 100, nodes, largest_first=False) == (2 * 4 * 50 + 4 * 50) / 800
    # Capped at 4 GPUs per team, a2 waits for a1 while b1 runs beside it.
    caps = {("a", "training-pool"): 4, ("b", "training-pool"): 4}
    assert offline_utilisation([a1, a2, b1], 100, nodes, largest_first=False, caps=caps) == 8 * 100 / 800
    # A team without quota in a pool runs nothing there.
    assert offline_utilisation([replace(a1, team="c")], 100, nodes, largest_first=False, caps=caps) == 0.0
    # Inside a team, priority before submission: a later high job goes before an earlier low one.
    hi = replace(a1, name="hi", t=10.0, priority="high", runtime=10.0)
    one = {("a", "training-pool"): 4}
    blocker = replace(a1, name="blocker", runtime=20.0)
    # blocker holds the quota until t=20; then hi (submitted at 10) runs before a2 (submitted at 0).
    got = offline_utilisation([blocker, a2, hi], 100, nodes, largest_first=False, caps=one)
    assert got == 4 * (20 + 10 + 50) / 800


def test_offline_days_use_the_local_clusters_nodes_and_model_seed_7() -> None:
    """--offline needs no cluster; on seed 7 its Kueue-defaults model gives 50.1 % (the replay: 50.0)."""
    nodes = local_nodes()
    assert pool_gpus(nodes) == {"training-pool": 16, "inference-pool": 8, "dev-pool": 4}
    assert sum(g for _, g in nodes.values()) == CAPACITY
    day = offline_day(7, 480, nodes, any_pool=False)
    assert [round(100 * v, 1) for v in (day.bound, day.fifo, day.largest, day.baseline)] == [
        65.4,
        60.3,
        64.1,
        50.1,
    ]
    assert round(100 * day.lead, 1) == 10.2
    assert seeds_arg("1-3,7") == [1, 2, 3, 7]


def test_offline_mode_prints_a_row_per_day_and_the_summary(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--offline", "7,8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["seed", "offered", "upper"]
    assert [line.split()[0] for line in out[1:3]] == ["7", "8"]
    # seed 7 leads by +10.2, seed 8 by +29.3
    assert out[-1].endswith("median +19.8, range +10.2 .. +29.3; >= +15 on 1 of 2 days")


def test_declared_max_runtime_is_the_run_time_rounded_up_with_room() -> None:
    """Users declare maxRuntime above the run time (Kueue would stop the job at it): the real run time
    rounded up to a quarter hour plus a quarter hour, compressed, plus the cluster's uncompressed latency;
    never within 2 s of the fake run time."""
    day = 480.0
    k = day / 86400
    for item in make_trace(4, day):
        got = declared_runtime(item, day)
        if item.kind == "inference":
            assert got is None
            continue
        assert got is not None and got >= fake_runtime(item) + 2
        assert got >= item.runtime + 900 * k - 1e-9
        assert got <= item.runtime + 2 * 900 * k + 1 + DECLARE_LATENCY_SECONDS
        labels = manifest(item, "ns", "gpuctl", day=day)["metadata"]["labels"]
        if item.kind == "training":  # a notebook's is on its pods (Kueue reads it there)
            assert labels["kueue.x-k8s.io/max-exec-time-seconds"] == str(got)
    plain = manifest(make_trace(4, day)[1], "ns", "baseline", day=day)
    assert "kueue.x-k8s.io/max-exec-time-seconds" not in plain["metadata"].get("labels", {})


def test_estimate_summary_counts_bounds_errors_and_explains_late_starts() -> None:
    def row(
        job: str, by: float | None, started: float | None, *, now: bool = False, summary: str = ""
    ) -> dict:
        return {
            "job": job,
            "pool": "training-pool",
            "priority": "medium",
            "at": 10.0,
            "now": now,
            "by": by,
            "by_bench": None if by is None else by - 5,
            "started": started,
            "summary": summary or f"starts by {by}",
        }

    r = Result("gpuctl")
    r.estimates = [
        row("early", 50.0, 40.0),
        row("late", 50.0, 60.0),
        row("never", 50.0, None),
        row("now", 10.0, 11.0, now=True),
        row("free", None, 30.0, summary="no bound: it may run in any of dev-pool, training-pool: ..."),
    ]
    r.starts = [
        ("late", "training-pool", "medium", 0.0, 60.0),
        ("jumper", "training-pool", "high", 20.0, 55.0),  # after the estimate, admitted first
        ("elsewhere", "dev-pool", "high", 20.0, 30.0),
        ("older", "training-pool", "high", 5.0, 30.0),
    ]
    sm = estimate_summary(r, 100.0)
    assert (sm["estimated"], sm["now"], sm["bounded"], sm["unbounded"]) == (5, 1, 3, 1)
    assert sm["unbounded_why"] == {"any-pool job": 1}
    assert sm["by"]["late"] == 2  # "late", and "never" still waiting past its bound at the day's end
    assert sm["by"]["p90"] == 10.0
    assert sm["by_bench"]["late"] == 2 and sm["by_bench"]["p90"] == 15.0
    late = sm["by"]["late_jobs"][0]
    assert late.startswith("late (training-pool, medium): started 10.0 s after")
    assert "1 jobs submitted after the estimate admitted in its pool before it (1 of higher priority)" in late


# ----------------------------------------------------------------------------- the days of issues 31 and 32
def test_the_gang_day_is_deterministic_and_gangs_hold_the_chosen_share() -> None:
    a, b = gang_day(7, 300), gang_day(7, 300)
    assert a == b and gang_day(8, 300) != a
    assert [i.t for i in a] == sorted(i.t for i in a)
    gangs = [i for i in a if i.pods > 1]
    assert (len(a), len(gangs)) == (113, 5)  # seed 7: 108 one-pod jobs and 5 gangs
    assert {(i.pods, i.gpus) for i in gangs} == {(2, 8), (4, 8)}
    # Every gang fits its team's quota in one piece (Kueue's defaults could never admit it otherwise).
    assert all(i.pods * i.gpus <= GANG_TEAMS[i.team] for i in gangs)
    assert {i.gpus for i in a if i.pods == 1} == {1, 2, 4, 8}
    assert all(i.pool == GANG_POOL and i.kind == "training" for i in a)
    assert abs(gang_share(a, 300) - GANG_SHARE) < 0.03
    # The share is the generator's knob, on many days: within one gang of it.
    for seed in range(1, 21):
        for share in (0.3, 0.5):
            assert abs(gang_share(gang_day(seed, 300, share), 300) - share) < 0.08, (seed, share)


def test_gang_share_counts_gpu_hours_within_the_day() -> None:
    one = Item(0.0, "a", "training", "x", 8, 1, GANG_POOL, "low", 100.0)
    gang = Item(250.0, "a", "training", "g", 8, 2, GANG_POOL, "low", 100.0)  # 50 s of it in the day
    assert day_gpu_seconds([one, gang], 300) == 8 * 100 + 16 * 50
    assert gang_share([one, gang], 300) == 800 / 1600
    assert day_gpu_seconds([one], 300, {"x": 0.5}) == 50.0


def test_a_gangs_yaml_builds_an_indexed_job_placed_by_rack_and_the_baseline_drops_it() -> None:
    from bench.trace_days_replay import day_manifest

    gang = next(i for i in gang_day(7, 300) if i.pods == 4)
    facts = TargetPool(name=GANG_POOL, topology=(BLOCK_LABEL, RACK_LABEL))
    ours = day_manifest(gang, "ns", "gpuctl", 300, facts)
    assert (ours["spec"]["parallelism"], ours["spec"]["completionMode"]) == (4, "Indexed")
    pod = ours["spec"]["template"]
    # gpuctl's gang placement: one node preferred, then Kueue climbs to a rack (GANG_PLACEMENT).
    assert pod["metadata"]["annotations"][TAS_PREFERRED] == GANG_PLACEMENT[TAS_PREFERRED]
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert pod["spec"]["terminationGracePeriodSeconds"] == GRACE_SECONDS
    assert ours["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"]
    plain = day_manifest(gang, "ns", "baseline", 300, facts)
    assert plain["spec"]["parallelism"] == 4
    assert not set(plain["spec"]["template"]["metadata"].get("annotations", {})) & set(TAS_REQUEST_KEYS)
    assert "kueue.x-k8s.io/max-exec-time-seconds" not in plain["metadata"]["labels"]


def test_the_slice_day_differs_from_the_whole_gpu_day_only_in_what_it_asks() -> None:
    sliced, whole = slice_day(7, 300, sliced=True), slice_day(7, 300, sliced=False)
    assert sliced == slice_day(7, 300, sliced=True) and slice_day(8, 300, sliced=True) != sliced
    strip = [(i.t, i.team, i.kind, i.name, i.gpus, i.runtime) for i in sliced]
    assert strip == [(i.t, i.team, i.kind, i.name, i.gpus, i.runtime) for i in whole]
    kinds = {k: sum(i.kind == k for i in sliced) for k in ("notebook", "inference", "training")}
    assert kinds == {"notebook": 32, "inference": 6, "training": 28}
    assert {i.share for i in sliced if i.kind == "notebook"} == {NOTEBOOK_SHARE}
    assert {i.share for i in sliced if i.kind == "inference"} == {INFERENCE_SHARE}
    assert all(i.share is None for i in whole)
    assert all(i.share is None for i in sliced if i.kind == "training")
    assert {i.pool for i in sliced} == {SLICE_POOL} and {i.pool for i in whole} == {WHOLE_POOL}


def test_the_slices_are_what_gpuctl_chooses_on_the_fake_mig_nodes_and_cost_the_quota_rule() -> None:
    ps = pool_sharing(slice_nodes(sliced=True))
    assert (ps.mode, ps.profiles) == (Mode.MIG_MIXED, {"1g.10gb", "3g.40gb"})
    assert pool_sharing(slice_nodes(sliced=False)).mode is Mode.NONE
    for item in (i for i in slice_day(7, 300, sliced=True) if i.share):
        chosen = choose_slice(parse_share(item.share), SLICE_POOL, ps.mode, ps.model, ps.profiles)
        assert chosen.profile == {NOTEBOOK_SHARE: "1g.10gb", INFERENCE_SHARE: "3g.40gb"}[item.share]
        assert slice_equivalents(item) == pytest.approx(resource_units(chosen.resource) / GPU_UNITS)
    # The nodes' 16 GPUs: 10 whole, 3 as 21 x 1g.10gb, 3 as 6 x 3g.40gb.
    alloc = [n["status"]["allocatable"] for n in slice_nodes(sliced=True)]
    whole = sum(int(a["nvidia.com/gpu"]) for a in alloc)
    assert whole + 21 // 7 + 6 // 2 == SLICE_CAPACITY and SLICE_CAPACITY - whole == GPUS_CUT
    assert sum(int(a.get("nvidia.com/mig-1g.10gb", 0)) for a in alloc) == 21


def test_a_notebooks_share_builds_one_mig_slice() -> None:
    from bench.trace_days_replay import day_manifest

    nb = next(i for i in slice_day(7, 300, sliced=True) if i.kind == "notebook")
    res = "nvidia.com/mig-1g.10gb"
    facts = TargetPool(name=SLICE_POOL, gpu_resource=res, slice_resource=res)
    obj = day_manifest(nb, "ns", "slices", 300, facts)
    requests = obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests[res] == "1" and "nvidia.com/gpu" not in requests


def test_the_slice_layout_holds_the_days_peak_and_whole_gpus_do_not() -> None:
    """Offline: the most notebooks and services at once on seed 7 fit the cut GPUs' slices, while as
    whole GPUs they are more than the 16 GPUs (so the whole-GPU day must queue)."""

    def peak(items: list[Item]) -> int:
        events = sorted([(i.t, 1) for i in items] + [(i.t + i.runtime, -1) for i in items])
        now = most = 0
        for _, d in events:
            now += d
            most = max(most, now)
        return most

    day = slice_day(7, 300, sliced=True)
    notebooks = peak([i for i in day if i.kind == "notebook"])
    services = peak([i for i in day if i.kind == "inference"])
    assert notebooks <= 21 and services <= 6
    assert notebooks + services > SLICE_CAPACITY
    assert {job_class(i) for i in day} == {"notebook", "inference", "training"}
    assert {job_class(i) for i in gang_day(7, 300)} == {"gang", "training"}


def test_the_fake_gang_pool_is_two_racks_of_four_8_gpu_nodes() -> None:
    nodes = gang_nodes()
    racks = [n["metadata"]["labels"][RACK_LABEL] for n in nodes]
    assert (racks.count("r1"), racks.count("r2")) == (4, 4)
    assert {n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes} == {"8"}
    assert GANG_CAPACITY == 64 == sum(GANG_TEAMS.values())
    doc = pool_yaml("gangs")
    assert f"topology: [{BLOCK_LABEL}, {RACK_LABEL}]" in doc and all(n in doc for n in GANG_RACKS)
