"""No starvation (issue 31, docs/distributed.md "No starvation"): a 2-node x 8-GPU job in a pool of three
fake 8-GPU nodes (two racks, made through the API by test_gang's fixture) that a steady stream of 1-GPU
jobs of another team keeps busy. Without `gpuctl serve --defrag` it waits (Kueue admits the small jobs past
it); with it, two nodes of one rack are set aside and the gang starts within the documented bound:
settle + one step + the longest run of the jobs on them (the stream's jobs end within STREAM_MAX_SECONDS),
while no running job is evicted. About 3 minutes."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuctl.builders import build
from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, path
from gpuctl.constants import SET_ASIDE_TAINT_KEY
from gpuctl.domain.objects import condition
from gpuctl.domain.workload import WorkloadState, workload_state
from gpuctl.server.leader import DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE
from gpuctl.spec import load_text
from tests.integration.conftest import wait_until
from tests.integration.test_gang import Racks, _job_file, _workload, racks  # noqa: F401 - fixture
from tests.integration.test_metrics import ROOT, _free_port, _service_account_kubeconfig

STREAM_IN_FLIGHT = 27  # the pool holds 24 one-GPU jobs: a few always wait behind the gang
STREAM_MIN_SECONDS, STREAM_MAX_SECONDS = 8, 20
SETTLE = 2.0
STEP = 5.0  # gpuctl.server.setaside's interval
# The documented bound (docs/distributed.md): settle + a step + the longest run on the chosen nodes, plus
# Kueue's admission and KWOK's completion steps (ESTIMATE_STEP_SLACK_SECONDS-like slack).
BOUND = SETTLE + STEP + STREAM_MAX_SECONDS + 15


class Stream:
    """Keeps STREAM_IN_FLIGHT one-GPU jobs of namespace `ns` queued or running in the pool."""

    def __init__(self, kube, pool: str, ns: str) -> None:
        self.kube, self.pool, self.ns = kube, pool, ns
        self.stop = threading.Event()
        self.submitted = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _job(self) -> dict:
        runtime = random.randint(STREAM_MIN_SECONDS, STREAM_MAX_SECONDS)
        text = (
            f"kind: training\njob: {{name: s-{uuid.uuid4().hex[:8]}, namespace: {self.ns}, maxRuntime: 60}}\n"
            f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {runtime}s}}]}}\n"
            f"resources: {{pool: {self.pool}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
        )
        ((doc,)) = load_text(text)
        (job,) = build(doc.spec, self.ns)
        return job

    def in_flight(self) -> int:
        jobs = self.kube.list(path("Job", namespace=self.ns))
        done = ("Complete", "Failed")
        return sum(
            1
            for j in jobs
            if not any(
                c["type"] in done and c["status"] == "True" for c in j.get("status", {}).get("conditions", [])
            )
        )

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for _ in range(max(STREAM_IN_FLIGHT - self.in_flight(), 0)):
                    self.kube.create(self._job())
                    self.submitted += 1
            except ApiError:
                pass  # the next round tops up
            self.stop.wait(1.0)


@pytest.fixture
def stream_team(racks, cluster, kube, tmp_path) -> Iterator[str]:  # noqa: F811
    ns = f"stream-{uuid.uuid4().hex[:5]}"
    q = tmp_path / "quota.yaml"
    q.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 24}}\n")
    assert main(["create", "-f", str(q), "--kubeconfig", cluster]) == 0
    yield ns
    for job in kube.list(path("Job", namespace=ns)):
        kube.delete(path("Job", job["metadata"]["name"], ns), propagation="Background")
    main(["delete", "quota", f"q-{ns}", "--delete-namespace", "--kubeconfig", cluster])
    wait_until(lambda: kube.get_or_none(path("Namespace", ns)) is None, 180, what=f"{ns} gone")


def _serve(kube, kubectl_bin, cluster, tmp_path: Path, pool: str) -> tuple[subprocess.Popen, Path]:
    sa = _service_account_kubeconfig(
        kube, kubectl_bin, cluster, tmp_path / "sa-kubeconfig", "defrag/rbac.yaml"
    )
    if kube.get_or_none(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE)):
        kube.delete(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE))
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", str(sa), "--address", "127.0.0.1",
         "--metrics-port", str(_free_port()), "--no-backstop", "--no-leader-elect", "--defrag", pool,
         "--defrag-settle", str(SETTLE), "--defrag-moves-per-hour", "0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    return proc, log


def _tainted(kube, nodes) -> list[str]:
    return sorted(
        n
        for n in nodes
        if any(t["key"] == SET_ASIDE_TAINT_KEY for t in kube.get(path("Node", n))["spec"].get("taints") or [])
    )


def test_a_gang_starts_within_the_bound_despite_a_stream_of_small_jobs(
    racks,  # noqa: F811
    stream_team,
    kube,
    kubectl_bin,
    cluster,
    tmp_path,
):
    stream = Stream(kube, racks.pool, stream_team)
    stream.thread.start()
    proc = None
    try:
        wait_until(lambda: stream.in_flight() >= STREAM_IN_FLIGHT, 60, what="the stream fills the pool")
        assert main(["create", "-f", _job_file(tmp_path, racks, "big", 2), "--kubeconfig", cluster]) == 0
        # Without gpuctl serve: 45 s of the stream's jobs ending and starting, the gang still waits.
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            assert workload_state(_workload(kube, racks.ns, "big")) != WorkloadState.ADMITTED, "not starved?"
            time.sleep(1)
        ended_before = stream.submitted
        # With it: two nodes of one rack set aside, the gang admitted within the bound.
        proc, log = _serve(kube, kubectl_bin, cluster, tmp_path, racks.pool)
        started = time.monotonic()
        wait_until(
            lambda: workload_state(_workload(kube, racks.ns, "big")) == WorkloadState.ADMITTED,
            BOUND + 30,
            what=f"the gang admitted; serve log:\n{log}",
        )
        took = time.monotonic() - started
        print(f"\ngang admitted {took:.1f}s after gpuctl serve started (bound {BOUND:.0f}s); "
              f"{stream.submitted - ended_before} stream jobs submitted meanwhile")  # fmt: skip
        assert took <= BOUND, f"{took:.1f}s > {BOUND:.0f}s"
        assert stream.submitted > ended_before  # the stream kept going on the other node
        # The nodes are given back once it holds quota; no job of the stream was evicted for it.
        wait_until(lambda: _tainted(kube, racks.nodes) == [], 30, what="set-aside taints removed")
        for wl in kube.list(path("Workload", namespace=stream_team)):
            assert condition(wl, "Evicted").get("status") != "True", wl["metadata"]["name"]
    finally:
        stream.stop.set()
        stream.thread.join(10)
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
        for n in _tainted(kube, racks.nodes):  # a failed run must not leave the pool held
            node = kube.get(path("Node", n))
            taints = [t for t in node["spec"].get("taints") or [] if t["key"] != SET_ASIDE_TAINT_KEY]
            kube.merge_patch(path("Node", n), {"spec": {"taints": taints or None}})
        for job in kube.list(path("Job", namespace=racks.ns)):
            kube.delete(path("Job", job["metadata"]["name"], racks.ns), propagation="Background")
