"""bench/trace.py's synthetic day and percentiles (the replay itself runs on the cluster)."""

from __future__ import annotations

from bench.trace import (
    ANY_POOL,
    TEAMS,
    fits,
    make_trace,
    manifest,
    pct,
    place,
    pod_job,
    reclaimable,
    unpin,
    workload_job,
)


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
    with_tas = manifest(item, "ns", tas=True)
    plain = manifest(item, "ns", tas=False)
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
    obj = manifest(moved[0], "ns", tas=True)
    assert "runwhere.ai/pool" not in obj["spec"]["template"]["spec"]["nodeSelector"]
    assert "runwhere.ai/pool" not in obj["metadata"]["labels"]
    pinned = manifest(next(i for i in trace if i.name == moved[0].name), "ns", tas=True)
    original = next(i for i in trace if i.name == moved[0].name)
    assert pinned["spec"]["template"]["spec"]["nodeSelector"]["runwhere.ai/pool"] == original.pool


def test_place_packs_the_fullest_node_first_and_needs_every_pod() -> None:
    assert place(1, 2, {"n1": 8, "n2": 3}) == ["n2"]
    assert place(2, 4, {"n1": 8, "n2": 3}) == ["n1", "n1"]
    assert place(2, 8, {"n1": 8, "n2": 7}) is None
    assert place(3, 1, {}) is None
    assert place(2, 0, {}) == []
