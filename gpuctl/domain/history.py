"""The audit trail's rules (docs/audit.md): what happened to a job, when, who did it and why, decoded from a
Kueue Workload (its conditions, spec.active's managedFields, gpuctl's defragmentation annotations) and
from the Events on it (core/v1 or events.k8s.io, as the API server serves either; only an Event of the
Workload's own namespace counts, and the chart's policy gpuctl-workload-events lets only Kueue and gpuctl
serve write them: manifests/serve/history-policy.yaml). Pure: plain dicts in,
`Record`s out; gpuctl.server.history feeds it from serve's watch cache and keeps what it returns
(gpuctl.service.history: the bounded per-namespace store). docs/audit.md says what each actor means.

Actions (source -> actor; the table with the reasons is in docs/audit.md):
- submitted: the Workload's creation -> runwhere.ai/submitted-by on the job's controller, else its first
  field manager ("via kubectl-create": only the tool is known);
- admitted: condition Admitted, Event Admitted -> kueue; on a MultiKueue manager the reason names the
  worker cluster the job was dispatched to (status.clusterName, gpuctl.domain.multicluster.placement);
- preempted: condition Preempted / Evicted reason Preempted, Event Preempted -> the preemptor Kueue's
  message names: its job when in the same team, else only its team;
- stopped / resumed: Requeued False Deactivated* / Requeued True Reactivated -> Kueue for its own
  (maxRuntime, requeue limit), else the field manager of spec.active ("gpuctl-stop:<user>"), marked
  CLAIMED: a field manager is the client's word;
- evicted: condition Evicted True for any other reason than preemption or deactivation (the pods never
  became ready in time, an admission check such as MultiKueue's withdrew, the queue was stopped, a node
  failed) -> kueue, with Kueue's reason and message;
- moved: runwhere.ai/moved-for + moved-at, Event GpuctlDefragMove -> gpuctl-serve (defrag);
- set-aside, set-aside-ended: Events GpuctlSetAside, GpuctlSetAsideEnded -> gpuctl-serve (set-aside):
  nodes held for a waiting gang, and given back by the set-aside's time limits (docs/distributed.md);
- stopped by idleness: runwhere.ai/idle-stopped + idle-stopped-at on the Workload, Event GpuctlIdleStopped;
  scaled (a service scaled down), idle (due but only reported): Events GpuctlIdleScaled, GpuctlIdle ->
  gpuctl-serve (idle), the reason carrying the measured evidence (docs/utilisation.md);
- finished: condition Finished -> the job itself; deleted: deletionTimestamp or the DELETED watch event
  -> unknown (no API object records who deletes; the API server's audit log does);
- reclaimed: gpuctl serve's backstop ended a pod's termination (gracePeriodSeconds 0) because it held GPUs
  Kueue no longer counted past the bound (docs/security.md) -> gpuctl-serve (backstop); written by serve
  itself (`reclaimed`), not read from an object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from gpuctl.constants import (
    ACTOR_BACKSTOP,
    ACTOR_DEFRAG,
    ACTOR_HPA,
    ACTOR_IDLE,
    ACTOR_KUEUE,
    ACTOR_SET_ASIDE,
    AUDIT_ACTIVE_MANAGER_PREFIX,
    AUDIT_ACTIVE_SET_BY_ANNOTATION,
    AUDIT_SUBMITTED_BY_ANNOTATION,
    BURST_SUFFIX,
    DEACTIVATED_MAX_RUNTIME,
    DEACTIVATED_REQUEUE_LIMIT,
    DEFRAG_EVENT_REASON,
    DEFRAG_MOVED_ANNOTATION,
    DEFRAG_MOVED_AT_ANNOTATION,
    GPU_RESOURCE,
    HPA_STATUS_MANAGER,
    IDLE_REPORTED_REASON,
    IDLE_SCALED_REASON,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    IDLE_STOPPED_REASON,
    SERVING_CLASS,
    SET_ASIDE_ENDED_REASON,
    SET_ASIDE_EVENT_REASON,
    Tier,
)
from gpuctl.domain.multicluster import placement
from gpuctl.domain.objects import (
    annotations,
    condition,
    meta,
    name,
    namespace,
    owner_ref,
    parse_time,
    rfc3339,
    uid,
)
from gpuctl.domain.serving import hpa_metric


class Action(StrEnum):
    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    PREEMPTED = "preempted"
    EVICTED = "evicted"
    STOPPED = "stopped"
    RESUMED = "resumed"
    MOVED = "moved"
    # a service scaled down for idleness (docs/utilisation.md), or its burst by its HPA (docs/serving.md)
    SCALED = "scaled"
    IDLE = "idle"  # idle by its policy, only reported (a dry run, report only, kept)
    FINISHED = "finished"
    DELETED = "deleted"
    SET_ASIDE = "set-aside"  # serve set nodes aside for this gang (its Event GpuctlSetAside)
    SET_ASIDE_ENDED = "set-aside-ended"  # ... and gave them back by its time limits (GpuctlSetAsideEnded)
    RECLAIMED = "reclaimed"  # the backstop ended a pod's termination: it held GPUs Kueue did not count


ACTOR_UNKNOWN = "unknown"
# Appended to an actor that only the client's own words name (a field manager): docs/audit.md.
CLAIMED = " (unverified)"
# A move deactivates and later reactivates the Workload: within this long of runwhere.ai/moved-at, the
# Deactivated/Reactivated conditions are the move's own halves, not a user's stop and resume.
MOVE_SPAN_SECONDS = 600.0
# Kueue's preemption message (pkg/scheduler/preemption/preemption.go preemptionMessage, v0.19.2).
_PREEMPTOR = re.compile(r"accommodate a workload \(UID: (?P<uid>[^,)]+)")
_PREEMPTOR_PATH = re.compile(r"preemptor path: (?P<path>[^;]+)")
_PREEMPTION_DUE = re.compile(r"due to (?P<why>[^;]+)")


@dataclass(frozen=True)
class Record:
    """One thing that happened to a job. `uid` is its Workload's (the dedupe key with action and time)."""

    time: str  # RFC 3339, seconds
    namespace: str
    job: str
    action: str
    actor: str
    reason: str
    uid: str = ""
    # The Kubernetes kind of the job's controller (Job, Deployment, StatefulSet, LeaderWorkerSet), what
    # `history -o name` prints (statefulset.apps/x); "" in records written before it was kept.
    kind: str = ""

    @property
    def key(self) -> str:
        return f"{self.uid}/{self.action}/{self.time}"

    @property
    def epoch(self) -> float:
        return parse_time(self.time) or 0.0

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        """The stored form: one compact JSON object per line."""
        return json.dumps(self.as_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Record:
        return cls(**{k: str(d.get(k) or "") for k in cls.__dataclass_fields__})


def _norm_time(ts: str | None) -> str:
    """Any API time (RFC 3339, with or without fractions) -> seconds RFC 3339; '' when absent."""
    t = parse_time(ts)
    return rfc3339(t) if t is not None else ""


# ----------------------------------------------------------------------------- which job
def job_name(wl: Mapping[str, Any]) -> str:
    """The gpuctl job a Workload belongs to: its owner (gpuctl.domain.objects.owner_ref: a Job, a
    StatefulSet); for a pod's own Workload (a Deployment's pods, queued one by one) the Deployment, from
    the pod's name <deployment>-<template hash>-<suffix>; else the Workload's name."""
    owner = owner_ref(wl)
    if not owner:
        return name(wl)
    if owner.get("kind") == "Pod":
        parts = str(owner.get("name") or "").rsplit("-", 2)
        deployment = parts[0] if len(parts) == 3 else str(owner.get("name") or "")
        # An autoscaled service's burst replica (docs/serving.md): the service is the job.
        burst = ((wl.get("spec") or {}).get("priorityClassRef") or {}).get("name") == SERVING_CLASS[
            Tier.BURST
        ]
        return deployment.removesuffix(BURST_SUFFIX) if burst else deployment
    return str(owner.get("name") or name(wl))


def _owner_pod(wl: Mapping[str, Any]) -> str:
    owner = owner_ref(wl)
    return str(owner.get("name") or "") if owner and owner.get("kind") == "Pod" else ""


def owner_kind(wl: Mapping[str, Any]) -> str:
    """The Kubernetes kind of the job a Workload belongs to (job_name's object): its owner's kind; a
    pod's own Workload is a Deployment's (gpuctl queues a Deployment's pods one by one)."""
    owner = owner_ref(wl)
    if not owner:
        return ""
    return "Deployment" if owner.get("kind") == "Pod" else str(owner.get("kind") or "")


# ----------------------------------------------------------------------------- who
def submitter(controller: Mapping[str, Any] | None) -> str:
    """Who submitted a job, from its controller object: runwhere.ai/submitted-by (what gpuctl's client
    or API says the caller was), else the manager of the first managedFields entry ("via kubectl-create":
    only the tool is known), else unknown."""
    if not controller:
        return ACTOR_UNKNOWN
    who = annotations(controller).get(AUDIT_SUBMITTED_BY_ANNOTATION)
    if who:
        return who
    fields = [f for f in meta(controller).get("managedFields") or [] if f.get("manager")]
    if fields:
        first = min(fields, key=lambda f: f.get("time") or "")
        return f"via {first['manager']}"
    return ACTOR_UNKNOWN


def stamp_time(entry: Mapping[str, Any]) -> str:
    """When a managedFields entry last wrote runwhere.ai/active-set-by ("" if it does not own it; serve's
    cache keeps it as `stamp`). Admission's mutations are owned by no entry."""
    if "stamp" in entry:
        return str(entry["stamp"] or "")
    notes = (((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations")) or {}
    return str(entry.get("time") or "") if f"f:{AUDIT_ACTIVE_SET_BY_ANNOTATION}" in notes else ""


def active_manager(wl: Mapping[str, Any]) -> tuple[str, str]:
    """(actor, time) of the last change of spec.active: runwhere.ai/active-set-by (written by admission
    from the request), else the field manager that owns f:spec.f:active in the Workload's managedFields
    (marked unverified); the time is that manager's. gpuctl's stop/resume sends "gpuctl-stop:<user>";
    kueuectl and kubectl name only the tool ("via kueuectl")."""
    best: tuple[str, str] = ("", "")
    stamped_at = ""
    for f in meta(wl).get("managedFields") or []:
        stamped_at = max(stamped_at, stamp_time(f))
        spec = ((f.get("fieldsV1") or {}).get("f:spec")) or {}
        if "f:active" not in spec and not f.get("active"):
            continue
        when = f.get("time") or ""
        if when >= best[1]:
            best = (str(f.get("manager") or ""), when)
    manager, when = best
    # The API server's word where the chart's gpuctl-active-set-by policy runs: the requester of the last
    # change of spec.active (admission/policies/submitted_by.py), so no mark. Admission's own writes are
    # nobody's in managedFields (an unowned stamp: the policy wrote it on the last change); a stamp a
    # client sent is owned, and counts only when sent no earlier than that change: one left from an
    # earlier change (a later kueuectl stop on a cluster without the policy) is not this change's actor.
    stamped = annotations(wl).get(AUDIT_ACTIVE_SET_BY_ANNOTATION)
    if stamped and (not stamped_at or stamped_at >= when):
        return str(stamped), when
    if not manager:
        return ACTOR_UNKNOWN, ""
    # A field manager is whatever the client sent (?fieldManager=): a claim, never an identity (docs/audit.md,
    # "Who can write the trail": a tenant's patch with fieldManager=kueue read as Kueue's). Kueue's own stops
    # are read from their conditions' reasons (maxRuntime, requeue limit), not from here.
    if manager.startswith(AUDIT_ACTIVE_MANAGER_PREFIX) and ":" in manager:
        return f"{manager.split(':', 1)[1]}{CLAIMED}", when
    return f"via {manager}{CLAIMED}", when


def preemptor(message: str, uids: Mapping[str, tuple[str, str]], ns: str) -> str:
    """Who preempted, from Kueue's message: the preemptor's job when it is in the same namespace (uids:
    Workload UID -> (namespace, job)); else "a job of team T" (T from the preemptor's ClusterQueue path:
    another team's job names are not this team's to read); else Kueue."""
    m = _PREEMPTOR.search(message or "")
    if m:
        found = uids.get(m.group("uid").strip())
        if found and found[0] == ns:
            return f"job {found[1]}"
    p = _PREEMPTOR_PATH.search(message or "")
    if p:
        team = p.group("path").strip().rstrip("/").rsplit("/", 1)[-1]
        if team and team != "UNKNOWN":
            return f"a job of team {team}" if team != ns else "a job of this team"
    return ACTOR_KUEUE


# Kueue's preemption reasons by the words its messages use (pkg/scheduler/preemption): an Event carries only
# the words, the Workload's Preempted condition both; one record reads the same from either.
_REASON_OF_WORDS = {
    "prioritization in the ClusterQueue": "InClusterQueue",
    "reclamation within the cohort": "InCohortReclamation",
    "Fair Sharing within the cohort": "InCohortFairSharing",
    "reclamation within the cohort while borrowing": "InCohortReclaimWhileBorrowing",
}


def _preemption_reason(cond_reason: str, message: str) -> str:
    why = _PREEMPTION_DUE.search(message or "")
    text = why.group("why").strip() if why else ""
    cond_reason = cond_reason or _REASON_OF_WORDS.get(text, "")
    if text and cond_reason:
        return f"{cond_reason}: {text}"
    return text or cond_reason or "Preempted"


# ----------------------------------------------------------------------------- decoding
def _admitted_reason(wl: Mapping[str, Any]) -> str:
    cq = (((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")) or ""
    where = _in_pools(wl)
    return f"admitted by ClusterQueue {cq}{where}{_in_cluster(wl)}" if cq else "admitted" + _in_cluster(wl)


def _in_pools(wl: Mapping[str, Any] | None) -> str:
    """` in pool P` of an admitted Workload's GPU flavors ("" when none): from its condition or its Event."""
    adm = (((wl or {}).get("status") or {}).get("admission")) or {}
    pools: list[str] = []
    for a in adm.get("podSetAssignments") or []:
        f = (a.get("flavors") or {}).get(GPU_RESOURCE)
        if f and f not in pools:
            pools.append(f)
    return f" in pool {', '.join(pools)}" if pools else ""


def _in_cluster(wl: Mapping[str, Any] | None) -> str:
    """ " in cluster W" for a MultiKueue manager's Workload dispatched to worker W, else ""."""
    where = placement(wl)
    return f" in cluster {where.cluster}" if where is not None and where.cluster else ""


def _evicted(ev: Mapping[str, Any]) -> bool:
    """An Evicted condition that is neither a preemption nor a deactivation (those are preempted and
    stopped/moved records): Kueue's PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, NodeFailures..."""
    reason = str(ev.get("reason") or "")
    return ev.get("status") == "True" and reason != "Preempted" and not reason.startswith("Deactivated")


def _moved(wl: Mapping[str, Any]) -> tuple[str, float] | None:
    notes = annotations(wl)
    why, at = notes.get(DEFRAG_MOVED_ANNOTATION), parse_time(notes.get(DEFRAG_MOVED_AT_ANNOTATION))
    return (why or "moved", at) if at is not None else None


# One record before it is stamped with the Workload's namespace, job and UID: (action, when, actor, reason).
_Entry = tuple[Action, str | None, str, str]


def workload_records(
    wl: Mapping[str, Any],
    *,
    submitted_by: str | None = None,
    uids: Mapping[str, tuple[str, str]] | None = None,
    deleted_at: float | None = None,
) -> list[Record]:
    """Every record one Workload's current state shows. Conditions keep only their last transition, so
    the caller (serve's watch) sees each as it happens and the store dedupes by `Record.key`.
    submitted_by: the submitter (`submitter` of the job's controller) when known; uids: Workload UID ->
    (namespace, job) for naming preemptors; deleted_at: when the Workload was seen deleted."""
    ns, job, wuid = namespace(wl), job_name(wl), uid(wl)
    entries: list[_Entry | None] = [_submitted(wl, submitted_by)]
    adm = condition(wl, "Admitted")
    if adm.get("status") == "True":
        entries.append((Action.ADMITTED, adm.get("lastTransitionTime"), ACTOR_KUEUE, _admitted_reason(wl)))
    entries.append(_preempted(wl, uids or {}))
    ev = condition(wl, "Evicted")
    if _evicted(ev):
        entries.append((Action.EVICTED, ev.get("lastTransitionTime"), ACTOR_KUEUE, _why(ev)))
    moved = _moved(wl)
    if moved is not None:
        entries.append((Action.MOVED, rfc3339(moved[1]), ACTOR_DEFRAG, moved[0]))
    entries.extend(_stopped_resumed(wl, moved))
    fin = condition(wl, "Finished")
    if fin.get("status") == "True":
        entries.append((Action.FINISHED, fin.get("lastTransitionTime"), f"job {job}", _why(fin)))
    gone = meta(wl).get("deletionTimestamp") or (rfc3339(deleted_at) if deleted_at is not None else None)
    if gone:
        entries.append(
            (Action.DELETED, gone, ACTOR_UNKNOWN, f"Workload {name(wl)} deleted (its job was deleted)")
        )
    out: list[Record] = []
    for entry in entries:
        if entry is None:
            continue
        action, ts, actor, reason = entry
        t = _norm_time(ts)
        if t:
            out.append(Record(t, ns, job, action.value, actor or ACTOR_UNKNOWN, reason, wuid))
    return out


def _why(cond: Mapping[str, Any]) -> str:
    """A condition's "reason: message" (the reason alone without a message)."""
    why = str(cond.get("reason") or "")
    msg = str(cond.get("message") or "")
    return f"{why}: {msg}" if msg else why


def _submitted(wl: Mapping[str, Any], submitted_by: str | None) -> _Entry:
    kind, job = owner_kind(wl), job_name(wl)
    pod = _owner_pod(wl)
    if pod:  # a Deployment's pods are queued one by one, each with a Workload of its own
        what = f"pod {pod} of Deployment {job} queued"
    else:
        what = f"{kind} {job} created" if kind else f"Workload {name(wl)} created"
    return Action.SUBMITTED, meta(wl).get("creationTimestamp"), submitted_by or ACTOR_UNKNOWN, what


def _preempted(wl: Mapping[str, Any], uids: Mapping[str, tuple[str, str]]) -> _Entry | None:
    """Preempted=True, or (older Kueue) Evicted=True with reason Preempted: who preempted it and why."""
    ns = namespace(wl)
    pre = condition(wl, "Preempted")
    ev = condition(wl, "Evicted")
    if pre.get("status") == "True":
        msg = pre.get("message") or ev.get("message") or ""
        reason = _preemption_reason(pre.get("reason") or "", msg)
        return Action.PREEMPTED, pre.get("lastTransitionTime"), preemptor(msg, uids, ns), reason
    if ev.get("status") == "True" and ev.get("reason") == "Preempted":
        msg = ev.get("message") or ""
        reason = _preemption_reason("Preempted", msg)
        return Action.PREEMPTED, ev.get("lastTransitionTime"), preemptor(msg, uids, ns), reason
    return None


def _stopped_resumed(wl: Mapping[str, Any], moved: tuple[str, float] | None) -> list[_Entry]:
    """Deactivated (by a user, maxRuntime or the requeue limit) and Reactivated, unless part of a move."""

    def part_of_move(ts: str | None) -> bool:
        t = parse_time(ts)
        return moved is not None and t is not None and -5.0 <= t - moved[1] <= MOVE_SPAN_SECONDS

    out: list[_Entry] = []
    req = condition(wl, "Requeued")
    ev = condition(wl, "Evicted")
    deact = None
    if req.get("status") == "False" and str(req.get("reason") or "").startswith("Deactivated"):
        deact = req
    elif ev.get("status") == "True" and str(ev.get("reason") or "").startswith("Deactivated"):
        deact = ev
    if deact is not None and not part_of_move(deact.get("lastTransitionTime")):
        reason = str(deact.get("reason") or "")
        idle = _idle_stop(wl, deact.get("lastTransitionTime"))
        if idle is not None:
            actor, why = ACTOR_IDLE, idle
        elif reason == DEACTIVATED_MAX_RUNTIME:
            actor, why = ACTOR_KUEUE, "it ran its maxRuntime"
        elif reason == DEACTIVATED_REQUEUE_LIMIT:
            actor, why = ACTOR_KUEUE, "requeued too often (its pods never all became ready)"
        else:
            actor, why = active_manager(wl)[0], "spec.active=false"
        out.append((Action.STOPPED, deact.get("lastTransitionTime"), actor, why))
    if (
        req.get("status") == "True"
        and req.get("reason") == "Reactivated"
        and not part_of_move(req.get("lastTransitionTime"))
    ):
        out.append((Action.RESUMED, req.get("lastTransitionTime"), active_manager(wl)[0], "spec.active=true"))
    return out


def _idle_stop(wl: Mapping[str, Any], ts: str | None) -> str | None:
    """The evidence of serve's idle stop when this deactivation is it (runwhere.ai/idle-stopped-at within
    a minute before it), else None."""
    notes = annotations(wl)
    at, t = parse_time(notes.get(IDLE_STOPPED_AT_ANNOTATION)), parse_time(ts)
    if at is None or t is None or not -5.0 <= t - at <= 60.0:
        return None
    return f"idle, {notes.get(IDLE_STOPPED_ANNOTATION) or 'GPUs idle'}"


def event_time(ev: Mapping[str, Any]) -> str:
    """When an Event (core/v1 or events.k8s.io) last happened."""
    series = ev.get("series") or {}
    return _norm_time(
        series.get("lastObservedTime")
        or ev.get("lastTimestamp")
        or ev.get("eventTime")
        or ev.get("deprecatedLastTimestamp")
        or ev.get("firstTimestamp")
        or meta(ev).get("creationTimestamp")
    )


def event_records(
    ev: Mapping[str, Any],
    workloads: Callable[[str, str], Mapping[str, Any] | None],
    uids: Mapping[str, tuple[str, str]] | None = None,
) -> list[Record]:
    """Records an Event on a Workload says: Preempted, Admitted, GpuctlDefragMove. workloads(ns, name):
    the Workload the Event regards, when still known (for its job's name and UID); otherwise the
    Event's own `regarding`/`involvedObject` names it."""
    obj = ev.get("regarding") or ev.get("involvedObject") or {}
    if obj.get("kind") != "Workload":
        return []
    ns = namespace(ev)
    if obj.get("namespace") not in (None, "", ns):
        # an Event about another namespace's Workload says nothing of this one (docs/audit.md, "Who can write
        # the trail": a leak)
        return []
    reason = ev.get("reason") or ""
    msg = str(ev.get("note") or ev.get("message") or "")
    wl = workloads(ns, obj.get("name") or "")
    job = job_name(wl) if wl else str(obj.get("name") or "")
    wuid = uid(wl) if wl else str(obj.get("uid") or "")
    t = event_time(ev)
    if not t:
        return []
    if reason == "Preempted":
        return [
            Record(
                t,
                ns,
                job,
                Action.PREEMPTED.value,
                preemptor(msg, uids or {}, ns),
                _preemption_reason("", msg),
                wuid,
            )
        ]
    if reason == "Admitted":
        why = msg.split(",", 1)[0] + _in_pools(wl) + _in_cluster(wl)
        return [Record(t, ns, job, Action.ADMITTED.value, ACTOR_KUEUE, why, wuid)]
    if reason == DEFRAG_EVENT_REASON:
        return [Record(t, ns, job, Action.MOVED.value, ACTOR_DEFRAG, msg, wuid)]
    if reason in _SET_ASIDE_ACTIONS:
        return [Record(t, ns, job, _SET_ASIDE_ACTIONS[reason].value, ACTOR_SET_ASIDE, msg, wuid)]
    idle = _IDLE_ACTIONS.get(reason)
    if idle is not None:  # the message: what was done, then the evidence (gpuctl.server.idle)
        text = msg.split(": ", 1)[1] if idle is Action.STOPPED and ": " in msg else msg
        return [Record(t, ns, job, idle.value, ACTOR_IDLE, text, wuid)]
    return []


def hpa_records(hpa: Mapping[str, Any]) -> list[Record]:
    """The last scale of an autoscaled service's burst (docs/serving.md), from gpuctl's HPA of the service:
    its status.lastScaleTime, from currentReplicas (what the HPA controller found when it scaled) to
    desiredReplicas, with the metric it read. The HPA keeps only its last scale: serve records each one it
    sees. Its actor is the HPA controller when kube-controller-manager last wrote lastScaleTime (its
    managedFields); a team member may patch the status too (gpuctl-user has horizontalpodautoscalers/status
    for the ScaledToZero condition), so another writer is named as it calls itself, unverified."""
    st = hpa.get("status") or {}
    t = _norm_time(st.get("lastScaleTime"))
    if not t or st.get("desiredReplicas") is None:
        return []
    want, had = int(st["desiredReplicas"]), st.get("currentReplicas")
    moved = f"{had} -> {want}" if had is not None and int(had) != want else f"to {want}"
    metric = hpa_metric(hpa)
    reading = ""
    if metric is not None and metric.current is not None:
        # the HPA's AverageValue reading: the load above the floor's share, per replica it then had
        reading = (
            f"; {metric.metric} above the floor's {metric.floor_load}: {metric.current} a replica, "
            f"target {metric.target}"
        )
    why = f"burst {moved} replica(s){reading}"
    return [Record(t, namespace(hpa), name(hpa), Action.SCALED.value, _scaler(hpa), why, uid(hpa))]


def _scaler(hpa: Mapping[str, Any]) -> str:
    """Who last wrote the HPA's status.lastScaleTime (its managedFields)."""
    writer = ""
    for f in meta(hpa).get("managedFields") or []:
        status = ((f.get("fieldsV1") or {}).get("f:status")) or {}
        if "f:lastScaleTime" in status:
            writer = str(f.get("manager") or "")
    if writer in ("", HPA_STATUS_MANAGER):
        return ACTOR_HPA
    return f"via {writer}{CLAIMED}"


_IDLE_ACTIONS = {
    IDLE_STOPPED_REASON: Action.STOPPED,
    IDLE_SCALED_REASON: Action.SCALED,
    IDLE_REPORTED_REASON: Action.IDLE,
}


_SET_ASIDE_ACTIONS = {
    SET_ASIDE_EVENT_REASON: Action.SET_ASIDE,
    SET_ASIDE_ENDED_REASON: Action.SET_ASIDE_ENDED,
}


def reclaimed(namespace: str, job: str, pod_uid: str, at: float, why: str) -> Record:
    """The record of a pod whose termination serve's backstop ended (keyed by the pod's UID: one per pod)."""
    return Record(rfc3339(at), namespace, job, Action.RECLAIMED.value, ACTOR_BACKSTOP, why, pod_uid)
