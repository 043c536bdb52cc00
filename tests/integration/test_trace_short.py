"""Short variant of bench/trace.py: gpuctl's design, and the earlier gpuctl's ResourceQuota +
PriorityClass model, each replay a 60-second day on the local cluster (the bench runs an 8-minute day
in three designs, gpuctl, a Kueue-default baseline and the earlier gpuctl, and prints the table; the
Kueue-default baseline is covered by the unit tests of its manifests only)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.trace import PRIORITY_CLASS_PATH, QUOTA_GPU_KEY, SETUP, TEAMS, Result, make_trace, replay, reset
from gpuctl.cluster import path
from gpuctl.domain.gpus import quantity_gpus
from tests.integration.conftest import reset_gpuctl_state

DAY = 60.0


@contextmanager
def short_day(
    kube, kubeconfig: str, tmp_path: Path, design: str, prefix: str
) -> Iterator[tuple[dict, Result]]:
    """Replay a 60-second day of the trace in `design`; the cluster is cleaned up after the block."""
    ns = {t: f"{prefix}-{t}" for t in TEAMS}
    reset(kube, list(ns.values()))
    try:
        SETUP[design](kube, kubeconfig, ns, tmp_path)
        yield ns, replay(kube, design, ns, make_trace(7, DAY), DAY)
    finally:
        reset(kube, list(ns.values()))
        reset_gpuctl_state(kube)


def test_a_short_day_has_no_fragmentation_and_no_quota_violation(cluster, kube, tmp_path: Path) -> None:
    trace = make_trace(7, DAY)
    with short_day(kube, cluster, tmp_path, "gpuctl", "trace-s") as (_, res):
        pass
    assert res.jobs == len(trace)
    assert res.frag_pods == 0, res.stuck
    assert res.violations == 0
    assert 0.2 < res.util <= 1.0
    assert len(res.waits_all) == len(trace) and len(res.waits_quota) >= 10


def test_the_earlier_gpuctls_day_runs_without_kueue_within_each_teams_resource_quota(
    cluster, kube, tmp_path: Path
) -> None:
    with short_day(kube, cluster, tmp_path, "earlier", "trace-se") as (ns, res):
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
    assert res.jobs == len(make_trace(7, DAY)) and 0.2 < res.util <= 1.0
    assert refused, "the ResourceQuota never refused a pod: the day did not reach a team's quota"
    assert workloads == []  # Kueue left these namespaces alone
    assert (classes["gpuctl-high"], classes["gpuctl-medium"], classes["gpuctl-low"]) == (1000000, 500000, 100)
    assert not [pc for pc in kube.list(PRIORITY_CLASS_PATH) if pc["metadata"]["name"].startswith("gpuctl-")]
