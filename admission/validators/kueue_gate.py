"""`kueue-gate`: only Kueue starts queued work. On an UPDATE (Kueue's own requests never reach the rules),
nobody else un-suspends a queued Job or JobSet (`spec.suspend` true -> false) or removes Kueue's scheduling
gates from a pod: until Kueue re-suspends, its pods would run uncounted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.rule_names import KUEUE_GATE
from admission.verdict import Violation
from admission.work import Work
from gpuctl.domain.shape import item, list_at

__all__ = ["KUEUE_GATES", "check_kueue_gate"]

# The scheduling gates Kueue puts on the pods it holds (pkg/controller/jobs/pod/constants SchedulingGateName;
# apis/kueue/v1beta2 TopologySchedulingGate, ElasticJobSchedulingGate): only Kueue lifts them.
KUEUE_GATES: Final = frozenset(
    {"kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology", "kueue.x-k8s.io/elastic-job"}
)


def check_kueue_gate(w: Work, old: Work, queue: str) -> list[Violation]:
    """kueue-gate, on an UPDATE (Kueue's own requests never reach the rules): a queued Job or JobSet
    un-suspended, or Kueue's scheduling gates lifted from a pod, by anyone else."""
    if w.kind in ("Job", "JobSet"):
        spec, old_spec = w.obj_spec, old.obj_spec
        if queue and old_spec.get("suspend") is True and spec.get("suspend") is not True:
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
