"""`priority-class`: in a team namespace neither Kueue's order nor kube-scheduler's preemption can be jumped.

A pod's (template's) `priorityClassName` is empty or the gpuctl class of its `runwhere.ai/priority` (those
have preemptionPolicy Never, gpuctl.service.priority_classes); `kueue.x-k8s.io/priority-class` is a gpuctl
WorkloadPriorityClass (or `default`, the name Kueue's defaulting writes). docs/admission.md, "Which
PriorityClasses a tenant may use". Stateless: admission/policies/team.py carries the same table to the API
server.
"""

from __future__ import annotations

from typing import Final

from admission.rule_names import PRIORITY_CLASS_RULE
from admission.validators.labels import CLASS_PREFIX, PRIORITY_CLASSES, PRIORITY_VALUES
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS, PRIORITY_CLASS, Labels, Priority
from gpuctl.domain.shape import str_at

__all__ = ["ALLOWED_WORKLOAD_CLASSES", "check_priority_class"]

# WorkloadPriorityClasses a team namespace may name: gpuctl's, and the one Kueue's defaulting writes.
ALLOWED_WORKLOAD_CLASSES: Final = frozenset({*PRIORITY_CLASS.values(), KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS})


def check_priority_class(w: Work) -> list[Violation]:
    """priority-class: a pod's priorityClassName is empty or the gpuctl class of its runwhere.ai/priority
    (with preemptionPolicy Never, gpuctl.service.priority_classes); the WorkloadPriorityClass is gpuctl's."""
    spec, labels, tl = w.spec, w.labels, w.tmpl_labels
    out: list[Violation] = []
    pcn = spec.get("priorityClassName")
    if pcn is not None and type(pcn) is not str:
        pcn = str_at(spec, "priorityClassName", w.spec_path)
    if pcn:
        said = labels.get(Labels.PRIORITY)
        if said is None:
            said = tl.get(Labels.PRIORITY)
        want = PRIORITY_CLASS[Priority(said)] if said in PRIORITY_VALUES else None
        if pcn != want:
            where = f"{w.spec_path}.priorityClassName"
            if pcn in PRIORITY_CLASSES:
                now = f'"{said}"' if said is not None else "not set"
                msg = f'{where} is "{pcn}" but {Labels.PRIORITY} is {now}'
                fix = f"remove {where} or set {Labels.PRIORITY}: {pcn.removeprefix(CLASS_PREFIX)}"
            else:
                msg = (
                    f'{where} is "{pcn}": in a team namespace a pod names no PriorityClass but gpuctl\'s own '
                    f"(kube-scheduler would let it preempt pods Kueue admitted, Kueue would order it by it)"
                )
                fix = (
                    f"remove {where}; choose the priority with {Labels.PRIORITY}: high|medium|low "
                    f"(gpuctl-high|medium|low for Kueue)"
                )
            out.append(Violation(PRIORITY_CLASS_RULE, msg, fix, f"{PRIORITY_CLASS_RULE}: {pcn} for {said}"))
    for where, m in (("metadata.labels", labels), (f"{w.tmpl_path}.metadata.labels", tl)):
        cls = m.get(Labels.KUEUE_PRIORITY)
        # A misspelt gpuctl-* class is the `priority` rule's finding.
        # (An empty label is no class to Kueue: jobframework.WorkloadPriorityClassName.)
        if cls and cls not in ALLOWED_WORKLOAD_CLASSES and not cls.startswith(CLASS_PREFIX):
            out.append(
                Violation(
                    PRIORITY_CLASS_RULE,
                    f'{where}[{Labels.KUEUE_PRIORITY}] is "{cls}", not a gpuctl WorkloadPriorityClass: in a '
                    f"team namespace Kueue orders work by gpuctl's classes only",
                    f"use one of {', '.join(sorted(PRIORITY_CLASSES))} (or set {Labels.PRIORITY}: "
                    f"high|medium|low)",
                    f"{PRIORITY_CLASS_RULE}: workload class {cls}",
                )
            )
    return out
