"""gpuctl.cluster.informer, the one list+watch of serve and the webhook, against a scripted transport:
paging, bookmarks, 410 Gone re-lists diffed against the store, back-off with jitter, silent watches,
stopping a blocked watch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuctl.cluster import ApiError
from gpuctl.cluster.client import WatchIdle, iter_lines
from gpuctl.cluster.informer import Gone, Informer


def obj(name: str, rv: str = "1", ns: str | None = "ns", **extra: Any) -> dict:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "uid": f"uid-{name}"}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta, **extra}


def page(items: list[dict], rv: str, cont: str = "") -> dict:
    return {"items": items, "metadata": {"resourceVersion": rv, **({"continue": cont} if cont else {})}}


class FakeCluster:
    """The transport an informer uses. `lists`: one answer per list call (a page dict or an exception);
    `watches`: one script per watch call: an exception (the call fails) or a list of (type, object)
    events and exceptions (raised mid-stream). With no script left a watch blocks until closed, and
    `done` is set."""

    def __init__(self, lists: list, watches: list | None = None) -> None:
        self.lists = list(lists)
        self.watches = list(watches or [])
        self.list_calls: list[dict] = []
        self.watch_calls: list[dict] = []
        self.done = threading.Event()

    def get(self, api_path: str, **query: Any) -> dict:
        self.list_calls.append(query)
        if not self.lists:
            raise AssertionError(f"unexpected list {query}")
        item = self.lists.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def watch(
        self, api_path: str, *, on_open: Callable[[Callable[[], None]], None] | None = None, **kw: Any
    ) -> Iterator[tuple[str, dict]]:
        self.watch_calls.append(kw)
        if not self.watches:
            closed = threading.Event()
            if on_open is not None:
                on_open(closed.set)
            self.done.set()
            closed.wait(10)
            raise ConnectionError("closed")
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        if on_open is not None:
            on_open(lambda: None)
        for ev in script:
            if isinstance(ev, Exception):
                raise ev
            yield ev

    def rvs(self) -> list[str | None]:
        return [c.get("resource_version") for c in self.watch_calls]


def run_until_done(inf: Informer, fake: FakeCluster, timeout: float = 5.0) -> None:
    inf.start()
    assert fake.done.wait(timeout), (
        f"script not consumed: lists {fake.list_calls}, watches {fake.watch_calls}"
    )
    inf.stop()
    inf.join(2)
    assert not inf._thread.is_alive()  # type: ignore[union-attr]


def informer(fake: FakeCluster, **kw: Any) -> Informer:
    kw.setdefault("backoff", (0.001, 0.004))
    return Informer(fake, "things", "/api/v1/things", **kw)


def names(inf: Informer) -> list[str]:
    return sorted(o["metadata"]["name"] for o in inf.list())


def test_list_pages_through_continue_tokens_and_starts_the_watch_from_the_last_version() -> None:
    fake = FakeCluster([page([obj("a")], "10", cont="c1"), page([obj("b")], "11")])
    inf = informer(fake, page_size=1, label_selector="x=y")
    assert inf.relist() == "11"
    assert [c.get("continue") for c in fake.list_calls] == [None, "c1"]
    assert all(c["limit"] == 1 and c["labelSelector"] == "x=y" for c in fake.list_calls)
    assert names(inf) == ["a", "b"] and inf.synced.is_set() and inf.resource_version == "11"
    run_until_done(inf, fake)
    assert fake.watch_calls[0]["resource_version"] == "11"
    assert fake.watch_calls[0]["raw"] is True and fake.watch_calls[0]["read_timeout"] == inf.read_timeout


def test_events_update_the_store_bookmarks_advance_the_version_and_a_closed_watch_resumes() -> None:
    fake = FakeCluster(
        [page([obj("a")], "10")],
        [
            [
                ("ADDED", obj("b", "11")),
                ("MODIFIED", obj("a", "12", extra="x")),
                ("BOOKMARK", {"metadata": {"resourceVersion": "20"}}),
            ],
            [("DELETED", obj("b", "21"))],
        ],
    )
    inf = informer(fake)
    seen: list[tuple[str, str]] = []
    inf.add_handler(lambda t, old, new: seen.append((t, (new or old)["metadata"]["name"])))
    run_until_done(inf, fake)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    # The first watch ended (timeoutSeconds) after a bookmark: the next one starts there, no list.
    assert fake.rvs() == ["10", "20", "21"]
    assert inf.stats.lists == 1 and inf.stats.events == 3 and inf.stats.relists == 0
    assert names(inf) == ["a"]


def test_an_event_that_changes_nothing_the_transform_keeps_calls_nobody() -> None:
    fake = FakeCluster([page([], "1")])
    inf = informer(fake, transform=lambda o: {"name": o["metadata"]["name"], "gpu": o.get("gpu")})
    calls: list[str] = []
    batches: list[int] = []
    inf.add_handler(lambda t, old, new: calls.append(t))
    inf.add_listener(lambda i: batches.append(len(i)))
    inf.relist()
    inf.apply_event("ADDED", obj("n", "2", gpu=8))
    inf.apply_event("MODIFIED", obj("n", "3", gpu=8))  # a heartbeat: only the resourceVersion moved
    inf.apply_event("MODIFIED", obj("n", "4", gpu=4))
    assert calls == ["ADDED", "MODIFIED"]
    assert batches == [0, 1, 1]  # the first list, then one per change


def test_410_error_event_relists_and_handlers_see_the_difference() -> None:
    """While the watch was down, a was deleted, b changed and c appeared: handlers see exactly that."""
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    fake = FakeCluster(
        [page([obj("a"), obj("b")], "10"), page([obj("b", "7"), obj("c", "8")], "50")],
        [[("ERROR", gone)]],
    )
    inf = informer(fake)
    seen: list[tuple[str, str]] = []
    inf.add_handler(lambda t, old, new: seen.append((t, (new or old)["metadata"]["name"])))
    run_until_done(inf, fake)
    assert seen[:2] == [("ADDED", "a"), ("ADDED", "b")]
    assert sorted(seen[2:]) == [("ADDED", "c"), ("DELETED", "a"), ("MODIFIED", "b")]
    assert names(inf) == ["b", "c"]
    assert fake.rvs() == ["10", "50"]
    assert inf.stats.lists == 2 and inf.stats.relists == 1 and inf.stats.errors_by_reason == {"410": 1}


def test_http_410_on_the_watch_call_relists() -> None:
    fake = FakeCluster(
        [page([], "10"), page([obj("a")], "20")], [ApiError(410, "Gone", "too old resource version")]
    )
    inf = informer(fake)
    run_until_done(inf, fake)
    assert names(inf) == ["a"] and inf.stats.relists == 1 and fake.rvs() == ["10", "20"]


def test_failures_back_off_doubling_with_jitter_and_resume_from_the_same_version(monkeypatch) -> None:
    reset = ConnectionResetError("reset")
    fake = FakeCluster(
        [page([obj("a")], "10")],
        [reset, ApiError(503, "Service Unavailable", "etcd"), reset, reset, [("ADDED", obj("b", "11"))]],
    )
    inf = informer(fake, backoff=(0.001, 0.004))
    waits: list[float] = []
    real_wait = inf._stop.wait
    monkeypatch.setattr(inf._stop, "wait", lambda t=None: waits.append(t) or real_wait(0))
    monkeypatch.setattr("gpuctl.cluster.informer.random.random", lambda: 1.0)  # the top of the jitter
    run_until_done(inf, fake)
    assert waits[:4] == pytest.approx([0.0015, 0.003, 0.006, 0.006])  # x1.5 jitter, capped at 0.004
    assert fake.rvs()[:5] == ["10"] * 5  # no re-list: the watch resumes where it was
    assert inf.stats.lists == 1 and inf.stats.errors == 4
    assert inf.stats.errors_by_reason == {"ConnectionResetError": 3, "503": 1}


def test_jitter_spreads_waits_between_half_and_one_and_a_half_times(monkeypatch) -> None:
    inf = informer(FakeCluster([]))
    waits: list[float] = []
    monkeypatch.setattr(inf._stop, "wait", lambda t=None: waits.append(t))
    for r in (0.0, 0.5, 0.999):
        monkeypatch.setattr("gpuctl.cluster.informer.random.random", lambda r=r: r)
        assert inf._wait(2.0) == 0.004  # next back-off: doubled, capped
    assert waits == pytest.approx([1.0, 2.0, 2.998])


def test_a_silent_watch_is_reopened_at_once_from_the_same_version() -> None:
    fake = FakeCluster([page([obj("a")], "10")], [[WatchIdle("quiet")]])
    inf = informer(fake, backoff=(5.0, 5.0), read_timeout=0.01)
    t0 = time.monotonic()
    run_until_done(inf, fake)
    assert fake.rvs()[:2] == ["10", "10"] and fake.watch_calls[0]["read_timeout"] == 0.01
    assert inf.stats.lists == 1 and inf.stats.errors == 0
    assert time.monotonic() - t0 < 2  # silence is not a failure: no back-off


def test_a_watch_closed_at_once_with_nothing_said_backs_off(monkeypatch) -> None:
    fake = FakeCluster([page([], "1")], [[], []])
    inf = informer(fake)
    waits: list[float] = []
    monkeypatch.setattr(inf._stop, "wait", lambda t=None: waits.append(t))
    run_until_done(inf, fake)
    assert len(waits) >= 2


def test_a_failed_initial_list_is_retried_until_it_works() -> None:
    fake = FakeCluster([ApiError(503, "Service Unavailable", ""), OSError("refused"), page([obj("a")], "10")])
    inf = informer(fake)
    run_until_done(inf, fake)
    assert inf.synced.is_set() and names(inf) == ["a"] and inf.stats.errors == 2


def test_other_error_events_relist_after_the_back_off() -> None:
    with pytest.raises(Gone) as e:
        informer(FakeCluster([])).handle("ERROR", {"code": 500, "message": "internal"})
    assert e.value.code == 500
    fake = FakeCluster([page([obj("a")], "10"), page([obj("a")], "30")], [[("ERROR", {"code": 500})]])
    inf = informer(fake)
    run_until_done(inf, fake)
    assert inf.stats.relists == 1 and fake.rvs() == ["10", "30"]


def test_stop_closes_a_blocked_watch() -> None:
    fake = FakeCluster([page([], "1")])
    inf = informer(fake)
    inf.start()
    assert fake.done.wait(5)
    t0 = time.monotonic()
    inf.stop()
    inf.join(2)
    assert not inf._thread.is_alive() and time.monotonic() - t0 < 1  # type: ignore[union-attr]


def test_transform_none_keeps_an_object_out_and_custom_keys() -> None:
    inf = informer(
        FakeCluster([page([obj("keep", gpu=1), obj("drop")], "1")]),
        transform=lambda o: o.get("gpu"),
        key=lambda o: ("k", o["metadata"]["name"]),
    )
    inf.relist()
    assert inf.items() == {("k", "keep"): 1}
    inf.apply_event("MODIFIED", obj("keep"))  # stops qualifying: leaves the store
    assert inf.items() == {}


def test_summaries_follow_the_objects() -> None:
    inf = informer(FakeCluster([]), summarize=lambda o: o["metadata"]["resourceVersion"])
    inf.apply_event("ADDED", obj("a", "1"))
    inf.apply_event("MODIFIED", obj("a", "2"))
    inf.apply_event("ADDED", obj("b", "3"))
    assert sorted(inf.summaries()) == ["2", "3"]
    inf.apply_event("DELETED", obj("a", "4"))
    assert inf.summaries() == ["3"]


def test_a_failing_handler_or_listener_does_not_stop_the_informer() -> None:
    inf = informer(FakeCluster([]))
    got: list[str] = []

    def bad(*_: Any) -> None:
        raise RuntimeError("boom")

    inf.add_handler(bad)
    inf.add_listener(bad)
    inf.add_handler(lambda t, o, n: got.append(t))
    inf.apply_event("ADDED", obj("a"))
    assert got == ["ADDED"] and inf.get("ns/a") is not None


def test_watch_lines_are_reassembled_across_chunks() -> None:
    chunks = [b'{"a":', b'1}\n{"b"', b":2}\n\n", b'{"c":3}']
    assert list(iter_lines(chunks)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
