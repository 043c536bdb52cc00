"""`kueue-gate`: only Kueue starts queued work. On an UPDATE (Kueue's own requests never reach the rules),
nobody else un-suspends a queued Job or JobSet (`spec.suspend` true -> false) or removes Kueue's scheduling
gates from a pod: until Kueue re-suspends, its pods would run uncounted. A Job an object Kueue queues
controls (a JobSet's: no queue label of its own) is un-suspended only by that object's controller. Judged on
the change itself: what the old object "already had" excuses nothing. Its CEL (the team policy's
`kueueGate`, judged on what the UPDATE changes) is below; one fix for the policy (FIX)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.identities import JOB_MAKERS, KUEUE_OWNER_KINDS
from admission.policies.cel import TeamCel, cel_list, q
from admission.rule_names import KUEUE_GATE
from admission.validators.owner_claim import owner_kind
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import Labels
from gpuctl.domain.shape import item, list_at

__all__ = ["CEL", "FIX", "KUEUE_GATES", "check_kueue_gate"]

# The scheduling gates Kueue puts on the pods it holds (pkg/controller/jobs/pod/constants SchedulingGateName;
# apis/kueue/v1beta2 TopologySchedulingGate, ElasticJobSchedulingGate): only Kueue lifts them.
KUEUE_GATES: Final = frozenset(
    {"kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology", "kueue.x-k8s.io/elastic-job"}
)
FIX: Final = (
    "leave spec.suspend and Kueue's scheduling gates to Kueue: it starts the work when the team's quota has "
    "room (`gpuctl describe job` says why it waits)"
)


def check_kueue_gate(w: Work, old: Work, queue: str, owner: str = "") -> list[Violation]:
    """kueue-gate, on an UPDATE (Kueue's own requests never reach the rules): a queued Job or JobSet
    un-suspended, or Kueue's scheduling gates lifted from a pod, by anyone else; a Job that `owner` (`Kind
    name`, a kind Kueue queues: a JobSet's Job carries no queue label) controls, un-suspended by anyone but
    that owner's controller (whose requests never reach the rules either: admission.rules._trusted)."""
    if w.kind in ("Job", "JobSet"):
        spec, old_spec = w.obj_spec, old.obj_spec
        if old_spec.get("suspend") is not True or spec.get("suspend") is True:
            return []
        if not queue and owner and w.kind == "Job":
            kind = owner.split(" ", 1)[0]
            return [
                Violation(
                    KUEUE_GATE,
                    f"the update un-suspends a Job of {owner}, which Kueue queues: its pods would run "
                    f"before Kueue admits the {kind}, outside the team's quota, until its controller "
                    "suspends it again",
                    f"leave spec.suspend to Kueue and the {kind} controller: Kueue un-suspends the {kind} "
                    "when the team's quota has room, and its controller then starts its Jobs",
                    f"{KUEUE_GATE}: unsuspend",
                )
            ]
        if queue:
            return [
                Violation(
                    KUEUE_GATE,
                    f"the update un-suspends a {w.kind} queued in LocalQueue {queue}: its pods would run "
                    f"before Kueue admits them, outside the team's quota, until Kueue suspends it again",
                    f"leave spec.suspend to Kueue: it un-suspends the {w.kind} when the team's quota has "
                    "room (`gpuctl describe job` or `kueuectl` say why it waits)",
                    f"{KUEUE_GATE}: unsuspend",
                )
            ]
        return []
    if w.kind != "Pod":
        return []
    lifted = _gates(old.spec, "request.oldObject.spec") - _gates(w.spec, "request.object.spec")
    if not lifted:
        return []
    return [
        Violation(
            KUEUE_GATE,
            f"the update removes Kueue's scheduling gate {', '.join(sorted(lifted))}: the pod would run "
            f"before Kueue admits it, outside the team's quota",
            "leave spec.schedulingGates to Kueue: it lifts its gates when the team's quota has room",
            f"{KUEUE_GATE}: ungate {','.join(sorted(lifted))}",
        )
    ]


def _gates(spec: Mapping[str, Any], where: str) -> frozenset[str]:
    if spec.get("schedulingGates") is None:
        return frozenset()
    names = (
        item(g, f"{where}.schedulingGates[{i}]").get("name")
        for i, g in enumerate(list_at(spec, "schedulingGates", where))
    )
    return frozenset(n for n in names if n in KUEUE_GATES)


def cel_change() -> tuple[str, str]:
    """`kueueGate`, on UPDATE: a queued Job un-suspended (or a Job of an owner Kueue queues, by anyone but
    that owner's controller), or Kueue's scheduling gates lifted from a pod."""
    qk = q(Labels.KUEUE_QUEUE)
    unsuspends = (
        "request.kind.kind == 'Job' && has(oldObject.spec.suspend) && oldObject.spec.suspend &&\n"
        "!(has(object.spec.suspend) && object.spec.suspend)"
    )
    makers = "{" + ", ".join(f"{q(f'{g}/{k}')}: {q(u)}" for (g, k), u in JOB_MAKERS.items()) + "}"
    gk = owner_kind("r")
    kinds = cel_list(sorted(f"{g}/{k}" for g, k in KUEUE_OWNER_KINDS))
    queue = (
        f"({qk} in variables.labels ? variables.labels[{qk}] : {qk} in variables.oldLabels ? "
        f"variables.oldLabels[{qk}] : {qk} in variables.annotations ? variables.annotations[{qk}] : '')"
    )
    gates = cel_list(sorted(KUEUE_GATES))
    return (
        "kueueGate",
        "request.operation != 'UPDATE' ? [] :\n"
        f"({unsuspends} && {queue} != '' ?\n"
        f"['the update un-suspends a Job queued in LocalQueue ' + {queue}] : []) +\n"
        f"({unsuspends} && {queue} == '' && has(object.metadata.ownerReferences) ?\n"
        f"object.metadata.ownerReferences.filter(r, has(r.controller) && r.controller && {gk} in {kinds} &&\n"
        f"!({gk} in {makers} && {makers}[{gk}] == request.userInfo.username))\n"
        ".map(r, 'the update un-suspends a Job of ' + r.kind + ' ' + r.name + ', which Kueue queues') :\n"
        "[]) +\n"
        "(request.kind.kind == 'Pod' && has(oldObject.spec.schedulingGates) ?\n"
        f"oldObject.spec.schedulingGates.filter(g, g.name in {gates} &&\n"
        "!(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(n, n.name == g.name)))\n"
        ".map(g, 'the update removes Kueue\\'s scheduling gate ' + g.name) : [])",
    )


CEL: Final = TeamCel(change=cel_change)
