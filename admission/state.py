"""What the webhook knows about the cluster: an immutable snapshot, kept current by watches.

The request path must never call the API server: a webhook that does is as slow as its slowest API call
and, with failurePolicy Fail, turns an API server hiccup into refused pods. So background threads
list-and-watch the few kinds the rules need (pool ResourceFlavors, Nodes, LocalQueues, ClusterQueues,
Namespaces), reduce each object to the fields the rules read, and after every change publish a new
ClusterState by a single reference assignment. A request reads `cache.state` once and works on that
snapshot: no locks, no torn reads.

Watches resume from the last resourceVersion (bookmarks keep it fresh); a 410 Gone, or any error event,
means the window was lost, so the informer lists again and replaces its store wholesale, which also drops
objects deleted while it was not watching.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Protocol

import orjson
from urllib3.exceptions import ReadTimeoutError

from gpuctl.constants import KUEUE_GROUP, KUEUE_VERSION, MANAGED_BY_VALUE, NAMESPACE_MARKER_VALUE, Labels
from gpuctl.domain.pools import is_pool_flavor, node_gpus
from gpuctl.domain.teams import cluster_queue_flavors

log = logging.getLogger("gpuctl.admission.state")

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The parts of a Node the rules read."""

    name: str
    labels: Mapping[str, str]
    gpu: int  # status.allocatable["nvidia.com/gpu"]
    pool: str | None  # its runwhere.ai/pool label


@dataclass(frozen=True, slots=True)
class ClusterState:
    """One consistent view of the cluster. Never mutated after construction; replaced whole."""

    synced: bool = False
    pools: frozenset[str] = frozenset()
    nodes: Mapping[str, NodeInfo] = field(default_factory=_empty)
    pool_nodes: Mapping[str, tuple[NodeInfo, ...]] = field(default_factory=_empty)
    pool_max_gpu: Mapping[str, int] = field(default_factory=_empty)  # only pools that have nodes
    local_queues: Mapping[str, Mapping[str, str]] = field(
        default_factory=_empty
    )  # namespace -> LocalQueue -> ClusterQueue
    cluster_queues: Mapping[str, frozenset[str]] = field(
        default_factory=_empty
    )  # ClusterQueue -> flavors it has quota in
    namespaces: Mapping[str, bool] = field(default_factory=_empty)  # namespace -> managed by gpuctl
    generation: int = 0

    @classmethod
    def build(
        cls,
        *,
        pools: Iterable[str] = (),
        nodes: Iterable[NodeInfo] = (),
        local_queues: Mapping[str, Mapping[str, str]] | None = None,
        cluster_queues: Mapping[str, Iterable[str]] | None = None,
        namespaces: Mapping[str, bool] | None = None,
        synced: bool = True,
        generation: int = 0,
    ) -> ClusterState:
        """A snapshot from already-reduced parts (the cache and tests both build states this way)."""
        node_map = {n.name: n for n in nodes}
        by_pool: dict[str, list[NodeInfo]] = {}
        for n in node_map.values():
            if n.pool is not None:
                by_pool.setdefault(n.pool, []).append(n)
        return cls(
            synced=synced,
            pools=frozenset(pools),
            nodes=MappingProxyType(node_map),
            pool_nodes=MappingProxyType(
                {p: tuple(sorted(ns, key=lambda n: n.name)) for p, ns in by_pool.items()}
            ),
            pool_max_gpu=MappingProxyType({p: max(n.gpu for n in ns) for p, ns in by_pool.items()}),
            local_queues=MappingProxyType(
                {ns: MappingProxyType(dict(q)) for ns, q in (local_queues or {}).items()}
            ),
            cluster_queues=MappingProxyType({k: frozenset(v) for k, v in (cluster_queues or {}).items()}),
            namespaces=MappingProxyType(dict(namespaces or {})),
            generation=generation,
        )

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]], *, synced: bool = True) -> ClusterState:
        """A snapshot from raw Kubernetes objects of the watched kinds (for tests, benchmarks and
        `--static-state`); other kinds are ignored."""
        stores: dict[str, dict] = {r.name: {} for r in RESOURCES}
        by_kind = {r.kind: r for r in RESOURCES}
        for obj in objects:
            r = by_kind.get(obj.get("kind", ""))
            if r is None:
                continue
            key, value = r.reduce(obj)
            if value is not None:
                stores[r.name][key] = value
        return compose(stores, synced=synced)


# ---------------------------------------------------------------------------------------------------------
# Reducing raw objects. Each returns (store key, value); value None means "not relevant, treat as absent"
# so that an object that stops qualifying (a flavor losing gpuctl's label) disappears from the store.


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else _EMPTY


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def reduce_flavor(obj: Mapping[str, Any]) -> tuple[str, bool | None]:
    return _meta(obj).get("name", ""), (True if is_pool_flavor(obj) else None)


