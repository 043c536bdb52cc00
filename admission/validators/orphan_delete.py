"""`orphan-delete`: no orphaning DELETE of a Job Kueue counts -- queued itself (a queue label), or made by an
object Kueue queues (its controller a KUEUE_OWNER_KINDS kind: a JobSet's Jobs carry no queue label) -- nor of
a queued JobSet: its pods would run on while Kueue stops counting them.

The API server hands the request's DeleteOptions to admission as `request.options` before it applies its own
default, so the rule repeats the store's decision (k8s.io/apiserver registry/generic/registry/store.go,
shouldOrphanDependents): an explicit `orphanDependents`, else an explicit `propagationPolicy`, else the
object's `orphan`/`foregroundDeletion` finalizer, else the kind's default, which is orphaning for `batch/v1`
Jobs (pkg/registry/batch/job/strategy.go, DefaultGarbageCollectionPolicy: "for backwards compatibility").
Measured on Kueue v0.19.2: only Jobs need it (docs/admission.md). Its CEL (`cel_variables`, `cel_validation`:
the `gpuctl-admission-delete` policy, admission.policies.deletes) is below; one fix (FIX).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.envelope import controller_ref, ref_kind
from admission.identities import KUEUE_OWNER_KINDS
from admission.policies.cel import DeleteCel, cel_list, q
from admission.rule_names import ORPHAN_DELETE
from admission.state import ClusterState
from admission.validators.owner_claim import owner_kind
from admission.verdict import Violation
from gpuctl.constants import Labels
from gpuctl.domain.shape import EMPTY, obj_at, strmap_at

__all__ = [
    "CEL",
    "FIX",
    "FOREGROUND_FINALIZER",
    "ORPHAN_BY_DEFAULT",
    "ORPHAN_FINALIZER",
    "ORPHAN_KINDS",
    "ORPHAN_VERSIONS",
    "cel_validation",
    "cel_variables",
    "check_orphan_delete",
    "queued_owner",
]

# Kinds whose pods Kueue counts through the object's own Workload only: deleting it with orphaning finishes
# the Workload while the pods run on. Measured on Kueue v0.19.2: a Deployment's or a bare ReplicaSet's pods
# are each their own Workload (Kueue's pod integration) and stay counted, and the Workload of a
# StatefulSet's pod group is owned by its pods too and stays admitted, so orphaning those escapes nothing
# (the Deployment controller's next ReplicaSet even adopts the orphans back).
# A JobSet's Jobs run on as orphans too, and Kueue's Workload of the JobSet goes with it.
ORPHAN_KINDS: Final = frozenset({("batch", "Job"), ("jobset.x-k8s.io", "JobSet")})
ORPHAN_VERSIONS: Final = {("batch", "Job"): "v1", ("jobset.x-k8s.io", "JobSet"): "v1alpha2"}
# The kind whose API server default for a DELETE without any policy is orphaning.
ORPHAN_BY_DEFAULT: Final = frozenset({("batch", "Job", "v1")})
ORPHAN_FINALIZER: Final = "orphan"
FOREGROUND_FINALIZER: Final = "foregroundDeletion"
FIX: Final = (
    "delete with propagationPolicy Background or Foreground (kubectl's default, --cascade=background; gpuctl "
    "delete); to keep a pod, copy it out first"
)


def orphaning(request: Mapping[str, Any], gk: tuple[str, str], version: str, old: Mapping[str, Any]) -> str:
    """How a DELETE orphans the object's dependents ("" when it does not)."""
    options = request.get("options")
    options = options if type(options) is dict else EMPTY
    od = options.get("orphanDependents")
    if od is not None:
        return "orphanDependents: true" if od is True else ""
    pp = options.get("propagationPolicy")
    if pp is not None:
        return 'propagationPolicy "Orphan"' if pp == "Orphan" else ""
    meta = old.get("metadata")
    finalizers = meta.get("finalizers") if type(meta) is dict else None
    finalizers = finalizers if type(finalizers) is list else ()
    if ORPHAN_FINALIZER in finalizers:
        return f'no propagationPolicy while the object carries the "{ORPHAN_FINALIZER}" finalizer'
    if FOREGROUND_FINALIZER not in finalizers and (*gk, version) in ORPHAN_BY_DEFAULT:
        return f"no propagationPolicy (for {gk[0]}/{version} {gk[1]}s the API server then orphans the pods)"
    return ""


