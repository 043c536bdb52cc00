"""What the webhook knows about the cluster: an immutable snapshot, kept current by watches.

The request path must never call the API server: a webhook that does is as slow as its slowest API call
and, with failurePolicy Fail, turns an API server hiccup into refused pods. So background threads
list-and-watch the few kinds the rules need (pool ResourceFlavors, Nodes, LocalQueues, ClusterQueues,
Namespaces), reduce each object to the fields the rules read, and after every change publish a new
ClusterState by a single reference assignment. A request reads `cache.state` once and works on that
snapshot: no locks, no torn reads.

The watching is gpuctl.cluster.informer's, the same informer `gpuctl serve` uses, over the same
gpuctl.cluster.Cluster transport: watches resume from the last resourceVersion (bookmarks keep it
fresh); a 410 Gone, or any error event, means the window was lost, so the informer lists again and
replaces its store, which also drops objects deleted while it was not watching. Here each informer's
transform is the kind's reduce function, and every batch that changes a store publishes a new
ClusterState.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Protocol

from gpuctl.cluster import ApiError, Cluster
from gpuctl.cluster.informer import Gone, Informer, Transport
from gpuctl.constants import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    LWS_API_VERSION,
    LWS_GROUP,
    MANAGED_BY_VALUE,
    NAMESPACE_MARKER_VALUE,
    Labels,
)
from gpuctl.domain.gang import group_size
from gpuctl.domain.gpus import pod_spec_gpus
from gpuctl.domain.objects import pod_template
from gpuctl.domain.pools import is_pool_flavor, node_gpus, node_ready
from gpuctl.domain.shape import ShapeError
from gpuctl.domain.teams import cluster_queue_flavors, team_from_cluster_queue

log = logging.getLogger("gpuctl.admission.state")

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


@dataclass(frozen=True, slots=True)
class CachedDeployment:
    """What `hpa-queued` reads of a Deployment: GPUs per pod, replicas, the LocalQueue Kueue queues its pods
    in (None: not queued), and the autoscaled service it belongs to (docs/serving.md: its tier, `app`)."""

    gpus: int
    replicas: int
    tier: str | None
    app: str | None
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class TeamCap:
    """A team ClusterQueue's GPU quota and borrowingLimit (None: no quota / no limit)."""

    quota: int | None
    borrowing_limit: int | None


@dataclass(frozen=True, slots=True)
class CachedNode:
    """The parts of a Node the webhook's rules read, as its cache keeps them (the metrics' per-node summary
    is gpuctl.server.metrics.NodeInfo; both read the node through gpuctl.domain.pools)."""

    name: str
    labels: Mapping[str, str]
    gpu: int  # status.allocatable["nvidia.com/gpu"]
    pool: str | None  # its runwhere.ai/pool label
    ready: bool = True  # it counts in its pool (gpuctl.domain.pools.node_ready: Ready, not cordoned)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """One consistent view of the cluster. Never mutated after construction; replaced whole."""

    synced: bool = False
    pools: frozenset[str] = frozenset()
    nodes: Mapping[str, CachedNode] = field(default_factory=_empty)
    pool_nodes: Mapping[str, tuple[CachedNode, ...]] = field(default_factory=_empty)
    pool_max_gpu: Mapping[str, int] = field(default_factory=_empty)  # only pools that have nodes
    local_queues: Mapping[str, Mapping[str, str]] = field(
        default_factory=_empty
    )  # namespace -> LocalQueue -> ClusterQueue
    cluster_queues: Mapping[str, frozenset[str]] = field(
        default_factory=_empty
    )  # ClusterQueue -> flavors it has quota in
    namespaces: Mapping[str, bool] = field(default_factory=_empty)  # namespace -> managed by gpuctl
    generation: int = 0
    # (namespace, name) -> a Deployment that requests GPUs or is an autoscaled service's (hpa-queued)
    deployments: Mapping[tuple[str, str], CachedDeployment] = field(default_factory=_empty)
    # The same of LeaderWorkerSets (multi-node replicas; GPUs per replica: its group's), where the cluster
    # serves them
    leader_worker_sets: Mapping[tuple[str, str], CachedDeployment] = field(default_factory=_empty)
    team_caps: Mapping[str, TeamCap] = field(default_factory=_empty)  # ClusterQueue -> its GPU cap

    @classmethod
    def build(
        cls,
        *,
        pools: Iterable[str] = (),
        nodes: Iterable[CachedNode] = (),
        local_queues: Mapping[str, Mapping[str, str]] | None = None,
        cluster_queues: Mapping[str, Iterable[str]] | None = None,
        namespaces: Mapping[str, bool] | None = None,
        synced: bool = True,
        generation: int = 0,
        deployments: Mapping[tuple[str, str], CachedDeployment] | None = None,
        team_caps: Mapping[str, TeamCap] | None = None,
        leader_worker_sets: Mapping[tuple[str, str], CachedDeployment] | None = None,
    ) -> ClusterState:
        """A snapshot from already-reduced parts (the cache and tests both build states this way)."""
        node_map = {n.name: n for n in nodes}
        by_pool: dict[str, list[CachedNode]] = {}
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
            deployments=MappingProxyType(dict(deployments or {})),
            leader_worker_sets=MappingProxyType(dict(leader_worker_sets or {})),
            team_caps=MappingProxyType(dict(team_caps or {})),
        )

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]], *, synced: bool = True) -> ClusterState:
        """A snapshot from raw Kubernetes objects of the watched kinds (for tests, benchmarks and
        `--static-state`); other kinds are ignored."""
        stores: dict[str, dict] = {r.name: {} for r in (*RESOURCES, *OPTIONAL_RESOURCES)}
        by_kind = {r.kind: r for r in (*RESOURCES, *OPTIONAL_RESOURCES)}
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


