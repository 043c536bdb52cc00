"""The watch-driven cache: list paging, watch events, bookmarks, 410 Gone re-lists, error back-off, and the
snapshot swap, against a scripted fake of the Kubernetes list/watch calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from types import MappingProxyType

import orjson
import pytest
from urllib3.exceptions import ReadTimeoutError

from admission.state import (
    RESOURCES,
    ClusterState,
    Gone,
    Informer,
    WatchCache,
    _lines,
    reduce_cluster_queue,
    reduce_flavor,
    reduce_local_queue,
    reduce_namespace,
    reduce_node,
)
from gpuctl.constants import BUDGET_FLAVOR, Labels
from queues import TeamQuota, budget_flavor, cluster_queue, local_queue, resource_flavor, team_namespace
from tests.unit.test_admission_fixtures import node

NODES = next(r for r in RESOURCES if r.name == "nodes")
FLAVORS = next(r for r in RESOURCES if r.name == "resourceflavors")


class FakeResp:
    """What `_preload_content=False` returns: `.data` for a list, `.stream()` for a watch."""

    def __init__(self, data: bytes = b"", chunks: Iterable[bytes] = (), block: threading.Event | None = None):
        self.data = data
        self._chunks = list(chunks)
        self._block = block
        self.closed = False

    def stream(self, amt=None, decode_content=True):
        yield from self._chunks
        if self._block is not None:  # a watch with nothing more to say, until closed
            while not self._block.wait(0.01):
                if self.closed:
                    raise ConnectionError("closed")

    def release_conn(self):
        pass

    def close(self):
        self.closed = True


class ApiError(Exception):
    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


def listing(items: list[dict], rv: str, cont: str = "") -> FakeResp:
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    return FakeResp(orjson.dumps({"items": items, "metadata": meta}))


def events(*evs: tuple[str, dict]) -> FakeResp:
    return FakeResp(chunks=[orjson.dumps({"type": t, "object": o}) + b"\n" for t, o in evs])


def with_rv(obj: dict, rv: str) -> dict:
    obj["metadata"]["resourceVersion"] = rv
    return obj


class Script:
    """A list function answering from scripted responses; records every call's arguments."""

    def __init__(self, lists: list, watches: list) -> None:
        self.lists, self.watches, self.calls = list(lists), list(watches), []
        self.done = threading.Event()

    def __call__(self, **kw):
        self.calls.append(kw)
        queue = self.watches if kw.get("watch") else self.lists
        if not queue:
            self.done.set()
            return FakeResp(block=threading.Event())  # park the informer until stopped
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def run_until_done(informer: Informer, script: Script, timeout: float = 5.0) -> None:
    informer.start()
    assert script.done.wait(timeout), f"script not consumed; calls: {script.calls}"
    time.sleep(0.05)
    informer.stop()
    informer.join(2)


def collector():
    changes: list[dict] = []
    return changes, lambda name, store: changes.append(store)


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
    team = TeamQuota(namespace="t", quota_name="q")
    assert reduce_local_queue(local_queue("t")) == (("t", "default"), "t")
    assert reduce_cluster_queue(cluster_queue(team, ["a100", "a10"]))[1] >= {"a100", "a10"}
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
# The informer.


def test_list_follows_continue_tokens_and_keeps_the_last_resource_version():
    script = Script([listing([node("a", "p", 1)], "10", cont="c1"), listing([node("b", "p", 1)], "11")], [])
    changes, on_change = collector()
    inf = Informer(NODES, script, on_change)
    inf.list()
    assert set(changes[-1]) == {"a", "b"}
    assert script.calls[1]["_continue"] == "c1" and script.calls[0]["limit"] == 500
    assert inf.synced
    assert all(c["_preload_content"] is False for c in script.calls)


