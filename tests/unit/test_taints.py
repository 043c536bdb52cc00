"""Pools carry their nodes' taints: the flavor's tolerations (gpuctl.domain.pools) and who keeps them."""

from __future__ import annotations

from gpuctl.cluster import path
from gpuctl.constants import MANAGED_BY_VALUE, Labels
from gpuctl.domain.pools import (
    desired_flavor,
    node_pool_taint_missing,
    node_taints,
    pool_node_taints,
    pool_taint,
    pool_toleration,
    pool_tolerations,
    stale_flavors,
)
from gpuctl.server.reconciler import Reconciler, capacity_fingerprint
from gpuctl.server.wiring import default_cache
from queues import budget_flavor, resource_flavor
from tests.unit.test_metrics import NoCluster, feed

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def own(pool: str) -> dict:
    """The toleration of the pool's own taint, which its flavor always has first."""
    return {"key": Labels.POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}


def node(name: str, pool: str | None, *taints: dict) -> dict:
    labels = {Labels.POOL: pool} if pool else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_pool_tolerates_every_scheduling_taint_of_its_nodes_and_nothing_transient() -> None:
    nodes = [
        node("a", "p", GPU_TAINT, {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}),
        node(
            "b",
            "p",
            {"key": "dedicated", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"},
        ),
        node("c", "p"),  # an untainted CPU node in the same pool
        node("d", "other", {"key": "elsewhere", "value": "1", "effect": "NoExecute"}),
        node("e", None, {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}),
    ]
    assert pool_tolerations(nodes, "p") == [
        own("p"),
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
        GPU_TOL,
    ]
    assert pool_tolerations(nodes, "other") == [
        own("other"),
        {"key": "elsewhere", "operator": "Equal", "value": "1", "effect": "NoExecute"},
    ]
    assert pool_tolerations(nodes, "empty") == [own("empty")]  # a pool without nodes tolerates its taint
    assert node_taints(nodes[4]) == []  # the autoscaler's drain taint is never tolerated


def test_more_taints_than_kueue_allows_collapse_to_one_toleration_per_key() -> None:
    nodes = [
        node(f"n{i}", "p", {"key": f"k{i % 3}", "value": str(i), "effect": "NoSchedule"}) for i in range(12)
    ]
    tols = pool_tolerations(nodes, "p")
    assert tols == [
        own("p"),
        *({"key": f"k{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(3)),
    ]
    # Past Kueue's 8, the pool's own toleration is kept: 7 collapsed ones after it.
    many = [node(f"m{i}", "p", {"key": f"k{i}", "value": "x", "effect": "NoSchedule"}) for i in range(12)]
    tols = pool_tolerations(many, "p")
    assert len(tols) == 8 and tols[0] == own("p")


def test_flavor_with_tolerations_and_without() -> None:
    assert "tolerations" not in resource_flavor("p")["spec"]
    f = desired_flavor("p", [node("a", "p", GPU_TAINT)])
    assert f["spec"] == {
        "nodeLabels": {Labels.POOL: "p"},
        "topologyName": "gpuctl-nodes",
        "tolerations": [own("p"), GPU_TOL],
    }
    # Made with its own toleration even before it has nodes: never re-created for it later.
    assert desired_flavor("p", [])["spec"]["tolerations"] == [own("p")]
    assert f["metadata"]["labels"][Labels.MANAGED_BY] == MANAGED_BY_VALUE


def test_stale_flavors_lists_only_gpuctl_pools_whose_tolerations_differ() -> None:
    nodes = [node("a", "p", GPU_TAINT), node("b", "q")]
    foreign = {"metadata": {"name": "f", "labels": {}}, "spec": {}}
    tas = desired_flavor("t", [])  # a TAS flavor: listed too, its writer re-creates it
    nodes.append(node("c", "t", GPU_TAINT))
    # A pool flavor made before pools were TAS flavors (no topologyName) can still be patched.
    legacy = resource_flavor("p")
    del legacy["spec"]["topologyName"]
    flavors = [legacy, desired_flavor("q", nodes), budget_flavor(), foreign, tas]
    assert stale_flavors(flavors, nodes) == {"p": [own("p"), GPU_TOL], "t": [own("t"), GPU_TOL]}
    # A taint removed from the nodes is removed from the flavor (its own toleration stays).
    up_to_date = desired_flavor("p", nodes)
    del up_to_date["spec"]["topologyName"]
    assert stale_flavors([up_to_date], [node("a", "p")]) == {"p": [own("p")]}
    # TAS flavors are listed too (their writer re-creates them: Kueue keeps their spec immutable).
    assert stale_flavors([resource_flavor("p")], nodes) == {"p": [own("p"), GPU_TOL]}
    # A flavor of an earlier gpuctl (no toleration of its pool taint) is stale even with untainted nodes.
    assert stale_flavors([resource_flavor("q")], [node("b", "q")]) == {"q": [own("q")]}
    # The pool taint on the nodes is never mirrored: it is the flavor's own toleration, not one more.
    assert stale_flavors([desired_flavor("q", [])], [node("b", "q", pool_taint("q"))]) == {}


def test_the_reconciler_wakes_on_taint_changes() -> None:
    a = node("a", "p")
    b = node("a", "p", GPU_TAINT)
    assert capacity_fingerprint(a) != capacity_fingerprint(b)
    # A transient taint (the node going NotReady) already shows as readiness; it does not add a trigger.
    c = node("a", "p", {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    assert capacity_fingerprint(a) == capacity_fingerprint(c)


class RecordingCluster(NoCluster):
    """Lists nothing, records writes."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict]] = []
        self.applied: list[dict] = []

    def merge_patch(self, api_path: str, patch: dict, *, dry_run: bool = False) -> dict:
        self.patches.append((api_path, patch))
        return {}

    def apply(self, obj: dict) -> dict:
        self.applied.append(obj)
        return obj


def test_the_serve_reconciler_patches_the_flavor_tolerations_when_node_taints_change() -> None:
    cluster = RecordingCluster()
    cache = default_cache(cluster)
    reconciler = Reconciler(cluster, cache, leader=lambda: True)
    for inf in cache.informers.values():
        inf.relist()
    # A flavor made before pools were TAS flavors: patched in place (a TAS flavor is re-created by
    # gpuctl.service.pool_sync.set_flavor_tolerations, covered by tests/integration/test_adopt.py).
    legacy = resource_flavor("p")
    del legacy["spec"]["topologyName"]
    feed(cache, "ResourceFlavor", legacy)
    feed(cache, "Node", node("a", "p", GPU_TAINT), node("b", "p"))
    assert reconciler.reconcile_once() == "applied"
    assert cluster.patches == [
        (
            path("ResourceFlavor", "p"),
            {"spec": {"tolerations": [own("p"), GPU_TOL]}},
        )
    ]  # fmt: skip
    # Once the flavor carries them (Kueue's watch event), nothing more is written.
    carried = desired_flavor("p", [node("a", "p", GPU_TAINT)])
    del carried["spec"]["topologyName"]
    feed(cache, "ResourceFlavor", carried)
    cluster.patches.clear()
    assert reconciler.reconcile_once() in ("unchanged", "missing")
    assert cluster.patches == []
    # The taint goes away: its toleration goes too; the pool's own stays.
    feed(cache, "Node", node("a", "p"))
    reconciler.reconcile_once()
    assert cluster.patches == [(path("ResourceFlavor", "p"), {"spec": {"tolerations": [own("p")]}})]
    # A follower writes nothing.
    follower = Reconciler(cluster, cache, leader=lambda: False)
    feed(cache, "Node", node("a", "p", GPU_TAINT))
    cluster.patches.clear()
    assert follower.reconcile_once() == "standby" and cluster.patches == []


def test_pool_taint_follows_the_pool_label_and_touches_no_other_taint() -> None:
    assert pool_toleration("p") == own("p")
    # Joining a pool: the taint is added after the node's own taints.
    assert pool_node_taints(node("a", None, GPU_TAINT), "p") == [GPU_TAINT, pool_taint("p")]
    assert pool_node_taints(node("a", "p", GPU_TAINT, pool_taint("p")), "p") is None  # already right
    # Moving to another pool replaces the value (taints are unique per key and effect).
    assert pool_node_taints(node("a", "q", pool_taint("p"), GPU_TAINT), "q") == [GPU_TAINT, pool_taint("q")]
    # Leaving every pool removes only gpuctl's taint; a NoExecute taint of the same key is not gpuctl's.
    not_ours = {"key": Labels.POOL, "value": "x", "effect": "NoExecute"}
    assert pool_node_taints(node("a", None, GPU_TAINT, pool_taint("p"), not_ours), None) == [
        GPU_TAINT,
        not_ours,
    ]
    assert pool_node_taints(node("a", None, GPU_TAINT), None) is None
    # What adopt and apply look for on existing clusters.
    assert node_pool_taint_missing(node("a", "p"))  # labelled by the earlier gpuctl, never tainted
    assert node_pool_taint_missing(node("a", None, pool_taint("p")))  # left behind
    assert not node_pool_taint_missing(node("a", "p", pool_taint("p")))
    assert not node_pool_taint_missing(node("a", None))