def check_orphan_delete(
    request: Mapping[str, Any], gk: tuple[str, str], user: str, state: ClusterState, kueue_user: str
) -> list[Violation]:
    """orphan-delete for one DELETE request of kind `gk` by `user` (Kueue's own deletes are never judged)."""
    old = request.get("oldObject")
    if gk not in ORPHAN_KINDS or type(old) is not dict:
        return []
    kind_ref = request.get("kind")
    version = kind_ref.get("version") if type(kind_ref) is dict else None
    how = orphaning(request, gk, version if type(version) is str else "", old)
    if not how:
        return []
    meta = obj_at(old, "metadata", "request.oldObject")
    labels = strmap_at(meta, "labels", "request.oldObject.metadata")
    queue = labels.get(Labels.KUEUE_QUEUE) or strmap_at(
        meta, "annotations", "request.oldObject.metadata"
    ).get(Labels.KUEUE_QUEUE)
    owner = queued_owner(old, "request.oldObject")
    ns = request.get("namespace")
    ns = ns if type(ns) is str else ""
    if not (queue or owner) or state.namespaces.get(ns) is False or user == kueue_user:
        return []
    counted = f"LocalQueue {queue}" if queue else f"{owner}, which Kueue queues, owns it"
    return [
        Violation(
            ORPHAN_DELETE,
            f"deleting it with {how} would leave its pods running while Kueue stops counting them "
            f"({counted})",
            FIX,
            ORPHAN_DELETE,
        )
    ]


def queued_owner(obj: Mapping[str, Any], where: str) -> str:
    """`Kind name` of the object's controller when it is a kind Kueue queues in its own right (a JobSet for
    its Jobs), else ""."""
    meta = obj.get("metadata")
    if type(meta) is not dict or meta.get("ownerReferences") is None:
        return ""
    ref = controller_ref(meta, f"{where}.metadata")
    if ref is None or ref_kind(ref) not in KUEUE_OWNER_KINDS:
        return ""
    return f"{ref_kind(ref)[1]} {ref.get('name')}"


# ---------------------------------------------------------------------------------------------------------
# CEL (the delete policy: `oldObject` and `request.options`; `object` is null on DELETE).


def cel_orphaning() -> str:
    """CEL: how a DELETE orphans the object's dependents, '' when it does not (`orphaning` above)."""
    o = "request.options"
    fins = "(has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : [])"
    default = " || ".join(
        f"(request.kind.group == {q(g)} && request.kind.kind == {q(k)} && request.kind.version == {q(v)})"
        for g, k, v in sorted(ORPHAN_BY_DEFAULT)
    )
    return (
        f"has({o}.orphanDependents) ? ({o}.orphanDependents ? 'orphanDependents: true' : '') :\n"
        f"has({o}.propagationPolicy) ?\n"
        f"({o}.propagationPolicy == 'Orphan' ? 'propagationPolicy Orphan' : '') :\n"
        f"{q(ORPHAN_FINALIZER)} in {fins} ? "
        f"'no propagationPolicy while the object carries the {ORPHAN_FINALIZER} finalizer' :\n"
        f"!({q(FOREGROUND_FINALIZER)} in {fins}) && ({default}) ? "
        "'no propagationPolicy (for batch/v1 Jobs the API server then orphans the pods)' : ''"
    )


def cel_variables() -> list[dict]:
    qk = q(Labels.KUEUE_QUEUE)
    meta = "oldObject.metadata"
    queue = (
        f"has({meta}.labels) && {qk} in {meta}.labels ? {meta}.labels[{qk}] :\n"
        f"has({meta}.annotations) && {qk} in {meta}.annotations ? {meta}.annotations[{qk}] : ''"
    )
    kinds = cel_list(sorted(f"{g}/{k}" for g, k in KUEUE_OWNER_KINDS))
    gk = owner_kind("r")
    owner = (
        f"!has({meta}.ownerReferences) ? '' :\n"
        f"{meta}.ownerReferences.filter(r, has(r.controller) && r.controller && {gk} in {kinds})"
        ".map(r, r.kind + ' ' + r.name).join(', ')"
    )
    return [
        {"name": "orphaning", "expression": cel_orphaning()},
        {"name": "queue", "expression": queue},
        {"name": "owner", "expression": owner},
    ]


def cel_validation() -> dict:
    message = (
        "'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
        "request.name + "
        f"' breaks [{ORPHAN_DELETE}]: deleting it with ' + variables.orphaning + "
        "' would leave its pods running while Kueue stops counting them (' + (variables.queue != '' ? "
        "'LocalQueue ' + variables.queue : variables.owner + ', which Kueue queues, owns it') + "
        f"{q('). Fix: ' + FIX)}"
    )
    return {
        "expression": "variables.orphaning == '' || (variables.queue == '' && variables.owner == '')",
        "messageExpression": message,
        "reason": "Forbidden",
    }


CEL: Final = DeleteCel(
    tuple((g, k, ORPHAN_VERSIONS[(g, k)]) for g, k in sorted(ORPHAN_KINDS)), cel_variables, cel_validation
)
