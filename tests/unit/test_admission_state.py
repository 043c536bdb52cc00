"""The webhook's watch-driven cache: reduced stores on gpuctl.cluster.informer (paging, bookmarks, 410 Gone
re-lists, error back-off) and the snapshot swap, against a scripted fake of the Cluster transport."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

import pytest

from admission.state import (
    RESOURCES,
    ClusterState,
    WatchCache,
    reduce_cluster_queue,
    reduce_flavor,
    reduce_local_queue,
    reduce_namespace,
    reduce_node,
    resource_path,
)
from gpuctl.cluster import ApiError
from gpuctl.constants import BUDGET_FLAVOR, Labels
from queues import TeamQuota, budget_flavor, cluster_queue, local_queue, resource_flavor, team_namespace
from tests.unit.test_admission_fixtures import node
from tests.unit.test_informer import FakeCluster, page

PATHS = {r.name: resource_path(r) for r in RESOURCES}


def with_rv(obj: dict, rv: str) -> dict:
    obj["metadata"]["resourceVersion"] = rv
    return obj


class Router:
    """One FakeCluster per watched kind, chosen by the request path (the webhook shares one Cluster)."""

    def __init__(self, lists: dict[str, list] | None = None, watches: dict[str, list] | None = None):
        self.fakes = {
            name: FakeCluster((lists or {}).get(name, [page([], "1")]), (watches or {}).get(name))
            for name in PATHS
        }
        self._by_path = {PATHS[n]: f for n, f in self.fakes.items()}

    def get(self, api_path: str, **query: Any) -> dict:
        return self._by_path[api_path].get(api_path, **query)

    def watch(
        self, api_path: str, *, on_open: Callable[[Callable[[], None]], None] | None = None, **kw: Any
    ) -> Iterator[tuple[str, dict]]:
        return self._by_path[api_path].watch(api_path, on_open=on_open, **kw)

    def wait_done(self, *names: str, timeout: float = 5.0) -> None:
        for n in names or PATHS:
            assert self.fakes[n].done.wait(timeout), (n, self.fakes[n].list_calls, self.fakes[n].watch_calls)


def cache_of(router: Router) -> WatchCache:
    return WatchCache(router, backoff=(0.001, 0.004))


def run(cache: WatchCache, router: Router, *names: str) -> None:
    cache.start()
    try:
        router.wait_done(*names)
    finally:
        cache.stop()
        cache.join(2)


# ---------------------------------------------------------------------------------------------------------
# Reducing objects.


def test_only_gpuctl_pool_flavors_are_pools():
    assert reduce_flavor(resource_flavor("a100")) == ("a100", True)
    assert reduce_flavor(budget_flavor()) == (BUDGET_FLAVOR, None)
    assert reduce_flavor({"kind": "ResourceFlavor", "metadata": {"name": "x"}}) == ("x", None)


def test_node_reduction_keeps_labels_gpus_and_pool():
    name, info = reduce_node(node("g1", "a100", 8, extra="y"))
    assert (name, info.gpu, info.pool, info.labels["extra"]) == ("g1", 8, "a100", "y")
    assert isinstance(info.labels, MappingProxyType)
    assert reduce_node(node("c1", None, 0))[1].gpu == 0
    weird = node("w", "a10", 0)
    weird["status"]["allocatable"]["nvidia.com/gpu"] = "1k"
    assert reduce_node(weird)[1].gpu == 1000
    weird["status"]["allocatable"]["nvidia.com/gpu"] = "garbage"
    assert reduce_node(weird)[1].gpu == 0


def test_queue_and_namespace_reduction():
    team = TeamQuota(namespace="t", quota_name="q", gpu=4, borrowing_limit=2)
    assert reduce_local_queue(local_queue("t")) == (("t", "default"), "t")
    flavors, cap = reduce_cluster_queue(cluster_queue(team, ["a100", "a10"]))[1]
    assert flavors >= {"a100", "a10"}
    assert (cap.quota, cap.borrowing_limit) == (team.gpu, team.borrowing_limit)
    assert reduce_namespace(team_namespace(team)) == ("t", True)
    assert reduce_namespace(
        {"kind": "Namespace", "metadata": {"name": "n", "labels": {Labels.NAMESPACE: "yes"}}}
    ) == (
        "n",
        False,
    )


def test_state_build_indexes_nodes_by_pool():
    s = ClusterState.from_objects(
        [node("a", "p", 2), node("b", "p", 8), node("c", None, 16), resource_flavor("p")]
    )
    assert s.pools == {"p"}
    assert [n.name for n in s.pool_nodes["p"]] == ["a", "b"]
    assert s.pool_max_gpu == {"p": 8}  # the unpooled 16-GPU node is in no pool
    with pytest.raises(TypeError):
        s.nodes["x"] = None  # type: ignore[index]


# ---------------------------------------------------------------------------------------------------------
# The informers (gpuctl.cluster.informer, with the reduce functions as transforms).


def test_paths_and_selectors_of_the_watched_kinds():
    assert PATHS["nodes"] == "/api/v1/nodes" and PATHS["namespaces"] == "/api/v1/namespaces"
    assert PATHS["resourceflavors"] == "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
    router = Router({"resourceflavors": [page([resource_flavor("a100")], "1")]})
    cache = cache_of(router)
    cache.informers["resourceflavors"].relist()
    assert (
        router.fakes["resourceflavors"].list_calls[0]["labelSelector"]
        == "app.kubernetes.io/managed-by=gpuctl"
    )
    assert cache.informers["resourceflavors"].items() == {"a100": True}


def test_list_follows_continue_tokens_and_the_watch_starts_at_the_last_version():
    router = Router({"nodes": [page([node("a", "p", 1)], "10", cont="c1"), page([node("b", "p", 1)], "11")]})
    cache = cache_of(router)
    run(cache, router)
    nodes = router.fakes["nodes"]
    assert [c.get("continue") for c in nodes.list_calls] == [None, "c1"]
    assert nodes.list_calls[0]["limit"] == 500
    assert set(cache.state.nodes) == {"a", "b"}
    assert nodes.watch_calls[0]["resource_version"] == "11" and nodes.watch_calls[0]["raw"] is True


def test_watch_events_update_the_state_and_heartbeats_cost_no_rebuild():
    heartbeat = node("a", "p", 8)
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    router = Router(
        {"nodes": [page([node("a", "p", 8)], "10")]},
        {
            "nodes": [
                [
                    ("ADDED", with_rv(node("b", "p", 4), "11")),
                    ("MODIFIED", with_rv(heartbeat, "12")),  # nothing the rules read changed
                    ("BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "13"}}),
                    ("MODIFIED", with_rv(node("a", "q", 8), "14")),
                    ("DELETED", with_rv(node("b", "p", 4), "15")),
                ]
            ]
        },
    )
    cache = cache_of(router)
    seen: list[ClusterState] = []
    cache.add_listener(seen.append)
    run(cache, router)
    history = [(sorted(s.nodes), s.nodes["a"].pool if "a" in s.nodes else None) for s in seen]
    changes = [h for i, h in enumerate(history) if h[0] and (i == 0 or h != history[i - 1])]
    assert changes == [(["a"], "p"), (["a", "b"], "p"), (["a", "b"], "q"), (["a"], "q")]
    assert cache.state.nodes["a"].pool == "q"
    # One snapshot per kind's first list, and one per node change: the heartbeat made none.
    assert len(seen) == len(RESOURCES) + 3
    # The watch ended after the DELETED event: it resumes there, without a list.
    assert router.fakes["nodes"].rvs() == ["10", "15"]
    assert cache.stats()["nodes"]["relists"] == 0


def test_410_error_event_relists_and_drops_objects_deleted_meanwhile():
    gone = {"kind": "Status", "code": 410, "message": "too old resource version"}
    router = Router(
        {"nodes": [page([node("a", "p", 1), node("b", "p", 1)], "10"), page([node("a", "p", 1)], "50")]},
        {"nodes": [[("ERROR", gone)]]},
    )
    cache = cache_of(router)
    run(cache, router)
    assert set(cache.state.nodes) == {"a"}
    assert cache.stats()["nodes"]["relists"] == 1
    assert router.fakes["nodes"].rvs() == ["10", "50"]


def test_http_410_on_the_watch_call_relists():
    router = Router(
        {"nodes": [page([], "10"), page([node("a", "p", 1)], "20")]},
        {"nodes": [ApiError(410, "Gone", "too old")]},
    )
    cache = cache_of(router)
    run(cache, router)
    assert set(cache.state.nodes) == {"a"} and cache.stats()["nodes"]["relists"] == 1


def test_other_errors_back_off_and_resume_from_the_same_version():
    router = Router({"nodes": [page([node("a", "p", 1)], "10")]}, {"nodes": [ConnectionResetError("reset")]})
    cache = cache_of(router)
    run(cache, router)
    assert router.fakes["nodes"].rvs() == ["10", "10"]
    assert cache.stats()["nodes"]["relists"] == 0 and cache.stats()["nodes"]["errors"] == 1


def test_failed_initial_list_is_retried_until_it_works():
    router = Router({"nodes": [ApiError(503, "Service Unavailable", ""), page([node("a", "p", 1)], "10")]})
    cache = cache_of(router)
    run(cache, router)
    assert cache.state.synced and set(cache.state.nodes) == {"a"}


def test_stop_closes_blocked_watches():
    router = Router()
    cache = cache_of(router)
    cache.start()
    router.wait_done()
    t0 = time.monotonic()
    cache.stop()
    cache.join(2)
    assert not any(i._thread.is_alive() for i in cache.informers.values())  # type: ignore[union-attr]
    assert time.monotonic() - t0 < 2


def test_connect_uses_the_cluster_transport(tmp_path):
    with pytest.raises(FileNotFoundError):
        WatchCache.connect(kubeconfig=str(tmp_path / "missing"))


# ---------------------------------------------------------------------------------------------------------
# The cache: one snapshot, published atomically.


def test_cache_is_synced_only_once_every_kind_has_listed():
    cache = cache_of(Router())
    for name in ("resourceflavors", "nodes", "localqueues", "clusterqueues", "namespaces"):
        cache.informers[name].relist()
        assert not cache.state.synced
    cache.informers["deployments"].relist()
    assert cache.state.synced
    assert cache.state.generation == 6


def test_cache_publishes_new_snapshots_and_leaves_old_ones_alone():
    team = TeamQuota(namespace="t", quota_name="q")
    router = Router(
        {
            "resourceflavors": [page([resource_flavor("a100")], "1")],
            "nodes": [page([node("g", "a100", 8)], "1")],
            "localqueues": [page([local_queue("t")], "1")],
            "clusterqueues": [page([cluster_queue(team, ["a100"])], "1")],
            "namespaces": [page([team_namespace(team)], "1")],
        },
        {"resourceflavors": [[("ADDED", with_rv(resource_flavor("h100"), "2"))]]},
    )
    cache = cache_of(router)
    seen: list[ClusterState] = []
    cache.add_listener(seen.append)
    run(cache, router)
    first = next(s for s in seen if s.pools)
    assert first.pools == {"a100"}  # published before the watch event, and never changed since
    final = cache.state
    assert final.pools == {"a100", "h100"}
    assert final.local_queues == {"t": {"default": "t"}}
    assert final.namespaces == {"t": True}
    assert final.pool_max_gpu == {"a100": 8}
    assert [s.generation for s in seen] == sorted(s.generation for s in seen)
    stats = cache.stats()
    assert stats["resourceflavors"]["objects"] == 2 and stats["nodes"]["synced"]


def test_a_failing_listener_does_not_break_the_cache():
    cache = cache_of(Router())

    def bad(state):
        raise RuntimeError("listener bug")

    cache.add_listener(bad)
    for inf in cache.informers.values():
        inf.relist()
    assert cache.state.synced
