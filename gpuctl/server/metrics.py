"""Prometheus metrics of pools, teams and queues, computed from the watch cache at scrape time.

Why a custom Collector and not gauges set on every event: pod and Workload events arrive by the
thousand, and keeping per-pool sums right under every add/update/delete order is where bugs live.
Instead each cached object carries a small precomputed summary (made once per event, in the
informer thread) and a scrape aggregates those tuples: O(objects) additions, a few ms for 20,000
pods, and always consistent with the cache.

Labels are bounded and join with Kueue and DCGM (docs/metrics.md):
- `pool`: a gpuctl pool = Kueue's `flavor` (flavor name == pool name); `*` for queued work whose
  pool is not chosen yet;
- `namespace`: a team namespace = Kueue's `cluster_queue` (the team ClusterQueue is named after it)
  and the `namespace` of kueue_local_queue_*, kube-state-metrics and DCGM (--kubernetes);
- `priority`: high | medium | low (runwhere.ai/priority; Kueue's priority_class is gpuctl-<priority>),
  `none` for anything else;
- `gpu_type` only on gpuctl_pool_info;
- `node` only on gpuctl_node_pool_info (one series per node of a pool), the join of DCGM's per-GPU
  series to pools (manifests/prometheus/rules.yaml). Never a pod or job name;
- `cluster` on every series, only with `gpuctl serve --cluster NAME` (`ClusterRegistry`): a MultiKueue
  manager and its workers each run a serve, and one Prometheus tells their series apart.

Three event-driven series are kept by `WorkloadTracker`: the queue-wait histogram (observed once per
Workload UID, the first time it is seen holding quota), the preemption counter and the start bounds kept
and missed (each Workload counted once, when its recorded bound is decided: gpuctl.domain.promise).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    gc_collector,
    platform_collector,
    process_collector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuctl import __version__
from gpuctl.constants import METRICS_CLUSTER_LABEL, SLICES_USED_ANNOTATION
from gpuctl.domain.gang import workload_gang
from gpuctl.domain.gpus import pod_holds_gpus, pod_spec_gpus, workload_gpus
from gpuctl.domain.objects import annotations, is_gpuctl_object, name, parse_time
from gpuctl.domain.pools import NodeFacts, PoolFacts, pool_facts
from gpuctl.domain.pools import pool_names as flavor_pool_names
from gpuctl.domain.promise import Outcome, bound_outcome, starts_by_of
from gpuctl.domain.serving import services
from gpuctl.domain.sharing import slices_used
from gpuctl.domain.workload import (
    job_pool,
    metric_state,
    pending_since,
    preemptions,
    quota_reserved_at,
    reserved_pools,
    workload_priority,
)
from gpuctl.server.gauges import (
    ANY_POOL,
    WorkloadSums,
    gang_families,
    job_pod_family,
    pool_families,
    service_families,
    team_families,
    workload_families,
)

if TYPE_CHECKING:
    from gpuctl.server.backstop import Backstop
    from gpuctl.server.cache import Cache, Informer
    from gpuctl.server.reconciler import Reconciler

# Queue wait: seconds to a day, roughly x2-x3 apart (Kueue's own buckets stop at ~2.8 h).
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400)
WORKLOAD_STATES = ("queued", "admitted", "running", "preempted", "inactive")


# -------------------------------------------------------------------- summaries
# A node's summary in the cache is gpuctl.domain.pools.NodeFacts (node_facts): the same reading as the
# Cohort's capacity and `get pools`, so the gauges and the views agree by construction.


class PodInfo(NamedTuple):
    namespace: str
    node: str
    gpus: float


def pod_summary(pod: dict) -> PodInfo | None:
    """Only bound, unfinished pods that request GPUs hold GPUs; everything else summarises to None."""
    if not pod_holds_gpus(pod):
        return None
    gpus = pod_spec_gpus(pod.get("spec"))
    if gpus <= 0:
        return None
    return PodInfo(pod["metadata"].get("namespace", ""), pod["spec"]["nodeName"], gpus)


class PodGpus:
    """GPUs held by bound, unfinished pods, per node and namespace, kept current from pod events.

    Why incremental: a scrape then walks at most one entry per node (2,000) instead of every pod
    (20,000). Each event subtracts the pod's previous contribution (remembered by key) and adds the
    new one, so the order of events cannot skew the sums; a re-list arrives as the same events.
    """

    def __init__(self) -> None:
        self._pods: dict[str, PodInfo] = {}
        self._by_node: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def handle(self, etype: str, old: dict | None, new: dict | None) -> None:
        meta = (new or old or {}).get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        info = pod_summary(new) if new is not None else None
        with self._lock:
            prev = self._pods.pop(key, None)
            if prev is not None:
                per_ns = self._by_node[prev.node]
                left = per_ns[prev.namespace] - prev.gpus
                if left > 0:
                    per_ns[prev.namespace] = left
                else:
                    del per_ns[prev.namespace]
                    if not per_ns:
                        del self._by_node[prev.node]
            if info is not None:
                self._pods[key] = info
                per_ns = self._by_node.setdefault(info.node, {})
                per_ns[info.namespace] = per_ns.get(info.namespace, 0.0) + info.gpus

    def by_node(self) -> dict[str, dict[str, float]]:
        """{node: {namespace: GPUs}}, a copy."""
        with self._lock:
            return {n: dict(v) for n, v in self._by_node.items()}


class WorkloadInfo(NamedTuple):
    uid: str
    namespace: str
    pool: str | None  # None: not known yet (becomes `*` in metrics)
    priority: str
    state: str | None  # one of WORKLOAD_STATES; None for finished Workloads
    requested_gpus: float
    reserved: tuple[tuple[str, float], ...]  # (pool, GPUs) held while quota is reserved
    created: float
    reserved_at: float | None
    pending_since: float | None
    preemptions: int
    preempt_reason: str
    gang_pods: int = 0  # pods of a gang (gpuctl.domain.gang.workload_gang), 0 for any other Workload
    starts_by: float | None = None  # the start bound serve recorded (gpuctl.domain.promise)

    def bound(self, now: float) -> Outcome | None:
        """What became of its recorded bound at `now` (gpuctl.domain.promise.bound_outcome); None: none."""
        if self.starts_by is None:
            return None
        return bound_outcome(self.starts_by, self.reserved_at, self.state in ("queued", "preempted"), now)


def workload_summary(wl: dict) -> WorkloadInfo:
    """What the gauges need of one Workload, read through gpuctl.domain.workload."""
    state = metric_state(wl)
    n, reason = preemptions(wl)
    return WorkloadInfo(
        uid=wl["metadata"].get("uid") or "",
        namespace=wl["metadata"].get("namespace", ""),
        pool=job_pool(wl),
        priority=workload_priority(wl),
        state=state,
        requested_gpus=workload_gpus(wl),
        reserved=tuple(reserved_pools(wl)) if state is not None else (),
        created=parse_time(wl["metadata"].get("creationTimestamp")) or 0.0,
        reserved_at=quota_reserved_at(wl),
        pending_since=pending_since(wl),
        preemptions=n,
        preempt_reason=reason,
        gang_pods=gang[0] if (gang := workload_gang(wl)) else 0,
        starts_by=starts_by_of(wl),
    )


# -------------------------------------------------------------------- event-driven series
class _LeaderOnly(Collector):
    """Yields its collectors' series only while `leader()` is true (always when leader is None)."""

    def __init__(
        self,
        collectors: list,
        leader: Callable[[], bool] | None,
        before: Callable[[], None] | None = None,
    ):
        self.collectors = collectors
        self.leader = leader
        self.before = before  # brings them up to date first (a scrape's clock)

    def collect(self) -> Iterator:
        if self.leader is not None and not self.leader():
            return
        if self.before is not None:
            self.before()
        for c in self.collectors:
            yield from c.collect()


