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
Backfill (docs/queueing.md, "Backfill by maxRuntime"): `gpuctl serve` itself (SERVE_USER) may write
another job's pair on a Job (it grants a waiting Job whose maxRuntime ends before the held job's bound the
right to run on the held node, and takes it back). Each finding names the toleration, so a later UPDATE
(Kueue's, the Job controller's, a tenant's) may keep exactly the tolerations the object already had, never
add or widen one (an `Exists` in place of the granted pair is a new finding).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.policies.cel import POD_SPEC_PATH, TeamCel, cel_list, old_skip, pod_spec, q, var_name
from admission.rule_names import SET_ASIDE_TOLERATION
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import SERVE_USER, SET_ASIDE_JOB_TAINT_KEY, SET_ASIDE_TAINT_KEY, SET_ASIDE_TAINT_KEYS
from gpuctl.domain.gang import foreign_set_aside_tolerations, set_aside_tolerations_of

__all__ = ["CEL", "FIX", "check_set_aside_toleration"]

FIX: Final = (
    "remove that toleration (and any `operator: Exists` without a key: list the taints it tolerates by key); "
    f"a Job gets the tolerations of its own set-aside from gpuctl: {SET_ASIDE_TAINT_KEY}=<its namespace> and "
    f"{SET_ASIDE_JOB_TAINT_KEY}=<its name>, operator Equal"
)
_TEXT: Final = (
    f".tolerations tolerates a taint of nodes set aside for a job ({SET_ASIDE_TAINT_KEY}, "
    f"{SET_ASIDE_JOB_TAINT_KEY}) that is not this one ("
)
_END: Final = "): only that job may run there"
_EVERY: Final = "every taint: operator Exists without a key"


def _named(t: Mapping[str, Any]) -> str:
    """The toleration as a finding names it (its CEL twin: `cel_variables`)."""
    if not t.get("key"):
        return _EVERY
    if t.get("operator") == "Exists":
        return f"{t['key']} with operator Exists"
    return f"{t['key']}={t.get('value') or ''}"


def check_set_aside_toleration(w: Work, ns: str, user: str = "") -> list[Violation]:
    if w.kind == "Job":
        if user == SERVE_USER:  # serve's grant of a held node's pair (backfill), or its withdrawal
            return []
        found = foreign_set_aside_tolerations(w.spec, ns, w.name)
    else:
        found = set_aside_tolerations_of(w.spec)
    return [Violation(SET_ASIDE_TOLERATION, f"{w.spec_path}{_TEXT}{_named(t)}{_END}", FIX) for t in found]


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
    named = (
        f"((!has(t.key) || t.key == '') ? {q(_EVERY)} : "
        "(has(t.operator) && t.operator == 'Exists') ? t.key + ' with operator Exists' : "
        f"t.key + '=' + {value})"
    )
    job = "request.kind.kind == 'Job'"
    return [
        (
            var_name(pre, "setAside"),
            f"{old_skip(root)}!has({spec}.tolerations) || "
            f"({job} && request.userInfo.username == {q(SERVE_USER)}) ? [] :\n"
            f"{spec}.tolerations.filter(t, {tolerates} && !({job} && {own})).map(t,\n"
            f"{POD_SPEC_PATH} + {q(_TEXT)} + {named} + {q(_END)})",
        )
    ]


CEL: Final = TeamCel("setAside", cel_variables)