def test_watch_events_update_the_store_and_heartbeats_cost_nothing():
    a = node("a", "p", 8)
    heartbeat = node("a", "p", 8)
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    relabelled = node("a", "q", 8)
    script = Script(
        [listing([a], "10")],
        [
            events(
                ("ADDED", with_rv(node("b", "p", 4), "11")),
                ("MODIFIED", with_rv(heartbeat, "12")),  # nothing the rules read changed
                ("BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "13"}}),
                ("MODIFIED", with_rv(relabelled, "14")),
                ("DELETED", with_rv(node("b", "p", 4), "15")),
            )
        ],
    )
    changes, on_change = collector()
    inf = Informer(NODES, script, on_change)
    run_until_done(inf, script)
    assert [sorted(c) for c in changes] == [["a"], ["a", "b"], ["a", "b"], ["a"]]
    assert changes[2]["a"].pool == "q"
    watches = [c for c in script.calls if c.get("watch")]
    assert watches[0]["resource_version"] == "10" and watches[0]["allow_watch_bookmarks"] is True
    assert watches[1]["resource_version"] == "15"  # resumed after the last event, no re-list
    assert inf.relists == 0


def test_410_error_event_relists_and_drops_objects_deleted_meanwhile():
    gone = {"kind": "Status", "code": 410, "message": "too old resource version"}
    script = Script(
        [listing([node("a", "p", 1), node("b", "p", 1)], "10"), listing([node("a", "p", 1)], "50")],
        [events(("ERROR", gone))],
    )
    changes, on_change = collector()
    inf = Informer(NODES, script, on_change)
    run_until_done(inf, script)
    assert inf.relists == 1
    assert set(changes[-1]) == {"a"}
    last_watch = [c for c in script.calls if c.get("watch")][-1]
    assert last_watch["resource_version"] == "50"


def test_http_410_on_the_watch_call_relists():
    script = Script([listing([], "10"), listing([node("a", "p", 1)], "20")], [ApiError(410)])
    changes, on_change = collector()
    inf = Informer(NODES, script, on_change)
    run_until_done(inf, script)
    assert inf.relists == 1 and set(changes[-1]) == {"a"}


def test_other_errors_back_off_and_resume_from_the_same_version():
    script = Script([listing([node("a", "p", 1)], "10")], [ConnectionResetError("reset"), events()])
    inf = Informer(NODES, script, lambda n, s: None)
    run_until_done(inf, script)
    watches = [c for c in script.calls if c.get("watch")]
    assert [w["resource_version"] for w in watches[:2]] == ["10", "10"]
    assert inf.relists == 0


class _SilentResp(FakeResp):
    def stream(self, amt=None, decode_content=True):
        raise ReadTimeoutError(None, "/api/v1/nodes", "Read timed out.")
        yield b""  # pragma: no cover


def test_a_silent_watch_is_reopened_from_the_same_version_at_once():
    script = Script([listing([node("a", "p", 1)], "10")], [_SilentResp(), events()])
    inf = Informer(NODES, script, lambda n, s: None, read_timeout=0.01)
    t0 = time.monotonic()
    run_until_done(inf, script)
    watches = [c for c in script.calls if c.get("watch")]
    assert [w["resource_version"] for w in watches[:2]] == ["10", "10"]
    assert watches[0]["_request_timeout"] == (10, 0.01)
    assert inf.relists == 0 and len([c for c in script.calls if not c.get("watch")]) == 1
    assert time.monotonic() - t0 < 0.5  # no back-off: silence is not an error


def test_failed_initial_list_is_retried_until_it_works():
    script = Script([ApiError(503), listing([node("a", "p", 1)], "10")], [])
    changes, on_change = collector()
    inf = Informer(NODES, script, on_change)
    run_until_done(inf, script)
    assert inf.synced and set(changes[-1]) == {"a"}


def test_error_event_is_gone():
    inf = Informer(NODES, lambda **kw: None, lambda n, s: None)
    with pytest.raises(Gone):
        inf.handle({"type": "ERROR", "object": {"code": 500}})


def test_flavor_watch_uses_gpuctls_label_selector():
    script = Script([listing([resource_flavor("a100")], "1")], [])
    inf = Informer(FLAVORS, script, lambda n, s: None)
    inf.list()
    assert script.calls[0]["label_selector"] == "app.kubernetes.io/managed-by=gpuctl"


def test_stop_closes_a_blocked_watch():
    script = Script([listing([], "1")], [])
    inf = Informer(NODES, script, lambda n, s: None)
    inf.start()
    assert script.done.wait(5)
    inf.stop()
    inf.join(2)
    assert not inf._thread.is_alive()  # type: ignore[union-attr]


def test_lines_reassembles_events_split_across_chunks():
    resp = FakeResp(chunks=[b'{"a":', b'1}\n{"b"', b":2}\n\n", b'{"c":3}'])
    assert list(_lines(resp)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


# ---------------------------------------------------------------------------------------------------------
# The cache: one snapshot, published atomically.


def _cache(
    lists: dict[str, list], watches: dict[str, list] | None = None
) -> tuple[WatchCache, dict[str, Script]]:
    scripts = {
        r.name: Script(lists.get(r.name, [listing([], "1")]), (watches or {}).get(r.name, []))
        for r in RESOURCES
    }
    return WatchCache(scripts), scripts


def test_cache_is_synced_only_once_every_kind_has_listed():
    cache, _ = _cache({})
    for name in ("resourceflavors", "nodes", "localqueues", "clusterqueues"):
        cache.informers[name].list()
        assert not cache.state.synced
    cache.informers["namespaces"].list()
    assert cache.state.synced
    assert cache.state.generation == 5


def test_cache_publishes_new_snapshots_and_leaves_old_ones_alone():
    team = TeamQuota(namespace="t", quota_name="q")
    cache, _ = _cache(
        {
            "resourceflavors": [listing([resource_flavor("a100")], "1")],
            "nodes": [listing([node("g", "a100", 8)], "1")],
            "localqueues": [listing([local_queue("t")], "1")],
            "clusterqueues": [listing([cluster_queue(team, ["a100"])], "1")],
            "namespaces": [listing([team_namespace(team)], "1")],
        },
        {"resourceflavors": [events(("ADDED", with_rv(resource_flavor("h100"), "2")))]},
    )
    seen: list[ClusterState] = []
    cache.add_listener(seen.append)
    cache.start()
    try:
        assert cache.wait_synced(5)
        deadline = time.monotonic() + 5
        while "h100" not in cache.state.pools:
            assert time.monotonic() < deadline, cache.stats()
            time.sleep(0.01)
    finally:
        cache.stop()
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
    cache, _ = _cache({})

    def bad(state):
        raise RuntimeError("listener bug")

    cache.add_listener(bad)
    for inf in cache.informers.values():
        inf.list()
    assert cache.state.synced
