"""The one way to compute a job's status, used by `get jobs`, `describe job` and the REST API.

A job's status combines three sources, in this order of authority:
1. its Kueue Workload (Queued until Kueue reserves quota; Preempted after an eviction; Finished),
2. its controller (Job counts; Deployment/StatefulSet ready replicas),
3. its pods (waiting reasons such as ImagePullBackOff, OOMKilled, unschedulable).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuctl.constants import CONTAINER_WAITING_REASONS


class State(StrEnum):
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    PENDING = "Pending"
    RUNNING = "Running"
    PARTIALLY_RUNNING = "Partially Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    TERMINATING = "Terminating"
    UNKNOWN = "Unknown"


KUEUE_GATE = "kueue.x-k8s.io/admission"


def condition(obj: dict | None, ctype: str) -> dict:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def is_true(obj: dict | None, ctype: str) -> bool:
    return condition(obj, ctype).get("status") == "True"


# ----------------------------------------------------------------------------- workloads
def workload_state(wl: dict | None) -> State | None:
    """Kueue's view, or None when Kueue has not created a Workload yet."""
    if not wl:
        return None
    if is_true(wl, "Finished"):
        return State.FAILED if condition(wl, "Finished").get("reason") == "Failed" else State.SUCCEEDED
    if is_true(wl, "Admitted"):
        return State.ADMITTED
    evicted = condition(wl, "Evicted")
    if evicted.get("status") == "True" and evicted.get("reason") == "Preempted":
        return State.PREEMPTED
    if is_true(wl, "Preempted") and not is_true(wl, "QuotaReserved"):
        return State.PREEMPTED
    return State.QUEUED


def workload_gpus(wl: dict) -> int:
    """GPUs a Workload asks for: sum over pod sets of count x per-pod nvidia.com/gpu."""
    total = 0
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        per_pod = 0
        for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            v = (res.get("requests") or {}).get("nvidia.com/gpu") or (res.get("limits") or {}).get(
                "nvidia.com/gpu"
            )
            per_pod += int(float(v)) if v else 0
        total += per_pod * int(ps.get("count", 1))
    return total


# ----------------------------------------------------------------------------- pods
def pod_state(pod: dict) -> str:
    """A pod's status word: Kueue's gate shows as Queued; container reasons as the earlier gpuctl did."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return State.TERMINATING
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if any(g.get("name") == KUEUE_GATE for g in spec.get("schedulingGates") or []):
        return State.QUEUED
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


def pod_ready(pod: dict) -> tuple[int, int]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len(statuses) or len((pod.get("spec") or {}).get("containers") or [])
    return sum(1 for s in statuses if s.get("ready")), total


def unschedulable_message(pod: dict) -> str | None:
    c = condition(pod, "PodScheduled")
    if c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return c.get("message")
    return None


# ----------------------------------------------------------------------------- jobs
@dataclass(frozen=True)
class JobStatus:
    state: str
    reason: str = ""  # the pod-level reason that explains the state, if any


def job_status(kind: str, obj: dict, wl: dict | None, pods: list[dict]) -> JobStatus:
    """Status of one gpuctl job (kind = Job | Deployment | StatefulSet)."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return JobStatus(State.TERMINATING)
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    kstate = workload_state(wl)
    bad = next((s for s in (pod_state(p) for p in pods) if s not in _PLAIN), None)

    if kind == "Job":
        for c in st.get("conditions") or []:
            if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
                return JobStatus(State.SUCCEEDED)
            if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
                return JobStatus(State.FAILED, c.get("reason", ""))
        if kstate in (State.SUCCEEDED, State.FAILED, State.PREEMPTED):
            return JobStatus(kstate)
        if spec.get("suspend") or kstate == State.QUEUED or kstate is None:
            return JobStatus(State.QUEUED if kstate else State.PENDING)
        if bad:
            return JobStatus(bad, bad)
        if int(st.get("ready") or 0) > 0 or any(pod_state(p) == "Running" for p in pods):
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
    if kstate == State.PREEMPTED:
        return JobStatus(State.PREEMPTED)
    if any(pod_state(p) == State.QUEUED for p in pods) or kstate == State.QUEUED:
        return JobStatus(State.QUEUED)
    if kstate == State.ADMITTED:
        return JobStatus(State.ADMITTED)
    return JobStatus(State.PENDING)


_PLAIN = frozenset({"Running", "Succeeded", "Pending", "Queued", "Terminating", "Unknown", "Failed"})
