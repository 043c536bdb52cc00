"""`set-aside-toleration`: in a team namespace only a multi-node job may tolerate gpuctl's set-aside taint.

`gpuctl serve --defrag` sets whole nodes aside for the oldest waiting multi-node job of a pool with the
NoSchedule taint runwhere.ai/set-aside (docs/distributed.md, "No starvation"); gangs tolerate it (gpuctl's
builder, and the topology MutatingAdmissionPolicy for a raw Indexed Job). Any other pod that tolerated it
(that key, or every key: `operator: Exists` without a key) would let its tenant take the nodes held for
another team's gang. Stateless: the ValidatingAdmissionPolicy (admission/policies/team.py) holds it too.
"""

from __future__ import annotations

from typing import Final

from admission.rule_names import SET_ASIDE_TOLERATION
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import SET_ASIDE_TAINT_KEY
from gpuctl.domain.gang import gang_nodes, tolerates_set_aside

__all__ = ["SET_ASIDE_FIX", "check_set_aside_toleration"]

SET_ASIDE_FIX: Final = (
    "remove that toleration (and any `operator: Exists` without a key: list the taints it tolerates by key); "
    "multi-node jobs (an Indexed Job with parallelism and completions of 2 or more) get it from gpuctl"
)


def check_set_aside_toleration(w: Work) -> list[Violation]:
    if not tolerates_set_aside(w.spec) or (w.kind == "Job" and gang_nodes({"spec": w.obj_spec}) > 1):
        return []
    return [
        Violation(
            SET_ASIDE_TOLERATION,
            f"{w.spec_path}.tolerations tolerates {SET_ASIDE_TAINT_KEY}, the taint of nodes set aside for "
            "the oldest waiting multi-node job: only multi-node jobs may run there",
            SET_ASIDE_FIX,
            SET_ASIDE_TOLERATION,
        )
    ]
