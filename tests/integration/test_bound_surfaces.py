"""A recorded start bound on every surface (issue 45, docs/queueing.md "A bound gpuctl keeps"), on the local
cluster: a team on one fake 8-GPU node, one 8-GPU job Kueue admits at once and one that waits behind it.
Each Workload gets the start bound `gpuctl serve` records (runwhere.ai/starts-by, written here as serve
writes it: that serve records it is test_bound_kept's), the first one well after its admission (kept),
the second a few seconds ahead while it waits (pending, then missed). `get jobs -o wide|json` and a real
`gpuctl serve`'s gpuctl_start_bounds_total (its own ServiceAccount, manifests/serve/rbac.yaml) agree on
both, the missed one counted by a scrape once its bound passed, each once; `describe job` says missed.
About 60 s."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.cli.main import main
from gpuctl.cluster import path
from gpuctl.constants import GPU_RESOURCE, STARTS_BY_ANNOTATION
from gpuctl.domain.objects import rfc3339
from gpuctl.domain.workload import WorkloadState, workload_state
from tests.integration.conftest import wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.own_pool import own_pool
from tests.integration.serve_process import ServeProcess, service_account_kubeconfig, start_serve
from tests.integration.test_gang import _workload


@pytest.fixture
def team(cluster, kube, tmp_path) -> Iterator[tuple[str, str]]:
    sfx = uuid.uuid4().hex[:5]
    pool, ns = f"bounds-{sfx}", f"bounds-{sfx}"
    node = {f"bounds-{sfx}-1": fake_node(f"bounds-{sfx}-1", {}, {GPU_RESOURCE: "8"})}
    with own_pool(kube, cluster, tmp_path, pool=pool, ns=ns, nodes=node, quota="{gpu: 8}"):
        yield pool, ns


def _create(cluster: str, tmp_path, pool: str, ns: str, name: str) -> None:
    f = tmp_path / f"{name}.yaml"
    f.write_text(
        f"kind: training\njob: {{name: {name}, namespace: {ns}, maxRuntime: 600}}\n"
        "environment: {image: busybox}\n"
        f"resources: {{pool: {pool}, gpu: 8, cpu: 1, memory: 1Gi}}\n"
    )
    assert main(["create", "-f", str(f), "--kubeconfig", cluster]) == 0


def _record(kube, ns: str, job: str, by: float) -> None:
    """The bound serve records (gpuctl.server.setaside): RFC 3339, on the Workload."""
    wl = wait_until(lambda: _workload(kube, ns, job), 30, what=f"{job}'s Workload")
    notes = {STARTS_BY_ANNOTATION: rfc3339(by)}
    kube.merge_patch(path("Workload", wl["metadata"]["name"], ns), {"metadata": {"annotations": notes}})


def _state(kube, ns: str, job: str) -> WorkloadState | None:
    return workload_state(_workload(kube, ns, job))


def _get(cluster: str, ns: str, *out: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["get", "jobs", "-n", ns, *out, "--kubeconfig", cluster]) == 0
    return buf.getvalue()


def _bound_cells(cluster: str, ns: str) -> dict[str, str]:
    """JOB ID -> its BOUND cell in `get jobs -o wide` (the job's own row; a pod's row carries it too)."""
    lines = _get(cluster, ns, "-o", "wide").splitlines()
    head = lines[0]
    start = head.index("BOUND")
    end = head.index("REASON")
    return {line.split()[0]: line[start:end].strip() for line in lines[1:]}


def _counted(serve: ServeProcess, pool: str) -> dict[str, float]:
    serve.alive()
    with urllib.request.urlopen(f"http://127.0.0.1:{serve.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        s.labels["outcome"]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "gpuctl_start_bounds_total" and s.labels.get("pool") == pool
    }


def test_a_bound_kept_and_one_missed_show_in_get_jobs_and_serve_counts_each_once(
    team, cluster, kube, kubectl_bin, tmp_path
) -> None:
    pool, ns = team
    serve = start_serve(
        service_account_kubeconfig(kube, kubectl_bin, cluster, tmp_path / "sa"), tmp_path / "log"
    )
    try:
        serve.wait_ready()
        _create(cluster, tmp_path, pool, ns, "first")
        admitted = wait_until(
            lambda: workload_state(_workload(kube, ns, "first")) == WorkloadState.ADMITTED,
            60,
            what="admitted",
        )
        assert admitted
        _create(cluster, tmp_path, pool, ns, "second")  # waits: the node's 8 GPUs are first's
        _record(kube, ns, "first", time.time() + 600)  # admitted before it: kept
        soon = time.time() + 30
        _record(kube, ns, "second", soon)
        assert workload_state(_workload(kube, ns, "second")) in (
            WorkloadState.PENDING,
            WorkloadState.PREEMPTED,
        )

        # Before second's bound (each reading finished before it): kept counted, second pending.
        counted = wait_until(lambda: _counted(serve, pool) or None, 20, what="first's bound counted")
        cells = _bound_cells(cluster, ns)
        assert time.time() < soon, "the machine was too slow to read before the bound"
        assert counted == {"kept": 1.0}
        assert cells["first"].endswith(" Kept") and cells["second"] == f"{rfc3339(soon)} Pending", cells

        # No event marks the moment the bound passes: a scrape after it counts second missed, once.
        wait_until(lambda: time.time() > soon + 1, 40, what="second's bound passed")
        assert _counted(serve, pool) == {"kept": 1.0, "missed": 1.0}
        assert _counted(serve, pool) == {"kept": 1.0, "missed": 1.0}
        cells = _bound_cells(cluster, ns)
        assert cells["second"] == f"{rfc3339(soon)} Missed", cells
        items = {
            o["metadata"]["name"]: o["status"] for o in json.loads(_get(cluster, ns, "-o", "json"))["items"]
        }
        assert (items["second"]["startsBy"], items["second"]["bound"]) == (rfc3339(soon), "Missed")
        assert items["first"]["bound"] == "Kept"
        described = io.StringIO()
        with contextlib.redirect_stdout(described):
            assert main(["describe", "job", "second", "-n", ns, "--kubeconfig", cluster]) == 0
        text = described.getvalue()
        assert re.search(rf"^Bound missed:\s+{re.escape(rfc3339(soon))},", text, re.M), text
    finally:
        serve.stop()
