"""A watch-based cache of the objects `gpuctl serve` reads (client-go's informer, in small).

Why not list on demand: a scrape or a reconcile must not cost a 20,000-pod list, and the reconciler
must hear about a node change within seconds. Each `Informer` lists once (paged, so a big cluster never
sits in memory as one JSON document), then watches from the list's resourceVersion and applies every
event to a dict; a 410 Gone (history compacted) or a broken watch leads to a fresh list, diffed
against what it held so handlers still see every change.

Objects are trimmed as they arrive (`transform`): managedFields, heartbeat times and the parts of pod
specs nobody reads are dropped, which is most of the memory. An optional `summarize` function keeps a
small precomputed record per object next to it, so a scrape loops over tuples instead of walking
20,000 nested dicts. Readers get copies of the value lists (`list()`, `summaries()`): the lists are
new, the objects are shared and must be treated as read-only.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuctl.cluster import ApiError
from gpuctl.cluster.paths import path as kind_path
from gpuctl.constants import COHORT_NAME, MANAGED_BY_VALUE, Labels

log = logging.getLogger(__name__)

PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = 300
# Backoff after a failed list or watch: doubles from MIN to MAX, reset by a successful list.
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0

Handler = Callable[[str, Any, Any], None]
"""handler(event_type, old, new): ADDED (old None), MODIFIED, DELETED (new None); trimmed objects."""


class ClusterLike(Protocol):
    """The part of gpuctl.cluster.Cluster an informer uses (tests pass a fake)."""

    def get(self, api_path: str, **query: Any) -> dict: ...

    def watch(
        self,
        api_path: str,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[tuple[str, dict]]: ...


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


@dataclass
class InformerStats:
    """What the service reports about its own health (gpuctl_cache_* metrics)."""

    lists: int = 0
    watch_restarts: int = 0
    errors: int = 0
    events: int = 0
    last_event: float = 0.0
    last_list: float = 0.0
    errors_by_reason: dict[str, int] = field(default_factory=dict)


class Informer:
    """List+watch of one resource; thread-safe reads; handlers called on the informer's thread."""

    def __init__(
        self,
        cluster: ClusterLike,
        name: str,
        api_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[dict], Any] | None = None,
        summarize: Callable[[Any], Any] | None = None,
        page_size: int = PAGE_SIZE,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
    ):
        self.cluster = cluster
        self.name = name
        self.api_path = api_path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform or strip_metadata
        self.summarize = summarize
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self.stats = InformerStats()
        self._items: dict[str, Any] = {}
        self._summaries: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._handlers: list[Handler] = []
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- reads
    def list(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())

    def summaries(self) -> list[Any]:
        with self._lock:
            return list(self._summaries.values())

    def get(self, key: str) -> Any | None:
        with self._lock:
            return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)

    def add_handler(self, handler: Handler) -> None:
        """Register before start(): handlers see the initial list as ADDED events too."""
        self._handlers.append(handler)

    # ---------------------------------------------------------------- running
    def start(self, stop: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(
            target=self.run, args=(stop,), name=f"informer-{self.name}", daemon=True
        )
        self._thread.start()
        return self._thread

    def run(self, stop: threading.Event) -> None:
        """List, then watch until stopped; re-list on 410 Gone or any failure (with backoff)."""
        backoff = BACKOFF_MIN
        rv: str | None = None
        while not stop.is_set():
            try:
                if rv is None:
                    rv = self.relist()
                    backoff = BACKOFF_MIN
                rv = self._watch(rv, stop)
            except ApiError as e:
                self._count_error(str(e.status))
                if e.status == 410:
                    log.info("%s: watch history expired, re-listing", self.name)
                    rv = None
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.name, e, backoff)
                rv = None
                stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            except Exception as e:
                self._count_error(type(e).__name__)
                log.warning(
                    "%s: watch failed (%s: %s); re-listing in %.1fs", self.name, type(e).__name__, e, backoff
                )
                rv = None
                stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _count_error(self, reason: str) -> None:
        self.stats.errors += 1
        self.stats.errors_by_reason[reason] = self.stats.errors_by_reason.get(reason, 0) + 1

    def relist(self) -> str:
        """Fetch every object page by page; replace the store; tell handlers what changed."""
        fresh: dict[str, Any] = {}
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
            for raw in page.get("items") or []:
                obj = self.transform(raw)
                if obj is not None:
                    fresh[object_key(raw)] = obj
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion", rv)
            cont = meta.get("continue")
            del page
            if not cont:
                break
        fresh_summaries = {k: self.summarize(o) for k, o in fresh.items()} if self.summarize else {}
        with self._lock:
            old = self._items
            self._items = fresh
            self._summaries = fresh_summaries
        self.stats.lists += 1
        self.stats.last_list = time.time()
        for key, obj in old.items():
            if key not in fresh:
                self._dispatch("DELETED", obj, None)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._dispatch("ADDED", None, obj)
            elif before != obj:
                self._dispatch("MODIFIED", before, obj)
        self.synced.set()
        return rv

    def _watch(self, rv: str, stop: threading.Event) -> str:
        self.stats.watch_restarts += 1
        for etype, raw in self.cluster.watch(
            self.api_path,
            resource_version=rv,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout,
        ):
            rv = (raw.get("metadata") or {}).get("resourceVersion") or rv
            self.apply_event(etype, raw)
            if stop.is_set():
                break
        return rv

    def apply_event(self, etype: str, raw: dict) -> None:
        """Apply one watch event to the store and call the handlers (public for tests)."""
        key = object_key(raw)
        self.stats.events += 1
        self.stats.last_event = time.time()
        obj = None if etype == "DELETED" else self.transform(raw)
        summary = self.summarize(obj) if (obj is not None and self.summarize) else None
        with self._lock:
            old = self._items.get(key)
            if obj is None:
                self._items.pop(key, None)
                self._summaries.pop(key, None)
            else:
                self._items[key] = obj
                if self.summarize:
                    self._summaries[key] = summary
        if obj is None and old is None:
            return
        if obj is None:
            self._dispatch("DELETED", old, None)
        elif old is None:
            self._dispatch("ADDED", None, obj)
        else:
            self._dispatch("MODIFIED", old, obj)

    def _dispatch(self, etype: str, old: Any, new: Any) -> None:
        for h in self._handlers:
            try:
                h(etype, old, new)
            except Exception:
                log.exception("%s: handler %r failed on %s", self.name, h, etype)


