"""`termination-grace`: a team pod (or pod template) asks for at most the admin's termination grace.

Kueue stops counting a pod's GPUs once the pod is terminating (a stopped or deleted job, a preempted
Workload), while the pod keeps them until it exits or its grace runs out: a Job with
`terminationGracePeriodSeconds: 7200`, stopped, held its node's GPUs for two hours beyond the team's quota
(issue 43). So `terminationGracePeriodSeconds` is capped at `AdmissionConfig.max_termination_grace` (the
webhook's --max-termination-grace, the chart's maxTerminationGraceSeconds; default
constants.MAX_TERMINATION_GRACE_SECONDS), the bound docs/security.md states, and gpuctl serve's backstop
evicts a terminating pod that still holds uncharged GPUs past it. Python and CEL (the team policy's
`terminationGrace`, the bound compiled in as `variables.maxTerminationGrace`) side by side, one fix.
"""

from __future__ import annotations

from typing import Final

from admission.policies.cel import POD_SPEC_PATH, TeamCel, old_skip, pod_spec, var_name
from admission.rule_names import TERMINATION_GRACE
from admission.verdict import Malformed, Violation
from admission.work import Work

__all__ = ["CEL", "FIELD", "FIX", "check_termination_grace"]

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
