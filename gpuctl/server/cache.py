"""The watch cache of `gpuctl serve`: one informer per kind, trimmed objects, and a Reader over them.

Why not list on demand: a scrape or a reconcile must not cost a 20,000-pod list, the reconciler must
hear about a node change within seconds, and the REST API's job list must not cost five lists per
request. Each kind is a gpuctl.cluster.informer.Informer (list, watch, 410 -> re-list, back-off); this
module adds what the service keeps of each object and how the parts read it.

Objects are trimmed as they arrive (`transform`): managedFields, heartbeat times and the parts of specs
nobody reads are dropped, which is most of the memory. What is kept is exactly what the readers use:
the metrics and the reconciler, and the REST API's list views (gpuctl.service.jobs.list_job_rows and
gpuctl.domain.status read a pod's container states, IP, scheduling gates and conditions; a job's
Workload is found through its ownerReferences). Describe views read the cluster, not the cache.

`CacheReader` is the gpuctl.cluster.reader.Reader over the cache: it answers a list or get of a kind
the cache holds (filtering namespace, label and field selectors in memory) and passes anything else,
or anything asked before the first list, to the cluster.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from gpuctl.cluster.informer import Informer, InformerStats, Transport, object_key, strip_metadata
from gpuctl.cluster.paths import path as kind_path
from gpuctl.cluster.reader import (
    Reader,
    Requirement,
    as_reader,
    fields_match,
    implies,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from gpuctl.constants import (
    AUDIT_ACTIVE_SET_BY_ANNOTATION,
    DEFRAG_MOVED_ANNOTATION,
    DEFRAG_MOVED_AT_ANNOTATION,
    DEFRAG_REACTIVATE_ANNOTATION,
    IDLE_REPLICAS_ANNOTATION,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    KEEP_UNTIL_ANNOTATION,
    KUEUE_WORKLOAD_ANNOTATION,
    SERVICE_STOPPED_ANNOTATION,
    SET_ASIDE_ENDED_ANNOTATION,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_SINCE_ANNOTATION,
    STARTS_BY_ANNOTATION,
    TAS_REQUIRED,
)
from gpuctl.domain.gang import set_aside_tolerations_of
from gpuctl.domain.history import stamp_time

DEFRAG_KEYS = (DEFRAG_MOVED_ANNOTATION, DEFRAG_MOVED_AT_ANNOTATION, DEFRAG_REACTIVATE_ANNOTATION)
WORKLOAD_KEYS = frozenset(
    (
        *DEFRAG_KEYS,
        AUDIT_ACTIVE_SET_BY_ANNOTATION,
        SET_ASIDE_ENDED_ANNOTATION,
        STARTS_BY_ANNOTATION,  # the bound serve keeps (gpuctl.domain.promise): recorded once
        IDLE_STOPPED_ANNOTATION,
        IDLE_STOPPED_AT_ANNOTATION,
    )
)
NODE_KEYS = (SET_ASIDE_FOR_ANNOTATION, SET_ASIDE_SINCE_ANNOTATION)
# Of a job controller's annotations, what serve's idle reclaimer reads (docs/utilisation.md: a keep, the
# replicas a
# service had before it was scaled down for idleness).
CONTROLLER_KEYS = frozenset((KEEP_UNTIL_ANNOTATION, IDLE_REPLICAS_ANNOTATION))


class Cache:
    """The informers of one service process, by kind name ("Node", "Pod", ...)."""

    def __init__(self, cluster: Transport):
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
        for inf in self.informers.values():
            inf.stop()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for inf in self.informers.values():
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not inf.synced.wait(left):
                return False
        return True


# -------------------------------------------------------------------- reading the cache
_labels_of = lru_cache(maxsize=256)(parse_label_selector)
_fields_of = lru_cache(maxsize=256)(parse_field_selector)


class CacheReader:
    """A Reader answering from the cache what the cache holds, and from `fallback` the rest.

    A list is served from memory when the kind is cached, its informer has listed once, and the
    selectors the informer was filled through are implied by the request's (ClusterQueues cached
    through `managed-by=gpuctl` answer a list with that selector, not a list of every ClusterQueue).
    Objects are the cache's trimmed, shared ones: read-only.
    """

    def __init__(self, cache: Cache, fallback: Any):
        self.cache = cache
        self.fallback: Reader = as_reader(fallback)

    def _informer(
        self, kind: str, labels: tuple[Requirement, ...], fields: tuple[Requirement, ...]
    ) -> Informer | None:
        inf = self.cache.informers.get(kind)
        if inf is None or not inf.synced.is_set():
            return None
        if not implies(labels, _labels_of(inf.label_selector)):
            return None
        if not implies(fields, _fields_of(inf.field_selector)):
            return None
        return inf

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        labels, fields = _labels_of(label_selector), _fields_of(field_selector)
        inf = self._informer(kind, labels, fields)
        if inf is None:
            return self.fallback.list(kind, namespace, label_selector, field_selector)
        out = []
        for obj in inf.list():
            meta = obj.get("metadata") or {}
            if namespace is not None and meta.get("namespace") != namespace:
                continue
            if labels and not labels_match(labels, meta.get("labels")):
                continue
            if fields and not fields_match(fields, obj):
                continue
            out.append(obj)
        return out

    def holds(self, kinds: Iterable[str], label_selector: str | None = None) -> bool:
        """Whether a list of each of `kinds` through `label_selector` is answered from memory."""
        labels = _labels_of(label_selector)
        return all(self._informer(kind, labels, ()) is not None for kind in kinds)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        by_name = (Requirement("metadata.name", "=", frozenset((name,))),)
        inf = self._informer(kind, (), by_name)
        if inf is None:
            return self.fallback.get(kind, name, namespace)
        return inf.get(f"{namespace}/{name}" if namespace else name)


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


def _conditions(conds: Iterable[dict] | None, *, message: bool = False, times: bool = True) -> list[dict]:
    """Conditions without heartbeat times, so a heartbeat leaves the trimmed object unchanged."""
    keep = ("type", "status", "reason", *(("lastTransitionTime",) if times else ()))
    keep += ("message",) if message else ()
    return [{k: c[k] for k in keep if k in c} for c in conds or []]


def trim_node(raw: dict) -> dict:
    """What capacity and health need: labels, unschedulable, taints, Ready, capacity/allocatable."""
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    out_spec = {k: spec[k] for k in ("unschedulable", "taints") if spec.get(k)}
    node_meta = _meta(raw)
    notes = (raw.get("metadata") or {}).get("annotations") or {}
    if notes.get(
        SET_ASIDE_FOR_ANNOTATION
    ):  # which gang the node is set aside for, since when (server.setaside)
        node_meta["annotations"] = {k: notes[k] for k in NODE_KEYS if k in notes}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": node_meta,
        "spec": out_spec,
        "status": {
            "capacity": _interned_map(status.get("capacity")),
            "allocatable": _interned_map(status.get("allocatable")),
            "conditions": _conditions(status.get("conditions")),
            "addresses": [
                {"type": a.get("type"), "address": a.get("address")}
                for a in status.get("addresses") or []
                if a.get("type") == "InternalIP"
            ],
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


def _owners(raw: dict, meta: dict) -> dict:
    owners = (raw.get("metadata") or {}).get("ownerReferences")
    if owners:
        meta["ownerReferences"] = [
            {k: o[k] for k in ("kind", "name", "uid", "controller") if k in o} for o in owners
        ]
    return meta


def _container_state(cs: dict) -> dict:
    """A container status as gpuctl.domain.status reads it: ready, and why it waits or ended."""
    out: dict[str, Any] = {"name": cs.get("name"), "ready": bool(cs.get("ready"))}
    state = cs.get("state") or {}
    if "waiting" in state:
        w = state["waiting"] or {}
        out["state"] = {"waiting": {k: w[k] for k in ("reason", "message") if w.get(k)}}
    elif "terminated" in state:
        t = state["terminated"] or {}
        out["state"] = {"terminated": {k: t[k] for k in ("reason", "exitCode") if k in t}}
    elif "running" in state:
        out["state"] = {"running": {}}
    return out


def _pod_condition(c: dict) -> dict:
    keep = (
        ("type", "status", "reason", "message")
        if c.get("status") == "False"
        else ("type", "status", "reason")
    )
    return {k: c[k] for k in keep if k in c}


def trim_pod(raw: dict) -> dict:
    """A pod as the service uses it: where it runs, what it requests, its phase, owner and Kueue Workload
    annotation (the backstop, gpuctl.domain.coverage), and what a `get jobs` row shows (container
    states, readiness, IP, Kueue's scheduling gate, conditions)."""
    meta = _owners(raw, _meta(raw, "deletionGracePeriodSeconds"))
    # Of the annotations, only the Workload Kueue admitted the pod for (gpuctl.domain.coverage).
    wl_name = ((raw.get("metadata") or {}).get("annotations") or {}).get(KUEUE_WORKLOAD_ANNOTATION)
    if wl_name:
        meta["annotations"] = {KUEUE_WORKLOAD_ANNOTATION: _intern(wl_name)}
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
    tolerated = set_aside_tolerations_of(spec)
    if tolerated:  # nodes set aside for which gang it may be on (gpuctl.domain.setaside.squatters)
        out_spec["tolerations"] = [dict(t) for t in tolerated]
    gates = spec.get("schedulingGates")
    if gates:
        out_spec["schedulingGates"] = [{"name": _intern(g.get("name") or "")} for g in gates]
    out_status: dict[str, Any] = {"phase": _intern(status.get("phase") or "Pending")}
    if status.get("startTime"):
        out_status["startTime"] = status["startTime"]
    if status.get("podIP"):
        out_status["podIP"] = status["podIP"]
    if status.get("containerStatuses"):
        out_status["containerStatuses"] = [_container_state(c) for c in status["containerStatuses"]]
    # Of the conditions, only the one gpuctl reads (why a pod is not scheduled), without probe times.
    scheduled = [_pod_condition(c) for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    if scheduled:
        out_status["conditions"] = scheduled
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": out_spec, "status": out_status}


# Workload conditions whose message the audit trail reads (gpuctl.domain.history): the preemptor, the end.
_MESSAGE_CONDITIONS = frozenset({"Preempted", "Evicted", "Finished"})


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
        tolerated = set_aside_tolerations_of(tspec)
        if tolerated:  # which gang's set-aside nodes its pods may use (gpuctl.domain.setaside)
            item["template"]["spec"]["tolerations"] = [dict(t) for t in tolerated]
        level = (((ps.get("template") or {}).get("metadata") or {}).get("annotations") or {}).get(
            TAS_REQUIRED
        )
        if level:  # a gang's required topology level (gpuctl.domain.setaside)
            item["template"]["metadata"] = {"annotations": {TAS_REQUIRED: level}}
        pod_sets.append(item)
    # maximumExecutionTimeSeconds: when a holder ends, for the set-aside's estimates (gpuctl.domain.promise)
    keep = ("queueName", "priority", "priorityClassRef", "active", "maximumExecutionTimeSeconds")
    out_spec = {k: spec[k] for k in keep if k in spec}
    out_spec["podSets"] = pod_sets
    out_status: dict[str, Any] = {"conditions": _conditions(status.get("conditions"), message=False)}
    for kept, raw_c in zip(out_status["conditions"], status.get("conditions") or [], strict=False):
        if raw_c.get("type") in _MESSAGE_CONDITIONS and raw_c.get("message"):
            kept["message"] = raw_c["message"]  # who preempted it, why it finished (the audit trail)
    if status.get("admission"):
        adm = status["admission"]
        out_status["admission"] = {
            "clusterQueue": adm.get("clusterQueue"),
            "podSetAssignments": [
                {
                    k: a[k]
                    for k in ("name", "flavors", "resourceUsage", "count", "topologyAssignment")
                    if k in a
                }
                for a in adm.get("podSetAssignments") or []
            ],
        }
    if status.get("schedulingStats"):
        out_status["schedulingStats"] = status["schedulingStats"]
    if status.get("accumulatedPastExecutionTimeSeconds"):
        out_status["accumulatedPastExecutionTimeSeconds"] = status["accumulatedPastExecutionTimeSeconds"]
    # On a MultiKueue manager: the worker it was dispatched to and the check's word on it
    # (gpuctl.domain.multicluster.placement; the audit trail's admission, the API's CLUSTER column).
    if status.get("clusterName"):
        out_status["clusterName"] = sys.intern(status["clusterName"])
    if status.get("admissionChecks"):
        out_status["admissionChecks"] = [
            {k: c[k] for k in ("name", "state", "message") if k in c} for c in status["admissionChecks"]
        ]
    wl_meta = _owners(raw, _meta(raw))
    # Of the annotations, only defragmentation's (gpuctl.server.defrag: why and when it was moved) and who
    # last stopped or resumed it, as admission stamped it (the audit trail).
    notes = {
        k: v for k, v in ((raw.get("metadata") or {}).get("annotations") or {}).items() if k in WORKLOAD_KEYS
    }
    if notes:
        wl_meta["annotations"] = notes
    # Of the managedFields, who last set spec.active and when (the audit trail: who stopped or resumed it),
    # and when the stop/resume stamp was written (gpuctl.domain.history.stamp_time).
    fields = (raw.get("metadata") or {}).get("managedFields") or []
    active: list[dict] = [
        {"manager": f.get("manager"), "time": f.get("time"), "active": True}
        for f in fields
        if "f:active" in (((f.get("fieldsV1") or {}).get("f:spec")) or {})
    ]
    stamped = max((stamp_time(f) for f in fields), default="")
    if stamped:
        active.append({"stamp": stamped})
    if active:
        wl_meta["managedFields"] = active
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": "Workload",
        "metadata": wl_meta,
        "spec": out_spec,
        "status": out_status,
    }


def trim_hpa(raw: dict) -> dict:
    """gpuctl's HPA of an autoscaled service: the object, and of its managedFields only who last wrote
    status.lastScaleTime (the audit trail's scale record: gpuctl.domain.history.hpa_records)."""
    meta = dict(raw.get("metadata") or {})
    scaler = [
        {"manager": f.get("manager"), "fieldsV1": {"f:status": {"f:lastScaleTime": {}}}}
        for f in meta.pop("managedFields", None) or []
        if "f:lastScaleTime" in (((f.get("fieldsV1") or {}).get("f:status")) or {})
    ]
    if scaler:
        meta["managedFields"] = scaler
    return {**raw, "metadata": meta}


_CONTROLLER_SPEC = ("suspend", "replicas", "parallelism", "completions")
_CONTROLLER_STATUS = (
    "active",
    "ready",
    "succeeded",
    "failed",
    "replicas",
    "readyReplicas",
    "availableReplicas",
)


def trim_controller(raw: dict) -> dict:
    """A gpuctl job's controller (Job, Deployment, StatefulSet, LeaderWorkerSet) as `get jobs` reads it:
    identity and labels, suspend/replicas (a LeaderWorkerSet's group size), the status counters and
    conditions, and the containers' image and resources (a describe view reads the full object from the
    cluster)."""
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    tspec = ((spec.get("template") or {}).get("spec")) or {}
    containers = _containers(tspec.get("containers"))
    for c, src in zip(containers, tspec.get("containers") or [], strict=False):
        if src.get("image"):
            c["image"] = src["image"]
    out_spec: dict[str, Any] = {k: spec[k] for k in _CONTROLLER_SPEC if k in spec}
    out_spec["template"] = {"spec": {"containers": containers}}
    if "leaderWorkerTemplate" in spec:  # a LeaderWorkerSet: its group size (pods per replica)
        out_spec["leaderWorkerTemplate"] = {"size": (spec["leaderWorkerTemplate"] or {}).get("size", 1)}
    out_status: dict[str, Any] = {k: status[k] for k in _CONTROLLER_STATUS if k in status}
    if status.get("conditions"):
        out_status["conditions"] = _conditions(status["conditions"], message=True, times=True)
    meta = _meta(raw)
    # Of the annotations, a stopped autoscaled service's (its status word: docs/serving.md) and what serve's
    # idle reclaimer reads (docs/utilisation.md: a keep, the replicas a service had before it was scaled
    # down).
    notes = {
        k: v
        for k, v in ((raw.get("metadata") or {}).get("annotations") or {}).items()
        if k in CONTROLLER_KEYS or k == SERVICE_STOPPED_ANNOTATION
    }
    if notes:
        meta["annotations"] = notes
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": raw.get("kind"),
        "metadata": meta,
        "spec": out_spec,
        "status": out_status,
    }


__all__ = [
    "Cache",
    "CacheReader",
    "Informer",
    "InformerStats",
    "object_key",
    "strip_metadata",
    "trim_controller",
    "trim_node",
    "trim_pod",
    "trim_workload",
]
