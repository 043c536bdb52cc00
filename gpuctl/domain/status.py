"""A gpuctl job's status word, from its controller, its Kueue Workload and its pods (pure).

Order of authority:
1. the controller's own terminal conditions (a Job that completed or failed),
2. the Kueue Workload (domain.workload.workload_state: Finished > Admitted > QuotaReserved >
   Pending, with Pending split into Queued, Preempted and Inactive),
3. the pods (waiting reasons such as ImagePullBackOff, OOMKilled, unschedulable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from gpuctl.constants import CONTAINER_WAITING_REASONS
from gpuctl.domain.objects import TABLE, condition, meta, pod_finished
from gpuctl.domain.workload import WAITING, WorkloadState, finished_failed, workload_state

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


_WORKLOAD_WORD: Mapping[WorkloadState, State] = {
    WorkloadState.PENDING: State.QUEUED,
    WorkloadState.PREEMPTED: State.PREEMPTED,
    WorkloadState.INACTIVE: State.INACTIVE,
    WorkloadState.QUOTA_RESERVED: State.QUOTA_RESERVED,
    WorkloadState.ADMITTED: State.ADMITTED,
}

# Waiting for Kueue (holds no quota): the words of gpuctl.domain.workload.WAITING, the one definition.
WAITING_STATES = frozenset(_WORKLOAD_WORD[s] for s in WAITING)


def workload_word(wl: Mapping[str, Any] | None) -> State | None:
    """The status word of a Workload on its own (None without one)."""
    st = workload_state(wl)
    if st is None:
        return None
    if st == WorkloadState.FINISHED:
        return State.FAILED if finished_failed(wl or {}) else State.SUCCEEDED
    return _WORKLOAD_WORD[st]


# ----------------------------------------------------------------------------- pods
# A pod reaches these functions either as the API object or as a row of the API server's Table
# (`get jobs` lists pods that way: a tenth of the bytes): {"metadata": ..., "table": {column: cell}},
# where the Status cell is the server's own printing of the pod, exactly what kubectl shows (the key:
# gpuctl.domain.objects.TABLE).
NONE_CELL = "<none>"


def _cell(pod: Mapping[str, Any], column: str) -> str | None:
    row = pod.get(TABLE)
    return None if row is None else str(row.get(column) or "")


def _restartable(container: Mapping[str, Any] | None) -> bool:
    return (container or {}).get("restartPolicy") == "Always"


def printed_pod_status(pod: Mapping[str, Any]) -> str:
    """kubectl's STATUS column for a pod: the Table cell when the pod came as a Table row, else the
    same computation as the API server's printer (k8s.io/kubernetes pkg/printers/internalversion
    printPod, v1.36), so both forms of a pod give one word."""
    cell = _cell(pod, "Status")
    if cell is not None:
        return cell
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    conditions = status.get("conditions") or []
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    inits = {c.get("name"): c for c in spec.get("initContainers") or []}
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if _restartable(inits.get(cs.get("name"))) and cs.get("started"):
            continue
        if term is not None:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
        elif wait is not None and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(inits)}"
        initializing = True
        break
    initialized = next(
        (c.get("status") == "True" for c in conditions if c.get("type") == "Initialized"), False
    )
    if not initializing or initialized:
        has_running, error_reason = False, ""
        for cs in reversed(status.get("containerStatuses") or []):
            state = cs.get("state") or {}
            wait, term = state.get("waiting"), state.get("terminated")
            if wait is not None and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None:
                if term.get("reason"):
                    reason = term["reason"]
                elif term.get("signal"):
                    reason = f"Signal:{term['signal']}"
                else:
                    reason = f"ExitCode:{term.get('exitCode', 0)}"
                if int(term.get("exitCode") or 0) != 0:
                    error_reason = reason
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
        if reason == "Completed":
            ready_condition = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            if has_running and ready_condition:
                reason = "Running"
            elif error_reason:
                reason = error_reason
            elif has_running:
                reason = "NotReady"
    if meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif not pod_finished(pod):
            reason = "Terminating"
    return reason


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Held by a scheduling gate. gpuctl's pods carry only Kueue's (admission, TAS topology); a Table row
    tells that some gate holds the pod, not which, so both forms count any gate."""
    cell = _cell(pod, "Status")
    if cell is not None:
        return cell == "SchedulingGated"
    return bool((pod.get("spec") or {}).get("schedulingGates"))


# kubectl's words that gpuctl shows in its own (earlier gpuctl's) vocabulary.
_PRINTED_WORD: Mapping[str, str] = {"Completed": "Succeeded", "NotReady": "Running", "": "Unknown"}


def pod_status(pod: Mapping[str, Any], wl: Mapping[str, Any] | None = None) -> str:
    """A pod's status word: kubectl's STATUS, except that a pod held by Kueue's gate shows its Workload's
    state (Queued without one), and container reasons use the earlier gpuctl's vocabulary."""
    printed = printed_pod_status(pod)
    if printed != State.TERMINATING and is_gated(pod):
        word = workload_word(wl)
        return word if word in _WORKLOAD_WORD.values() else State.QUEUED
    if printed in _PRINTED_WORD:
        return _PRINTED_WORD[printed]
    if printed in _PHASES or printed.startswith(("Init:", "Signal:", "ExitCode:")):
        return printed
    return waiting_reason(printed)


