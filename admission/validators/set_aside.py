"""`set-aside-toleration`: in a team namespace only a multi-node job may tolerate gpuctl's set-aside taint.

`gpuctl serve --defrag` sets whole nodes aside for the oldest waiting multi-node job of a pool with the
NoSchedule taint runwhere.ai/set-aside (docs/distributed.md, "No starvation"); gangs tolerate it (gpuctl's
builder, and the topology MutatingAdmissionPolicy for a raw Indexed Job). Any other pod that tolerated it
(that key, or every key: `operator: Exists` without a key) would let its tenant take the nodes held for
another team's gang. Stateless: the ValidatingAdmissionPolicy holds it too (`cel_variables` below, the team
policy's `setAside`; a gang is admission.policies.cel.gang, the CEL twin of gpuctl.domain.gang.gang_nodes).
"""

from __future__ import annotations

from typing import Final

from admission.policies.cel import POD_SPEC_PATH, TeamCel, gang, old_skip, pod_spec, q, var_name
from admission.rule_names import SET_ASIDE_TOLERATION
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import SET_ASIDE_TAINT_KEY
from gpuctl.domain.gang import gang_nodes, tolerates_set_aside

__all__ = ["CEL", "FIX", "check_set_aside_toleration"]

FIX: Final = (
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
            FIX,
            SET_ASIDE_TOLERATION,
        )
    ]


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`setAside`: a toleration of the set-aside taint (its key, or every key) for NoSchedule
    (gpuctl.domain.gang.tolerates_set_aside), on anything but a gang."""
    spec = pod_spec(root)
    tolerates = (
        "(!has(t.effect) || t.effect == '' || t.effect == 'NoSchedule') && "
        f"((has(t.key) && t.key == {q(SET_ASIDE_TAINT_KEY)}) || "
        "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
    return [
        (
            var_name(pre, "setAside"),
            f"{old_skip(root)}{gang(root)} || !has({spec}.tolerations) ? [] :\n"
            f"{spec}.tolerations.exists(t, {tolerates}) ?\n"
            f"[{POD_SPEC_PATH} + '.tolerations tolerates {SET_ASIDE_TAINT_KEY}, the taint of nodes set aside "
            "for a multi-node job'] : []",
        )
    ]


CEL: Final = TeamCel("setAside", cel_variables)
