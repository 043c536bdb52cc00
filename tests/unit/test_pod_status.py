"""A pod's status word comes from kubectl's printed STATUS (gpuctl.domain.status.printed_pod_status, a port
of the API server's printPod), so a pod read as an object and the same pod read as a Table row give
one word. The expected words below are kubectl's; tests/integration/test_pod_table.py compares the
port with the API server's own printing on live pods."""

from __future__ import annotations

import pytest

from gpuctl.domain.objects import pod_finished
from gpuctl.domain.status import pod_ready, pod_status, printed_pod_status


def _pod(
    *,
    phase: str = "Running",
    containers: list[dict] | None = None,
    inits: list[dict] | None = None,
    init_specs: list[dict] | None = None,
    conditions: list[dict] | None = None,
    deleting: bool = False,
    reason: str = "",
    gates: list[str] | None = None,
) -> dict:
    meta: dict = {"name": "p", "namespace": "ns", "uid": "u"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    spec: dict = {"containers": [{"name": f"c{i}"} for i in range(len(containers or [{}]))]}
    if init_specs:
        spec["initContainers"] = init_specs
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict = {"phase": phase, "conditions": conditions or []}
    if reason:
        status["reason"] = reason
    if containers is not None:
        status["containerStatuses"] = containers
    if inits is not None:
        status["initContainerStatuses"] = inits
    return {"metadata": meta, "spec": spec, "status": status}


RUNNING = {"name": "c0", "ready": True, "state": {"running": {}}}
COMPLETED = {"name": "c1", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
PULLING = {"name": "c1", "ready": False, "state": {"waiting": {"reason": "ImagePullBackOff"}}}
READY = [{"type": "Ready", "status": "True"}]

CASES = [
    # (id, pod, kubectl's STATUS, gpuctl's word, READY)
    ("running", _pod(containers=[RUNNING], conditions=READY), "Running", "Running", (1, 1)),
    (
        "second-container-pulling",
        _pod(containers=[RUNNING, PULLING]),
        "ImagePullBackOff",
        "ImagePullBackOff",
        (1, 2),
    ),
    (
        "completed",
        _pod(phase="Succeeded", containers=[{**COMPLETED, "name": "c0"}]),
        "Completed",
        "Succeeded",
        (0, 1),
    ),
    (
        "completed-and-running-ready",
        _pod(containers=[RUNNING, COMPLETED], conditions=READY),
        "Running",
        "Running",
        (1, 2),
    ),
    ("completed-and-running-notready", _pod(containers=[RUNNING, COMPLETED]), "NotReady", "Running", (1, 2)),
    (
        "exit-code-without-reason",
        _pod(phase="Failed", containers=[{"name": "c0", "state": {"terminated": {"exitCode": 3}}}]),
        "ExitCode:3",
        "ExitCode:3",
        (0, 1),
    ),
    (
        "oom",
        _pod(
            phase="Failed",
            containers=[{"name": "c0", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        ),
        "OOMKilled",
        "OOMKilled",
        (0, 1),
    ),
    (
        "init-running",
        _pod(
            phase="Pending",
            init_specs=[{"name": "i0"}, {"name": "i1"}],
            inits=[
                {"name": "i0", "state": {"terminated": {"exitCode": 0}}},
                {"name": "i1", "state": {"running": {}}},
            ],
            containers=[{"name": "c0", "state": {"waiting": {"reason": "PodInitializing"}}}],
        ),
        "Init:1/2",
        "Init:1/2",
        (0, 1),
    ),
    (
        "init-image-pull",
        _pod(
            phase="Pending",
            init_specs=[{"name": "i0"}],
            inits=[{"name": "i0", "state": {"waiting": {"reason": "ErrImagePull"}}}],
            containers=[],
        ),
        "Init:ErrImagePull",
        "Init:ErrImagePull",
        (0, 1),
    ),
    (
        "sidecar-started",
        _pod(
            init_specs=[{"name": "side", "restartPolicy": "Always"}],
            inits=[{"name": "side", "started": True, "ready": True, "state": {"running": {}}}],
            containers=[RUNNING],
            conditions=[*READY, {"type": "Initialized", "status": "True"}],
        ),
        "Running",
        "Running",
        (2, 2),
    ),
    ("terminating", _pod(containers=[RUNNING], deleting=True), "Terminating", "Terminating", (1, 1)),
    ("node-lost", _pod(containers=[RUNNING], deleting=True, reason="NodeLost"), "Unknown", "Unknown", (1, 1)),
    (
        "deleted-after-success",
        _pod(phase="Succeeded", containers=[{**COMPLETED, "name": "c0"}], deleting=True),
        "Completed",
        "Succeeded",
        (0, 1),
    ),
    (
        "gated-by-kueue",
        _pod(
            phase="Pending",
            gates=["kueue.x-k8s.io/admission"],
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        ),
        "SchedulingGated",
        "Queued",
        (0, 1),
    ),
    ("pending-unscheduled", _pod(phase="Pending"), "Pending", "Pending", (0, 1)),
]


@pytest.mark.parametrize(
    ("pod", "printed", "word", "ready"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_object_form(pod: dict, printed: str, word: str, ready: tuple[int, int]) -> None:
    assert printed_pod_status(pod) == printed
    assert pod_status(pod) == word
    assert pod_ready(pod) == ready


@pytest.mark.parametrize(
    ("pod", "printed", "word", "ready"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_table_form_gives_the_same_word(pod: dict, printed: str, word: str, ready: tuple[int, int]) -> None:
    row = {
        "metadata": pod["metadata"],
        "table": {
            "Status": printed,
            "Ready": f"{ready[0]}/{ready[1]}",
            "Node": "<none>",
            "IP": "<none>",
            "Completed": pod["status"]["phase"] in ("Succeeded", "Failed"),
        },
    }
    assert pod_status(row) == word
    assert pod_ready(row) == ready
    assert pod_finished(row) == pod_finished(pod)


def test_gated_pod_shows_its_workloads_state() -> None:
    pod = _pod(phase="Pending", gates=["kueue.x-k8s.io/admission"])
    inactive = {"metadata": {"uid": "w"}, "spec": {"active": False}, "status": {}}
    assert pod_status(pod, inactive) == "Inactive"
    row = {"metadata": pod["metadata"], "table": {"Status": "SchedulingGated"}}
    assert pod_status(row, inactive) == "Inactive"