_PHASES = frozenset(
    {"Pending", "Running", "Succeeded", "Failed", "Unknown", "Terminating", "SchedulingGated"}
)


def waiting_reason(reason: str) -> str:
    """The earlier gpuctl's vocabulary for container reasons (kept: scripts grep for these words)."""
    if reason in CONTAINER_WAITING_REASONS or reason in ("OOMKilled", "Error"):
        return reason
    if "BackOff" in reason:
        return "BackOff"
    if "NotFound" in reason:
        return "NotFound"
    if "Permission" in reason:
        return "PermissionDenied"
    if "Storage" in reason:
        return "StorageError"
    return reason or "Waiting"


def pod_ready(pod: Mapping[str, Any]) -> tuple[int, int]:
    """kubectl's READY column: ready containers (and started sidecars) / containers (and sidecars)."""
    cell = _cell(pod, "Ready")
    if cell is not None:
        r, _, t = cell.partition("/")
        return int(r or 0), int(t or 0)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    inits = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in inits.values() if _restartable(c))
    ready = sum(
        1
        for cs in status.get("initContainerStatuses") or []
        if _restartable(inits.get(cs.get("name"))) and cs.get("started") and cs.get("ready")
    )
    ready += sum(
        1
        for cs in status.get("containerStatuses") or []
        if cs.get("ready") and (cs.get("state") or {}).get("running") is not None
    )
    return ready, total


def gang_ready(pods: Iterable[Mapping[str, Any]], nodes: int) -> str:
    """READY of a multi-node job's one row in `get jobs`: its ready pods (every container ready, as kubectl
    counts them) of its N (gpuctl.domain.gang.gang_nodes)."""
    ready = 0
    for p in pods:
        r, t = pod_ready(p)
        ready += bool(t) and r == t
    return f"{ready}/{nodes}"


def pod_node(pod: Mapping[str, Any]) -> str:
    cell = _cell(pod, "Node")
    if cell is not None:
        return cell if cell and cell != NONE_CELL else ""
    return (pod.get("spec") or {}).get("nodeName") or ""


def pod_ip(pod: Mapping[str, Any]) -> str:
    cell = _cell(pod, "IP")
    if cell is not None:
        return cell if cell and cell != NONE_CELL else ""
    return (pod.get("status") or {}).get("podIP") or ""


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    c = condition(pod, "PodScheduled")
    if c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return c.get("message")
    return None


# ----------------------------------------------------------------------------- jobs
class JobStatus(NamedTuple):
    state: str
    reason: str = ""  # the pod-level reason that explains the state, if any


_PLAIN = frozenset(
    {"Running", "Succeeded", "Pending", "Terminating", "Unknown", "Failed", *_WORKLOAD_WORD.values()}
)


def job_status(
    kind: str,
    obj: Mapping[str, Any],
    wl: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]],
    pod_words: list[str] | None = None,
) -> JobStatus:
    """Status of one gpuctl job (kind = Job | Deployment | StatefulSet). pod_words: the pods' words when
    the caller has them already (pod_status of each pod with or without its Workload: they differ only
    for a gated pod, whose word is a Workload's or Queued either way, never Running nor a problem)."""
    if meta(obj).get("deletionTimestamp"):
        return JobStatus(State.TERMINATING)
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    word = workload_word(wl)
    if pod_words is None:
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


def gang_status(job_word: str, pod_words: list[str]) -> str:
    """The word of a multi-node job's one row in `get jobs`: its job status, unless that is Pending for
    want of its Workload (a plain table reads none for running Jobs) while its pods say more: a pod's
    problem word, Running when every rank runs, Partially Running when some do."""
    if job_word != State.PENDING or not pod_words:
        return job_word
    bad = next((w for w in pod_words if w not in _PLAIN), None)
    if bad:
        return bad
    if all(w == State.RUNNING for w in pod_words):
        return State.RUNNING
    if State.RUNNING in pod_words:
        return State.PARTIALLY_RUNNING
    return pod_words[0]


# ----------------------------------------------------------------------------- waiting for a state
# `gpuctl wait job --for=STATE`: the status words (job_status's, the ones `get jobs`, `get jobs -w`,
# `describe job` and the API show) that mean a job is in STATE.
WAIT_FOR: Mapping[str, frozenset[str]] = {
    "admitted": frozenset({State.ADMITTED, State.RUNNING, State.PARTIALLY_RUNNING, State.SUCCEEDED}),
    "running": frozenset({State.RUNNING}),
    "complete": frozenset({State.SUCCEEDED}),
    "failed": frozenset({State.FAILED}),
}


def reached(state: str, status: str, wl: Mapping[str, Any] | None = None) -> bool | None:
    """Is a job with this status word (and this Workload) in `state`, one of WAIT_FOR? True: it is;
    False: not yet; None: it never will be, it ended the other way (Failed while waiting to be admitted,
    running or complete; Succeeded while waiting for failed). Admitted is also met when its Workload is
    Admitted while its word says more (a pod's problem word, pods not scheduled yet)."""
    if status in WAIT_FOR[state]:
        return True
    if state == "admitted" and workload_state(wl) == WorkloadState.ADMITTED:
        return True
    ended = State.SUCCEEDED if state == "failed" else State.FAILED
    return None if status == ended else False