class Cache:
    """The informers of one service process, by kind name ("Node", "Pod", ...)."""

    def __init__(self, cluster: ClusterLike):
        self.cluster = cluster
        self.informers: dict[str, Informer] = {}
        self._stop = threading.Event()
        self.started_at = 0.0

    def add(
        self,
        kind: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[dict], Any] | None = None,
        summarize: Callable[[Any], Any] | None = None,
    ) -> Informer:
        """Watch `kind` (a name of gpuctl.cluster.paths.RESOURCES) across all namespaces."""
        if kind in self.informers:
            raise ValueError(f"{kind} is already cached")
        inf = Informer(
            self.cluster,
            kind,
            kind_path(kind),
            label_selector=label_selector,
            field_selector=field_selector,
            transform=transform,
            summarize=summarize,
        )
        self.informers[kind] = inf
        return inf

    def __getitem__(self, kind: str) -> Informer:
        return self.informers[kind]

    def __contains__(self, kind: str) -> bool:
        return kind in self.informers

    def start(self) -> None:
        self.started_at = time.time()
        for inf in self.informers.values():
            inf.start(self._stop)

    def stop(self) -> None:
        self._stop.set()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for inf in self.informers.values():
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not inf.synced.wait(left):
                return False
        return True


# -------------------------------------------------------------------- trimming
_intern = sys.intern


def _interned_map(d: dict | None) -> dict:
    """Label maps repeat across thousands of objects: intern keys and values to share the strings."""
    return {_intern(k): _intern(v) if isinstance(v, str) else v for k, v in (d or {}).items()}


def _meta(raw: dict, *extra: str) -> dict:
    m = raw.get("metadata") or {}
    out: dict[str, Any] = {
        "name": m.get("name"),
        "uid": m.get("uid"),
        "resourceVersion": m.get("resourceVersion"),
    }
    if m.get("namespace"):
        out["namespace"] = _intern(m["namespace"])
    if m.get("labels"):
        out["labels"] = _interned_map(m["labels"])
    for k in ("creationTimestamp", "deletionTimestamp", *extra):
        if m.get(k) is not None:
            out[k] = m[k]
    return out


def strip_metadata(raw: dict) -> dict:
    """Default transform: the object without managedFields (often half of its size)."""
    meta = dict(raw.get("metadata") or {})
    meta.pop("managedFields", None)
    return {**raw, "metadata": meta}


def _conditions(conds: Iterable[dict] | None, *, message: bool = False) -> list[dict]:
    """Conditions without heartbeat times, so a heartbeat leaves the trimmed object unchanged."""
    keep = ("type", "status", "reason", "lastTransitionTime", *(("message",) if message else ()))
    return [{k: c[k] for k in keep if k in c} for c in conds or []]


