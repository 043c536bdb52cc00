"""Short variant of bench/trace.py: gpuctl's design replays a 60-second day on the local cluster
(the bench runs an 8-minute day twice, gpuctl and a Kueue-default baseline, and prints the table)."""

from __future__ import annotations

from pathlib import Path

from bench.trace import TEAMS, make_trace, replay, reset, setup_gpuctl
from tests.integration.conftest import reset_gpuctl_state


def test_a_short_day_has_no_fragmentation_and_no_quota_violation(cluster, kube, tmp_path: Path) -> None:
    day = 60.0
    trace = make_trace(7, day)
    ns = {t: f"trace-s-{t}" for t in TEAMS}
    reset(kube, list(ns.values()))
    try:
        setup_gpuctl(kube, cluster, ns, tmp_path)
        res = replay(kube, "gpuctl", ns, trace, day)
    finally:
        reset(kube, list(ns.values()))
        reset_gpuctl_state(kube)
    assert res.jobs == len(trace)
    assert res.frag_pods == 0
    assert res.violations == 0
    assert 0.2 < res.util <= 1.0
    assert len(res.waits_all) == len(trace) and len(res.waits_quota) >= 10
