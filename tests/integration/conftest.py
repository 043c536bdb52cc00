"""Integration fixtures: cluster-wide gpuctl state is reset after each test that uses `clean_cluster`."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import pytest

from gpuctl.cluster import ApiError, path
from gpuctl.constants import POOL_TAINT_EFFECT, POOL_TAINT_KEY, Labels

MANAGED = f"{Labels.MANAGED_BY}=gpuctl"
MANAGED_KINDS = ("ClusterQueue", "Cohort", "ResourceFlavor", "WorkloadPriorityClass", "Topology")


def reset_gpuctl_state(kube) -> None:
    """Delete every gpuctl-managed cluster-scoped Kueue object and gpuctl's node labels and pool taints."""
    for kind in MANAGED_KINDS:
        for obj in kube.list(path(kind), label_selector=MANAGED):
            name = obj["metadata"]["name"]
            if obj["metadata"].get("finalizers"):
                try:
                    kube.merge_patch(path(kind, name), {"metadata": {"finalizers": None}})
                except ApiError as e:
                    if e.status != 404:  # already gone (another test's teardown raced us): fine
                        raise
            kube.delete(path(kind, name))
    # `gpuctl adopt --yes` creates gpuctl-high|medium|low (preemptionPolicy Never): a later test that
    # models the earlier gpuctl's preempting classes must not find them.
    for pc in kube.list(path("PriorityClass"), label_selector=MANAGED):
        with contextlib.suppress(ApiError):
            kube.delete(path("PriorityClass", pc["metadata"]["name"]))
    for node in kube.list(path("Node")):
        labels = node["metadata"].get("labels", {})
        drop = {k: None for k in (Labels.POOL, Labels.GPU_TYPE) if k in labels}
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if (t.get("key"), t.get("effect")) != (POOL_TAINT_KEY, POOL_TAINT_EFFECT)]
        patch: dict = {}
        if drop:
            patch["metadata"] = {"labels": drop}
        if len(kept) != len(taints):
            patch["spec"] = {"taints": kept or None}
        if patch:
            kube.merge_patch(path("Node", node["metadata"]["name"]), patch)


def delete_namespaces(kube, names, timeout: float = 180, *, delete: bool = True) -> None:
    """Delete the namespaces a test made (whatever gpuctl already deleted) and wait until they are gone:
    a Workload left admitted in a terminating namespace counts in the next module's GPU sums. Every test
    that waits for a namespace to go waits here. delete=False only waits (a test that asserts gpuctl
    deleted it).

    The namespace controller looks again only after half the largest terminationGracePeriodSeconds of the
    namespace's running pods, plus one (30 s by default: 16 s; kube-controller-manager's namespace
    controller, estimateGracefulTerminationForPods), though KWOK removes a deleted pod at once: so the
    pods of a Terminating namespace are deleted here with grace 0 before its first pass (5 s after the
    delete). Once Terminating, NamespaceLifecycle refuses new pods in it, so no controller replaces them.
    Measured on the local cluster (bench/namespace_teardown.py: a Deployment's two pods and a Job's one,
    Running): about 44 s, now about 6 s (the controller's first pass comes 5 s after the delete)."""
    if delete:
        for ns in names:
            with contextlib.suppress(ApiError):
                kube.delete(path("Namespace", ns))
    for ns in names:
        found = kube.get_or_none(path("Namespace", ns))
        if found is not None and found["metadata"].get("deletionTimestamp"):
            # deletecollection: the Jobs and Kueue's Workloads too, so Kueue drops its finalizers before
            # the controller's first pass (an item it finds with a finalizer costs it 15 s / 2 + 1 more)
            for kind in ("Job", "Workload"):
                with contextlib.suppress(ApiError):
                    kube.delete(path(kind, namespace=ns))
            with contextlib.suppress(ApiError):
                kube.delete(path("Pod", namespace=ns), grace_seconds=0)
    wait_until(
        lambda: not [ns for ns in names if kube.get_or_none(path("Namespace", ns)) is not None],
        timeout,
        what=f"namespaces {', '.join(names)} gone",
    )


@pytest.fixture
def clean_cluster(kube) -> Iterator[None]:
    reset_gpuctl_state(kube)
    yield
    reset_gpuctl_state(kube)


def wait_until(
    check: Callable[[], object], timeout: float = 60, interval: float = 0.5, what: str = ""
) -> object:
    """Poll until check() returns something truthy; fail with `what` and the last value after timeout."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last={last!r}")


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def require_controller(kube, crd: str, title: str, switch: str) -> None:
    """Skip (fail on CI) unless the cluster serves `crd`: a controller hack/cluster/up.sh starts only with
    `switch`=1 (the clusters pytest starts have them)."""
    if kube.get_or_none(f"{CRDS}/{crd}") is None:
        msg = f"the cluster runs no {title} controller: start it with {switch}=1 hack/cluster/up.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