def reduce_node(obj: Mapping[str, Any]) -> tuple[str, NodeInfo]:
    name = _meta(obj).get("name", "")
    labels = _labels(obj)
    return name, NodeInfo(name, MappingProxyType(labels), node_gpus(obj), labels.get(Labels.POOL))


def reduce_local_queue(obj: Mapping[str, Any]) -> tuple[tuple[str, str], str]:
    meta = _meta(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    cq = spec.get("clusterQueue")
    return (meta.get("namespace", ""), meta.get("name", "")), cq if isinstance(cq, str) else ""


def reduce_cluster_queue(obj: Mapping[str, Any]) -> tuple[str, frozenset[str]]:
    return _meta(obj).get("name", ""), cluster_queue_flavors(obj)


def reduce_namespace(obj: Mapping[str, Any]) -> tuple[str, bool]:
    return _meta(obj).get("name", ""), _labels(obj).get(Labels.NAMESPACE) == NAMESPACE_MARKER_VALUE


@dataclass(frozen=True)
class Resource:
    """One watched kind: how to list it and how to reduce its objects."""

    name: str
    kind: str
    reduce: Callable[[Mapping[str, Any]], tuple[Any, Any]]
    # (group, version, plural) for custom resources; None for core kinds.
    custom: tuple[str, str, str] | None = None
    label_selector: str | None = None


RESOURCES: Final = (
    Resource(
        "resourceflavors",
        "ResourceFlavor",
        reduce_flavor,
        (KUEUE_GROUP, KUEUE_VERSION, "resourceflavors"),
        f"{Labels.MANAGED_BY}={MANAGED_BY_VALUE}",
    ),
    Resource("nodes", "Node", reduce_node),
    Resource("localqueues", "LocalQueue", reduce_local_queue, (KUEUE_GROUP, KUEUE_VERSION, "localqueues")),
    Resource(
        "clusterqueues", "ClusterQueue", reduce_cluster_queue, (KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")
    ),
    Resource("namespaces", "Namespace", reduce_namespace),
)


def compose(stores: Mapping[str, Mapping[Any, Any]], *, synced: bool, generation: int = 0) -> ClusterState:
    """A ClusterState from the informers' stores (keyed as RESOURCES reduce them)."""
    lqs: dict[str, dict[str, str]] = {}
    for (ns, name), cq in stores.get("localqueues", {}).items():
        lqs.setdefault(ns, {})[name] = cq
    return ClusterState.build(
        pools=stores.get("resourceflavors", {}).keys(),
        nodes=stores.get("nodes", {}).values(),
        local_queues=lqs,
        cluster_queues=stores.get("clusterqueues", {}),
        namespaces=stores.get("namespaces", {}),
        synced=synced,
        generation=generation,
    )


# ---------------------------------------------------------------------------------------------------------
# The watch-driven cache.


class StateSource(Protocol):
    """What the server reads: a current snapshot. WatchCache and StaticState implement it."""

    @property
    def state(self) -> ClusterState: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class StaticState:
    """A fixed snapshot (benchmarks, tests, `--static-state`): always synced, never changes."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    @property
    def state(self) -> ClusterState:
        return self._state

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Gone(Exception):
    """The watch window was lost (HTTP 410 or an ERROR event): list again."""


class _Quiet(Exception):
    """The watch connection said nothing for too long."""


ListFn = Callable[..., Any]


class Informer:
    """List-then-watch one resource into a store, calling `on_change(store)` with a fresh copy whenever the
    reduced content changes (Node heartbeats change nothing the rules read, so they cost no rebuild)."""

    def __init__(
        self,
        resource: Resource,
        list_fn: ListFn,
        on_change: Callable[[str, dict], None],
        *,
        watch_timeout: int = 300,
        read_timeout: float = 90.0,
        page_size: int = 500,
    ) -> None:
        # The API server ends each watch after watch_timeout seconds and sends bookmarks about every
        # minute; read_timeout bounds how long a silently dead connection can leave the cache stale.
        self._read_timeout = read_timeout
        self.resource = resource
        self._list_fn = list_fn
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._store: dict[Any, Any] = {}
        self._rv = ""
        self.synced = False
        self.relists = 0
        self.last_event = 0.0
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.resource.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # closing a socket another thread reads may raise anything
                resp.close()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if not self._rv:
                    self.list()
                self.watch()
                backoff = 0.5
            except Gone:
                log.info("%s: watch window lost (410), listing again", self.resource.name)
                self._rv = ""
                self.relists += 1
            except _Quiet:
                # No event, not even a bookmark, for read_timeout seconds: the connection may be dead
                # without a FIN. Watch again from the same version (cheap) rather than trust it.
                log.debug("%s: watch idle for %ss, reconnecting", self.resource.name, self._read_timeout)
            except Exception as exc:
                if self._stop.is_set():
                    break
                status = getattr(exc, "status", None)
                if status == 410:
                    self._rv = ""
                    self.relists += 1
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.resource.name, _short(exc), backoff)
                self._stop.wait(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 30.0)

    # -- list and watch
    def _call(self, **kwargs: Any) -> Any:
        r = self.resource
        if r.label_selector:
            kwargs["label_selector"] = r.label_selector
        return self._list_fn(_preload_content=False, **kwargs)

    def list(self) -> None:
        store: dict[Any, Any] = {}
        token = ""
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            resp = self._call(**kwargs)
            try:
                body = orjson.loads(resp.data)
            finally:
                _release(resp)
            for obj in body.get("items") or ():
                key, value = self.resource.reduce(obj)
                if value is not None:
                    store[key] = value
            meta = body.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                self._rv = meta.get("resourceVersion") or ""
                break
        changed = store != self._store or not self.synced
        self._store = store
        self.synced = True
        self.last_event = time.monotonic()
        if changed:
            self._on_change(self.resource.name, dict(store))

    def watch(self) -> None:
        resp = self._call(
            watch=True,
            resource_version=self._rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _request_timeout=(10, self._read_timeout),
        )
        self._resp = resp
        try:
            for line in _lines(resp):
                if self._stop.is_set():
                    return
                self.handle(orjson.loads(line))
        except ReadTimeoutError as exc:
            raise _Quiet() from exc
        finally:
            self._resp = None
            _release(resp)

    def handle(self, event: Mapping[str, Any]) -> None:
        """Apply one watch event (public for tests)."""
        etype = event.get("type")
        obj = event.get("object") or {}
        self.last_event = time.monotonic()
        if etype == "ERROR":
            raise Gone(obj.get("message", "watch error"))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._rv = rv
        if etype == "BOOKMARK":
            return
        key, value = self.resource.reduce(obj)
        if etype == "DELETED" or value is None:
            if key not in self._store:
                return
            del self._store[key]
        else:
            if self._store.get(key) == value:
                return
            self._store[key] = value
        self._on_change(self.resource.name, dict(self._store))


def _release(resp: Any) -> None:
    for name in ("release_conn", "close"):
        fn = getattr(resp, name, None)
        if fn is not None:
            with contextlib.suppress(Exception):
                fn()


def _lines(resp: Any) -> Iterator[bytes]:
    """Newline-delimited watch events from a streaming urllib3 response."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=True) if hasattr(resp, "stream") else resp:
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            line, buf = buf[:i], buf[i + 1 :]
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@dataclass
class WatchCache:
    """Informers for every kind the rules read, publishing one ClusterState after every change."""

    list_fns: Mapping[str, ListFn]
    watch_timeout: int = 300
    informers: dict[str, Informer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[str, dict] = {r.name: {} for r in RESOURCES}
        self._state = ClusterState()
        self._listeners: list[Callable[[ClusterState], None]] = []
        for r in RESOURCES:
            self.informers[r.name] = Informer(
                r, self.list_fns[r.name], self._changed, watch_timeout=self.watch_timeout
            )

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None, **kwargs: Any) -> WatchCache:
        """Informers on the cluster of `kubeconfig` (in-cluster config when running in a pod)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if kubeconfig or not _in_cluster():
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
        fns: dict[str, ListFn] = {}
        for r in RESOURCES:
            api = client.ApiClient(configuration)  # one connection pool per watch: they block for minutes
            if r.custom:
                group, version, plural = r.custom
                custom = client.CustomObjectsApi(api)

                def fn(
                    *, _g: str = group, _v: str = version, _p: str = plural, _c: Any = custom, **kw: Any
                ) -> Any:
                    return _c.list_cluster_custom_object(_g, _v, _p, **kw)

                fns[r.name] = fn
            else:
                core = client.CoreV1Api(api)
                fns[r.name] = core.list_node if r.name == "nodes" else core.list_namespace
        return cls(fns, **kwargs)

    @property
    def state(self) -> ClusterState:
        return self._state

    def add_listener(self, fn: Callable[[ClusterState], None]) -> None:
        """Called (from a watch thread) after every new snapshot; the server uses it to update gauges."""
        self._listeners.append(fn)

    def _changed(self, name: str, store: dict) -> None:
        with self._lock:
            self._stores[name] = store
            synced = all(i.synced for i in self.informers.values())
            state = compose(self._stores, synced=synced, generation=self._state.generation + 1)
            self._state = state  # the one atomic publication
        for fn in self._listeners:
            try:
                fn(state)
            except Exception:
                log.exception("state listener failed")

    def start(self) -> None:
        for i in self.informers.values():
            i.start()

    def stop(self) -> None:
        for i in self.informers.values():
            i.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._state.synced:
                return True
            time.sleep(0.05)
        return self._state.synced

    def stats(self) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        return {
            name: {
                "synced": i.synced,
                "objects": len(i._store),
                "relists": i.relists,
                "age_seconds": (now - i.last_event) if i.last_event else None,
            }
            for name, i in self.informers.items()
        }


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )


__all__ = [
    "RESOURCES",
    "ClusterState",
    "Gone",
    "Informer",
    "NodeInfo",
    "Resource",
    "StateSource",
    "StaticState",
    "WatchCache",
    "compose",
]
