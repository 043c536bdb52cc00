"""One informer (client-go's, in small): list, then watch, into a thread-safe store.

Every long-running part of gpuctl keeps its view of the cluster this way: `gpuctl serve` (metrics,
pool reconciler, the REST API's reads; gpuctl.server.cache) and the admission webhook
(admission.state, which reduces objects to an immutable snapshot). This module owns the watch
protocol, kopf style; `Cluster` only sends requests and reads lines.

The protocol, per resource:
- **List** page by page (`limit`/`continue`, so a 20,000-pod cluster never sits in memory as one JSON
  document), replace the store, and tell handlers the difference from what was held before (so a
  re-list after a lost watch still shows every add, change and delete).
- **Watch** from the list's resourceVersion with `allowWatchBookmarks`; every event, bookmarks
  included, advances the resourceVersion, so a watch the server ends (timeoutSeconds) is reopened
  where it stopped, without a list.
- **410 Gone** (history compacted), on the watch call or as an ERROR event: list again. Any other
  ERROR event also means the window is lost: list again, after the back-off.
- **Failures** (connection refused, 5xx): back off (doubling, with jitter so a restarted API server is
  not hit by every informer at once), then resume the watch from the same resourceVersion; a failed
  list is retried the same way.
- **Silence**: a read timeout (bookmarks arrive about once a minute) reopens a watch whose connection
  died without a FIN, at once and from the same resourceVersion.

Objects go through `transform` as they arrive (trim what nobody reads, or reduce to a small value;
None = "not relevant", kept out of the store), and `summarize` may keep a precomputed record beside
each. Handlers get (event type, old, new) for every change, on the informer's thread; listeners get one
call per applied batch (a list, or one event that changed something). Readers get new lists of
shared objects, which they must treat as read-only.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuctl.cluster.client import ApiError, WatchIdle

log = logging.getLogger("gpuctl.cluster.informer")

PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = 300
# The API server sends a bookmark about every minute on a quiet watch: 90 s of silence means trouble.
READ_TIMEOUT_SECONDS = 90.0
# Back-off after a failure: doubles from MIN to MAX (each wait jittered to 50-150 %), reset on success.
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0
# A watch the server closes sooner than this, without a single event, counts as a failure (no hot loop).
MIN_WATCH_SECONDS = 1.0

Handler = Callable[[str, Any, Any], None]
"""handler(event_type, old, new): ADDED (old None), MODIFIED, DELETED (new None); transformed objects."""


class Transport(Protocol):
    """What an informer needs of gpuctl.cluster.Cluster (tests pass a fake)."""

    def get(self, api_path: str, **query: Any) -> dict: ...

    def watch(
        self,
        api_path: str,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        read_timeout: float | None = None,
        raw: bool = False,
        on_open: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[tuple[str, dict]]: ...


class Gone(Exception):
    """The watch window was lost (HTTP 410, or an ERROR event): list again."""

    def __init__(self, message: str, code: int = 410):
        super().__init__(message)
        self.code = code


def object_key(obj: dict) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKeyFunc)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def strip_metadata(raw: dict) -> dict:
    """Default transform: the object without managedFields (often half of its size)."""
    meta = dict(raw.get("metadata") or {})
    meta.pop("managedFields", None)
    return {**raw, "metadata": meta}


@dataclass
class InformerStats:
    """What a service reports about its own health (gpuctl_cache_* metrics, the webhook's stats)."""

    lists: int = 0  # every full list, the first one included
    relists: int = 0  # lists after a lost watch window (410 Gone, ERROR events)
    watch_restarts: int = 0  # watches opened
    errors: int = 0
    events: int = 0  # watch events applied (bookmarks excluded)
    last_event: float = 0.0  # wall-clock time of the last event or bookmark
    last_list: float = 0.0
    errors_by_reason: dict[str, int] = field(default_factory=dict)


class Informer:
    """List+watch of one resource into a store keyed by `key(raw)`; thread-safe reads."""

    def __init__(
        self,
        cluster: Transport,
        name: str,
        api_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[dict], Any] | None = None,
        key: Callable[[dict], Hashable] = object_key,
        summarize: Callable[[Any], Any] | None = None,
        page_size: int = PAGE_SIZE,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX),
    ):
        self.cluster = cluster
        self.name = name
        self.api_path = api_path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform or strip_metadata
        self.key = key
        self.summarize = summarize
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.backoff_min, self.backoff_max = backoff
        self.resource_version = ""
        self.synced = threading.Event()
        self.stats = InformerStats()
        self._items: dict[Hashable, Any] = {}
        self._summaries: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self._handlers: list[Handler] = []
        self._listeners: list[Callable[[Informer], None]] = []
        self._stop = threading.Event()
        self._close_watch: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- reads
    def list(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())

    def items(self) -> dict[Hashable, Any]:
        """A copy of the store (key -> object)."""
        with self._lock:
            return dict(self._items)

    def summaries(self) -> list[Any]:
        with self._lock:
            return list(self._summaries.values())

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)

    def add_handler(self, handler: Handler) -> None:
        """handler(etype, old, new) for every change. Register before start() to see the first list
        as ADDED events."""
        self._handlers.append(handler)

    def add_listener(self, listener: Callable[[Informer], None]) -> None:
        """listener(informer) once per applied batch: after every list (the first one always, later
        ones when something changed) and after every event that changed the store."""
        self._listeners.append(listener)

    # ---------------------------------------------------------------- running
    def start(self, stop: threading.Event | None = None) -> threading.Thread:
        if stop is not None:
            self._stop = stop
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Stop the loop and abort a watch blocked in a read."""
        self._stop.set()
        close = self._close_watch
        if close is not None:
            close()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _wait(self, backoff: float) -> float:
        """Sleep a jittered `backoff` (or until stopped); return the next back-off."""
        self._stop.wait(backoff * (0.5 + random.random()))
        return min(backoff * 2, self.backoff_max)

    def run(self, stop: threading.Event | None = None) -> None:
        """List, then watch until stopped (see the module docstring for every transition)."""
        if stop is not None:
            self._stop = stop
        stop = self._stop
        backoff = self.backoff_min
        listed = self.synced.is_set() and bool(self.resource_version)  # relist() already ran
        while not stop.is_set():
            try:
                if not listed:
                    self.relist()
                    listed = True
                    backoff = self.backoff_min
                started = time.monotonic()
                if self.watch_once() or time.monotonic() - started >= MIN_WATCH_SECONDS:
                    backoff = self.backoff_min
                elif not stop.is_set():
                    backoff = self._wait(backoff)  # closed at once with nothing said: do not spin
            except WatchIdle:
                log.debug("%s: watch silent for %ss, reopening", self.name, self.read_timeout)
            except Gone as e:
                self._count_error(str(e.code))
                log.info("%s: watch window lost (%s %s), listing again", self.name, e.code, e)
                listed = False
                self.stats.relists += 1
                if e.code != 410:
                    backoff = self._wait(backoff)
            except ApiError as e:
                if stop.is_set():
                    break
                self._count_error(str(e.status))
                if e.status == 410:
                    log.info("%s: resourceVersion too old, listing again", self.name)
                    listed = False
                    self.stats.relists += 1
                    continue
                log.warning("%s: %s; retrying in about %.1fs", self.name, e, backoff)
                backoff = self._wait(backoff)
            except Exception as e:
                if stop.is_set():
                    break
                self._count_error(type(e).__name__)
                log.warning("%s: %s: %s; retrying in about %.1fs", self.name, type(e).__name__, e, backoff)
                backoff = self._wait(backoff)

    def _count_error(self, reason: str) -> None:
        self.stats.errors += 1
        self.stats.errors_by_reason[reason] = self.stats.errors_by_reason.get(reason, 0) + 1

    # ---------------------------------------------------------------- list
    def relist(self) -> str:
        """Fetch every object page by page; replace the store; tell handlers what changed."""
        fresh: dict[Hashable, Any] = {}
        cont: str | None = None
        rv = ""
        while True:
            page = self.cluster.get(
                self.api_path,
                labelSelector=self.label_selector,
                fieldSelector=self.field_selector,
                limit=self.page_size,
                **({"continue": cont} if cont else {}),
            )
            for raw in page.get("items") or ():
                obj = self.transform(raw)
                if obj is not None:
                    fresh[self.key(raw)] = obj
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            cont = meta.get("continue")
            del page
            if not cont:
                break
        fresh_summaries = {k: self.summarize(o) for k, o in fresh.items()} if self.summarize else {}
        with self._lock:
            old = self._items
            self._items = fresh
            self._summaries = fresh_summaries
            self.resource_version = rv
        self.stats.lists += 1
        self.stats.last_list = time.time()
        changed = False
        for key, obj in old.items():
            if key not in fresh:
                changed = True
                self._dispatch("DELETED", obj, None)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                changed = True
                self._dispatch("ADDED", None, obj)
            elif before != obj:
                changed = True
                self._dispatch("MODIFIED", before, obj)
        first = not self.synced.is_set()
        self.synced.set()
        if changed or first:
            self._notify()
        return rv

    # ---------------------------------------------------------------- watch
    def _opened(self, close: Callable[[], None]) -> None:
        self._close_watch = close
        if self._stop.is_set():  # stop() ran between the request and now
            close()

    def watch_once(self) -> int:
        """One watch from `resource_version` until the server ends it; returns the events seen."""
        self.stats.watch_restarts += 1
        seen = 0
        try:
            for etype, raw in self.cluster.watch(
                self.api_path,
                resource_version=self.resource_version,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                timeout_seconds=self.watch_timeout,
                read_timeout=self.read_timeout,
                raw=True,
                on_open=self._opened,
            ):
                seen += 1
                self.handle(etype, raw)
                if self._stop.is_set():
                    break
        finally:
            self._close_watch = None
        return seen

    def handle(self, etype: str, raw: dict) -> None:
        """One watch event as the server sent it: ERROR -> Gone; BOOKMARK only advances the
        resourceVersion; anything else is applied."""
        if etype == "ERROR":
            raise Gone(raw.get("message") or "watch error", int(raw.get("code") or 500))
        self.stats.last_event = time.time()
        rv = (raw.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = rv
        if etype == "BOOKMARK":
            return
        self.apply_event(etype, raw)

    def apply_event(self, etype: str, raw: dict) -> None:
        """Apply one ADDED/MODIFIED/DELETED object to the store and call the handlers (public for
        tests). An object whose transform is None leaves (or stays out of) the store; an event that
        changes nothing the transform keeps (a Node heartbeat) calls nobody."""
        key = self.key(raw)
        self.stats.events += 1
        self.stats.last_event = time.time()
        obj = None if etype == "DELETED" else self.transform(raw)
        summary = self.summarize(obj) if (obj is not None and self.summarize) else None
        with self._lock:
            old = self._items.get(key)
            if obj is None:
                if old is None:
                    return
                del self._items[key]
                self._summaries.pop(key, None)
            else:
                if old is not None and old == obj:
                    return
                self._items[key] = obj
                if self.summarize:
                    self._summaries[key] = summary
        if obj is None:
            self._dispatch("DELETED", old, None)
        elif old is None:
            self._dispatch("ADDED", None, obj)
        else:
            self._dispatch("MODIFIED", old, obj)
        self._notify()

    def _dispatch(self, etype: str, old: Any, new: Any) -> None:
        for h in self._handlers:
            try:
                h(etype, old, new)
            except Exception:
                log.exception("%s: handler %r failed on %s", self.name, h, etype)

    def _notify(self) -> None:
        for fn in self._listeners:
            try:
                fn(self)
            except Exception:
                log.exception("%s: listener %r failed", self.name, fn)


__all__ = [
    "Gone",
    "Handler",
    "Informer",
    "InformerStats",
    "Transport",
    "object_key",
    "strip_metadata",
]
