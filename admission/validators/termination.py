"""`termination-grace`: a team pod (or pod template) asks for at most the admin's termination grace;
`delete-grace`: nor does a DELETE of a team pod (`kubectl delete pod --grace-period=N`).

Kueue stops counting a pod's GPUs once the pod is terminating (a stopped or deleted job, a preempted
Workload), while the pod keeps them until it exits or its grace runs out: a Job with
`terminationGracePeriodSeconds: 7200`, stopped, held its node's GPUs for two hours beyond the team's quota
(docs/security.md, "Nothing holds an accelerator Kueue does not charge"). So the grace is capped at
`AdmissionConfig.max_termination_grace` (the webhook's --max-termination-grace, the chart's
maxTerminationGraceSeconds; default constants.MAX_TERMINATION_GRACE_SECONDS), the bound docs/security.md
states, and gpuctl serve's backstop
evicts a terminating pod that still holds uncharged GPUs past it. Python and CEL (the team policy's
`terminationGrace`, the bound compiled in as `variables.maxTerminationGrace`) side by side, one fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.policies.cel import POD_SPEC_PATH, DeleteCel, TeamCel, old_skip, pod_spec, q, var_name
from admission.rule_names import DELETE_GRACE, TERMINATION_GRACE
from admission.verdict import Malformed, Violation
from admission.work import Work

__all__ = ["CEL", "DELETE_CEL", "DELETE_FIX", "FIELD", "FIX", "check_delete_grace", "check_termination_grace"]

FIELD: Final = "terminationGracePeriodSeconds"


FIX: Final = (
    f"lower {FIELD} to the bound named (a job that checkpoints on SIGTERM must do so within it), or ask "
    "an admin to raise the bound (--max-termination-grace on the webhook, maxTerminationGraceSeconds in the "
    "chart)"
)


def check_termination_grace(w: Work, limit: int) -> list[Violation]:
    asked = w.spec.get(FIELD)
    if asked is None:
        return []
    if type(asked) is not int:
        raise Malformed(f"{w.spec_path}.{FIELD} must be an integer")
    if asked <= limit:
        return []
    return [
        Violation(
            TERMINATION_GRACE,
            f"{w.spec_path}.{FIELD} is {asked}: once stopped or deleted, its pods would keep their GPUs for "
            f"up to {asked} s after Kueue stops counting them (at most {limit} s here)",
            FIX,
            f"{TERMINATION_GRACE}={asked}",
        )
    ]


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`terminationGrace`: the pod spec's terminationGracePeriodSeconds above the compiled bound
    (`variables.maxTerminationGrace`)."""
    spec = pod_spec(root)
    return [
        (
            var_name(pre, "terminationGrace"),
            f"{old_skip(root)}has({spec}.{FIELD}) && {spec}.{FIELD} > variables.maxTerminationGrace ?\n"
            f"[{POD_SPEC_PATH} + '.{FIELD} is ' + string({spec}.{FIELD}) + ' (at most ' + "
            "string(variables.maxTerminationGrace) + ' s here)'] : []",
        )
    ]


CEL: Final = TeamCel("terminationGrace", cel_variables)


# ---------------------------------------------------------------------------------------------------------
# A Pod's DELETE may name its own grace (`kubectl delete pod --grace-period=7200`): the API server then uses
# it instead of the pod's, so the same bound holds there (the webhook's pod-deletes entry, the delete policy).


DELETE_FIX: Final = (
    "delete it with a shorter --grace-period (or none: the pod's own, within the bound), or ask an admin to "
    "raise the bound (--max-termination-grace on the webhook)"
)


def check_delete_grace(request: Mapping[str, Any], gk: tuple[str, str], limit: int) -> list[Violation]:
    if gk != ("", "Pod"):
        return []
    options = request.get("options")
    asked = options.get("gracePeriodSeconds") if type(options) is dict else None
    if type(asked) is not int or asked <= limit:
        return []
    return [
        Violation(
            DELETE_GRACE,
            f"deleting it with gracePeriodSeconds {asked} would let it keep its GPUs for up to {asked} s "
            f"after Kueue stops counting them (at most {limit} s here)",
            DELETE_FIX,
            f"{DELETE_GRACE}={asked}",
        )
    ]


def _delete_variables() -> list[dict]:
    return []


def _delete_validation() -> dict:
    grace = "request.options.gracePeriodSeconds"
    return {
        "expression": f"!has({grace}) || {grace} <= variables.maxTerminationGrace",
        "messageExpression": (
            "'gpuctl policy: Pod ' + request.namespace + '/' + request.name + ' breaks "
            f"[{DELETE_GRACE}]: deleting it with gracePeriodSeconds ' + string({grace}) + ' (at most ' + "
            f"string(variables.maxTerminationGrace) + ' s here)' + {q('. Fix: ' + DELETE_FIX)}"
        ),
        "reason": "Forbidden",
    }


DELETE_CEL: Final = DeleteCel((("", "Pod", "v1"),), _delete_variables, _delete_validation)
