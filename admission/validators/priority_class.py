"""`priority-class`: in a team namespace neither Kueue's order nor kube-scheduler's preemption can be jumped.

A pod's (template's) `priorityClassName` is empty or the gpuctl class of its `runwhere.ai/priority` (those
have preemptionPolicy Never, gpuctl.service.priority_classes); `kueue.x-k8s.io/priority-class` is a gpuctl
WorkloadPriorityClass (or `default`, the name Kueue's defaulting writes). docs/admission.md, "Which
PriorityClasses a tenant may use". Stateless: its CEL (`cel_variables`, the team policy's `priorityClass`)
is below, on the same table.
"""

from __future__ import annotations

from typing import Final

from admission.policies.cel import POD_SPEC_PATH, TeamCel, cel_list, old_skip, pod_spec, q, var, var_name
from admission.rule_names import PRIORITY_CLASS_RULE
from admission.validators.labels import CLASS_PREFIX, PRIORITY_CLASSES, PRIORITY_VALUES, class_of
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS, PRIORITY_CLASS, Labels, Priority
from gpuctl.domain.shape import str_at

__all__ = ["ALLOWED_WORKLOAD_CLASSES", "CEL", "FIX", "check_priority_class"]

# WorkloadPriorityClasses a team namespace may name: gpuctl's, and the one Kueue's defaulting writes.
ALLOWED_WORKLOAD_CLASSES: Final = frozenset({*PRIORITY_CLASS.values(), KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS})
FIX: Final = (
    f"remove priorityClassName (or use the gpuctl class of {Labels.PRIORITY}) and use "
    f"{Labels.KUEUE_PRIORITY} {', '.join(sorted(PRIORITY_CLASSES))} only: in a team namespace Kueue alone "
    "orders and preempts work"
)


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


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`priorityClass`: the pod spec's priorityClassName and the WorkloadPriorityClass labels."""
    spec = pod_spec(root)
    pk, ck = q(Labels.PRIORITY), q(Labels.KUEUE_PRIORITY)
    labels, tmpl = var(pre, "labels"), var(pre, "tmplLabels")
    said = f"({pk} in {labels} ? {labels}[{pk}] : ({pk} in {tmpl} ? {tmpl}[{pk}] : ''))"
    want = f"({said} in {cel_list(PRIORITY_VALUES)} ? {class_of()}[{said}] : '')"
    wpc = " +\n".join(
        f"({ck} in {m} && {m}[{ck}] != '' && !({m}[{ck}] in {cel_list(sorted(ALLOWED_WORKLOAD_CLASSES))}) && "
        f"!{m}[{ck}].startsWith({q(CLASS_PREFIX)}) ? "
        f"['{place}[{Labels.KUEUE_PRIORITY}] is \"' + {m}[{ck}] + "
        "'\", not a gpuctl WorkloadPriorityClass'] : [])"
        for place, m in (("metadata.labels", labels), ("spec.template.metadata.labels", tmpl))
    )
    findings = (
        f"{old_skip(root)}(has({spec}.priorityClassName) && {spec}.priorityClassName != '' &&\n"
        f"{spec}.priorityClassName != {want} ?\n"
        f"[{POD_SPEC_PATH} + '.priorityClassName is \"' + {spec}.priorityClassName + '\"'] : []) +\n{wpc}"
    )
    return [(var_name(pre, "priorityClass"), findings)]


CEL: Final = TeamCel("priorityClass", cel_variables)
