"""Queue positions: `get jobs -o wide` asks Kueue's visibility API (served through the API server's
aggregation layer, as on a real cluster); without it gpuctl computes them from the Workloads
(gpuctl.domain.workload.queue_positions). Both must give Kueue's order."""

from __future__ import annotations

import time

from gpuctl.cluster import path
from gpuctl.cluster.reader import ClusterReader
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import list_job_rows
from tests.integration.conftest import wait_until
from tests.integration.test_cli_cluster import _training, gpuctl, pools, teams  # noqa: F401 - fixtures


class NoVisibility(ClusterReader):
    """A cluster whose Kueue does not serve the visibility API."""

    def pending_workloads(self, cluster_queue: str) -> None:
        return None


def test_positions_from_kueue_and_computed_agree(pools, teams, gpuctl, kube, tmp_path) -> None:  # noqa: F811
    _, b = teams
    assert kube.get("/apis/visibility.kueue.x-k8s.io/v1beta2")["groupVersion"].startswith("visibility")
    # b has an 8-GPU hard cap; a high-priority holder that nothing preempts keeps the rest waiting
    files = [_training(tmp_path, "hold", b, 8, priority="high", runtime="30m")]
    files += [
        _training(tmp_path, f"w{i}-{prio}", b, 2, priority=prio, runtime="30m")
        for i, prio in enumerate(["low", "medium", "high", "low", "high"])
    ]
    for f in files:
        rc, _, err = gpuctl("create", "-f", f)
        assert rc == 0, err
        time.sleep(1.1)  # creationTimestamp has whole seconds: equal priorities are then ordered by it

    def waiting() -> list:
        rows = [r for r in list_job_rows(kube, b, gpus=False) if r.status == "Queued"]
        return rows if len(rows) == 5 and all(r.position for r in rows) else []

    rows = wait_until(waiting, 60, what="five jobs queued with positions")
    from_kueue = {r.name: r.position for r in rows}
    # high before medium before low; equal priority: older first
    assert sorted(from_kueue, key=from_kueue.__getitem__) == [
        "w2-high",
        "w4-high",
        "w1-medium",
        "w0-low",
        "w3-low",
    ]
    computed = Inventory(NoVisibility(kube), b).positions
    by_job = {
        j["metadata"]["name"]: computed.get(j["metadata"]["uid"])
        for j in kube.list(path("Job", namespace=b))
        if j["metadata"]["name"] != "hold"
    }
    assert by_job == from_kueue
    assert Inventory(kube, b).positions != {}  # the CLI's reader asked Kueue
    assert kube._visibility == "v1beta2"
