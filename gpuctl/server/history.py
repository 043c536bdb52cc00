"""The audit trail's writer in `gpuctl serve` (docs/audit.md): Workload and Event changes from serve's watch
cache -> records (gpuctl.domain.history) -> each team namespace's ConfigMap ring (gpuctl.service.history).

Every replica watches and gathers (each change's Workload or Event, as the cache holds it, until a flush);
only the leader writes, every `interval` seconds, one read and at most one update per namespace with
something new. What it has written it remembers (by record key), so a quiet cluster costs no request.
A restarted or newly elected leader starts with an empty memory: it derives the records again from its
first list (conditions and Events outlive the restart), reads each namespace's store once to learn what
it holds (so it asks no submitter again), and the store's merge skips what is already there: no
duplicates. What happened while no replica ran is kept if its evidence is still there: a condition's
last transition, an Event younger than the API server's --event-ttl (one hour by default).

The submitter is read once per Workload from its job's controller (runwhere.ai/submitted-by, else its
first field manager): one GET per new job, by the leader.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import HISTORY_CONFIGMAP, HISTORY_FLUSH_SECONDS
from gpuctl.domain.history import (
    ACTOR_UNKNOWN,
    Record,
    event_records,
    hpa_records,
    job_name,
    owner_kind,
    submitter,
    workload_records,
)
from gpuctl.domain.objects import meta, name, namespace, uid
from gpuctl.service.history import append, read

log = logging.getLogger(__name__)

# At most this many changes wait for a flush (a standby's backlog, a leader that cannot write): the oldest
# go first; the state they showed is mostly still in the cache's objects.
MAX_PENDING = 20_000
# Submitters remembered (by Workload UID).
MAX_SUBMITTERS = 50_000
# Record keys remembered per namespace as written (beyond, forgotten: the next write reads the store).
MAX_REMEMBERED = 10_000
EVENT_FIELD_SELECTOR = "involvedObject.kind=Workload"


def trim_event(raw: dict) -> dict:
    """What the history reads of an Event on a Workload (either API's spelling)."""
    m = raw.get("metadata") or {}
    obj = raw.get("regarding") or raw.get("involvedObject") or {}
    out: dict[str, Any] = {
        "metadata": {
            k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in m
        },
        "involvedObject": {k: obj[k] for k in ("kind", "name", "namespace", "uid") if k in obj},
        "reason": raw.get("reason") or "",
        "message": raw.get("message") or raw.get("note") or "",
    }
    for k in ("lastTimestamp", "eventTime", "firstTimestamp", "series"):
        if raw.get(k):
            out[k] = raw[k]
    return out


class HistoryRecorder:
    def __init__(
        self,
        cluster: Any,
        cache: Any,
        *,
        leader: Callable[[], bool] | None = None,
        interval: float = HISTORY_FLUSH_SECONDS,
        wall: Callable[[], float] = time.time,
    ):
        self.cluster = cluster
        self.cache = cache
        self.leader = leader
        self.interval = interval
        self.wall = wall
        self._lock = threading.Lock()
        # (kind, namespace/name, resourceVersion) -> (object, deleted at)
        self._pending: dict[tuple[str, str, str], tuple[Mapping[str, Any], float | None]] = {}
        # namespace -> records this leader wrote or found there, by key (written again if erased)
        self._written: dict[str, dict[str, Record]] = {}
        self._submitters: dict[str, str] = {}
        self._noted: list[Record] = []  # records serve made itself (the backstop's), for the next flush
        self._was_leader = False
        self.written = 0  # records added to the store by this process (rebuilt ones included)
        self.failures = 0
        self.failures_by_ns: dict[str, int] = {}  # gpuctl_history_write_failures_total{namespace}
        self.last_success = 0.0  # wall time of the last write that succeeded

    # ---------------------------------------------------------------- gathering (informer threads)
    def attach(self) -> None:
        self.cache["Workload"].add_handler(self.on_workload)
        self.cache["Event"].add_handler(self.on_event)
        if "HorizontalPodAutoscaler" in self.cache:
            self.cache["HorizontalPodAutoscaler"].add_handler(self.on_hpa)

    def _keep(self, kind: str, obj: Mapping[str, Any], deleted_at: float | None) -> None:
        key = (kind, f"{namespace(obj)}/{name(obj)}", str(meta(obj).get("resourceVersion") or ""))
        with self._lock:
            self._pending[key] = (obj, deleted_at)
            while len(self._pending) > MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))

    def on_workload(self, etype: str, old: Any, new: Any) -> None:
        if etype == "DELETED" and old is not None:
            self._keep("Workload", old, self.wall())
        elif new is not None:
            self._keep("Workload", new, None)

    def on_event(self, etype: str, old: Any, new: Any) -> None:
        if new is not None and etype != "DELETED":
            self._keep("Event", new, None)

    def on_hpa(self, etype: str, old: Any, new: Any) -> None:
        if new is not None and etype != "DELETED":
            self._keep("HorizontalPodAutoscaler", new, None)

    def note(self, record: Record) -> None:
        """A record serve made itself (the backstop's `reclaimed`: no object shows it), stored at the next
        flush like the rest (team namespaces only, retried while the write fails)."""
        with self._lock:
            self._noted.append(record)
            del self._noted[:-MAX_PENDING]

    # ---------------------------------------------------------------- writing (the leader)
    def teams(self) -> set[str]:
        """Team namespaces: gpuctl's team ClusterQueues are named after them."""
        return {name(cq) for cq in self.cache["ClusterQueue"].list()}

    def _submitter(self, wl: Mapping[str, Any]) -> str:
        wuid = uid(wl)
        if wuid in self._submitters:
            return self._submitters[wuid]
        kind = owner_kind(wl)
        who = ACTOR_UNKNOWN
        if kind in ("Job", "StatefulSet", "Deployment"):
            try:
                who = submitter(self.cluster.get_or_none(path(kind, job_name(wl), namespace(wl))))
            except ApiError as e:
                log.warning("history: reading %s %s/%s: %s", kind, namespace(wl), job_name(wl), e)
                return ACTOR_UNKNOWN  # not remembered: asked again at the next flush
        if len(self._submitters) >= MAX_SUBMITTERS:
            self._submitters.pop(next(iter(self._submitters)))
        self._submitters[wuid] = who
        return who

    def _seed(self, namespaces: set[str]) -> None:
        """Remember what the store of each namespace not yet seen already holds, so a restarted leader
        neither asks again who submitted every job (one GET each) nor writes what is there."""
        for ns in namespaces - set(self._written):
            try:
                self._written[ns] = {r.key: r for r in read(self.cluster, ns)}
            except Exception as e:  # the write will say it again, with its own retry
                log.warning("history: reading %s/%s: %s", ns, HISTORY_CONFIGMAP, e)

    def records(self, changes: list[tuple[str, Mapping[str, Any], float | None]]) -> dict[str, list[Record]]:
        """Records per namespace that the changes show (team namespaces only)."""
        teams = self.teams()
        workloads = self.cache["Workload"]
        uids = {uid(w): (namespace(w), job_name(w)) for w in workloads.list()}
        # Workloads this flush saw, deleted ones too: they still name preemptors, and the job of an Event on
        # a Workload gone before the flush (serve --idle's scale Event on the replica it scaled away).
        seen: dict[str, Mapping[str, Any]] = {}
        for kind, obj, _ in changes:
            if kind == "Workload":
                uids.setdefault(uid(obj), (namespace(obj), job_name(obj)))
                seen[f"{namespace(obj)}/{name(obj)}"] = obj
        out: dict[str, list[Record]] = {}
        for kind, obj, deleted_at in changes:
            ns = namespace(obj)
            if ns not in teams:
                continue
            if kind == "Workload":
                written = self._written.get(ns, {})
                recs = workload_records(obj, uids=uids, deleted_at=deleted_at)
                if any(r.action == "submitted" and r.key not in written for r in recs):
                    who = self._submitter(obj)
                    recs = [r if r.action != "submitted" else replace(r, actor=who) for r in recs]
                job = owner_kind(obj)
            elif kind == "HorizontalPodAutoscaler":
                recs = hpa_records(obj)
                job = str(((obj.get("spec") or {}).get("scaleTargetRef") or {}).get("kind") or "")
            else:
                find = lambda n, w: workloads.get(f"{n}/{w}") or seen.get(f"{n}/{w}")  # noqa: E731
                recs = event_records(obj, find, uids)
                regarding = obj.get("regarding") or obj.get("involvedObject") or {}
                wl = find(ns, str(regarding.get("name") or ""))
                job = owner_kind(wl) if wl is not None else ""
            # The job's kind on every record (what `history -o name` prints: statefulset.apps/x).
            out.setdefault(ns, []).extend(r if r.kind or not job else replace(r, kind=job) for r in recs)
        return out

    def flush(self) -> int:
        """Write what was gathered (leader only); returns the records added."""
        leading = self.leader is None or self.leader()
        if not leading:
            self._was_leader = False
            return 0
        if not self._was_leader:  # newly leading: what another leader wrote is unknown here
            self._written.clear()
            self._was_leader = True
        with self._lock:
            changes = [(k[0], obj, d) for k, (obj, d) in self._pending.items()]
            self._pending.clear()
            noted, self._noted = self._noted, []
        if not changes and not noted:
            return 0
        teams = self.teams()
        self._seed(({namespace(obj) for _, obj, _ in changes} | {r.namespace for r in noted}) & teams)
        by_ns = self.records(changes)
        for r in noted:
            if r.namespace in teams:
                by_ns.setdefault(r.namespace, []).append(r)
        added = 0
        for ns, recs in by_ns.items():
            written = self._written.setdefault(ns, {})
            fresh = [r for r in recs if r.key not in written]
            if not fresh:
                continue
            try:
                added += append(self.cluster, ns, fresh, rebuild=written.values())
            except Exception as e:
                self.failures += 1
                self.failures_by_ns[ns] = self.failures_by_ns.get(ns, 0) + 1
                log.warning("history: writing %d record(s) to %s: %s; retrying", len(fresh), ns, e)
                for kind, obj, d in changes:  # keep this namespace's changes for the next flush
                    if namespace(obj) == ns:
                        self._keep(kind, obj, d)
                for r in noted:
                    if r.namespace == ns:
                        self.note(r)
                continue
            self.last_success = self.wall()
            if len(written) + len(fresh) > MAX_REMEMBERED:
                written.clear()  # the store's merge dedupes what this forgets (one more read)
            written.update((r.key, r) for r in fresh)
        self.written += added
        return added

    # ---------------------------------------------------------------- metrics (gpuctl serve registers it)
    def collect(self) -> Iterator[Any]:
        """gpuctl_history_write_failures_total{namespace}: writes of the audit trail that failed (a
        ConfigMap made immutable, RBAC, a conflict five times in a row: alert GpuctlHistoryWriteFailing);
        gpuctl_history_records_written_total; gpuctl_history_last_write_success_timestamp_seconds."""
        failures = CounterMetricFamily(
            "gpuctl_history_write_failures",
            "Failed writes of a team namespace's audit trail (ConfigMap gpuctl-history), retried every flush",
            labels=["namespace"],
        )
        for ns, n in sorted(self.failures_by_ns.items()):
            failures.add_metric([ns], n)
        yield failures
        yield CounterMetricFamily(
            "gpuctl_history_records_written",
            "Audit trail records this replica added to the stores (written again after an erasure included)",
            value=self.written,
        )
        yield GaugeMetricFamily(
            "gpuctl_history_last_write_success_timestamp_seconds",
            "When this replica last wrote an audit trail store (0: never)",
            value=self.last_success,
        )

    # ---------------------------------------------------------------- loop
    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(stop,), name="history", daemon=True)
        t.start()
        return t

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self.cache.wait_synced(timeout=1.0):
            pass
        while not stop.is_set():
            try:
                self.flush()
            except Exception:
                log.exception("history flush failed")
            stop.wait(self.interval)
