"""A gpuctl job's status word, from its controller, its Kueue Workload and its pods (pure).

Order of authority:
1. the controller's own terminal conditions (a Job that completed or failed),
2. the Kueue Workload (domain.workload.workload_state: Finished > Admitted > QuotaReserved >
   Pending, with Pending split into Queued, Preempted and Inactive),
3. the pods (waiting reasons such as ImagePullBackOff, OOMKilled, unschedulable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuctl.constants import CONTAINER_WAITING_REASONS
from gpuctl.domain.objects import condition, meta
from gpuctl.domain.workload import WorkloadState, finished_failed, workload_state

KUEUE_GATE = "kueue.x-k8s.io/admission"


class State(StrEnum):
    QUEUED = "Queued"
    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    INACTIVE = "Inactive"
    PENDING = "Pending"
    RUNNING = "Running"
    PARTIALLY_RUNNING = "Partially Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    TERMINATING = "Terminating"
    UNKNOWN = "Unknown"


# Waiting for Kueue: a job in one of these states holds no quota.
WAITING_STATES = frozenset({State.QUEUED, State.PREEMPTED, State.INACTIVE})

_WORKLOAD_WORD: Mapping[WorkloadState, State] = {
    WorkloadState.PENDING: State.QUEUED,
    WorkloadState.PREEMPTED: State.PREEMPTED,
    WorkloadState.INACTIVE: State.INACTIVE,
    WorkloadState.QUOTA_RESERVED: State.QUOTA_RESERVED,
    WorkloadState.ADMITTED: State.ADMITTED,
}


def workload_word(wl: Mapping[str, Any] | None) -> State | None:
    """The status word of a Workload on its own (None without one)."""
    st = workload_state(wl)
    if st is None:
        return None
    if st == WorkloadState.FINISHED:
        return State.FAILED if finished_failed(wl or {}) else State.SUCCEEDED
    return _WORKLOAD_WORD[st]


# ----------------------------------------------------------------------------- pods
def is_gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == KUEUE_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def pod_status(pod: Mapping[str, Any], wl: Mapping[str, Any] | None = None) -> str:
    """A pod's status word. A pod held by Kueue's scheduling gate shows its Workload's state (Queued
    without one); container reasons use the earlier gpuctl's vocabulary."""
    if meta(pod).get("deletionTimestamp"):
        return State.TERMINATING
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if is_gated(pod):
        word = workload_word(wl)
        return word if word in _WORKLOAD_WORD.values() else State.QUEUED
    phase = status.get("phase") or "Unknown"
    statuses = status.get("containerStatuses") or []
    if statuses:
        st = statuses[0].get("state") or {}
        if "waiting" in st:
            return waiting_reason(st["waiting"].get("reason") or "", st["waiting"].get("message") or "")
        term = st.get("terminated")
        if term and term.get("reason") in ("OOMKilled", "Error"):
            return term["reason"]
    if phase == "Pending" and not spec.get("nodeName"):
        return State.PENDING
    return phase


def waiting_reason(reason: str, message: str = "") -> str:
    """The earlier gpuctl's vocabulary for waiting containers (kept: scripts grep for these words)."""
    if reason in CONTAINER_WAITING_REASONS:
        return reason
    text = f"{reason} {message}"
    if "BackOff" in reason:
        return "BackOff"
    if "NotFound" in reason or "not found" in message:
        return "NotFound"
    if "Permission" in reason or "denied" in message:
        return "PermissionDenied"
    if "Storage" in text or "storage" in text:
        return "StorageError"
    return reason or "Waiting"


def pod_ready(pod: Mapping[str, Any]) -> tuple[int, int]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len(statuses) or len((pod.get("spec") or {}).get("containers") or [])
    return sum(1 for s in statuses if s.get("ready")), total


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    c = condition(pod, "PodScheduled")
    if c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return c.get("message")
    return None


# ----------------------------------------------------------------------------- jobs
@dataclass(frozen=True)
class JobStatus:
    state: str
    reason: str = ""  # the pod-level reason that explains the state, if any


_PLAIN = frozenset(
    {"Running", "Succeeded", "Pending", "Terminating", "Unknown", "Failed", *_WORKLOAD_WORD.values()}
)


def job_status(
    kind: str, obj: Mapping[str, Any], wl: Mapping[str, Any] | None, pods: list[Mapping[str, Any]]
) -> JobStatus:
    """Status of one gpuctl job (kind = Job | Deployment | StatefulSet)."""
    if meta(obj).get("deletionTimestamp"):
        return JobStatus(State.TERMINATING)
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    word = workload_word(wl)
    pod_words = [pod_status(p) for p in pods]
    bad = next((s for s in pod_words if s not in _PLAIN), None)

    if kind == "Job":
        for c in st.get("conditions") or []:
            if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
                return JobStatus(State.SUCCEEDED)
            if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
                return JobStatus(State.FAILED, c.get("reason", ""))
        if word is None:
            return JobStatus(State.PENDING)
        if word in (State.SUCCEEDED, State.FAILED, *WAITING_STATES, State.QUOTA_RESERVED):
            return JobStatus(word)
        if spec.get("suspend"):
            return JobStatus(State.ADMITTED)  # admitted, not yet unsuspended by Kueue
        if bad:
            return JobStatus(bad, bad)
        if int(st.get("ready") or 0) > 0 or "Running" in pod_words:
            return JobStatus(State.RUNNING)
        return JobStatus(State.ADMITTED)

    # Deployment / StatefulSet: Kueue admits pods (Deployment: one Workload each) or the set (gang).
    desired = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    ready = int(st.get("readyReplicas") or 0)
    if desired == 0:
        return JobStatus(State.PENDING, "scaled to 0")
    if ready >= desired:
        return JobStatus(State.RUNNING)
    if ready > 0:
        return JobStatus(State.PARTIALLY_RUNNING, bad or "")
    if bad:
        return JobStatus(bad, bad)
    if word in (*WAITING_STATES, State.QUOTA_RESERVED, State.ADMITTED):
        return JobStatus(word)
    if any(is_gated(p) for p in pods):
        return JobStatus(State.QUEUED)
    return JobStatus(State.PENDING)