class WorkloadTracker:
    """Observes queue wait once per Workload UID and counts preemptions as they happen.

    The wait histogram follows the brief: every Workload is observed the first time this process sees
    it holding quota, including those already admitted when it starts (a restart re-observes the
    currently admitted ones). Preemptions that happened before the process started are not counted:
    the counter starts at the informer's first list.

    Start bounds (gpuctl.domain.promise): a Workload is counted kept or missed once, when an event shows
    its quota reserved, or at a scrape that finds it still waiting past its bound. As with the wait
    histogram, finished Workloads are not counted (a restart would count them again).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        informer: Informer | None = None,
        leader: Callable[[], bool] | None = None,
    ):
        self.wait = Histogram(
            "gpuctl_queue_wait_seconds",
            "Time from a Workload's creation to Kueue reserving quota for it (first admission)",
            ["pool", "priority"],
            buckets=WAIT_BUCKETS,
            registry=None,
        )
        self.preemptions = Counter(
            "gpuctl_workload_preemptions_total",
            "Workloads preempted by Kueue (evicted to make room), by preempted workload's team and reason",
            ["pool", "namespace", "priority", "reason"],
            registry=None,
        )
        self.bounds = Counter(
            "gpuctl_start_bounds_total",
            "Start bounds gpuctl serve recorded for waiting jobs, by outcome: kept (quota reserved by the"
            " bound) or missed (reserved after it, or still waiting past it); each job counted once",
            ["pool", "outcome"],
            registry=None,
        )
        # Cluster facts: with several replicas only the leader exports them (gpuctl.server.leader).
        registry.register(_LeaderOnly([self.wait, self.preemptions, self.bounds], leader, self.sweep))
        self.informer = informer
        self._observed: set[str] = set()
        self._preempted: dict[str, int] = {}
        self._bounded: set[str] = set()  # UIDs whose bound was counted
        self._lock = threading.Lock()

    def _count_bound(self, info: WorkloadInfo, now: float) -> None:
        """Count the Workload's bound once it is decided (under the lock)."""
        if info.starts_by is None or info.state is None or info.uid in self._bounded:
            return
        outcome = info.bound(now)
        if outcome in (Outcome.KEPT, Outcome.MISSED):
            self._bounded.add(info.uid)
            self.bounds.labels(info.pool or ANY_POOL, str(outcome).lower()).inc()

    def sweep(self, now: float | None = None) -> None:
        """Count the bounds passed while their Workloads wait: no event marks that moment."""
        if self.informer is None:
            return
        at = time.time() if now is None else now
        with self._lock:
            for info in self.informer.summaries():
                self._count_bound(info, at)

    def handle(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            uid = (old or {}).get("metadata", {}).get("uid")
            with self._lock:
                self._observed.discard(uid)
                self._preempted.pop(uid, None)
                self._bounded.discard(uid)
            return
        info = workload_summary(new)
        pool = info.pool or ANY_POOL
        with self._lock:
            # Finished Workloads are history (Kueue keeps them until their job is deleted): a restart
            # must not pour them into the histogram again.
            if info.reserved_at is not None and info.state is not None and info.uid not in self._observed:
                self._observed.add(info.uid)
                self.wait.labels(pool, info.priority).observe(max(info.reserved_at - info.created, 0.0))
            before = self._preempted.get(info.uid)
            if before is None and self.informer is not None and not self.informer.synced.is_set():
                before = info.preemptions  # baseline from the first list: history is not counted
            before = before or 0
            if info.preemptions > before:
                self.preemptions.labels(pool, info.namespace, info.priority, info.preempt_reason).inc(
                    info.preemptions - before
                )
            self._preempted[info.uid] = max(info.preemptions, before)
            self._count_bound(info, time.time())


# -------------------------------------------------------------------- the collector
class GpuctlCollector(Collector):
    """Everything but the two event-driven series, computed from the cache on each scrape."""

    def __init__(
        self,
        cache: Cache,
        reconciler: Reconciler | None = None,
        pod_gpus: PodGpus | None = None,
        leader: Callable[[], bool] | None = None,
        backstop: Backstop | None = None,
    ):
        self.cache = cache
        self.reconciler = reconciler
        self.pod_gpus = pod_gpus
        self.backstop = backstop
        # With leader election, the cluster-state series come only from the leader (docs/metrics.md).
        self.leader = leader
        self.last_duration = 0.0

    def _list(self, kind: str) -> list:
        return self.cache[kind].list() if kind in self.cache else []

    def _summaries(self, kind: str) -> list:
        return self.cache[kind].summaries() if kind in self.cache else []

    def collect(self) -> Iterator:
        t0 = time.perf_counter()
        leading = self.leader is None or self.leader()
        families = [*(self._pools_and_teams() if leading else ()), *self._health()]
        # On every replica (1 without leader election): sum(gpuctl_serve_leader) is 1 when all is well, and
        # a standby replica is visible as a 0.
        g = GaugeMetricFamily(
            "gpuctl_serve_leader",
            "1 on the replica that holds the gpuctl-serve Lease (and exports the cluster-state series)",
        )
        g.add_metric([], 1 if leading else 0)
        families.append(g)
        self.last_duration = time.perf_counter() - t0
        g = GaugeMetricFamily(
            "gpuctl_collect_duration_seconds",
            "Time this scrape spent computing gpuctl's metrics from the cache (formatting excluded)",
        )
        g.add_metric([], self.last_duration)
        families.append(g)
        return iter(families)

    def _pools_and_teams(self) -> Iterator:
        """The cluster-state series: facts from the cache's summaries, then gpuctl.server.gauges."""
        nodes: list[NodeFacts] = self._summaries("Node")
        flavors = self._list("ResourceFlavor")
        flavor_pools = flavor_pool_names(flavors)
        slices_held = {name(f): slices_used(annotations(f).get(SLICES_USED_ANNOTATION)) for f in flavors}
        pools = set(flavor_pools) | {n.pool for n in nodes if n.pool is not None}
        sums = WorkloadSums.of(self._summaries("Workload"), pools, time.time())
        facts = pool_facts(nodes, flavor_pools, reserved=sums.reserved)
        cqs = [cq for cq in self._list("ClusterQueue") if is_gpuctl_object(cq)]
        teams = {cq["metadata"]["name"] for cq in cqs}
        allocated, team_allocated = self._allocated(facts, teams)
        yield from pool_families(facts, allocated, sums.requested, slices_held)
        yield from workload_families(sums, teams)
        yield from gang_families(sums, sorted(facts))
        yield from team_families(cqs, sorted(facts), team_allocated)
        node_pool = {n: p for p, f in facts.items() for n in f.nodes}
        # docs/utilisation.md: dcgm-exporter's pods -> jobs
        yield job_pod_family(self._list("Pod"), node_pool)
        # Autoscaled services (docs/serving.md): replicas desired, running, waiting.
        yield from service_families(
            services(
                [*self._list("Deployment"), *self._list("LeaderWorkerSet")],
                self._list("Pod"),
                self._list("HorizontalPodAutoscaler"),
            )
        )
        # The backstop: GPUs pods hold that Kueue does not count (gpuctl.domain.coverage).
        if self.backstop is not None:
            yield from self.backstop.pool_families(sorted(facts))

    def _allocated(
        self, facts: dict[str, PoolFacts], teams: set[str]
    ) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
        """GPUs bound pods hold, per pool and per (team namespace, pool), from PodGpus' per-node sums."""
        node_pool = {n: p for p, f in facts.items() for n in f.nodes}
        allocated: dict[str, float] = defaultdict(float)
        team_allocated: dict[tuple[str, str], float] = defaultdict(float)
        for node, per_ns in (self.pod_gpus.by_node() if self.pod_gpus else {}).items():
            pool = node_pool.get(node)
            if pool is None:
                continue
            for ns, gpus in per_ns.items():
                allocated[pool] += gpus
                if ns in teams:
                    team_allocated[(ns, pool)] += gpus
        return allocated, team_allocated

    def _health(self) -> Iterator:
        b = GaugeMetricFamily("gpuctl_build_info", "gpuctl's version (=1)", labels=["version"])
        b.add_metric([__version__], 1)
        yield b
        synced = GaugeMetricFamily(
            "gpuctl_cache_synced", "1 once the resource's first list is in the cache", labels=["resource"]
        )
        objects = GaugeMetricFamily("gpuctl_cache_objects", "Objects held in the cache", labels=["resource"])
        events = CounterMetricFamily(
            "gpuctl_cache_events", "Watch events applied to the cache", labels=["resource"]
        )
        lists = CounterMetricFamily(
            "gpuctl_cache_lists", "Full lists (start, 410 Gone, errors) of the resource", labels=["resource"]
        )
        errors = CounterMetricFamily("gpuctl_cache_errors", "List or watch failures", labels=["resource"])
        last = GaugeMetricFamily(
            "gpuctl_cache_last_event_timestamp_seconds",
            "When the last watch event arrived",
            labels=["resource"],
        )
        for kind, inf in sorted(self.cache.informers.items()):
            synced.add_metric([kind], 1 if inf.synced.is_set() else 0)
            objects.add_metric([kind], len(inf))
            events.add_metric([kind], inf.stats.events)
            lists.add_metric([kind], inf.stats.lists)
            errors.add_metric([kind], inf.stats.errors)
            last.add_metric([kind], inf.stats.last_event or inf.stats.last_list)
        yield from (synced, objects, events, lists, errors, last)
        if self.reconciler is not None:
            yield from self.reconciler.metric_families()
        if self.backstop is not None:
            yield from self.backstop.own_families()


class ClusterRegistry(CollectorRegistry):
    """A registry whose every series carries `cluster="<name>"` (METRICS_CLUSTER_LABEL).

    Why in the registry and not in each family: every collector registered here, gpuctl's and the
    process collectors, the reconciler's, the backstop's, the defragmenter's, is labelled by the one
    rule, and one added later cannot forget it. It is Prometheus' external label done by the exporter,
    for a Prometheus that scrapes several clusters' serves without relabeling each target.
    """

    def __init__(self, cluster: str):
        super().__init__(auto_describe=False)
        self.cluster = cluster

    def collect(self) -> Iterator:
        for family in super().collect():
            labelled = copy.copy(family)
            labelled.samples = [
                s._replace(labels={**s.labels, METRICS_CLUSTER_LABEL: self.cluster}) for s in family.samples
            ]
            yield labelled


def build_registry(
    cache: Cache,
    reconciler: Reconciler | None = None,
    *,
    process: bool = True,
    leader: Callable[[], bool] | None = None,
    backstop: Backstop | None = None,
    cluster: str = "",
) -> tuple[CollectorRegistry, GpuctlCollector, WorkloadTracker | None]:
    """A registry with gpuctl's collector, the Workload tracker (hooked to the Workload informer,
    which must not have started yet) and the process collectors (process_resident_memory_bytes...).
    cluster: label every series with it (ClusterRegistry); "" adds no label."""
    registry = ClusterRegistry(cluster) if cluster else CollectorRegistry(auto_describe=False)
    pod_gpus = None
    if "Pod" in cache:
        pod_gpus = PodGpus()
        cache["Pod"].add_handler(pod_gpus.handle)
    collector = GpuctlCollector(cache, reconciler, pod_gpus, leader, backstop)
    registry.register(collector)
    tracker = None
    if "Workload" in cache:
        tracker = WorkloadTracker(registry, cache["Workload"], leader)
        cache["Workload"].add_handler(tracker.handle)
    if process:
        process_collector.ProcessCollector(registry=registry)
        platform_collector.PlatformCollector(registry=registry)
        gc_collector.GCCollector(registry=registry)
    return registry, collector, tracker
