"""The chaos suite's short variant (bench/chaos.py --short) on the session's local cluster.

Every fault of the full suite, with shorter waits: Kueue SIGKILLed and restarted, kube-apiserver
restarted, etcd paused 5 s, the leading `gpuctl serve` killed during a pool change, the webhook stopped
(failurePolicy Fail), the same documents submitted twice at once; meanwhile three teams submit a job a
second. Nothing accepted may be lost or duplicated, no sample may show a team over quota plus borrowing or
a pool over its Ready nodes, work must flow again after each fault and the Cohort must match the Ready
nodes within 5 s. About three minutes. The processes it restarts are recorded in the testbed's pid files,
so hack/cluster/down.sh still stops them.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import pytest

from bench.chaos import FAULTS, run, table
from bench.chaos import Testbed as Bed
from gpuctl.cluster import ApiError, path
from tests.integration.conftest import MANAGED_KINDS, reset_gpuctl_state

pytestmark = pytest.mark.integration


def _settled(kube, timeout: float = 120) -> None:
    """After etcd's pause and the API server's restart, its watch caches re-initialise for a while (lists
    answer 429 "storage is (re)initializing"): wait until every kind the cleanup lists answers."""
    deadline = time.monotonic() + timeout
    kinds = ("Namespace", "Node", *MANAGED_KINDS)
    while True:
        try:
            for kind in kinds:
                kube.list(path(kind))
            return
        except ApiError as e:
            if e.status not in (429, 500, 503) or time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_faults_lose_nothing_duplicate_nothing_and_admit_nothing_beyond_quota(cluster, kube, kubectl_bin):
    tb = Bed(Path(cluster).parent)
    if not (tb.run / "pids" / "kube-apiserver").exists():
        pytest.fail(
            f"{tb.run} is not a hack/cluster/up.sh run directory (no pids/): the suite restarts its processes"
        )
    before = {ns["metadata"]["name"] for ns in kube.list(path("Namespace"))}
    reset_gpuctl_state(kube)
    try:
        rows = run(tb, list(FAULTS), True, kubectl_bin)
    finally:
        with contextlib.suppress(OSError, ValueError):
            tb.send("etcd", signal.SIGCONT)  # never leave etcd paused
        _settled(kube)
        for ns in kube.list(path("Namespace")):
            name = ns["metadata"]["name"]
            if name.startswith("chaos-") and name not in before:
                with contextlib.suppress(ApiError):
                    kube.delete(path("Namespace", name))
        reset_gpuctl_state(kube)
    print("\n" + table(rows))
    by_fault = {r.fault: r for r in rows}
    assert set(FAULTS) <= set(by_fault)
    for r in rows:
        assert r.lost == 0 and r.duplicated == 0 and r.half_made == 0, table(rows)
        assert r.violations == 0, table(rows)
    for f in FAULTS:
        r = by_fault[f]
        assert r.recover_s is not None, f"{f}: work did not flow again\n{table(rows)}"
        assert r.cohort_s is not None and r.cohort_s <= 5, f"{f}: Cohort not right within 5 s\n{table(rows)}"
        assert r.submitted > 0
    webhook = " ".join(by_fault["webhook"].notes)
    assert "error names the webhook: True" in webhook and "'failed calling webhook' in error: True" in webhook
    dup = " ".join(by_fault["duplicate"].notes)
    assert "two CLIs -> exit codes [0, 1]" in dup and "Deployment True, Service True" in dup
    assert by_fault["all (final)"].accepted > 20
