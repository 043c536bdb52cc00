"""Pools follow their nodes: the root Cohort is kept equal to `desired_cohort(...)` (capacity) and
each pool's ResourceFlavor tolerates its nodes' taints (`gpuctl.domain.pools.stale_flavors`).

Why a reconciler in the service: `gpuctl create pool` writes capacity when gpuctl changes a pool, but
nodes also join, leave, go NotReady or lose GPUs through the cloud, kubectl or the kubelet. Whoever
changes a node, the Cohort must follow within seconds, or Kueue admits work onto GPUs that are gone
(or leaves new ones idle).

Rules:
- triggers are changes that move capacity or taints: a node's pool label, readiness, schedulability,
  taints or allocatable GPUs/CPU/memory (heartbeats are ignored), a pod holding a slice of a GPU bound
  or finished, and any change of gpuctl's ResourceFlavors,
  ClusterQueues or the Cohort itself (someone edited it by hand: put it back);
- triggers are debounced (0.5 s after the last one, 2 s at most after the first) so a rack of nodes
  joining makes one update;
- the Cohort is computed with gpuctl.domain.teams.desired_cohort (the one definition of capacity)
  and server-side applied only when `cohort_spec_equal` says it differs;
- only an existing Cohort labelled app.kubernetes.io/managed-by=gpuctl is touched: a missing Cohort is
  left to `gpuctl create pool` (creating it here would race with `gpuctl delete`), a foreign one is
  never written. A gpuctl pool flavor whose tolerations differ from its nodes' taints gets its
  `spec.tolerations` merge-patched, or, being a Topology Aware Scheduling flavor Kueue keeps
  immutable, is re-created with them (gpuctl.service.pool_sync.set_flavor_tolerations). With the pods in
  its cache, a pool flavor whose nodes share GPUs (docs/sharing.md) gets the slices in use written on it
  (annotation runwhere.ai/slices-used, merge-patched only when the count changed): the one place a team
  member, who may not list other teams' pods, reads per-profile used and free from. Nothing else is
  written at all;
- nothing is done before every informer has listed once (a half-filled cache would shrink pools);
- a failed apply is retried with backoff, and everything is re-checked every `resync` seconds;
- with several replicas (gpuctl.server.leader), only the Lease holder writes; the others answer
  "standby" and reconcile the moment they take over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import COHORT_NAME, CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, SLICES_USED_ANNOTATION
from gpuctl.domain.gpus import gpu_requests_by_pool, pod_spec_gpu_requests
from gpuctl.domain.objects import annotations, is_gpuctl_object, name, pod_finished
from gpuctl.domain.pools import node_pool, node_ready, node_taints, pools_sharing, stale_flavors
from gpuctl.domain.sharing import PoolSharing, slices_used_text
from gpuctl.domain.teams import cohort_spec_equal, desired_cohort
from gpuctl.server.cache import Cache
from gpuctl.service.pool_sync import set_flavor_tolerations

log = logging.getLogger(__name__)

RESULTS = ("applied", "unchanged", "missing", "foreign", "not_synced", "error", "standby")
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)


def capacity_fingerprint(node: dict | None) -> tuple | None:
    """The parts of a node that change its pool's capacity; equal fingerprints need no reconcile."""
    if node is None:
        return None
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return (
        node_pool(node),
        node_ready(node),
        alloc.get(GPU_RESOURCE),
        alloc.get(CPU_RESOURCE),
        alloc.get(MEMORY_RESOURCE),
        tuple(sorted((t["key"], t["value"], t["effect"]) for t in node_taints(node))),
    )


def slice_fingerprint(pod: dict | None) -> tuple | None:
    """What of a pod moves its pool's slices in use: the slices it asks for, its node, whether it ended;
    None for a pod without slices (whole GPUs are Kueue's count, not this one)."""
    if pod is None:
        return None
    spec = pod.get("spec") or {}
    slices = tuple(sorted((r, n) for r, n in pod_spec_gpu_requests(spec).items() if r != GPU_RESOURCE))
    if not slices:
        return None
    return slices, spec.get("nodeName"), pod_finished(pod)


