"""The earlier gpuctl's client in a team namespace queues through Kueue: a MutatingAdmissionPolicy.

The earlier client labels its Jobs, Deployments and StatefulSets (object and pod template) with
`runwhere.ai/priority: high|medium|low` and sets `priorityClassName: gpuctl-<priority>` in the pod template,
but knows nothing of Kueue: it writes no `kueue.x-k8s.io/priority-class`, so the `priority` rule (webhook
and ValidatingAdmissionPolicy) refuses its work in a team namespace, and without the label Kueue would rank
it by the pods' PriorityClass. This policy maps the one to the other, as gpuctl's own builders write them:

- `kueue.x-k8s.io/priority-class: gpuctl-<priority>` on the object and on its pod template, where
  `runwhere.ai/priority` says a valid priority (object first, as the `priority` rule reads it; object and
  template agreeing) and no Kueue class is set. Kueue reads the object's label for Jobs and StatefulSets
  (its StatefulSet pod reconciler copies it to the pods), its webhook copies a Deployment's to the pod
  template, and a Pod's or bare ReplicaSet's pods carry their own: the WorkloadPriorityClass label wins
  over the pods' PriorityClass in Kueue (jobframework.ExtractPriority);
- `priorityClassName` is removed from the pod template when it is that same gpuctl class: the pods then
  carry no PriorityClass at all, so kube-scheduler never preempts for them, whatever state the cluster's
  PriorityClasses are in (the earlier client creates them with PreemptLowerPriority where it may). A Pod's
  own priorityClassName is left: the Priority admission plugin has resolved it before any mutating policy
  runs; the `priority-class` rule allows only the matching gpuctl class there, and gpuctl keeps those
  classes at preemptionPolicy Never (gpuctl.service.priority_classes).

On UPDATE only what the policy added at creation is restored (an earlier client's `apply` of a compute
Deployment replaces it, dropping the label): an object created before the policy, without the label, is
left as it is (Kueue refuses a WorkloadPriorityClass added to a running workload, and a Job's template is
immutable). Scope and identity skips as the topology policy (admission/policies/topology.py): team namespaces,
not Kueue's requests, not pods their controller makes.

    python -m admission.policies.earlier_client > manifests/admission/earlier-client.yaml

MutatingAdmissionPolicy is GA (on by default) from Kubernetes 1.36; the chart installs it there
(`earlierClientPolicy.enabled`). Without it the `priority` rule's refusal names the missing label.
"""

from __future__ import annotations

import sys
from typing import Final

from admission.policies.cel import cel_list, q
from admission.policies.skeleton import (
    mutating_template_and_pod,
    render,
    team_match_conditions,
)
from gpuctl.constants import PRIORITY_CLASS, Labels, Priority

TEMPLATES: Final = "gpuctl-earlier-client-templates"
PODS: Final = "gpuctl-earlier-client-pods"
_PRIORITIES: Final = cel_list(p.value for p in Priority)
_CLASS_OF: Final = "{" + ", ".join(f"{q(p.value)}: {q(PRIORITY_CLASS[p])}" for p in Priority) + "}"
_PK: Final = q(Labels.PRIORITY)
_CK: Final = q(Labels.KUEUE_PRIORITY)
_OBJ: Final = "(has(object.metadata.labels) ? object.metadata.labels : {})"
_TMPL: Final = (
    "(has(object.spec.template.metadata) && has(object.spec.template.metadata.labels) ? "
    "object.spec.template.metadata.labels : {})"
)
_OLD: Final = "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})"


def _said(pod: bool) -> str:
    """CEL: the runwhere.ai/priority the object says (its own label first, as the `priority` rule reads)."""
    if pod:
        return f"({_PK} in {_OBJ} ? {_OBJ}[{_PK}] : '')"
    return f"({_PK} in {_OBJ} ? {_OBJ}[{_PK}] : ({_PK} in {_TMPL} ? {_TMPL}[{_PK}] : ''))"


def _cls(pod: bool) -> str:
    """CEL: the gpuctl WorkloadPriorityClass of that priority, '' for none (matchConditions cannot read
    variables, so both are written out where needed)."""
    said = _said(pod)
    return f"({said} in {_PRIORITIES} ? {_CLASS_OF}[{said}] : '')"


def _variables(pod: bool) -> list[dict]:
    return [{"name": "cls", "expression": _cls(pod)}]


def _conditions(pod: bool) -> list[dict]:
    conds = [
        *team_match_conditions(),
        {"name": "gpuctl-priority", "expression": f"{_cls(pod)} != ''"},
        {"name": "no-kueue-class", "expression": f"!({_CK} in {_OBJ})"},
    ]
    if pod:
        return conds
    return [
        *conds,
        {
            "name": "template-agrees",
            "expression": (
                f"(!({_PK} in {_TMPL}) || {_TMPL}[{_PK}] == {_said(pod)}) &&\n"
                f"(!({_CK} in {_TMPL}) || {_TMPL}[{_CK}] == {_cls(pod)})"
            ),
        },
        {
            # UPDATE: restore what this policy added at creation (a replace that dropped it), nothing else.
            "name": "created-with-it",
            "expression": (
                f"request.operation == 'CREATE' ||\n({_CK} in {_OLD} && {_OLD}[{_CK}] == {_cls(pod)})"
            ),
        },
    ]


def _mutations(pod: bool) -> list[dict]:
    label = f"{{{_CK}: variables.cls}}"
    if pod:
        apply = f"Object{{metadata: Object.metadata{{labels: {label}}}}}"
        return [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply}}]
    apply = (
        f"Object{{metadata: Object.metadata{{labels: {label}}}, spec: Object.spec{{template: "
        f"Object.spec.template{{metadata: Object.spec.template.metadata{{labels: {label}}}}}}}}}"
    )
    spec, old = "object.spec.template.spec", "oldObject.spec.template.spec"
    strip = (
        f"has({spec}.priorityClassName) && {spec}.priorityClassName == variables.cls &&\n"
        f"(request.operation == 'CREATE' || !has({old}.priorityClassName)) ?\n"
        "[JSONPatch{op: 'remove', path: '/spec/template/spec/priorityClassName'}] : []"
    )
    return [
        {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply}},
        {"patchType": "JSONPatch", "jsonPatch": {"expression": strip}},
    ]


def policies() -> list[dict]:
    """The two MutatingAdmissionPolicies (pod templates, pods) and their bindings."""
    return mutating_template_and_pod(TEMPLATES, PODS, _conditions, _mutations, _variables)


HEADER: Final = """\
# GENERATED by `python -m admission.policies.earlier_client > manifests/admission/earlier-client.yaml`
# (admission/policies/earlier_client.py; tests/unit/test_admission_earlier.py fails when this file and the
# generator disagree). Do not edit by hand.
#
# The earlier gpuctl's client in a team namespace: its Jobs, Deployments and StatefulSets say
# runwhere.ai/priority but no kueue.x-k8s.io/priority-class. These MutatingAdmissionPolicies add the matching
# gpuctl WorkloadPriorityClass label (object and pod template; Pods: the object) and remove the pod
# template's priorityClassName gpuctl-<priority>, so Kueue orders the work and kube-scheduler never
# preempts for it. Kubernetes >= 1.36 (GA); without it the `priority` rule refuses such work, naming the
# label. docs/admission.md.
"""


def render_manifest() -> str:
    """manifests/admission/earlier-client.yaml."""
    return render(HEADER, policies())


if __name__ == "__main__":
    sys.stdout.write(render_manifest())
