"""Backfill by maxRuntime onto a node held for a start bound (issue 45; docs/queueing.md "A bound gpuctl
keeps"). One 8-GPU node: a blocker of 4 GPUs runs with a maxRuntime; an 8-GPU job waits for it and is shown
a bound; `gpuctl serve --hold-bounds` holds the node for it. Then three later 1-GPU jobs of lower priority
arrive, each of which the 4 free GPUs could take: one whose maxRuntime ends before the bound (serve gives it
the held job's tolerations: it runs), one whose maxRuntime would not, one without a maxRuntime (neither runs
before the held job). Without the grant the short job waits on the held node's taints like the others.
About 3 minutes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import path
from gpuctl.constants import SET_ASIDE_TAINT_KEYS, STARTS_BY_ANNOTATION
from gpuctl.domain.objects import parse_time
from gpuctl.domain.workload import WorkloadState, quota_reserved_at, workload_state
from tests.integration.conftest import wait_until
from tests.integration.own_pool import own_pool, rack_node
from tests.integration.test_gang import _workload
from tests.integration.test_starvation import _serve, _tainted

BLOCKER_MAX_RUNTIME = 120  # the blocker's declared maxRuntime: the held job's bound comes after it


@pytest.fixture
def one_node(cluster, kube, tmp_path) -> Iterator[tuple[str, str, str]]:
    sfx = uuid.uuid4().hex[:5]
    node, pool, ns = f"bf-{sfx}-1", f"bf-{sfx}", f"bf-{sfx}"
    with own_pool(
        kube, cluster, tmp_path, pool=pool, ns=ns, nodes={node: rack_node(node, "r1")}, quota="{gpu: 16}"
    ):
        yield node, pool, ns


def _create(cluster, tmp_path, ns: str, pool: str, name: str, gpus: int, runtime: str, extra: str) -> None:
    f = tmp_path / f"{name}.yaml"
    f.write_text(
        f"kind: training\njob: {{name: {name}, namespace: {ns}{extra}}}\n"
        f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {runtime}}}]}}\n"
        f"resources: {{pool: {pool}, gpu: {gpus}, cpu: 1, memory: 1Gi}}\n"
    )
    assert main(["create", "-f", str(f), "--kubeconfig", cluster]) == 0


def _reserved(kube, ns: str, job: str) -> float | None:
    """When the job's Workload reserved quota (now, if it already finished); None while it never did."""
    wl = _workload(kube, ns, job)
    if wl is None:
        return None
    return time.time() if workload_state(wl) == WorkloadState.FINISHED else quota_reserved_at(wl)


def _pending(kube, ns: str, job: str) -> bool:
    return workload_state(_workload(kube, ns, job)) == WorkloadState.PENDING


def test_backfill_that_ends_before_the_bound_runs_on_the_held_node_and_no_other(
    one_node, kube, kubectl_bin, cluster, tmp_path
):
    node, pool, ns = one_node
    _create(
        cluster,
        tmp_path,
        ns,
        pool,
        "blocker",
        4,
        "100s",
        f", priority: medium, maxRuntime: {BLOCKER_MAX_RUNTIME}",
    )
    wait_until(lambda: _reserved(kube, ns, "blocker"), 60, what="blocker admitted")
    _create(cluster, tmp_path, ns, pool, "held", 8, "20s", ", priority: medium, maxRuntime: 600")
    serve = _serve(kube, kubectl_bin, cluster, tmp_path, pool, "--hold-bounds", "--bound-lead", "3600")
    try:

        def bound() -> float | None:
            wl = _workload(kube, ns, "held") or {}
            return parse_time((wl.get("metadata", {}).get("annotations") or {}).get(STARTS_BY_ANNOTATION))

        shown = wait_until(bound, 60, what=f"the held job's bound recorded: {serve.log}")
        wait_until(lambda: _tainted(kube, [node]) or None, 60, what=f"the node held: {serve.log}")
        left = shown - time.time()
        assert left > 60, f"the bound is {left:.0f}s away: too near for a 30 s backfill"
        _create(cluster, tmp_path, ns, pool, "short", 1, "10s", ", priority: low, maxRuntime: 30")
        _create(
            cluster, tmp_path, ns, pool, "long", 1, "10s", f", priority: low, maxRuntime: {int(left) + 60}"
        )
        _create(cluster, tmp_path, ns, pool, "none", 1, "10s", ", priority: low")
        # the short job runs on the held node, before the held job and by the bound
        first = wait_until(
            lambda: (
                "short" if _reserved(kube, ns, "short") else "held" if _reserved(kube, ns, "held") else ""
            ),
            left,
            interval=1,
            what=f"short or held admitted: {serve.log}",
        )
        assert first == "short", "the short job did not run before the held job (no backfill)"
        at = _reserved(kube, ns, "short")
        assert at is not None and at + 30 <= shown, (at, shown)
        assert (
            _reserved(kube, ns, "held") is None and _pending(kube, ns, "long") and _pending(kube, ns, "none")
        )
        held_at = wait_until(
            lambda: _reserved(kube, ns, "held"),
            shown - time.time() + 30,
            interval=1,
            what=f"held: {serve.log}",
        )
        # neither the long one nor the one without a maxRuntime passed it
        assert _pending(kube, ns, "long") and _pending(kube, ns, "none")
        assert held_at <= shown, (held_at, shown, serve.log.read_text()[-3000:])
        for job in ("long", "none"):  # never granted
            spec = kube.get(path("Job", job, ns))["spec"]["template"]["spec"]
            foreign = [t for t in spec.get("tolerations") or [] if t.get("key") in SET_ASIDE_TAINT_KEYS]
            assert all(t.get("value") in (ns, job) for t in foreign), (job, foreign)
        print(f"short admitted {shown - at:.0f}s before the bound, held {shown - held_at:.0f}s before it")
    finally:
        serve.stop(20)
        for n in _tainted(kube, [node]):
            taints = [
                t
                for t in kube.get(path("Node", n))["spec"].get("taints") or []
                if t["key"] not in SET_ASIDE_TAINT_KEYS
            ]
            kube.merge_patch(path("Node", n), {"spec": {"taints": taints or None}})
        for job in kube.list(path("Job", namespace=ns)):
            kube.delete(path("Job", job["metadata"]["name"], ns), propagation="Background")
