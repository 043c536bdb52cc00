"""`set-aside-toleration`: in a team namespace only a Job may tolerate gpuctl's set-aside taints, and only
those of its own set-aside.

`gpuctl serve --defrag` sets whole nodes aside for the oldest waiting multi-node job of a pool with two
NoSchedule taints naming that one job: runwhere.ai/set-aside=<its namespace> and
runwhere.ai/set-aside-job=<its name> (docs/distributed.md, "No starvation"; gpuctl.domain.gang.
set_aside_taints). A gang tolerates exactly its own pair (gpuctl's builder, and the topology
MutatingAdmissionPolicy for a raw Indexed Job). Any other pod that tolerated either key (whatever its
value or operator, or every key: `operator: Exists` without a key), and a gang tolerating another value or
`Exists` (every gang once tolerated every set-aside, and one team's 2 x 1-GPU gang took the nodes held
for another team's 2 x 8 gang), would let its tenant take nodes held for someone else's gang. Stateless:
the ValidatingAdmissionPolicy holds it too (`cel_variables` below, the team policy's `setAside`). The
object's own name is its Job's: under `generateName` it is not known at admission, so such a job may
tolerate no set-aside.
Since serve also sets a node aside for a one-pod Job near the start bound it was shown (docs/queueing.md,
"A bound gpuctl keeps"), so every Job may tolerate its own pair (gpuctl's training builder gives it).
"""

from __future__ import annotations

from typing import Final

from admission.policies.cel import POD_SPEC_PATH, TeamCel, cel_list, old_skip, pod_spec, q, var_name
from admission.rule_names import SET_ASIDE_TOLERATION
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import SET_ASIDE_JOB_TAINT_KEY, SET_ASIDE_TAINT_KEY, SET_ASIDE_TAINT_KEYS
from gpuctl.domain.gang import foreign_set_aside_tolerations, set_aside_tolerations_of

__all__ = ["CEL", "FIX", "check_set_aside_toleration"]

FIX: Final = (
    "remove that toleration (and any `operator: Exists` without a key: list the taints it tolerates by key); "
    f"a Job gets the tolerations of its own set-aside from gpuctl: {SET_ASIDE_TAINT_KEY}=<its namespace> and "
    f"{SET_ASIDE_JOB_TAINT_KEY}=<its name>, operator Equal"
)
_TEXT: Final = (
    f".tolerations tolerates a taint of nodes set aside for a job ({SET_ASIDE_TAINT_KEY}, "
    f"{SET_ASIDE_JOB_TAINT_KEY}) that is not this one: only that job may run there"
)


def check_set_aside_toleration(w: Work, ns: str) -> list[Violation]:
    if w.kind == "Job":
        found = foreign_set_aside_tolerations(w.spec, ns, w.name)
    else:
        found = set_aside_tolerations_of(w.spec)
    if not found:
        return []
    return [Violation(SET_ASIDE_TOLERATION, f"{w.spec_path}{_TEXT}", FIX, SET_ASIDE_TOLERATION)]


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`setAside`: a toleration of a set-aside taint (either key, or every key) for NoSchedule
    (gpuctl.domain.gang.set_aside_tolerations_of) that is not the object's own set-aside on a Job
    (gpuctl.domain.gang.foreign_set_aside_tolerations: operator Equal, value its namespace or its name)."""
    spec = pod_spec(root)
    tolerates = (
        "(!has(t.effect) || t.effect == '' || t.effect == 'NoSchedule') && "
        f"((has(t.key) && t.key in {cel_list(SET_ASIDE_TAINT_KEYS)}) || "
        "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
    value = "(has(t.value) ? t.value : '')"
    name = f"(has({root}.metadata.name) ? {root}.metadata.name : '')"
    own = (
        "has(t.key) && (!has(t.operator) || t.operator == '' || t.operator == 'Equal') && ("
        f"(t.key == {q(SET_ASIDE_TAINT_KEY)} && {value} == request.namespace) || "
        f"(t.key == {q(SET_ASIDE_JOB_TAINT_KEY)} && {name} != '' && {value} == {name}))"
    )
    return [
        (
            var_name(pre, "setAside"),
            f"{old_skip(root)}!has({spec}.tolerations) ? [] :\n"
            f"{spec}.tolerations.exists(t, {tolerates} && !(request.kind.kind == 'Job' && {own})) ?\n"
            f"[{POD_SPEC_PATH} + {q(_TEXT)}] : []",
        )
    ]


CEL: Final = TeamCel("setAside", cel_variables)