def reduce_node(obj: Mapping[str, Any]) -> tuple[str, CachedNode]:
    name = _meta(obj).get("name", "")
    labels = _labels(obj)
    pool = labels.get(Labels.POOL)
    return name, CachedNode(name, MappingProxyType(labels), node_gpus(obj), pool, node_ready(obj))


def reduce_local_queue(obj: Mapping[str, Any]) -> tuple[tuple[str, str], str]:
    meta = _meta(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    cq = spec.get("clusterQueue")
    return (meta.get("namespace", ""), meta.get("name", "")), cq if isinstance(cq, str) else ""


def reduce_cluster_queue(obj: Mapping[str, Any]) -> tuple[str, tuple[frozenset[str], TeamCap]]:
    """A ClusterQueue's flavors with quota, and (a team's) its GPU cap (none read from one not gpuctl's
    shape)."""
    try:
        team = team_from_cluster_queue(obj)
        cap = TeamCap(team.gpu, team.borrowing_limit)
    except (ValueError, TypeError, KeyError, AttributeError):
        cap = TeamCap(None, None)
    return _meta(obj).get("name", ""), (cluster_queue_flavors(obj), cap)


def reduce_deployment(obj: Mapping[str, Any]) -> tuple[tuple[str, str], CachedDeployment | None]:
    """A Deployment (or LeaderWorkerSet) `hpa-queued` may be asked about: one whose pods request GPUs, or
    an autoscaled service's. Others reduce to None (not kept). Malformed fields read as none: the object's
    own review judges them. A LeaderWorkerSet's GPUs are a replica's: every pod of its group's."""
    meta, labels = _meta(obj), _labels(obj)
    key = (meta.get("namespace", ""), meta.get("name", ""))
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    try:
        tmpl = pod_template(obj)
        gpus = pod_spec_gpus(tmpl.get("spec") if isinstance(tmpl.get("spec"), dict) else {}) * group_size(obj)
    except (ShapeError, ValueError, TypeError, AttributeError):
        gpus = 0
    tier = labels.get(Labels.SERVING_TIER)
    if not gpus and tier is None:
        return key, None
    replicas = spec.get("replicas")
    queue = labels.get(Labels.KUEUE_QUEUE)
    return key, CachedDeployment(
        gpus, replicas if type(replicas) is int else 1, tier, labels.get(Labels.APP), queue
    )


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
    Resource("deployments", "Deployment", reduce_deployment, ("apps", "v1", "deployments")),
)
# Kinds watched only where the cluster serves their API (a CRD; an informer of an API not served would
# never sync, and the webhook would never be ready): checked when the webhook starts, so one installed
# later is read after the webhook restarts.
OPTIONAL_RESOURCES: Final = (
    Resource(
        "leaderworkersets",
        "LeaderWorkerSet",
        reduce_deployment,
        (LWS_GROUP, LWS_API_VERSION.split("/")[1], "leaderworkersets"),
    ),
)


