"""bench/trace.py's synthetic day and percentiles (the replay itself runs on the cluster)."""

from __future__ import annotations

from bench.trace import TEAMS, make_trace, manifest, pct


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
