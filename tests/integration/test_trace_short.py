"""Short variant of bench/trace.py: gpuctl's design, and the earlier gpuctl's ResourceQuota +
PriorityClass model, each replay a 60-second day on the local cluster (the bench runs an 8-minute day
in three designs, gpuctl, a Kueue-default baseline and the earlier gpuctl, and prints the table; the
Kueue-default baseline is covered by the unit tests of its manifests only)."""

from __future__ import annotations

from pathlib import Path

from bench.trace import (
    PRIORITY_CLASS_PATH,
    QUOTA_GPU_KEY,
    TEAMS,
    make_trace,
    replay,
    reset,
    setup_earlier,
    setup_gpuctl,
)
from gpuctl.cluster import path
from gpuctl.domain.gpus import quantity_gpus
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


def test_the_earlier_gpuctls_day_runs_without_kueue_within_each_teams_resource_quota(
    cluster, kube, tmp_path: Path
) -> None:
    day = 60.0
    trace = make_trace(7, day)
    ns = {t: f"trace-se-{t}" for t in TEAMS}
    reset(kube, list(ns.values()))
    try:
        setup_earlier(kube, cluster, ns, tmp_path)
        res = replay(kube, "earlier", ns, trace, day)
        refused = [
            e
            for n in ns.values()
            for e in kube.list(path("Event", namespace=n), field_selector="reason=FailedCreate")
            if "exceeded quota" in e.get("message", "")
        ]
        workloads = [w for n in ns.values() for w in kube.list(path("Workload", namespace=n))]
        for team, n in ns.items():
            (rq,) = kube.list(path("ResourceQuota", namespace=n))
            assert quantity_gpus(rq["spec"]["hard"][QUOTA_GPU_KEY]) == TEAMS[team]
        classes = {pc["metadata"]["name"]: pc["value"] for pc in kube.list(PRIORITY_CLASS_PATH)}
    finally:
        reset(kube, list(ns.values()))
        reset_gpuctl_state(kube)
    assert res.jobs == len(trace) and 0.2 < res.util <= 1.0
    assert refused, "the ResourceQuota never refused a pod: the day did not reach a team's quota"
    assert workloads == []  # Kueue left these namespaces alone
    assert (classes["gpuctl-high"], classes["gpuctl-medium"], classes["gpuctl-low"]) == (1000000, 500000, 100)
    assert not [pc for pc in kube.list(PRIORITY_CLASS_PATH) if pc["metadata"]["name"].startswith("gpuctl-")]