def compose(stores: Mapping[str, Mapping[Any, Any]], *, synced: bool, generation: int = 0) -> ClusterState:
    """A ClusterState from the informers' stores (keyed as RESOURCES reduce them)."""
    lqs: dict[str, dict[str, str]] = {}
    for (ns, name), cq in stores.get("localqueues", {}).items():
        lqs.setdefault(ns, {})[name] = cq
    cqs = stores.get("clusterqueues", {})
    return ClusterState.build(
        pools=stores.get("resourceflavors", {}).keys(),
        nodes=stores.get("nodes", {}).values(),
        local_queues=lqs,
        cluster_queues={k: flavors for k, (flavors, _) in cqs.items()},
        namespaces=stores.get("namespaces", {}),
        synced=synced,
        generation=generation,
        deployments=stores.get("deployments", {}),
        leader_worker_sets=stores.get("leaderworkersets", {}),
        team_caps={k: cap for k, (_, cap) in cqs.items()},
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


def _reduced(resource: Resource) -> tuple[Callable[[dict], Any], Callable[[dict], Any]]:
    """The informer's key and transform for a Resource: both halves of its reduce function."""

    def key(obj: dict) -> Any:
        return resource.reduce(obj)[0]

    def transform(obj: dict) -> Any:
        return resource.reduce(obj)[1]

    return key, transform


def resource_path(resource: Resource) -> str:
    if resource.custom:
        group, version, plural = resource.custom
        return f"/apis/{group}/{version}/{plural}"
    return f"/api/v1/{resource.name}"


def informer(cluster: Transport, resource: Resource, **kwargs: Any) -> Informer:
    """The gpuctl.cluster.informer for one watched kind, storing reduced values (None = absent)."""
    key, transform = _reduced(resource)
    return Informer(
        cluster,
        resource.name,
        resource_path(resource),
        label_selector=resource.label_selector,
        key=key,
        transform=transform,
        **kwargs,
    )


def served(cluster: Transport, resources: Iterable[Resource]) -> list[Resource]:
    """Those of `resources` whose API the cluster serves now (its discovery document answers)."""
    out = []
    for r in resources:
        group, version, _ = r.custom or ("", "v1", "")
        try:
            cluster.get(f"/apis/{group}/{version}")
        except ApiError as e:
            if e.status != 404:
                log.warning("cannot tell whether the cluster serves %s: %s", r.kind, e)
            continue
        except Exception as e:  # the transport's own failure: not watched (a restart asks again)
            log.warning("cannot tell whether the cluster serves %s: %s: %s", r.kind, type(e).__name__, e)
            continue
        out.append(r)
    return out


class WatchCache:
    """Informers for every kind the rules read, publishing one ClusterState after every change.

    The informers (gpuctl.cluster.informer: paged list, watch with bookmarks, 410 -> re-list, back-off
    with jitter, read timeout) store reduced values, so a Node heartbeat changes nothing and costs no
    rebuild; each batch that changes a store recomposes the snapshot."""

    def __init__(self, cluster: Transport, *, watch_timeout: int = 300, **informer_kwargs: Any) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._state = ClusterState()
        self._listeners: list[Callable[[ClusterState], None]] = []
        self.informers: dict[str, Informer] = {}
        for r in (*RESOURCES, *served(cluster, OPTIONAL_RESOURCES)):
            inf = informer(cluster, r, watch_timeout=watch_timeout, **informer_kwargs)
            inf.add_listener(self._changed)
            self.informers[r.name] = inf

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None, **kwargs: Any) -> WatchCache:
        """Informers on the cluster of `kubeconfig` (in-cluster config when running in a pod)."""
        return cls(Cluster.connect(kubeconfig, context), **kwargs)

    @property
    def state(self) -> ClusterState:
        return self._state

    def add_listener(self, fn: Callable[[ClusterState], None]) -> None:
        """Called (from a watch thread) after every new snapshot; the server uses it to update gauges."""
        self._listeners.append(fn)

    def _changed(self, _: Informer | None = None) -> None:
        with self._lock:
            stores = {name: inf.items() for name, inf in self.informers.items()}
            synced = all(i.synced.is_set() for i in self.informers.values())
            state = compose(stores, synced=synced, generation=self._state.generation + 1)
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

    def join(self, timeout: float | None = None) -> None:
        for i in self.informers.values():
            i.join(timeout)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._state.synced:
                return True
            time.sleep(0.05)
        return self._state.synced

    def stats(self) -> dict[str, dict[str, Any]]:
        now = time.time()
        return {
            name: {
                "synced": i.synced.is_set(),
                "objects": len(i),
                "relists": i.stats.relists,
                "errors": i.stats.errors,
                "age_seconds": (now - i.stats.last_event) if i.stats.last_event else None,
            }
            for name, i in self.informers.items()
        }


__all__ = [
    "OPTIONAL_RESOURCES",
    "RESOURCES",
    "CachedNode",
    "ClusterState",
    "Gone",
    "Informer",
    "Resource",
    "StateSource",
    "StaticState",
    "WatchCache",
    "compose",
]
