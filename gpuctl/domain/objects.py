"""Reading metadata and status conditions of any object, and whether gpuctl made it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpuctl.constants import MANAGED_BY_VALUE, Labels


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def name(obj: Mapping[str, Any]) -> str:
    return meta(obj).get("name") or ""


def namespace(obj: Mapping[str, Any]) -> str:
    return meta(obj).get("namespace") or ""


def uid(obj: Mapping[str, Any]) -> str:
    return meta(obj).get("uid") or ""


def condition(obj: Mapping[str, Any] | None, ctype: str) -> Mapping[str, Any]:
    """The status condition of this type, or {}."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def is_true(obj: Mapping[str, Any] | None, ctype: str) -> bool:
    return condition(obj, ctype).get("status") == "True"


# A pod read as a row of the API server's Table (`get jobs` lists pods that way) rides under this key:
# {"metadata": ..., "table": {column: cell}} (gpuctl.domain.status reads the cells).
TABLE = "table"


def pod_finished(pod: Mapping[str, Any]) -> bool:
    """Whether a pod has ended: phase Succeeded or Failed (a Table row says so by its Completed condition, as
    kubectl reads it). The one answer for every "unfinished pods" count: GPUs held, slices in use, a
    gang's live ranks, the set-aside's nodes, the snapshot's holders. (A list request asks the same of
    the API server: gpuctl.service.inventory.UNFINISHED.)"""
    row = pod.get(TABLE)
    if row is not None:
        return bool(row.get("Completed"))
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_gpuctl_object(obj: Mapping[str, Any] | None) -> bool:
    """Made by gpuctl: carries app.kubernetes.io/managed-by=gpuctl. gpuctl deletes nothing else."""
    return labels(obj).get(Labels.MANAGED_BY) == MANAGED_BY_VALUE


def rfc3339(t: float) -> str:
    """Epoch seconds -> RFC 3339 UTC to the second, as the API server writes times."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(ts: str | None) -> float | None:
    """RFC 3339 as the API server writes it -> epoch seconds (None when absent or unreadable)."""
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def age_seconds(obj: Mapping[str, Any], now: float | None = None) -> float | None:
    """Seconds since the object's creationTimestamp."""
    t = parse_time(meta(obj).get("creationTimestamp"))
    if t is None:
        return None
    return (now if now is not None else datetime.now(UTC).timestamp()) - t


def short_age(seconds: float | None) -> str:
    """kubectl's short ages: 45s, 12m, 5h, 3d (floors; the earlier gpuctl's format)."""
    if seconds is None:
        return "<unknown>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    if s < 3600 * 2:
        return f"{s // 60}m"
    if s < 86400 * 2:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


# ----------------------------------------------------------------------------- owners
def owner_refs(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The object's ownerReferences that are objects (a malformed entry is skipped, never raised on)."""
    refs = meta(obj).get("ownerReferences")
    return [r for r in refs if isinstance(r, Mapping)] if isinstance(refs, list) else []


def controller_ref(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The object's controller: its ownerReference marked `controller: true`, else None. Kubernetes'
    rule (apimachinery metav1.GetControllerOf), with no fallback: who *manages* a pod (the Job,
    ReplicaSet or StatefulSet that made it; what Kueue's pod webhook reads to leave a pod to its
    controller's integration, and what a pod can forge). Used wherever a claim of control matters: the
    backstop's links (gpuctl.domain.coverage), the pods of a job (explain), the webhook's owner-claim
    rule (admission/). "Which object owns this Workload" is `owner_ref`, which starts here."""
    for ref in owner_refs(obj):
        if ref.get("controller") is True:
            return ref
    return None


def owner_ref(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Which object owns this one (a Workload, a pod): the one answer, in this fallback order:

    1. its controller (`controller_ref`): a Job's Workload, a single pod's own Workload (Kueue's pod
       integration: a Deployment's pods), every pod a controller made;
    2. else its first owner that is not a Pod: a StatefulSet's Workload, which Kueue's statefulset
       integration owns by a plain reference to the StatefulSet (statefulset_reconciler.go,
       SetOwnerReference) while its pod group adds one plain reference per pod;
    3. else its first owner: a plain pod group's Workload, owned by each of its pods alike.

    None for an object without owners. Used for every "which job is this" of a Workload: the audit
    trail's job (gpuctl.domain.history), defragmentation's jobs (gpuctl.domain.defrag), explain's
    labels (gpuctl.domain.explain)."""
    ctrl = controller_ref(obj)
    if ctrl is not None:
        return ctrl
    refs = owner_refs(obj)
    return next((r for r in refs if r.get("kind") != "Pod"), refs[0] if refs else None)


def pod_templates(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """A controller's pod templates: a Job's, Deployment's or StatefulSet's one; a LeaderWorkerSet's
    leader and worker templates (the worker's last: every pod of a group asks for what it asks)."""
    spec = (obj or {}).get("spec") or {}
    if "template" in spec:
        return [spec.get("template") or {}]
    lwt = spec.get("leaderWorkerTemplate") or {}
    return [t for t in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")) if t]


def pod_template(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A controller's pod template (a LeaderWorkerSet's: its workers'); {} when it has none."""
    found = pod_templates(obj)
    return found[-1] if found else {}


def identity(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The metadata a gpuctl view of an object carries of it (gpuctl.cli.objects, docs/cli.md): its uid,
    creationTimestamp and labels."""
    m = meta(obj)
    return {
        "uid": m.get("uid", ""),
        "creationTimestamp": m.get("creationTimestamp"),
        "labels": dict(labels(obj)),
    }
