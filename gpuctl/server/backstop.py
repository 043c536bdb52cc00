"""The backstop: report, and optionally evict, GPU pods on pool nodes that no admitted Workload covers.

Admission rules keep work Kueue did not admit off pool nodes; this is what catches what gets through
anyway (a Job deleted with `--cascade=orphan` leaves pods Kueue no longer counts; a pod that forged its
owner; a pod bound by nodeName before the rules existed). The rule itself is
gpuctl.domain.coverage.uncovered_pods; this module runs it over serve's watch cache and acts:

- every `interval` seconds (and only on the leader, gpuctl.server.leader: one replica reports and
  evicts), over the cached Pods, Workloads and Nodes; a scan reads the cache, never the API server,
  reruns the rule only after a Pod, Workload or Node changed, and waits longer between scans when a
  rerun is costly (at most 2 % of the time: 20,000 GPU pods cost ~0.2 s);
- a pod is *reported* once it stayed uncovered for `grace` seconds (healthy clusters have short
  windows: a pod's watch event before its Workload's admission); a pod being deleted (a deleted Job's,
  a preempted Workload's) is first given its termination grace period, until its deletionTimestamp but
  at most `termination_allowance` (5 minutes), then the grace. A report is a log line per pod, a
  Warning Event on the pod (reason GpuctlUncoveredGPUs), and the metrics gpuctl_pool_uncovered_gpus{pool}
  and gpuctl_uncovered_pods{pool,reason} (exported by the collector);
- a reported pod that is already terminating (a stopped or deleted job's, a preempted one's: Kueue freed
  its quota at once, the pod keeps its GPUs for the grace its tenant chose) has had its bound: its
  termination grace up to `termination_allowance`, then the grace. With `evict_terminating` (on by
  default, `gpuctl serve --no-evict-terminating` turns it off) its termination is ended there: an
  eviction with deleteOptions.gracePeriodSeconds 0 and its uid as a precondition (the Eviction API
  skips PodDisruptionBudgets for a pod being deleted and deletes it with the options given; RBAC
  `create pods/eviction`, manifests/serve/evict/rbac.yaml, which the chart installs for this by default),
  with a Warning Event (GpuctlEndedTermination), a log line, gpuctl_uncovered_terminations_ended_total
  {result} and a `reclaimed` record in the team's audit trail (docs/security.md, "The bound");
- with `evict` (off by default, `gpuctl serve --evict-uncovered`), a reported pod that is not terminating,
  uncovered for `evict_after` seconds, is evicted through the Eviction API (policy/v1 pods/eviction:
  PodDisruptionBudgets are respected, the pod gets its termination grace period, after which the rule
  above ends it), with its uid as a precondition so a pod re-created under the same name is never hit. A
  refused eviction (429: a PDB) is tried again after `EVICT_RETRY_SECONDS`.

Everything starts over when this replica stops leading (the next leader measures its own grace).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    SERVE_COMPONENT,
    UNCOVERED_EVENT_REASON,
    UNCOVERED_EVICT_AFTER_SECONDS,
    UNCOVERED_EVICTED_REASON,
    UNCOVERED_GRACE_SECONDS,
    UNCOVERED_TERMINATION_ALLOWANCE_SECONDS,
    UNCOVERED_TERMINATION_ENDED_REASON,
)
from gpuctl.domain.coverage import REASONS, Uncovered, uncovered_pods
from gpuctl.domain.history import Record, reclaimed
from gpuctl.domain.pools import node_pool
from gpuctl.server.cache import Cache
from gpuctl.server.events import post_event

log = logging.getLogger(__name__)

EVICT_RETRY_SECONDS = 30.0
# Events posted per scan at most: a cluster adopting gpuctl may hold hundreds of uncovered pods at once;
# the rest get theirs on the next scans (the log line and the metrics are not limited).
EVENTS_PER_SCAN = 50
# A scan may take at most this share of the time between scans: the interval grows with the cache (a
# rescan of 20,000 GPU pods costs ~0.2-0.3 s of CPU; at most ~2 % of a core goes to the backstop).
MAX_SCAN_SHARE = 0.02
EVICTION_RESULTS = ("evicted", "blocked", "gone", "error")
TERMINATION_RESULTS = ("ended", "gone", "error")
NEEDS = ("Node", "Pod", "Workload")


def default_interval(grace: float) -> float:
    """How often to scan: a quarter of the grace, between 1 and 10 s (a scan of 20,000 cached pods
    takes a few tens of milliseconds)."""
    return min(max(grace / 4, 1.0), 10.0)


class Backstop:
    def __init__(
        self,
        cluster: Any,
        cache: Cache,
        *,
        grace: float = UNCOVERED_GRACE_SECONDS,
        evict: bool = False,
        evict_after: float = UNCOVERED_EVICT_AFTER_SECONDS,
        interval: float | None = None,
        termination_allowance: float = UNCOVERED_TERMINATION_ALLOWANCE_SECONDS,
        evict_terminating: bool = True,
        record: Callable[[Record], None] | None = None,
        events: bool = True,
        identity: str = "",
        leader: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        missing = [k for k in NEEDS if k not in cache]
        if missing:
            raise ValueError(f"the backstop needs the {', '.join(missing)} informers in serve's cache")
        if grace < 0 or evict_after < grace:
            raise ValueError(f"need 0 <= grace ({grace}) <= evict_after ({evict_after})")
        self.cluster = cluster
        self.cache = cache
        self.grace = grace
        self.evict = evict
        self.evict_after = evict_after
        self.interval = interval if interval is not None else default_interval(grace)
        self.termination_allowance = termination_allowance
        self.evict_terminating = evict_terminating
        self.record = record  # the audit trail's (gpuctl.server.history.HistoryRecorder.note)
        self.events = events
        self.identity = identity or SERVE_COMPONENT
        self.leader = leader
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._first_seen: dict[str, float] = {}  # pod uid -> when this replica first saw it uncovered
        self._reported: dict[str, Uncovered] = {}  # pod uid -> pods past the grace, as of the last scan
        self._evict_tried: dict[str, float] = {}  # pod uid -> last eviction attempt
        self._evented: set[str] = set()  # pod uids with their report Event posted
        self.evictions: dict[str, int] = dict.fromkeys(EVICTION_RESULTS, 0)
        self.terminations_ended: dict[str, int] = dict.fromkeys(TERMINATION_RESULTS, 0)
        self.scans = 0
        self.last_scan = 0.0  # wall time of the last scan
        self._thread: threading.Thread | None = None
        # The rule's last answer, reused while no Pod, Workload or Node changed (a quiet 20,000-pod cluster
        # then costs nothing per scan); the grace is still measured every scan.
        self._found: list[Uncovered] | None = None
        self.last_scan_seconds = 0.0  # CPU time of the last rerun of the rule
        self._changed = threading.Event()
        for kind in NEEDS:
            cache[kind].add_listener(lambda _inf: self._changed.set())

    # ---------------------------------------------------------------- state
    def reported(self) -> list[Uncovered]:
        """The pods reported as of the last scan (uncovered for at least the grace)."""
        with self._lock:
            return sorted(self._reported.values(), key=lambda u: (u.pool, u.namespace, u.name))

    def leading(self) -> bool:
        return self.leader is None or self.leader()

    def _forget(self) -> None:
        self._found = None
        with self._lock:
            self._first_seen.clear()
            self._reported.clear()
            self._evict_tried.clear()
            self._evented.clear()

    # ---------------------------------------------------------------- one scan
    def scan(self) -> list[Uncovered]:
        """Run the rule over the cache, report what passed the grace, evict what passed evict_after.
        Returns the reported pods. Does nothing until every informer has listed once, nor off the
        leader."""
        if not all(self.cache[k].synced.is_set() for k in NEEDS):
            return []
        if not self.leading():
            if self._first_seen or self._reported:
                self._forget()
            return []
        found = self._found
        if found is None or self._changed.is_set():
            self._changed.clear()  # before reading: a change during the scan triggers the next one
            node_pools = {}
            for n in self.cache["Node"].list():
                pool = node_pool(n)
                if pool:
                    node_pools[n["metadata"]["name"]] = pool
            t0 = time.thread_time()
            found = uncovered_pods(self.cache["Pod"].list(), self.cache["Workload"].list(), node_pools)
            self.last_scan_seconds = time.thread_time() - t0
            self._found = found
        now, wall = self.clock(), self.wall()
        new: list[Uncovered] = []
        due: dict[str, Uncovered] = {}
        with self._lock:
            current = {u.uid: u for u in found}
            for uid in [u for u in self._first_seen if u not in current]:
                del self._first_seen[uid]
                self._evict_tried.pop(uid, None)
                self._evented.discard(uid)
                gone = self._reported.get(uid)
                if gone is not None:
                    log.info("pod %s is covered again or gone", gone.key)
            for uid, u in current.items():
                first = self._first_seen.setdefault(uid, now)
                if u.deleting_at is not None:  # shutting down: its termination grace first (capped)
                    until_deleted = u.deleting_at - wall + (now - first)  # from first seen to its deadline
                    first += min(max(until_deleted, 0.0), self.termination_allowance)
                if now - first >= self.grace:
                    due[uid] = u
                    if uid not in self._reported:
                        new.append(u)
            self._reported = due
            self.scans += 1
            self.last_scan = self.wall()
            to_event = [u for u in due.values() if u.uid not in self._evented][:EVENTS_PER_SCAN]
            self._evented.update(u.uid for u in to_event)
        for u in new:
            log.warning("uncovered: %s", u.describe())
        for u in to_event:
            self._event(u, UNCOVERED_EVENT_REASON, self._event_message(u))
        for u in due.values():
            if u.terminating and self.evict_terminating:
                self._maybe_end_termination(u, now)
            elif self.evict and not u.terminating:
                self._maybe_evict(u, now)
        return list(due.values())

    def _event_message(self, u: Uncovered) -> str:
        msg = f"gpuctl serve: {u.describe()}. Pool GPUs run only Kueue-admitted work"
        if u.terminating and self.evict_terminating:
            msg += "; its termination is ended now"
        elif self.evict and not u.terminating:
            msg += f"; it will be evicted after {self.evict_after:.0f} s uncovered"
        return msg + " (docs/security.md)."

    # ---------------------------------------------------------------- acting
    def _may_try(self, u: Uncovered, now: float, after: float) -> float | None:
        """Seconds `u` has been uncovered when an attempt is due (uncovered `after` seconds, not tried in the
        last EVICT_RETRY_SECONDS), recording the attempt; else None."""
        with self._lock:
            first = self._first_seen.get(u.uid)
            tried = self._evict_tried.get(u.uid)
            if first is None or now - first < after:
                return None
            if tried is not None and now - tried < EVICT_RETRY_SECONDS:
                return None
            self._evict_tried[u.uid] = now
            return now - first

    def _maybe_end_termination(self, u: Uncovered, now: float) -> None:
        """A terminating pod reported (past its bound): end its termination (module docstring)."""
        held = self._may_try(u, now, 0.0)
        if held is None:
            return
        result = self.end_termination(u)
        self.terminations_ended[result] += 1
        if result != "ended":
            return
        grace = f"a {u.deletion_grace} s" if u.deletion_grace is not None else "its"
        why = (
            f"gpuctl serve ended the termination of pod {u.name} (gracePeriodSeconds 0): it held {u.gpus} "
            f"GPU(s) on node {u.node} that Kueue no longer counted for {held:.0f} s of {grace} termination "
            f"grace; the bound is the grace up to {self.termination_allowance:.0f} s, then "
            f"{self.grace:.0f} s (docs/security.md)"
        )
        log.warning("%s (%s)", why, u.key)
        self._event(u, UNCOVERED_TERMINATION_ENDED_REASON, why + ".")
        if self.record is not None:
            self.record(reclaimed(u.namespace, u.job or u.name, u.uid, self.wall(), why))

    def end_termination(self, u: Uncovered) -> str:
        """ended | gone | error: an eviction of the terminating pod with gracePeriodSeconds 0 (the Eviction
        API deletes a pod being deleted with the options given, PodDisruptionBudgets aside)."""
        return self._post_eviction(u, {"gracePeriodSeconds": 0}, ok="ended")

    def _maybe_evict(self, u: Uncovered, now: float) -> None:
        if self._may_try(u, now, self.evict_after) is None:
            return
        result = self.evict_pod(u)
        self.evictions[result] += 1
        if result == "evicted":
            log.warning("evicted uncovered pod %s (%d GPU(s) on %s, pool %s)", u.key, u.gpus, u.node, u.pool)
            self._event(
                u,
                UNCOVERED_EVICTED_REASON,
                f"gpuctl serve evicted this pod: {u.describe()}.",
            )

    def evict_pod(self, u: Uncovered) -> str:
        """One eviction through policy/v1; evicted | blocked (a PodDisruptionBudget: 429) | gone | error."""
        return self._post_eviction(u, {}, ok="evicted")

    def _post_eviction(self, u: Uncovered, options: dict[str, Any], *, ok: str) -> str:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": u.name, "namespace": u.namespace},
            "deleteOptions": {**options, "preconditions": {"uid": u.uid}},
        }
        try:
            self.cluster.request("POST", path("Pod", u.name, u.namespace, "eviction"), body=body)
            return ok
        except ApiError as e:
            if e.status == 429:
                log.warning("eviction of pod %s refused (will retry): %s", u.key, e.message or e)
                return "blocked"
            if e.status in (404, 409):  # gone, or another pod now has the name (uid precondition)
                return "gone"
            if e.status == 403:
                log.error(
                    "eviction of pod %s forbidden: %s; grant manifests/serve/evict/rbac.yaml (Helm: "
                    "serve.backstop.evictTerminating) or run with --no-evict-terminating",
                    u.key,
                    e.message or e,
                )
                return "error"
            log.error("eviction of pod %s failed: %s", u.key, e)
            return "error"
        except Exception as e:  # the API server may be unreachable: try again later
            log.error("eviction of pod %s failed: %s: %s", u.key, type(e).__name__, e)
            return "error"

    def _event(self, u: Uncovered, reason: str, message: str) -> None:
        """A Warning Event on the pod (kubectl describe pod shows it); best effort."""
        if not self.events:
            return
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": u.name, "namespace": u.namespace, "uid": u.uid},
        }
        try:
            post_event(
                self.cluster,
                pod,
                type_="Warning",
                reason=reason,
                message=message,
                identity=self.identity,
                now=self.wall(),
            )
        except Exception as e:
            log.warning("could not post an Event on pod %s: %s", u.key, e)

    # ---------------------------------------------------------------- loop
    def start(self, stop: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, args=(stop,), name="backstop", daemon=True)
        self._thread.start()
        return self._thread

    def next_wait(self) -> float:
        """The interval, stretched so that a rerun of the rule stays under MAX_SCAN_SHARE of the time."""
        return max(self.interval, self.last_scan_seconds / MAX_SCAN_SHARE)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.scan()
            except Exception:
                log.exception("backstop scan failed")
            stop.wait(self.next_wait())

    # ---------------------------------------------------------------- metrics
    def pool_families(self, pools: list[str]) -> Iterator[GaugeMetricFamily]:
        """Cluster-state series (the collector yields them on the leader only): zero for every pool, so
        "nothing uncovered" is a 0, not an absent series."""
        reported = self.reported()
        gpus = GaugeMetricFamily(
            "gpuctl_pool_uncovered_gpus",
            "GPUs held by pods on the pool's nodes that no admitted Kueue Workload covers, "
            "uncovered for longer than the grace (gpuctl serve --uncovered-grace)",
            labels=["pool"],
        )
        pods = GaugeMetricFamily(
            "gpuctl_uncovered_pods",
            "Pods on the pool's nodes holding GPUs no admitted Kueue Workload covers, by reason "
            "(no_workload, not_admitted, beyond_admission)",
            labels=["pool", "reason"],
        )
        by_pool: dict[str, int] = {}
        by_reason: dict[tuple[str, str], int] = {}
        for u in reported:
            by_pool[u.pool] = by_pool.get(u.pool, 0) + u.gpus
            by_reason[(u.pool, u.reason.value)] = by_reason.get((u.pool, u.reason.value), 0) + 1
        for p in sorted(set(pools) | set(by_pool)):
            gpus.add_metric([p], by_pool.get(p, 0))
            for r in REASONS:
                pods.add_metric([p, r], by_reason.get((p, r), 0))
        yield gpus
        yield pods

    def own_families(self) -> Iterator[Any]:
        """This replica's own series: what it evicted, when it last scanned."""
        ev = CounterMetricFamily(
            "gpuctl_uncovered_evictions",
            "Evictions of uncovered pods by result (evicted, blocked by a PodDisruptionBudget, gone, error)",
            labels=["result"],
        )
        for r in EVICTION_RESULTS:
            ev.add_metric([r], self.evictions[r])
        yield ev
        ended = CounterMetricFamily(
            "gpuctl_uncovered_terminations_ended",
            "Terminating pods holding GPUs Kueue no longer counted whose termination the backstop ended "
            "past the bound (gracePeriodSeconds 0), by result (ended, gone, error)",
            labels=["result"],
        )
        for r in TERMINATION_RESULTS:
            ended.add_metric([r], self.terminations_ended[r])
        yield ended
        last = GaugeMetricFamily(
            "gpuctl_backstop_last_scan_timestamp_seconds",
            "When this replica last scanned for uncovered pods (it scans only while leading)",
        )
        last.add_metric([], self.last_scan)
        yield last