class Reconciler:
    def __init__(
        self,
        cluster: Any,
        cache: Cache,
        *,
        debounce: float = 0.5,
        max_delay: float = 2.0,
        resync: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        leader: Callable[[], bool] | None = None,
    ):
        self.cluster = cluster
        self.leader = leader
        self.cache = cache
        self.debounce = debounce
        self.max_delay = max_delay
        self.resync = resync
        self.clock = clock
        self._wake = threading.Condition()
        self._first_trigger: float | None = None
        self._last_trigger: float | None = None
        self._thread: threading.Thread | None = None
        self.results: dict[str, int] = dict.fromkeys(RESULTS, 0)
        self.last_success = 0.0
        self.last_applied = 0.0
        self.last_reason = ""
        # Not registered anywhere: exported through metric_families() by the collector.
        self.latency = Histogram(
            "gpuctl_reconcile_latency_seconds",
            "From the first watch event that moved capacity to the Cohort applied",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.duration = Histogram(
            "gpuctl_reconcile_duration_seconds",
            "Time one reconcile takes (compute + apply)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=None,
        )
        cache["Node"].add_handler(self._on_node)
        for kind in ("ResourceFlavor", "ClusterQueue", "Cohort"):
            cache[kind].add_handler(self._on_any)
        if "Pod" in cache:
            cache["Pod"].add_handler(self._on_pod)

    # ---------------------------------------------------------------- triggers
    def _on_node(self, etype: str, old: dict | None, new: dict | None) -> None:
        if capacity_fingerprint(old) != capacity_fingerprint(new):
            name = (new or old or {}).get("metadata", {}).get("name")
            self.trigger(f"node {name} {etype.lower()}")

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        if slice_fingerprint(old) != slice_fingerprint(new):
            self.trigger(f"pod {(new or old or {}).get('metadata', {}).get('name')} {etype.lower()}")

    def _on_any(self, etype: str, old: dict | None, new: dict | None) -> None:
        obj = new or old or {}
        self.trigger(f"{obj.get('kind', 'object')} {obj.get('metadata', {}).get('name')} {etype.lower()}")

    def trigger(self, reason: str = "") -> None:
        now = self.clock()
        with self._wake:
            if self._first_trigger is None:
                self._first_trigger = now
                self.last_reason = reason
            self._last_trigger = now
            self._wake.notify()

    # ---------------------------------------------------------------- loop
    def start(self, stop: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, args=(stop,), name="reconciler", daemon=True)
        self._thread.start()
        return self._thread

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self.cache.wait_synced(timeout=1.0):
            pass
        self.trigger("start")
        backoff = 1.0
        next_resync = self.clock() + self.resync
        while not stop.is_set():
            with self._wake:
                now = self.clock()
                due = self._due_at()
                target = due if due is not None else next_resync
                if target > now:
                    self._wake.wait(timeout=min(target - now, 1.0))
                    continue
            result = self.poll() if due is not None else self.reconcile_once()
            if result is None:  # a trigger arrived meanwhile and moved the debounce on
                continue
            next_resync = self.clock() + self.resync
            if result == "error":
                if stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 30.0)
                self.trigger("retry")
            else:
                backoff = 1.0

    def poll(self) -> str | None:
        """One turn of the loop without waiting: reconcile when the pending trigger is due by `clock`
        (`debounce` after the last trigger, at most `max_delay` after the first) and return what
        happened; None when nothing is due. run() calls it; tests drive it with their own clock."""
        with self._wake:
            due = self._due_at()
            if due is None or due > self.clock():
                return None
            first = self._first_trigger
            self._first_trigger = self._last_trigger = None
        return self.reconcile_once(first)

    def _due_at(self) -> float | None:
        if self._first_trigger is None or self._last_trigger is None:
            return None
        return min(self._last_trigger + self.debounce, self._first_trigger + self.max_delay)

    def reconcile_once(self, triggered_at: float | None = None) -> str:
        """Bring the Cohort to the desired capacity now; return what happened (one of RESULTS)."""
        t0 = self.clock()
        result = self._reconcile()
        self.results[result] += 1
        self.duration.observe(self.clock() - t0)
        if result not in ("error", "not_synced", "standby"):
            self.last_success = time.time()
        if result == "applied":
            self.last_applied = time.time()
            if triggered_at is not None:
                self.latency.observe(self.clock() - triggered_at)
        return result

    def _reconcile(self) -> str:
        if self.leader is not None and not self.leader():
            return "standby"
        if not self.cache.synced():
            return "not_synced"
        flavors = self._sync_flavors()
        slices = self._sync_slices_used() if "Pod" in self.cache and flavors != "error" else "unchanged"
        cohort = self._reconcile_cohort()
        if "error" in (flavors, slices, cohort):
            return "error"
        wrote = "applied" in (flavors, slices)
        return "applied" if wrote and cohort in ("unchanged", "missing") else cohort

    def _sync_flavors(self) -> str:
        flavors = {f["metadata"]["name"]: f for f in self.cache["ResourceFlavor"].list()}
        stale = stale_flavors(flavors.values(), self.cache["Node"].list())
        for flavor, tolerations in sorted(stale.items()):
            try:
                set_flavor_tolerations(self.cluster, flavors[flavor], tolerations)
            except Exception as e:  # retried like a failed Cohort apply
                log.warning("updating the tolerations of ResourceFlavor %s failed: %s", flavor, e)
                return "error"
            log.info("ResourceFlavor %s tolerates %s (%s)", flavor, tolerations, self.last_reason)
        return "applied" if stale else "unchanged"

    def _sync_slices_used(self) -> str:
        """Write on each sharing pool's flavor the slices its bound pods hold, where that changed."""
        nodes = self.cache["Node"].list()
        pool_of = {name(n): node_pool(n) or "" for n in nodes}
        held = gpu_requests_by_pool(self.cache["Pod"].list(), pool_of)
        sharing = pools_sharing(nodes)
        result = "unchanged"
        for flavor in self.cache["ResourceFlavor"].list():
            pool = name(flavor)
            text = slices_used_text(sharing.get(pool, PoolSharing()), held.get(pool, {}))
            if text == annotations(flavor).get(SLICES_USED_ANNOTATION):
                continue
            patch = {"metadata": {"annotations": {SLICES_USED_ANNOTATION: text}}}
            try:
                self.cluster.merge_patch(path("ResourceFlavor", pool), patch)
            except ApiError as e:
                if e.status == 404:  # deleted meanwhile (gpuctl delete pool): nothing to count
                    continue
                log.warning("writing the slices in use on ResourceFlavor %s failed: %s", pool, e)
                return "error"
            except Exception as e:  # retried like a failed Cohort apply
                log.warning("writing the slices in use on ResourceFlavor %s failed: %s", pool, e)
                return "error"
            result = "applied"
        return result

    def _reconcile_cohort(self) -> str:
        current = self.cache["Cohort"].get(COHORT_NAME)
        if current is None:
            return "missing"
        if not is_gpuctl_object(current):
            log.warning("Cohort %s is not managed by gpuctl; not touching it", COHORT_NAME)
            return "foreign"
        desired = desired_cohort(
            self.cache["Node"].list(), self.cache["ResourceFlavor"].list(), self.cache["ClusterQueue"].list()
        )
        if cohort_spec_equal(current, desired):
            return "unchanged"
        try:
            self.cluster.apply(desired)
        except Exception as e:  # any failure is retried; the loop must survive it
            log.warning("applying Cohort %s failed: %s", COHORT_NAME, e)
            return "error"
        log.info("Cohort %s updated (%s)", COHORT_NAME, self.last_reason)
        return "applied"

    # ---------------------------------------------------------------- metrics
    def metric_families(self) -> Iterator:
        runs = CounterMetricFamily(
            "gpuctl_reconcile_runs",
            "Reconciles of the Cohort by result (applied, unchanged, missing, foreign, not_synced, error, "
            "standby: not the leader)",
            labels=["result"],
        )
        for r in RESULTS:
            runs.add_metric([r], self.results[r])
        yield runs
        last = GaugeMetricFamily(
            "gpuctl_reconcile_last_success_timestamp_seconds",
            "When a reconcile last ended applied or unchanged",
        )
        last.add_metric([], self.last_success)
        yield last
        yield from self.latency.collect()
        yield from self.duration.collect()