def trim_node(raw: dict) -> dict:
    """What capacity and health need: labels, unschedulable, taints, Ready, capacity/allocatable."""
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    out_spec = {k: spec[k] for k in ("unschedulable", "taints") if spec.get(k)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(raw),
        "spec": out_spec,
        "status": {
            "capacity": _interned_map(status.get("capacity")),
            "allocatable": _interned_map(status.get("allocatable")),
            "conditions": _conditions(status.get("conditions")),
        },
    }


def _containers(cs: Iterable[dict] | None) -> list[dict]:
    out = []
    for c in cs or []:
        item: dict[str, Any] = {"name": c.get("name")}
        res = c.get("resources") or {}
        if res:
            item["resources"] = {k: _interned_map(v) for k, v in res.items() if k in ("requests", "limits")}
        if c.get("restartPolicy"):
            item["restartPolicy"] = c["restartPolicy"]
        out.append(item)
    return out


def trim_pod(raw: dict) -> dict:
    """A pod as the service uses it: where it runs, what it requests, its phase and owner."""
    meta = _meta(raw)
    owners = (raw.get("metadata") or {}).get("ownerReferences")
    if owners:
        meta["ownerReferences"] = [
            {k: o[k] for k in ("kind", "name", "uid", "controller") if k in o} for o in owners
        ]
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    out_spec: dict[str, Any] = {"containers": _containers(spec.get("containers"))}
    if spec.get("initContainers"):
        out_spec["initContainers"] = _containers(spec["initContainers"])
    for k in ("nodeName", "priorityClassName", "schedulerName"):
        if spec.get(k):
            out_spec[k] = _intern(spec[k])
    if spec.get("nodeSelector"):
        out_spec["nodeSelector"] = _interned_map(spec["nodeSelector"])
    out_status: dict[str, Any] = {"phase": _intern(status.get("phase") or "Pending")}
    if status.get("startTime"):
        out_status["startTime"] = status["startTime"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": out_spec, "status": out_status}


def trim_workload(raw: dict) -> dict:
    """A Kueue Workload: queue, priority, per-podset counts and requests, conditions, admission."""
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    pod_sets = []
    for ps in spec.get("podSets") or []:
        tspec = ((ps.get("template") or {}).get("spec")) or {}
        item: dict[str, Any] = {
            "name": ps.get("name"),
            "count": ps.get("count", 1),
            "template": {"spec": {"containers": _containers(tspec.get("containers"))}},
        }
        if tspec.get("initContainers"):
            item["template"]["spec"]["initContainers"] = _containers(tspec["initContainers"])
        if tspec.get("nodeSelector"):
            item["template"]["spec"]["nodeSelector"] = _interned_map(tspec["nodeSelector"])
        pod_sets.append(item)
    out_spec = {k: spec[k] for k in ("queueName", "priority", "priorityClassRef", "active") if k in spec}
    out_spec["podSets"] = pod_sets
    out_status: dict[str, Any] = {"conditions": _conditions(status.get("conditions"), message=False)}
    if status.get("admission"):
        adm = status["admission"]
        out_status["admission"] = {
            "clusterQueue": adm.get("clusterQueue"),
            "podSetAssignments": [
                {k: a[k] for k in ("name", "flavors", "resourceUsage", "count") if k in a}
                for a in adm.get("podSetAssignments") or []
            ],
        }
    if status.get("schedulingStats"):
        out_status["schedulingStats"] = status["schedulingStats"]
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": "Workload",
        "metadata": _meta(raw),
        "spec": out_spec,
        "status": out_status,
    }


MANAGED_SELECTOR = f"{Labels.MANAGED_BY}={MANAGED_BY_VALUE}"


def default_cache(cluster: ClusterLike, *, metrics: bool = True) -> Cache:
    """The informers `gpuctl serve` runs. Without metrics, pods and Workloads are not watched.

    ResourceFlavors and ClusterQueues are watched through the managed-by selector (gpuctl reads only
    its own); the Cohort by name, so a foreign Cohort named `gpuctl` is seen and left alone.
    """
    from gpuctl.server import metrics as m  # summaries live with the code that reads them

    cache = Cache(cluster)
    cache.add("Node", transform=trim_node, summarize=m.node_summary)
    cache.add("ResourceFlavor", label_selector=MANAGED_SELECTOR)
    cache.add("ClusterQueue", label_selector=MANAGED_SELECTOR)
    cache.add("Cohort", field_selector=f"metadata.name={COHORT_NAME}")
    if metrics:
        cache.add("Pod", transform=trim_pod)  # GPU sums: metrics.PodGpus, from the events
        cache.add("Workload", transform=trim_workload, summarize=m.workload_summary)
        cache.add("LocalQueue")
    return cache
