"""gpuctl's Kubernetes PriorityClasses keep preemptionPolicy Never: a ValidatingAdmissionPolicy
(`gpuctl-priority-classes`, cluster-scoped). Shipped in manifests/admission/policy.yaml
(admission.policies.team.render_manifest); docs/admission.md, "Which PriorityClasses a tenant may use"."""

from __future__ import annotations

from typing import Final

from admission.policies.cel import cel_list, q
from admission.policies.skeleton import labels, validating_policy
from admission.validators.labels import PRIORITY_CLASSES
from gpuctl.constants import PRIORITY_CLASS_PREEMPTION

__all__ = ["NAME", "policy"]

NAME: Final = "gpuctl-priority-classes"


def policy() -> list[dict]:
    """gpuctl's Kubernetes PriorityClasses (the earlier gpuctl's names) keep preemptionPolicy Never, whoever
    writes them: a pod naming one never preempts through kube-scheduler (the earlier client re-creates
    them with PreemptLowerPriority on every `create` when it may)."""
    names = cel_list(sorted(PRIORITY_CLASSES))
    return validating_policy(
        NAME,
        labels(),
        [
            {
                "apiGroups": ["scheduling.k8s.io"],
                "apiVersions": ["v1"],
                "resources": ["priorityclasses"],
                "operations": ["CREATE", "UPDATE"],
            }
        ],
        [{"name": "gpuctl-class", "expression": f"object.metadata.name in {names}"}],
        None,
        [
            {
                "expression": (
                    "has(object.preemptionPolicy) && "
                    f"object.preemptionPolicy == {q(PRIORITY_CLASS_PREEMPTION)}"
                ),
                "messageExpression": (
                    "'gpuctl policy: PriorityClass ' + object.metadata.name + ' must have "
                    f"preemptionPolicy {PRIORITY_CLASS_PREEMPTION}: pods naming it must never preempt "
                    "through kube-scheduler (Kueue alone decides who runs on pool GPUs). Fix: leave "
                    "gpuctl\\'s PriorityClasses to `gpuctl adopt`'"
                ),
                "reason": "Forbidden",
            }
        ],
        None,
    )
